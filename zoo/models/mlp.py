import math
from typing import Sequence

import jax
from flax import nnx

from zoo.models.layers import Dropout


class MLP(nnx.Module):
    def __init__(self, input_shape, out_features: int, *, hidden: Sequence[int] = (256, 256),
                 activation: str = "relu", dropout: float = 0.0, rngs: nnx.Rngs):
        sizes = [math.prod(input_shape), *hidden]
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.head = nnx.Linear(sizes[-1], out_features, rngs=rngs)
        self.activation = getattr(jax.nn, activation)
        self.dropout = Dropout(dropout)

    def __call__(self, x: jax.Array, *, train: bool = False, rngs: nnx.Rngs | None = None) -> jax.Array:
        x = x.reshape(x.shape[0], -1)  # (B, features)
        for layer in self.layers:
            x = self.dropout(self.activation(layer(x)), deterministic=not train, rngs=rngs)
        return self.head(x)
