"""DP-SGD gradients: per-example gradients by `jax.vmap(jax.grad)`, each clipped to `l2_clip`
(`optax.per_example_global_norm_clip`), summed across the batch and devices, plus Gaussian noise once.

The noisy sum is divided by the *expected* batch size q N, never by the sampled count: the count depends on
the data, and dividing by it would change the sensitivity the accountant assumes.
"""
import jax
import optax
from flax import nnx


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
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    return treedef.unflatten([g + std * jax.random.normal(k, g.shape, g.dtype) for g, k in zip(leaves, keys)])


def make_private_gradients(graphdef, task, *, l2_clip: float, noise_multiplier: float, expected_batch_size: float,
                           axis_name=None):
    """gradients(state, batch) -> (grads, local metric sums, model_state), the hook of zoo.steps.make_steps.

    Under pmap every device holds a slice of the batch: the clipped sums are psum-med, and the noise, drawn
    from the same key on every device, is added once to the global sum, exactly as on one device.
    """

    noise_std = noise_multiplier * l2_clip if noise_multiplier else 0.0  # 0 * inf would be nan

    def reduce(tree):
        return jax.lax.psum(tree, axis_name) if axis_name else tree

    def gradients(state, batch):
        step_key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
        noise_key, dropout_key = jax.random.split(step_key)
        if axis_name:
            dropout_key = jax.random.fold_in(dropout_key, jax.lax.axis_index(axis_name))
        keys = jax.random.split(dropout_key, batch["mask"].shape[0])
        grads, outputs = per_example_grads(graphdef, task, state.params, state.model_state, batch, keys)
        clipped_sum, _ = optax.per_example_global_norm_clip(grads, l2_clip)
        noisy_sum = add_gaussian_noise(reduce(clipped_sum), noise_key, noise_std)
        grads = jax.tree.map(lambda g: g / expected_batch_size, noisy_sum)
        return grads, task.sums(outputs, batch["y"], batch["mask"]), state.model_state

    return gradients
