"""tests/commands.py runs the entry scripts in forked processes: each must end as the same command in a process of
its own does, whatever it prints, writes, exits with or is stopped by."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import commands
from conftest import ROOT, subprocess_env


def both(args, data_dir, tmp_path):
    """(forked, fresh process) results of the same command; `{way}` in an argument is replaced by each's name."""
    env = subprocess_env(data_dir)
    return [run([sys.executable, *(a.replace("{way}", way) for a in args)], cwd=tmp_path, env=env,
                capture_output=True, text=True, timeout=120)
            for way, run in (("forked", commands.run), ("fresh", subprocess.run))]


def said(text: str, run_dir) -> list:
    """The lines a command printed, without their times, its own run directory, or the dataset preparation the
    first command of a session does."""
    lines = [re.sub(r"^\[[\d\-: ,]+\]", "", line).replace(str(run_dir), "RUN") for line in text.splitlines()]
    return [line for line in lines if "prepared" not in line and "preparing" not in line]


def test_a_refused_command_says_the_same_and_exits_the_same(data_dir, tmp_path):
    forked, fresh = both([str(ROOT / "train.py"), "model=cnn", "model.batch_norm=null", "hydra.run.dir=r"], data_dir,
                         tmp_path)
    assert fresh.returncode == 2 and "model.batch_norm must be true or false" in fresh.stderr
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_run_writes_the_same_results_and_prints_the_same(data_dir, tmp_path):
    runs = both([str(ROOT / "train.py"), "debug=smoke", "hydra.run.dir={way}"], data_dir, tmp_path)
    results = []
    for way, done in zip(("forked", "fresh"), runs):
        assert done.returncode == 0, done.stderr
        saved = json.loads((tmp_path / way / "results.json").read_text())  # relative to its working directory
        results.append({k: v for k, v in saved.items() if k not in ("wall_time_s", "examples_per_s", "model")})
    assert results[0]["test"]["count"] == 359
    assert results[0] == results[1]
    forked, fresh = said(runs[0].stdout, tmp_path / "forked"), said(runs[1].stdout, tmp_path / "fresh")
    assert forked == fresh
    assert forked[-2:] == ["[zoo][INFO] - test: loss=1.7935, accuracy=0.4680, count=359",
                           "[zoo][INFO] - run directory: RUN"]


def test_sigterm_stops_a_forked_run_as_it_stops_one_in_a_process_of_its_own(data_dir, tmp_path):
    ended = []
    for way, start in (("forked", commands.Popen), ("fresh", subprocess.Popen)):
        run_dir = tmp_path / way
        proc = start([sys.executable, "train.py", "trainer.epochs=1000", "logger=quiet", f"hydra.run.dir={run_dir}"],
                     cwd=ROOT, env=subprocess_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while time.time() < deadline and not ((run_dir / "metrics.jsonl").exists() and  # a line: it is training
                                               (run_dir / "metrics.jsonl").stat().st_size):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert os.listdir(run_dir / "checkpoints"), err
        ended.append((proc.returncode, re.sub(r"step \d+", "step N", said(err, run_dir)[-1])))
    assert ended[0][0] != 0
    assert ended[0] == ended[1]
