"""How train() inside a sweep reaches its Optuna trial: it reports the periodic eval metric as an intermediate
value and asks the study's pruner whether to stop.

The sweeper puts the trial's number into the job's config (`hydra.job.env_set.ZOO_OPTUNA_TRIAL`). A job in
the sweeper's own process (the basic launcher) finds the asked trial here; a job in another process (submitit)
opens the study from `hydra.sweeper.storage`, so pruning there needs a database storage.
"""
import contextlib
import os

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from zoo.config import METRICS
from zoo.errors import UserError
from zoo.sweeps.jobs import find_job_dirs, read_job

TRIAL_KEY = "ZOO_OPTUNA_TRIAL"
_asked = {}  # (storage, study name, trial number) -> optuna.Trial, while the launcher runs the batch


@contextlib.contextmanager
def running(storage, study_name, trials):
    keys = [(storage, study_name, t.number) for t in trials]
    _asked.update(zip(keys, trials))
    try:
        yield
    finally:
        for key in keys:
            _asked.pop(key, None)


def job_dirs(sweep_dir: str, study_name: str, numbers: set) -> dict:
    """{trial number: its job directory, relative to sweep_dir} for those of `numbers` (trials of `study_name`)
    that have one there, read from each job's saved Hydra config."""
    found = {}
    for job_dir in find_job_dirs(sweep_dir) if os.path.isdir(sweep_dir) else []:
        try:
            hydra = OmegaConf.load(os.path.join(job_dir, ".hydra", "hydra.yaml")).hydra
            number = OmegaConf.select(hydra, f"job.env_set.{TRIAL_KEY}")
            same_study = OmegaConf.select(hydra, "sweeper.study_name") == study_name
            number = None if number is None else int(number)
        except Exception:  # noqa: BLE001 — unreadable, unresolvable or no number: not a job of this study to continue
            continue
        if same_study and number in numbers:
            found[number] = os.path.relpath(job_dir, sweep_dir)
    return found


def job_outcome(job_dir: str, sweep_dir: str) -> tuple:
    """(what a stopped sweep's job had come to, its summary row from zoo.sweeps.jobs.read_job): "ended"
    (completed, pruned, or failed by something other than the stop), "stopped" (the stop signal saved it) or
    "unfinished" (nothing written: killed, or still running in another process)."""
    row = read_job(job_dir, sweep_dir)
    if row["status"] == "unfinished":
        return "unfinished", row
    if row["status"] == "stopped":
        return "stopped", row
    return "ended", row


def _trial(storage, study_name, number: int, pruner_cfg):
    trial = _asked.get((storage, study_name, number))
    if trial is not None:
        return trial
    if storage is None:
        raise UserError("pruning a trial run in another process needs a shared study; set hydra.sweeper.storage "
                        "(e.g. sqlite:///${hydra.sweep.dir}/optuna.db).")
    import optuna

    from zoo.sweeps.optuna_sweeper import build_optuna_object

    pruner = build_optuna_object(pruner_cfg, "optuna.pruners", "BasePruner", "hydra.sweeper.pruner")
    study = optuna.load_study(study_name=study_name, storage=storage, pruner=pruner)
    storage_obj = study._storage  # Trial needs the id; Optuna exposes only the number-to-id lookup on storages
    return optuna.Trial(study, storage_obj.get_trial_id_from_study_id_trial_number(study._study_id, number))


def prunable_metric(cfg, task) -> str:
    """The eval metric a pruner judges a trial by: the objective's, which must be one of the periodic evals' (on
    validation, or on test without a validation split): a train/ or another split's objective would be judged by
    the periodic split's figure of the same name."""
    split, _, metric = str(task.optimized(cfg)).rpartition("/")
    periodic = "validation" if (cfg.dataset.validation_fraction or 0) > 0 else "test"
    task_metrics = [m for m in METRICS[cfg.dataset.task] if m != "count"]
    if split != periodic or metric not in task_metrics:
        raise UserError(f"hydra.sweeper.pruner needs optimized_metric to name an eval metric "
                        f"({', '.join(f'{periodic}/{m}' for m in task_metrics)}), got {cfg.optimized_metric}.")
    return metric


def eval_reporter(cfg, task, hydra_cfg=None):
    """report(step, eval metrics) -> True when the pruner stops this trial; None outside a pruned sweep.

    `hydra_cfg` is the job's Hydra config; by default the running job's (a population passes each member's)."""
    if hydra_cfg is None:
        if not HydraConfig.initialized():
            return None
        hydra_cfg = HydraConfig.get()
    number = OmegaConf.select(hydra_cfg, f"job.env_set.{TRIAL_KEY}")
    pruner_cfg = OmegaConf.select(hydra_cfg, "sweeper.pruner")
    if number is None or pruner_cfg is None:
        return None
    metric = prunable_metric(cfg, task)
    if cfg.trainer.eval_every <= 0:
        raise UserError("hydra.sweeper.pruner needs periodic evals to judge a trial by; set trainer.eval_every "
                        "to a number of steps.")
    trial = _trial(hydra_cfg.sweeper.storage, hydra_cfg.sweeper.study_name, int(number), pruner_cfg)

    def report(step: int, metrics: dict) -> bool:
        trial.report(float(metrics[metric]), step)
        return trial.should_prune()

    return report
