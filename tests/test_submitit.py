"""The cluster path: a sweep through hydra-submitit-launcher, each trial a job in its own process.

`hydra/launcher=submitit_local` runs the same code path as `submitit_slurm` (pickled job, the task and the
job-end callback inside the job process) on this machine, so the summary must come out right when jobs in
separate processes finish at once.
"""
import contextlib
import csv
import fcntl
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest
from omegaconf import OmegaConf

import commands
from conftest import ROOT, subprocess_env
from test_cli import TINY, wait_for_lines
from zoo.data import load_dataset
from zoo.sweeps import report

DIGITS_TEST_SPLIT = 359  # 0.2 of digits' 1797 images


def test_submitit_local_sweep_runs_each_trial_as_a_job_and_summarises_both(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", "hydra/launcher=submitit_local", "debug=smoke",  # docs/sweeps.md's line
           "optimizer.learning_rate=1e-3,3e-3", "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}"]
    proc = commands.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300,
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
    # no empty `%j` folder beside them: submitit makes the folder template's own path before it fills it in
    assert sorted(p.name for p in (sweep / ".submitit").iterdir()) == sorted(job_ids)
    with open(sweep / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["job"], r["status"], r["optimizer.learning_rate"]) for r in rows) == [
        ("0", "completed", "0.001"), ("1", "completed", "0.003")]
    assert "Jobs: 2 (2 completed)." in (sweep / "summary.md").read_text()


def test_sigterm_to_the_sweep_is_one_line_and_its_jobs_end_on_their_own(data_dir, make_cfg, tmp_path):
    """The sweep's process only waits for jobs in processes of their own: SIGTERM ended it with 143 and no word."""
    load_dataset(make_cfg(*TINY).dataset, data_dir)  # prepared once, not by both jobs at the same time
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", "hydra/launcher=submitit_local", *TINY, "trainer.max_steps=3000",
           "trainer.log_every=1", "seed=0,1", "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}"]
    proc = commands.Popen(cmd, cwd=ROOT, env=subprocess_env(data_dir), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    wait_for_lines(sweep / "0" / "metrics.jsonl", 30, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        "error: stopped by SIGTERM; its jobs run in processes of their own and end on their own (a job stopped too "
        "saves its checkpoint) — once they have, rerun the same multirun command (same hydra.sweep.dir) to resume "
        "the sweep.")
    deadline = time.monotonic() + 180
    while not all((sweep / job / "results.json").is_file() for job in ("0", "1")):
        assert time.monotonic() < deadline, "the jobs did not end on their own"
        time.sleep(0.5)
    assert json.loads((sweep / "0" / "results.json").read_text())["steps"] == 3000


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


def test_a_trial_past_its_time_limit_fails_with_one_sentence_naming_the_setting(data_dir, make_cfg, tmp_path):
    """submitit ends a job at hydra.launcher.timeout_min (under submitit_local, its controller sends the job
    USR2 30 s before it; requeued max_num_timeout times first) by raising its UncompletedJobError inside the job:
    the sweep ended in that traceback, and the summary gave submitit's words. The test sends the job that signal
    itself once it trains, instead of waiting the 30 s to the controller's: with timeout_min=1 the job reads
    any USR2 as its time limit (past submitit's guaranteed share of one minute)."""
    from submitit.local.local import LocalJobEnvironment

    load_dataset(make_cfg(*TINY).dataset, data_dir)
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", "hydra/launcher=submitit_local", *TINY, "trainer.epochs=1000000",
           "trainer.log_every=1", "seed=0", "hydra.launcher.timeout_min=1",
           "+hydra.launcher.max_num_timeout=0",  # no requeue
           f"hydra.sweep.dir={sweep}"]
    proc = commands.Popen(cmd, cwd=ROOT, env=subprocess_env(data_dir), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        metrics, deadline = sweep / "0" / "metrics.jsonl", time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text()) and proc.poll() is None:
            assert time.monotonic() < deadline, "the job never trained"
            time.sleep(0.05)
        job = _submitit_job_pid(sweep)
        with contextlib.suppress(ProcessLookupError):  # ended already by the controller's own signal, 30 s in
            if job is not None:
                os.kill(job, LocalJobEnvironment._usr_sig())
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    sentence = ("the job ran past hydra.launcher.timeout_min=1 (minutes) and submitit ended it before it finished; "
                "raise hydra.launcher.timeout_min.")
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-3:-2] == [sentence], stderr[-3000:]
    failure = json.loads((sweep / "0" / "failure.json").read_text())
    assert (failure["status"], failure["reason"], failure["user_error"]) == ("failed", sentence, True)
    with open(sweep / "summary.csv") as f:
        assert [r["reason"] for r in csv.DictReader(f)] == [f"UserError: {sentence}"]


def _submitit_job_pid(sweep) -> int | None:
    """The process of the sweep's one submitit_local job: `python -u -m submitit.core._submit <sweep>/.submitit/..`,
    the child of the controller that signals it; None once it has ended."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue  # not a process, or one that ended meanwhile
        if "submitit.core._submit" in args and any(a.startswith(str(sweep / ".submitit")) for a in args):
            found.append(int(entry))
    assert len(found) <= 1, found
    return found[0] if found else None


def test_an_error_while_the_run_closes_after_its_time_limit_still_says_the_time_limit():
    """submitit raises its time limit inside the task wherever the task is; raised in a checkpoint write, it can be
    followed by another error as the run closes its outputs, and that one reached the sweep instead of the sentence."""
    from submitit.core.utils import UncompletedJobError

    from zoo.cli import _ended_by_its_time_limit

    class ClosingFailed(RuntimeError):
        def __init__(self):
            super().__init__("closing failed")
            self.lock = threading.Lock()  # what submitit could not have pickled back to the sweep

    try:
        try:
            raise UncompletedJobError("Job not requeued because: timed-out too many times.")
        finally:
            raise ClosingFailed()
    except ClosingFailed as e:
        ended = _ended_by_its_time_limit(e)
    assert str(ended).startswith("the job ran past hydra.launcher.timeout_min=")
    assert pickle.loads(pickle.dumps(ended)).args == ended.args
    assert _ended_by_its_time_limit(ClosingFailed()) is None  # an error of its own is not the time limit's


def submitit_config(tmp_path, launcher: str, **settings):
    """The part of a multirun's config that RunDirCheck.on_multirun_start reads, with hydra/launcher=<launcher>."""
    target = "Local" if launcher == "submitit_local" else "Slurm"
    params = {"_target_": f"hydra_plugins.hydra_submitit_launcher.submitit_launcher.{target}Launcher",
              "submitit_folder": f"{tmp_path / 's'}/.submitit/%j", "timeout_min": 60, "tasks_per_node": 1, "nodes": 1,
              **settings}
    return OmegaConf.create({"hydra": {"launcher": params, "sweeper": {"_target_": "BasicSweeper"},
                                       "overrides": {"task": ["seed=0,1"]}, "sweep": {"dir": str(tmp_path / "s")}}})


def with_srun(tmp_path, monkeypatch) -> None:
    """A PATH holding an `srun`, as on a SLURM cluster's nodes, for what submitit_slurm checks before submitting."""
    (tmp_path / "slurm-bin").mkdir()
    (tmp_path / "slurm-bin" / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "slurm-bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "slurm-bin"))


@pytest.mark.parametrize("launcher, setting, says", [
    ("submitit_local", {"timeout_min": 0}, "hydra.launcher.timeout_min=0 gives each trial no time (submitit ends its "
                                           "job after that many minutes); set it to 1 or more."),
    ("submitit_slurm", {"timeout_min": -5}, "hydra.launcher.timeout_min=-5 gives each trial no time (submitit ends "
                                            "its job after that many minutes); set it to 1 or more."),
    ("submitit_slurm", {"tasks_per_node": 0}, "hydra.launcher.tasks_per_node=0 starts no process for a trial; set it "
                                              "to 1 or more."),
    ("submitit_slurm", {"nodes": 0}, "hydra.launcher.nodes=0 starts no process for a trial; set it to 1 or more."),
    ("submitit_local", {"nodes": 2}, "hydra.launcher.nodes=2 cannot be given by hydra/launcher=submitit_local, which "
                                     "runs each trial as one process on this machine; set it to 1."),
    ("submitit_local", {"tasks_per_node": 2}, "hydra.launcher.tasks_per_node=2 cannot be given by "
                                              "hydra/launcher=submitit_local, which runs each trial as one process on "
                                              "this machine; set it to 1."),
    ("submitit_local", {"submitit_folder": "/proc/zoo/%j"}, "hydra.launcher.submitit_folder=/proc/zoo/%j is not "
                                                            "writable"),
])
def test_launcher_settings_that_cannot_run_a_trial_are_refused_before_the_sweep(tmp_path, capsys, monkeypatch,
                                                                                launcher, setting, says):
    """timeout_min=0 ended in submitit's UncompletedJobError traceback, nodes=2 in a ValueError, tasks_per_node=0 in
    an AssertionError, an unwritable submitit_folder in a FileNotFoundError; tasks_per_node=2 under submitit_local
    ran the trial twice at once and the sweep never ended. Each is refused before the sweep dir is made."""
    from zoo.cli import RunDirCheck

    with_srun(tmp_path, monkeypatch)
    RunDirCheck().on_multirun_start(submitit_config(tmp_path / "fine", launcher))  # the defaults pass
    with pytest.raises(SystemExit) as exit_:
        RunDirCheck().on_multirun_start(submitit_config(tmp_path, launcher, **setting))
    assert exit_.value.code == 2 and not (tmp_path / "s").exists()
    assert capsys.readouterr().err.startswith(f"error: {says}")


def test_a_submitit_sweep_with_no_time_is_one_sentence_and_writes_nothing(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", "hydra/launcher=submitit_local", "debug=smoke",
           "optimizer.learning_rate=1e-3,3e-3", "hydra.launcher.timeout_min=0", f"hydra.sweep.dir={sweep}"]
    proc = commands.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120,
                        check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "error: hydra.launcher.timeout_min=0 gives each trial no time (submitit ends its job after that many minutes); "
        "set it to 1 or more."]
    assert not sweep.exists()


def test_the_slurm_launcher_without_slurm_is_one_sentence_before_the_sweep(tmp_path, capsys, monkeypatch):
    """On a machine without SLURM's srun (a laptop, a node outside the cluster) submitit_slurm ended in submitit's
    `RuntimeError: Could not detect "srun"` traceback, after the sweep had written its multirun.yaml."""
    from zoo.cli import RunDirCheck

    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    with pytest.raises(SystemExit) as exit_:
        RunDirCheck().on_multirun_start(submitit_config(tmp_path, "submitit_slurm"))
    assert exit_.value.code == 2 and not (tmp_path / "s").exists()
    assert capsys.readouterr().err == (
        "error: hydra/launcher=submitit_slurm needs SLURM (its srun command), which is not on this machine's PATH; "
        "run the sweep on a node of the cluster, or use hydra/launcher=submitit_local to run it here.\n")
    with_srun(tmp_path, monkeypatch)
    RunDirCheck().on_multirun_start(submitit_config(tmp_path / "fine", "submitit_slurm"))
