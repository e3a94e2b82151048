"""Hydra callback for multiruns: failed jobs leave failure.json, and the sweep summary is always current.

Registered under `hydra.callbacks` in conf/train.yaml. The table (summary.csv, summary.md) is rewritten after
every job, so it is current while a sweep runs; the plot (summary.png, a matplotlib figure costing more than the
table) is drawn at the end. Hydra's basic sweeper raises after a multirun with a failed job and then never calls
on_multirun_end, so from a job's failure on the plot is redrawn after every job too.
A job stopped by the sweep's pruner leaves a failure.json with status `pruned`; a rerun of the sweep that
completes a job removes its failure.json. Jobs a launcher ends back to back (a population's members, inside
`summary_after_batch()`) get one summary, after the last of them.
"""
import contextlib
import functools
import logging
import os
import shlex
import traceback

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from zoo import preemption
from zoo.errors import RunRefused, UserError, exit_with
from zoo.files import write_json, write_text
from zoo.loop import TrialPruned
from zoo.run_logger import draw_summary_plot
from zoo.sweeps import report
from zoo.sweeps.jobs import DamagedJob, jobs_text

log = logging.getLogger(__name__)
_batch = {"open": False, "last": None}  # last: the summary the batch's last ended job would have written


@contextlib.contextmanager
def summary_after_batch():
    """Jobs ending inside this block are summarised once, at its end: their results are all written before the
    first of them ends, so each summary in between would read and draw the same sweep again."""
    _batch.update(open=True, last=None)
    try:
        yield
    finally:
        last = _batch["last"]
        _batch.update(open=False, last=None)
        if last is not None:
            last()


def write_failure(job_dir: str, job_return: JobReturn) -> None:
    """failure.json: why this job has no results.json (a failed job is otherwise just a directory)."""
    error = job_return._return_value  # the exception; .return_value would re-raise it and print a second notice
    record = {"status": "pruned" if isinstance(error, TrialPruned) else "failed", "error": type(error).__name__,
              "reason": str(error), "user_error": isinstance(error, UserError),
              "overrides": list(job_return.overrides or []),
              "traceback": "".join(traceback.format_exception(error))}
    if isinstance(error, preemption.Preempted):  # the step it reached: the summary's steps cell
        record["step"] = error.step
    os.makedirs(job_dir, exist_ok=True)
    write_json(os.path.join(job_dir, "failure.json"), record)


OBJECTIVE_KEYS = ("optimized_metric", "dataset.validation_fraction")  # what decides a job's objective name
TASK_KEYS = ("dataset", "dataset.task")  # what decides it too where optimized_metric is null: the task's metric


def _refuse_another_objective(config: DictConfig) -> None:
    """A sweep dir whose jobs optimised another objective than this command's: its summary would rank both."""
    jobs = report.find_job_dirs(str(config.hydra.sweep.dir))
    if not jobs:
        return
    _refuse_another_sweeper(config)
    _refuse_another_study(config)
    # the same grid run again with another objective too: its finished jobs keep the record, and so the
    # objective, they were trained under
    overrides = OverridesParser.create().parse_overrides(OmegaConf.to_container(config.hydra.overrides.task))
    swept = {o.get_key_element().lstrip("+~") for o in overrides if o.is_sweep_override()}
    if swept & set(OBJECTIVE_KEYS) or (OmegaConf.select(config, "optimized_metric") is None and swept & set(TASK_KEYS)):
        return  # each job's objective is its own value of the swept key, not the config's
    try:
        theirs, ours = report.recorded_objective(jobs[0]), None
    except DamagedJob as e:  # its summary could not place that job either
        exit_with(UserError(str(e)))
    with contextlib.suppress(Exception):  # a config the jobs will refuse on their own
        ours = report.objective_name(config)
    if ours is not None and ours != theirs:
        exit_with(UserError(f"hydra.sweep.dir={config.hydra.sweep.dir} holds jobs that optimised {theirs}, and this "
                            f"sweep optimises {ours}; one summary cannot rank both, so choose a new hydra.sweep.dir."))


def _refuse_other_sweeps(sweep_dir: str) -> None:
    """A sweep dir above other sweeps (hydra.sweep.dir=multirun): its summary lists every job below it, theirs too."""
    for path, subdirs, files in os.walk(sweep_dir):
        if path != sweep_dir and "multirun.yaml" in files:
            exit_with(UserError(f"hydra.sweep.dir={sweep_dir} holds another sweep ({path}), whose jobs this sweep's "
                                "summary would rank with its own; choose a new hydra.sweep.dir."))
        if os.path.isfile(os.path.join(path, ".hydra", "overrides.yaml")):
            subdirs.clear()  # a job's own folders (checkpoints, tensorboard) hold no sweeps


def _refuse_another_sweeper(config: DictConfig) -> None:
    """A sweep dir of another sweeper's jobs (a grid over an Optuna study's): this sweep would replace its
    multirun.yaml, which the summary reads the plan and the search from, and rank both sweeps' jobs as one."""
    ours, theirs = OmegaConf.select(config, "hydra.sweeper._target_", default=None), None
    with contextlib.suppress(Exception):  # no multirun.yaml: nothing of its plan to lose
        theirs = OmegaConf.load(os.path.join(str(config.hydra.sweep.dir), "multirun.yaml")).hydra.sweeper._target_
    if ours is not None and theirs is not None and str(ours) != str(theirs):
        exit_with(UserError(f"hydra.sweep.dir={config.hydra.sweep.dir} holds the jobs of a sweep by another sweeper "
                            f"({str(theirs).rpartition('.')[2]}, this command's {str(ours).rpartition('.')[2]}), whose "
                            "multirun.yaml this sweep would replace and whose jobs its summary would rank with its "
                            "own; choose a new hydra.sweep.dir."))


def _refuse_another_study(config: DictConfig) -> None:
    """An Optuna study's jobs are numbered by its trials: another study's would share the numbers, the
    directories and the summary of the study the sweep dir holds."""
    ours, theirs = OmegaConf.select(config, "hydra.sweeper.study_name", default=None), None
    with contextlib.suppress(Exception):  # no multirun.yaml, or not an Optuna sweep's
        theirs = OmegaConf.load(os.path.join(str(config.hydra.sweep.dir), "multirun.yaml")).hydra.sweeper.study_name
    if ours is not None and theirs is not None and str(ours) != str(theirs):
        exit_with(UserError(f"hydra.sweep.dir={config.hydra.sweep.dir} holds the trials of study {theirs}, and this "
                            f"sweep runs study {ours}; one summary cannot rank both, so choose a new hydra.sweep.dir."))


class SweepSummary(Callback):
    def __init__(self) -> None:
        self.known = {}  # what report.collect need not read again: the objective, finished jobs' rows
        self.plot_each_job = False  # set by a failed job: the sweep may end without on_multirun_end
        # multirun.yaml before this command (None: none), this command's once its sweeper wrote it, and whether
        # every job of it so far was refused
        self.earlier_plan, self.own_plan, self.all_refused = None, None, True
        self.off = False  # the jobs keep no .hydra/ record, by which a summary finds them

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # Optuna opens sqlite:///<sweep dir>/optuna.db before the launcher creates the sweep dir.
        os.makedirs(config.hydra.sweep.dir, exist_ok=True)
        with contextlib.suppress(OSError):  # a new sweep dir
            self.earlier_plan = _read_text(_plan_path(config))
        subdir = OmegaConf.select(config, "hydra.output_subdir", default=".hydra")
        if subdir != ".hydra":  # it would list none of the jobs, and report that none completed
            self.off = True
            log.warning("no sweep summary: hydra.output_subdir=%s keeps the jobs' records%s, and a summary finds a "
                        "sweep's jobs and their overrides by <job dir>/.hydra/; leave hydra.output_subdir unset "
                        "for one", "null" if subdir is None else subdir,
                        " nowhere" if subdir is None else " elsewhere")
            return
        _refuse_other_sweeps(str(config.hydra.sweep.dir))
        _refuse_another_objective(config)

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        """A job run again in its directory (a resumed sweep) ends anew: what was read there before is stale."""
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        if self.own_plan is None:
            with contextlib.suppress(OSError):  # a sweeper that writes none
                self.own_plan = _read_text(_plan_path(config))
        job_dir, rows = os.path.abspath(config.hydra.runtime.output_dir), self.known.get("rows", {})
        for known in (rows, self.known.get("names", {})):
            for key in [k for k in known if os.path.abspath(k) == job_dir]:
                del known[key]

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:
            return
        if self.off:  # a failed job still says why in its failure.json
            self.all_refused &= isinstance(job_return._return_value, RunRefused)
            if job_return.status == JobStatus.FAILED and not isinstance(job_return._return_value, RunRefused):
                write_failure(config.hydra.runtime.output_dir, job_return)
            return
        job_dir = config.hydra.runtime.output_dir
        if job_return.status == JobStatus.FAILED:
            # a job refused to train on the run its directory holds (a finished one, or a stopped one with other
            # settings) leaves that run's directory as it was, its failure.json (a stop's) too: the refusal is on
            # the console
            refused = isinstance(job_return._return_value, RunRefused)
            self._keep_the_plan_of_jobs_that_ran(config, refused)
            if not (refused or os.path.exists(os.path.join(job_dir, "results.json"))):
                write_failure(job_dir, job_return)
            # a pruned trial is routine: sweepers that prune go on and end with on_multirun_end
            self.plot_each_job |= not isinstance(job_return._return_value, TrialPruned)
        else:  # a stopped job its sweep's rerun has completed: the stop's failure.json no longer holds
            self._keep_the_plan_of_jobs_that_ran(config, refused=False)
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(job_dir, "failure.json"))
        report_now = functools.partial(self._report_so_far, str(config.hydra.sweep.dir))
        if _batch["open"]:
            _batch["last"] = report_now
        else:
            report_now()

    def batch_refused(self, config: DictConfig) -> None:
        """A launcher refused a batch before any of its jobs started (hydra/launcher=population's settings): its
        jobs count as refused ones for the plan the sweep dir keeps; a sweep dir that held none is left without
        one."""
        if not self.off:
            self._keep_the_plan_of_jobs_that_ran(config, refused=True)
        if self.all_refused and self.earlier_plan is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(_plan_path(config))

    def _keep_the_plan_of_jobs_that_ran(self, config: DictConfig, refused: bool) -> None:
        """The sweeper rewrites multirun.yaml before the first job. While every job of this command was refused
        by the run its directory holds (another grid in a finished sweep's dir), the sweep's own plan is put back:
        its summary's swept keys and job count stay those of the jobs it lists."""
        self.all_refused &= refused
        plan = self.earlier_plan if self.all_refused else self.own_plan
        path = _plan_path(config)
        with contextlib.suppress(OSError):  # a sweep dir that cannot be read: the summary warns of it itself
            if plan is not None and _read_text(path) != plan:
                write_text(path, plan)
                self.known.pop("plan", None)  # read from multirun.yaml once, by report.collect

    def _report_so_far(self, sweep_dir: str) -> None:
        ending = preemption.received() is not None  # a stop signal ends the sweep after this job: no multirun end
        s = _summarise(sweep_dir, self.plot_each_job or ending, self.known)
        if s is not None:
            counts = {st: sum(r["status"] == st for r in s["rows"]) for st in ("failed", "pruned", "stopped")}
            stopped = f", {counts['stopped']} stopped" if counts["stopped"] else ""
            with _out_of_log_files():
                log.info("sweep so far: %s, %d failed, %d pruned%s. %s", jobs_text(len(s["rows"])), counts["failed"],
                         counts["pruned"], stopped, report.best_text(s))

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if self.off:
            return
        s = _summarise(config.hydra.sweep.dir, True, self.known)
        if s is not None:
            with contextlib.suppress(OSError):  # a stdout that cannot be written: the console log said so already
                print(f"Sweep summary: {os.path.join(s['root'], 'summary.md')}\n{report.best_text(s)}", flush=True)


class _NotThisLogger(logging.Filter):
    def filter(self, record) -> bool:
        return record.name != log.name


@contextlib.contextmanager
def _out_of_log_files():
    """The sweep's progress line reaches the console only: logged at a job's end, it would otherwise close that
    job's train.log (Hydra's job logging still writes there), which ends as its single run's does."""
    keep_out = _NotThisLogger()
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for handler in files:
        handler.addFilter(keep_out)
    try:
        yield
    finally:
        for handler in files:
            handler.removeFilter(keep_out)


def _plan_path(config: DictConfig) -> str:
    return os.path.join(str(config.hydra.sweep.dir), "multirun.yaml")


def _read_text(path: str) -> str:
    with open(path, newline="") as f:
        return f.read()


def _summarise(sweep_dir: str, plot: bool, known: dict):
    try:  # summary.png is drawn after the jobs' curves, by the process that draws those
        return report.write_summary(sweep_dir, plot, known, draw_plot=draw_summary_plot)
    except report.MixedObjectives as e:  # rebuilding it by hand would be refused the same way
        log.warning("no sweep summary: %s", e)
        return None
    except Exception as e:  # noqa: BLE001 — a summary problem must never fail a trial or a finished sweep
        # the script by its path: `python -m zoo.sweeps.report` finds zoo only from the repository root
        command = shlex.join(["python", os.path.abspath(report.__file__), sweep_dir])
        log.warning("could not write the sweep summary in %s: %s (rebuild it with `%s`)", sweep_dir, e, command)
        return None
