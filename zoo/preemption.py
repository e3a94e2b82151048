"""SIGTERM / SIGINT ask the loop to stop after the current step, save, and exit; a second Ctrl-C aborts."""
import contextlib
import os
import signal
import threading

from zoo.errors import UserError
from zoo.startup import Terminated, stops_on_sigterm_as_on_ctrl_c


# a stopped sweep whose Optuna study lived in memory: a rerun in its hydra.sweep.dir is refused (numbered job
# directories) or starts a new study, so its stop asks for no rerun
STUDY_IN_MEMORY = ("hydra.sweeper.storage=null kept the sweep's Optuna study in memory, so it ended with this command "
                   "and no rerun continues it; for a sweep that a rerun resumes, choose a new hydra.sweep.dir and set "
                   "hydra.sweeper.storage=sqlite:///${hydra.sweep.dir}/optuna.db")


def study_in_memory(hydra_cfg) -> bool:
    """Whether the multirun of `hydra_cfg` (a job's hydra node) is a zoo Optuna sweep without storage."""
    from omegaconf import OmegaConf

    if hydra_cfg is None:
        return False
    target = str(OmegaConf.select(hydra_cfg, "sweeper._target_", default="") or "")
    return target.endswith(".ZooOptunaSweeper") and OmegaConf.select(hydra_cfg, "sweeper.storage", default="") is None


class Preempted(UserError):
    def __init__(self, step: int, signum: int, run_dir: str, sweep_dir: str | None = None, saved: bool = True,
                 resume_never: bool = False, setting: str = "hydra.run.dir", in_memory: bool = False):
        """`resume_never`: the run was started with trainer.resume=never, which refuses its own checkpoints.
        `setting`: the one that put the run in `run_dir` (paths.output_dir where set apart from hydra.run.dir).
        `in_memory`: its sweep's Optuna study was kept in memory (study_in_memory)."""
        self.step, self.signum, self.run_dir, self.exit_code = step, signum, run_dir, 128 + signum
        self.sweep_dir, self.saved, self.resume_never, self.setting = sweep_dir, saved, resume_never, setting
        self.in_memory = in_memory
        stopped = f"stopped by {signal.Signals(signum).name} at step {step}"
        if not saved:
            super().__init__(f"{stopped}; checkpoint.enabled=false, so nothing was saved and rerunning starts over")
            return
        if sweep_dir and in_memory:
            super().__init__(f"{stopped}; the checkpoint is saved, but {STUDY_IN_MEMORY}")
            return
        how = (f"rerun the same multirun command (hydra.sweep.dir={sweep_dir}) to resume the sweep" if sweep_dir
               else f"resume with the same command, trainer.resume=auto instead of never, and {setting}={run_dir}"
               if resume_never else f"resume with the same command and {setting}={run_dir}")
        super().__init__(f"{stopped}; the checkpoint is saved — {how}")

    def __reduce__(self):  # a launcher in another process (submitit) sends it back pickled
        return type(self), (self.step, self.signum, self.run_dir, self.sweep_dir, self.saved, self.resume_never,
                            self.setting, self.in_memory)


def preempted(step: int, signum: int, run_dir: str, hydra_cfg=None, saved: bool = True,
              resume_never: bool = False) -> Preempted:
    """The stop of the run in `run_dir`, whose Hydra node is `hydra_cfg` (default: the current job's, if any): a
    multirun's job is resumed by rerunning its sweep, so its message says that. `saved`: whether the run writes
    checkpoints at all; `resume_never`: whether it was started with trainer.resume=never (its rerun needs auto)."""
    from hydra.core.hydra_config import HydraConfig

    from zoo.cli import in_multirun, run_dir_setting  # zoo.cli imports this module

    if not in_multirun(hydra_cfg):  # paths.output_dir set apart from hydra.run.dir: a new hydra.run.dir finds it
        return Preempted(step, signum, os.path.abspath(run_dir), saved=saved, resume_never=resume_never,
                         setting=run_dir_setting(run_dir))
    hydra_cfg = hydra_cfg if hydra_cfg is not None else HydraConfig.get()
    return Preempted(step, signum, os.path.abspath(run_dir), os.path.abspath(hydra_cfg.sweep.dir), saved,
                     in_memory=study_in_memory(hydra_cfg))


class StopFlag:
    def __init__(self):
        self.signum = None

    def __bool__(self):
        return self.signum is not None


_received = None  # the last stop signal this process handled, for a sweep to end after the job it stopped


def received():
    """The signal number of the last SIGTERM / SIGINT a train loop handled since `forget()`, or None."""
    return _received


def forget() -> None:
    global _received
    _received = None


_sweep_here = False  # this process runs a multirun's jobs itself (zoo.sweeps.stop_on_signal sets it)
_default_sigterm = None  # the SIGTERM handler a job's set-up keeps, while the one between jobs remembers


def sweep_runs_jobs_here(here: bool) -> None:
    global _sweep_here
    _sweep_here = here


def _remember_until_the_next_job(signum, frame) -> None:
    """A SIGTERM once a sweep's job has trained (its outputs closing, the job handed back and summarised): its
    results are written, so the sweep ends before its next job (exit 143) or, with none left, as a complete one
    (exit 0), its summary written; killed here, it ended without a word or its summary. A second one ends it
    at once."""
    global _received
    _received = _received or signum
    signal.signal(signal.SIGTERM, _default_sigterm)


def job_starts() -> None:
    """A sweep's next job starts: SIGTERM during its set-up keeps its default (see interrupts_remembered)."""
    if _default_sigterm is not None and threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is _remember_until_the_next_job:
        signal.signal(signal.SIGTERM, _default_sigterm)


_unseen_interrupt = None  # a Ctrl-C before the train loop whose KeyboardInterrupt may have been lost


@contextlib.contextmanager
def interrupts_remembered():
    """Ctrl-C raises KeyboardInterrupt as usual, and is remembered until a train loop starts. Raised inside a
    garbage-collection callback (JAX runs one while compiling) Python only prints it and goes on: the loop then
    stops at its first call boundary (log, eval or checkpoint step) instead of training to the end. (A single run,
    or a command that reads runs, stops on SIGTERM as on Ctrl-C, with zoo.startup.Terminated; a sweep's job keeps
    SIGTERM's default before its loop: the process ends at once, having trained nothing yet.)"""
    global _unseen_interrupt
    _unseen_interrupt = None
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        global _unseen_interrupt
        _unseen_interrupt = signum
        raise interrupt_of(signum)

    # a single run or a command that reads runs stops on SIGTERM as on Ctrl-C (zoo.startup.stop_on_sigterm_as_on_ctrl_c)
    signals = (signal.SIGINT, signal.SIGTERM) if stops_on_sigterm_as_on_ctrl_c() else (signal.SIGINT,)
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, h in previous.items():
            if signal.getsignal(s) is handler:  # not one the task set since: a completed write's (zoo.cli)
                signal.signal(s, h)
        _unseen_interrupt = None


def interrupt_of(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def raise_a_lost_interrupt() -> None:
    """A Ctrl-C (or a reading command's SIGTERM) whose exception Python dropped (see interrupts_remembered)
    stops the command here: eval.py, export.py and predict.py call it before they write their results, which they
    wrote and ended with 0 as if nothing had stopped them."""
    global _unseen_interrupt
    if _unseen_interrupt is not None:
        signum, _unseen_interrupt = _unseen_interrupt, None
        raise interrupt_of(signum)


@contextlib.contextmanager
def stop_on_signals():
    global _unseen_interrupt, _received, _default_sigterm
    flag = StopFlag()
    if _unseen_interrupt is not None:  # a Ctrl-C that reached no handler of ours: stop as if it came now
        flag.signum = _received = _unseen_interrupt
        _unseen_interrupt = None
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signal handlers can only be installed from the main thread
        return

    def handler(signum, frame):
        global _received
        if flag and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        flag.signum = _received = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if _sweep_here and not flag:  # the job trained: until the sweep's next job, a SIGTERM ends the sweep after it
            _default_sigterm = previous[signal.SIGTERM]
            signal.signal(signal.SIGTERM, _remember_until_the_next_job)
