"""Model summary at the start of a run: parameters per layer, and XLA's own FLOPs count of the programs it runs.

FLOPs come from `lowered.cost_analysis()` of the run's train call and eval step, lowered but not compiled.
With the train split on the device, the train call is lowered for the shapes of the run's calls (K steps),
so its first real call reuses that trace and lowering instead of paying them again (0.2 s of a default MLP
run; a streamed split lowers one step instead of copying K batches for it). XLA counts the K-step loop's
body once but what the call does before its loop whole: the batch rows' indices and masks (a few FLOPs per
index, K x B of them) and, with dropout, the K steps' masks drawn ahead (zoo.steps.predrawn_masks). Where
that could be over 1% of the count (a model as small as linear regression: 39.6 k counted against 4.8 k for
a 200-step call; dropout: 237 M against 36 M for the MLP) a one-step call is lowered and counted instead,
whose count is exactly one step's; tests/test_trainer_features.py checks both against the model's
arithmetic. Under pmap each device runs its own program; the figures are summed over devices, so work
every device repeats (the optimizer update on replicated parameters) counts once per device: what the
hardware does. A sharded program is lowered whole, before XLA splits it over the devices: counted once.
A TPU's lowerings have no cost analysis (JAX analyses only its compiled programs): there the same programs
are lowered for the host's CPU and counted, except sharded and pmapped ones, bound to the TPU's devices (n/a).
"""
import hashlib
import logging
from collections import defaultdict

import jax
import numpy as np

from zoo.parallel.distributed import is_primary

log = logging.getLogger("zoo")

COUNTS_KEPT = 64  # programs whose count on the CPU a process keeps (by their own lowering's text)
_counted_on_cpu = {}


def parameter_counts(params) -> dict:
    """layer path ('convs.0') -> (number of parameters, bytes)."""
    layers = defaultdict(lambda: [0, 0])
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        names = names[:-1] if names[-1] == "value" else names  # nnx.Variable's own attribute
        layer = ".".join(names[:-1]) or names[-1]  # drop 'kernel' / 'bias'
        layers[layer][0] += int(np.size(leaf))
        layers[layer][1] += int(np.size(leaf)) * np.dtype(leaf.dtype).itemsize
    return {name: tuple(v) for name, v in layers.items()}


def xla_flops(fn, *args):
    """FLOPs of fn's program for these arguments as XLA's cost analysis reports them; None where it reports none.

    The lowered program is analysed, not compiled: compiling the one-step program only to count its FLOPs cost
    every run 0.3 s (MLP) to 1 s (CNN); the counts differ from the optimised program's by 0.1-1.5%."""
    lowered = fn.lower(*args)
    flops = _flops(lowered)
    if flops is None:
        # a PJRT plug-in's lowering (the TPU's) has no cost analysis, only its compiled program has: the same
        # program lowered for the host's CPU is counted instead of compiling it for the count alone, once per
        # program in a process: a basic-launcher sweep's jobs that differ only in their seed run one program
        # (16 default MLP jobs on a TPU v5e: 43.5-43.9 s against 46.4-48.0 s counting each job's again)
        key = hashlib.sha256(lowered.as_text().encode()).hexdigest()
        if key not in _counted_on_cpu:
            if len(_counted_on_cpu) >= COUNTS_KEPT:
                _counted_on_cpu.clear()
            _counted_on_cpu[key] = _flops_on_cpu(fn, args)
        flops = _counted_on_cpu[key]
    return flops


def _flops(lowered):
    cost = lowered.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older JAX: one dict per program
    flops = (cost or {}).get("flops", -1.0)
    return float(flops) if flops > 0 else None


def _flops_on_cpu(fn, args):
    """FLOPs of fn lowered for args' shapes on the CPU; None where it cannot be (a program bound to devices by
    its shardings, as parallel=sharded's): the summary then says n/a."""
    def abstract(x):
        return jax.ShapeDtypeStruct(np.shape(x), x.dtype) if isinstance(x, (jax.Array, np.ndarray)) else x

    try:
        with jax.default_device(jax.local_devices(backend="cpu")[0]):
            return _flops(fn.lower(*jax.tree.map(abstract, args)))
    except Exception:  # noqa: BLE001 — a program bound to devices lowers on them alone: n/a, as before
        return None


def summarize(run, state, flops: bool = True, call_length: int = 1, dropout: bool = False) -> dict:
    """results.json's `model`: params, param_bytes, train_step_flops, eval_flops_per_example (global batch).
    `call_length`: the steps of each train call the run makes (zoo.loop.call_length); `dropout`: whether the
    model draws dropout masks (a rate above 0)."""
    compiled, mode = run.compiled, run.compiled.mode
    counts = count_parameters(run.host_state.params)
    if not flops:
        return counts
    # resident data: the first call's indices (K x B ints), so that call reuses this lowering; streamed data
    # would need K batches copied for it (a CIFAR-sized K=200 chunk is 315 MB): one step is lowered instead
    k = call_length if run.feed.resident else 1
    first_call = run.feed.args(0, k, pad_to=k)
    sums = compiled.put_sums(compiled.zero_sums)
    train_args = (jax.tree.leaves(state), sums, *first_call)
    eval_args = (state, mode.put_replicated(compiled.zero_sums), next(iter(run.eval_sets.values()))[0][0])
    counted = step_flops(compiled.train_chunk, train_args, compiled.eval_step, eval_args, mode.program_copies)
    if k > 1 and _outside_loop_may_show(counted["train_step_flops"], k, run.stream.batch_size, dropout):
        one_step = (jax.tree.leaves(state), sums, *run.feed.args(0, 1, pad_to=1))
        counted["train_step_flops"] = _scaled(xla_flops(compiled.train_chunk, *one_step), mode.program_copies)
    return {**counts, **counted}


# FLOPs per index of a K x B call outside its loop (gathering the rows, unfolding the mask, finding the active
# steps): 14 for linear regression on diabetes, (flops at K=50 - flops at K=2) / (48 x 64); a bound above that
INDEX_FLOPS = 16


def _outside_loop_may_show(call_flops, k: int, batch_size: int, dropout: bool) -> bool:
    """Whether a K-step call's work outside its loop, counted whole, could be over 1% of its count."""
    return call_flops is not None and (dropout or INDEX_FLOPS * k * batch_size > 0.01 * call_flops)


def count_parameters(params) -> dict:
    layers = parameter_counts(params)
    return {"params": sum(n for n, _ in layers.values()), "param_bytes": sum(b for _, b in layers.values()),
            "layers": {name: n for name, (n, _) in layers.items()}}


def step_flops(train_chunk, train_args: tuple, eval_step, eval_args: tuple, devices: int) -> dict:
    """FLOPs of one train step (of a chunk called with `train_args`) and of one eval example (`eval_args` end with
    the eval batch), summed over the `devices` copies of the program that run (pmap's; a sharded program is
    lowered whole, so 1)."""
    train_flops = xla_flops(train_chunk, *train_args)
    eval_flops = xla_flops(eval_step, *eval_args)
    eval_rows = int(np.size(eval_args[-1]["mask"]))
    return {"train_step_flops": _scaled(train_flops, devices),
            "eval_flops_per_example": None if eval_flops is None else eval_flops * devices / eval_rows}


def _scaled(flops, devices: int):
    return None if flops is None else flops * devices


def _si(value, unit: str) -> str:
    if value is None:
        return "n/a"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_summary(model: dict, batch_size: int) -> str:
    width = max(len(name) for name in model["layers"]) + 2
    lines = [f"{'layer':<{width}}{'params':>12}"]
    lines += [f"{name:<{width}}{count:>12,}" for name, count in model["layers"].items()]
    lines.append(f"{'total':<{width}}{model['params']:>12,}  ({_si(model['param_bytes'], 'B')})")
    lines.append(f"train step (batch {batch_size}): {_si(model['train_step_flops'], 'FLOP')}; eval: "
                 f"{_si(model['eval_flops_per_example'], 'FLOP')} per example (XLA cost analysis)")
    return "\n".join(lines)


def achieved_gflop_s(model: dict | None, batch_size: int, examples_per_s: float):
    if not model or model.get("train_step_flops") is None:
        return None
    return model["train_step_flops"] / batch_size * examples_per_s / 1e9


def describe(cfg, run, state, logger, call_length: int = 1) -> dict:
    """Parameter counts always; with logger.summary also the layer table and FLOPs, logged before step one."""
    model = summarize(run, state, flops=cfg.logger.summary, call_length=call_length,
                      dropout=float(cfg.model.get("dropout") or 0.0) > 0)
    return report(cfg, model, run.stream.batch_size, [logger])


def report(cfg, model: dict, batch_size: int, loggers: list) -> dict:
    """Log the summary (logger.summary) and hand each logger the FLOPs its train logs turn into GFLOP/s."""
    if cfg.logger.summary and is_primary():
        log.info("model summary\n%s", format_summary(model, batch_size))
    if model.get("train_step_flops"):
        for logger in loggers:
            logger.train_flops_per_example = model["train_step_flops"] / batch_size
    return {k: v for k, v in model.items() if k != "layers"}
