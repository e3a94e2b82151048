"""Populations against one trial at a time: the whole multirun command's wall time, same trials, same run.

    python -m zoo.bench.population [--quick] [--rounds 2] [--sweeps NAME ...] [--out FILE] [OVERRIDE ...]

Each sweep runs `python train.py -m optimizer.learning_rate=... seed=... hydra/launcher=population` and the
same command with Hydra's basic launcher as subprocesses, alternating (basic, population / population, basic,
...) so load drifts hit both alike. Both read one data dir prepared beforehand, log no progress bar and start
from their own empty compilation cache (the default setting, cold). Rows: seconds per launcher, the paired
speed-up, seconds per job, and whether the best trial's test metric is the same in both sweeps. The 64-trial
row needs an accelerator; on CPU it reports that it was skipped. Not part of `python -m zoo.bench` (minutes).
Trailing OVERRIDEs (e.g. `logger.plot=false`) are added to every sweep's command, for both launchers.
"""
import argparse
import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
import time

from zoo.bench.util import ROOT, compose_cfg, interleave, median, ratios, row, scratch_dir

LAUNCHERS = ("basic", "population")


@dataclasses.dataclass(frozen=True)
class Sweep:
    overrides: tuple  # model and dataset; the launcher, grid and output settings are added per run
    learning_rates: tuple  # around the recipe's default learning rate
    seeds: int
    target: float  # population speed-up (basic seconds / population seconds) to reach
    accelerator_only: bool = False

    def grid(self, quick: bool) -> list:
        lrs, seeds = (self.learning_rates[1:3], 2) if quick else (self.learning_rates, self.seeds)
        return [f"optimizer.learning_rate={','.join(lrs)}", f"seed={','.join(map(str, range(seeds)))}"]


SWEEPS = {  # conf/optimizer/adamw.yaml's 1e-3 for the MLP; conf/recipe/linear_diabetes.yaml's 1e-2 for linear
    "mlp_digits": Sweep((), ("1e-4", "3e-4", "1e-3", "3e-3"), 4, 1.5),
    "linear_diabetes": Sweep(("model=linear", "dataset=diabetes"), ("3e-3", "1e-2", "3e-2", "1e-1"), 4, 2.0),
    "mlp_digits_64": Sweep((), ("1e-4", "2e-4", "3e-4", "6e-4", "1e-3", "2e-3", "3e-3", "6e-3"), 8, 10.0,
                           accelerator_only=True),
}


def accelerator() -> tuple:
    """(backend, device count) as train.py's processes will see them; asked in a child so that this process
    never holds the accelerator the runs need. The child imports what train.py does, so the first timed run
    does not pay alone for reading the libraries from disk."""
    probe = ("import jax, matplotlib.pyplot, zoo.population.train, zoo.sweeps.summary_callback, zoo.train; "
             "print(jax.default_backend(), jax.device_count())")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    backend, count = out.split()[-2:]
    return backend, int(count)


def run_sweep(sweep: Sweep, launcher: str, sweep_dir: str, args) -> None:
    cmd = [sys.executable, "train.py", "-m", *sweep.grid(args.quick), *sweep.overrides,
           f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep_dir}", "logger.progress=false",
           f"paths.data_dir={args.data_dir}", f"paths.compilation_cache_dir={sweep_dir}-compilation-cache"]
    cmd += (["debug=smoke"] if args.quick else []) + args.overrides
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, TFDS_DATA_DIR=args.data_dir), capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def best_trial(sweep_dir: str) -> dict:
    """The sweep's best job (rank 1 of its summary.csv) and that job's test metric from its results.json."""
    with open(os.path.join(sweep_dir, "summary.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    job = next(r["job"] for r in rows if r["rank"] == "1")
    with open(os.path.join(sweep_dir, job, "results.json")) as f:
        test = json.load(f)["test"]
    metric = "accuracy" if "accuracy" in test else "loss"
    return {"job": int(job), "metric": metric, "value": test[metric], "jobs": len(rows)}


def measure(name: str, sweep: Sweep, args, work: str) -> list:
    runs = {launcher: [] for launcher in LAUNCHERS}

    def one(launcher):
        sweep_dir = os.path.join(work, f"{name}-{launcher}-{len(runs[launcher])}")
        runs[launcher].append(sweep_dir)
        t = time.perf_counter()
        run_sweep(sweep, launcher, sweep_dir, args)
        print(f"{name}, {launcher} launcher: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)

    seconds = interleave({launcher: lambda launcher=launcher: one(launcher) for launcher in LAUNCHERS},
                         args.rounds, warmup=0)
    best = {launcher: [best_trial(d) for d in dirs] for launcher, dirs in runs.items()}
    jobs = best["basic"][0]["jobs"]
    rows = [row(f"population/{name}/{launcher}", seconds[launcher], "s",
                note=f"{jobs} jobs, {median(seconds[launcher]) / jobs:.2f} s a job, whole multirun command",
                per_job_s=[s / jobs for s in seconds[launcher]]) for launcher in LAUNCHERS]
    rows.append(row(f"population/{name}/speedup", ratios(seconds["basic"], seconds["population"]), "x",
                    target=(">=", sweep.target), note="basic seconds / population seconds, paired rounds"))
    rows.append(best_metric_row(name, best))
    return rows


def best_metric_row(name: str, best: dict) -> dict:
    """Equal: every run's best trial has the basic launcher's test metric (rel. 1e-5: accuracy to the example)."""
    reference = best["basic"][0]
    equal = all(math.isclose(b["value"], reference["value"], rel_tol=1e-5) for runs in best.values() for b in runs)
    shown = "; ".join(f"{launcher} {b['value']:.6g} (job {b['job']})" for launcher, runs in best.items()
                      for b in runs[:1])
    r = row(f"population/{name}/best_test_{reference['metric']}", reference["value"], reference["metric"],
            note=f"{shown}: {'equal' if equal else 'NOT equal'}", best=best)
    r["target"], r["met"] = "equal in both", equal
    return r


def skipped(name: str, sweep: Sweep) -> list:
    return [row(f"population/{name}/speedup", None, "x", target=(">=", sweep.target),
                note="skipped: no accelerator")]


def run_benchmark(args) -> dict:
    import flax
    import jax

    from zoo.data import load_dataset

    started, started_at, load_start = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M:%S"), os.getloadavg()
    backend, device_count = accelerator()
    rows = []
    with scratch_dir(args.work_dir, "zoo_bench_population_") as work:
        for name in args.sweeps:
            sweep = SWEEPS[name]
            if sweep.accelerator_only and backend == "cpu":
                rows += skipped(name, sweep)
                continue
            # prepared before timing, so neither launcher pays for building the dataset
            load_dataset(compose_cfg(list(sweep.overrides), args.data_dir, work).dataset, args.data_dir)
            rows += measure(name, sweep, args, work)
    meta = {"command": " ".join(["python -m zoo.bench.population", *args.argv]), "quick": args.quick,
            "rounds": args.rounds, "backend": backend, "devices": [backend] * device_count,
            "cpu_count": os.cpu_count(), "jax": jax.__version__, "flax": flax.__version__,
            "load_avg_at_start": load_start, "load_avg_at_end": os.getloadavg(),
            "started": started_at, "spread": "IQR (25th-75th percentile) over rounds",
            "wall_s": round(time.perf_counter() - started, 1)}
    return {"meta": meta, "rows": rows}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m zoo.bench.population", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 learning rates x 2 seeds, debug=smoke, one round")
    p.add_argument("--rounds", type=int, default=None, help="runs of each launcher per sweep (default 2; quick 1)")
    p.add_argument("--sweeps", nargs="+", choices=sorted(SWEEPS), default=list(SWEEPS), metavar="NAME",
                   help=f"which sweeps to run, of {', '.join(SWEEPS)} (default: all)")
    p.add_argument("--out", default="bench_population.json", help="where to write the JSON results")
    p.add_argument("--data-dir", default=os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets"))
    p.add_argument("--work-dir", default=None,
                   help="where the sweeps are kept (default: a temporary folder, removed at the end)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides added to every sweep's command, both launchers")
    args = p.parse_args(argv)
    args.argv, args.data_dir = list(argv), os.path.expanduser(args.data_dir)
    args.rounds = args.rounds or (1 if args.quick else 2)
    return args


def main(argv=None) -> dict:
    from zoo.bench.suite import format_table

    args = parse_args(sys.argv[1:] if argv is None else argv)
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)  # TFDS 'custom data configuration' chatter
    result = run_benchmark(args)
    print(format_table(result), flush=True)
    print(f"load average (1, 5, 15 min): {result['meta']['load_avg_at_start']} at start, "
          f"{result['meta']['load_avg_at_end']} at end")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {os.path.abspath(args.out)}")
    return result


if __name__ == "__main__":
    main()
