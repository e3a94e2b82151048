"""The sweep-overhead benchmark runs a real multirun and prints every row (it asserts no speed)."""
import json
import math
import tempfile

import pytest

from conftest import subprocess_env
from zoo.bench.sweep_overhead import figures, main


def test_figures_split_the_command_into_start_jobs_and_end():
    # launched at 0; sweep starts at 3; job spans 3.5-5.5 and 6-8, their train() calls 3.6-5.4 and 6.1-7.9
    # (1.8 s each, 1.5 s of it to the final evals); exit at 10.
    stamps = [("multirun_start", 3), ("job_start", 3.5), ("train_start", 3.6), ("train_end", 5.4),
              ("job_end", 5.5), ("job_start", 6), ("train_start", 6.1), ("train_end", 7.9), ("job_end", 8)]
    run = {"launched": 0.0, "ended": 10.0, "wall_time_s": [1.5, 1.5],
           "stamps": [{"event": e, "t": t} for e, t in stamps]}
    assert figures(run) == pytest.approx({"jobs": 2, "wall": 10, "train": 3.6, "per_job": 0.7, "with_start": 3.2,
                                          "finish": 0.3, "in_job": 0.2, "between_jobs": 0.5, "start": 3,
                                          "end": 2})


def test_a_populations_shared_training_counts_once():
    # two members trained together in one 4.5 s call (each reports the group's 4 s to its final evals), handed
    # back at 7.5-7.6 and 7.7-7.8
    stamps = [("multirun_start", 2), ("train_start", 2.5), ("train_end", 7), ("job_start", 7.5), ("job_end", 7.6),
              ("job_start", 7.7), ("job_end", 7.8)]
    run = {"launched": 0.0, "ended": 9.0, "wall_time_s": [4.0, 4.0], "members": [2, 2],
           "stamps": [{"event": e, "t": t} for e, t in stamps]}
    assert figures(run) == pytest.approx({"jobs": 2, "wall": 9, "train": 4.5, "per_job": 0.65, "with_start": 2.25,
                                          "finish": 0.25, "in_job": None, "between_jobs": None, "start": 2,
                                          "end": 1.2})


def test_quick_sweep_overhead_prints_every_row(data_dir, tmp_path, monkeypatch, capsys):
    for name, value in subprocess_env(data_dir).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    out, scratch = tmp_path / "sweep_overhead.json", tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the multirun goes without --work-dir
    result = main(["--quick", "--out", str(out)])
    assert not any(scratch.iterdir())  # the multirun's outputs are gone with it
    printed = capsys.readouterr().out
    assert "2 jobs" in printed
    # written out: the benchmark's own list would agree with a row dropped from it
    rows = ["per_job", "with_start", "finish", "in_job", "between_jobs", "start", "end"]
    assert [r["id"] for r in result["rows"]] == [f"sweep_overhead/{key}" for key in rows]
    for r in result["rows"]:
        assert f"| {r['id']} |" in printed
        assert math.isfinite(r["value"]) and r["value"] > 0, r
    assert json.loads(out.read_text())["rows"] == result["rows"]
