"""Optimizers are optax objects from `_target_`; schedule and clipping are optax composition."""
import optax

from zoo.errors import UserError
from zoo.targets import safe_instantiate


def build_optimizer(cfg, total_steps: int) -> optax.GradientTransformation:
    learning_rate = cfg.optimizer.learning_rate
    if cfg.schedule is not None:  # a schedule builder taking the peak rate and the run length
        warmup = cfg.schedule.get("warmup_steps", 0)
        if warmup >= total_steps:
            raise UserError(f"schedule.warmup_steps={warmup} must be smaller than the run's {total_steps} steps; "
                            "lower schedule.warmup_steps or train for more steps.")
        learning_rate = safe_instantiate(cfg.schedule, "schedule", peak_value=learning_rate,
                                         decay_steps=max(total_steps, 1))
    tx = safe_instantiate(cfg.optimizer, "optimizer", learning_rate=learning_rate)
    if cfg.trainer.clip_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(cfg.trainer.clip_norm), tx)
    return tx
