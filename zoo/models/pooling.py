"""2x2 max pooling whose gradient XLA:CPU computes cheaply."""
import jax
import jax.numpy as jnp


@jax.custom_vjp
def max_pool_2x2(x: jax.Array) -> jax.Array:
    """nnx.max_pool(x, (2, 2), strides=(2, 2)) on (B, H, W, C): the same values and the same gradient.

    XLA differentiates a reduce_window max as select_and_scatter, which XLA:CPU expands into an argmax over
    windows of four int32 index arrays the size of the input and a scatter: ~110 ms of the 28x28 CNN's 290 ms
    step at batch 128 (docs/benchmarks.md). Here the pool is a max over a reshape, and its gradient an argmax
    over each window's four values that routes the window's gradient to its first maximum in row-major order,
    as select_and_scatter does (ties included)."""
    return _windows(x).max(axis=(2, 4))


def _windows(x):  # (B, H/2, 2, W/2, 2, C); an odd last row or column is dropped, as VALID pooling does
    b, h, w, c = x.shape
    return x[:, :h // 2 * 2, :w // 2 * 2].reshape(b, h // 2, 2, w // 2, 2, c)


def _forward(x):
    return max_pool_2x2(x), (x,)


def _backward(saved, g):
    # the first maximum of each window by argmax over its four values, not by equality with the saved forward
    # output: XLA may recompute x inside another fusion, where a value can differ from the forward's in its last bit
    (x,) = saved
    windows = _windows(x)
    b, h, _, w, _, c = windows.shape
    first = jnp.argmax(windows.transpose(0, 1, 3, 2, 4, 5).reshape(b, h, w, 4, c), axis=3)  # row-major in a window
    routed = jnp.where(jnp.arange(4)[:, None] == first[:, :, :, None, :], g[:, :, :, None, :], jnp.zeros_like(g)[:, :, :, None, :])
    dx = routed.reshape(b, h, w, 2, 2, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h * 2, w * 2, c)
    return (jnp.pad(dx, ((0, 0), (0, x.shape[1] - h * 2), (0, x.shape[2] - w * 2), (0, 0))),)


max_pool_2x2.defvjp(_forward, _backward)
