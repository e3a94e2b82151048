"""The sweep summary: unfinished and non-finite rows, what is written after each job and at the end, and the
digits_cnn Optuna preset run end to end."""
import csv
import json
import math
import os
import pathlib
import shlex
import shutil
import sys

import pytest
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

import commands
from conftest import ROOT, subprocess_env
from zoo.loop import NonFiniteLoss, TrialPruned
from zoo.sweeps import jobs as sweep_jobs
from zoo.sweeps import report as sweep_report
from zoo.sweeps.summary_callback import SweepSummary


def write_job(root, name: str, overrides: list, results=None, failure=None, metric="test/accuracy",
              direction="maximize") -> None:
    hydra_dir = root / name / ".hydra"
    hydra_dir.mkdir(parents=True)
    (hydra_dir / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (hydra_dir / "config.yaml").write_text(f"optimized_metric: {metric}\n")
    (hydra_dir / "hydra.yaml").write_text(f"hydra:\n  sweeper:\n    direction: {direction}\n")
    if results is not None:  # json writes NaN as NaN, as train() would for a diverged objective
        (root / name / "results.json").write_text(json.dumps(results))
    if failure is not None:
        (root / name / "failure.json").write_text(json.dumps(failure))


def completed(objective: float) -> dict:
    return {"objective": objective, "steps": 6, "wall_time_s": 1.0, "test": {"accuracy": objective, "count": 359}}


def test_the_report_runs_by_its_path_from_any_directory(tmp_path):
    """`python -m zoo.sweeps.report DIR` finds zoo only from the repository root (elsewhere: 'No module named
    zoo'); its usage names the command that runs from anywhere, the script's path, and that one works."""
    write_job(tmp_path / "sweep", "0", ["seed=0"], results=completed(0.9))
    script = ROOT / "zoo" / "sweeps" / "report.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # zoo is not installed: only its checkout
    usage = commands.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert usage.returncode == 0 and "python <repo>/zoo/sweeps/report.py MULTIRUN_DIR" in usage.stdout, usage.stderr
    done = commands.run([sys.executable, str(script), "sweep"], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == f"1 job; summary written to {tmp_path / 'sweep' / 'summary.md'}"
    assert (tmp_path / "sweep" / "summary.csv").is_file()


def test_a_sweep_whose_jobs_all_failed_names_no_best_and_does_not_wait_for_one(tmp_path):
    """It said 'Best: none (no job completed yet).' after a sweep had ended with every job failed."""
    write_job(tmp_path, "0", ["model.dropout=0.1"], failure={"error": "NonFiniteLoss", "reason": "loss is nan"})
    sweep_report.write_summary(str(tmp_path), plot=False)
    assert "Best: none, as no job has completed." in (tmp_path / "summary.md").read_text().splitlines()


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


@pytest.mark.parametrize("edit", [{"test": [1, 2]}, {"privacy": "x"}, {"wall_time_s": "fast", "steps": "six"},
                                  {"objective": [0.95]}, {"test": {"accuracy": "high", "count": 359}}],
                         ids=["split-not-a-mapping", "privacy-not-a-mapping", "not-numbers", "objective-a-list",
                              "metric-not-a-number"])
def test_a_results_json_of_another_shape_is_read_as_far_as_it_goes(tmp_path, edit):
    """A field of another type, in a results.json edited by hand, ended the report (and the summary after each job)
    in an AttributeError or TypeError: it is read as missing, and an objective of the wrong kind fails the job."""
    write_job(tmp_path, "0", ["seed=0"], results={**completed(0.95), **edit})
    write_job(tmp_path, "1", ["seed=1"], results=completed(0.8))
    write_job(tmp_path, "2", ["seed=2"], failure={"status": "pruned", "error": "TrialPruned", "reason": "x"})
    (tmp_path / "2" / "metrics.jsonl").write_text('[1]\n{"split": "test", "accuracy": 0.1}\n')  # no record, no step
    summary = sweep_report.write_summary(str(tmp_path))
    rows = {r["job"]: r for r in summary["rows"]}
    if "objective" in edit:
        assert rows["0"]["status"] == "failed" and rows["0"]["reason"] == "objective is [0.95]"
        assert summary["best"]["job"] == "1"
    else:
        assert rows["0"]["status"] == "completed" and summary["best"]["job"] == "0"
        assert all(isinstance(v, (int, float)) for v in rows["0"]["metrics"].values())
        assert rows["0"]["wall_time_s"] in (1.0, None) and rows["0"]["steps"] in (6, None)
    assert rows["2"]["status"] == "pruned" and rows["2"]["metrics"] == {}
    assert (tmp_path / "summary.md").is_file()

def test_a_dp_sweeps_summary_shows_the_epsilon_each_job_spent(tmp_path):
    """DP-SGD trials trade accuracy for privacy: the table shows each one's epsilon (results.json's privacy
    record) beside its metrics; a job without privacy, or whose epsilon is infinite (no noise), shows none."""
    private = {**completed(0.8), "privacy": {"epsilon": 2.998, "delta": 1e-5}}
    write_job(tmp_path, "0", ["privacy.target_epsilon=3"], results=private)
    write_job(tmp_path, "1", ["privacy.target_epsilon=8"], results={**completed(0.9), "privacy": {"epsilon": 7.75}})
    write_job(tmp_path, "2", ["privacy.noise_multiplier=0"], results={**completed(0.95), "privacy": {"epsilon": None}})
    write_job(tmp_path, "3", ["privacy=none"], results=completed(0.97))
    sweep_report.write_summary(str(tmp_path), plot=False)
    with open(tmp_path / "summary.csv") as f:
        rows = {r["job"]: r for r in csv.DictReader(f)}
    assert [rows[j]["epsilon"] for j in "0123"] == ["2.998", "7.75", "", ""]
    header = (tmp_path / "summary.md").read_text().split("| rank |", 1)[1].splitlines()[0]
    assert "| epsilon |" in header


def job_config(root, name: str):
    return OmegaConf.create({"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(root)},
                                       "runtime": {"output_dir": str(root / name)}}})


def job_end(callback, root, name: str, error=None) -> None:
    """What Hydra's launcher calls after job `name` of the sweep in `root` returned (or raised `error`)."""
    status = JobStatus.COMPLETED if error is None else JobStatus.FAILED
    callback.on_job_end(job_config(root, name), JobReturn(overrides=[], status=status, _return_value=error))


@pytest.mark.parametrize("validation_fraction, split", [(0.1, "validation"), (0.0, "test")])
def test_without_optimized_metric_a_sweep_selects_on_validation_when_carved(tmp_path, validation_fraction, split):
    """The run's objective and the summary's ranking both use the validation split when there is one: the best
    by validation (job 0) is not the best by test (job 1), and the summary ranks job 0 first."""
    from zoo.outputs import objective_of
    from zoo.tasks import TASKS

    cfg = OmegaConf.create({"optimized_metric": None, "dataset": {"task": "classification",
                                                                   "validation_fraction": validation_fraction}})
    scores = {"0": (0.95, 0.90), "1": (0.90, 0.97)}  # (validation, test) accuracy
    for job, (val, test) in scores.items():
        results = {"steps": 6, "wall_time_s": 1.0, "test": {"accuracy": test, "count": 359}}
        if validation_fraction:
            results["validation"] = {"accuracy": val, "count": 144}
        results["objective"] = objective_of(cfg, results, TASKS["classification"])
        assert results["objective"] == (val if validation_fraction else test)
        write_job(tmp_path, job, [f"seed={job}"], results=results, metric="null")
        (tmp_path / job / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    summary = sweep_report.write_summary(str(tmp_path))
    assert summary["objective"] == f"{split}/accuracy"
    assert summary["best"]["job"] == ("0" if validation_fraction else "1")
    assert f"Objective: `{split}/accuracy` (maximize)" in (tmp_path / "summary.md").read_text()


def test_a_job_run_again_in_its_directory_is_summarised_by_how_it_ends_now(tmp_path):
    callback = SweepSummary()
    write_job(tmp_path, "0", ["seed=0"], results=completed(0.5))
    write_job(tmp_path, "1", ["seed=1"], failure={"status": "failed", "error": "Preempted", "reason": "stopped"})
    job_end(callback, tmp_path, "0")  # a resumed sweep: job 1's stop is still on disk when job 0 ends
    assert "| 1 | stopped |" in (tmp_path / "summary.md").read_text()
    callback.on_job_start(job_config(tmp_path, "1"))
    (tmp_path / "1" / "results.json").write_text(json.dumps(completed(0.9)))  # it continues and completes
    job_end(callback, tmp_path, "1")
    assert "| 1 | 1 | completed |" in (tmp_path / "summary.md").read_text()


def test_jobs_of_one_sweep_that_optimised_different_objectives_are_not_ranked_together(tmp_path, caplog):
    """`dataset=diabetes,digits`: ranked on the first job's test/loss, digits' accuracy 0.16 stood as the best
    loss; the summary written after the first job alone would stand for the whole sweep."""
    callback = SweepSummary()
    write_job(tmp_path, "0", ["dataset=diabetes"], results=completed(2.5), metric="test/loss", direction="minimize")
    job_end(callback, tmp_path, "0")
    assert (tmp_path / "summary.md").exists()
    write_job(tmp_path, "1", ["dataset=digits"], results=completed(0.16))
    job_end(callback, tmp_path, "1")
    callback.on_multirun_end(job_config(tmp_path, "1"))
    assert not any((tmp_path / f"summary.{ext}").exists() for ext in ("csv", "md", "png"))
    assert (f"no sweep summary: the jobs under {tmp_path} optimised different objectives, test/loss "
            f"({tmp_path}/0) and test/accuracy ({tmp_path}/1); run the sweep again in a new hydra.sweep.dir with "
            "optimized_metric set") in caplog.text


@pytest.mark.parametrize("record", ["config.yaml", "hydra.yaml", "overrides.yaml"])
def test_a_job_record_that_does_not_read_is_named_in_one_sentence(tmp_path, capsys, record):
    """`python -m zoo.sweeps.report` on a sweep with a damaged .hydra/ file was a YAML traceback."""
    write_job(tmp_path, "0", ["seed=0"], results=completed(0.9))
    write_job(tmp_path, "1", ["seed=1"], results=completed(0.8))
    (tmp_path / "0" / ".hydra" / record).write_text("a: [\n")
    assert sweep_report.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path}/0/.hydra/{record} cannot be read (ParserError: while "
                                       "parsing a flow node); repair it, or move that job's directory out of the "
                                       "sweep.\n")


@pytest.mark.parametrize("where", ["optimized_metric", "a name among several", "through a reference",
                                   "hydra.yaml's direction"])
def test_a_job_record_calling_a_resolver_is_refused_and_nothing_it_reads_is_shown(tmp_path, capsys, monkeypatch,
                                                                                   where):
    """A run saves what it ran with; `${oc.env:...}` in a sweep's job files was resolved by the report, which
    printed and wrote the environment of whoever made the summary (the objective's name)."""
    monkeypatch.setenv("ZOO_TEST_SECRET", "hunter2")
    write_job(tmp_path, "0", ["seed=0"], results=completed(0.9))
    write_job(tmp_path, "1", ["seed=1"], results=completed(0.8))
    secret = "${oc.env:ZOO_TEST_SECRET}"
    record, key, text = {
        "optimized_metric": ("config.yaml", "optimized_metric", f"optimized_metric: {secret}\n"),
        "a name among several": ("config.yaml", "optimized_metric",
                                 f"optimized_metric: [test/accuracy, '{secret}']\n"),
        "through a reference": ("config.yaml", "optimized_metric",
                                f"optimized_metric: test/${{other}}\nother: '{secret}'\n"),
        "hydra.yaml's direction": ("hydra.yaml", "hydra.sweeper.direction",
                                   f"hydra:\n  sweeper:\n    direction: {secret}\n"),
    }[where]
    (tmp_path / "0" / ".hydra" / record).write_text(text)
    assert sweep_report.main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert err == (f"error: {tmp_path}/0/.hydra/{record} cannot be read (ValueError: {key} reads {secret!r}, an "
                   "interpolation that calls a resolver, which the report does not run); repair it, or move that "
                   "job's directory out of the sweep.\n")
    assert "hunter2" not in out + err and not list(tmp_path.glob("summary.*"))


@pytest.mark.parametrize("text", [
    "optimized_metric: ${chosen}\nchosen: ${dataset.objective}\ndataset:\n  objective: test/accuracy\n",
    "optimized_metric: test/${dataset.metric}\ndataset:\n  metric: accuracy\n",  # text around a reference
    "dataset:\n  metric: accuracy\n  objective: test/${.metric}\noptimized_metric: ${dataset.objective}\n",
    "optimized_metric: ${metrics.1}\nmetrics: [test/loss, test/accuracy]\n",
    "optimized_metric: test/accuracy\npaths:\n  data_dir: ${oc.env:HOME}/data\n",  # a resolver it does not read
])
def test_a_job_record_referring_to_other_keys_reads_as_omegaconf_reads_it(tmp_path, text):
    write_job(tmp_path, "0", ["seed=0", "paths.data_dir=${oc.env:HOME}/data"], results=completed(0.9))
    (tmp_path / "0" / ".hydra" / "config.yaml").write_text(text)
    expected = OmegaConf.load(tmp_path / "0" / ".hydra" / "config.yaml").optimized_metric
    assert sweep_report.recorded_objective(str(tmp_path / "0")) == expected == "test/accuracy"
    row = sweep_jobs.read_job(str(tmp_path / "0"), str(tmp_path))  # overrides as the command gave them
    assert row["overrides"] == ["seed=0", "paths.data_dir=${oc.env:HOME}/data"]


def test_a_job_record_referring_to_a_key_it_lacks_is_named_not_read_as_the_default(tmp_path):
    """The reference was read as null, and so the job as optimising the task's default metric."""
    write_job(tmp_path, "0", ["seed=0"], results=completed(0.9))
    (tmp_path / "0" / ".hydra" / "config.yaml").write_text("optimized_metric: ${nope}\n")
    with pytest.raises(sweep_jobs.DamagedJob, match=r"config\.yaml cannot be read \(InterpolationKeyError: "
                                                    r"Interpolation key 'nope' not found"):
        sweep_report.recorded_objective(str(tmp_path / "0"))


def test_a_grid_stopped_after_its_first_job_shows_what_it_swept_and_how_many_jobs_it_asked_for(tmp_path):
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    _target_: hydra._internal.core_plugins.basic_sweeper.BasicSweeper\n"
        "  overrides:\n    task: ['optimizer.learning_rate=0.001,0.003', 'seed=range(0,2)', 'trainer.epochs=10']\n")
    write_job(tmp_path, "0", ["optimizer.learning_rate=0.001", "seed=0", "trainer.epochs=10"], results=completed(0.5))
    summary = sweep_report.write_summary(str(tmp_path))
    assert summary["params"] == ["optimizer.learning_rate", "seed"]  # swept, though one job shows one value each
    markdown = (tmp_path / "summary.md").read_text()
    assert "Jobs: 1 of the 4 the sweep asked for (1 completed)." in markdown
    assert "Fixed overrides: `trainer.epochs=10`." in markdown
    assert "| rank | job | status | objective | optimizer.learning_rate | seed |" in markdown
    (tmp_path / "multirun.yaml").write_text(  # the sweeper's own params sweep too; none at all: no count
        "hydra:\n  sweeper:\n    _target_: hydra._internal.core_plugins.basic_sweeper.BasicSweeper\n"
        "    params:\n      optimizer: adam,sgd\n  overrides:\n    task: ['seed=0,1']\n")
    assert sweep_report.sweep_plan(str(tmp_path))[::2] == ({"optimizer", "seed"}, 4)
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    _target_: hydra._internal.core_plugins.basic_sweeper.BasicSweeper\n"
        "  overrides:\n    task: ['trainer.epochs=10']\n")
    assert sweep_report.sweep_plan(str(tmp_path)) == (set(), set(), None)


def test_the_plot_axes_follow_the_search_space(tmp_path, monkeypatch):
    """A dropout drawn from interval(0.0, 0.5) stays on a linear axis although its values span 20x; a learning
    rate drawn from a log interval gets a log axis."""
    from test_optuna_sweeper import RecordingLauncher, make_sweep

    from zoo.sweeps import plots

    params = {"model.dropout": "interval(0.0, 0.5)", "optimizer.learning_rate": "tag(log, interval(1e-4, 1e-2))",
              "trainer.batch_size": "choice(16, 32)"}
    sweep = make_sweep(tmp_path / "study", RecordingLauncher(), params=params, n_trials=1)
    sweep.config.hydra.overrides, sweep.config.hydra.sweeper = {"task": []}, {"params": params}  # as Hydra composes
    sweep.sweep([])  # writes the sweep's multirun.yaml, as Hydra's basic sweeper does
    shutil.copy(tmp_path / "study" / "multirun.yaml", tmp_path / "multirun.yaml")
    for i, (dropout, lr) in enumerate([(0.02, 1e-4), (0.45, 1e-2)]):
        write_job(tmp_path, str(i), [f"model.dropout={dropout}", f"optimizer.learning_rate={lr}"],
                  results=completed(0.5 + i / 10))
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    plots.write_plot(sweep_report.collect(str(tmp_path)), str(tmp_path / "summary.png"))
    scales = {ax.get_xlabel(): ax.get_xscale() for ax in figures[0].axes if ax.get_visible()}
    assert scales == {"model.dropout": "linear", "optimizer.learning_rate": "log"}


def test_a_job_a_stop_signal_saved_is_stopped_not_failed(tmp_path):
    """A rerun of the sweep resumes it: the summary says so, and ranks it after the pruned, before the failed."""
    write_job(tmp_path, "0", ["seed=0"], failure={"status": "failed", "error": "NonFiniteLoss", "reason": "nan"})
    write_job(tmp_path, "1", ["seed=1"], failure={"status": "failed", "error": "Preempted", "reason": "stopped"})
    write_job(tmp_path, "2", ["seed=2"], results=completed(0.5))
    summary = sweep_report.write_summary(str(tmp_path))
    assert [(r["job"], r["status"]) for r in summary["rows"]] == [("2", "completed"), ("1", "stopped"),
                                                                  ("0", "failed")]
    assert "Jobs: 3 (1 completed, 1 stopped, 1 failed)." in (tmp_path / "summary.md").read_text()


def test_a_stopped_jobs_row_shows_the_step_its_checkpoint_was_saved_at(tmp_path):
    """Its failure.json keeps the step the signal stopped it at: the summary's steps cell shows it (it was empty)."""
    from zoo.preemption import Preempted

    write_job(tmp_path, "0", ["seed=0"])
    job_end(SweepSummary(), tmp_path, "0", Preempted(120, 15, str(tmp_path / "0"), str(tmp_path)))
    assert json.loads((tmp_path / "0" / "failure.json").read_text())["step"] == 120
    [row] = sweep_report.collect(str(tmp_path))["rows"]
    assert (row["status"], row["steps"]) == ("stopped", 120)
    assert "| 1 | 0 | stopped |  | 120 |" in (tmp_path / "summary.md").read_text()


def test_the_table_follows_every_job_and_the_plot_comes_at_the_end_or_on_a_failure(tmp_path):
    callback = SweepSummary()
    for i, lr in enumerate((0.1, 0.2)):
        write_job(tmp_path, str(i), [f"optimizer.learning_rate={lr}"], results=completed(0.5 + i / 10))
        job_end(callback, tmp_path, str(i))
        assert len(sweep_report.collect(str(tmp_path))["rows"]) == i + 1
        assert f"| 1 | {i} | completed |" in (tmp_path / "summary.md").read_text()  # the newest job is the best
    write_job(tmp_path, "p", ["optimizer.learning_rate=1e-9"])
    job_end(callback, tmp_path, "p", TrialPruned("pruned at step 10"))  # routine: the sweep still ends normally
    assert json.loads((tmp_path / "p" / "failure.json").read_text())["status"] == "pruned"
    assert not (tmp_path / "summary.png").exists()  # matplotlib waits for the end
    callback.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert (tmp_path / "summary.png").stat().st_size > 0

    (tmp_path / "summary.png").unlink()  # Hydra's basic sweeper skips on_multirun_end after a failed job
    write_job(tmp_path, "2", ["optimizer.learning_rate=1e30"])
    job_end(callback, tmp_path, "2", NonFiniteLoss("training loss became non-finite"))
    assert json.loads((tmp_path / "2" / "failure.json").read_text())["error"] == "NonFiniteLoss"
    assert (tmp_path / "summary.png").stat().st_size > 0
    (tmp_path / "summary.png").unlink()  # and every later job keeps it current
    write_job(tmp_path, "3", ["optimizer.learning_rate=0.3"], results=completed(0.9))
    job_end(callback, tmp_path, "3")
    assert (tmp_path / "summary.png").stat().st_size > 0
    assert "| 1 | 3 | completed |" in (tmp_path / "summary.md").read_text()


def test_a_summary_kept_up_after_each_job_equals_one_built_at_the_end_and_reads_each_job_once(tmp_path,
                                                                                              monkeypatch):
    reads = []

    def counted_read_job(job_dir, root):
        reads.append(pathlib.Path(job_dir).name)
        return sweep_jobs.read_job(job_dir, root)

    monkeypatch.setattr(sweep_report, "read_job", counted_read_job)
    known = {}
    plan = [("0", completed(0.5), None), ("1", None, {"status": "pruned", "error": "TrialPruned", "reason": "x"}),
            ("2", completed(math.nan), None), ("3", None, None), ("4", completed(0.7), None)]
    for name, results, failure in plan:
        write_job(tmp_path, name, [f"model.dropout=0.{name}"], results=results, failure=failure)
        sweep_report.write_summary(str(tmp_path), plot=False, known=known)
    (tmp_path / "3" / "results.json").write_text(json.dumps(completed(0.6)))  # job 3 finishes last
    sweep_report.write_summary(str(tmp_path), plot=False, known=known)
    incremental = (tmp_path / "summary.csv").read_text()
    assert "3,completed" in incremental
    assert sorted(reads) == ["0", "1", "2", "3", "3", "3", "4"]  # only job 3 is read again, until it finished
    reads.clear()
    sweep_report.write_summary(str(tmp_path), plot=False)
    assert (tmp_path / "summary.csv").read_text() == incremental and len(reads) == len(plan)


def test_a_multi_objective_summary_shows_every_objective_each_time_it_is_written(tmp_path):
    known = {}
    for name, accuracy, wall in (("0", 0.9, 2.0), ("1", 0.8, 1.0)):
        write_job(tmp_path, name, [f"model.dropout=0.{name}"], metric="[validation/accuracy,wall_time_s]",
                  direction="[maximize,minimize]",
                  results={"objective": [accuracy, wall], "steps": 6, "wall_time_s": wall, "validation": {}})
        for _ in range(2):
            sweep_report.write_summary(str(tmp_path), plot=False, known=known)
    with open(tmp_path / "summary.csv") as f:
        rows = {r["job"]: r for r in csv.DictReader(f)}
    assert [(rows[j]["objective_1"], rows[j]["objective_2"], rows[j]["pareto"]) for j in "01"] == [
        ("0.9", "2.0", "yes"), ("0.8", "1.0", "yes")]
    markdown = (tmp_path / "summary.md").read_text()
    assert "| 0 | completed | 0.9 | 2 | yes |" in markdown and "| 1 | completed | 0.8 | 1 | yes |" in markdown


def test_digits_cnn_search_runs_with_a_tiny_budget(data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "train.py", "-m", "hparams_search=digits_cnn", "debug=smoke", "hydra.sweeper.n_trials=2",
           f"hydra.sweep.dir={sweep}"]
    proc = commands.run(cmd, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=600,
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


def test_a_summary_that_could_not_be_written_names_the_command_that_rebuilds_it_from_any_directory(tmp_path,
                                                                                                 monkeypatch, caplog):
    """The warning said `python -m zoo.sweeps.report`, without the sweep dir, which finds zoo only from the
    repository root: the command it names now runs as given, from anywhere."""
    from zoo.sweeps import summary_callback

    write_job(tmp_path / "sweep", "0", ["seed=0"], results=completed(0.9))
    monkeypatch.setattr(sweep_report, "write_summary", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with caplog.at_level("WARNING"):
        assert summary_callback._summarise(str(tmp_path / "sweep"), False, {}) is None
    command = caplog.records[-1].getMessage().partition("rebuild it with `")[2].partition("`")[0]
    assert command == f"python {ROOT / 'zoo' / 'sweeps' / 'report.py'} {tmp_path / 'sweep'}"
    monkeypatch.undo()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = commands.run([sys.executable, *shlex.split(command)[1:]], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=120)
    assert done.returncode == 0 and (tmp_path / "sweep" / "summary.md").is_file(), done.stderr[-2000:]


@pytest.mark.parametrize("obstacle", ["summary.md", "summary.csv"])
def test_a_summary_that_cannot_be_written_is_one_sentence_naming_the_file(tmp_path, capsys, obstacle):
    """A directory in the way of a summary file (or a sweep dir the user cannot write, someone else's) ended the
    report in an IsADirectoryError (PermissionError) traceback."""
    write_job(tmp_path, "0", ["seed=0"], results=completed(0.9))
    (tmp_path / obstacle).mkdir()
    assert sweep_report.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: the summary cannot be written in {tmp_path} (Is a directory: {tmp_path / obstacle}); move that "
        "directory out of the way.\n")
    assert (tmp_path / obstacle).is_dir() and not list(tmp_path.glob("*.tmp"))


def test_the_pareto_fronts_line_gives_each_members_test_metrics_and_run_directory(tmp_path):
    """The line printed at the end of a multi-objective sweep gave each member's objectives and overrides only: the
    test metrics of a front chosen on validation, which the one-objective line reports, were missing, and so was
    where each member's run lies."""
    for name, accuracy, seconds in (("0", 0.9, 2.0), ("1", 0.8, 1.0), ("2", 0.7, 3.0)):
        results = {**completed(accuracy), "objective": [accuracy, seconds], "wall_time_s": seconds,
                   "validation": {"accuracy": accuracy, "count": 144}, "test": {"accuracy": accuracy - 0.05}}
        write_job(tmp_path, name, [f"seed={name}"], results=results,
                  metric="[validation/accuracy, wall_time_s]", direction="[maximize, minimize]")
    s = sweep_report.write_summary(str(tmp_path), plot=False)
    assert sweep_report.best_text(s) == (
        f"Pareto front (2 jobs): job 0: validation/accuracy=0.9, wall_time_s=2 (test/accuracy=0.85) with `seed=0`, "
        f"run directory {tmp_path / '0'}; job 1: validation/accuracy=0.8, wall_time_s=1 (test/accuracy=0.75) with "
        f"`seed=1`, run directory {tmp_path / '1'}")


RECORD_EDGES = """\
rate: 1e-3
small: 1.0e-05
whole: 3.
big: 1_000.5
infinite: -.inf
undefined: .nan
when: 2001-12-14
yes_word: yes
null_word: ~
octal: 0o17
text: '1e-3'
missing: ???
path: !!python/object/apply:pathlib.PosixPath [/tmp, x]
nested: {a: [1, 2.5e+3, {b: null}], c: '${rate}'}
"""


@pytest.mark.parametrize("text", [RECORD_EDGES, "- seed=0\n- optimizer.learning_rate=1e-3\n", ""])
def test_a_job_record_reads_as_omegaconf_reads_it(tmp_path, text):
    """A summary parses each job's .hydra/ files with libyaml under OmegaConf's rules (its float forms, no
    timestamps, pathlib paths): the same config as OmegaConf.load."""
    path = tmp_path / "record.yaml"
    path.write_text(text)
    expected, got = OmegaConf.load(path), sweep_jobs.load_config(str(path))
    assert type(got) is type(expected)
    assert OmegaConf.to_yaml(got) == OmegaConf.to_yaml(expected)
    assert repr(OmegaConf.to_container(got)) == repr(OmegaConf.to_container(expected))  # 1e-3 a float in both


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "a: {b: 1, b: 2}\n"])
def test_a_job_record_with_a_duplicate_key_is_refused_as_omegaconf_refuses_it(tmp_path, text):
    path = tmp_path / "record.yaml"
    path.write_text(text)
    with pytest.raises(Exception, match="found duplicate key") as omegaconfs:
        OmegaConf.load(path)
    with pytest.raises(omegaconfs.type, match="found duplicate key"):
        sweep_jobs.load_config(str(path))


@pytest.mark.parametrize("config, objective", [
    ("optimized_metric: null\ndataset:\n  task: regression\n  validation_fraction: 0.1\n", "validation/loss"),
    ("optimized_metric: null\ndataset:\n  task: regression\n  validation_fraction: 0.0\n", "test/loss"),
    ("optimized_metric: [validation/accuracy, wall_time_s]\n", "['validation/accuracy', 'wall_time_s']"),
    # an interpolation beside the keys read leaves them as they are
    ("optimized_metric: null\nx: diabetes\ndataset:\n  name: ${x}\n  task: regression\n  validation_fraction: 0.1\n",
     "validation/loss"),
    # an interpolation may name any key of the config: then the whole config is made
    ("optimized_metric: ${aim}\naim: test/r2\n", "test/r2"),
    ("optimized_metric: null\nkind: regression\ndataset:\n  task: ${kind}\n", "test/loss"),
    ("optimized_metric: null\nsplits: {task: regression, validation_fraction: 0.2}\ndataset: ${splits}\n",
     "validation/loss"),
])
def test_a_jobs_objective_is_read_from_the_keys_it_depends_on(tmp_path, config, objective):
    write_job(tmp_path, "0", ["seed=0"], results=completed(0.5))
    (tmp_path / "0" / ".hydra" / "config.yaml").write_text(config)
    whole = sweep_report.objective_name(OmegaConf.load(tmp_path / "0" / ".hydra" / "config.yaml"))
    assert str(sweep_report.recorded_objective(str(tmp_path / "0"))) == str(whole) == objective
