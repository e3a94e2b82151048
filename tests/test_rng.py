"""zoo.rng: Threefry with its rounds written out draws exactly what jax.random's Threefry draws."""
import jax
import numpy as np

from zoo.rng import THREEFRY_UNROLLED, step_key


def test_unrolled_threefry_draws_exactly_jax_threefry():
    key = jax.random.fold_in(jax.random.key(3), 7)
    unrolled = jax.random.wrap_key_data(jax.random.key_data(key), impl=THREEFRY_UNROLLED)
    draws = {"normal": jax.random.normal, "bits": jax.random.bits,
             "bernoulli": lambda k, shape: jax.random.bernoulli(k, 0.9, shape)}
    for shape in [(1,), (5,), (3, 4), (64, 256), (2, 3, 5)]:
        for name, draw in draws.items():
            # jax.random's draws are jitted functions: a call outside jit traces and compiles what one inside does
            fn = jax.jit(lambda k: draw(k, shape))
            np.testing.assert_array_equal(fn(unrolled), fn(key), err_msg=f"{name} {shape}")
    np.testing.assert_array_equal(jax.random.key_data(jax.random.split(unrolled, 3)),
                                  jax.random.key_data(jax.random.split(key, 3)))


def test_step_key_is_the_state_key_folded_with_the_step():
    rng = jax.random.key_data(jax.random.key(11))
    for step in (0, 1, 12345):
        want = jax.random.fold_in(jax.random.wrap_key_data(rng), step)
        np.testing.assert_array_equal(jax.random.key_data(step_key(rng, step)), jax.random.key_data(want))
        np.testing.assert_array_equal(jax.random.uniform(step_key(rng, step), (7,)), jax.random.uniform(want, (7,)))
