"""Per-example gradient norms without per-example gradients ("ghost clipping", Goodfellow 2015; Li et al. 2022).

A dense layer's gradient for example i is the outer product of its input a_i and of the loss gradient g_i at its
output, so its squared norm is |a_i|^2 |g_i|^2 and the batch's clipped sum, sum_i c_i a_i g_i^T, is one matmul
a^T (c g). So one forward pass records every layer's input, one backward pass gives the gradient at every
layer's output (a zero added to each output, differentiated: the examples of a batch do not mix, so row i is
example i's own), and the step never holds a copy of the weights per example. A convolution's per-example kernel
gradient is small (kernel-sized): it is formed from shifted slices of the input, one batched matmul.

`supports(model)` says whether every parameter belongs to a layer handled here; other models keep
`jax.vmap(jax.grad)` (zoo.privacy.gradients.per_example_grads).
"""
import itertools

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn.linear import canonicalize_padding


def _as_tuple(value, n: int) -> tuple:
    return (1,) * n if value is None else (value,) * n if isinstance(value, int) else tuple(value)


def _conv_supported(conv: nnx.Conv) -> bool:
    n = len(conv.kernel_size)
    padding = canonicalize_padding(conv.padding, n)
    return (conv.feature_group_count == 1 and conv.mask is None and _as_tuple(conv.input_dilation, n) == (1,) * n
            and (padding in ("SAME", "VALID") or not isinstance(padding, str)))


def _supported(module) -> bool:
    return isinstance(module, nnx.Linear) or (isinstance(module, nnx.Conv) and _conv_supported(module))


def _layers(model: nnx.Module) -> list:
    return [(path, m) for path, m in nnx.iter_modules(model) if _supported(m)]


def supports(model: nnx.Module) -> bool:
    """True when every nnx.Param of `model` is a weight of a plain Linear or Conv layer."""
    covered = {path + (name,) for path, m in _layers(model) for name in ("kernel", "bias")}
    return all(path in covered for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param)))


def _dense_parts(layer: nnx.Linear, a, g):
    """(per-example squared norms, clipped_sum(c) -> {name: sum_i c_i grad_i}) of one Linear call."""
    batch = a.shape[0]
    a, g = a.reshape(batch, -1, a.shape[-1]), g.reshape(batch, -1, g.shape[-1])  # (B, T, in), (B, T, out)
    bias_grads = g.sum(axis=1)  # (B, out)
    if a.shape[1] == 1:  # one vector per example: |a_i g_i^T|^2 = |a_i|^2 |g_i|^2
        a, g = a[:, 0], g[:, 0]
        kernel_sq = jnp.sum(a * a, axis=-1) * jnp.sum(g * g, axis=-1)

        def kernel_sum(c):
            return a.T @ (c[:, None] * g)
    else:  # a sequence per example: form the (in, out) per-example gradients
        per_example = jnp.einsum("bti,bto->bio", a, g)
        kernel_sq = jnp.sum(per_example * per_example, axis=(1, 2))

        def kernel_sum(c):
            return jnp.einsum("b,bio->io", c, per_example)
    return _with_bias(layer, kernel_sq, kernel_sum, bias_grads)


def _patches(conv: nnx.Conv, x, out_spatial):
    """(B, *out_spatial, *kernel_size, C_in): the input window under each kernel tap, as the conv reads it."""
    n = len(conv.kernel_size)
    strides, dilation = _as_tuple(conv.strides, n), _as_tuple(conv.kernel_dilation, n)
    padding = canonicalize_padding(conv.padding, n)
    if isinstance(padding, str):
        window = [(k - 1) * d + 1 for k, d in zip(conv.kernel_size, dilation)]
        padding = jax.lax.padtype_to_pads(x.shape[1:-1], window, strides, padding)
    x = jnp.pad(x, [(0, 0), *padding, (0, 0)])
    taps = []
    for offsets in itertools.product(*(range(k) for k in conv.kernel_size)):
        start = [o * d for o, d in zip(offsets, dilation)]
        stop = [s + (m - 1) * st + 1 for s, m, st in zip(start, out_spatial, strides)]
        taps.append(jax.lax.slice(x, (0, *start, 0), (x.shape[0], *stop, x.shape[-1]), (1, *strides, 1)))
    return jnp.stack(taps, axis=-2).reshape(*x.shape[:1], *out_spatial, *conv.kernel_size, x.shape[-1])


def _conv_parts(conv: nnx.Conv, x, g):
    batch, out_spatial = x.shape[0], g.shape[1:-1]
    patches = _patches(conv, x, out_spatial).reshape(batch, -1, *conv.kernel_size, x.shape[-1])
    g = g.reshape(batch, -1, g.shape[-1])  # (B, positions, out)
    per_example = jnp.einsum("bp...,bpo->b...o", patches, g)  # (B, *kernel_size, in, out): the kernel's layout
    kernel_sq = jnp.sum(per_example * per_example, axis=tuple(range(1, per_example.ndim)))

    def kernel_sum(c):
        return jnp.tensordot(c, per_example, axes=1)
    return _with_bias(conv, kernel_sq, kernel_sum, g.sum(axis=1))


def _with_bias(layer, kernel_sq, kernel_sum, bias_grads):
    if layer.bias is None:
        return kernel_sq, lambda c: {"kernel": kernel_sum(c)}
    return (kernel_sq + jnp.sum(bias_grads * bias_grads, axis=-1),
            lambda c: {"kernel": kernel_sum(c), "bias": c @ bias_grads})


class _Tap(nnx.Module):
    """Stands in for a layer inside one traced pass: records its input and output, adds `box["zeros"][path]`."""

    def __init__(self, layer, path, box: dict):
        self.layer, self.path, self.box = layer, path, box

    def __call__(self, x):
        if self.path in self.box["inputs"]:
            raise ValueError(f"layer {'.'.join(map(str, self.path))} is called twice in one pass; "
                             "ghost clipping needs each layer once")
        y = self.layer(x)
        self.box["inputs"][self.path], self.box["outputs"][self.path] = x, y
        return y + self.box["zeros"][self.path] if self.box["zeros"] else y


def _tapped_pass(graphdef, params, model_state, batch: dict, key, zeros: dict):
    """(model outputs, ({path: layer}, {path: its input}, {path: its output})) of a train pass of a model copy."""
    box = {"inputs": {}, "outputs": {}, "zeros": zeros}
    model = nnx.merge(graphdef, params, model_state, copy=True)
    layers = dict(_layers(model))
    for path, layer in layers.items():  # swap each layer for its tap, in its parent
        parent = model
        for part in path[:-1]:
            parent = parent[part] if isinstance(part, int) else getattr(parent, part)
        if isinstance(path[-1], int):
            parent[path[-1]] = _Tap(layer, path, box)
        else:
            setattr(parent, path[-1], _Tap(layer, path, box))
    outputs = model(batch["x"], train=True, rngs=nnx.Rngs(dropout=key))
    return outputs, (layers, box["inputs"], box["outputs"])


def clipped_gradient_sum(graphdef, task, params, model_state, batch: dict, key, l2_clip: float):
    """(sum_i min(1, l2_clip / |grad_i|) grad_i as a tree like `params`, the batch's outputs) for a model
    `supports` accepts. Padding rows (mask 0) have zero loss, hence zero gradient."""

    def loss_sum(zeros):
        outputs, taps = _tapped_pass(graphdef, params, model_state, batch, key, zeros)
        return task.sums(outputs, batch["y"], batch["mask"])["loss_sum"], (outputs, taps)

    shapes = jax.eval_shape(lambda: _tapped_pass(graphdef, params, model_state, batch, key, {})[1][2])
    zeros = {path: jnp.zeros(s.shape, s.dtype) for path, s in shapes.items()}
    _, pullback, (outputs, (layers, inputs, _)) = jax.vjp(loss_sum, zeros, has_aux=True)
    (output_grads,) = pullback(jnp.ones(()))
    parts = {path: (_dense_parts if isinstance(layer, nnx.Linear) else _conv_parts)(layer, inputs[path],
                                                                                    output_grads[path])
             for path, layer in layers.items()}
    norms = jnp.sqrt(sum(sq for sq, _ in parts.values()))
    scale = jnp.minimum(l2_clip / norms, 1.0)  # a zero gradient (padding) gives inf, hence 1
    grads = {path + (name,): g for path, (_, layer_sum) in parts.items() for name, g in layer_sum(scale).items()}
    # params' own tree (its Variables included), leaves in its flat-state order
    return jax.tree.unflatten(jax.tree.structure(params), [grads[p] for p, _ in nnx.to_flat_state(params)]), outputs
