"""SIGTERM while a run (or a population) finishes lets it finish; a sweep's job it stopped goes on only with the
settings it began with. Each test sends the signal from inside a function of the phase, so the moment is exact:
a process without a handler for it there would die of it."""
import csv
import json
import signal
import subprocess
import sys

import pytest

import commands
from conftest import ROOT, subprocess_env
from zoo.checkpoint import Checkpoints
from zoo.errors import UserError
from zoo.evaluate import evaluate
from zoo.train import train

SIGNALLED = """
import importlib, os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even where the tests' runner ignores it
owner = importlib.import_module("{module}")
for name in "{path}".split(".")[:-1]:
    owner = getattr(owner, name)
name = "{path}".split(".")[-1]
real = getattr(owner, name)
def signalled(*args, **kwargs):
    os.kill(os.getpid(), signal.{signame})
    setattr(owner, name, real)  # once
    return real(*args, **kwargs)
setattr(owner, name, signalled)
sys.argv = ["{script}", *sys.argv[1:]]
runpy.run_path("{script}", run_name="__main__")
"""


def train_signalled_in(module: str, path: str, args: list, data_dir, signame: str = "SIGTERM",
                       script: str = "train.py") -> subprocess.CompletedProcess:
    """train.py (or `script`) with `signame` sent at the first call of `path` (a function or Class.method) of
    `module`."""
    script = SIGNALLED.format(module=module, path=path, signame=signame, script=script)
    return commands.run([sys.executable, "-c", script, *args], cwd=ROOT,
                        env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)


def assert_saves_complete(run_dir, last_step: int):
    checkpoints = run_dir / "checkpoints"
    assert Checkpoints(str(checkpoints), read_only=True).steps()[-1] == last_step
    assert not [p.name for p in checkpoints.iterdir() if "tmp" in p.name]  # no save cut short


def test_sigterm_while_a_run_finishes_lets_it_finish(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    done = train_signalled_in("zoo.train", "_finish", ["debug=smoke", f"hydra.run.dir={run_dir}"], data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SIGTERM arrived while the run finished; it completed first" in done.stderr + done.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert results["test"]["count"] == 359
    assert_saves_complete(run_dir, results["steps"])


def test_sigterm_while_a_run_closes_its_outputs_lets_it_finish(data_dir, tmp_path):
    """Sent while a complete run closes its checkpoints and logs, it ended the process with 143 without a word,
    as if the run had been stopped, though its results were written."""
    run_dir = tmp_path / "run"
    done = train_signalled_in("zoo.outputs", "RunOutputs.close", ["debug=smoke", f"hydra.run.dir={run_dir}"],
                              data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SIGTERM arrived while the run finished; it completed first" in done.stderr + done.stdout
    results = json.loads((run_dir / "results.json").read_text())
    assert_saves_complete(run_dir, results["steps"])


def test_sigterm_after_a_run_completed_exits_0(data_dir, tmp_path):
    """Sent while the process exits (Hydra's end callbacks), it ended a complete run with 143, as if stopped."""
    run_dir = tmp_path / "run"
    done = train_signalled_in("hydra._internal.callbacks", "Callbacks.on_run_end",
                              ["debug=smoke", f"hydra.run.dir={run_dir}"], data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["test"]["count"] == 359


def test_a_single_run_ends_complete_on_a_sigterm_from_the_moment_its_train_returns(make_cfg, monkeypatch):
    """The handler its train loop gave back raised Terminated in whatever ran next, until train.py's main installed
    the complete one: a GC callback printed 'Exception ignored in ... Terminated'. train() installs it itself."""
    import zoo.cli
    import zoo.train

    monkeypatch.setattr(zoo.train, "stops_on_sigterm_as_on_ctrl_c", lambda: True)  # as train.py's own run
    before = signal.getsignal(signal.SIGTERM)
    try:
        train(make_cfg("debug=smoke"))
        assert signal.getsignal(signal.SIGTERM) is zoo.cli._exit_complete
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("phase", [("zoo.train", "build"), ("zoo.train", "open_outputs"),
                                   ("zoo.train", "describe"), ("zoo.train", "build", "SIGINT")],
                         ids=["build", "open-outputs", "describe", "build-ctrl-c"])
def test_sigterm_before_training_ends_in_one_line_and_the_same_command_trains(data_dir, make_cfg, tmp_path, phase):
    """Nothing is trained yet, so nothing is saved: the process ends at once. It died of the signal without a word
    (the shell's 'Terminated'), leaving .hydra/ and train.log; it now says so in one line, exit 143, and the same
    command then trains the run in that directory as if it had never been started. eval.py of it meanwhile said it
    was 'refused before training (stopped by SIGTERM; ...)' and to train it again 'with that setting changed'."""
    run_dir = tmp_path / "run"
    args = ["debug=smoke", f"hydra.run.dir={run_dir}"]
    stopped = train_signalled_in(phase[0], phase[1], args, data_dir, *phase[2:])
    how, code = ("interrupted by Ctrl-C", 130) if phase[2:] == ("SIGINT",) else ("stopped by SIGTERM", 143)
    assert stopped.returncode == code, stopped.stderr[-3000:]
    assert stopped.stderr.strip().splitlines()[-1] == (  # the same command alone would train in a new directory
        f"error: {how}; no checkpoint was written yet — train it with the same command and "
        f"hydra.run.dir={run_dir}.")
    assert not (run_dir / "results.json").exists() and not list(run_dir.glob("checkpoints/*"))
    with pytest.raises(UserError, match=rf"^run_dir={run_dir} was stopped before its first checkpoint \({how}\), so "
                                        r"there is no state to evaluate; run its train\.py command again \(same "
                                        r"hydra\.run\.dir\) to train it, or pass another run_dir\.$"):
        evaluate(make_cfg(f"run_dir={run_dir}", config_name="eval"))
    again = commands.run([sys.executable, "train.py", *args], cwd=ROOT, env=subprocess_env(data_dir),
                         capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["steps"] == 6 and results["start_step"] == 0 and results["test"]["count"] == 359


def test_a_run_stopped_in_its_paths_output_dir_is_resumed_by_that_setting(data_dir, tmp_path):
    """Its run directory set by paths.output_dir (hydra.run.dir left to its default, outputs/<date>/<time>), the
    stop said to resume with hydra.run.dir=<that directory>, a setting the command did not use."""
    run_dir = tmp_path / "run"
    args = ["debug=smoke", "trainer.max_steps=20", f"paths.output_dir={run_dir}", f"hydra.run.dir={tmp_path / 'h'}"]
    stopped = train_signalled_in("zoo.loop", "evaluate", args, data_dir)  # the first periodic eval, step 4
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"error: stopped by SIGTERM at step 4; the checkpoint is saved — resume with the same command and "
        f"paths.output_dir={run_dir}")
    again = commands.run([sys.executable, "train.py", *args[:-1], f"hydra.run.dir={tmp_path / 'h2'}"], cwd=ROOT,
                         env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["start_step"] == 4


@pytest.mark.parametrize("phase", [("zoo.train", "build"), ("zoo.evaluate", "restore_latest_good")],
                         ids=["build", "restore"])
def test_an_eval_stopped_before_it_wrote_leaves_no_eval_folder(data_dir, make_cfg, tmp_path, phase):
    """eval.py made the run's eval/ to check it could write there, then SIGTERM (or a refusal) ended it: an empty
    eval/ was left in the run, as if an eval had been made. Now only a written result makes it."""
    train(make_cfg("debug=smoke"))
    run_dir = tmp_path / "run"
    stopped = train_signalled_in(*phase, [f"run_dir={run_dir}", f"hydra.run.dir={tmp_path / 'cmd'}"], data_dir,
                                 script="eval.py")
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "no eval results were written" in stopped.stderr and not (run_dir / "eval").exists()
    with pytest.raises(UserError, match=r"^checkpoint=99 is not in "):
        evaluate(make_cfg(f"run_dir={run_dir}", "checkpoint=99", config_name="eval"))
    assert not (run_dir / "eval").exists()
    assert evaluate(make_cfg(f"run_dir={run_dir}", config_name="eval"))["step"] == 6
    assert [p.name for p in (run_dir / "eval").iterdir()] == ["test-6.json"]


def test_sigterm_while_a_dataset_is_prepared_leaves_nothing_the_rerun_reads(make_cfg, tmp_path):
    """SIGTERM while the data is prepared ends the process in one line, exit 143 (it died of the signal without a
    word), and nothing prepared is left; the rerun prepares the dataset again from scratch, as a run never stopped
    does."""
    args = ["debug=smoke", "dataset=synthetic_linear", "model=linear", "dataset.num_examples=500"]
    stopped = train_signalled_in("tensorflow_datasets.core.writer", "Writer.finalize",
                                 [*args, f"hydra.run.dir={tmp_path / 'run'}"], str(tmp_path / "data"))
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert stopped.stderr.strip().splitlines()[-1].startswith(
        "error: stopped by SIGTERM while preparing dataset=synthetic_linear in paths.data_dir=")
    assert not list((tmp_path / "data").rglob("dataset_info.json"))
    done = commands.run([sys.executable, "train.py", *args, f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT,
                        env=subprocess_env(str(tmp_path / "data")), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # a run never stopped, preparing its own fresh data dir: in this process, one interpreter start fewer
    train(make_cfg(*args, f"paths.data_dir={tmp_path / 'fresh'}", out="clean"))
    results = [json.loads((tmp_path / run / "results.json").read_text()) for run in ("run", "clean")]
    assert results[0]["test"] == results[1]["test"] and results[0]["test"]["count"] == 100


def test_sigterm_while_a_population_finishes_lets_its_members_finish(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    done = train_signalled_in("zoo.population.train", "_finish", ["-m", "debug=smoke", "seed=0,1",
                                                                "hydra/launcher=population",
                                                                f"hydra.sweep.dir={sweep}"], data_dir)
    out = done.stderr + done.stdout
    assert "SIGTERM arrived while the population finished; its complete members finished first" in out, out[-3000:]
    assert done.returncode == 0  # every job completed: the sweep is complete, none to rerun
    for job in ("0", "1"):
        results = json.loads((sweep / job / "results.json").read_text())
        assert_saves_complete(sweep / job, results["steps"])
    assert (sweep / "summary.png").is_file()


@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_a_stopped_sweep_job_goes_on_only_with_the_settings_it_began_with(data_dir, tmp_path, launcher):
    sweep = tmp_path / launcher
    seeds = "seed=0" if launcher == "basic" else "seed=0,1"  # a population of one trains as the basic launcher
    args = ["-m", "debug=smoke", seeds, f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}"]
    stopped = train_signalled_in("zoo.run_logger", "RunLogger.log", args, data_dir)  # at step 2's log: stops there
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    log = (sweep / "0" / "metrics.jsonl").read_text()
    other = commands.run([sys.executable, "train.py", *args, "optimizer.learning_rate=0.01"], cwd=ROOT,
                         env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)
    out = other.stderr + other.stdout
    assert other.returncode == 1, out[-3000:]
    assert ("holds this sweep job's run, stopped at step 2 and trained with other settings: "
            "optimizer.learning_rate (0.001 -> 0.01); rerun the sweep's own command") in out
    assert "choose a new hydra.sweep.dir." in out and "trained with other settings than this command's" not in out
    assert (sweep / "0" / "metrics.jsonl").read_text() == log and not (sweep / "0" / "results.json").exists()
    assert json.loads((sweep / "0" / "failure.json").read_text())["error"] == "Preempted"  # still resumable
    with open(sweep / "summary.csv") as f:
        assert {r["job"]: r["status"] for r in csv.DictReader(f)}["0"] == "stopped"
    same = commands.run([sys.executable, "train.py", *args], cwd=ROOT, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=300)
    assert same.returncode == 0, same.stderr[-3000:]
    assert json.loads((sweep / "0" / "results.json").read_text())["start_step"] == 2
    finished = commands.run([sys.executable, "train.py", *args, "optimizer.learning_rate=0.01"], cwd=ROOT,
                            env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)
    assert finished.returncode == 1  # and its refusal names what gives a sweep's jobs new directories:
    assert ("already holds a finished run trained with other settings: optimizer.learning_rate (0.001 -> 0.01); "
            "choose a new hydra.sweep.dir.") in finished.stderr + finished.stdout


@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_ctrl_c_while_a_multirun_loads_its_data_is_one_line(data_dir, tmp_path, launcher):
    """Before its train loop a job has nothing to save: the sweep ends at once, with one line and exit 130 (the
    launchers pass the KeyboardInterrupt on; it was a traceback, and a segfault while Python finalised)."""
    sweep = tmp_path / "sweep"
    args = ["-m", "seed=0,1", "debug=smoke", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}"]
    done = train_signalled_in("zoo.train", "load_dataset", args, data_dir, signame="SIGINT")
    assert done.returncode == 130
    assert done.stderr == ("error: interrupted by Ctrl-C; checkpoints already written are kept — rerun the same "
                           f"multirun command (hydra.sweep.dir={sweep}) to resume the sweep.\n")


@pytest.mark.parametrize("launcher,module", [("basic", "zoo.train"), ("population", "zoo.population.train")])
def test_sigterm_while_a_sweeps_last_jobs_finish_exits_0(data_dir, tmp_path, launcher, module):
    """Every job completed, none stopped: the sweep ends as a complete one (exit 0), not as one to rerun."""
    sweep = tmp_path / "sweep"
    seeds = "0" if launcher == "basic" else "0,1"  # the basic launcher's only job is its last
    done = train_signalled_in(module, "_finish", ["-m", "debug=smoke", f"seed={seeds}", f"hydra/launcher={launcher}",
                                                  f"hydra.sweep.dir={sweep}"], data_dir)
    out = done.stderr + done.stdout
    assert done.returncode == 0, out[-3000:]
    assert "rerun the same multirun command" not in out
    for job in seeds.split(","):
        assert json.loads((sweep / job / "results.json").read_text())["test"]["count"] == 359


def test_sigterm_while_a_sweeps_job_finishes_ends_it_before_the_next(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    done = train_signalled_in("zoo.train", "_finish", ["-m", "debug=smoke", "seed=0,1", f"hydra.sweep.dir={sweep}"],
                              data_dir)
    out = done.stderr + done.stdout
    assert done.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "the jobs it reached completed, and the sweep ends before its next job" in out
    assert (sweep / "0" / "results.json").is_file() and not (sweep / "1" / "results.json").exists()


@pytest.mark.parametrize("launcher,module,path", [("basic", "zoo.outputs", "RunOutputs.close"),
                                                  ("population", "zoo.outputs", "RunOutputs.close"),
                                                  ("population", "zoo.sweeps.summary_callback",
                                                   "SweepSummary.on_job_end")])
def test_sigterm_after_a_sweeps_last_jobs_completed_exits_0_with_its_summary(data_dir, tmp_path, launcher, module,
                                                                             path):
    """Sent once the jobs' results were written (their outputs closing, the jobs handed back and summarised), it
    killed the sweep without a word (143 in a shell) and without its summary, though every job had completed."""
    sweep = tmp_path / "sweep"
    seeds = "0" if launcher == "basic" else "0,1"
    done = train_signalled_in(module, path, ["-m", "debug=smoke", f"seed={seeds}", f"hydra/launcher={launcher}",
                                             f"hydra.sweep.dir={sweep}"], data_dir)
    out = done.stderr + done.stdout
    assert done.returncode == 0, out[-3000:]
    assert "rerun the same multirun command" not in out
    with open(sweep / "summary.csv") as f:
        assert sorted((r["job"], r["status"]) for r in csv.DictReader(f)) == [(j, "completed") for j in
                                                                              seeds.split(",")]


def test_sigterm_after_a_sweeps_job_completed_ends_it_before_the_next(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    done = train_signalled_in("zoo.outputs", "RunOutputs.close", ["-m", "debug=smoke", "seed=0,1",
                                                                  f"hydra.sweep.dir={sweep}"], data_dir)
    out = done.stderr + done.stdout
    assert done.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "the jobs it reached completed, and the sweep ends before its next job" in out
    assert (sweep / "0" / "results.json").is_file() and not (sweep / "1" / "results.json").exists()
    with open(sweep / "summary.csv") as f:
        assert [(r["job"], r["status"]) for r in csv.DictReader(f)] == [("0", "completed")]


@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_a_stopped_sweep_whose_study_was_in_memory_does_not_ask_for_a_rerun(data_dir, tmp_path, launcher):
    """An Optuna study kept in memory (hydra.sweeper.storage=null) ends with its command: the rerun the stop used
    to ask for was refused (`holds the trials of a study kept in memory`), so the stop says what does continue."""
    sweep = tmp_path / "sweep"
    args = ["-m", "debug=smoke", "hydra/sweeper=zoo_optuna", "optimizer.learning_rate=interval(1e-4,1e-2)",
            "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", f"hydra/launcher={launcher}",
            f"hydra.sweep.dir={sweep}"]
    stopped = train_signalled_in("zoo.run_logger", "RunLogger.log", args, data_dir)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert "rerun the same multirun command" not in last, last
    assert last.startswith("error: stopped by SIGTERM at step 2; ") and "hydra.sweeper.storage=null" in last, last
    with open(sweep / "summary.csv") as f:
        reasons = [r["reason"] for r in csv.DictReader(f)]
    assert reasons and all("hydra.sweeper.storage=null" in r and "to resume the sweep" not in r for r in reasons)
    rerun = commands.run([sys.executable, "train.py", *args], cwd=ROOT, env=subprocess_env(data_dir),
                         capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 2 and "which no command can continue" in rerun.stderr  # as the stop said


@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_ctrl_c_while_a_sweep_whose_study_is_in_memory_loads_its_data_asks_for_no_rerun(data_dir, tmp_path,
                                                                                         launcher):
    sweep = tmp_path / "sweep"
    args = ["-m", "debug=smoke", "hydra/sweeper=zoo_optuna", "optimizer.learning_rate=interval(1e-4,1e-2)",
            "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", f"hydra/launcher={launcher}",
            f"hydra.sweep.dir={sweep}"]
    done = train_signalled_in("zoo.train", "load_dataset", args, data_dir, signame="SIGINT")
    assert done.returncode == 130
    last = done.stderr.strip().splitlines()[-1]  # after Optuna's own line about the study it created
    assert last.startswith("error: interrupted by Ctrl-C; checkpoints already written are kept, but "
                           "hydra.sweeper.storage=null kept the sweep's Optuna study in memory"), done.stderr
    assert "rerun the same multirun command" not in done.stderr


def test_sigterm_while_a_batch_finishes_in_a_sweep_whose_study_is_in_memory_asks_for_no_rerun(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", "debug=smoke", "hydra/sweeper=zoo_optuna", "optimizer.learning_rate=interval(1e-4,1e-2)",
            "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", "hydra/launcher=population",
            f"hydra.sweep.dir={sweep}"]
    done = train_signalled_in("zoo.population.train", "_finish", args, data_dir)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: stopped by SIGTERM; the jobs it reached completed, and the sweep ends before its "
                           "next job, but hydra.sweeper.storage=null kept the sweep's Optuna study in memory"), last
    assert (sweep / "0" / "results.json").is_file() and not (sweep / "2").exists()
