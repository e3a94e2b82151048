"""zoo.models.pooling.max_pool_2x2 is nnx.max_pool(x, (2, 2), strides=(2, 2)), values and gradients, bit for bit."""
import jax
import numpy as np
import pytest
from flax import nnx

from zoo.models.pooling import max_pool_2x2


def reference(x):
    return nnx.max_pool(x, (2, 2), strides=(2, 2))


@pytest.mark.parametrize("shape", [(3, 8, 8, 4), (2, 7, 9, 3)], ids=["even", "odd"])  # odd: VALID drops a row
def test_max_pool_2x2_and_its_gradient_equal_nnx_max_pool(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, :4, :4] = 1.0  # windows of four equal maxima: the gradient goes to the first, in row-major order
    x[1, 2:4, 2:4, 0] = [[0.5, 2.0], [2.0, 2.0]]  # a tie after the window's first element
    x[2 % shape[0], :2, :2, 1] = -np.inf
    g = rng.standard_normal(reference(x).shape).astype(np.float32)
    for wrap in (lambda f: f, jax.jit):
        ours, ours_vjp = jax.vjp(wrap(max_pool_2x2), x)
        theirs, theirs_vjp = jax.vjp(wrap(reference), x)
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_array_equal(ours_vjp(g)[0], theirs_vjp(g)[0])
