"""Hydra callback for multiruns: failed jobs leave failure.json, and the sweep summary is always current.

Registered under `hydra.callbacks` in conf/train.yaml. The summary is rebuilt after every job, not only at
the end: Hydra's basic sweeper raises after a multirun with a failed job and then never calls on_multirun_end.
"""
import json
import logging
import os
import traceback

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from zoo import sweep_report
from zoo.errors import UserError

log = logging.getLogger(__name__)


def write_failure(job_dir: str, job_return: JobReturn) -> None:
    """failure.json: why this job has no results.json (a failed job is otherwise just a directory)."""
    error = job_return._return_value  # the exception; .return_value would re-raise it and print a second notice
    record = {"status": "failed", "error": type(error).__name__, "reason": str(error),
              "user_error": isinstance(error, UserError), "overrides": list(job_return.overrides or []),
              "traceback": "".join(traceback.format_exception(error))}
    os.makedirs(job_dir, exist_ok=True)
    with open(os.path.join(job_dir, "failure.json"), "w") as f:
        json.dump(record, f, indent=2)


class SweepSummary(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # Optuna opens sqlite:///<sweep dir>/optuna.db before the launcher creates the sweep dir.
        os.makedirs(config.hydra.sweep.dir, exist_ok=True)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        if job_return.status == JobStatus.FAILED:
            write_failure(config.hydra.runtime.output_dir, job_return)
        s = _summarise(config.hydra.sweep.dir)
        if s is not None:
            failed = sum(r["status"] == "failed" for r in s["rows"])
            log.info("sweep so far: %d jobs, %d failed. %s", len(s["rows"]), failed, sweep_report.best_text(s))

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        s = _summarise(config.hydra.sweep.dir)
        if s is not None:
            print(f"Sweep summary: {os.path.join(s['root'], 'summary.md')}")
            print(sweep_report.best_text(s))


def _summarise(sweep_dir: str):
    try:
        return sweep_report.write_summary(sweep_dir)
    except Exception as e:  # noqa: BLE001 — a summary problem must never fail a trial or a finished sweep
        log.warning("could not write the sweep summary in %s: %s (rebuild it with `python -m zoo.sweep_report`)",
                    sweep_dir, e)
        return None
