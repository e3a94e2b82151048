import jax
from flax import nnx

from zoo.models.layers import Dropout
from zoo.models.pooling import max_pool_2x2


class CNN(nnx.Module):
    """conv-conv-pool-dense for small images (8x8 digits, 28x28 MNIST, 32x32x3 CIFAR-10)."""

    def __init__(self, input_shape, out_features: int, *, channels=(32, 64), dense: int = 128,
                 batch_norm: bool = True, dropout: float = 0.0, rngs: nnx.Rngs):
        if len(input_shape) != 3:
            raise ValueError(f"CNN needs image inputs of shape (height, width, channels), got {tuple(input_shape)}")
        height, width, in_channels = input_shape
        sizes = [in_channels, *channels]
        self.convs = nnx.List([nnx.Conv(a, b, (3, 3), rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.norms = nnx.List([nnx.BatchNorm(c, rngs=rngs) if batch_norm else None for c in channels])
        flat = (height // 2) * (width // 2) * channels[-1]  # one 2x2 pool after the convs
        self.dense = nnx.Linear(flat, dense, rngs=rngs)
        self.head = nnx.Linear(dense, out_features, rngs=rngs)
        self.dropout = Dropout(dropout)

    def __call__(self, x: jax.Array, *, train: bool = False, rngs: nnx.Rngs | None = None) -> jax.Array:
        for conv, norm in zip(self.convs, self.norms):  # (B, H, W, C)
            x = conv(x)
            if norm is not None:
                x = norm(x, use_running_average=not train)
            x = jax.nn.relu(x)
        x = max_pool_2x2(x)  # (B, H/2, W/2, C)
        x = x.reshape(x.shape[0], -1)
        x = self.dropout(jax.nn.relu(self.dense(x)), deterministic=not train, rngs=rngs)
        return self.head(x)
