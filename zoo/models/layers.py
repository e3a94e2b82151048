"""Layers the zoo's models share."""
import jax
import jax.numpy as jnp
from flax import nnx


class Dropout(nnx.Dropout):
    """nnx.Dropout whose rate may also be a traced value, so a population's members (zoo.population) each
    train with their own rate in one program. A Python rate is nnx.Dropout exactly. A traced rate draws the
    mask from the same key the same way; at rate 0 the mask keeps every unit and divides by 1, so the result
    equals nnx.Dropout's, which skips the layer."""

    def __call__(self, inputs, *, deterministic: bool | None = None, rngs: nnx.Rngs | None = None):
        if not isinstance(self.rate, jax.Array) or deterministic:
            return super().__call__(inputs, deterministic=deterministic, rngs=rngs)
        keep_prob = 1.0 - self.rate
        mask = jax.random.bernoulli(rngs[self.rng_collection](), p=keep_prob, shape=inputs.shape,
                                    out_sharding=jax.typeof(inputs).sharding)
        return jax.lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))


def set_dropout_rate(model: nnx.Module, rate) -> None:
    """Give every Dropout layer of `model` (a copy merged inside a traced step) this member's rate."""
    for _, module in model.iter_modules():
        if isinstance(module, Dropout):
            module.rate = rate
