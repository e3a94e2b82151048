"""SIGTERM or Ctrl-C ends a multirun after the job it stopped, with one sentence and exit code 128 + signal. One
that reached a job only while it finished (it completed) ends the sweep before its next job; with none left,
the sweep is complete and ends as one (exit 0).

The train loop saves the stopped job's checkpoint and returns; without this callback the sweeper would record
that job as failed and start the next one. Rerunning the same multirun command (same hydra.sweep.dir)
resumes every job from its own checkpoint.
"""
import contextlib
import os
import signal
import socket
import sys

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from zoo import preemption

IN_PROCESS_LAUNCHERS = ("BasicLauncher", "PopulationLauncher")  # their jobs end with the sweep's process
_deferred = False
_study_in_memory = False  # the sweep's Optuna study lives in memory: no rerun continues it


@contextlib.contextmanager
def deferred():
    """A population's jobs all stop at once: its launcher ends the sweep after the last of them is handed back."""
    global _deferred
    _deferred = True
    try:
        yield
    finally:
        _deferred = False


def end_sweep_if_stopped(job_return=None) -> None:
    signum = preemption.received()
    if signum is None:
        return
    stopped = getattr(job_return, "_return_value", None)
    known = isinstance(stopped, preemption.Preempted)
    if not known and job_return is not None and job_return.status == JobStatus.COMPLETED:
        return  # it completed: the sweep ends before its next job (end_sweep_before_next_job), if it has one
    at = f" at step {stopped.step}" if known else ""
    if known and not stopped.saved:
        outcome = ("checkpoint.enabled=false, so nothing was saved — rerunning the same multirun command (same "
                   "hydra.sweep.dir) starts the jobs it stopped over.")
    elif known and getattr(stopped, "in_memory", False):
        outcome = f"every job it stopped saved its checkpoint, but {preemption.STUDY_IN_MEMORY}."
    else:
        outcome = ("every job it stopped saved its checkpoint — rerun the same multirun command (same "
                   "hydra.sweep.dir) to resume the sweep.")
    print(f"error: stopped by {signal.Signals(signum).name}{at}; {outcome}", file=sys.stderr)
    sys.exit(128 + signum)


def end_sweep_before_next_job() -> None:
    """A signal whose jobs all completed (it came while they finished) ends the sweep before it starts another."""
    signum = preemption.received()
    if signum is None:
        preemption.job_starts()
        return
    rest = (f", but {preemption.STUDY_IN_MEMORY}" if _study_in_memory
            else " — rerun the same multirun command (same hydra.sweep.dir) to run the rest")
    print(f"error: stopped by {signal.Signals(signum).name}; the jobs it reached completed, and the sweep ends "
          f"before its next job{rest}.", file=sys.stderr)
    sys.exit(128 + signum)


class EndSweepOnSignal(Callback):
    """conf: hydra.callbacks.end_sweep_on_signal, listed first so that on a job's end it runs last (Hydra
    notifies end events in reverse order): the sweep summary and failure.json are written before it exits.
    It acts in the process that runs the sweep: a single run finishes (or stops) on its own, and a job a
    launcher runs in another process (submitit) returns its outcome to that one."""

    def __init__(self) -> None:
        self.sweep_process = None  # (host, pid) of the process that started the multirun

    def on_multirun_start(self, config, **kwargs) -> None:
        self.sweep_process = _this_process()
        global _study_in_memory
        _study_in_memory = preemption.study_in_memory(config.hydra)
        preemption.forget()
        preemption.sweep_runs_jobs_here(runs_jobs_here(config))
        if not runs_jobs_here(config):
            signal.signal(signal.SIGTERM, _end_waiting_sweep)

    def on_job_start(self, config, **kwargs) -> None:
        if self.sweep_process == _this_process() and not _deferred:
            end_sweep_before_next_job()

    def on_job_end(self, config, job_return, **kwargs) -> None:
        if self.sweep_process == _this_process() and not _deferred:
            end_sweep_if_stopped(job_return)


def _this_process() -> tuple:
    return socket.gethostname(), os.getpid()  # a job on another host may have the sweep's pid


def runs_jobs_here(config) -> bool:
    """Whether the sweep's launcher runs its jobs in the sweep's own process (not submitit, say)."""
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
    return target.rsplit(".", 1)[-1] in IN_PROCESS_LAUNCHERS


def _end_waiting_sweep(signum, frame) -> None:
    """SIGTERM to a sweep whose jobs run in processes of their own: it only waits for them, so it ends now, in one
    line as a stopped sweep does, instead of dying without a word. The jobs are not its to stop."""
    print(f"error: stopped by {signal.Signals(signum).name}; its jobs run in processes of their own and end on "
          "their own (a job stopped too saves its checkpoint) — once they have, rerun the same multirun command "
          "(same hydra.sweep.dir) to resume the sweep.", file=sys.stderr, flush=True)
    os._exit(128 + signum)  # at once: the launcher's wait holds no state of the sweep worth finishing
