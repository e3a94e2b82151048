"""The hand-written baseline the benchmark compares against: plain-dict params, jax.value_and_grad, optax, jax.jit.

Same architectures, initialisation scheme, dropout, BatchNorm, loss and metrics as zoo.models + zoo.tasks, so
a difference in step time is framework overhead, not different work. Nothing here imports the zoo.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

DROPOUT = 0.1
BN_MOMENTUM, BN_EPS = 0.99, 1e-5


def _dense(key, n_in, n_out):
    return {"w": jax.nn.initializers.lecun_normal()(key, (n_in, n_out)), "b": jnp.zeros((n_out,))}


def _dropout(key, x, train):
    if not train:
        return x
    keep = jax.random.bernoulli(key, 1.0 - DROPOUT, x.shape)
    return jnp.where(keep, x / (1.0 - DROPOUT), 0.0)


def init_mlp(key, in_shape, out, hidden, cnn_channels=None):
    sizes = [math.prod(in_shape), *hidden, out]
    keys = jax.random.split(key, len(sizes) - 1)
    return {f"dense{i}": _dense(k, a, b) for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:]))}, {}


def mlp(params, extra, x, key, train):
    x = x.reshape(x.shape[0], -1)  # (B, features)
    n = len(params)
    keys = jax.random.split(key, n)
    for i in range(n - 1):
        layer = params[f"dense{i}"]
        x = _dropout(keys[i], jax.nn.relu(x @ layer["w"] + layer["b"]), train)
    head = params[f"dense{n - 1}"]
    return x @ head["w"] + head["b"], extra


def init_linear(key, in_shape, out, hidden=None, cnn_channels=None):
    return {"dense0": _dense(key, math.prod(in_shape), out)}, {}


def linear(params, extra, x, key, train):
    return x.reshape(x.shape[0], -1) @ params["dense0"]["w"] + params["dense0"]["b"], extra


def init_cnn(key, in_shape, out, hidden=(128,), cnn_channels=(32, 64)):
    h, w, c = in_shape
    keys = jax.random.split(key, len(cnn_channels) + 2)
    params, extra = {}, {}
    for i, (a, b) in enumerate(zip([c, *cnn_channels[:-1]], cnn_channels)):
        params[f"conv{i}"] = {"w": jax.nn.initializers.lecun_normal()(keys[i], (3, 3, a, b)), "b": jnp.zeros((b,))}
        params[f"bn{i}"] = {"scale": jnp.ones((b,)), "bias": jnp.zeros((b,))}
        extra[f"bn{i}"] = {"mean": jnp.zeros((b,)), "var": jnp.ones((b,))}
    flat = (h // 2) * (w // 2) * cnn_channels[-1]
    params["dense"] = _dense(keys[-2], flat, hidden[0])
    params["head"] = _dense(keys[-1], hidden[0], out)
    return params, extra


def cnn(params, extra, x, key, train):
    new_extra = {}
    for i in range(len(extra)):  # (B, H, W, C)
        conv, bn, stats = params[f"conv{i}"], params[f"bn{i}"], extra[f"bn{i}"]
        x = jax.lax.conv_general_dilated(x, conv["w"], (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC")) + conv["b"]
        if train:
            mean = x.mean((0, 1, 2))
            var = (x * x).mean((0, 1, 2)) - mean * mean
            new_extra[f"bn{i}"] = {"mean": BN_MOMENTUM * stats["mean"] + (1 - BN_MOMENTUM) * mean,
                                   "var": BN_MOMENTUM * stats["var"] + (1 - BN_MOMENTUM) * var}
        else:
            mean, var = stats["mean"], stats["var"]
            new_extra[f"bn{i}"] = stats
        x = jax.nn.relu((x - mean) * jax.lax.rsqrt(var + BN_EPS) * bn["scale"] + bn["bias"])
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # (B, H/2, W/2, C)
    x = x.reshape(x.shape[0], -1)
    x = _dropout(key, jax.nn.relu(x @ params["dense"]["w"] + params["dense"]["b"]), train)
    return x @ params["head"]["w"] + params["head"]["b"], new_extra


MODELS = {"mlp": (init_mlp, mlp), "linear": (init_linear, linear), "cnn": (init_cnn, cnn)}


def make_reference(kind, task, in_shape, out, tx, seed=0, hidden=(512, 512), cnn_channels=(32, 64)):
    """-> (state, step): state = (params, extra, opt_state, rng, step); step(state, x, y) -> (state, metrics)."""
    init, apply = MODELS[kind]
    params, extra = init(jax.random.key(seed), in_shape, out, hidden=hidden, cnn_channels=cnn_channels)

    def loss_fn(params, extra, x, y, key):
        out, new_extra = apply(params, extra, x, key, True)
        if task == "classification":
            loss = optax.softmax_cross_entropy_with_integer_labels(out, y).mean()
            return loss, (new_extra, {"loss": loss, "correct": jnp.sum(jnp.argmax(out, -1) == y)})
        loss = jnp.mean(jnp.sum((out - y) ** 2, -1))
        return loss, (new_extra, {"loss": loss})

    def step(state, x, y):
        params, extra, opt_state, rng, i = state
        key = jax.random.fold_in(rng, i)
        (_, (extra, metrics)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, extra, x, y, key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), extra, opt_state, rng, i + 1), metrics

    state = (params, extra, tx.init(params), jax.random.key(seed + 1), jnp.zeros((), jnp.int32))
    return state, jax.jit(step, donate_argnums=0)


def naive_loop(state, step, x, y, batch_size, num_steps, log_every, seed=0):
    """The loop people write first: one jitted step per call, numpy batches, a loss fetch every log_every."""
    steps_per_epoch = len(x) // batch_size
    order = None
    for s in range(num_steps):
        epoch, i = divmod(s, steps_per_epoch)
        if i == 0:
            order = np.random.default_rng([seed, epoch]).permutation(len(x))
        idx = order[i * batch_size:(i + 1) * batch_size]
        state, metrics = step(state, x[idx], y[idx])
        if (s + 1) % log_every == 0 or s + 1 == num_steps:
            float(metrics["loss"])  # the host sync a real loop makes to log
    return state
