"""Benchmarks that need a fresh process: cold start (with/without the persistent compilation cache) and
time to accuracy with peak RSS. The parent launches `python -m zoo.bench --child SPEC`; the child prints
one JSON line last. Wall-clock times are `time.time()` so parent and child share the clock.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from zoo.bench.util import ROOT, compose_cfg, ratios, round_order, row


class _Reached(Exception):
    pass


def _first_step(spec: dict) -> dict:
    """`python train.py debug=smoke` up to its first finished train step, then its first eval."""
    import jax

    from zoo.loop import evaluate
    from zoo.train import build

    imported = time.time()
    cfg = compose_cfg(spec["overrides"], spec["data_dir"], spec["out_dir"], spec["cache_dir"])
    run = build(cfg)
    compiled, mode = run.compiled, run.compiled.mode
    state, acc = mode.put_state(run.host_state), compiled.put_sums(compiled.zero_sums)
    built = time.time()
    state, acc = compiled.train(state, acc, *run.feed.args(0, 1))
    jax.block_until_ready((state, acc))
    first_step = time.time()
    evaluate(state, compiled, *run.eval_sets["test"])
    return {"imported": imported, "built": built, "first_step": first_step, "first_eval": time.time()}


def _time_to_accuracy(spec: dict) -> dict:
    """zoo.train.train(cfg) with frequent evals; stops at the first test eval reaching the target."""
    import zoo.outputs
    import zoo.train
    from zoo.run_logger import RunLogger

    cfg = compose_cfg(spec["overrides"], spec["data_dir"], spec["out_dir"], spec.get("cache_dir"))
    seen = {"best": 0.0}

    class TargetLogger(RunLogger):
        def log(self, step, split, metrics, **kwargs):
            super().log(step, split, metrics, **kwargs)
            if split == "test":
                seen["best"] = max(seen["best"], metrics["accuracy"])
                if metrics["accuracy"] >= spec["target"]:
                    seen.update(reached=time.time(), step=step, accuracy=metrics["accuracy"])
                    raise _Reached

    started = time.time()
    try:
        zoo.outputs.RunLogger = TargetLogger  # where train() opens its logger
        zoo.train.train(cfg)
    except _Reached:
        pass
    finally:
        zoo.outputs.RunLogger = RunLogger
    end = seen.get("reached", time.time())
    return {"train_called": started, "end": end, "reached": "reached" in seen, "step": seen.get("step"),
            "accuracy": seen.get("accuracy"), "best_accuracy": seen["best"], "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak resident set. VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork+exec, so a
    child would report its parent's peak."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024  # kB
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


CHILDREN = {"first_step": _first_step, "time_to_accuracy": _time_to_accuracy}


def child_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    result = CHILDREN[spec["task"]](spec)
    print(json.dumps(result), flush=True)


def start_child(spec: dict):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    launched = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "zoo.bench", "--child", json.dumps(spec)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, launched


def finish_child(handle, timeout: float = 600) -> dict:
    proc, launched = handle
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed (exit {proc.returncode}):\n{err[-3000:]}")
    return _since(json.loads(out.strip().splitlines()[-1]), launched)


def run_here(spec: dict) -> dict:
    """A child's measurement in this process (quick mode: no interpreter start; RSS is this process's)."""
    started = time.time()
    return _since(CHILDREN[spec["task"]](spec), started)


def _since(result: dict, start: float) -> dict:
    """Absolute time.time() stamps -> seconds since `start`."""
    stamps = ("imported", "built", "first_step", "first_eval", "train_called", "end")
    return {k: v - start if k in stamps else v for k, v in result.items()}


def cold_start_rows(sizes, where, quick: bool) -> list:
    """Process start -> first finished step, without a cache and with a warm one (populated by a first run)."""
    data_dir, work = where.data_dir, where.work
    cache = tempfile.mkdtemp(prefix="cold_cache_", dir=work)

    def first_step(cache_dir):
        spec = {"task": "first_step", "overrides": ["debug=smoke", "logger=quiet", *sizes.tta_overrides.get("mlp", [])],
                "data_dir": data_dir, "out_dir": os.path.join(work, "cold"), "cache_dir": cache_dir}
        return finish_child(start_child(spec))

    populate = first_step(cache)  # a cache miss: compiles, then writes the entries
    runs = {"no_cache": [], "warm": []}
    sides = ["warm"] if quick else ["no_cache", "warm"]  # quick mode takes the populating run as the uncached one
    for r in range(sizes.cold_reps):
        for side in round_order(sides, r):
            runs[side].append(first_step(cache if side == "warm" else None))
    no_cache, warm = runs["no_cache"] or [populate], runs["warm"]
    entries = len(os.listdir(cache))

    def stages(runs):
        keys = ("imported", "built", "first_step", "first_eval")
        return {k: round(sorted(r[k] for r in runs)[len(runs) // 2], 3) for k in keys}

    cold = [r["first_step"] for r in no_cache]
    hot = [r["first_step"] for r in warm]
    return [
        row("cold_start/no_cache", cold, "s", note="process start -> first step done", stages=stages(no_cache)),
        row("cold_start/cache_populate", populate["first_step"], "s", note="empty cache: compile + write",
            stages=stages([populate])),
        row("cold_start/cache_warm", hot, "s", note=f"{entries} cache entries", stages=stages(warm)),
        row("cold_start/speedup", ratios(cold, hot), "x", target=(">=", 1.05),
            note="no_cache / cache_warm (paired runs)"),
    ]


def tta_specs(sizes, where, targets: dict) -> dict:
    specs = {}
    for model, target in targets.items():
        overrides = [f"model={model}", "dataset=digits", f"trainer.eval_every={sizes.tta_eval_every}", "logger=quiet"]
        if sizes.tta_max_steps:
            overrides.append(f"trainer.max_steps={sizes.tta_max_steps}")
        overrides += sizes.tta_overrides.get(model, [])
        specs[model] = {"task": "time_to_accuracy", "overrides": overrides, "target": target,
                        "data_dir": where.data_dir, "out_dir": tempfile.mkdtemp(prefix=f"tta_{model}_", dir=where.work),
                        "cache_dir": where.cache_dir}
    return specs


def tta_rows(results: dict, targets: dict, in_process: bool = False) -> list:
    rows = []
    for model, r in results.items():
        note = (f"test acc {r['best_accuracy']:.4g} at step {r['step']}" if r["reached"]
                else f"not reached; best {r['best_accuracy']:.4f}")
        tta = row(f"time_to_accuracy/{model}", round(r["end"] - r["train_called"], 3) if r["reached"] else None,
                  "s", note=note + "; incl. compile", process_seconds=round(r["end"], 3), **r)
        tta["target"], tta["met"] = f"acc >= {targets[model]}", r["reached"]
        where = "the benchmark process so far (quick: in-process)" if in_process else "its own training process"
        rows += [tta, row(f"peak_rss/{model}", round(r["peak_rss_mb"], 1), "MB", note=f"peak RSS of {where}")]
    return rows
