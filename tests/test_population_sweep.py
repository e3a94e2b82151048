"""`python train.py -m ... hydra/launcher=population` end to end: groups, job directories like the basic
launcher's, eval.py on a member, a diverging member failing alone, Optuna batches as one program."""
import json
import pathlib
import re
import signal
import sys
import time

import pytest
from omegaconf import OmegaConf

import commands
from conftest import KILL_IN_SAVE, ROOT, subprocess_env
from test_population import records
from test_sweeps import multirun, study_trials, summary_rows

from zoo.checkpoint import Checkpoints


@pytest.fixture(scope="module")
def grouped_sweep(data_dir, tmp_path_factory):
    sweep = tmp_path_factory.mktemp("population") / "sweep"
    proc = multirun(data_dir, sweep, "hydra/launcher=population", "model.hidden=[32],[64]",
                    "optimizer.learning_rate=1e-3,3e-3", "seed=0,1", "hydra.launcher.max_size=3")
    return sweep, proc


def test_jobs_are_grouped_by_structure_and_split_at_max_size(grouped_sweep):
    sweep, proc = grouped_sweep
    # hidden=[32] jobs are #0-#3, hidden=[64] #4-#7; max_size=3 splits each group of 4 into 3 + 1
    assert "training jobs #0, #1, #2 as one population" in proc.stderr + proc.stdout
    assert "training jobs #4, #5, #6 as one population" in proc.stderr + proc.stdout
    members = {}
    for job in range(8):
        results = json.loads((sweep / str(job) / "results.json").read_text())
        members[job] = results.get("population", {}).get("members")
        overrides = (sweep / str(job) / ".hydra" / "overrides.yaml").read_text()
        assert f"model.hidden={[32] if job < 4 else [64]}".replace(" ", "") in overrides.replace(" ", "")
        log = (sweep / str(job) / "train.log").read_text()  # as a solo run's: its own metrics and run dir
        assert re.findall(r"\] - run directory: (.*)", log) == [str(sweep / str(job))]
        assert log.count("test: loss=") == 1
        assert "replacing checkpoint" not in log  # its final checkpoint is written once, as a solo run's
    assert members == {0: 3, 1: 3, 2: 3, 3: None, 4: 3, 5: 3, 6: 3, 7: None}  # the ones left over run solo
    # on the console, members' lines look as the solo jobs' do (hydra.job_logging), not tagged as the launcher's
    out = proc.stderr + proc.stdout
    assert len(re.findall(r"\]\[zoo\]\[INFO\] - test: loss=", out)) == 8 and "[HYDRA] test:" not in out
    assert re.search(r"\]\[zoo\]\[INFO\] - population step \d+:", out)
    rows = summary_rows(sweep)
    assert len(rows) == 8 and {r["status"] for r in rows} == {"completed"}
    # a population's jobs end together: one summary after its last job, not one after each
    so_far = [int(n) for n in re.findall(r"\]\[zoo\.sweeps\.summary_callback\]\[INFO\] - sweep so far: (\d+) jobs?",
                                         out)]
    assert so_far == [3, 4, 7, 8] and "[HYDRA] sweep so far" not in out  # logged as the solo jobs' are
    assert re.search(r"\]\[HYDRA\] training jobs #4, #5, #6 as one population", out)  # the launcher's own, after


def test_a_members_hydra_folder_is_what_run_job_writes_for_a_solo_job(grouped_sweep):
    """Job 1 trained in a population, job 3 alone through Hydra's run_job; they differ in the learning rate only.
    config.yaml keeps its interpolations unresolved, as run_job writes it."""
    sweep, _ = grouped_sweep
    member, solo = (sweep / "1" / ".hydra", sweep / "3" / ".hydra")
    assert "output_dir: ${hydra:runtime.output_dir}" in (member / "config.yaml").read_text()
    assert (member / "config.yaml").read_text().replace("learning_rate: 0.001", "learning_rate: 0.003") == \
        (solo / "config.yaml").read_text()
    hydra = [OmegaConf.to_container(OmegaConf.load(d / "hydra.yaml"))["hydra"] for d in (member, solo)]
    for h, job in zip(hydra, ("1", "3")):
        assert h["runtime"]["output_dir"] == str(sweep / job) and h["job"]["num"] == int(job)
        assert any(o.startswith("optimizer.learning_rate=") for o in h["overrides"]["task"])
        for key in ("num", "id", "override_dirname"):
            del h["job"][key]
        del h["runtime"]["output_dir"], h["overrides"]["task"]
    assert hydra[0] == hydra[1]


def test_eval_of_a_member_reproduces_its_final_metrics(grouped_sweep, data_dir):
    sweep, _ = grouped_sweep
    run_dir = sweep / "1"
    done = commands.run([sys.executable, "eval.py", f"run_dir={run_dir}", f"hydra.run.dir={run_dir}-eval"],
                        cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    final = json.loads((run_dir / "results.json").read_text())
    evaluated = json.loads((run_dir / "eval" / f"test-{final['steps']}.json").read_text())
    assert evaluated["count"] == final["test"]["count"]
    assert evaluated["accuracy"] == final["test"]["accuracy"]
    assert evaluated["loss"] == pytest.approx(final["test"]["loss"], rel=1e-6)


def test_a_diverging_member_fails_alone_with_its_reason(data_dir, tmp_path):
    sweep = tmp_path / "diverge"
    proc = multirun(data_dir, sweep, "hydra/launcher=population", "dataset=diabetes", "model=linear",
                    "optimizer.learning_rate=1e-2,1e30,3e-2", check=False)
    assert "training jobs #0, #1, #2 as one population" in proc.stderr + proc.stdout
    assert proc.returncode != 0  # Hydra's basic sweeper raises after all jobs ran, as with the basic launcher
    rows = {r["job"]: r for r in summary_rows(sweep)}
    assert rows["0"]["status"] == rows["2"]["status"] == "completed"
    assert rows["1"]["status"] == "failed" and "non-finite" in rows["1"]["reason"]
    failure = json.loads((sweep / "1" / "failure.json").read_text())
    assert failure["error"] == "NonFiniteLoss" and failure["user_error"]
    assert not (sweep / "1" / "results.json").exists()


def test_convnets_on_cpu_train_job_by_job_and_the_rest_as_populations(data_dir, tmp_path):
    sweep = tmp_path / "cnn"
    proc = multirun(data_dir, sweep, "hydra/launcher=population", "model=mlp,cnn", "optimizer.learning_rate=1e-3,3e-3")
    out = proc.stderr + proc.stdout
    assert "training jobs #0, #1 as one population" in out  # the MLPs
    assert "jobs #2, #3 train one after another, as under the basic launcher" in out
    members = {job: json.loads((sweep / str(job) / "results.json").read_text()).get("population", {}).get("members")
               for job in range(4)}
    assert members == {0: 2, 1: 2, 2: None, 3: None}
    assert {r["status"] for r in summary_rows(sweep)} == {"completed"}


def test_jobs_given_one_directory_run_one_after_another_as_under_the_basic_launcher(data_dir, tmp_path):
    """A hydra.sweep.subdir without the job number: the second job finds the first's finished run and is refused,
    as the basic launcher refuses it, instead of both training into one directory at once."""
    runs = {}
    for launcher in ("basic", "population"):
        sweep = tmp_path / launcher
        proc = multirun(data_dir, sweep, f"hydra/launcher={launcher}", "seed=0,1", "hydra.sweep.subdir=same",
                        check=False)
        out = proc.stderr + proc.stdout
        assert proc.returncode == 1 and "one population" not in out
        # a new hydra.sweep.dir would share one directory again: the job number in the subdir gives each its own
        assert "already holds a finished run trained with other settings: seed (0 -> 1); choose a new " \
               "hydra.sweep.subdir that holds ${hydra.job.num} (this sweep's jobs share one directory)." in out
        assert not (sweep / "same" / "failure.json").exists()  # the finished run's directory is left as it was
        assert "seed=0" in (sweep / "same" / ".hydra" / "overrides.yaml").read_text()  # its record too
        assert [r["seed"] for r in summary_rows(sweep)] == ["0"]  # ranked as the run it holds
        assert [r["status"] for r in summary_rows(sweep)] == ["completed"]
        runs[launcher] = [{k: v for k, v in json.loads(line).items() if k != "examples_per_s"}
                          for line in (sweep / "same" / "metrics.jsonl").read_text().splitlines()]
    assert runs["population"] == runs["basic"]  # seed 0's run alone, logged once


def test_jobs_given_one_paths_output_dir_run_one_after_another_as_under_the_basic_launcher(data_dir, tmp_path):
    """A paths.output_dir fixed for the whole sweep: its jobs were trained together into it, and orbax failed to
    write their checkpoints over each other's."""
    runs = {}
    for launcher in ("basic", "population"):
        out = tmp_path / f"out_{launcher}"
        proc = multirun(data_dir, tmp_path / launcher, f"hydra/launcher={launcher}", "seed=0,1",
                        f"paths.output_dir={out}", check=False)
        said = proc.stderr + proc.stdout
        assert proc.returncode == 1 and "one population" not in said and "orbax" not in said, said[-3000:]
        assert "already holds a finished run trained with other settings: seed (0 -> 1); choose a new " \
               "paths.output_dir that holds ${hydra.job.num} (this sweep's jobs share one directory)." in said
        runs[launcher] = [{k: v for k, v in json.loads(line).items() if k != "examples_per_s"}
                          for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert runs["population"] == runs["basic"]  # seed 0's run alone, logged once

def test_pmap_is_refused_before_any_training(data_dir, tmp_path):
    proc = multirun(data_dir, tmp_path / "pmap", "hydra/launcher=population", "seed=0,1", "parallel=pmap",
                    "parallel.cpu_devices=2", check=False)
    assert proc.returncode == 2 and "use parallel=sharded or parallel=none" in proc.stderr
    assert not list((tmp_path / "pmap").glob("*/results.json"))


def test_a_cpu_device_count_out_of_range_fails_its_jobs_as_under_the_basic_launcher(data_dir, tmp_path):
    """parallel.cpu_devices=100000 started the launcher's JAX with that many CPU devices, before any job checked
    the setting: the sweep hung. Each job now fails with the basic launcher's sentence."""
    proc = commands.run([sys.executable, "train.py", "-m", "debug=smoke", "seed=0,1", "hydra/launcher=population",
                           "parallel.cpu_devices=100000", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT,
                        env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "parallel.cpu_devices must be between 1 and 512 (or null), got 100000." in proc.stderr
    assert [r["status"] for r in summary_rows(tmp_path / "sweep")] == ["failed", "failed"]


def test_a_command_refused_before_any_job_leaves_the_sweeps_plan_as_it_was(data_dir, tmp_path):
    """The sweeper writes multirun.yaml before the launcher refuses the batch: the sweep's own plan (its swept keys
    and job count in the summary) is put back, as for a command whose every job was refused; it was replaced by
    the refused command's, and the rebuilt summary said `Jobs: 2 of the 6 the sweep asked for`."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("# the plan of the sweep this directory holds\n")
    proc = multirun(data_dir, sweep, "hydra/launcher=population", "seed=0,1", "parallel=pmap",
                    "parallel.cpu_devices=2", check=False)
    assert proc.returncode == 2 and "use parallel=sharded or parallel=none" in proc.stderr
    assert (sweep / "multirun.yaml").read_text() == "# the plan of the sweep this directory holds\n"


def test_a_command_refused_before_any_job_in_a_new_sweep_dir_leaves_no_sweep_behind(data_dir, tmp_path):
    """It left the directories it made, holding the refused command's multirun.yaml as if a sweep had run there;
    an empty directory that was there before stays, empty."""
    command = ["hydra/launcher=population", "seed=0,1", "parallel=pmap", "parallel.cpu_devices=2"]
    proc = multirun(data_dir, tmp_path / "new" / "sweep", *command, check=False)
    assert proc.returncode == 2 and "use parallel=sharded or parallel=none" in proc.stderr
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    proc = multirun(data_dir, tmp_path / "empty", *command, check=False)
    assert proc.returncode == 2 and "use parallel=sharded or parallel=none" in proc.stderr
    assert list((tmp_path / "empty").iterdir()) == []


def test_an_optuna_batch_refused_as_a_population_fails_with_the_sentence_and_a_rerun_asks_new_trials(data_dir,
                                                                                                   tmp_path):
    """The refused batch's trials are told FAIL with the refusal as their reason (it said `SystemExit: 2`); the
    command with the setting changed asks new trials, as docs/sweeps.md says."""
    sweep = tmp_path / "optuna"
    command = ["hydra/launcher=population", "hydra/sweeper=zoo_optuna", "hydra.sweeper.n_trials=2",
               "hydra.sweeper.n_jobs=2", "hydra.sweeper.study_name=pop",
               f"hydra.sweeper.storage=sqlite:///{sweep}/optuna.db",
               "hydra.sweeper.params={optimizer.learning_rate:'tag(log, interval(1e-4, 1e-2))'}"]
    proc = multirun(data_dir, sweep, *command, "parallel=pmap", check=False)
    assert proc.returncode == 2 and "use parallel=sharded or parallel=none" in proc.stderr
    trials = study_trials(sweep, "pop")
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
    for t in trials:
        assert t.user_attrs["fail_reason"].startswith("not run: UserError: hydra/launcher=population spreads its "
                                                      "members over devices with parallel=sharded; parallel=pmap "
                                                      "cannot"), t.user_attrs
    multirun(data_dir, sweep, *command)
    assert [t.state.name for t in study_trials(sweep, "pop")] == ["FAIL", "FAIL", "COMPLETE", "COMPLETE"]


def test_optuna_batches_train_as_one_program_each(data_dir, tmp_path):
    sweep = tmp_path / "optuna"
    proc = multirun(data_dir, sweep, "hydra/launcher=population", "hydra/sweeper=zoo_optuna",
                    "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", "hydra.sweeper.study_name=pop",
                    f"hydra.sweeper.storage=sqlite:///{sweep}/optuna.db",
                    "hydra.sweeper.params={optimizer.learning_rate:'tag(log, interval(1e-4, 1e-2))'}")
    out = proc.stderr + proc.stdout
    assert "training jobs #0, #1 as one population" in out and "training jobs #2, #3 as one population" in out
    assert "][HYDRA] Best value " in out  # the sweeper's own line, logged as the launcher left it: not as a job's
    trials = study_trials(sweep, "pop")
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    for t in trials:
        results = json.loads((pathlib.Path(t.user_attrs["run_dir"]) / "results.json").read_text())
        assert results["objective"] == t.value and results["population"]["members"] == 2


def test_a_pruned_member_is_frozen_while_the_other_finishes(data_dir, tmp_path):
    from test_sweeps import PRUNED_SWEEP

    sweep = tmp_path / "prune"
    proc = multirun(data_dir, sweep, *PRUNED_SWEEP, f"hydra.sweeper.storage=sqlite:///{sweep}/optuna.db",
                    "hydra/launcher=population", "hydra.sweeper.n_jobs=2")
    assert "training jobs #0, #1 as one population" in proc.stderr + proc.stdout
    trials = {t.params["optimizer.learning_rate"]: t for t in study_trials(sweep, "prune")}
    assert trials[1e-2].state.name == "COMPLETE" and trials[1e-9].state.name == "PRUNED"
    pruned = pathlib.Path(trials[1e-9].user_attrs["run_dir"])
    assert json.loads((pruned / "failure.json").read_text())["status"] == "pruned"
    assert sorted(p.name for p in (pruned / "checkpoints").iterdir() if p.name.isdigit()) == ["10"]
    assert max(json.loads(line)["step"] for line in (pruned / "metrics.jsonl").read_text().splitlines()) == 10
    finished = json.loads((pathlib.Path(trials[1e-2].user_attrs["run_dir"]) / "results.json").read_text())
    assert finished["steps"] == 20 and finished["population"]["members"] == 2


def test_sigterm_saves_every_member_and_the_same_command_resumes(data_dir, make_cfg, tmp_path):
    import signal

    from test_cli import TINY, start, wait_for_lines
    from zoo.population.train import train_population

    sweep = tmp_path / "sweep"
    steps = ["trainer.max_steps=3000", "trainer.log_every=1", "trainer.checkpoint_every=1000"]
    args = ["-m", *TINY, *steps, "hydra/launcher=population", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    proc = start(args, data_dir)
    wait_for_lines(sweep / "0" / "metrics.jsonl", 30, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM at step" in stderr and "rerun the same multirun command" in stderr
    stopped = [Checkpoints(str(sweep / j / "checkpoints"), read_only=True).steps()[-1] for j in ("0", "1")]
    assert stopped[0] == stopped[1] and 30 <= stopped[0] < 3000  # every member saved at the same step
    for job in ("0", "1"):
        reason = json.loads((sweep / job / "failure.json").read_text())["reason"]
        assert reason.endswith(f"rerun the same multirun command (hydra.sweep.dir={sweep}) to resume the sweep")
    done = commands.run([sys.executable, "train.py", *args], cwd=ROOT, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = [make_cfg(*TINY, *steps, f"seed={seed}", out=f"whole-{seed}") for seed in (0, 1)]
    train_population(reference)  # the same population, uninterrupted, in this process
    for job, cfg in zip(("0", "1"), reference):
        results = json.loads((sweep / job / "results.json").read_text())
        assert results["start_step"] == stopped[0] and results["steps"] == 3000
        assert results["population"]["members"] == 2
        assert not (sweep / job / "failure.json").exists()  # completed by the rerun: no longer a failed job
        assert final_states(sweep / job, cfg) == final_states(cfg.paths.output_dir, cfg)  # bitwise


def test_finished_members_rerun_report_their_results_and_keep_their_record(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    multirun(data_dir, sweep, "hydra/launcher=population", "seed=0,1")
    files = [p for job in ("0", "1") for p in [*(sweep / job / ".hydra").iterdir(), sweep / job / "results.json",
                                               sweep / job / "metrics.jsonl"]]
    kept = {p: p.read_bytes() for p in files}
    again = multirun(data_dir, sweep, "hydra/launcher=population", "seed=0,1")
    assert "already holds this finished run" in again.stderr + again.stdout
    assert {p: p.read_bytes() for p in kept} == kept
    assert [r["status"] for r in summary_rows(sweep)] == ["completed", "completed"]


def test_sigterm_in_an_optuna_sweep_and_the_same_command_continues_its_trials(data_dir, tmp_path):
    import signal

    import optuna

    from test_cli import TINY, start, wait_for_lines

    sweep = tmp_path / "sweep"
    args = ["-m", *TINY, "trainer.max_steps=3000", "trainer.log_every=1", "trainer.checkpoint_every=1000",
            "hydra/launcher=population", "hydra/sweeper=zoo_optuna", "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=2", "hydra.sweeper.study_name=stop",
            f"hydra.sweeper.storage=sqlite:///{sweep}/optuna.db",
            "hydra.sweeper.params={optimizer.learning_rate:'tag(log, interval(1e-4, 1e-2))'}",
            f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${now:%H-%M-%S-%f}_${hydra.job.num}"]  # as the presets
    proc = start(args, data_dir)
    while not list(sweep.glob("*_0/metrics.jsonl")):  # its directory's name has the time it started
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    wait_for_lines(next(sweep.glob("*_0/metrics.jsonl")), 30, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    job_dirs = [next(sweep.glob(f"*_{n}")) for n in (0, 1)]
    stopped = [Checkpoints(str(d / "checkpoints"), read_only=True).steps()[-1] for d in job_dirs]
    assert stopped[0] == stopped[1] < 3000
    done = commands.run([sys.executable, "train.py", *args], cwd=ROOT, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "training jobs #0, #1 as one population" in done.stderr + done.stdout
    trials = study_trials(sweep, "stop")
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 4  # the two stopped, two new
    for t, job_dir in zip(trials, job_dirs):  # each stopped trial continued in its own directory
        results = json.loads((job_dir / "results.json").read_text())
        assert t.user_attrs["run_dir"] == str(job_dir) and t.value == results["objective"]
        assert results["start_step"] == stopped[0] and results["steps"] == 3000
    assert len(list(sweep.glob("*_[0-9]"))) == 4


def final_states(run_dir, cfg) -> list:
    """The newest checkpoint's state leaves, restored into zeros (nothing compared comes from the target)."""
    import jax
    import numpy as np

    from zoo.train import build

    run = build(cfg)
    target = jax.tree.map(np.zeros_like, {"state": run.host_state, "sums": run.compiled.zero_sums})
    ckpts = Checkpoints(str(pathlib.Path(run_dir) / "checkpoints"), read_only=True)
    restored, _ = ckpts.restore(ckpts.steps()[-1], target)
    return [np.asarray(x).tobytes() for x in jax.tree.leaves(restored["state"])]


def test_jobs_with_their_own_environment_run_alone_and_get_it(data_dir, tmp_path):
    """hydra.job.env_set applies inside Hydra's run_job: a population cannot set it for its members."""
    elsewhere = tmp_path / "own_data_dir"
    done = multirun(data_dir, tmp_path / "sweep", "hydra/launcher=population", "seed=0,1",
                    f"+hydra.job.env_set.TFDS_DATA_DIR={elsewhere}")
    said = "train one after another, as under the basic launcher: a population cannot apply"
    assert said in done.stderr + done.stdout
    assert any(elsewhere.iterdir())  # each job read its data where its own environment said
    for job in ("0", "1"):
        assert json.loads((tmp_path / "sweep" / job / "results.json").read_text())["test"]["count"] == 359


def test_a_population_gets_more_cpu_devices_than_cores_when_its_jobs_ask(data_dir, tmp_path):
    import os

    wanted = len(os.sched_getaffinity(0)) + 2  # more than the one device a core the launcher gives by itself
    multirun(data_dir, tmp_path / "sweep", "hydra/launcher=population", "seed=0,1", "parallel=sharded",
             f"parallel.cpu_devices={wanted}", "trainer.batch_size=48")
    for job in ("0", "1"):
        results = json.loads((tmp_path / "sweep" / job / "results.json").read_text())
        assert results["devices"] == wanted and results["population"]["members"] == 2


def test_each_members_log_has_its_solo_runs_notes_on_run_length_and_ema(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    multirun(data_dir, sweep, "hydra/launcher=population", "trainer.max_steps=100", "trainer.log_every=40",
             "trainer.eval_every=0", "trainer.ema_decay=0.9", "seed=0,1")
    for job in (0, 1):
        log = (sweep / str(job) / "train.log").read_text()
        assert "population of 2 members" in log  # trained together
        assert log.count("trainer.max_steps=100 is more than trainer.epochs=1 give") == 1, log
        assert log.count("evals use the exponential moving average of the parameters (trainer.ema_decay=0.9)") == 1


def test_a_members_log_goes_where_hydra_job_logging_puts_a_solo_jobs(data_dir, tmp_path):
    """A member's log is the file hydra.job_logging names in its job directory, as run_job writes a solo job's:
    another file name there, and a paths.output_dir set apart, once left its training lines in
    <paths.output_dir>/train.log and the job's own log empty."""
    sweep, elsewhere = tmp_path / "sweep", tmp_path / "outputs"
    multirun(data_dir, sweep, "hydra/launcher=population", "seed=0,1",
             "hydra.job_logging.handlers.file.filename=${hydra.runtime.output_dir}/job.txt",
             f"paths.output_dir={elsewhere}/" + "${seed}")
    for job in (0, 1):
        log = (sweep / str(job) / "job.txt").read_text()
        assert "population of 2 members" in log and log.count("test: loss=") == 1, log
        assert re.findall(r"\] - run directory: (.*)", log) == [str(elsewhere / str(job))]
        assert not (sweep / str(job) / "train.log").exists() and not (elsewhere / str(job) / "train.log").exists()


def test_a_population_killed_with_checkpoints_still_waiting_resumes_to_its_uninterrupted_results(data_dir, tmp_path):
    every_4 = ["debug=smoke", "hydra/launcher=population", "optimizer=sgd", "optimizer.learning_rate=0.05,0.2",
               "seed=0", "trainer.max_steps=24", "trainer.log_every=4", "trainer.eval_every=4",
               "trainer.checkpoint_every=4", "checkpoint.keep=1000"]
    multirun(data_dir, tmp_path / "whole", *every_4)
    cut = tmp_path / "cut"
    killed = commands.run([sys.executable, "-c", KILL_IN_SAVE, "-m", *every_4, f"hydra.sweep.dir={cut}"], cwd=ROOT,
                          env={**subprocess_env(data_dir), "KILL_AT": "16"}, capture_output=True, text=True,
                          timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    for job in ("0", "1"):  # the members trained to the end before their checkpoints from step 16 on were written
        assert "population step 24" in (cut / job / "train.log").read_text()
        assert Checkpoints(str(cut / job / "checkpoints"), read_only=True).steps() == [4, 8, 12]
    multirun(data_dir, cut, *every_4)
    for job in ("0", "1"):
        resumed, whole = (json.loads((d / job / "results.json").read_text()) for d in (cut, tmp_path / "whole"))
        assert resumed["start_step"] == 12
        assert resumed["test"] == whole["test"]
        assert records(cut / job) == records(tmp_path / "whole" / job)
        assert Checkpoints(str(cut / job / "checkpoints"), read_only=True).steps() == [4, 8, 12, 16, 20, 24]
