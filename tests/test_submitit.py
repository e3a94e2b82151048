"""The cluster path: a sweep through hydra-submitit-launcher, each trial a job in its own process.

`hydra/launcher=submitit_local` runs the same code path as `submitit_slurm` (pickled job, the task and the
job-end callback inside the job process) on this machine, so the summary must come out right when jobs in
separate processes finish at once.
"""
import csv
import fcntl
import json
import math
import subprocess
import sys

from omegaconf import OmegaConf

from conftest import ROOT, subprocess_env
from zoo.sweeps import report

DIGITS_TEST_SPLIT = 359  # 0.2 of digits' 1797 images


def test_submitit_local_sweep_runs_each_trial_as_a_job_and_summarises_both(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", "hydra/launcher=submitit_local", "debug=smoke",  # docs/sweeps.md's line
           "optimizer.learning_rate=1e-3,3e-3", "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job_ids = set()
    for job in ("0", "1"):
        results = json.loads((sweep / job / "results.json").read_text())
        assert math.isfinite(results["objective"]) and results["test"]["count"] == DIGITS_TEST_SPLIT
        hydra_cfg = OmegaConf.load(sweep / job / ".hydra" / "hydra.yaml").hydra
        assert hydra_cfg.launcher._target_.endswith("submitit_launcher.LocalLauncher")
        job_ids.add(str(hydra_cfg.job.id))  # submitit's job id: the job process's own
    assert all((sweep / ".submitit" / i / f"{i}_0_log.out").is_file() for i in job_ids) and len(job_ids) == 2
    with open(sweep / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["job"], r["status"], r["optimizer.learning_rate"]) for r in rows) == [
        ("0", "completed", "0.001"), ("1", "completed", "0.003")]
    assert "Jobs: 2 (2 completed)." in (sweep / "summary.md").read_text()


def test_jobs_in_separate_processes_write_the_summary_one_at_a_time(tmp_path, monkeypatch):
    """While one job collects and writes, another job's lock attempt on the sweep root would wait."""
    collect, another_job_would_wait = report.collect, []

    def collect_while_another_job_tries(root, known=None):
        with open(tmp_path / ".summary.lock", "a") as other:  # its own open file: a lock of its own, as in a process
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                another_job_would_wait.append(False)
            except BlockingIOError:
                another_job_would_wait.append(True)
        return collect(root, known)

    monkeypatch.setattr(report, "collect", collect_while_another_job_tries)
    report.write_summary(str(tmp_path))
    assert another_job_would_wait == [True]
