"""2x2 max pooling whose gradient XLA:CPU computes cheaply."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def max_pool_2x2(x: jax.Array) -> jax.Array:
    """nnx.max_pool(x, (2, 2), strides=(2, 2)) on (B, H, W, C): the same values and the same gradient.

    XLA differentiates a reduce_window max as select_and_scatter, which XLA:CPU expands into an argmax over
    windows of four int32 index arrays the size of the input and a scatter: ~110 ms of the 28x28 CNN's 290 ms
    step at batch 128 (docs/benchmarks.md). Here the pool is a max over a reshape, and its gradient a few
    elementwise passes that route each window's gradient to its first maximum in row-major order, as
    select_and_scatter does (ties included)."""
    return _windows(x).max(axis=(2, 4))


def _windows(x):  # (B, H/2, 2, W/2, 2, C); an odd last row or column is dropped, as VALID pooling does
    b, h, w, c = x.shape
    return x[:, :h // 2 * 2, :w // 2 * 2].reshape(b, h // 2, 2, w // 2, 2, c)


def _forward(x):
    pooled = max_pool_2x2(x)
    return pooled, (x, pooled)


def _backward(saved, g):
    x, pooled = saved
    windows = _windows(x)
    taken = jnp.zeros(pooled.shape, bool)
    grads = {}
    for i in (0, 1):
        for j in (0, 1):
            first = (windows[:, :, i, :, j] == pooled) & ~taken
            taken = taken | first
            grads[i, j] = jnp.where(first, g, jnp.zeros_like(g))
    rows = [jnp.stack([grads[i, 0], grads[i, 1]], axis=3) for i in (0, 1)]  # (B, H/2, W/2, 2, C) each
    dx = jnp.stack(rows, axis=2).reshape(windows.shape[0], windows.shape[1] * 2, windows.shape[3] * 2, -1)
    b, h, w, c = x.shape
    return (jnp.pad(dx, ((0, 0), (0, h - dx.shape[1]), (0, w - dx.shape[2]), (0, 0))),)


max_pool_2x2.defvjp(_forward, _backward)
