"""The population benchmark runs both launchers over the same trials and reports every row; it asserts no speed
(the figures are in docs/benchmarks.md)."""
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env

ROWS = [  # written out: the benchmark's own list would agree with any omission
    "population/mlp_digits/basic", "population/mlp_digits/population", "population/mlp_digits/speedup",
    "population/mlp_digits/best_test_accuracy",
    "population/linear_diabetes/basic", "population/linear_diabetes/population",
    "population/linear_diabetes/speedup", "population/linear_diabetes/best_test_loss",
]
ACCELERATOR_ROW = "population/mlp_digits_64/speedup"


def results(sweep_dir):
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/results.json"))]


def test_quick_population_benchmark(data_dir, tmp_path):
    out, work = tmp_path / "bench.json", tmp_path / "work"
    cmd = [sys.executable, "-m", "zoo.bench.population", "--quick", "--out", str(out), "--data-dir", data_dir,
           "--work-dir", str(work)]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {r["id"]: r for r in result["rows"]}
    assert list(rows) == ROWS + [ACCELERATOR_ROW]
    for r in result["rows"]:
        assert f"| {r['id']} " in proc.stdout  # the printed table has the row too
    if result["meta"]["backend"] == "cpu":
        assert rows[ACCELERATOR_ROW]["value"] is None and "skipped: no accelerator" in proc.stdout
    for name in ("mlp_digits", "linear_diabetes"):
        basic, population = rows[f"population/{name}/basic"], rows[f"population/{name}/population"]
        for r in (basic, population, rows[f"population/{name}/speedup"]):
            assert r["value"] is not None and math.isfinite(r["value"]) and r["value"] > 0, r
        assert rows[f"population/{name}/speedup"]["value"] == pytest.approx(basic["value"] / population["value"])
        assert all(math.isfinite(s) and s > 0 for s in basic["per_job_s"] + population["per_job_s"])
        best = next(r for r in result["rows"] if r["id"].startswith(f"population/{name}/best_test_"))
        basic_best, population_best = best["best"]["basic"][0], best["best"]["population"][0]
        assert basic_best["jobs"] == population_best["jobs"] == 4  # the whole 2 x 2 grid, in both sweeps
        assert best["met"] is True and population_best["value"] == pytest.approx(basic_best["value"], rel=1e-5)
        # the same trials: the population sweep trained its four as one population, the basic one alone
        assert [r.get("population") for r in results(work / f"{name}-basic-0")] == [None] * 4
        assert [r["population"]["members"] for r in results(work / f"{name}-population-0")] == [4] * 4
