"""The train loop and the exact eval loop, shared by every model, dataset and parallel mode."""
import math
import time
from dataclasses import dataclass

from zoo.errors import UserError


@dataclass
class Compiled:
    """What a parallel mode produced for one run: compiled functions plus placement."""

    mode: object
    train_chunk: object  # (state, acc, chunk) -> (state, acc)
    eval_step: object  # (state, acc, batch) -> acc
    zero_sums: dict  # host zeros shaped like the metric sums
    task: object


class NonFiniteLoss(UserError):
    pass


def evaluate(state, compiled: Compiled, device_batches: list, expected_count: int) -> dict:
    acc = compiled.mode.put_replicated(compiled.zero_sums)
    for batch in device_batches:
        acc = compiled.eval_step(state, acc, batch)
    metrics = compiled.task.metrics(compiled.mode.get(acc))
    if metrics["count"] != expected_count:  # padding must never be counted, no example dropped
        raise AssertionError(f"eval counted {metrics['count']} examples, split has {expected_count}")
    return metrics


def _check_finite(metrics: dict, step: int, last_finite) -> None:
    if not math.isfinite(metrics["loss"]):
        raise NonFiniteLoss(
            f"training loss became non-finite by step {step} (last finite loss: {last_finite}); lower "
            "optimizer.learning_rate or set trainer.clip_norm.")


def fit(state, compiled: Compiled, stream, eval_sets: dict, cfg, total_steps: int, logger, start_step: int = 0):
    """Run steps [start_step, total_steps); log every log_every, evaluate every eval_every steps.

    `eval_sets` maps split name -> (device batches, example count); the first entry is the periodic one.
    Returns (state, last logged train metrics, examples/s).
    """
    mode = compiled.mode
    chunk_size = 1 if cfg.nan_check == "step" else cfg.steps_per_call
    log_every = 1 if cfg.nan_check == "step" else cfg.log_every
    periodic_split = next(iter(eval_sets))
    acc = mode.put_replicated(compiled.zero_sums)
    step, last_logged, train_metrics, last_finite = start_step, start_step, {}, None
    t_start = t_log = time.perf_counter()
    while step < total_steps:
        boundary = min(total_steps, (step // log_every + 1) * log_every)
        if cfg.eval_every:
            boundary = min(boundary, (step // cfg.eval_every + 1) * cfg.eval_every)
        k = min(chunk_size, boundary - step)
        state, acc = compiled.train_chunk(state, acc, mode.put_chunk(stream.chunk(step, k)))
        step += k
        if step % log_every == 0 or step == total_steps:
            train_metrics = compiled.task.metrics(mode.get(acc))  # the routine host sync
            _check_finite(train_metrics, step, last_finite)
            last_finite = train_metrics["loss"]
            acc = mode.put_replicated(compiled.zero_sums)
            now = time.perf_counter()
            examples_per_s = (step - last_logged) * stream.batch_size / max(now - t_log, 1e-9)
            logger.log(step, "train", {**train_metrics, "examples_per_s": examples_per_s})
            logger.progress(step, train_metrics["loss"], examples_per_s)
            t_log, last_logged = now, step
        if cfg.eval_every and step % cfg.eval_every == 0 and step < total_steps:
            batches, count = eval_sets[periodic_split]
            logger.log(step, periodic_split, evaluate(state, compiled, batches, count))
    wall = time.perf_counter() - t_start
    examples_per_s = (step - start_step) * stream.batch_size / max(wall, 1e-9)
    return state, train_metrics, examples_per_s


def host_batches_to_device(mode, batches: list) -> list:
    return [mode.put_batch(b) for b in batches]


def total_steps_for(cfg, steps_per_epoch: int) -> int:
    total = cfg.epochs * steps_per_epoch
    return min(total, cfg.max_steps) if cfg.max_steps else total


def metric_summary(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
