"""The speed benchmark runs end to end and reports every row; it asserts no speed (that is docs/benchmarks.md)."""
import importlib.util
import json
import math
import re
import subprocess
import sys

import jax
import pytest
from flax import nnx

from conftest import ROOT, subprocess_env
from zoo.bench.suite import SECTIONS, expected_row_ids
from zoo.bench.reference import MODELS
from zoo.bench.util import Sizes
from zoo.data import load_dataset
from zoo.train import build_model


HAVE_TORCH = importlib.util.find_spec("torch") is not None  # torch is not a requirement; its rows say so
QUICK_ROWS = [  # written out: the benchmark's own list of expected rows would agree with any omission
    "compile/mlp/train", "compile/mlp/eval", "step_ratio/mlp", "torch_twin/mlp", "loop_efficiency/mlp", "pipeline/mlp",
    "compile/cnn/train", "compile/cnn/eval", "step_ratio/cnn", "torch_twin/cnn",
    "compile/linear/train", "compile/linear/eval", "step_ratio/linear", "loop_efficiency/linear", "pipeline/linear",
    "chunking/linear/naive", "chunking/linear/K=1", "chunking/linear/K=2", "chunking/linear/best",
    "chunking/mlp/naive", "chunking/mlp/K=1", "chunking/mlp/K=2", "chunking/mlp/best",
    "data_load/decode", "data_load/decoded_copy",
    "cold_start/no_cache", "cold_start/cache_populate", "cold_start/cache_warm", "cold_start/speedup",
    "time_to_accuracy/mlp", "peak_rss/mlp", "time_to_accuracy/cnn", "peak_rss/cnn",
]


def test_quick_benchmark_reports_every_row(data_dir, tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "zoo.bench", "--quick", "--out", str(out), "--data-dir", data_dir,
           "--work-dir", str(tmp_path / "work")]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    ids = [r["id"] for r in result["rows"]]
    assert ids == QUICK_ROWS == result["expected_rows"]
    for r in result["rows"]:
        assert f"| {r['id']} " in proc.stdout  # the printed table has the row too
        assert {"value", "spread", "unit", "target", "met", "note"} <= set(r)
        if r["id"].startswith("torch_twin/") and not HAVE_TORCH:
            assert r["value"] is None and r["note"] == "skipped: torch not installed"
            continue
        assert r["value"] is not None and math.isfinite(r["value"]) and r["value"] > 0, r
    assert result["meta"]["quick"] and result["meta"]["devices"]


def test_full_benchmark_has_every_section_and_model():
    ids = expected_row_ids(Sizes(), SECTIONS)
    for k in (1, 4, 16, 50):  # 50: the default log interval, one call per interval
        assert f"chunking/linear/K={k}" in ids and f"chunking/mlp/K={k}" in ids
    for kind in ("mlp", "cnn", "linear"):
        assert f"step_ratio/{kind}" in ids and f"compile/{kind}/train" in ids and f"compile/{kind}/eval" in ids


@pytest.mark.parametrize("kind,dataset,overrides", [
    ("mlp", "digits", ["model.hidden=[512,512]"]),
    ("cnn", "digits", []),
    ("linear", "diabetes", []),
])
def test_reference_has_the_zoo_architecture(make_cfg, kind, dataset, overrides):
    """Same parameter and BatchNorm-statistic shapes: the step ratio compares equal work."""
    cfg = make_cfg(f"model={kind}", f"dataset={dataset}", *overrides)
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    model = nnx.eval_shape(lambda: build_model(cfg, data))
    hidden = (cfg.model.dense,) if kind == "cnn" else tuple(cfg.model.get("hidden", ()))
    init = MODELS[kind][0]
    params, stats = jax.eval_shape(lambda: init(jax.random.key(0), data.input_shape, data.out_features, hidden=hidden,
                                                cnn_channels=tuple(cfg.model.get("channels", ()))))

    def shapes(tree):
        return sorted(tuple(x.shape) for x in jax.tree.leaves(tree))

    assert shapes(params) == shapes(nnx.state(model, nnx.Param))
    assert shapes(stats) == shapes(nnx.state(model, nnx.BatchStat))


def test_time_to_accuracy_note_reports_the_accuracy_reached():
    from zoo.bench.process import tta_rows

    result = {"reached": True, "step": 70, "accuracy": 0.9805, "best_accuracy": 0.9805, "train_called": 0.5,
              "end": 3.5, "peak_rss_mb": 400.0}
    tta = tta_rows({"mlp": result}, {"mlp": 0.975})[0]
    assert tta["value"] == 3.0 and tta["met"] is True and tta["target"] == "acc >= 0.975"
    assert tta["note"].startswith("test acc 0.9805 at step 70"), tta["note"]


def test_printed_table_has_the_iqr_and_its_rounds():
    """As docs/benchmarks.md's table: the IQR column carries the number of rounds it was taken over."""
    from zoo.bench.suite import format_table
    from zoo.bench.util import row

    meta = {"backend": "cpu", "devices": ["cpu"], "cpu_count": 2, "jax": "x", "flax": "y", "spread": "IQR",
            "wall_s": 1.0}
    table = format_table({"meta": meta, "rows": [row("step_ratio/mlp", [1.0, 2.0, 3.0, 4.0, 5.0], "x",
                                                     target=(">=", 0.95))]})
    header, _, line = table.splitlines()[:3]
    assert [c.strip() for c in header.strip("|").split("|")][:3] == ["row", "median", "IQR (n)"]
    assert [c.strip() for c in line.strip("|").split("|")][:6] == ["step_ratio/mlp", "3", "2–4 (5)", "x", ">= 0.95",
                                                                   "yes"]


def test_cold_start_pairs_alternate_which_process_runs_first(monkeypatch, tmp_path):
    """As every interleaved timing: a drift (a page cache filling, a neighbour's load) must not favour one side."""
    from zoo.bench import process
    from zoo.bench.util import Where

    started = []

    def finish(spec):
        started.append("cache" if spec["cache_dir"] else "no_cache")
        return {"imported": 0.5, "built": 1.0, "first_step": 2.0, "first_eval": 2.5}

    monkeypatch.setattr(process, "start_child", lambda spec: spec)
    monkeypatch.setattr(process, "finish_child", finish)
    rows = process.cold_start_rows(Sizes(cold_reps=4), Where(str(tmp_path), str(tmp_path)), quick=False)
    assert started == ["cache"] + ["no_cache", "cache", "cache", "no_cache"] * 2  # the populating run, then pairs
    assert rows[-1]["id"] == "cold_start/speedup" and rows[-1]["spread"]["n"] == 4


def test_every_benchmarks_default_output_is_ignored_by_git():
    """`python -m zoo.bench.population` (likewise zoo.bench.privacy, zoo.bench.sweep_overhead), run as
    docs/benchmarks.md shows in the checkout, left its JSON there as a file git reported untracked."""
    sources = "".join(p.read_text() for p in sorted((ROOT / "zoo" / "bench").glob("*.py")))
    defaults = set(re.findall(r'"--out", default="([^"]+)"', sources))
    assert {"bench.json", "bench_population.json"} <= defaults, defaults
    ignored = set((ROOT / ".gitignore").read_text().split())
    assert defaults <= ignored, defaults - ignored
