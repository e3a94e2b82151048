"""The sweep summary's unfinished and non-finite rows, and the digits_cnn Optuna preset run end to end."""
import csv
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env
from zoo.sweeps import report as sweep_report


def write_job(root, name: str, overrides: list, results=None, failure=None) -> None:
    hydra_dir = root / name / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (hydra_dir / "config.yaml").write_text("optimized_metric: test/accuracy\n")
    (hydra_dir / "hydra.yaml").write_text("hydra:\n  sweeper:\n    direction: maximize\n")
    if results is not None:  # json writes NaN as NaN, as train() would for a diverged objective
        (root / name / "results.json").write_text(json.dumps(results))
    if failure is not None:
        (root / name / "failure.json").write_text(json.dumps(failure))


def completed(objective: float) -> dict:
    return {"objective": objective, "steps": 6, "wall_time_s": 1.0, "test": {"accuracy": objective, "count": 359}}


def test_summary_ranks_completed_then_unfinished_then_failed_and_says_why(tmp_path):
    write_job(tmp_path, "0", ["model.dropout=0.1"], results=completed(0.5))
    write_job(tmp_path, "1", ["model.dropout=0.2"], results=completed(math.nan))
    write_job(tmp_path, "2", ["model.dropout=0.3"])  # still running, or killed: neither results nor failure
    write_job(tmp_path, "3", ["model.dropout=0.4"], results=completed(0.9))
    write_job(tmp_path, "4", ["model.dropout=0.5"], failure={"error": "NonFiniteLoss", "reason": "loss is nan"})
    summary = sweep_report.write_summary(str(tmp_path))
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["job"], r["status"]) for r in rows] == [
        ("3", "completed"), ("0", "completed"), ("2", "unfinished"), ("1", "failed"), ("4", "failed")]
    assert [r["rank"] for r in rows] == ["1", "2", "3", "4", "5"]
    by_job = {r["job"]: r for r in rows}
    assert by_job["1"]["reason"] == "objective is nan" and by_job["1"]["model.dropout"] == "0.2"
    assert by_job["2"]["objective"] == "" and by_job["2"]["reason"] == ""
    assert by_job["4"]["reason"] == "NonFiniteLoss: loss is nan"
    assert summary["best"]["job"] == "3"  # the NaN job never wins, whatever NaN compares as
    markdown = (tmp_path / "summary.md").read_text()
    assert "Jobs: 5 (2 completed, 1 unfinished, 2 failed)." in markdown
    assert "| 3 | 2 | unfinished |" in markdown and "| 4 | 1 | failed | nan |" in markdown


def test_digits_cnn_search_runs_with_a_tiny_budget(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", "hparams_search=digits_cnn", "debug=smoke", "hydra.sweeper.n_trials=2",
           f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = {str(p.parent): json.loads(p.read_text()) for p in sweep.glob("*/results.json")}
    assert len(results) == 2
    for result in results.values():
        assert result["test"]["count"] == 359 and result["steps"] == 6
        assert result["objective"] == result["validation"]["accuracy"]  # the preset selects on validation
    with open(sweep / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert float(rows[0]["objective"]) == pytest.approx(max(r["objective"] for r in results.values()))
    assert {r["run_dir"] for r in rows} == set(results)
    for row in rows:  # the sampled values are inside the preset's search space
        sampled = dict(o.split("=", 1) for o in row["overrides"].split())
        assert 1e-4 <= float(sampled["optimizer.learning_rate"]) <= 1e-2
        assert sampled["trainer.batch_size"] in ("32", "64", "128")
