"""Optimizers are optax objects from `_target_`; schedule, clipping, weight averaging and gradient accumulation
are optax composition.

With `trainer.accumulate=N` a step is one micro-batch of `trainer.batch_size`: optax.MultiSteps averages N
micro-batch gradients and applies one update every N steps, so the schedule counts updates (total_steps / N).
"""
import re

import jax
import optax

from zoo.config import is_number
from zoo.ema import params_ema
from zoo.errors import UserError
from zoo.targets import raise_a_stop_it_hid, safe_instantiate, target_parameters


def no_periodic_eval(trainer, total_steps: int) -> bool:
    """Early stopping is on, and trainer.eval_every gives no eval before the run's last step (the final eval,
    which it does not count)."""
    return trainer.early_stopping.patience is not None and trainer.eval_every >= total_steps


def check_run_length(cfg, total_steps: int, steps_per_epoch: int) -> None:
    """Accumulation must end on an update: trailing micro-batches would be averaged and never applied. Early
    stopping needs periodic evals before the run's end, or it could neither stop the run nor choose a best
    checkpoint: the eval due at the last step is the final one, which it does not count (a patience of more evals
    than the run has is fine: it reports the best checkpoint without stopping)."""
    every = cfg.trainer.eval_every
    if no_periodic_eval(cfg.trainer, total_steps):
        # no eval_every is lower than 1: a one-step run has no periodic eval at all
        remedy = ("lower trainer.eval_every" if total_steps > 1 else "train more than one step (trainer.max_steps, "
                  "trainer.epochs) or leave out trainer.early_stopping.patience")
        raise UserError(f"trainer.early_stopping needs periodic evals before the run's end, and trainer.eval_every="
                        f"{every} gives none in the run's {total_steps} steps (the eval at step {total_steps} is the "
                        f"final one, which it does not count); {remedy}.")
    n = cfg.trainer.accumulate
    if total_steps % n:
        raise UserError(f"trainer.accumulate={n} does not divide the run's {total_steps} steps, so its last "
                        f"micro-batches would never be applied; {_run_lengths(cfg, total_steps, steps_per_epoch)}.")


def _run_lengths(cfg, total_steps: int, steps_per_epoch: int) -> str:
    """Advice that works when followed: trainer.max_steps never lengthens a run past trainer.epochs, so a longer
    run names the epochs it needs too; a run shorter than one update may instead lower trainer.accumulate."""
    n = cfg.trainer.accumulate
    lower = total_steps - total_steps % n
    upper, needed = lower + n, -(-(lower + n) // steps_per_epoch)  # the epochs that hold `upper` steps
    longer = f"{upper}" if needed <= cfg.trainer.epochs else f"{upper} with trainer.epochs raised to {needed}"
    if not lower:
        return f"lower trainer.accumulate to a divisor of {total_steps}, or set trainer.max_steps to {longer}"
    return f"set trainer.max_steps to {lower} or {longer}" if needed <= cfg.trainer.epochs else \
        f"set trainer.max_steps to {lower}, or to {longer}"


def learning_rate(cfg, total_steps: int, peak=None):
    """The rate optax is given: a float, or a schedule of the update count over the run's updates.

    `peak` replaces optimizer.learning_rate (a population member's rate, traced inside the shared program)."""
    updates = total_steps // cfg.trainer.accumulate
    peak = cfg.optimizer.learning_rate if peak is None else peak
    if cfg.schedule is None:
        return peak
    warmup = cfg.schedule.get("warmup_steps", 0)
    if warmup >= updates:
        length = f"{updates} steps"
        if updates != total_steps:
            length = f"{updates} updates ({total_steps} steps / trainer.accumulate)"
        raise UserError(f"schedule.warmup_steps={warmup} must be smaller than the run's {length}; "
                        "lower schedule.warmup_steps or train for more steps.")
    schedule = safe_instantiate(cfg.schedule, "schedule", _partial_=True)  # built here: peak may be traced
    if is_number(peak):
        return _build("schedule", cfg.schedule, schedule, peak_value=peak, decay_steps=max(updates, 1))
    # A traced peak: optax's schedules test their values in Python (`peak_value == 0`), so the schedule is built
    # for a peak of 1 with its other values in units of the peak, then scaled; optax's schedules are affine in
    # their values, so this is the same curve.
    relative = {k: v / peak for k, v in cfg.schedule.items()
                if k.endswith("_value") and k != "peak_value" and is_number(v)}  # others fail in _build, one sentence
    unit = _build("schedule", cfg.schedule, schedule, peak_value=1.0, decay_steps=max(updates, 1), **relative)
    return lambda count: peak * unit(count)


def _build(where: str, node, make, **kwargs):
    try:
        return make(**kwargs)
    except (TypeError, ValueError) as e:
        raise_a_stop_it_hid(e)  # a Ctrl-C that came while it was built stops the command, as the model's does
        raise UserError(f"could not build {where} from _target_={node.get('_target_')}: {e}") from None


def learning_rate_at(cfg, total_steps: int):
    """step -> the rate of the latest update applied by then (of the first one before any), on the host CPU."""
    rate, every = learning_rate(cfg, total_steps), cfg.trainer.accumulate
    if not callable(rate):
        return lambda step: float(rate)
    cpu = jax.local_devices(backend="cpu")[0]

    def at(step: int) -> float:
        with jax.default_device(cpu):  # a scalar op: not worth a trip to an accelerator
            return float(rate(max(step // every - 1, 0)))  # update k (0-based) uses rate(k)

    return at


def _integer_parameters(optimizer_cfg) -> set:
    """The optimizer factory's integer parameters (a factored dimension, a step count, a seed): an int default
    or an int annotation (`warmup_steps: Optional[int] = None`). They may decide shapes or Python branches, so
    they cannot be traced values."""
    parameters = target_parameters(optimizer_cfg)  # {} for a bad target: it fails its own run later, with its message
    return {name for name, p in parameters.items() if type(p.default) is int or _annotated_int(p.annotation)}


def _annotated_int(annotation) -> bool:
    """`int`, `Optional[int]`, `int | None` (as objects or, under postponed evaluation, as strings)."""
    text = annotation if isinstance(annotation, str) else repr(annotation)
    names = set(re.findall(r"[A-Za-z_][\w.]*", text.replace("typing.", ""))) - {"Optional", "Union", "None", "NoneType"}
    return names == {"int"} or annotation is int


def hyperparameters(cfg) -> dict:
    """What a population's members may each set differently: the optimizer's numeric settings but for its
    integer ones, and the model's dropout rate ({"optimizer": {name: value}, "dropout": rate})."""
    integers = _integer_parameters(cfg.optimizer)
    hyper = {"optimizer": {k: float(v) for k, v in cfg.optimizer.items()
                           if k != "_target_" and k not in integers and is_number(v)}}
    if is_number(cfg.model.get("dropout")):
        hyper["dropout"] = float(cfg.model.dropout)
    return hyper


def build_optimizer(cfg, total_steps: int, hyper: dict | None = None) -> optax.GradientTransformation:
    """`hyper` replaces the optimizer's numeric settings by traced values: then one compiled program updates
    every member of a population with its own, while each member's optimizer state keeps the solo layout."""
    hyper = dict(hyper or {})
    rate = learning_rate(cfg, total_steps, hyper.pop("learning_rate", None))
    make = safe_instantiate(cfg.optimizer, "optimizer", _partial_=True)
    tx = _build("optimizer", cfg.optimizer, make, **{**hyper, "learning_rate": rate})
    if cfg.trainer.clip_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(cfg.trainer.clip_norm), tx)
    if cfg.trainer.ema_decay is not None:  # inside MultiSteps: the average moves once per update
        tx = optax.chain(tx, params_ema(cfg.trainer.ema_decay))
    if cfg.trainer.accumulate > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=cfg.trainer.accumulate).gradient_transformation()
    return tx
