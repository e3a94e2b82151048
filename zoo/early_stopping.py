"""Early stopping on the periodic eval: patience counted in evals without improving checkpoint.metric.

Its counters travel in each checkpoint's metadata, so a run resumed after a preemption counts on where it
stopped. The final metrics of a run with early stopping are those of its best checkpoint. An eval whose metric is
undefined (nan: r2 of a split with constant targets) is neither an improvement nor a bad eval; it is said once.
"""
import logging
import math

import jax
import numpy as np

from zoo.config import default_objective

log = logging.getLogger("zoo")


class EarlyStopping:
    def __init__(self, patience: int, min_delta: float, metric: str, mode: str, split: str = "test"):
        """`split`: the periodic eval's, named when the metric is undefined there."""
        self.patience, self.min_delta, self.metric, self.mode, self.split = patience, min_delta, metric, mode, split
        self.best = self.best_step = self.stopped_step = None
        self.bad_evals = 0
        self._said_undefined = False

    def update(self, step: int, metrics: dict) -> bool:
        """Record one periodic eval; True when the run should end here."""
        value = metrics[self.metric]
        if math.isnan(value):  # compared with anything it is never better, nor worse: it would stop the run as best
            self._say_undefined(step)
            return False
        self.best, self.best_step, self.bad_evals = self._counted(step, value)
        if self.bad_evals >= self.patience:
            self.stopped_step = step
            log.info("early stopping at step %d: %s has not improved by more than %g for %d evals (best %.4g at "
                     "step %d)", step, self.metric, self.min_delta, self.bad_evals, self.best, self.best_step)
        return self.stopped_step is not None

    def _say_undefined(self, step: int) -> None:
        if self._said_undefined:
            return
        self._said_undefined = True
        if self.metric == "r2":
            change = (f"set checkpoint.metric to one defined there (e.g. loss), or give the {self.split} split more "
                      "than one example and targets that vary (r2 divides by their variance)")
        else:  # an average over the split: the model's outputs on it are not finite
            change = (f"the model's outputs on the {self.split} split are not finite; lower optimizer.learning_rate or "
                      "set trainer.clip_norm")
        log.warning("checkpoint.metric=%s is undefined (nan) on the %s split at step %d: early stopping counts no such "
                    "eval and keeps none as the best checkpoint; %s.", self.metric, self.split, step, change)

    def _counted(self, step: int, value: float) -> tuple:
        """(best, best_step, bad_evals) once an eval of `value` at `step` is counted."""
        if self.best is None or math.isnan(self.best) or self._improves(value):  # nan: saved by an older version
            return value, step, 0
        return self.best, self.best_step, self.bad_evals + 1

    def _improves(self, value: float) -> bool:
        return value > self.best + self.min_delta if self.mode == "max" else value < self.best - self.min_delta

    def with_the_end(self, step: int, metrics: dict) -> dict:
        """state_dict() with the final state's eval at `step` counted as one more eval, as the run's report gives
        it: an improvement makes it the best, else one more bad eval (the run ends there either way)."""
        state, value = self.state_dict(), metrics[self.metric]
        if not math.isnan(value):
            state["best"], state["best_step"], state["bad_evals"] = self._counted(step, value)
        return state

    def state_dict(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "bad_evals": self.bad_evals,
                "stopped_step": self.stopped_step}

    def load_state_dict(self, saved: dict | None) -> None:
        if saved:
            self.best, self.best_step = saved["best"], saved["best_step"]
            self.bad_evals, self.stopped_step = saved["bad_evals"], saved["stopped_step"]


def early_stopping_for(cfg, checkpoint_settings: dict):
    stopping = cfg.trainer.early_stopping
    if stopping.patience is None:
        return None
    return EarlyStopping(stopping.patience, stopping.min_delta, checkpoint_settings["metric"],
                         checkpoint_settings["mode"], default_objective(cfg).split("/")[0])


def restore_best(ckpts, target: dict):
    """(step, host state) of the best checkpoint by checkpoint.metric, the one the run reports; the newest when
    the metric was undefined (nan) at every eval: the run then trained to its end."""
    ckpts.wait()  # the newest checkpoint may still be written in the background
    step = ckpts.best_step()
    if step is None:
        step = ckpts.steps()[-1]
    # shapes only: the arrays `target` was built from were donated to the train step long ago
    tree, _ = ckpts.restore(step, jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), target))
    return step, tree["state"]
