import math

import jax
from flax import nnx


class Linear(nnx.Module):
    """Linear regression on flattened inputs; softmax regression when the task is classification."""

    def __init__(self, input_shape, out_features: int, *, rngs: nnx.Rngs):
        self.dense = nnx.Linear(math.prod(input_shape), out_features, rngs=rngs)

    def __call__(self, x: jax.Array, *, train: bool = False, rngs: nnx.Rngs | None = None) -> jax.Array:
        return self.dense(x.reshape(x.shape[0], -1))  # (B, features) -> (B, out)
