"""Sweeps end to end: `python train.py -m ...` as a subprocess with Hydra's basic sweeper and the Optuna presets.

Contracts: every job has its own run directory; the summary's best row is the best results.json; a trial
that diverges is recorded as failed with its reason and does not end the sweep; a stored study continues.
"""
import csv
import json
import pathlib
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, subprocess_env
from zoo import sweep_report


def multirun(data_dir, sweep_dir, *overrides, check=True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train.py", "-m", "debug=smoke", f"hydra.sweep.dir={sweep_dir}", *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300,
                          check=False)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def summary_rows(sweep_dir) -> list:
    with open(sweep_dir / "summary.csv") as f:
        return list(csv.DictReader(f))


def job_results(sweep_dir) -> dict:
    """run dir -> results.json for every job that completed."""
    return {str(p.parent): json.loads(p.read_text()) for p in sweep_dir.glob("*/results.json")}


def study_trials(sweep_dir, study_name) -> list:
    import optuna

    return optuna.load_study(study_name=study_name, storage=f"sqlite:///{sweep_dir}/optuna.db").trials


def test_grid_sweep_writes_a_run_per_job_and_a_correct_summary(data_dir, tmp_path):
    sweep = tmp_path / "grid"
    multirun(data_dir, sweep, "model=linear,mlp")
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for job in ("0", "1"):
        for artifact in ("results.json", "metrics.jsonl", ".hydra/config.yaml", ".hydra/overrides.yaml"):
            assert (sweep / job / artifact).is_file(), f"{job}/{artifact}"
    results = job_results(sweep)
    best_dir, best = max(results.items(), key=lambda item: item[1]["objective"])  # digits: accuracy, maximised
    rows = summary_rows(sweep)
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert {r["model"] for r in rows} == {"linear", "mlp"}  # the swept parameter is a column
    assert rows[0]["run_dir"] == best_dir
    assert float(rows[0]["objective"]) == pytest.approx(best["objective"])
    assert float(rows[0]["test/accuracy"]) == pytest.approx(best["test"]["accuracy"])
    assert int(rows[0]["steps"]) == best["steps"]
    assert (sweep / "summary.png").stat().st_size > 0
    assert best_dir in (sweep / "summary.md").read_text()

    written = (sweep / "summary.csv").read_text()  # `python -m zoo.sweep_report PATH` rebuilds the same table
    for name in ("summary.csv", "summary.md", "summary.png"):
        (sweep / name).unlink()
    assert sweep_report.main([str(sweep)]) == 0
    assert (sweep / "summary.csv").read_text() == written
    assert (sweep / "summary.md").is_file() and (sweep / "summary.png").is_file()


def test_optuna_preset_runs_n_trials_and_reports_the_best(data_dir, tmp_path):
    sweep = tmp_path / "optuna"
    proc = multirun(data_dir, sweep, "hparams_search=digits_mlp", "hydra.sweeper.n_trials=3")
    trials = study_trials(sweep, "digits_mlp")
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    results = job_results(sweep)
    assert len(results) == 3
    best_dir, best = max(results.items(), key=lambda item: item[1]["objective"])
    assert best["objective"] == pytest.approx(max(t.value for t in trials))
    assert OmegaConf.load(sweep / "optimization_results.yaml").best_value == pytest.approx(best["objective"])
    rows = summary_rows(sweep)
    assert rows[0]["run_dir"] == best_dir and "optimizer.learning_rate" in rows[0]
    assert f"run directory: {best_dir}" in proc.stdout


def test_diverging_trials_fail_with_their_reason_and_the_sweep_goes_on(data_dir, tmp_path):
    sweep = tmp_path / "diverge"
    multirun(data_dir, sweep, "hparams_search=diabetes_linear", "hydra.sweeper.n_trials=3",
             "optimizer.learning_rate=choice(1e-2,1e30)")  # 1e30 overflows the squared error within two steps
    states = [t.state.name for t in study_trials(sweep, "diabetes_linear")]
    assert len(states) == 3 and "FAIL" in states and "COMPLETE" in states, states
    rows = summary_rows(sweep)
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == states.count("FAIL") and rows[-len(failed):] == failed  # failed last
    for row in failed:
        assert float(row["optimizer.learning_rate"]) == 1e30 and "non-finite" in row["reason"]
        failure = json.loads((pathlib.Path(row["run_dir"]) / "failure.json").read_text())
        assert failure["error"] == "NonFiniteLoss" and failure["user_error"]
        assert not (pathlib.Path(row["run_dir"]) / "results.json").exists()
    assert "NonFiniteLoss: training loss became non-finite" in (sweep / "summary.md").read_text()


def test_grid_sweep_with_a_failed_job_still_writes_the_summary(data_dir, tmp_path):
    sweep = tmp_path / "grid_fail"
    proc = multirun(data_dir, sweep, "dataset=diabetes", "model=linear", "optimizer.learning_rate=1e-2,1e30",
                    check=False)
    assert proc.returncode != 0  # Hydra's basic sweeper raises after all jobs ran (and skips on_multirun_end)
    rows = summary_rows(sweep)
    assert [(r["job"], r["status"]) for r in rows] == [("0", "completed"), ("1", "failed")]
    assert "non-finite" in rows[1]["reason"] and (sweep / "1" / "failure.json").is_file()


def test_rerunning_a_stored_study_continues_it(data_dir, tmp_path):
    sweep = tmp_path / "resume"
    command = ("hparams_search=diabetes_linear", "hydra.sweeper.n_trials=1")
    multirun(data_dir, sweep, *command)
    assert len(study_trials(sweep, "diabetes_linear")) == 1
    multirun(data_dir, sweep, *command)
    assert [t.number for t in study_trials(sweep, "diabetes_linear")] == [0, 1]
    results = job_results(sweep)
    assert len(results) == 2  # the resumed trial got a run directory of its own
    rows = summary_rows(sweep)
    assert len(rows) == 2
    assert float(rows[0]["objective"]) == pytest.approx(min(r["objective"] for r in results.values()))  # test/loss
