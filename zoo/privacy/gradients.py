"""DP-SGD gradients: each example's gradient clipped to `l2_clip`, summed across the batch and devices, plus
Gaussian noise once. Models made of Linear and Conv layers get the clipped sum from per-example norms without
per-example gradients (zoo.privacy.ghost); any other model from `jax.vmap(jax.grad)` and
`optax.per_example_global_norm_clip`.

A Poisson batch's rows beyond the expected batch size are mostly padding. On one device the batch is computed
in chunks (zoo.privacy.sampling.chunk_bounds) and a chunk without a sampled example is skipped. The first chunk
holds the whole sample but for ~2% of steps (152 of 220 rows for 128 expected), and only it is computed
unconditionally: each pass has a fixed cost in small operations, and inside the `lax.cond` that skips a chunk
XLA:CPU runs a convolution's input gradient ~10x slower (the CNN's 32->64 conv; zoo.steps, `unroll`, says why).

The noisy sum is divided by the *expected* batch size q N, never by the sampled count: the count depends on
the data, and dividing by it would change the sensitivity the accountant assumes.
"""
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from zoo.privacy import ghost
from zoo.rng import step_key


def per_example_grads(graphdef, task, params, model_state, batch: dict, keys):
    """Each example's own loss gradient, as trees with a leading batch axis, and the batch's outputs.

    Padding rows (mask 0) have zero loss, hence zero gradient. `keys` (B,) give each example its own dropout.
    """

    def loss_of_one(params, x, y, mask, key):
        model = nnx.merge(graphdef, params, model_state, copy=True)
        outputs = model(x[None], train=True, rngs=nnx.Rngs(dropout=key))  # a batch of one
        return task.sums(outputs, y[None], mask[None])["loss_sum"], outputs[0]

    grad_fn = jax.vmap(jax.grad(loss_of_one, has_aux=True), in_axes=(None, 0, 0, 0, 0))
    return grad_fn(params, batch["x"], batch["y"], batch["mask"], keys)


def add_gaussian_noise(tree, key, std: float):
    if not std:
        return tree
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    return treedef.unflatten([g + std * jax.random.normal(k, g.shape, g.dtype) for g, k in zip(leaves, keys)])


def make_private_gradients(graphdef, task, *, l2_clip: float, noise_multiplier: float, expected_batch_size: float,
                           axis_name=None, chunks=None, ghost_clipping: bool = True):
    """gradients(state, batch) -> (grads, local metric sums, model_state), the hook of zoo.steps.make_steps.

    `chunks`: row bounds [0, ..., rows] to compute the batch in (None: one pass); every chunk after the first is
    skipped when it holds no sampled example (sampled examples fill the first rows). `ghost_clipping=False`
    takes the vmap path even for a model that zoo.privacy.ghost supports (tests compare the two).

    Under pmap every device holds a slice of the batch: the clipped sums are psum-med, and the noise, drawn
    from the same key on every device, is added once to the global sum, exactly as on one device.
    """

    noise_std = noise_multiplier * l2_clip if noise_multiplier else 0.0  # 0 * inf would be nan

    def reduce(tree):
        return jax.lax.psum(tree, axis_name) if axis_name else tree

    def gradients(state, batch):
        noise_key, dropout_key = jax.random.split(step_key(state.rng, state.step))
        if axis_name:
            dropout_key = jax.random.fold_in(dropout_key, jax.lax.axis_index(axis_name))
        use_ghost = ghost_clipping and ghost.supports(nnx.merge(graphdef, state.params, state.model_state))

        def clipped_sum(chunk, key):
            if use_ghost:
                return ghost.clipped_gradient_sum(graphdef, task, state.params, state.model_state, chunk, key, l2_clip)
            keys = jax.random.split(key, chunk["mask"].shape[0])
            grads, outputs = per_example_grads(graphdef, task, state.params, state.model_state, chunk, keys)
            return optax.per_example_global_norm_clip(grads, l2_clip)[0], outputs

        rows = batch["mask"].shape[0]
        bounds = [b for b in chunks or (0,) if b < rows] + [rows]  # a batch of other rows (benchmark) fits too
        total, outputs = None, []
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            chunk = jax.tree.map(lambda x: x[lo:hi], batch)
            key = jax.random.fold_in(dropout_key, i) if len(bounds) > 2 else dropout_key
            if i == 0:  # almost always holds sampled examples
                part = clipped_sum(chunk, key)
            else:
                zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(clipped_sum, chunk, key))
                part = jax.lax.cond(jnp.any(chunk["mask"] > 0), clipped_sum, lambda *_: zeros, chunk, key)
            total = part[0] if total is None else jax.tree.map(jnp.add, total, part[0])
            outputs.append(part[1])
        outputs = jnp.concatenate(outputs)
        # state.step >= 0 always holds; as a runtime predicate it keeps the noise in a conditional, whose result
        # XLA materializes once: inline, XLA:CPU fuses the generator into each consumer of the noisy sum
        # (AdamW's two moments and its update) and draws every normal three times
        noisy_sum = jax.lax.cond(state.step >= 0, lambda t: add_gaussian_noise(t, noise_key, noise_std),
                                 lambda t: t, reduce(total))
        grads = jax.tree.map(lambda g: g / expected_batch_size, noisy_sum)
        return grads, task.sums(outputs, batch["y"], batch["mask"]), state.model_state

    return gradients
