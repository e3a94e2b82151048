"""What `hydra/launcher=population` does with a batch of a sweep's jobs.

Jobs of a task function that trains populations (train.py's, see `trains_populations`) are grouped by
zoo.population.grouping; each group of two or more trains as one program, then every job goes through
Hydra's own run_job with a task function that hands back its outcome, so job directories, numbering,
callbacks (the sweep summary) and return values are those of Hydra's basic launcher. Any other task function,
and a group of one, runs job by job exactly like the basic launcher.
"""
import contextlib
import copy
import functools
import logging
import os
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import _save_config, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import OmegaConf, open_dict, read_write

from zoo import preemption
from zoo.errors import UserError, exit_with
from zoo.sweeps.stop_on_signal import deferred, end_sweep_if_stopped

log = logging.getLogger(__name__)


def trains_populations(train_population):
    """Marks a Hydra task function whose jobs `train_population(cfgs, hydra_cfgs)` may train together."""
    def mark(task_function):
        task_function.train_population = train_population
        return task_function

    return mark


def launch(hydra_context, config, task_function, job_overrides, initial_job_idx: int, max_size: int) -> list:
    setup_globals()
    preemption.forget()  # a signal handled before this batch was launched is not this batch's to act on
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
    trainer = getattr(task_function, "train_population", None)
    groups = [[i] for i in range(len(jobs))]
    if trainer is not None:
        from zoo.population.grouping import group_indices

        task_cfgs = [_task_config(job) for job in jobs]
        groups = group_indices(task_cfgs, max_size)
        _check_settings([task_cfgs[g[0]] for g in groups if len(g) > 1])
    returns = [None] * len(jobs)
    for group in groups:
        if len(group) == 1:
            returns[group[0]] = _run(hydra_context, config, task_function, jobs[group[0]])
            continue
        log.info("training jobs %s as one population", ", ".join(f"#{jobs[i].hydra.job.num}" for i in group))
        outcomes = _train_group(trainer, [jobs[i] for i in group], [task_cfgs[i] for i in group])
        with _ending_together():
            for hand_back, i in zip(_hand_backs(outcomes), group):
                returns[i] = _run(hydra_context, config, hand_back, jobs[i])
        stopped = [returns[i] for i in group if isinstance(returns[i]._return_value, preemption.Preempted)]
        end_sweep_if_stopped(stopped[0] if stopped else None)
    return returns


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


def _task_config(sweep_config):
    """The job's config as its task receives it, resolved (run_job sets hydra.runtime.output_dir the same way)."""
    previous = HydraConfig.instance().cfg
    output_dir = os.path.join(str(sweep_config.hydra.sweep.dir), str(sweep_config.hydra.sweep.subdir))
    with read_write(sweep_config.hydra.runtime), open_dict(sweep_config.hydra.runtime):
        sweep_config.hydra.runtime.output_dir = os.path.abspath(output_dir)
    HydraConfig.instance().set_config(sweep_config)
    try:
        task_cfg = copy.deepcopy(sweep_config)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        OmegaConf.resolve(task_cfg)
        return task_cfg
    finally:
        HydraConfig.instance().cfg = previous


def _check_settings(cfgs: list) -> None:
    from zoo.population.train import check_population_settings

    try:
        for cfg in cfgs:
            check_population_settings(cfg)
    except UserError as e:  # the whole sweep would fail the same way: one sentence, before any training
        exit_with(e)


def _train_group(trainer, jobs: list, task_cfgs: list) -> list:
    from zoo.cli import quiet_libraries

    quiet_libraries()
    for job, cfg in zip(jobs, task_cfgs):  # as run_job writes them, so a preempted group's jobs are listed too
        if job.hydra.output_subdir is None:  # hydra.output_subdir=null: no .hydra/, as run_job does
            continue
        hydra_dir = Path(cfg.paths.output_dir) / str(job.hydra.output_subdir)
        _save_config(cfg, "config.yaml", hydra_dir)
        _save_config(OmegaConf.masked_copy(job, ["hydra"]), "hydra.yaml", hydra_dir)
        _save_config(job.hydra.overrides.task, "overrides.yaml", hydra_dir)
    try:
        with preemption.interrupts_remembered():  # a Ctrl-C Python drops while compiling still stops the group
            return trainer(task_cfgs, [job.hydra for job in jobs])
    except Exception as e:  # noqa: BLE001 — what ends the group ends each of its jobs, as a solo run's would
        return [e] * len(jobs)


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
