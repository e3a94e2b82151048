"""Sweeps end to end: `python train.py -m ...` as a subprocess with Hydra's basic sweeper and the Optuna presets.

Contracts: every job has its own run directory; the summary's best row is the best results.json; a trial
that diverges is recorded as failed with its reason and does not end the sweep; a stored study continues;
a pruned trial stops early, keeps what it ran and shows as pruned; a multi-objective sweep reports its
Pareto front; optuna-dashboard reads the study back.
"""
import csv
import json
import pathlib
import subprocess
import sys

import matplotlib.image
import optuna
import pytest
from omegaconf import OmegaConf

import commands
from conftest import ROOT, subprocess_env
from zoo.sweeps import report


def multirun(data_dir, sweep_dir, *overrides, check=True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train.py", "-m", "debug=smoke", f"hydra.sweep.dir={sweep_dir}", *overrides]
    proc = commands.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300,
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


def optuna_study(sweep_dir, study_name):
    import optuna

    return optuna.load_study(study_name=study_name, storage=f"sqlite:///{sweep_dir}/optuna.db")


def study_trials(sweep_dir, study_name) -> list:
    return optuna_study(sweep_dir, study_name).trials


def test_grid_sweep_writes_a_run_per_job_and_a_correct_summary(data_dir, tmp_path):
    sweep = tmp_path / "grid"
    multirun(data_dir, sweep, "model=linear,mlp", "logger.plot=true")
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1"]
    for job in ("0", "1"):
        for artifact in ("results.json", "metrics.jsonl", ".hydra/config.yaml", ".hydra/overrides.yaml"):
            assert (sweep / job / artifact).is_file(), f"{job}/{artifact}"
        # drawn in the background while the sweep went on, complete before the command ended
        assert matplotlib.image.imread(sweep / job / "curves.png").shape[:2] == (400, 1000)
        assert not list((sweep / job).glob("*.tmp"))
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

    written = (sweep / "summary.csv").read_text()  # `python -m zoo.sweeps.report PATH` rebuilds the same table
    for name in ("summary.csv", "summary.md", "summary.png"):
        (sweep / name).unlink()
    assert report.main([str(sweep)]) == 0
    assert (sweep / "summary.csv").read_text() == written
    assert (sweep / "summary.md").is_file() and (sweep / "summary.png").is_file()
    assert report.main([str(sweep / "missing")]) == 2 and report.main([best_dir]) == 2  # one sentence each
    assert not (pathlib.Path(best_dir) / "summary.csv").exists()


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
    # The preset selects on validation, and the chosen trial's test accuracy stands beside it.
    assert best["objective"] == best["validation"]["accuracy"] and best["validation"]["count"] == 144
    assert float(rows[0]["test/accuracy"]) == pytest.approx(best["test"]["accuracy"])
    assert f"test/accuracy={best['test']['accuracy']:.4g}" in proc.stdout


def test_diverging_trials_fail_with_their_reason_and_the_sweep_goes_on(data_dir, tmp_path):
    sweep = tmp_path / "diverge"
    multirun(data_dir, sweep, "hparams_search=diabetes_linear", "hydra.sweeper.n_trials=3",
             "optimizer.learning_rate=choice(1e-2,1e30)")  # 1e30 overflows the squared error within two steps
    trials = study_trials(sweep, "diabetes_linear")
    states = [t.state.name for t in trials]
    assert len(states) == 3 and "FAIL" in states and "COMPLETE" in states, states
    for t in trials:
        if t.state.name == "FAIL":
            assert t.user_attrs["fail_reason"].startswith("NonFiniteLoss: training loss became non-finite")
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
    assert proc.returncode == 1  # Hydra's basic sweeper raises after all jobs ran (and skips on_multirun_end)
    assert "Traceback" not in proc.stderr  # a UserError is one of Hydra's compact exceptions: its sentence alone
    ending = proc.stderr[proc.stderr.index("Error executing job with overrides:"):]
    assert "'optimizer.learning_rate=1e+30'" in ending and "training loss became non-finite" in ending
    rows = summary_rows(sweep)
    assert [(r["job"], r["status"]) for r in rows] == [("0", "completed"), ("1", "failed")]
    assert "non-finite" in rows[1]["reason"] and (sweep / "1" / "failure.json").is_file()
    assert (sweep / "summary.png").stat().st_size > 0  # drawn on the failure, as on_multirun_end never comes


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


PRUNED_SWEEP = ("hydra/sweeper=zoo_optuna", "hydra/sweeper/sampler=grid", "hydra.sweeper.direction=maximize",
                "hydra.sweeper.study_name=prune", "optimized_metric=validation/accuracy",
                "dataset.validation_fraction=0.1", "trainer.max_steps=20", "trainer.eval_every=10",
                # The bad trial: lr=1e-9 leaves the MLP at its random init, so validation accuracy stays near
                # chance (0.10 at step 10) while lr=1e-2 is at 0.73; the threshold 0.3 prunes the first only.
                "optimizer.learning_rate=choice(1e-2,1e-9)",
                "hydra.sweeper.pruner={_target_:optuna.pruners.ThresholdPruner,lower:0.3}")


@pytest.fixture(scope="module")
def pruned_sweep(data_dir, tmp_path_factory):
    sweep = tmp_path_factory.mktemp("prune")
    multirun(data_dir, sweep, *PRUNED_SWEEP, f"hydra.sweeper.storage=sqlite:///{sweep}/optuna.db")
    return sweep


def test_a_pruned_trial_stops_keeps_its_checkpoint_and_shows_as_pruned(pruned_sweep):
    trials = {t.params["optimizer.learning_rate"]: t for t in study_trials(pruned_sweep, "prune")}
    assert trials[1e-2].state.name == "COMPLETE" and trials[1e-9].state.name == "PRUNED"
    assert list(trials[1e-9].intermediate_values) == [10] and trials[1e-9].intermediate_values[10] < 0.3
    rows = {float(r["optimizer.learning_rate"]): r for r in summary_rows(pruned_sweep)}
    assert rows[1e-9]["status"] == "pruned" and "pruned at step 10" in rows[1e-9]["reason"]
    assert int(rows[1e-9]["steps"]) == 10  # the steps it ran, and the eval the pruner judged
    assert float(rows[1e-9]["validation/accuracy"]) == pytest.approx(trials[1e-9].intermediate_values[10])
    assert rows[1e-2]["status"] == "completed"
    run_dir = pathlib.Path(rows[1e-9]["run_dir"])
    assert trials[1e-9].user_attrs["run_dir"] == str(run_dir)
    assert json.loads((run_dir / "failure.json").read_text())["status"] == "pruned"
    assert not (run_dir / "results.json").exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()) == ["10"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 10
    assert [r["accuracy"] for r in records if r["split"] == "validation"] == [trials[1e-9].intermediate_values[10]]
    assert "1 completed, 1 pruned" in (pruned_sweep / "summary.md").read_text()


def test_eval_and_export_of_a_pruned_trial_do_not_call_it_unfinished(pruned_sweep, make_cfg, caplog):
    """A pruned trial ends at its pruned step, without results.json (docs/sweeps.md: 'so eval.py run_dir=<job> works
    on it'): eval.py and export.py warned that it had not finished and said to train it to its end."""
    from zoo.evaluate import evaluate
    from zoo.export.artifact import export

    run_dir = next(p for p in pruned_sweep.iterdir() if (p / "failure.json").is_file())
    with caplog.at_level("WARNING", logger="zoo"):
        assert evaluate(make_cfg(f"run_dir={run_dir}", config_name="eval"))["step"] == 10
        assert export(make_cfg(f"run_dir={run_dir}", config_name="export"))["step"] == 10
    assert "has not finished" not in caplog.text


def test_the_dashboard_shows_the_study(pruned_sweep):
    import socket
    import time
    import urllib.request

    with socket.socket() as s:  # a free port on the loopback interface only
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dashboard = pathlib.Path(sys.executable).with_name("optuna-dashboard")
    server = commands.Popen([str(dashboard), f"sqlite:///{pruned_sweep}/optuna.db", "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return json.loads(response.read())

    try:
        deadline = time.monotonic() + 60  # a busy CI machine starts it in seconds; never wait forever
        while True:
            try:
                studies = get("/api/studies")["study_summaries"]
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "optuna-dashboard did not start"
                time.sleep(0.2)
        assert [s["study_name"] for s in studies] == ["prune"]
        detail = get(f"/api/studies/{studies[0]['study_id']}")
    finally:
        server.terminate()
        server.wait(timeout=10)
    trials = study_trials(pruned_sweep, "prune")
    assert detail["name"] == "prune" and len(detail["trials"]) == len(trials) == 2
    assert [t["state"] for t in detail["trials"]] == [t.state.name.capitalize() for t in trials]
    best = max(t.value for t in trials if t.state.name == "COMPLETE")
    assert [t["values"] for t in detail["best_trials"]] == [[best]]


def test_a_multi_objective_sweep_reports_its_pareto_front(data_dir, tmp_path):
    sweep = tmp_path / "pareto"
    proc = multirun(data_dir, sweep, "hparams_search=digits_mlp", "hydra.sweeper.n_trials=4",
                    "optimized_metric=[validation/accuracy,wall_time_s]")  # directions follow the metrics
    study = optuna_study(sweep, "digits_mlp")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    front = {t.user_attrs["run_dir"] for t in study.best_trials}
    rows = summary_rows(sweep)
    assert {r["run_dir"] for r in rows if r["pareto"] == "yes"} == front
    assert [r["pareto"] for r in rows] == sorted((r["pareto"] for r in rows), reverse=True)  # the front first
    for r in rows:
        results = json.loads((pathlib.Path(r["run_dir"]) / "results.json").read_text())
        assert [float(r["objective_1"]), float(r["objective_2"])] == pytest.approx(
            [results["validation"]["accuracy"], results["wall_time_s"]])
    assert f"Pareto front ({len(front)} job{'s' if len(front) > 1 else ''})" in proc.stdout
    assert "objective_1 = `validation/accuracy` (maximize)" in (sweep / "summary.md").read_text()
    assert (sweep / "summary.png").stat().st_size > 0
    solutions = OmegaConf.load(sweep / "optimization_results.yaml").solutions
    assert len(solutions) == len(front)


def test_a_multiruns_job_with_cpu_devices_null_gets_one_device_after_one_that_set_more(data_dir, tmp_path):
    multirun(data_dir, tmp_path, "parallel=pmap", "parallel.cpu_devices=2,null")
    devices = [json.loads((tmp_path / job / "results.json").read_text())["devices"] for job in ("0", "1")]
    assert devices == [2, 1]  # as each command alone


def test_report_help_prints_its_usage(capsys):
    assert report.main(["--help"]) == 0 and report.main(["-h"]) == 0
    assert capsys.readouterr().out.count("usage: python -m zoo.sweeps.report MULTIRUN_DIR") == 2


def test_a_sweep_dir_holding_another_objectives_jobs_is_refused(data_dir, tmp_path):
    """One summary ranks one objective: another sweep run into a sweep dir whose jobs optimised another objective
    is refused before any job runs, and the summary there stays as it was."""
    sweep = tmp_path / "objective"
    multirun(data_dir, sweep, "seed=0")  # test/accuracy
    written = (sweep / "summary.csv").read_text()
    proc = multirun(data_dir, sweep, "seed=0,1", "optimized_metric=test/loss", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        f"error: hydra.sweep.dir={sweep} holds jobs that optimised test/accuracy, and this sweep optimises test/loss; "
        "one summary cannot rank both, so choose a new hydra.sweep.dir.")
    assert (sweep / "summary.csv").read_text() == written and not (sweep / "1").exists()
    assert multirun(data_dir, sweep, "seed=0,1").returncode == 0  # the same objective goes on in it


@pytest.mark.parametrize("sweeper", ["hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                                     "zoo.sweeps.optuna_sweeper.OptunaSweeper"], ids=["grid", "study"])
def test_the_same_sweep_run_again_with_another_objective_is_refused(tmp_path, capsys, sweeper):
    """A grid's finished jobs keep the record they were trained under, so its summary would rank them by the old
    objective under the new one's name; a study would add new trials beside ones that optimised the other."""
    from zoo.sweeps.summary_callback import _refuse_another_objective

    (tmp_path / "0" / ".hydra").mkdir(parents=True)
    (tmp_path / "0" / ".hydra" / "overrides.yaml").write_text("[]")
    (tmp_path / "0" / ".hydra" / "config.yaml").write_text("optimized_metric: validation/accuracy\n")
    task = ["hparams_search=digits_mlp"]
    OmegaConf.save({"hydra": {"overrides": {"task": task}}}, tmp_path / "multirun.yaml")  # the same command before
    config = OmegaConf.create({"optimized_metric": "validation/loss", "hydra": {
        "sweep": {"dir": str(tmp_path)}, "overrides": {"task": task + ["optimized_metric=validation/loss"]},
        "sweeper": {"_target_": sweeper}}})
    with pytest.raises(SystemExit) as stopped:
        _refuse_another_objective(config)
    assert stopped.value.code == 2 and "holds jobs that optimised validation/accuracy" in capsys.readouterr().err
    config.optimized_metric = "validation/accuracy"  # the objective they optimised: goes on
    _refuse_another_objective(config)


def test_a_sweep_dir_whose_job_record_does_not_read_is_refused_in_one_sentence(tmp_path, capsys):
    """Its objective cannot be compared: the check raised a YAML error that Hydra printed as a warning, and let
    the sweep go on without it."""
    from zoo.sweeps.summary_callback import _refuse_another_objective

    (tmp_path / "0" / ".hydra").mkdir(parents=True)
    (tmp_path / "0" / ".hydra" / "overrides.yaml").write_text("[]")
    (tmp_path / "0" / ".hydra" / "config.yaml").write_text("a: [b\n")
    basic = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "overrides": {"task": ["seed=0,1"]},
                                         "sweeper": {"_target_": basic}}})
    with pytest.raises(SystemExit) as stopped:
        _refuse_another_objective(config)
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path}/0/.hydra/config.yaml cannot be read (ParserError: ")


def jobs_optimising(tmp_path, objectives: dict) -> None:
    """A job directory per {job: its optimized_metric}, as far as the report reads it."""
    for job, metric in objectives.items():
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text("[]")
        (tmp_path / job / ".hydra" / "config.yaml").write_text(f"optimized_metric: {metric}\n")
        (tmp_path / job / ".hydra" / "hydra.yaml").write_text("hydra: {}\n")


def test_report_refuses_jobs_of_different_objectives(tmp_path, capsys):
    jobs_optimising(tmp_path, {"a/0": "test/accuracy", "b/0": "test/loss"})
    assert report.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: the jobs under {tmp_path} optimised different objectives, "
                                       f"test/accuracy ({tmp_path}/a/0) and test/loss ({tmp_path}/b/0); pass one "
                                       "sweep's directory.\n")
    assert report.main([str(tmp_path / "a")]) == 0  # one sweep's jobs alone


def test_report_on_one_sweep_of_different_objectives_does_not_ask_for_one_sweeps_directory(tmp_path, capsys):
    """A grid over datasets of a classification and a regression task: its directory is one sweep's, which the
    refusal asked for."""
    (tmp_path / "multirun.yaml").write_text("hydra: {}\n")
    jobs_optimising(tmp_path, {"0": "test/accuracy", "1": "test/loss"})
    assert report.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: the jobs of the sweep {tmp_path} optimised different objectives, "
                                       f"test/accuracy ({tmp_path}/0) and test/loss ({tmp_path}/1), which one summary "
                                       "cannot rank; a sweep whose optimized_metric names one metric every job reports "
                                       "gets one.\n")


def test_a_sweep_dir_above_other_sweeps_is_refused(tmp_path, capsys):
    """hydra.sweep.dir=multirun (the folder of the dated sweeps): its summary ranked their jobs with its own and
    named one of theirs the best."""
    from zoo.sweeps.summary_callback import SweepSummary

    old = tmp_path / "2026-01-01" / "12-00-00"
    (old / "0" / ".hydra").mkdir(parents=True)
    (old / "0" / ".hydra" / "overrides.yaml").write_text("[]")
    (old / "0" / ".hydra" / "config.yaml").write_text("optimized_metric: test/accuracy\n")
    (old / "multirun.yaml").write_text("hydra: {}\n")

    def config(sweep_dir):
        return OmegaConf.create({"optimized_metric": "test/accuracy", "hydra": {
            "sweep": {"dir": str(sweep_dir)}, "overrides": {"task": ["seed=0,1"]},
            "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}}})

    with pytest.raises(SystemExit) as stopped:
        SweepSummary().on_multirun_start(config(tmp_path))
    assert stopped.value.code == 2 and capsys.readouterr().err == (
        f"error: hydra.sweep.dir={tmp_path} holds another sweep ({old}), whose jobs this sweep's summary would rank "
        "with its own; choose a new hydra.sweep.dir.\n")
    SweepSummary().on_multirun_start(config(old))  # that sweep run again in its own dir


def test_a_sweep_dir_holding_another_studys_trials_is_refused(tmp_path, capsys):
    """Their jobs would share trial numbers, directories and the summary (an MLP study's best beside a CNN's)."""
    from zoo.sweeps.summary_callback import _refuse_another_objective

    (tmp_path / "0" / ".hydra").mkdir(parents=True)
    (tmp_path / "0" / ".hydra" / "overrides.yaml").write_text("[]")
    (tmp_path / "0" / ".hydra" / "config.yaml").write_text("optimized_metric: validation/accuracy\n")
    OmegaConf.save({"hydra": {"overrides": {"task": ["hparams_search=digits_mlp"]},
                              "sweeper": {"study_name": "digits_mlp"}}}, tmp_path / "multirun.yaml")

    def config(study):
        return OmegaConf.create({"optimized_metric": "validation/accuracy", "hydra": {
            "sweep": {"dir": str(tmp_path)}, "overrides": {"task": [f"hparams_search={study}"]},
            "sweeper": {"_target_": "zoo.sweeps.optuna_sweeper.OptunaSweeper", "study_name": study}}})

    _refuse_another_objective(config("digits_mlp"))  # the same study continued
    with pytest.raises(SystemExit) as stopped:
        _refuse_another_objective(config("digits_cnn"))
    assert stopped.value.code == 2 and capsys.readouterr().err == (
        f"error: hydra.sweep.dir={tmp_path} holds the trials of study digits_mlp, and this sweep runs study digits_cnn; "
        "one summary cannot rank both, so choose a new hydra.sweep.dir.\n")


def test_a_grid_over_datasets_run_again_is_not_refused_for_the_base_configs_objective(tmp_path, capsys):
    """With optimized_metric null, each job's objective follows its own dataset's task, not the one of the config
    the sweep composes without its sweeps: rerunning `-m model=linear dataset=diabetes,synthetic_linear` to go on
    was refused as optimising test/accuracy."""
    from zoo.sweeps.summary_callback import _refuse_another_objective

    (tmp_path / "0" / ".hydra").mkdir(parents=True)
    (tmp_path / "0" / ".hydra" / "overrides.yaml").write_text("[]")
    (tmp_path / "0" / ".hydra" / "config.yaml").write_text("dataset: {task: regression}\n")
    task = ["model=linear", "dataset=diabetes,synthetic_linear"]
    config = OmegaConf.create({"optimized_metric": None, "dataset": {"task": "classification"}, "hydra": {
        "sweep": {"dir": str(tmp_path)}, "overrides": {"task": task},
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}}})
    _refuse_another_objective(config)
    config.optimized_metric = "test/accuracy"  # named: every job optimises it, so the jobs' test/loss is refused
    with pytest.raises(SystemExit) as stopped:
        _refuse_another_objective(config)
    assert stopped.value.code == 2 and "holds jobs that optimised test/loss" in capsys.readouterr().err


@pytest.mark.parametrize("sweep", ["seed=range(0)", "model=glob(zzz*)"])
@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_a_grid_of_no_jobs_is_refused_in_one_sentence_before_the_sweep_dir_is_made(data_dir, tmp_path, sweep,
                                                                                    launcher):
    """It exited 0 with an empty summary (the population launcher: a ValueError traceback)."""
    sweep_dir = tmp_path / "empty"
    proc = multirun(data_dir, sweep_dir, sweep, f"hydra/launcher={launcher}", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (f"error: {sweep} sweeps over no values, so the multirun would "
                                                    "run no jobs; give it at least one value.")
    assert not sweep_dir.exists()


def test_a_grid_of_no_jobs_from_the_sweepers_params_is_refused(tmp_path, capsys):
    """hydra.sweeper.params (set in a config file) sweeps as the command line does; a later value of the same key
    on the command line replaces its sweep, as the basic sweeper does."""
    from zoo.cli import RunDirCheck, _exit_if_no_jobs

    def config(*task):
        return OmegaConf.create({"hydra": {"sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper."
                                                                    "BasicSweeper", "params": {"seed": "range(3,1)"}},
                                           "overrides": {"task": list(task)}, "sweep": {"dir": str(tmp_path / "s")}}})

    with pytest.raises(SystemExit) as exit_:
        RunDirCheck().on_multirun_start(config("model=linear,mlp"))
    assert exit_.value.code == 2 and not (tmp_path / "s").exists()
    assert capsys.readouterr().err == ("error: seed=range(3,1) sweeps over no values, so the multirun would run no "
                                       "jobs; give it at least one value.\n")
    _exit_if_no_jobs(config("seed=1"))  # the command line's seed wins: one job


def test_another_grid_refused_by_a_finished_sweeps_jobs_leaves_its_files_as_they_were(data_dir, tmp_path):
    """Hydra's sweeper rewrites multirun.yaml before the first job: the refused command's was left behind, and the
    summary's swept keys and job count followed it."""
    sweep = tmp_path / "grid"
    multirun(data_dir, sweep, "model=linear,mlp")
    files = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    refused = multirun(data_dir, sweep, "optimizer.learning_rate=0.1,0.2", check=False)
    assert refused.returncode == 1 and "was trained with other settings: model._target_" in refused.stderr
    # Hydra prints a batch's first failure alone: each refusal is on the console as its job ends
    said = [line for line in refused.stdout.splitlines() if "[zoo][ERROR] - error: " in line]
    assert len(said) == 2 and f"{sweep}/0/" in said[0] and f"{sweep}/1 " in said[1], refused.stdout[-3000:]
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == files
    grown = multirun(data_dir, sweep, "model=linear,mlp,cnn")  # its first jobs stand: the new command's plan holds
    assert "- model=linear,mlp,cnn" in (sweep / "multirun.yaml").read_text(), grown.stderr[-2000:]
    assert "Jobs: 3 (3 completed)" in (sweep / "summary.md").read_text()


def test_a_grid_into_an_optuna_studys_sweep_dir_is_refused_and_leaves_its_files_as_they_were(data_dir, tmp_path):
    """Of the same objective, the grid ran: it replaced the study's multirun.yaml (its sweeper, its search space)
    and the summary ranked its jobs with the study's trials."""
    sweep = tmp_path / "study"
    multirun(data_dir, sweep, "hparams_search=digits_mlp", "hydra.sweeper.n_trials=1")
    files = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    refused = multirun(data_dir, sweep, "seed=0,1", "dataset.validation_fraction=0.1", check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        f"error: hydra.sweep.dir={sweep} holds the jobs of a sweep by another sweeper (ZooOptunaSweeper, this command's "
        "BasicSweeper), whose multirun.yaml this sweep would replace and whose jobs its summary would rank with its "
        "own; choose a new hydra.sweep.dir."), refused.stderr[-2000:]
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == files


def test_a_later_job_sharing_a_directory_does_not_train_on_an_earlier_jobs_run(data_dir, tmp_path):
    """trainer.max_steps=4,6 in one hydra.sweep.subdir: the second job lengthened the first's finished run, whose
    4-step results were gone, and the sweep exited 0 with one row (6,4 was refused, as other settings are)."""
    sweep = tmp_path / "lengths"
    proc = multirun(data_dir, sweep, "trainer.max_steps=4,6", "hydra.sweep.subdir=same", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "choose a new hydra.sweep.subdir that holds ${hydra.job.num} (this sweep's jobs share one directory)." \
        in proc.stderr, proc.stderr[-2000:]
    assert json.loads((sweep / "same" / "results.json").read_text())["steps"] == 4  # the first job's, as it was
    assert [r["trainer.max_steps"] for r in summary_rows(sweep)] == ["4"]


def test_a_later_job_sharing_a_directory_does_not_replace_an_earlier_jobs_failure(data_dir, tmp_path):
    """An earlier job that failed before its first checkpoint left only its failure.json and logs: the next job in
    its directory trained there, the failure vanished from the summary, and the sweep said nothing of it."""
    sweep = tmp_path / "diverged"
    proc = multirun(data_dir, sweep, "optimizer.learning_rate=1e30,0.1", "hydra.sweep.subdir=same", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert (f"error: hydra.run.dir={sweep / 'same'} holds what an earlier job of this sweep left there (its "
            "failure.json and logs), which this job would replace; choose a new hydra.sweep.subdir that holds "
            "${hydra.job.num} (this sweep's jobs share one directory).") in proc.stdout, proc.stdout[-2000:]
    failure = json.loads((sweep / "same" / "failure.json").read_text())
    assert failure["error"] == "NonFiniteLoss" and "optimizer.learning_rate=1e+30" in failure["overrides"]
    assert not (sweep / "same" / "results.json").exists()
    assert [(r["status"], r["optimizer.learning_rate"]) for r in summary_rows(sweep)] == [("failed", "1e+30")]


def test_a_one_job_sweep_kept_at_its_root_is_rerun_as_any_sweep(data_dir, tmp_path):
    """With hydra.sweep.subdir=. the job's run lies beside multirun.yaml; its rerun was refused as a run in the
    sweep dir. The same command now reports the finished job again; another one is refused by that job alone."""
    sweep = tmp_path / "one"
    multirun(data_dir, sweep, "model=linear", "hydra.sweep.subdir=.")
    results, record = (sweep / "results.json").read_bytes(), (sweep / ".hydra" / "overrides.yaml").read_bytes()
    again = multirun(data_dir, sweep, "model=linear", "hydra.sweep.subdir=.", check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already holds this finished run" in again.stdout
    other = multirun(data_dir, sweep, "model=mlp", "hydra.sweep.subdir=.", check=False)
    assert other.returncode == 1 and "was trained with other settings: model._target_" in other.stderr
    assert (sweep / "results.json").read_bytes() == results
    assert (sweep / ".hydra" / "overrides.yaml").read_bytes() == record
    assert [r["job"] for r in summary_rows(sweep)] == ["."]


@pytest.mark.parametrize("overrides,key,group,settings", [
    (["optimizer=sgd"], "optimizer.weight_decay", "optimizer=sgd", "learning_rate, momentum, nesterov"),
    (["model=cnn", "optimizer.weight_decay=0"], "model.hidden", "model=cnn", None),
    (["model=linear"], "model.hidden", "model=linear", "none"),  # not an empty "(its settings: )"
])
def test_a_preset_searching_a_setting_the_chosen_group_lacks_is_refused_before_any_trial(data_dir, tmp_path, overrides,
                                                                                         key, group, settings):
    """hparams_search=digits_mlp with optimizer=sgd or model=cnn: each trial failed in Hydra's `Could not override`,
    whose hint (`+optimizer.weight_decay=...`) names a key the run then refuses, and left a failed trial."""
    sweep_dir = tmp_path / "s"
    proc = multirun(data_dir, sweep_dir, "hparams_search=digits_mlp", "hydra.sweeper.n_trials=1", *overrides,
                    check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the sweep searches {key} (hydra.sweeper.params), which {group} does not have "
                           "(its settings: "), last
    assert last.endswith(f"); choose another {group.partition('=')[0]}, or search settings it has."), last
    assert settings is None or f"(its settings: {settings})" in last, last
    assert not (sweep_dir / "optuna.db").exists()


def test_a_search_refused_before_its_study_opens_leaves_no_new_sweep_dir(data_dir, tmp_path):
    """It left the empty directories made for its hydra.sweep.dir; one that was there before stays, as it was."""
    command = ["hparams_search=digits_mlp", "hydra.sweeper.n_trials=1", "trainer.batch_size=interval(16,128)"]
    proc = multirun(data_dir, tmp_path / "new" / "sweep", *command, check=False)
    assert proc.returncode == 2 and "draw integers with int(interval(...))" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    proc = multirun(data_dir, tmp_path / "kept", *command, check=False)
    assert proc.returncode == 2 and (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())


@pytest.mark.parametrize("overrides,code,said", [
    (["hydra/launcher=population", "hydra.launcher.max_size=0"], 2, "hydra.launcher.max_size must be a positive"),
    (["hparams_search=digits_mlp", "hydra.sweeper.n_trials=0"], 2, "hydra.sweeper.n_trials and hydra.sweeper.n_jobs"),
    (["+hydra.launcher.foo=1"], 2, "hydra.launcher.foo is not a setting of hydra/launcher=basic"),
    # Hydra's basic sweeper asserted it: an AssertionError traceback, exit 1
    (["hydra.sweeper.max_batch_size=0"], 2, "error: hydra.sweeper.max_batch_size=0 launches no job at a time; set it "
                                            "to 1 or more, or null (every job in one batch).\n"),
], ids=["launcher", "sweeper", "hydras", "basic-sweeper"])
def test_a_sweep_whose_sweeper_or_launcher_is_refused_leaves_no_new_sweep_dir(data_dir, tmp_path, overrides, code,
                                                                              said):
    """Hydra starts the multirun (its callbacks make the sweep dir) before it builds the sweeper and the launcher:
    their refusals left the empty directories made for it."""
    proc = multirun(data_dir, tmp_path / "new" / "sweep", "seed=0,1", *overrides, check=False)
    assert proc.returncode == code and said in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("given", ["hydra.sweeper.params={seed:'0,1'}", "+hydra.sweeper.params.seed='0,1'"],
                         ids=["dict", "key"])
def test_the_basic_sweepers_params_on_the_command_line_are_one_sentence_naming_the_override(data_dir, tmp_path,
                                                                                           given):
    """OmegaConf cannot merge into the basic sweeper's params, null until set: an AttributeError or AssertionError
    traceback, exit 1. The same sweep as an override of its own runs."""
    proc = multirun(data_dir, tmp_path / "new" / "sweep", "model=linear", given, check=False)
    assert proc.returncode == 2 and proc.stderr == (
        "error: hydra.sweeper.params cannot be set on the command line under Hydra's basic sweeper (OmegaConf "
        "cannot merge into its params, null until a config sets them); give each sweep as an override of its own: "
        "seed=0,1.\n"), proc.stderr[-2000:]
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("search", [[], ["hparams_search=digits_mlp", "hydra.sweeper.n_trials=1"]],
                         ids=["grid", "optuna"])
@pytest.mark.parametrize("swept", ["seed=range(0,10,0)", "model.dropout=range(0.0,0.5,0.0)"], ids=["int", "float"])
def test_a_range_whose_step_is_0_is_one_sentence_before_the_sweep_dir_is_made(data_dir, tmp_path, search, swept):
    """It ended in a traceback: Python's `ValueError: range() arg 3 must not be zero` (integers) or Hydra's
    `HydraException: Invalid range values` (floats), exit 1, a grid's leaving its empty sweep dir."""
    proc = multirun(data_dir, tmp_path / "new" / "sweep", *search, swept, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {swept} steps by 0, so it never reaches its end; give it a step other than 0."), proc.stderr[-2000:]
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("overrides,said", [
    (["+hydra.sweeper.foo=1"], "hydra.sweeper.foo is not a setting of hydra/sweeper=basic, whose settings are "
                               "max_batch_size, params; remove it or set one of those."),
    (["hparams_search=digits_mlp", "+hydra.sweeper.foo=1", "+hydra.sweeper.bar=2"],
     "hydra.sweeper.foo, hydra.sweeper.bar are not settings of hydra/sweeper=zoo_optuna, whose settings are sampler, "
     "direction, directions, storage, study_name, n_trials, n_jobs, max_failure_rate, params, pruner; remove them or "
     "set those."),
    (["hparams_search=digits_mlp", "+hydra.sweeper.custom_search_space=my.module.space"],
     "hydra.sweeper.custom_search_space is not a setting of hydra/sweeper=zoo_optuna (Hydra's Optuna sweeper's "
     "Python function of suggestions is not supported: search with hydra.sweeper.params), whose settings are "),
    (["hydra/launcher=population", "+hydra.launcher.foo=1"],
     "hydra.launcher.foo is not a setting of hydra/launcher=population, whose settings are max_size; remove it or "
     "set one of those."),
    (["hydra/launcher=submitit_local", "+hydra.launcher.foo=1"],
     "hydra.launcher.foo is not a setting of hydra/launcher=submitit_local, whose settings are submitit_folder, "),
], ids=["basic", "optuna", "custom_search_space", "population", "submitit"])
def test_an_unknown_sweeper_or_launcher_setting_is_one_sentence_naming_those_there_are(data_dir, tmp_path, overrides,
                                                                                      said):
    """It ended in Hydra's `Error in call to target` with the plugin's TypeError (`unexpected keyword argument`), exit
    1, and under submitit in a NameError traceback once the sweep dir held its multirun.yaml."""
    proc = multirun(data_dir, tmp_path / "new" / "sweep", "seed=0,1", *overrides, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {said}"), last
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("subdir", ["null", "meta"])
def test_jobs_kept_without_a_hydra_folder_get_no_summary_claiming_none_completed(data_dir, tmp_path, subdir):
    """The summary finds a sweep's jobs by their .hydra/ record: with hydra.output_subdir=null (or another name)
    it listed none and ended `Best: none (no job completed yet)` under a sweep whose jobs all completed."""
    sweep = tmp_path / "sweep"
    proc = multirun(data_dir, sweep, "model=linear", "seed=0,1", f"hydra.output_subdir={subdir}")
    out = proc.stdout + proc.stderr
    assert "Best: none" not in out and not (sweep / "summary.md").exists(), out[-2000:]
    assert out.count(f"no sweep summary: hydra.output_subdir={subdir} keeps") == 1, out[-2000:]
    assert len(list(sweep.glob("*/results.json"))) == 2


def test_an_optuna_sweep_whose_overrides_no_config_takes_leaves_the_sweeps_plan_as_it_was(data_dir, tmp_path):
    """The sweeper wrote this command's multirun.yaml, then the launcher refused the first batch (Hydra's `Could not
    override`): the sweep dir's plan (its summary's swept keys and axes) became one no job ran. Its trial is told
    failed, as before."""
    sweep_dir = tmp_path / "sweep"
    multirun(data_dir, sweep_dir, "hparams_search=digits_mlp", "hydra.sweeper.n_trials=1")
    plan = (sweep_dir / "multirun.yaml").read_bytes()
    proc = multirun(data_dir, sweep_dir, "hparams_search=digits_mlp", "hydra.sweeper.n_trials=1", "nope=choice(1,2)",
                    check=False)
    assert proc.returncode == 1 and "Could not override 'nope'" in proc.stderr, proc.stderr[-2000:]
    assert (sweep_dir / "multirun.yaml").read_bytes() == plan
    study = optuna.load_study(study_name="digits_mlp", storage=f"sqlite:///{sweep_dir}/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]
    assert study.trials[1].user_attrs["fail_reason"].startswith("not run: ConfigCompositionException: Could not "
                                                                "override 'nope'")


def test_a_search_over_a_group_whose_option_lacks_a_searched_setting_is_refused_before_any_trial(data_dir, tmp_path):
    """hparams_search=digits_mlp 'model=choice(mlp,cnn)': the first trial that drew cnn failed in Hydra's `Could not
    override 'model.hidden'` (whose hint, +model.hidden=..., names a key the run refuses) and ended the sweep,
    exit 1, with a failed trial in the study."""
    sweep_dir = tmp_path / "s"
    proc = multirun(data_dir, sweep_dir, "hparams_search=digits_mlp", "hydra.sweeper.n_trials=4",
                    "model=choice(mlp,cnn)", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the sweep searches model.hidden (hydra.sweeper.params), which model=cnn, one of the "
                           "model options it searches, does not have (its settings: "), last
    assert last.endswith("); search one model at a time, or search settings every option has."), last
    assert not (sweep_dir / "optuna.db").exists() and not list(sweep_dir.glob("*/.hydra"))


@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_a_failed_jobs_train_log_ends_with_its_sentence_as_a_single_runs_does(data_dir, tmp_path, launcher):
    sweep = tmp_path / launcher
    proc = multirun(data_dir, sweep, "dataset=diabetes", "model=linear", "optimizer.learning_rate=1e-2,1e30",
                    f"hydra/launcher={launcher}", check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    failed = (sweep / "1" / "train.log").read_text().splitlines()
    assert [line for line in failed if "error: " in line] == [failed[-1]]  # once, and last
    assert failed[-1].endswith("][zoo][ERROR] - error: training loss became non-finite by step 2 (last finite loss: "
                               "none); lower optimizer.learning_rate or set trainer.clip_norm.")
    assert "error: " not in (sweep / "0" / "train.log").read_text()


def test_an_override_naming_the_jobs_own_hydra_config_keeps_the_sweeps_checks(data_dir, tmp_path):
    """`seed=${hydra:job.num}` resolves only in a job: reading the overrides resolved at the sweep's start raised,
    Hydra warned that RunDirCheck.on_multirun_start failed, and its checks were skipped (an unwritable sweep dir
    ended in Hydra's traceback, exit 1)."""
    (tmp_path / "a_file").write_text("")
    own_seed = ["model=linear", "dataset=diabetes", "seed=${hydra:job.num}", "optimizer.learning_rate=1e-2,3e-2"]
    refused = multirun(data_dir, tmp_path / "a_file" / "sweep", *own_seed, check=False)
    assert (refused.returncode, refused.stderr.strip().splitlines()[-1]) == (
        2, f"error: hydra.sweep.dir={tmp_path}/a_file/sweep is not writable (Not a directory); set hydra.sweep.dir "
           "to a directory you can write."), refused.stderr[-3000:]
    sweep = tmp_path / "sweep"
    for _ in ("run", "the same command again, which reports the finished jobs"):
        done = multirun(data_dir, sweep, *own_seed)
        assert "raised" not in done.stderr, done.stderr[-3000:]
        assert "Jobs: 2 (2 completed)" in (sweep / "summary.md").read_text()
    assert report.sweep_plan(str(sweep)) == ({"optimizer.learning_rate"}, set(), 2)  # read from multirun.yaml
