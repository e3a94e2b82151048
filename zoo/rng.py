"""The train step's random numbers: Threefry, with its rounds written out.

On CPU, JAX lowers Threefry-2x32 as a loop of five iterations (it compiles faster), which XLA:CPU runs ~2.5x
slower than the straight-line rounds, and small models draw a lot: a dropout mask per layer per step, and under
DP-SGD one normal per parameter. `THREEFRY_UNROLLED` is the same generator — Threefry's key layout, split and
fold_in, and exactly Threefry's bits (tests/test_rng.py compares them) — so every mask and every noise draw is
what `jax.random` would give from the same key, only sooner. Measured on 2 cores (docs/benchmarks.md): the
digits MLP's DP step at batch 128 2.24 -> 1.52 ms; a 256-256 MLP step with dropout 0.1 at batch 64, inside a
50-step call, 0.89 -> 0.60 ms.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import random as jex_random

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry_2x32(k1, k2, x1, x2) -> tuple:
    """The Threefry-2x32 hash (20 rounds, Salmon et al. 2011) of the counter pairs (x1, x2) under key (k1, k2)."""
    keys = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + keys[0], x2 + keys[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ ((x2 << np.uint32(r)) | (x2 >> np.uint32(32 - r)))
        x1, x2 = x1 + keys[(i + 1) % 3], x2 + keys[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _random_bits(key, bit_width: int, shape: tuple):
    size = math.prod(shape)
    if bit_width != 32 or not jax.config.jax_threefry_partitionable or size >= 2 ** 32:
        return jex_random.threefry_prng_impl.random_bits(key, bit_width, shape)
    # JAX's partitionable Threefry hashes each element's 64-bit flat index (hi, lo) and xors the two words
    lo = jax.lax.iota(np.uint32, size).reshape(shape)
    bits1, bits2 = threefry_2x32(key[0], key[1], jnp.zeros_like(lo), lo)
    return bits1 ^ bits2


_THREEFRY = jex_random.threefry_prng_impl
THREEFRY_UNROLLED = jex_random.define_prng_impl(
    key_shape=_THREEFRY.key_shape, seed=_THREEFRY.seed, split=_THREEFRY.split, random_bits=_random_bits,
    fold_in=_THREEFRY.fold_in, name="threefry2x32_unrolled", tag="fry_u")


def step_key(rng, step):
    """The key of train step `step` from a TrainState's key data `rng`: fold_in(rng's Threefry key, step)."""
    return jax.random.fold_in(jax.random.wrap_key_data(rng, impl=THREEFRY_UNROLLED), step)
