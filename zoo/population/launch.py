"""What `hydra/launcher=population` does with a batch of a sweep's jobs.

Jobs of a task function that trains populations (train.py's, see `trains_populations`) are grouped by
zoo.population.grouping; each group of two or more trains as one program, then every job is handed back as
Hydra's own run_job would run it, with a task function that returns its outcome, so job directories,
numbering, callbacks (the sweep summary) and return values are those of Hydra's basic launcher. Any other
task function, a group of one, and a group the task says trains faster job by job (`trains_alone`: convnets on
a CPU), runs job by job through run_job itself, exactly like the basic launcher.
"""
import contextlib
import copy
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from hydra import version
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (JobReturn, JobRuntime, JobStatus, _flush_loggers, _save_config, configure_log,
                              env_override, filter_overrides, run_job, setup_globals)
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from zoo import preemption
from zoo.cli import jobs_dir_blocked, release_output_dir
from zoo.errors import UserError, exit_with
from zoo.sweeps.stop_on_signal import deferred, end_sweep_before_next_job, end_sweep_if_stopped

log = logging.getLogger(__name__)


def trains_populations(train_population, trains_alone=None):
    """Marks a Hydra task function whose jobs `train_population(cfgs, hydra_cfgs)` may train together;
    `trains_alone(cfg)` gives a reason why a group of such jobs trains faster job by job, or None."""
    def mark(task_function):
        task_function.train_population = train_population
        task_function.trains_alone = trains_alone
        return task_function

    return mark


def launch(hydra_context, config, task_function, job_overrides, initial_job_idx: int, max_size: int) -> list:
    setup_globals()
    end_sweep_before_next_job()  # a signal that came while the last batch's jobs finished: they all completed
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    log.info(f"Launching {len(job_overrides)} jobs locally")
    jobs = []
    for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
        log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = sweep_config.hydra.job.num = idx
        jobs.append(sweep_config)
    for job in jobs:  # before any job of the batch trains: a population trains several at once
        blocked = jobs_dir_blocked(job)
        if blocked is not None:
            _refuse_batch(blocked, hydra_context, config)
    trainer = getattr(task_function, "train_population", None)
    groups = [[i] for i in range(len(jobs))]
    if trainer is not None:
        from zoo.config import MAX_CPU_DEVICES
        from zoo.parallel import cpu_devices_for_populations
        from zoo.population.grouping import group_indices

        prepared = [_prepare(job) for job in jobs]
        # before JAX starts; a count out of range (parallel.cpu_devices=100000, whose devices JAX would take minutes
        # to make) is left to its jobs, which refuse it as under the basic launcher
        asked = [p.task_cfg.parallel.cpu_devices or 0 for p in prepared]
        cpu_devices_for_populations(max([n for n in asked if 0 < n <= MAX_CPU_DEVICES], default=0))
        groups = _one_dir_each(group_indices([p.task_cfg for p in prepared], max_size), prepared)
        groups = _alone_where_hydra_sets_up(groups, jobs)
        groups = _apart_where_faster(task_function.trains_alone, groups, prepared, jobs)
        _check_settings([prepared[g[0]].task_cfg for g in groups if len(g) > 1], hydra_context, config)
    returns = [None] * len(jobs)
    for group in groups:
        end_sweep_before_next_job()  # one that came while the group before finished
        if len(group) == 1:
            returns[group[0]] = _run(hydra_context, config, task_function, jobs[group[0]])
            continue
        log.info("training jobs %s as one population", ", ".join(f"#{jobs[i].hydra.job.num}" for i in group))
        outcomes, held = _train_group(trainer, [prepared[i] for i in group])
        # the group's summary is logged under its last job's logging, as the basic launcher logs each job's
        with _ending_together():
            for hand_back, i, output_dir in zip(_hand_backs(outcomes), group, held):
                try:
                    returns[i] = _hand_back_job(hydra_context, hand_back, prepared[i])
                finally:
                    if output_dir:
                        release_output_dir(output_dir)
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
        stopped = [returns[i] for i in group if isinstance(returns[i]._return_value, preemption.Preempted)]
        failed = [returns[i] for i in group if returns[i].status != JobStatus.COMPLETED]
        end_sweep_if_stopped((stopped + failed + [returns[group[-1]]])[0])  # all completed: before the next job
    return returns


def _one_dir_each(groups: list, prepared: list) -> list:
    """Jobs given one directory (a hydra.sweep.subdir without ${hydra.job.num}, or one paths.output_dir for the
    sweep) never train together: each after the first runs on its own after the group, as the basic launcher
    runs it, and finds the run before."""
    split = []
    for group in groups:
        dirs, together, after = set(), [], []
        for i in group:
            output_dir = os.path.realpath(OmegaConf.select(prepared[i].task_cfg, "paths.output_dir",
                                                           default=prepared[i].job.hydra.runtime.output_dir))
            (after if output_dir in dirs else together).append(i)
            dirs.add(output_dir)
        split += [together] + [[i] for i in after]
    return split


def _alone_where_hydra_sets_up(groups: list, jobs: list) -> list:
    """A job with hydra.job.env_set or hydra.job.chdir=true needs Hydra's run_job to set its environment or
    working directory before its config resolves and it trains: it runs on its own, as under the basic launcher.
    (The Optuna sweeper's trial number rides in env_set too; it is read from the config, not the environment.)"""
    from zoo.sweeps.trial_link import TRIAL_KEY

    def sets_up(job) -> bool:
        return bool(job.hydra.job.chdir) or any(key != TRIAL_KEY for key in job.hydra.job.env_set or {})

    split = []
    for group in groups:
        own = [i for i in group if len(group) > 1 and sets_up(jobs[i])]
        if own:
            log.info("jobs %s train one after another, as under the basic launcher: a population cannot apply "
                     "their hydra.job.env_set or hydra.job.chdir=true",
                     ", ".join(f"#{jobs[i].hydra.job.num}" for i in own))
        rest = [i for i in group if i not in own]
        split += ([rest] if rest else []) + [[i] for i in own]
    return split


def _apart_where_faster(trains_alone, groups: list, prepared: list, jobs: list) -> list:
    """Groups of two or more whose jobs train faster one after another (trains_alone says why) as groups of one."""
    from zoo.cli import quiet_libraries

    quiet_libraries()  # trains_alone starts JAX and reads the data: their chatter stays out of the console
    split = []
    for group in groups:
        reason = trains_alone(prepared[group[0]].task_cfg) if trains_alone and len(group) > 1 else None
        if reason:
            log.info("jobs %s train one after another, as under the basic launcher: %s",
                     ", ".join(f"#{jobs[i].hydra.job.num}" for i in group), reason)
        split.extend([[i] for i in group] if reason else [group])
    return split


def _run(hydra_context, config, task_function, job):
    """One job through Hydra's own run_job, as the basic launcher runs it."""
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=job,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return ret


@contextlib.contextmanager
def _ending_together():
    """A population's jobs all end at once: the sweep summary is written after the last, not after each, and a
    stop signal ends the sweep once every job is handed back, not at the first."""
    from zoo.sweeps.summary_callback import summary_after_batch

    with deferred(), summary_after_batch():
        yield


@dataclass
class PreparedJob:
    """A job as run_job would set it up, made once: what the group trains with and what its hand-back reuses."""
    job: DictConfig  # the sweep's config of the job, hydra node included
    task_cfg: DictConfig  # its task's config, resolved
    config_yaml: str  # that config before resolving, as run_job writes .hydra/config.yaml
    hydra_cfg: DictConfig  # HydraConfig's copy of its hydra node, hydra.runtime.output_dir set


def _prepare(sweep_config) -> PreparedJob:
    """The job's configs as run_job makes them (it sets hydra.runtime.output_dir the same way)."""
    previous = HydraConfig.instance().cfg
    output_dir = os.path.join(str(sweep_config.hydra.sweep.dir), str(sweep_config.hydra.sweep.subdir))
    with read_write(sweep_config.hydra.runtime), open_dict(sweep_config.hydra.runtime):
        sweep_config.hydra.runtime.output_dir = os.path.abspath(output_dir)
    HydraConfig.instance().set_config(sweep_config)
    try:
        task_cfg = copy.deepcopy(sweep_config)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        config_yaml = OmegaConf.to_yaml(task_cfg)
        OmegaConf.resolve(task_cfg)
        return PreparedJob(sweep_config, task_cfg, config_yaml, HydraConfig.instance().cfg)
    finally:
        HydraConfig.instance().cfg = previous


def _check_settings(cfgs: list, hydra_context, config) -> None:
    from zoo.population.train import check_population_settings

    try:
        for cfg in cfgs:
            check_population_settings(cfg)
    except UserError as e:  # the whole sweep would fail the same way: one sentence, before any training
        _refuse_batch(e, hydra_context, config)


def _refuse_batch(error: UserError, hydra_context, config) -> None:
    """End the command with `error`'s sentence before any job of the batch ran. The sweeper wrote this command's
    multirun.yaml before the batch came here: while no job of this command has run, the sweep dir's summary keeps
    the plan of the jobs it holds."""
    from zoo.sweeps.summary_callback import SweepSummary

    for callback in getattr(hydra_context.callbacks, "callbacks", []):
        if isinstance(callback, SweepSummary):
            callback.batch_refused(config)
    exit_with(error)


def _train_group(trainer, prepared: list) -> tuple[list, list]:
    """Each job's outcome, and the paths.output_dir each holds (None: none of its own) until its job ends."""
    from zoo.cli import quiet_libraries

    quiet_libraries()
    for p in prepared:  # as run_job writes them, so a preempted group's jobs are listed too
        if p.job.hydra.output_subdir is None:  # hydra.output_subdir=null: no .hydra/, as run_job does
            continue
        hydra_dir = Path(p.job.hydra.runtime.output_dir) / str(p.job.hydra.output_subdir)
        hydra_dir.mkdir(parents=True, exist_ok=True)
        (hydra_dir / "config.yaml").write_text(p.config_yaml, encoding="utf-8")
        _save_config(p.hydra_cfg, "hydra.yaml", hydra_dir)
        _save_config(p.job.hydra.overrides.task, "overrides.yaml", hydra_dir)
    outcomes, held = zip(*(_hold_output_dir(p) for p in prepared))
    outcomes, training = list(outcomes), [i for i, refused in enumerate(outcomes) if refused is None]
    if training:
        _console_as_in_a_job(prepared[0].job)
        try:
            with preemption.interrupts_remembered():  # a Ctrl-C Python drops while compiling still stops the group
                trained = trainer([prepared[i].task_cfg for i in training], [prepared[i].job.hydra for i in training])
        except Exception as e:  # noqa: BLE001 — what ends the group ends each of its jobs, as a solo run's would
            trained = [e] * len(training)
        for i, outcome in zip(training, trained):
            outcomes[i] = outcome
    return outcomes, list(held)


def _hold_output_dir(p: PreparedJob) -> tuple:
    """(refusal, held dir): a paths.output_dir set apart from the job's directory is held from before the group
    trains, as run_task holds a solo job's, else a command started there meanwhile would write into it too. A
    member whose directory is in use (or cannot be written) gets that sentence as its outcome and does not train."""
    from zoo.cli import check_writable, hold_output_dir

    output_dir = OmegaConf.select(p.task_cfg, "paths.output_dir")
    if output_dir is None:
        return None, None
    previous = HydraConfig.instance().cfg
    HydraConfig.instance().cfg = p.hydra_cfg  # the job's own directories tell whether output_dir is apart
    try:
        check_writable(output_dir, "paths.output_dir")
        return None, hold_output_dir(output_dir, p.task_cfg)
    except UserError as e:
        return e, None
    finally:
        HydraConfig.instance().cfg = previous


def _console_as_in_a_job(job) -> None:
    """While a group trains, the console shows the zoo's lines as a job's logging would (hydra.job_logging: by
    default `[time][zoo][INFO] - ...`), not under the launcher's `[HYDRA]` tag. Its file handlers are left out:
    each member's log file is MemberLogs' (zoo.population.logs), not the first member's."""
    logging_cfg = OmegaConf.select(job, "hydra.job_logging")
    conf = OmegaConf.to_container(logging_cfg, resolve=True) if logging_cfg else None
    if not conf or conf.get("root") is None:  # no job logging configured: the console stays as it is
        return
    files = [name for name, handler in (conf.get("handlers") or {}).items() if "filename" in (handler or {})]
    for name in files:
        del conf["handlers"][name]
    for logger in [conf["root"], *(conf.get("loggers") or {}).values()]:
        logger["handlers"] = [h for h in logger.get("handlers") or [] if h not in files]
    configure_log(OmegaConf.create(conf), OmegaConf.select(job, "hydra.verbose", default=False))


def _hand_back_job(hydra_context, task_function, p: PreparedJob) -> JobReturn:
    """One job of a trained group, run as Hydra's run_job runs a job (working directory, job logging, env_set,
    callbacks, the JobReturn), less what the group has done already: its configs were made once (_prepare)
    and its .hydra/ folder written (_train_group), where run_job would copy both configs twice more and
    write the folder again (most of its cost: ~0.07 s a job here)."""
    callbacks, old_cwd, previous = hydra_context.callbacks, os.getcwd(), HydraConfig.instance().cfg
    output_dir = str(p.job.hydra.runtime.output_dir)
    chdir = p.hydra_cfg.hydra.job.chdir
    chdir = not version.base_at_least("1.2") if chdir is None else chdir  # run_job's default
    HydraConfig.instance().cfg = p.hydra_cfg
    try:
        ret = JobReturn(overrides=OmegaConf.to_container(p.job.hydra.overrides.task), cfg=p.task_cfg,
                        hydra_cfg=p.hydra_cfg)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        if chdir:
            os.chdir(output_dir)
        ret.working_dir = output_dir if chdir else os.getcwd()
        configure_log(p.job.hydra.job_logging, p.job.hydra.verbose)
        with env_override(p.hydra_cfg.hydra.job.env_set):
            callbacks.on_job_start(config=p.job, task_function=task_function)
            try:
                ret.return_value = task_function(p.task_cfg)
                ret.status = JobStatus.COMPLETED
            except Exception as e:  # noqa: BLE001 — a failed job, as run_job records it
                ret.return_value = e
                ret.status = JobStatus.FAILED
        ret.task_name = JobRuntime.instance().get("name")
        _flush_loggers()
        callbacks.on_job_end(config=p.job, job_return=ret)
        return ret
    finally:
        HydraConfig.instance().cfg = previous
        if chdir:
            os.chdir(old_cwd)


def _hand_backs(outcomes: list) -> list:
    """Each job's task. An error that ended the whole group is one object for all of its jobs: each raises it
    from where it was first raised (its traceback taken now, before any job raised it again), so one job's
    failure.json does not carry the frames of the jobs handed back before it."""
    tracebacks = [getattr(outcome, "__traceback__", None) for outcome in outcomes]
    return [functools.partial(_hand_back, o, tb) for o, tb in zip(outcomes, tracebacks)]


def _hand_back(outcome, traceback, cfg):
    """The job's task: the zoo's own wrapper (exit codes, multirun rules) around the population's outcome."""
    from zoo import run_record
    from zoo.cli import run_task
    from zoo.outputs import RecordedResults

    def result(_):
        if isinstance(outcome, BaseException):
            raise outcome.with_traceback(traceback)
        return outcome

    returned = run_task(result, cfg)
    if isinstance(outcome, RecordedResults):  # a run finished before this sweep keeps the record it had
        run_record.restore(cfg.paths.output_dir)
    return returned
