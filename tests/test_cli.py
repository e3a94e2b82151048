"""The commands a user types, each a process of its own (tests/commands.py): exit codes, messages, signals, kill -9."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import commands
from conftest import KILL_IN_SAVE, ROOT, subprocess_env
from zoo.checkpoint import Checkpoints
from zoo.train import build, train

TINY = ["model.hidden=[32]", "model.dropout=0.0", "trainer.batch_size=16", "trainer.eval_every=0",
        "logger=quiet", "trainer.epochs=100"]


def run(args, data_dir, timeout=120, script="train.py"):
    return commands.run([sys.executable, script, *args], cwd=ROOT, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=timeout)


def start(args, data_dir):
    return commands.Popen([sys.executable, "train.py", *args], cwd=ROOT, env=subprocess_env(data_dir),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_beside(first_args, busy_path, second_args, data_dir):
    """The second command's result, run while the first (started first) has begun writing `busy_path`."""
    first = start(first_args, data_dir)
    try:
        wait_for_lines(busy_path, 1, first)
        return run(second_args, data_dir)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)


def wait_for_lines(path, n, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and sum(1 for _ in open(path)) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise TimeoutError(f"{path} never reached {n} lines")


def test_smoke_run_help_and_cfg(data_dir, tmp_path):
    done = run(["debug=smoke", f"hydra.run.dir={tmp_path / 'run'}"], data_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "run" / "results.json").read_text())["test"]["count"] == 359
    assert (tmp_path / "run" / ".hydra" / "config.yaml").exists()
    shown = run(["--help"], data_dir)
    assert shown.returncode == 0 and "model: cnn, linear, mlp" in shown.stdout
    job = run(["model=cnn", "--cfg", "job"], data_dir)
    assert job.returncode == 0 and "_target_: zoo.models.CNN" in job.stdout


@pytest.mark.parametrize("script,groups", [("eval.py", ["distributed", "parallel"]),
                                           ("export.py", ["distributed", "parallel"]), ("predict.py", [])])
def test_the_help_of_a_reader_of_runs_lists_only_the_groups_it_takes(data_dir, script, groups):
    """`python eval.py --help` listed every group of conf/ under 'Compose your configuration from those groups':
    model, dataset, optimizer, ..., each of which it then refused as `not a setting of eval.py` (the run's own
    settings are read from the run). Only the groups it takes, each with the options conf/ holds."""
    shown = run(["--help"], data_dir, script=script)
    assert shown.returncode == 0, shown.stderr
    groups_part, config_part = shown.stdout.split("== Config ==")
    listed = dict(re.findall(r"^(\w+): (\w+(?:, \w+)*)$", groups_part, re.M))
    assert listed == {g: ", ".join(sorted(p.stem for p in (ROOT / "conf" / g).glob("*.yaml"))) for g in groups}
    assert ("== Configuration groups ==" in groups_part) == bool(groups), groups_part
    assert "run_dir: ???" in config_part and shown.stdout.startswith(f"{script[:-3]} is powered by Hydra.")


def test_eval_prints_its_result_alone_on_stdout(data_dir, tmp_path):
    """Its log lines go to stderr: `python eval.py run_dir=... | head -1` reads the result, nothing else."""
    assert run(["debug=smoke", f"hydra.run.dir={tmp_path / 'run'}"], data_dir).returncode == 0
    done = run([f"run_dir={tmp_path / 'run'}", f"hydra.run.dir={tmp_path / 'eval'}"], data_dir, script="eval.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.strip()] and done.stdout.startswith("test @ step 6: loss=")
    assert "wrote " in done.stderr  # where the eval json went: still said, on stderr
    quiet = run([f"run_dir={tmp_path / 'run'}", f"hydra.run.dir={tmp_path / 'eval2'}", "hydra/job_logging=disabled"],
                data_dir, script="eval.py")  # another logging preset replaces the stderr one whole
    assert quiet.returncode == 0 and quiet.stdout == done.stdout, quiet.stderr


@pytest.mark.parametrize("override,setting", [
    ("trainer.batch_size=0", "trainer.batch_size"),
    ("optimizer.learning_rate=-1", "optimizer.learning_rate"),
    ("model=cnn dataset=diabetes", "model=linear"),
    ("debug=smoke trainer.resume=nowhere", "trainer.resume"),  # refused once the checkpoints are open
    ("recipe=null", "mlp_diabetes (or ~recipe to leave it out)."),  # Hydra's own traceback otherwise
    ("model=null", "choose one of cnn, linear, mlp."),  # not '~model', which every run needs
    ("~model", "~model: every run takes one option of the model group; choose one of cnn, linear, mlp with "
               "model=<option>."),  # Hydra's error about an interpolation, exit 1
    ("~optimizer", "~optimizer: every run takes one option of"),  # it blamed optimizer.learning_rate being None
    ("hydra/launcher=null", "--hydra-help lists them"),  # a group of Hydra's own
    ("-m seed=0,1 hydra.launcher=null", "hydra/launcher="),  # its node set to null: Hydra's RuntimeError traceback
    ("-m seed=0,1 hydra.sweeper=null", "hydra/sweeper="),
])
def test_bad_input_is_one_sentence_and_exit_2(data_dir, tmp_path, override, setting):
    done = run([*override.split(), f"hydra.run.dir={tmp_path / 'run'}"], data_dir)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("error: ") and setting in done.stderr


@pytest.mark.parametrize("script,args,message", [
    ("eval.py", ["{run}"], "{run} is not an override; pass it as run_dir={run}."),  # Hydra: a grammar error
    ("predict.py", ["run_dir={run}", "{file}"], "{file} is not an override; pass it as input={file}."),
    ("eval.py", ["-cd", "{run}", "run_dir={run}", "--cfg", "job"], None),  # a flag's value is not refused
])
def test_a_path_without_its_key_is_one_sentence_naming_the_key(data_dir, tmp_path, script, args, message):
    (tmp_path / "run").mkdir()
    (tmp_path / "x.npy").write_bytes(b"")
    fill = {"run": tmp_path / "run", "file": tmp_path / "x.npy"}
    done = run([a.format(**fill) for a in args], data_dir, script=script)
    if message is None:
        assert done.returncode == 0 and f"run_dir: {fill['run']}" in done.stdout, done.stderr
        return
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == "error: " + message.format(**fill)


@pytest.mark.parametrize("script,arg", [("eval.py", "dataset=mnist"), ("eval.py", "+model=cnn"),
                                        ("export.py", "model.hidden=[8]"), ("predict.py", "parallel=pmap"),
                                        ("eval.py", "trainer=default"), ("export.py", "+paths=default"),
                                        # a key of such a group the command lacks: Hydra's multi-line error, exit 1
                                        ("eval.py", "trainer.epochs=3"), ("export.py", "paths.output_dir=/tmp/x")])
def test_a_training_setting_given_to_a_reader_of_runs_is_one_sentence(data_dir, tmp_path, script, arg):
    """Hydra refused it (exit 1) with the hint to append it, +dataset=mnist, which failed again: 'Key 'dataset' not
    in 'EvalConfig''. Neither said that the run's checkpoint decides the model and dataset. Training's groups whose
    keys the command partly takes (trainer.batch_size, paths.data_dir) are no option of its own either."""
    (tmp_path / "run").mkdir()
    done = run([f"run_dir={tmp_path / 'run'}", "input=x.npy" if script == "predict.py" else "checkpoint=final", arg],
               data_dir, script=script)
    key = arg.lstrip("+")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {key} is not a setting of {script}, which reads the model, dataset and training settings of the run "
        f"that run_dir names from the run itself; remove {arg}.")


def test_a_refused_command_leaves_the_runs_hydra_record_as_it_was(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    assert run(["debug=smoke", "model.hidden=[16]", f"hydra.run.dir={run_dir}"], data_dir).returncode == 0
    before = {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
    log = (run_dir / "train.log").read_bytes()
    refused = run(["debug=smoke", "model.hidden=[32]", f"hydra.run.dir={run_dir}"], data_dir)
    assert refused.returncode == 2 and "model.hidden ([16] -> [32])" in refused.stderr
    # a learning rate may change on resume, so this one is refused only after the resume was logged
    refused = run(["debug=smoke", "model.hidden=[16]", "optimizer.learning_rate=0.01", f"hydra.run.dir={run_dir}"],
                  data_dir)
    assert refused.returncode == 2 and "optimizer.learning_rate (0.001 -> 0.01)" in refused.stderr
    assert "other settings than this command's" not in refused.stdout + refused.stderr  # no warning it goes on
    assert run(["debug=smoke", "model.hidden=[16]", f"hydra.run.dir={run_dir}"], data_dir).returncode == 0  # reported
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == before
    assert (run_dir / "train.log").read_bytes() == log  # nor does its log tell of these commands


def test_only_a_refusal_before_the_run_opened_its_outputs_puts_the_record_back(tmp_path):
    from zoo import run_record

    record = tmp_path / "run" / ".hydra" / "config.yaml"
    record.parent.mkdir(parents=True)
    for opened, kept in ((False, "the finished run's"), (True, "this command's")):
        record.write_text("the finished run's")
        run_record.remember(str(tmp_path / "run"), ".hydra")
        record.write_text("this command's")  # what Hydra writes before the task starts
        if opened:
            run_record.accepted(str(tmp_path / "run"))  # then e.g. a NonFiniteLoss: the run did train
        run_record.restore(str(tmp_path / "run"))
        assert record.read_text() == kept


@pytest.mark.parametrize("ending, code", [(KeyboardInterrupt(), 130), (OSError(28, "No space left", "x"), 1),
                                          (RuntimeError("a bug"), None)], ids=["ctrl-c", "full-disk", "unexpected"])
def test_whatever_ends_a_command_before_the_run_opened_its_outputs_puts_the_record_back(tmp_path, monkeypatch,
                                                                                         ending, code):
    """e.g. Ctrl-C while a finished run's directory is built again with other settings, before it is refused."""
    from omegaconf import OmegaConf

    import zoo.cli
    from zoo import run_record

    def hard_exit(status):
        raise SystemExit(status)

    def task(cfg):
        raise ending

    monkeypatch.setattr(zoo.cli, "_hard_exit", hard_exit)
    record = tmp_path / "run" / ".hydra" / "config.yaml"
    record.parent.mkdir(parents=True)
    record.write_text("the finished run's")
    run_record.remember(str(tmp_path / "run"), ".hydra")
    record.write_text("this command's")
    with pytest.raises(SystemExit if code else RuntimeError) as ended:
        zoo.cli.run_task(task, OmegaConf.create({"paths": {"output_dir": str(tmp_path / "run")}}))
    assert getattr(ended.value, "code", None) == code
    assert record.read_text() == "the finished run's"


@pytest.mark.parametrize("script", ["eval.py", "export.py"])
def test_eval_and_export_refuse_a_training_runs_directory_as_their_own(data_dir, tmp_path, script):
    run_dir = tmp_path / "run"
    assert run(["debug=smoke", f"hydra.run.dir={run_dir}"], data_dir).returncode == 0
    before = {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
    refused = run([f"run_dir={run_dir}", f"hydra.run.dir={run_dir}"], data_dir, script=script)
    assert refused.returncode == 2 and refused.stderr == (
        f"error: hydra.run.dir={run_dir} holds a training run, whose .hydra/ record this command would replace; "
        "leave hydra.run.dir unset or choose a directory without a run.\n")
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == before


@pytest.mark.parametrize("obstacle", ["metrics.jsonl", "train.log"])
def test_a_directory_in_the_way_of_a_runs_file_is_one_sentence(data_dir, tmp_path, obstacle):
    """metrics.jsonl is opened after the checkpoint manager: its threads must not outlive the exit (an orbax
    traceback after the sentence); train.log is opened by Hydra before the task."""
    (tmp_path / "run" / obstacle).mkdir(parents=True)
    done = run(["debug=smoke", f"hydra.run.dir={tmp_path / 'run'}"], data_dir)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: something is in the way at {tmp_path / 'run' / obstacle} (")
    assert done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("config_name", ["eval", "export"])
def test_eval_and_export_default_to_a_directory_of_their_own(config_name):
    """Two commands started in the same second must not share a default hydra.run.dir (the second was refused)."""
    import re

    from hydra import compose, initialize_config_dir

    from conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        first, second = (compose(config_name=config_name, overrides=["run_dir=x"], return_hydra_config=True)
                         for _ in range(2))
        dirs = [str(c.hydra.run.dir) for c in (first, second)]
    assert re.fullmatch(rf"outputs/{config_name}/\d{{4}}-\d\d-\d\d/\d\d-\d\d-\d\d-\d{{6}}", dirs[0]), dirs
    assert dirs[0] != dirs[1]


def test_a_run_directory_in_use_by_another_command_is_refused(tmp_path, capsys):
    """Two commands started in the same second get the same default directory: the second is refused. The lock
    is taken on another open file here, as another process would hold it."""
    import fcntl

    from omegaconf import OmegaConf

    from zoo.cli import RunDirCheck

    def config(run_dir, distributed="none"):
        return OmegaConf.create({"hydra": {"run": {"dir": str(run_dir)}, "output_subdir": ".hydra"},
                                 "distributed": {"mode": distributed}})

    busy = tmp_path / "busy"
    busy.mkdir()
    other = os.open(busy, os.O_RDONLY)
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the command already running there
    with pytest.raises(SystemExit) as exit_:
        RunDirCheck().on_run_start(config(busy))
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"error: hydra.run.dir={busy} is in use by another command running now "
                                       "(commands started in the same second share the default one); choose "
                                       "another hydra.run.dir.\n")
    RunDirCheck().on_run_start(config(busy, distributed="explicit"))  # a multi-process run's processes share it
    os.close(other)
    RunDirCheck().on_run_start(config(busy))  # free again
    with pytest.raises(BlockingIOError):  # and now held by this command
        fcntl.flock(os.open(busy, os.O_RDONLY), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_run_that_resumed_and_then_failed_keeps_the_record_of_its_own_command(data_dir, tmp_path):
    run_dir, base = tmp_path / "run", ["debug=smoke", "optimizer=sgd", f"hydra.run.dir={tmp_path / 'run'}"]
    assert run([*base, "trainer.max_steps=4"], data_dir).returncode == 0
    diverged = run([*base, "trainer.max_steps=8", "optimizer.learning_rate=1e6"], data_dir)  # resumes at 4
    assert diverged.returncode == 2 and "non-finite" in diverged.stderr
    assert "optimizer.learning_rate=1e6" in (run_dir / ".hydra" / "overrides.yaml").read_text()


def test_a_run_ended_by_an_error_says_why_in_its_train_log_where_eval_points(data_dir, tmp_path):
    """The error went to the console alone: eval.py's refusal of the run sent the user to an empty train.log."""
    run_dir = tmp_path / "run"
    diverged = run(["debug=smoke", "optimizer=sgd", "optimizer.learning_rate=1e6", f"hydra.run.dir={run_dir}"],
                   data_dir)
    assert diverged.returncode == 2 and "non-finite" in diverged.stderr
    said = diverged.stderr.strip().splitlines()[-1]
    assert said.startswith("error: training loss became non-finite")
    assert (run_dir / "train.log").read_text().splitlines()[-1].endswith(f"[ERROR] - {said}")
    evaluated = run([f"run_dir={run_dir}"], data_dir, script="eval.py")
    assert evaluated.returncode == 2 and "ended before its first checkpoint (its train.log says why" in evaluated.stderr


def test_a_run_trained_elsewhere_does_not_replace_the_record_of_the_run_in_its_hydra_run_dir(data_dir, tmp_path):
    """hydra.run.dir=<a run> paths.output_dir=<another dir>: Hydra wrote the command's .hydra/ over that run's record
    (refused or not), which then described a run trained elsewhere; eval.py and export.py refuse such a dir already."""
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    assert run(["debug=smoke", f"hydra.run.dir={run_dir}"], data_dir).returncode == 0
    record = {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()}
    done = run(["debug=smoke", "seed=1", f"hydra.run.dir={run_dir}", f"paths.output_dir={elsewhere}"], data_dir)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        f"error: hydra.run.dir={run_dir} holds a training run, whose .hydra/ record this command would replace while "
        f"it trains in paths.output_dir={elsewhere}; choose a hydra.run.dir without a run, or leave paths.output_dir "
        "unset to train that run."), done.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in (run_dir / ".hydra").iterdir()} == record and not elsewhere.exists()
    same = run(["debug=smoke", f"hydra.run.dir={run_dir}", f"paths.output_dir={run_dir}"], data_dir)  # the run itself
    assert same.returncode == 0 and "already holds this finished run" in same.stdout + same.stderr, same.stderr[-2000:]


def test_eval_and_export_of_a_run_that_failed_after_its_checkpoints_name_the_error(data_dir, tmp_path):
    """Their warning for a run without results.json said 'train it to its end', which meets the same error again."""
    run_dir = tmp_path / "run"
    diverged = run(["debug=smoke", "optimizer=sgd", "optimizer.learning_rate=1000", "trainer.checkpoint_every=1",
                    "trainer.nan_check=step", f"hydra.run.dir={run_dir}"], data_dir)
    assert diverged.returncode == 2, diverged.stderr[-2000:]
    error = diverged.stderr.strip().splitlines()[-1].removeprefix("error: ").rstrip(".")
    assert error.startswith("training loss became non-finite at step 5")
    for script, verb in (("eval.py", "evaluates"), ("export.py", "exports")):
        done = run([f"run_dir={run_dir}"], data_dir, script=script)
        assert done.returncode == 0, done.stderr[-2000:]
        assert (f"run_dir={run_dir} ended in an error before it finished ({error}): checkpoint=final {verb} its newest "
                f"checkpoint, step 4 of the 6 it trains, saved before the error; name checkpoint=latest, best or a "
                f"step to {verb[:-1]} another one.") in " ".join((done.stdout + done.stderr).split()), done.stderr
        assert "train it to its end" not in done.stdout + done.stderr


def assert_final_checkpoint_equals_in_process_run(run_dir, make_cfg, overrides):
    """The resumed subprocess run ends with the very parameters of an uninterrupted run."""
    cfg = make_cfg(*overrides, out="reference")
    reference = train(cfg)
    target = jax.tree.map(np.zeros_like, {"state": reference["state"], "sums": build(cfg).compiled.zero_sums})
    ckpts = Checkpoints(str(run_dir / "checkpoints"), read_only=True)
    restored, _ = ckpts.restore(ckpts.steps()[-1], target)  # into zeros: nothing compared comes from the target
    for a, b in zip(jax.tree.leaves(restored["state"]), jax.tree.leaves(reference["state"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_sigterm_saves_and_the_same_command_resumes(data_dir, make_cfg, tmp_path):
    args = [*TINY, "trainer.max_steps=3000", "trainer.log_every=1", "trainer.checkpoint_every=1000",
            f"hydra.run.dir={tmp_path / 'run'}"]
    proc = start(args, data_dir)
    wait_for_lines(tmp_path / "run" / "metrics.jsonl", 30, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM at step" in stderr and "resume with the same command" in stderr
    stopped_at = Checkpoints(str(tmp_path / "run" / "checkpoints"), read_only=True).steps()[-1]
    assert 30 <= stopped_at < 3000
    done = run(args, data_dir)
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["start_step"] == stopped_at and results["steps"] == 3000
    assert_final_checkpoint_equals_in_process_run(tmp_path / "run", make_cfg, args[:-1])


def test_sigterm_ends_a_multirun_after_the_job_it_stopped(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", *TINY, "trainer.max_steps=3000", "trainer.log_every=1", "trainer.checkpoint_every=1000",
            "seed=0,1", f"hydra.sweep.dir={sweep}"]
    proc = start(args, data_dir)
    wait_for_lines(sweep / "0" / "metrics.jsonl", 30, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("error: stopped by SIGTERM at")
    assert "rerun the same multirun command" in stderr
    assert not (sweep / "1").exists()  # the sweep ended: the next job never started
    stopped_at = Checkpoints(str(sweep / "0" / "checkpoints"), read_only=True).steps()[-1]
    failure = json.loads((sweep / "0" / "failure.json").read_text())  # the job's own record says the same
    assert failure["reason"].endswith(f"rerun the same multirun command (hydra.sweep.dir={sweep}) to resume the sweep")
    done = run(args, data_dir, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((sweep / "0" / "results.json").read_text())["start_step"] == stopped_at
    assert json.loads((sweep / "1" / "results.json").read_text())["steps"] == 3000
    assert not (sweep / "0" / "failure.json").exists()  # completed by the rerun: no longer a failed job


def test_the_sweep_ending_callback_leaves_single_runs_and_launcher_children_alone(monkeypatch, capsys):
    from zoo import preemption
    from zoo.sweeps.stop_on_signal import EndSweepOnSignal

    monkeypatch.setattr(preemption, "_received", signal.SIGTERM)  # a signal landed in the job's last call
    callback = EndSweepOnSignal()
    callback.on_job_end(config=None, job_return=None)  # a single run: it finished, nothing to end
    callback.sweep_process = (socket.gethostname(), os.getpid() + 1)
    callback.on_job_end(config=None, job_return=None)  # a job a launcher runs in a child process
    callback.sweep_process = (socket.gethostname() + "-login", os.getpid())
    callback.on_job_end(config=None, job_return=None)  # one on a cluster node with the sweep's pid
    callback.sweep_process = (socket.gethostname(), os.getpid())
    with pytest.raises(SystemExit) as done:
        callback.on_job_end(config=None, job_return=None)
    assert done.value.code == 128 + signal.SIGTERM and "rerun the same multirun command" in capsys.readouterr().err


def test_kill_9_during_a_save_leaves_only_complete_checkpoints(data_dir, make_cfg, tmp_path):
    args = [*TINY, "trainer.max_steps=12", "trainer.log_every=1", "trainer.checkpoint_every=1",
            "checkpoint.keep=1000", f"hydra.run.dir={tmp_path / 'run'}"]
    killed = commands.run([sys.executable, "-c", KILL_IN_SAVE, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**subprocess_env(data_dir), "KILL_AT": "7"}, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    checkpoints = tmp_path / "run" / "checkpoints"
    assert [p.name.split(".")[0] for p in checkpoints.glob("*.orbax-checkpoint-tmp*")] == ["7"]  # cut short
    ckpts = Checkpoints(str(checkpoints), read_only=True)
    assert ckpts.steps() == [1, 2, 3, 4, 5, 6]  # step 7 is not listed: it was never complete
    target = build(make_cfg(*args[:-1], out="probe"))
    ckpts.restore(6, {"state": target.host_state, "sums": target.compiled.zero_sums})
    done = run(args, data_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "run" / "results.json").read_text())["start_step"] == 6
    assert not list(checkpoints.glob("*.orbax-checkpoint-tmp*"))  # the resumed run cleared the leftover
    assert_final_checkpoint_equals_in_process_run(tmp_path / "run", make_cfg, args[:-1])


@pytest.mark.parametrize("saved, says", [(True, "every job it stopped saved its checkpoint — rerun"),
                                         (False, "checkpoint.enabled=false, so nothing was saved — rerunning")])
def test_a_stopped_sweeps_last_line_says_whether_its_jobs_were_saved(saved, says, capsys, monkeypatch):
    import signal
    import types

    from zoo import preemption
    from zoo.sweeps.stop_on_signal import end_sweep_if_stopped

    monkeypatch.setattr(preemption, "_received", signal.SIGTERM)
    stopped = preemption.Preempted(40, signal.SIGTERM, "/runs/s/0", "/runs/s", saved=saved)
    with pytest.raises(SystemExit) as e:
        end_sweep_if_stopped(types.SimpleNamespace(_return_value=stopped))
    assert e.value.code == 143
    assert capsys.readouterr().err.startswith(f"error: stopped by SIGTERM at step 40; {says}")


def test_a_run_dir_on_a_full_disk_is_one_sentence_before_hydra_writes_its_record(tmp_path, monkeypatch):
    import errno
    import io

    from zoo import cli
    from zoo.errors import UserError

    class FullDisk(io.BytesIO):  # an empty file still fits on a full disk; its first block does not
        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cli.tempfile, "TemporaryFile", lambda dir: FullDisk())
    with pytest.raises(UserError, match=r"^hydra\.run\.dir=.*run has no space left; free space there or set "
                                        r"hydra\.run\.dir to another directory\.$"):
        cli.check_writable(str(tmp_path / "run"), "hydra.run.dir")


FULL = "/dev/full"  # a device that is always full: every write to it fails with ENOSPC
LOST = "warning: the log cannot be written to stdout (No space left on device), so it is no longer written there"


@pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full")
@pytest.mark.parametrize("sweep", [[], ["-m", "seed=0,1"], ["-m", "seed=0,1", "hydra/launcher=population"]])
def test_a_stdout_that_cannot_take_the_log_is_said_once_and_the_run_goes_on(data_dir, tmp_path, sweep):
    """`python train.py > log.txt` on a full disk (or into a closed pipe) printed logging's 'Logging error' and a
    traceback for every console line; a sweep's summary ended in Hydra's warning of the callback's OSError."""
    where = [f"hydra.sweep.dir={tmp_path / 'runs'}"] if sweep else [f"hydra.run.dir={tmp_path / 'runs'}"]
    env = subprocess_env(data_dir)
    env.pop("PYTHONUNBUFFERED", None)  # stdout buffered, as it is by default: what it holds must not fail at exit
    with open(FULL, "w") as full:
        done = commands.run([sys.executable, "train.py", "debug=smoke", *sweep, *where], cwd=ROOT, env=env,
                            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("warning:") == done.stderr.count(LOST) == 1 and "Traceback" not in done.stderr, done.stderr
    logs = [tmp_path / "runs" / job / "train.log" for job in (["0", "1"] if sweep else [""])]
    assert all("test: loss=" in log.read_text() for log in logs)
    if not sweep:  # the run's own log file, named where the console's log stopped
        assert f"{LOST}; the whole log is in {logs[0]}.\n" in done.stderr
    else:
        assert (tmp_path / "runs" / "summary.md").is_file()


def test_a_result_after_the_console_log_found_stdout_unwritable_is_refused_not_lost(monkeypatch):
    """The console handler leads a stdout it could not write to os.devnull (else Python's exit flush fails again,
    exit 120): a result line written after that, as export.py's after its log, would vanish with exit 0."""
    import errno
    import io
    import logging

    from zoo.cli import write_stdout
    from zoo.console import Console
    from zoo.errors import UserError

    class Full(io.StringIO):  # its first write fails; later ones "succeed", as into os.devnull
        def write(self, text):
            if not self.getvalue():
                super().write("failed")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return len(text)

    monkeypatch.setattr(sys, "stdout", Full())
    monkeypatch.setattr(Console, "lost", {})
    Console(sys.stdout).handle(logging.makeLogRecord({"msg": "a line of the log"}))
    with pytest.raises(UserError, match=r"^not printed \(No space left on device\)$"):
        write_stdout("the result\n", lambda why: f"not printed ({why})")


@pytest.mark.parametrize("script, began, says", [
    ("train", False, " before training began; nothing was trained — run the same command again.\n"),  # said kept
    ("train", True, "; checkpoints already written are kept and the same command resumes"),  # Hydra's job ended
    ("eval", False, "; no eval results were written — run the same command again")])
def test_a_ctrl_c_outside_a_task_is_the_commands_own_line(script, began, says, capsys, monkeypatch):
    """Before any task (Hydra composing the config, setting the job up) no checkpoint exists to be kept."""
    from zoo import cli

    def interrupted():
        raise KeyboardInterrupt

    def exit_(code):
        raise SystemExit(code)

    monkeypatch.setattr(cli, "_hard_exit", exit_)
    monkeypatch.setattr(cli, "_sweep_dir", None)
    monkeypatch.setattr(cli, "_ctrl_c", cli.CTRL_C)  # put back after: it is process-wide, set by the script
    monkeypatch.setattr(cli, "_task_began", began)
    with pytest.raises(SystemExit) as e:
        cli.main_with_one_line_ctrl_c(interrupted, *([] if script == "train" else
                                                     [cli.reader_ctrl_c("no eval results were written")]))
    err = capsys.readouterr().err
    assert e.value.code == 130 and err.startswith(f"error: interrupted by Ctrl-C{says}") and err.count("\n") == 1


@pytest.fixture(scope="module")
def placed_run(data_dir, tmp_path_factory):
    """A finished `debug=smoke` run that paths.output_dir placed apart from its hydra.run.dir; the tests that take
    it only run commands it refuses or reports, which leave it as it was."""
    base = tmp_path_factory.mktemp("placed")
    first = run(["debug=smoke", f"hydra.run.dir={base / 'a'}", f"paths.output_dir={base / 'out'}"], data_dir)
    assert first.returncode == 0, first.stderr
    return base / "out"


def test_a_refusal_names_paths_output_dir_when_it_placed_the_run(data_dir, placed_run, tmp_path):
    """A new hydra.run.dir finds the same outputs again when paths.output_dir put them apart: the advice to
    choose another directory names paths.output_dir."""
    out = placed_run
    again = run(["debug=smoke", "seed=1", f"hydra.run.dir={tmp_path / 'b'}", f"paths.output_dir={out}"], data_dir)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines()[-1] == (
        f"error: paths.output_dir={out} already holds a finished run trained with other settings: seed (0 -> 1); "
        "choose a new paths.output_dir.")
    same = run(["debug=smoke", f"hydra.run.dir={tmp_path / 'c'}", f"paths.output_dir={out}"], data_dir)
    assert same.returncode == 0, same.stderr
    said = same.stdout + same.stderr
    assert f"paths.output_dir={out} already holds this finished run; its results.json stands" in said


def test_a_paths_output_dir_in_use_by_another_command_is_refused(data_dir, tmp_path):
    """hydra.run.dir is held for the command; a paths.output_dir set apart from it was not, and two commands
    wrote their checkpoints and results.json into it together."""
    out = tmp_path / "out"
    second = run_beside([*TINY, f"hydra.run.dir={tmp_path / 'a'}", f"paths.output_dir={out}"], out / "metrics.jsonl",
                        [*TINY, "seed=1", f"hydra.run.dir={tmp_path / 'b'}", f"paths.output_dir={out}"], data_dir)
    assert second.returncode == 2
    assert second.stderr.strip().splitlines()[-1] == (f"error: paths.output_dir={out} is in use by another command "
                                                      "running now; choose another paths.output_dir.")


def test_an_empty_paths_output_dir_is_one_sentence_and_writes_nothing(data_dir, tmp_path):
    """It was a FileNotFoundError traceback (exit 1), after an empty checkpoints/ was made in the working dir."""
    done = commands.run([sys.executable, str(ROOT / "train.py"), "debug=smoke", "paths.output_dir=",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == ("error: paths.output_dir= is not writable (No such file or "
                                                    "directory); set paths.output_dir to a directory you can write.")
    assert not (tmp_path / "checkpoints").exists()


def test_a_paths_output_dir_is_held_by_a_multiruns_job_too(data_dir, tmp_path):
    """A multirun's job with a paths.output_dir set apart from its job dir took no lock: it trained in the
    directory a single run was writing (a FileNotFoundError traceback from its checkpoints), and a single run
    started in one a sweep's job was writing would do the same."""
    out, longer = tmp_path / "out", [*TINY, "trainer.epochs=3000"]
    in_use = f"paths.output_dir={out} is in use by another command running now; choose another paths.output_dir."
    sweep = run_beside([*longer, f"hydra.run.dir={tmp_path / 'a'}", f"paths.output_dir={out}"], out / "metrics.jsonl",
                       ["-m", *longer, "seed=1", f"hydra.sweep.dir={tmp_path / 's'}", f"paths.output_dir={out}"],
                       data_dir)
    assert sweep.returncode == 1 and in_use in sweep.stderr.splitlines(), sweep.stderr[-2000:]
    other = tmp_path / "other"
    single = run_beside(["-m", *longer, f"hydra.sweep.dir={tmp_path / 's2'}", f"paths.output_dir={other}"],
                        other / "metrics.jsonl",
                        [*longer, "seed=1", f"hydra.run.dir={tmp_path / 'b'}", f"paths.output_dir={other}"], data_dir)
    assert single.returncode == 2
    assert single.stderr.strip().splitlines()[-1] == f"error: {in_use.replace(str(out), str(other))}"


@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_a_sweeps_fixed_paths_output_dir_is_named_in_its_refusals(data_dir, placed_run, tmp_path, launcher):
    """A multirun job placed by paths.output_dir apart from its job dir was refused as 'hydra.run.dir=DIR' with
    'choose a new hydra.sweep.dir', which finds the same run again."""
    out = placed_run
    sweep = run(["-m", "debug=smoke", "seed=1", f"hydra.sweep.dir={tmp_path / 's'}", f"paths.output_dir={out}",
                 f"hydra/launcher={launcher}"], data_dir)
    assert sweep.returncode == 1, sweep.stderr[-2000:]
    assert (f"paths.output_dir={out} already holds a finished run trained with other settings: seed (0 -> 1); "
            "choose a new paths.output_dir.") in sweep.stderr.splitlines(), sweep.stderr[-2000:]


@pytest.mark.parametrize("script, path_setting", [("train.py", "trainer.resume=source/checkpoints"),
                                                  ("eval.py", "run_dir=source"), ("export.py", "run_dir=source")])
def test_a_relative_path_is_the_users_own_with_hydra_job_chdir(data_dir, make_cfg, tmp_path, script, path_setting):
    """hydra.job.chdir=true moves the task into its run directory; a relative trainer.resume or run_dir was read
    from there ('does not exist'), not from the directory the command was run in. export.py read the run where the
    user meant, and then wrote its export/ from there."""
    train(make_cfg("debug=smoke", out="source"))
    extra = ["debug=smoke", "trainer.max_steps=8"] if script == "train.py" else []
    done = commands.run([sys.executable, str(ROOT / script), *extra, path_setting, "hydra.run.dir=new",
                           "hydra.job.chdir=true"], cwd=tmp_path, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    if script == "train.py":
        assert json.loads((tmp_path / "new" / "results.json").read_text())["start_step"] == 6
    elif script == "eval.py":
        assert (tmp_path / "source" / "eval" / "test-6.json").is_file()
    else:
        assert (tmp_path / "source" / "export" / "model.jax").is_file() and not (tmp_path / "new" / "source").exists()


def test_a_populations_members_hold_their_paths_output_dir_while_the_group_trains(data_dir, tmp_path):
    """A population's member took its paths.output_dir only when its job was handed back, after the group
    trained: a single run started meanwhile there was not refused, and both wrote into it."""
    other, longer = tmp_path / "other", [*TINY, "trainer.epochs=3000"]
    population = ["-m", "hydra/launcher=population", "seed=0,1", f"paths.output_dir={other}/${{seed}}"]
    single = run_beside([*population, *longer, f"hydra.sweep.dir={tmp_path / 's'}"], other / "0" / "metrics.jsonl",
                        [*TINY, "trainer.epochs=1", f"hydra.run.dir={tmp_path / 'b'}",
                         f"paths.output_dir={other / '0'}"], data_dir)
    assert single.returncode == 2
    assert single.stderr.strip().splitlines()[-1] == (f"error: paths.output_dir={other / '0'} is in use by another "
                                                      "command running now; choose another paths.output_dir.")
    # a member whose directory is in use fails alone, before the group trains; the other trains
    out = tmp_path / "out"
    sweep = run_beside([*longer, f"hydra.run.dir={tmp_path / 'a'}", f"paths.output_dir={out / '0'}"],
                       out / "0" / "metrics.jsonl",
                       [*population[:3], f"paths.output_dir={out}/${{seed}}", *TINY, "trainer.epochs=1",
                        f"hydra.sweep.dir={tmp_path / 's2'}"], data_dir)
    assert sweep.returncode == 1
    assert (f"paths.output_dir={out / '0'} is in use by another command running now; choose another "
            "paths.output_dir.") in sweep.stderr.splitlines(), sweep.stderr[-2000:]
    assert (out / "1" / "results.json").is_file() and not (out / "0" / "train.log").exists()


def test_a_relative_paths_data_dir_is_the_users_own_with_hydra_job_chdir(data_dir, tmp_path):
    """With hydra.job.chdir=true a relative paths.data_dir was read inside the run directory: a fresh, empty
    data dir there, the user's own left unread. eval.py reads the dataset the same way."""
    done = commands.run([sys.executable, str(ROOT / "train.py"), "debug=smoke", "paths.data_dir=data",
                           "hydra.run.dir=new", "hydra.job.chdir=true"], cwd=tmp_path, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "data" / "zoo_digits").is_dir() and not (tmp_path / "new" / "data").exists()
    evaluated = commands.run([sys.executable, str(ROOT / "eval.py"), "run_dir=new", "paths.data_dir=data",
                                "hydra.run.dir=new-eval", "hydra.job.chdir=true"], cwd=tmp_path,
                             env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert not (tmp_path / "new-eval" / "data").exists()


@pytest.mark.parametrize("args,sentence", [
    (["trainer.batch_size=abc"], "trainer.batch_size must be an integer, got abc."),
    (["trainer.epochs=1.5"], "trainer.epochs must be an integer, got 1.5."),
    (["trainer.max_steps=many"], "trainer.max_steps must be an integer or null, got many."),
    (["trainer.epochs=null"], "trainer.epochs must be an integer, got null."),
    (["optimizer.learning_rate=0.1", "trainer.clip_norm=[1]"], "trainer.clip_norm must be a number or null, got [1]."),
    (["logger.plot=maybe"], "logger.plot must be true or false, got maybe."),
    (["++seed=x"], "seed must be an integer, got x."),
    (["-m", "trainer.batch_size=16,abc"], "trainer.batch_size must be an integer, got abc."),
    (["trainer.epochs="], "trainer.epochs must be an integer, got an empty value."),
    (["hydra.job.chdir=maybe"], "hydra.job.chdir must be true, false or null, got maybe."),
    (["-m", "hparams_search=digits_mlp", "hydra.sweeper.n_trials=1e3"],
     "hydra.sweeper.n_trials must be an integer, got 1e3."),  # the zoo's Optuna sweeper's settings
    (["-m", "seed=0,1", "hydra.sweeper.max_batch_size=abc"],
     "hydra.sweeper.max_batch_size must be an integer or null, got abc."),  # Hydra's basic sweeper's
    (["-m", "hparams_search=digits_mlp", "hydra.sweeper.sampler.seed=abc"],
     "hydra.sweeper.sampler.seed must be an integer or null, got abc."),  # the chosen sampler's (tpe unless chosen)
    (["-m", "hparams_search=digits_mlp", "hydra/sweeper/sampler=random", "hydra.sweeper.sampler.seed=1.5"],
     "hydra.sweeper.sampler.seed must be an integer or null, got 1.5."),
    (["-m", "hparams_search=digits_mlp", "hydra/sweeper/pruner=median", "hydra.sweeper.pruner.n_warmup_steps=some"],
     "hydra.sweeper.pruner.n_warmup_steps must be an integer, got some."),  # the chosen pruner's
    (["-m", "hparams_search=digits_mlp", "hydra.sweeper.directions=maximize"],
     "hydra.sweeper.directions must be a list, got maximize; write it in brackets: hydra.sweeper.directions=[maximize]."),
    (["-m", "seed=0,1", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=abc"],
     "hydra.launcher.timeout_min must be an integer, got abc."),  # submitit's launchers'
], ids=["word", "fraction", "optional", "null", "list", "bool", "force-add", "sweep", "empty", "hydras", "optuna",
        "basic-sweeper", "sampler", "chosen-sampler", "pruner", "directions", "submitit"])
def test_a_value_of_the_wrong_type_is_one_sentence_naming_the_type(data_dir, tmp_path, args, sentence):
    """Hydra ended them in 'Error merging override ...' and OmegaConf's node details (full_key, reference_type,
    object_type), exit 1."""
    done = run([*args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"], data_dir)
    assert done.returncode == 2 and done.stderr == f"error: {sentence}\n", done.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args", [["schedule.warmup_steps=100"], ["schedule=constant", "schedule.warmup_steps=100"],
                                  ["experiment=digits_cnn_cosine", "schedule=constant", "schedule.warmup_steps=100"]],
                         ids=["default", "chosen", "chosen-after-a-preset"])
def test_a_setting_of_a_schedule_the_run_does_not_use_is_one_sentence(data_dir, tmp_path, args):
    """On the default schedule=constant it ended in Hydra's 'Could not override schedule.warmup_steps' and its hint to
    add it with +, exit 1, where +schedule.warmup_steps=100 already gets this sentence."""
    done = run([*args, f"hydra.run.dir={tmp_path / 'run'}"], data_dir)
    assert done.returncode == 2 and done.stderr == (
        "error: schedule.warmup_steps is set, but schedule=constant builds no schedule to take it (the learning rate "
        "stays optimizer.learning_rate); choose one, e.g. schedule=warmup_cosine, or remove schedule.warmup_steps.\n"
    ), done.stderr
    assert os.listdir(tmp_path) == []


def test_a_setting_of_the_schedule_a_preset_chooses_is_not_refused(data_dir, tmp_path):
    done = run(["experiment=digits_cnn_cosine", "schedule.warmup_steps=100", "--cfg", "job"], data_dir)
    assert done.returncode == 0 and "warmup_steps: 100" in done.stdout, done.stderr


@pytest.mark.parametrize("sweep", ["trainer.epochs=interval(1,3)",
                                   "optimizer.learning_rate=tag(log,interval(1e-4,1e-1))"])
def test_an_interval_in_a_grid_is_one_sentence_before_the_sweep_dir_is_made(data_dir, tmp_path, sweep):
    """The basic sweeper enumerates values: it ended in a HydraException traceback ('BasicSweeper does not support
    sweep type : INTERVAL_SWEEP'), exit 1, after making the sweep's directory."""
    done = run(["-m", "debug=smoke", sweep, f"hydra.sweep.dir={tmp_path / 'sweep'}"], data_dir)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == (f"error: {sweep} is an interval, which only an Optuna search draws from "
                           "(hparams_search=...); list the grid's values (key=a,b,c) or give a range(start,stop).\n")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("arg,reason", [
    ("seed=${oc.env:ZOO_UNSET_VARIABLE}", "Environment variable 'ZOO_UNSET_VARIABLE' not found"),
    ("trainer.epochs=${oc.env:TFDS_DATA_DIR}", "Value '{data_dir}' of type 'str' could not be converted to Integer"),
    ("trainer.epochs=${trainer.nothere}", "Interpolation key 'trainer.nothere' not found"),
    ("paths.output_dir=${oc.env:ZOO_UNSET_VARIABLE}", "Environment variable 'ZOO_UNSET_VARIABLE' not found"),
], ids=["unset-variable", "wrong-type", "no-such-key", "output-dir"])
def test_an_interpolation_that_does_not_resolve_is_one_sentence(data_dir, tmp_path, arg, reason):
    """It ended in OmegaConf's traceback from wherever the zoo first read the setting, exit 1."""
    done = run(["debug=smoke", arg, f"hydra.run.dir={tmp_path / 'run'}"], data_dir)
    key = arg.partition("=")[0]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == (f"error: {arg} cannot be resolved: {reason.format(data_dir=data_dir)}; give {key} a value "
                           "that resolves.\n")
    assert not any((tmp_path / "run" / name).exists() for name in ("checkpoints", "metrics.jsonl"))  # before writing


def test_a_search_without_multirun_is_refused_in_one_sentence(data_dir, tmp_path):
    """Without -m Hydra runs no sweeper: `python train.py hparams_search=digits_mlp` trained one run with the search's
    base settings and exited 0, as if the search had been asked for and run."""
    done = run(["hparams_search=digits_mlp", "debug=smoke", f"hydra.run.dir={tmp_path / 'run'}"], data_dir)
    assert done.returncode == 2 and done.stderr == (
        "error: hparams_search=digits_mlp sets up a search of many trials, which runs under -m (python train.py -m "
        "hparams_search=digits_mlp); add -m, or leave hparams_search out to train once.\n"), done.stderr
    assert not (tmp_path / "run").exists()
    shown = run(["hparams_search=digits_mlp", "--cfg", "job"], data_dir)  # what the trials start from: still shown
    assert shown.returncode == 0 and "optimized_metric: validation/accuracy" in shown.stdout, shown.stderr


@pytest.mark.parametrize("folder, why", [("checkpoints", "whose old steps are deleted as it trains"),
                                         ("export", "which export.py replaces whole")])
def test_a_paths_output_dir_inside_a_runs_checkpoints_or_export_is_refused(data_dir, tmp_path, folder, why):
    """hydra.run.dir there is refused; a paths.output_dir there trained a run into the other run's checkpoints/ (its
    manager's to delete) or export/ (export.py's to replace), exit 0."""
    run_dir = tmp_path / "r"
    (run_dir / folder).mkdir(parents=True)
    (run_dir / "results.json").write_text("{}")
    inside = run_dir / folder / "new"
    done = run(["debug=smoke", f"paths.output_dir={inside}", f"hydra.run.dir={tmp_path / 'h'}"], data_dir)
    assert done.returncode == 2 and done.stderr == (f"error: paths.output_dir={inside} is inside a run's {folder}/ "
                                                    f"({run_dir}), {why}; choose another paths.output_dir outside "
                                                    "it.\n"), done.stderr
    assert not inside.exists()


def test_overrides_on_both_sides_of_a_flag_are_all_read(data_dir, tmp_path):
    """argparse takes Hydra's overrides as one run of words: `python train.py debug=smoke -m seed=0,1` ended in its
    usage text and 'unrecognized arguments: seed=0,1', exit 2."""
    shown = run(["model=linear", "--cfg", "job", "seed=3"], data_dir)
    assert shown.returncode == 0, shown.stderr
    assert "_target_: zoo.models.Linear" in shown.stdout and "seed: 3" in shown.stdout
    info = run(["--info", "seed=3"], data_dir)  # argparse took seed=3 for --info's topic: 'invalid choice'
    assert info.returncode == 0 and "Config search path" in info.stdout, info.stderr
    swept = run(["debug=smoke", "-m", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}"], data_dir)
    assert swept.returncode == 0, swept.stderr
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()) == ["0", "1"]


@pytest.mark.parametrize("show", [["--cfg", "job"], ["--cfg=all"], ["-c", "job"]])
def test_resolve_without_a_run_directory_is_one_sentence(data_dir, show):
    """paths.output_dir is the run directory Hydra makes only when the command runs: `--cfg job --resolve` ended in
    OmegaConf's InterpolationValidationError traceback, exit 1."""
    done = run([*show, "--resolve"], data_dir)
    assert done.returncode == 2 and done.stderr == (
        "error: --resolve cannot show paths.output_dir, the run directory Hydra makes only when the command runs "
        "(${hydra:runtime.output_dir}); give paths.output_dir=DIR as well, or leave out --resolve.\n"), done.stderr
    given = run([*show, "--resolve", "paths.output_dir=/tmp/somewhere"], data_dir)
    assert given.returncode == 0 and "output_dir: /tmp/somewhere" in given.stdout, given.stderr


@pytest.mark.parametrize("script,args,sentence", [
    ("eval.py", ["trainer.batch_size=abc"], "trainer.batch_size must be an integer or null, got abc."),
    ("eval.py", ["split=[a]"], "split must be a string, got [a]."),
    ("export.py", ["checkpoint=[1]"], "checkpoint must be a string, got [1]."),
    ("export.py", ["parallel.cpu_devices=two"], "parallel.cpu_devices must be an integer or null, got two."),
    ("predict.py", ["input=x.npy", "batch_size=abc"], "batch_size must be an integer, got abc."),
], ids=["eval-batch", "eval-split", "export-checkpoint", "export-devices", "predict-batch"])
def test_a_value_of_the_wrong_type_for_a_reader_of_runs_is_one_sentence(data_dir, tmp_path, script, args, sentence):
    """eval.py, export.py and predict.py ended them in Hydra's 'Error merging override ...' and OmegaConf's node
    details, exit 1, as train.py did."""
    (tmp_path / "run").mkdir()
    done = run([f"run_dir={tmp_path / 'run'}", *args, f"hydra.run.dir={tmp_path / 'cmd'}"], data_dir, script=script)
    assert done.returncode == 2 and done.stderr == f"error: {sentence}\n", done.stderr
    assert sorted(os.listdir(tmp_path)) == ["run"]


@pytest.mark.parametrize("script", ["eval.py", "export.py", "predict.py"])
def test_overrides_on_both_sides_of_a_flag_are_all_read_by_a_reader_of_runs(data_dir, tmp_path, script):
    """`python eval.py run_dir=R --cfg job checkpoint=best` ended in argparse's 'unrecognized arguments', exit 2."""
    shown = run([f"run_dir={tmp_path}", "--cfg", "job", "checkpoint=best" if script != "predict.py" else "input=x.npy"],
                data_dir, script=script)
    assert shown.returncode == 0, shown.stderr
    assert f"run_dir: {tmp_path}" in shown.stdout
    assert ("checkpoint: best" if script != "predict.py" else "input: x.npy") in shown.stdout


@pytest.mark.parametrize("args,sentence", [
    (["platforms=cpu"], "platforms must be a list, got cpu; write it in brackets: platforms=[cpu]."),
    (["platforms=null"], "platforms must be a list, got null; give one in brackets, e.g. platforms=[cpu]."),
    (["-m", "platforms=cpu,cuda"], "platforms must be a list, got cpu; write it in brackets: platforms=[cpu]."),
], ids=["word", "null", "sweep"])
def test_a_single_platform_without_brackets_is_one_sentence(data_dir, tmp_path, args, sentence):
    """export.py's platforms is a list: `platforms=cpu` ended in Hydra's 'Error merging override' and OmegaConf's
    'Invalid value assigned: str is not a ListConfig, list or tuple.', exit 1."""
    (tmp_path / "run").mkdir()
    done = run([f"run_dir={tmp_path / 'run'}", *args, f"hydra.run.dir={tmp_path / 'cmd'}",
                f"hydra.sweep.dir={tmp_path / 'sweep'}"], data_dir, script="export.py")
    assert done.returncode == 2 and done.stderr == f"error: {sentence}\n", done.stderr
    assert sorted(os.listdir(tmp_path)) == ["run"]
    for given in ["platforms=[cpu,cuda]", "platforms=${oc.create:[cpu,cuda]}"]:  # an interpolation may make a list
        shown = run([f"run_dir={tmp_path / 'run'}", given, "--cfg", "job", "--resolve"], data_dir, script="export.py")
        assert shown.returncode == 0 and "- cuda" in shown.stdout, shown.stderr
    both = run([f"run_dir={tmp_path / 'run'}", "platforms=cpu,cuda"], data_dir, script="export.py")
    assert both.returncode == 1 and "To use it as a list, use key=[value1,value2]" in both.stderr, both.stderr


def test_a_run_dir_and_predict_paths_beginning_with_tilde_are_under_home(data_dir, make_cfg, tmp_path):
    """paths.data_dir and trainer.resume expand ~; eval.py, export.py and predict.py took run_dir="~/run" (and
    predict.py's input and output) as a folder named ~ in the working directory: 'run_dir=~/run does not exist'."""
    train(make_cfg("debug=smoke", out="run"))
    np.save(tmp_path / "x.npy", np.zeros((3, 8, 8, 1), np.float32))
    home = dict(subprocess_env(data_dir), HOME=str(tmp_path))
    for script, args in [("eval.py", [f"hydra.run.dir={tmp_path / 'e'}"]),
                         ("export.py", [f"hydra.run.dir={tmp_path / 'x'}"]),
                         ("predict.py", ['input="~/x.npy"', 'output="~/p.csv"'])]:
        done = commands.run([sys.executable, script, 'run_dir="~/run"', *args], cwd=ROOT, env=home,
                            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run" / "eval" / "test-6.json").is_file()
    assert (tmp_path / "run" / "export" / "model.jax").is_file()
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 4  # a header line and one line an example
    assert not (ROOT / "~").exists()


def test_only_path_values_hydras_grammar_refuses_unquoted_are_quoted():
    from zoo.command_line import quote_paths

    given = ["run_dir=~/r", "+trainer.resume=~/runs/r", "input=digits (1).csv", "output=prédictions.csv",
             "run_dir=a,b", "run_dir=${oc.env:RUNS}/r", "paths.data_dir=~/a,b", "seed=~1", "-cn", "eval"]
    assert quote_paths(given) == ['run_dir="~/r"', '+trainer.resume="~/runs/r"', 'input="digits (1).csv"',
                                  'output="prédictions.csv"', *given[4:]]
    # Hydra's directories: Hydra makes them as given, so ~ is expanded here; `~/t1` and `run (1)` were its grammar
    # error, exit 1, and a quoted "~/t2" a folder named ~ in the working directory
    home = os.path.expanduser("~")
    assert quote_paths(["hydra.run.dir=~/t1", "hydra.sweep.dir=/tmp/run (1)", "hydra.run.dir=outputs/x~1"]) == [
        f"hydra.run.dir={home}/t1", 'hydra.sweep.dir="/tmp/run (1)"', 'hydra.run.dir="outputs/x~1"']  # only a leading ~
