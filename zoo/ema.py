"""Weight averaging: an exponential moving average of the parameters, kept in the optimizer state.

As an optax transformation placed last in the chain it sees the final updates, so it follows the parameters
after every update; being optimizer state it is checkpointed and restored with the rest of the train state.
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from optax.tree_utils import tree_get


class ParamsEmaState(NamedTuple):
    ema_params: Any  # same structure, shapes and placement as the parameters


def params_ema(decay: float) -> optax.GradientTransformation:
    """ema <- decay * ema + (1 - decay) * new params; starts at the initial parameters, no bias correction."""

    def init(params):
        return ParamsEmaState(jax.tree.map(jnp.copy, params))  # own buffers: the state is donated

    def update(updates, state, params=None):
        new_params = optax.apply_updates(params, updates)
        ema = jax.tree.map(lambda e, p: decay * e + (1 - decay) * p, state.ema_params, new_params)
        return updates, ParamsEmaState(ema)

    return optax.GradientTransformation(init, update)


def with_averaged_params(state):
    """The train state with its parameters replaced by their average (same structure: nothing recompiles)."""
    return state.replace(params=tree_get(state.opt_state, "ema_params"))


def evaluating_averaged(eval_step):
    """eval_step(state, acc, batch) that scores the averaged parameters; traced, so it costs nothing per call."""
    return lambda state, acc, batch: eval_step(with_averaged_params(state), acc, batch)
