"""Per-job cost of a multirun outside the jobs' training: `python -m zoo.bench.sweep_overhead [--quick]`.

Runs `python train.py -m optimizer.learning_rate=1e-4,3e-4,1e-3,3e-3 seed=0,1,2,3` (16 jobs of the default MLP
on digits, Hydra's basic sweeper and launcher) as a subprocess, with a clock callback that records when the
sweep and each job start and end, and prints (seconds, median over --repeats commands):

  sweep_overhead/per_job       (last job end - sweep start - time in training calls) / jobs: what each further
                               job adds outside train() (a population: outside its group's
                               train_population()); target <= 0.1 s
  sweep_overhead/with_start    (command wall - time in training calls) / jobs: the fixed start and end shared out
  sweep_overhead/finish        per job, its training call - its wall_time_s: what train() does after its final
                               evals (the final checkpoint, results.json, closing the logs; curves.png is drawn
                               by a child process while the next job runs). Inside train(), so not in per_job
  sweep_overhead/in_job        per job, its span (on_job_start -> on_job_end) minus its train() call: the task
                               function's own work around train()
  sweep_overhead/between_jobs  per job, the rest: Hydra composing the job's config (once: the sweeper
                               validates the batch, the launcher takes that composition), saving it, setting
                               up logging, the sweep summary table after the job
  sweep_overhead/start         process start -> the sweep's first callback (imports, composing the config)
  sweep_overhead/end           last job's end -> process exit: the final summary and plot, interpreter exit

The training calls are timed by running train.py through zoo.bench.timed_train, which stamps each call of
zoo.train.train (zoo.population.train.train_population for a population's group) into the clock file.
The breakdown assumes jobs run one after another. Extra overrides after `--` are added to the command:
`-- hydra/launcher=population` measures the population launcher, whose group trains its jobs in one call: that
call counts once, and in_job and between_jobs are not reported (a member's span is its hand-back, after the
group trained).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from hydra.experimental.callback import Callback

from zoo.bench.util import ROOT, median, row, scratch_dir

SWEEP = ["optimizer.learning_rate=1e-4,3e-4,1e-3,3e-3", "seed=0,1,2,3"]
QUICK_SWEEP = ["debug=smoke", "optimizer.learning_rate=1e-3,3e-3"]


class SweepClock(Callback):
    """Appends `{"event", "t"}` lines (time.time(), shared with the parent) to `path`. Added last to
    hydra.callbacks, it sees a job's end before the sweep summary does (Hydra notifies end events in reverse)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _stamp(self, event: str) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"event": event, "t": time.time()}) + "\n")

    def on_multirun_start(self, config, **kwargs) -> None:
        self._stamp("multirun_start")

    def on_job_start(self, config, **kwargs) -> None:
        self._stamp("job_start")

    def on_job_end(self, config, job_return, **kwargs) -> None:
        self._stamp("job_end")


def run_sweep(sweep: list, work: str) -> dict:
    """One multirun command, timed from outside; its clock stamps and each job's results.json."""
    here = tempfile.mkdtemp(prefix="sweep_", dir=work)
    sweep_dir, clock = os.path.join(here, "multirun"), os.path.join(here, "clock.jsonl")
    cmd = [sys.executable, "-m", "zoo.bench.timed_train", clock, "-m", *sweep, f"hydra.sweep.dir={sweep_dir}",
           "+hydra.callbacks.bench_clock._target_=zoo.bench.sweep_overhead.SweepClock",
           f"+hydra.callbacks.bench_clock.path={clock}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    launched = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"the multirun failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    with open(clock) as f:
        stamps = [json.loads(line) for line in f]
    walls, members = [], []
    for name in os.listdir(sweep_dir):
        path = os.path.join(sweep_dir, name, "results.json")
        if os.path.isfile(path):
            with open(path) as f:
                results = json.load(f)
            walls.append(results["wall_time_s"])
            members.append(results.get("population", {}).get("members", 1))
    return {"launched": launched, "ended": ended, "stamps": stamps, "wall_time_s": walls, "members": members}


def figures(run: dict) -> dict:
    """Seconds per job, and the command's fixed start and end, from one run_sweep result."""
    at = {}
    for s in run["stamps"]:
        at.setdefault(s["event"], []).append(s["t"])
    jobs = len(run["wall_time_s"])
    if not len(at.get("job_start", [])) == len(at.get("job_end", [])) == jobs:
        raise RuntimeError(f"{jobs} jobs finished but the clock saw {len(at.get('job_end', []))} job ends: this "
                           "launcher does not run each job through Hydra's job callbacks")
    train = sum(e - s for s, e in zip(at["train_start"], at["train_end"]))  # calls run one after another
    # a population's members report their group's wall time: each adds its share, so the group counts once
    members = run.get("members", [1] * jobs)
    evaluated = sum(w / n for w, n in zip(run["wall_time_s"], members))
    sweep_start, last_end = at["multirun_start"][0], at["job_end"][-1]
    spans = sum(e - s for s, e in zip(at["job_start"], at["job_end"]))  # the jobs run one after another
    wall = run["ended"] - run["launched"]
    one_by_one = all(n == 1 for n in members)
    return {"jobs": jobs, "wall": wall, "train": train, "per_job": (last_end - sweep_start - train) / jobs,
            "with_start": (wall - train) / jobs, "finish": (train - evaluated) / jobs,
            "in_job": (spans - train) / jobs if one_by_one else None,
            "between_jobs": (last_end - sweep_start - spans) / jobs if one_by_one else None,
            "start": sweep_start - run["launched"], "end": run["ended"] - last_end}


NOTES = {"per_job": "(last job end - sweep start - time in train() calls) / jobs",
         "with_start": "(command wall - time in train() calls) / jobs: start and end shared out",
         "finish": "per job: train() after its final evals (final checkpoint, results, closing logs)",
         "in_job": "per job: its span - its train() call (the task function around train())",
         "between_jobs": "per job: composing its config, job setup, the summary table",
         "start": "process start -> sweep start (imports, first composition)",
         "end": "last job end -> exit (final summary and plot, interpreter exit)"}


def _print(r: dict) -> None:
    met = {True: "yes", False: "NO", None: ""}[r["met"]]
    print(f"| {r['id']} | {r['value']:.3f} | {r['unit']} | {r['target'] or ''} | {met} | {r['note']} |", flush=True)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m zoo.bench.sweep_overhead", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="two tiny jobs (debug=smoke): checks the rows, not speed")
    p.add_argument("--repeats", type=int, default=1, help="commands to run; rows are medians over them")
    p.add_argument("--out", default="sweep_overhead.json")
    p.add_argument("--work-dir", default=None,
                   help="scratch for the multirun (kept; default: a temporary folder, removed at the end)")
    p.add_argument("extra", nargs="*", help="more overrides for the command (after --)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    sweep = [*(QUICK_SWEEP if args.quick else SWEEP), *args.extra]
    with scratch_dir(args.work_dir, "zoo_sweep_overhead_") as work:
        runs = [figures(run_sweep(sweep, work)) for _ in range(args.repeats)]
    jobs, wall, train = runs[0]["jobs"], median([r["wall"] for r in runs]), median([r["train"] for r in runs])
    print(f"`python train.py -m {' '.join(sweep)}`: {jobs} jobs, {wall:.1f} s wall, {train:.1f} s in train() "
          f"(a population: in train_population())", flush=True)
    rows = []
    for key, note in NOTES.items():
        if any(r[key] is None for r in runs):
            continue  # a population's jobs do not run one after another
        rows.append(row(f"sweep_overhead/{key}", [r[key] for r in runs], "s",
                        target=("<=", 0.1) if key == "per_job" else None, note=note))
        _print(rows[-1])
    with open(args.out, "w") as f:
        json.dump({"command": sweep, "runs": runs, "rows": rows, "quick": args.quick}, f, indent=2)
    return {"rows": rows, "runs": runs}


if __name__ == "__main__":
    main()
