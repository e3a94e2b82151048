"""Speed benchmark: `python -m zoo.bench [--quick] [--out bench.json]` prints a table and writes JSON.

Sections (see docs/benchmarks.md): the compiled step against a hand-written JAX + optax step (step_ratio),
the real loop against the isolated step (loop_efficiency), the input pipeline alone (pipeline), compile
times and cold start with/without the persistent compilation cache, time to accuracy on digits with peak
RSS, trainer.steps_per_call=K against the naive one-step-per-call loop (chunking), a PyTorch twin of the
MLP and CNN when torch is installed (torch_twin), and loading an MNIST-sized prepared split (data_load).
Every timing is interleaved (A/B rounds after a warm-up, block_until_ready) and reported as the median
over rounds with its interquartile range; ratios are computed per round pair.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

SECTIONS = ("steps", "chunking", "data_load", "cold_start", "time_to_accuracy")
STEP_KINDS, LOOP_KINDS, CHUNK_KINDS = ("mlp", "cnn", "linear"), ("mlp", "linear"), ("linear", "mlp")
TWIN_KINDS = ("mlp", "cnn")  # the models a PyTorch user would write the same way
TARGET_ACCURACY = {"mlp": 0.975, "cnn": 0.985}


def expected_row_ids(sizes, sections=SECTIONS) -> list:
    ids = []
    if "steps" in sections:
        for kind in STEP_KINDS:
            ids += [f"compile/{kind}/train", f"compile/{kind}/eval", f"step_ratio/{kind}"]
            ids += [f"torch_twin/{kind}"] if kind in TWIN_KINDS else []
            ids += [f"loop_efficiency/{kind}", f"pipeline/{kind}"] if kind in LOOP_KINDS else []
    if "chunking" in sections:
        for kind in CHUNK_KINDS:
            ids += [f"chunking/{kind}/{v}" for v in ("naive", *[f"K={k}" for k in sizes.chunk_ks], "best")]
    if "data_load" in sections:
        ids += ["data_load/decode", "data_load/decoded_copy"]
    if "cold_start" in sections:
        ids += [f"cold_start/{v}" for v in ("no_cache", "cache_populate", "cache_warm", "speedup")]
    if "time_to_accuracy" in sections:
        ids += [f"{what}/{model}" for model in TARGET_ACCURACY for what in ("time_to_accuracy", "peak_rss")]
    return ids


def _meta(args, sizes) -> dict:
    import flax
    import jax
    import optax

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(__file__), check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"command": " ".join(["python -m zoo.bench", *args.argv]), "quick": args.quick, "commit": commit,
            "jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
            "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
            "cpu_count": os.cpu_count(), "load_avg_at_start": os.getloadavg(), "platform": platform.platform(),
            "python": platform.python_version(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "spread": "IQR (25th-75th percentile) over rounds", "sizes": dict(vars(sizes))}


def run_benchmark(args, work: str) -> dict:
    from zoo.bench.chunks import chunk_benchmarks
    from zoo.bench.data_load import data_load_rows
    from zoo.bench.process import cold_start_rows, finish_child, run_here, start_child, tta_rows, tta_specs
    from zoo.bench.steps import step_benchmarks
    from zoo.bench.util import QUICK, Sizes, Where, compose_cfg
    from zoo.data import load_dataset

    sizes = QUICK if args.quick else Sizes()
    data_dir = os.path.expanduser(args.data_dir)
    where = Where(data_dir, work, tempfile.mkdtemp(prefix="shared_cache_", dir=work) if sizes.shared_cache else None)
    sections = args.only or SECTIONS
    started = time.perf_counter()
    meta, rows = _meta(args, sizes), []
    section_s = meta["section_s"] = {}

    def timed_section(name, fn):
        start = time.perf_counter()
        out = fn()
        section_s[name] = round(time.perf_counter() - start, 1)
        return out

    if {"cold_start", "time_to_accuracy"} & set(sections):  # prepare digits once, before any child reads it
        load_dataset(compose_cfg([], data_dir, work).dataset, data_dir)
    for kind in STEP_KINDS if "steps" in sections else ():
        rows += timed_section(f"steps/{kind}", lambda k=kind: step_benchmarks(k, sizes, where))
    for kind in CHUNK_KINDS if "chunking" in sections else ():
        rows += timed_section(f"chunking/{kind}", lambda k=kind: chunk_benchmarks(k, sizes, where))
    if "data_load" in sections:
        rows += timed_section("data_load", lambda: data_load_rows(sizes, where))
    if "cold_start" in sections:
        rows += timed_section("cold_start", lambda: cold_start_rows(sizes, where, args.quick))
    if "time_to_accuracy" in sections:  # a fresh process each, so peak RSS is the run's own (quick: in-process)
        # quick: 4 steps reach no real target; any accuracy counts, so the rows still carry a time
        targets = dict.fromkeys(TARGET_ACCURACY, 0.0) if args.quick else TARGET_ACCURACY
        specs = tta_specs(sizes, where, targets)
        measure = run_here if args.quick else lambda spec: finish_child(start_child(spec))
        results = timed_section("time_to_accuracy", lambda: {m: measure(spec) for m, spec in specs.items()})
        rows += tta_rows(results, targets, args.quick)
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    return {"meta": meta, "rows": rows, "expected_rows": expected_row_ids(sizes, sections)}


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def format_table(result: dict) -> str:
    header = ("row", "median", "IQR (n)", "unit", "target", "met", "note")
    lines = []
    for r in result["rows"]:
        s = r["spread"]
        iqr = f"{_fmt(s['q25'])}–{_fmt(s['q75'])} ({s['n']})" if s and s["n"] > 1 else ""
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        lines.append((r["id"], _fmt(r["value"]), iqr, r["unit"], r["target"] or "", met, r["note"]))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]

    def fmt(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(fmt, lines)]
    m = result["meta"]
    out.append(f"\n{m['backend']} x{len(m['devices'])}, {m['cpu_count']} CPUs, jax {m['jax']}, flax {m['flax']}; "
               f"spread: {m['spread']}; {m['wall_s']} s in all")
    return "\n".join(out)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m zoo.bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes and repetitions: every row, in seconds")
    p.add_argument("--out", default="bench.json", help="where to write the JSON results")
    p.add_argument("--data-dir", default=os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets"))
    p.add_argument("--work-dir", default=None,
                   help="scratch for run outputs and caches (kept; default: a temporary folder, removed at the end)")
    p.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: one fresh-process measurement
    args = p.parse_args(argv)
    args.argv = list(argv)
    return args


def main(argv=None) -> dict:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)  # TFDS 'custom data configuration' chatter
    if args.child:
        from zoo.bench.process import child_main

        return child_main(args.child)
    from zoo.bench.util import scratch_dir

    with scratch_dir(args.work_dir, "zoo_bench_") as work:
        result = run_benchmark(args, work)
    print(format_table(result), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {os.path.abspath(args.out)}")
    return result

