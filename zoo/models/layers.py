"""Layers the zoo's models share."""
import contextlib
import contextvars

import jax
import jax.numpy as jnp
from flax import nnx

# set while a train step replays dropout masks drawn before its call's loop (zoo.steps), or records their shapes
_DRAWS = contextvars.ContextVar("zoo_dropout_draws", default=None)


class Dropout(nnx.Dropout):
    """nnx.Dropout whose rate may also be a traced value, so a population's members (zoo.population) each
    train with their own rate in one program. A Python rate is nnx.Dropout exactly. A traced rate draws the
    mask from the same key the same way; at rate 0 the mask keeps every unit and divides by 1, so the result
    equals nnx.Dropout's, which skips the layer. Inside `replaying(draws)` the mask is the next of `draws`
    instead: the one nnx.Dropout would have drawn (see `draw_masks`)."""

    def __call__(self, inputs, *, deterministic: bool | None = None, rngs: nnx.Rngs | None = None):
        draws, traced = _DRAWS.get(), isinstance(self.rate, jax.Array)
        deterministic = self.deterministic if deterministic is None else deterministic
        if (draws is None and not traced) or deterministic:
            return super().__call__(inputs, deterministic=deterministic, rngs=rngs)
        if not traced and self.rate in (0.0, 1.0):  # nnx.Dropout draws no mask for these
            return inputs if self.rate == 0.0 else jnp.zeros_like(inputs)
        keep_prob = 1.0 - self.rate
        if draws is not None:
            mask = draws.next(inputs.shape, self.rate)
        else:
            mask = jax.random.bernoulli(rngs[self.rng_collection](), p=keep_prob, shape=inputs.shape,
                                        out_sharding=jax.typeof(inputs).sharding)
        return jax.lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))


class DropoutDraws:
    """The masks a model's Dropout layers take in one forward pass, in call order. Without `masks` it records
    each call's (shape, rate) and hands out masks that keep everything (for jax.eval_shape)."""

    def __init__(self, masks=None):
        self.masks, self.calls = masks, []

    def next(self, shape, rate):
        self.calls.append((tuple(shape), rate))
        if self.masks is None:
            return jnp.ones(shape, bool)
        return self.masks[len(self.calls) - 1]


@contextlib.contextmanager
def replaying(draws: DropoutDraws):
    token = _DRAWS.set(draws)
    try:
        yield draws
    finally:
        _DRAWS.reset(token)


def draw_masks(calls: list, key) -> list:
    """The masks nnx.Rngs(dropout=key) gives Dropout layers called as `calls` records: the i-th draws from
    fold_in(key, i), as the stream's counter does, with nnx.Dropout's bernoulli."""
    return [jax.random.bernoulli(jax.random.fold_in(key, i), p=1.0 - rate, shape=shape)
            for i, (shape, rate) in enumerate(calls)]


def replays_dropout(model: nnx.Module) -> bool:
    """Whether the masks of `model`'s train step can be drawn ahead of it: one of the zoo's models, whose only
    random draws are its Dropout layers' whole-input masks from the 'dropout' stream."""
    if not type(model).__module__.startswith("zoo.models."):
        return False
    layers = [m for _, m in model.iter_modules() if isinstance(m, nnx.Dropout)]
    return all(type(m) is Dropout and m.rng_collection == "dropout" and not m.broadcast_dims for m in layers)


def set_dropout_rate(model: nnx.Module, rate) -> None:
    """Give every Dropout layer of `model` (a copy merged inside a traced step) this member's rate."""
    for _, module in model.iter_modules():
        if isinstance(module, Dropout):
            module.rate = rate
