"""The train loop and the exact eval loop, shared by every model, dataset and parallel mode."""
import logging
import math
import time
from dataclasses import dataclass

import jax
from omegaconf import OmegaConf

from zoo.errors import UserError
from zoo.parallel.distributed import agree_on_stop

log = logging.getLogger("zoo")

# The cap on steps per call. Calls run to the next log/eval/checkpoint boundary, so the periods set K below
# it. Longer calls amortise the per-call host work (docs/benchmarks.md: linear 3.4x the naive loop at K=50
# against 0.63x at K=1; the compute-bound MLP gains nothing).
DEFAULT_STEPS_PER_CALL = 200


@dataclass
class Compiled:
    """What a parallel mode produced for one run: compiled functions plus placement."""

    mode: object
    train_chunk: object  # (state leaves, acc, data, rows) -> (state leaves, acc); zoo.steps.over_leaves
    eval_step: object  # (state, acc, batch) -> acc
    zero_sums: dict  # host zeros shaped like the metric sums
    task: object
    treedef: object  # the TrainState's structure: state(leaves) rebuilds it
    packed: object  # zoo.steps.PackedSums: how train_chunk's acc holds the sums
    steps_per_call: int = 1  # K: the most train steps one compiled call runs

    def state(self, leaves: list):
        return jax.tree.unflatten(self.treedef, leaves)

    def put_sums(self, sums: dict):
        """Host metric sums -> train_chunk's acc, placed."""
        return self.mode.put_replicated(self.packed.pack(sums))

    def get_sums(self, acc) -> dict:
        """train_chunk's acc -> host metric sums."""
        return self.packed.unpack(self.mode.get(acc))

    def train(self, state, acc, data, rows=None) -> tuple:
        """One call on a TrainState: (state, acc). The loop keeps leaves instead, saving two flattenings."""
        leaves, acc = self.train_chunk(jax.tree.leaves(state), acc, data, rows)
        return self.state(leaves), acc


class NonFiniteLoss(UserError):
    pass


def pruned_at(step: int, split: str, eval_metrics: dict) -> "TrialPruned":
    return TrialPruned(f"pruned at step {step} by the sweep's pruner ({split}: {metric_summary(eval_metrics)})")


class TrialPruned(Exception):
    """A sweep's pruner stopped this run at a periodic eval; its checkpoints and metrics so far are kept."""


def evaluate(state, compiled: Compiled, device_batches: list, expected_count: int) -> dict:
    acc = compiled.mode.put_replicated(compiled.zero_sums)
    for batch in device_batches:
        acc = compiled.eval_step(state, acc, batch)
    metrics = compiled.task.metrics(compiled.mode.get(acc))
    if metrics["count"] != expected_count:  # padding must never be counted, no example dropped
        raise AssertionError(f"eval counted {metrics['count']} examples, split has {expected_count}")
    return metrics


def divergence_advice(cfg=None) -> str:
    """What to change when a run's loss or parameters turn non-finite, `cfg` its whole config: the learning rate or
    gradient clipping, and the settings of this run that scale its updates or its loss besides them (under
    privacy=dpsgd the noise, whose std is privacy.noise_multiplier x privacy.l2_clip; synthetic_linear's targets,
    whose squares float32 cannot hold beyond a dataset.noise of ~1e19, at any learning rate; a decoupled weight
    decay past 2 / learning rate, which grows the parameters whatever the gradients)."""
    def setting(key):
        return None if cfg is None else OmegaConf.select(cfg, key)

    if setting("privacy.mode") == "dpsgd":
        advice = (f"lower optimizer.learning_rate or privacy.l2_clip (now {float(setting('privacy.l2_clip')):g}; the "
                  "noise's std is privacy.noise_multiplier x privacy.l2_clip), or set trainer.clip_norm")
    else:
        advice = "lower optimizer.learning_rate or set trainer.clip_norm"
    noise = setting("dataset.noise")
    if noise is not None:
        advice += f", or lower dataset.noise (now {float(noise):g}), which sets the targets' scale"
    decay, rate = setting("optimizer.weight_decay"), setting("optimizer.learning_rate")
    # each step's factor 1 - rate x decay is beyond -1; a rate above 1 is the cause to name, which the advice does
    if decay and rate and float(decay) * float(rate) > 2 and float(rate) <= 1:
        advice += (f", or lower optimizer.weight_decay (now {float(decay):g}: each step multiplies the parameters by "
                   f"1 - optimizer.learning_rate x optimizer.weight_decay = {1 - float(decay) * float(rate):g})")
    return advice


def check_finite(metrics: dict, step: int, last_finite, position=None, advice: str | None = None) -> None:
    """`position` (epoch, index in epoch) of the batch of `step` when every step is checked; `advice`: what to
    change (divergence_advice), by default the learning rate or gradient clipping."""
    if not math.isfinite(metrics["loss"]):
        where = f"at step {step} (batch {position[1]} of epoch {position[0]}; " if position else f"by step {step} ("
        last = "none" if last_finite is None else f"{last_finite:.4g}"
        raise NonFiniteLoss(f"training loss became non-finite {where}last finite loss: {last}); "
                            f"{advice or divergence_advice()}.")


def next_boundary(step: int, total: int, *periods: int) -> int:
    return min([total] + [(step // p + 1) * p for p in periods if p])


def chunk_length(cap: int, remaining: int, *periods: int) -> int:
    """Steps per compiled call: up to the nearest boundary, so no period needs a longer call than its own."""
    return max(1, min([cap, remaining] + [p for p in periods if p]))


def log_period(cfg) -> int:
    """Steps between train logs for trainer settings `cfg`: every step with trainer.nan_check=step, which checks
    each step's loss."""
    return 1 if cfg.nan_check == "step" else cfg.log_every


def call_length(cfg, steps_per_call: int, remaining: int, saving: bool = True) -> int:
    """Steps per train call of `fit` (each call is padded to it) for trainer settings `cfg`; `steps_per_call`
    is the cap when trainer.steps_per_call is null."""
    chunk_size = 1 if cfg.nan_check == "step" else (cfg.steps_per_call or steps_per_call)
    return chunk_length(chunk_size, remaining, log_period(cfg), cfg.eval_every, cfg.checkpoint_every if saving else 0)


def fit(state, compiled: Compiled, feed, eval_sets: dict, cfg, total_steps: int, logger, *, start_step: int = 0,
        sums=None, save=None, stop=None, on_eval=None, stop_early=None, eval_at_start=False, advice=None):
    """Run steps [start_step, total_steps): log every log_every, evaluate every eval_every steps.

    `feed` (zoo.data.feed.TrainFeed) hands each call its steps' data. A call runs to the next log, eval or
    checkpoint boundary, at most `steps_per_call` steps; shorter calls are padded with skipped steps to one
    length, so every call shares one compiled program and the host syncs only when it has something to write.
    `eval_sets` maps split -> (device batches, example count); the first entry is the periodic one.
    `sums` (host) continues a partial metric interval after a resume. `save(step, host state, sums, metrics)`
    runs every cfg.checkpoint_every steps and when `stop` becomes true, after which the loop returns early.
    `on_eval(step, eval metrics)` returning true (a sweep's pruner) saves and raises TrialPruned.
    `stop_early(step, eval metrics)` returning true (early stopping) saves and ends the run there; with it
    every periodic eval is also checkpointed, so the best one can be restored.
    `eval_at_start`: the periodic eval due at start_step was not made (the run resumed from ended there).
    `advice`: what a non-finite loss tells to change (divergence_advice of the run's config).
    Returns (state, last logged train metrics, examples/s, last step run).
    """
    mode = compiled.mode
    log_every = log_period(cfg)
    checkpoint_every = cfg.checkpoint_every if save else 0
    eval_every = cfg.eval_every  # config reads cost ~14 us each: keep them out of the step loop
    each_step = cfg.nan_check == "step"
    periodic_split = next(iter(eval_sets))
    length = call_length(cfg, compiled.steps_per_call, total_steps - start_step, saving=bool(save))
    zeros = compiled.put_sums(compiled.zero_sums)  # not donated by the train call: reused every interval
    acc = zeros if sums is None else compiled.put_sums(sums)
    step, last_logged, train_metrics, last_finite, ended = start_step, start_step, {}, None, False
    t_start = t_log = time.perf_counter()
    leaves = jax.tree.leaves(state)  # what the train call takes and returns; the state is rebuilt where needed

    def call_args(step):  # (k, the data of steps [step, step + k))
        k = min(length, next_boundary(step, total_steps, log_every, eval_every, checkpoint_every) - step)
        return k, feed.args(step, k, pad_to=length)

    if eval_at_start and eval_every and step % eval_every == 0 and step < total_steps:
        batches, count = eval_sets[periodic_split]
        eval_metrics = evaluate(compiled.state(leaves), compiled, batches, count)
        if not logged_eval(logger, step, periodic_split):  # a rerun after a kill past it has its row already
            logger.log(step, periodic_split, eval_metrics)
        if stop_early is not None and stop_early(step, eval_metrics):
            if save:  # the step's checkpoint holds the counters from before this eval: it now ends the run
                save(step, mode.get(compiled.state(leaves)), compiled.get_sums(acc), eval_metrics, replace=True)
            return compiled.state(leaves), {}, 0.0, step
    upcoming = call_args(step) if step < total_steps else None
    while step < total_steps:
        k, args = upcoming
        leaves, acc = compiled.train_chunk(leaves, acc, *args)
        step += k
        # the next call's indices are prepared while this one runs, not between the two
        upcoming = call_args(step) if step < total_steps else None
        eval_metrics = None
        if step % log_every == 0 or step == total_steps:
            interval = compiled.task.metrics(compiled.get_sums(acc))  # the routine host sync
            acc = zeros
            if interval["count"]:  # none under DP-SGD when every sample of the interval was empty: no row
                check_finite(interval, step, last_finite, feed.position(step - 1) if each_step else None, advice)
                train_metrics, last_finite = interval, interval["loss"]
                now = time.perf_counter()
                examples_per_s = (step - last_logged) * feed.batch_size / max(now - t_log, 1e-9)
                logger.log(step, "train", {**train_metrics, "examples_per_s": examples_per_s})
                logger.progress(step, train_metrics["loss"], examples_per_s)
                t_log, last_logged = now, step
        if eval_every and step % eval_every == 0 and step < total_steps:
            batches, count = eval_sets[periodic_split]
            eval_metrics = evaluate(compiled.state(leaves), compiled, batches, count)
            logger.log(step, periodic_split, eval_metrics)
            ended = stop_early is not None and stop_early(step, eval_metrics)
        pruned = on_eval is not None and eval_metrics is not None and on_eval(step, eval_metrics)
        checkpoint_due = (checkpoint_every and step % checkpoint_every == 0) or (stop_early and eval_metrics)
        stopping = agree_on_stop(stop)
        if save and step < total_steps and (checkpoint_due or stopping or pruned or ended):
            # a checkpoint taken only because of a stop carries no eval metrics: it must not compete for the best
            # kept one, which then stays the uninterrupted run's
            scored = eval_metrics if checkpoint_due or pruned or ended else None
            save(step, mode.get(compiled.state(leaves)), compiled.get_sums(acc), scored)
        if pruned:
            raise pruned_at(step, periodic_split, eval_metrics)
        if stopping or ended:
            break
    examples_per_s = (step - start_step) * feed.batch_size / max(time.perf_counter() - t_start, 1e-9)
    return compiled.state(leaves), train_metrics, examples_per_s, step


def logged_eval(logger, step: int, split: str) -> bool:
    """Whether the log kept from before this command holds the (periodic) eval of `split` at `step`."""
    return any(r["step"] == step and r["split"] == split for r in getattr(logger, "history", ()))


def total_steps_for(cfg, steps_per_epoch: int, warn: bool = True) -> int:
    """trainer.max_steps shortens a run; it never lengthens one past trainer.epochs (`warn`: say so)."""
    total = cfg.epochs * steps_per_epoch
    if warn and cfg.max_steps and cfg.max_steps > total:
        log.warning("trainer.max_steps=%d is more than trainer.epochs=%d give (%d steps, %d an epoch): the run "
                    "trains %d steps; raise trainer.epochs to train longer", cfg.max_steps, cfg.epochs, total,
                    steps_per_epoch, total)
    return min(total, cfg.max_steps) if cfg.max_steps else total


def metric_summary(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
