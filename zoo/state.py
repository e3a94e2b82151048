"""The train state: a pytree of arrays only; the nnx graphdef stays outside, closed over by the steps."""
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct


@struct.dataclass
class TrainState:
    params: Any  # nnx.State of nnx.Param
    model_state: Any  # everything else the model carries (BatchNorm statistics)
    opt_state: Any
    rng: jax.Array  # dropout keys are fold_in(rng, step): no hidden RNG state
    step: jax.Array


def create_state(model: nnx.Module, tx: optax.GradientTransformation, seed: int):
    graphdef, params, model_state = nnx.split(model, nnx.Param, ...)
    state = TrainState(params=params, model_state=model_state, opt_state=tx.init(params),
                       rng=jax.random.key_data(jax.random.key(seed + 1)), step=jnp.zeros((), jnp.int32))
    return graphdef, state
