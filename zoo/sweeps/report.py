"""Summarise a multirun directory: summary.csv, summary.md (best first, failures last) and summary.png.

    python -m zoo.sweeps.report multirun/2025-01-01/12-00-00          # from the repository root
    python <repo>/zoo/sweeps/report.py multirun/2025-01-01/12-00-00   # from any directory

A job is any directory holding .hydra/overrides.yaml; it completed if it has results.json (written by train())
and was pruned or failed if it has failure.json (written by zoo.sweeps.summary_callback.SweepSummary);
otherwise it is unfinished. A multi-objective sweep (a list of directions) is ranked by its Pareto front.
"""
import contextlib
import csv
import fcntl
import io
import math
import os
import re
import sys

if not __package__:  # run by its path: zoo is found beside it, whatever the working directory (-m needs the root)
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # not zoo/sweeps/

from omegaconf import OmegaConf  # noqa: E402

from zoo.config import default_objective, direction_of  # noqa: E402
from zoo.files import write_text  # noqa: E402
from zoo.sweeps import pareto, plots  # noqa: E402
from zoo.sweeps.jobs import (DamagedJob, finite, find_job_dirs, job_record, jobs_text, load_config,  # noqa: E402
                             read_job)

STATUS_ORDER = {"completed": 0, "pruned": 1, "stopped": 2, "unfinished": 3, "failed": 4}


def objective_and_direction(job_dir: str) -> tuple:
    """('test/accuracy', 'maximize'): the sweeper's direction if it has one, else the task's or the metric's.

    A multi-objective sweep gives two lists: (['validation/accuracy', 'wall_time_s'], ['maximize', 'minimize'])."""
    hydra_cfg = job_record(job_dir, "hydra.yaml", only=("hydra.sweeper.directions", "hydra.sweeper.direction"))
    name = recorded_objective(job_dir)
    direction = [direction_of(n) for n in name] if isinstance(name, list) else direction_of(name)
    swept = OmegaConf.select(hydra_cfg, "hydra.sweeper.directions", default=None)
    swept = swept if swept is not None else OmegaConf.select(hydra_cfg, "hydra.sweeper.direction", default=None)
    if swept is not None:
        swept = OmegaConf.to_container(swept) if OmegaConf.is_config(swept) else swept
        swept = [str(d).rpartition(".")[2].lower() for d in (swept if isinstance(swept, list) else [swept])]
        direction = swept if isinstance(name, list) else swept[0]
    return name, direction


OBJECTIVE_INPUTS = ("optimized_metric", "dataset.validation_fraction", "dataset.task")  # what objective_name reads


def recorded_objective(job_dir: str) -> str | list:
    """objective_name of the config a job ran with (its .hydra/config.yaml)."""
    return objective_name(job_record(job_dir, "config.yaml", only=OBJECTIVE_INPUTS))


def objective_name(cfg) -> str | list:
    """'validation/accuracy' (or a list of names): what a train config's runs report as their objective."""
    name = OmegaConf.select(cfg, "optimized_metric")
    if name is None:
        name = default_objective(cfg)
    return name if isinstance(name, str) else [str(n) for n in name]


class MixedObjectives(ValueError):
    """One sweep's jobs optimised different objectives (a grid over datasets of different tasks, or over
    dataset.validation_fraction): ranked together, one's accuracy would stand as another's loss."""


def mixed_objectives(jobs: list, names: dict = None) -> str | None:
    """'validation/accuracy (<a job dir>) and test/loss (<another>)' when `jobs` optimised different objectives,
    else None: one summary cannot rank them together. `names` keeps each job's objective between calls."""
    names = {} if names is None else names
    seen = {}
    for job in jobs:
        if job not in names:
            names[job] = str(recorded_objective(job))
        seen.setdefault(names[job], job)
    if len(seen) < 2:
        return None
    return " and ".join(f"{name} ({job})" for name, job in list(seen.items())[:2])


def collect(root: str, known: dict = None) -> dict:
    """Every job, ranked: completed best first (the Pareto front first when there are several objectives), then
    pruned, unfinished and failed; swept keys are those that vary.

    `known` (a dict kept between calls while one sweep runs) holds what can no longer change: the objective and
    the rows of finished jobs, so each finished job's files are read once, not once per summary."""
    known = {} if known is None else known
    jobs = find_job_dirs(root)
    mixed = mixed_objectives(jobs, known.setdefault("names", {}))
    if mixed:
        raise MixedObjectives(f"the jobs under {root} optimised different objectives, {mixed}; run the sweep "
                              "again in a new hydra.sweep.dir with optimized_metric set to one metric every job "
                              "reports to rank them in one summary.")
    if jobs and "objective" not in known:
        known["objective"] = objective_and_direction(jobs[0])
    name, direction = known.get("objective", ("objective", "maximize"))
    rows = [_read_once(j, root, known.setdefault("rows", {})) for j in jobs]
    multi = isinstance(name, list)
    for r in rows:  # a results.json edited by hand: one value where the sweep has several objectives, or a list
        if r["status"] == "completed" and isinstance(r["objective"], list) != multi:
            r.update(status="failed", reason=f"objective is {r['objective']}")
    front = pareto.front([r for r in rows if r["status"] == "completed"], direction) if multi else []
    sign = -1.0 if (direction[0] if multi else direction) == "maximize" else 1.0
    for r in rows:
        r["pareto"] = any(r is member for member in front)
    rows.sort(key=lambda r: (STATUS_ORDER[r["status"]], not r["pareto"], sign * pareto.first(r["objective"])
                             if finite(r["objective"]) else 0.0, plots.natural(r["job"])))
    keys = dict.fromkeys(k for r in rows for k in r["params"])
    if "plan" not in known:
        known["plan"] = sweep_plan(root)
    swept, linear, planned = known["plan"]
    return {"root": os.path.abspath(root), "objective": name, "direction": direction, "rows": rows,
            "best": rows[0] if rows and rows[0]["status"] == "completed" and not multi else None,
            "pareto": [r for r in rows if r["pareto"]],
            "params": [k for k in keys if k.lstrip("+~") in swept or len({r["params"].get(k) for r in rows}) > 1],
            "planned": planned, "linear": sorted(linear),
            "metrics": list(dict.fromkeys(m for r in rows for m in r["metrics"]))}


SWEEP_PLAN_INPUTS = ("hydra.overrides.task", "hydra.sweeper.params", "hydra.sweeper._target_")  # of multirun.yaml


def sweep_plan(root: str) -> tuple:
    """(keys the command swept, those searched over a linear interval, the number of jobs it asked for or None):
    from the sweep's multirun.yaml, so that a sweep stopped after one job still shows its swept keys as such and
    how many of its jobs ran, and a plot's axis follows its search space."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep

    parser = OverridesParser.create()
    try:
        cfg = load_config(os.path.join(root, "multirun.yaml"), only=SWEEP_PLAN_INPUTS)
        overrides = parser.parse_overrides([str(o) for o in OmegaConf.to_container(cfg.hydra.overrides.task)])
        params = OmegaConf.to_container(OmegaConf.select(cfg, "hydra.sweeper.params") or OmegaConf.create({}))
        searched = parser.parse_overrides([f"{k}={v}" for k, v in params.items()])
    except Exception:  # noqa: BLE001 — none (a folder of runs gathered by hand), or unreadable
        return set(), set(), None
    # the sweeper's params first: the command line's value of the same key (swept or not) replaces its sweep
    sweeps = {o.get_key_element().lstrip("+~"): o for o in searched + overrides}
    sweeps = {key: o for key, o in sweeps.items() if o.is_sweep_override()}
    swept = set(sweeps)
    linear = {key for key, o in sweeps.items() if isinstance(o.value(), IntervalSweep) and "log" not in o.value().tags}
    planned = None
    if sweeps and "BasicSweeper" in str(OmegaConf.select(cfg, "hydra.sweeper._target_", default="")):  # a grid
        with contextlib.suppress(Exception):  # a sweep Hydra expands otherwise (glob): not counted
            planned = math.prod(len(list(o.sweep_string_iterator())) for o in sweeps.values())
    return swept, linear, planned


def _read_once(job_dir: str, root: str, finished: dict) -> dict:
    if job_dir in finished:
        return finished[job_dir]
    row = read_job(job_dir, root)
    if row["status"] != "unfinished":  # results.json and failure.json are written once, at a job's end
        finished[job_dir] = row
    return row


def _objective_columns(s: dict) -> list:
    return [*pareto.columns(s["objective"]), "pareto"] if isinstance(s["objective"], list) else ["objective"]


def _columns(s: dict) -> list:
    return ["rank", "job", "status", *_objective_columns(s), *s["params"], *s["metrics"], "steps", "wall_time_s",
            "reason"]


def _cells(s: dict, i: int, r: dict) -> dict:
    values = list(r["objective"]) if isinstance(r["objective"], list) else [r["objective"]]  # rows are kept: no edits
    if isinstance(s["objective"], list):
        values = values if len(values) == len(s["objective"]) else [None] * len(s["objective"])
        values.append("yes" if r["pareto"] else "")
    return {"rank": i + 1, "job": r["job"], "status": r["status"], **dict(zip(_objective_columns(s), values)),
            **{k: r["params"].get(k, "") for k in s["params"]},
            **{m: r["metrics"].get(m) for m in s["metrics"]}, "steps": r["steps"],
            "wall_time_s": None if r["wall_time_s"] is None else round(r["wall_time_s"], 2), "reason": r["reason"],
            "overrides": " ".join(r["overrides"]), "run_dir": r["run_dir"]}


def write_csv(s: dict, path: str) -> None:
    buf = io.StringIO()
    out = csv.DictWriter(buf, [*_columns(s), "overrides", "run_dir"])
    out.writeheader()
    out.writerows(_cells(s, i, r) for i, r in enumerate(s["rows"]))
    write_text(path, buf.getvalue())


def _md(value) -> str:
    if isinstance(value, str) and re.fullmatch(r"-?\d*\.\d+(e[-+]?\d+)?|-?\d+e[-+]?\d+", value):
        value = float(value)  # a swept float, shortened like the metrics
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def write_markdown(s: dict, path: str) -> None:
    rows, cols = s["rows"], _columns(s)
    counts = {st: sum(r["status"] == st for r in rows) for st in STATUS_ORDER}
    fixed = sorted({o for r in rows for o in r["overrides"] if o.split("=", 1)[0] not in s["params"]})
    aims = (", ".join(f"{c} = `{n}` ({d})" for c, n, d in zip(pareto.columns(s["objective"]), s["objective"],
                                                                s["direction"]))
            if isinstance(s["objective"], list) else f"`{s['objective']}` ({s['direction']})")
    lines = [f"# Sweep summary: {s['root']}", "",
             (f"Objective: {aims}. Jobs: {len(rows)}{_of_planned(s)} "
              f"({', '.join(f'{n} {st}' for st, n in counts.items() if n)})."),
             f"Fixed overrides: `{' '.join(fixed) or 'none'}`.", "", best_text(s), "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_md(_cells(s, i, r)[c]) for c in cols) + " |" for i, r in enumerate(rows)]
    write_text(path, "\n".join(lines) + "\n")


def _of_planned(s: dict) -> str:
    planned = s.get("planned")
    return f" of the {planned} the sweep asked for" if planned and planned > len(s["rows"]) else ""


def best_text(s: dict) -> str:
    if isinstance(s["objective"], list):
        return pareto.front_text(s)
    b = s["best"]
    if b is None:
        return "Best: none, as no job has completed."
    test = ", ".join(f"{k}={v:.4g}" for k, v in b["metrics"].items() if k.startswith("test/") and k != s["objective"])
    return (f"Best: job {b['job']}: {s['objective']}={b['objective']:.6g}{f' ({test})' if test else ''} with "
            f"`{' '.join(b['overrides'])}`; run directory: {b['run_dir']}")


def write_summary(root: str, plot: bool = True, known: dict = None, draw_plot=plots.write_plot) -> dict:
    """summary.csv and summary.md, and summary.png if `plot` (matplotlib costs more than the table: ~0.2 s),
    drawn by `draw_plot(summary, path)`."""
    with _one_writer_at_a_time(root):
        try:
            s = collect(root, known)
        except MixedObjectives:  # a table written before the jobs differed would rank a part of them as the whole
            for name in ("summary.csv", "summary.md", "summary.png"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(root, name))
            raise
        write_csv(s, os.path.join(root, "summary.csv"))
        write_markdown(s, os.path.join(root, "summary.md"))
        if plot:
            draw_plot(s, os.path.join(root, "summary.png"))
    return s


@contextlib.contextmanager
def _one_writer_at_a_time(root: str):
    """Jobs in separate processes (submitit) summarise as each ends: taking turns, the last to write has read
    every job's files, so a slower writer never replaces a complete summary with an older one."""
    with open(os.path.join(root, ".summary.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: each file is still replaced whole, only the order is open
            pass
        yield


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: python -m zoo.sweeps.report MULTIRUN_DIR  (a directory written by `python train.py -m ...`; "
             "-m from the repository root, from any directory: python <repo>/zoo/sweeps/report.py MULTIRUN_DIR)")
    if args in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(args) != 1:
        print(usage, file=sys.stderr)
        return 2
    if not os.path.isdir(args[0]):
        print(f"error: {args[0]} is not a directory; pass a multirun's directory (hydra.sweep.dir).", file=sys.stderr)
        return 2
    if os.path.isfile(os.path.join(args[0], ".hydra", "overrides.yaml")) and not os.path.isfile(
            os.path.join(args[0], "multirun.yaml")):
        print(f"error: {args[0]} is a single run's directory; pass the multirun directory above its jobs "
              "(hydra.sweep.dir).", file=sys.stderr)
        return 2
    jobs = find_job_dirs(args[0])
    if not jobs:
        print(f"error: no jobs under {args[0]} (a job directory holds .hydra/overrides.yaml)", file=sys.stderr)
        return 2
    try:
        mixed = mixed_objectives(jobs)
        if mixed and os.path.isfile(os.path.join(args[0], "multirun.yaml")):  # one sweep's: no other to pass
            print(f"error: the jobs of the sweep {args[0]} optimised different objectives, {mixed}, which one summary "
                  "cannot rank; a sweep whose optimized_metric names one metric every job reports gets one.",
                  file=sys.stderr)
            return 2
        if mixed:
            print(f"error: the jobs under {args[0]} optimised different objectives, {mixed}; pass one sweep's "
                  "directory.", file=sys.stderr)
            return 2
        s = write_summary(args[0])
    except DamagedJob as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a directory in the way of a summary file, or a sweep dir the user cannot write
        target = e.filename2 or e.filename  # a file replaced: its own name, not the staging file's
        advice = ("move that directory out of the way" if target and os.path.isdir(target) else
                  "copy the sweep to a directory you can write and pass that one")
        print(f"error: the summary cannot be written in {args[0]} ({e.strerror}: {target}); {advice}.",
              file=sys.stderr)
        return 2
    print(f"{jobs_text(len(s['rows']))}; summary written to {os.path.join(s['root'], 'summary.md')}")
    print(best_text(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
