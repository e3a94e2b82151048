"""Early stopping on the periodic eval: patience counted in evals without improving checkpoint.metric.

Its counters travel in each checkpoint's metadata, so a run resumed after a preemption counts on where it
stopped. The final metrics of a run with early stopping are those of its best checkpoint.
"""
import logging

import jax
import numpy as np

log = logging.getLogger("zoo")


class EarlyStopping:
    def __init__(self, patience: int, min_delta: float, metric: str, mode: str):
        self.patience, self.min_delta, self.metric, self.mode = patience, min_delta, metric, mode
        self.best = self.best_step = self.stopped_step = None
        self.bad_evals = 0

    def update(self, step: int, metrics: dict) -> bool:
        """Record one periodic eval; True when the run should end here."""
        value = metrics[self.metric]
        if self.best is None or self._improves(value):
            self.best, self.best_step, self.bad_evals = value, step, 0
        else:
            self.bad_evals += 1
        if self.bad_evals >= self.patience:
            self.stopped_step = step
            log.info("early stopping at step %d: %s has not improved by more than %g for %d evals (best %.4g at "
                     "step %d)", step, self.metric, self.min_delta, self.bad_evals, self.best, self.best_step)
        return self.stopped_step is not None

    def _improves(self, value: float) -> bool:
        return value > self.best + self.min_delta if self.mode == "max" else value < self.best - self.min_delta

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
                         checkpoint_settings["mode"])


def restore_best(ckpts, target: dict):
    """(step, host state) of the best checkpoint by checkpoint.metric, the one the run reports."""
    ckpts.wait()  # the newest checkpoint may still be written in the background
    step = ckpts.best_step()
    # shapes only: the arrays `target` was built from were donated to the train step long ago
    tree, _ = ckpts.restore(step, jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), target))
    return step, tree["state"]
