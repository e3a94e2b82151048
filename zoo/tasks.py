"""Losses and metrics as weighted *sums* per batch; the host divides once, so eval is exact."""
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from zoo.config import OBJECTIVES, default_objective


def classification_sums(logits, labels, mask) -> dict:
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=-1)[:, 0]
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return {"loss_sum": jnp.sum(nll * mask), "correct": jnp.sum(correct * mask), "count": jnp.sum(mask)}


def regression_sums(predictions, targets, mask) -> dict:
    err = predictions - targets  # (B, outputs)
    m = mask[:, None]
    return {
        "loss_sum": jnp.sum(err**2 * m),  # squared error summed over outputs
        "abs_err_sum": jnp.sum(jnp.abs(err) * m),
        "y_sum": jnp.sum(targets * m, axis=0),  # (outputs,) for R^2 without a second pass
        "y_sq_sum": jnp.sum(targets**2 * m, axis=0),
        "count": jnp.sum(mask),
    }


def classification_metrics(sums: dict) -> dict:
    n = float(sums["count"])
    if n == 0:  # DP-SGD steps whose Poisson samples held no example: nothing to average
        return {"loss": float("nan"), "accuracy": float("nan"), "count": 0}
    return {"loss": float(sums["loss_sum"]) / n, "accuracy": float(sums["correct"]) / n, "count": int(n)}


SST_RESOLUTION = 1e-5


def regression_metrics(sums: dict) -> dict:
    n = float(sums["count"])
    if n == 0:  # as above
        return {"loss": float("nan"), "mse": float("nan"), "mae": float("nan"), "r2": float("nan"), "count": 0}
    y_sum, y_sq = np.asarray(sums["y_sum"], np.float64), np.asarray(sums["y_sq_sum"], np.float64)
    sse = float(sums["loss_sum"])
    sst = float(np.sum(y_sq - y_sum**2 / n))
    # The float32 sums carry ~1e-7 of sum(y^2) in rounding: an SST near that (one example, constant targets,
    # or a mean thousands of times the spread) is rounding, not variance, and R^2 of it would be noise.
    resolved = sst > SST_RESOLUTION * float(np.sum(y_sq))
    return {"loss": sse / n, "mse": sse / (n * y_sum.size), "mae": float(sums["abs_err_sum"]) / (n * y_sum.size),
            "r2": 1.0 - sse / sst if resolved else float("nan"), "count": int(n)}


@dataclass(frozen=True)
class Task:
    sums: Callable  # (outputs, targets, mask) -> dict of sums
    metrics: Callable  # host: dict of summed sums -> dict of floats
    objective: str  # default metric a sweep optimises (zoo.config.OBJECTIVES)

    def optimized(self, cfg):
        """What a sweeper optimises: optimized_metric ('validation/accuracy'; a list of names for a multi-objective
        sweep), else this task's objective on validation, or on test without a validation split."""
        return cfg.optimized_metric or default_objective(cfg)


TASKS = {
    "classification": Task(classification_sums, classification_metrics, OBJECTIVES["classification"]),
    "regression": Task(regression_sums, regression_metrics, OBJECTIVES["regression"]),
}
