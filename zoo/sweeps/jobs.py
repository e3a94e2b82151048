"""A multirun's job directories: which are jobs, and what each one's files say (results, failure, last eval)."""
import json
import math
import os

from omegaconf import OmegaConf

from zoo.errors import brief
from zoo.files import load_json
from zoo.preemption import Preempted
from zoo.sweeps.plots import natural

REPORTED_SPLITS = ("validation", "test")  # a search selects on validation; the test figures stand beside it


class DamagedJob(ValueError):
    """A job's .hydra/ record does not read (edited or cut short by hand): no summary can place that job."""


def job_record(job_dir: str, name: str):
    """The job's .hydra/<name> (config.yaml, hydra.yaml, overrides.yaml); DamagedJob if it does not read."""
    path = os.path.join(job_dir, ".hydra", name)
    try:
        return OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001 — YAML and OmegaConf raise many types for a damaged file
        raise DamagedJob(f"{path} cannot be read ({brief(e)}); repair it, or move that job's directory out of the "
                         "sweep.") from None


def find_job_dirs(root: str) -> list:
    jobs = []
    for dirpath, dirnames, _ in os.walk(root):
        if os.path.isfile(os.path.join(dirpath, ".hydra", "overrides.yaml")):
            jobs.append(dirpath)
            dirnames.clear()  # a run's own subfolders (tensorboard, checkpoints) hold no jobs
    return sorted(jobs, key=natural)


def read_job(job_dir: str, root: str) -> dict:
    overrides = [str(o) for o in job_record(job_dir, "overrides.yaml")]
    row = {"job": os.path.relpath(job_dir, root), "run_dir": os.path.abspath(job_dir), "status": "unfinished",
           "objective": None, "metrics": {}, "steps": None, "wall_time_s": None, "reason": "",
           "overrides": overrides, "params": dict(o.split("=", 1) for o in overrides if "=" in o)}
    results = load_json(os.path.join(job_dir, "results.json"))
    failure = load_json(os.path.join(job_dir, "failure.json"))
    if results is not None:
        row.update(status="completed", objective=results.get("objective"), steps=results.get("steps"),
                   wall_time_s=results.get("wall_time_s"),
                   metrics={f"{split}/{k}": v for split in REPORTED_SPLITS
                            for k, v in results.get(split, {}).items() if k != "count"})
        epsilon = (results.get("privacy") or {}).get("epsilon")  # a DP-SGD run's; None where it is infinite
        if epsilon is not None:
            row["metrics"]["epsilon"] = epsilon
        if not finite(row["objective"]):
            row.update(status="failed", reason=f"objective is {row['objective']}")
    elif failure is not None:
        status = ("pruned" if failure.get("status") == "pruned" else
                  "stopped" if failure.get("error") == Preempted.__name__ else "failed")  # stopped: rerun resumes it
        row.update(status=status, reason=f"{failure.get('error', 'Error')}: {failure.get('reason', '')}")
        if status == "stopped":  # the step the stop reached
            row["steps"] = failure.get("step")
        if row["status"] == "pruned":  # its last eval, the one the pruner judged, stands in its metric columns
            row.update(_last_eval(os.path.join(job_dir, "metrics.jsonl")))
    return row


def _last_eval(path: str) -> dict:
    try:
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return {}
    evals = [r for r in records if r.get("split") in REPORTED_SPLITS]
    if not evals:
        return {}
    last = evals[-1]
    return {"steps": last["step"], "metrics": {f"{last['split']}/{k}": v for k, v in last.items()
                                               if k not in ("step", "split", "count", "final")}}


def finite(x) -> bool:
    if isinstance(x, list):  # a multi-objective sweep's values
        return bool(x) and all(map(finite, x))
    return isinstance(x, (int, float)) and math.isfinite(x)
