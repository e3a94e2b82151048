"""The Optuna sweeper in process, with a launcher that records its calls and scores overrides without training.

Contracts: `n_jobs` trials go to the launcher in one call; a grid covers exactly the basic sweeper's grid and
finds the same best; a seeded sampler repeats itself; failures are recorded with their reason and the study
goes on; a stored study continues with `n_trials` new trials, after the trials a stopped sweep left running;
bad settings are one sentence.
"""
import json
import re

import optuna
import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from conftest import CONF
from zoo.errors import RunRefused, UserError
from zoo.loop import TrialPruned
from zoo.sweeps import jobs as sweep_jobs
from zoo.sweeps import trial_link
from zoo.sweeps.config import GridSamplerConfig, MedianPrunerConfig, TPESamplerConfig
from zoo.sweeps import optuna_sweeper
from zoo.sweeps.optuna_sweeper import OptunaSweep, objective_directions
from zoo.tasks import TASKS

PARAMS = {"optimizer.learning_rate": "tag(log, interval(1e-4, 1e-1))", "trainer.batch_size": "choice(16, 32, 64)",
          "model.hidden": "choice([64], [128, 128])"}


def score(params: dict) -> float:
    """A deterministic objective of the overrides: best near lr=1e-2, batch 32."""
    return -abs(float(params["optimizer.learning_rate"]) - 1e-2) - abs(int(params["trainer.batch_size"]) - 32) / 100


class RecordingLauncher:
    def __init__(self, objective=score):
        self.calls, self.objective = [], objective

    def launch(self, job_overrides, initial_job_idx):
        self.calls.append((initial_job_idx, [list(o) for o in job_overrides]))
        returns = []
        for overrides in job_overrides:
            assert overrides[-1].startswith(f"++hydra.job.env_set.{trial_link.TRIAL_KEY}=")
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            try:
                ret.return_value = self.objective(dict(o.split("=", 1) for o in overrides[:-1]))
            except Exception as e:  # what Hydra's run_job does with a task's exception
                ret.return_value, ret.status = e, JobStatus.FAILED
            returns.append(ret)
        return returns


def make_sweep(tmp_path, launcher, sampler=None, params=PARAMS, **settings):
    kwargs = dict(sampler=OmegaConf.structured(sampler or TPESamplerConfig(seed=0)), direction="maximize",
                  directions=None, storage=None, study_name="test", n_trials=6, n_jobs=1, max_failure_rate=0.0,
                  params=OmegaConf.create(params), pruner=None)
    sweep = OptunaSweep(**{**kwargs, **settings})
    sweep.config, sweep.launcher = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}), launcher
    return sweep


def trial_params(launcher) -> list:
    return [tuple(o[:-1]) for _, batch in launcher.calls for o in batch]


def test_n_jobs_trials_go_to_the_launcher_in_one_call(tmp_path):
    launcher = RecordingLauncher()
    study = make_sweep(tmp_path, launcher, n_trials=10, n_jobs=4).sweep([])
    assert [(idx, len(batch)) for idx, batch in launcher.calls] == [(0, 4), (4, 4), (8, 2)]
    assert [t.number for t in study.trials] == list(range(10))
    numbers = [int(o[-1].rpartition("=")[2]) for _, batch in launcher.calls for o in batch]
    assert numbers == list(range(10))  # each job carries its own trial's number, for pruning reports


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # the sampler's own: not ours to act on
def test_brute_force_over_discrete_values_runs_each_combination_once(tmp_path):
    space = {"optimizer.learning_rate": "choice(0.001, 0.01)", "trainer.batch_size": "range(16, 48, 16)"}
    launcher = RecordingLauncher()
    make_sweep(tmp_path, launcher, sampler={"_target_": "optuna.samplers.BruteForceSampler", "seed": 0},
               params=space, n_trials=4).sweep([])
    assert sorted(trial_params(launcher)) == [(f"optimizer.learning_rate={lr}", f"trainer.batch_size={bs}")
                                              for lr in ("0.001", "0.01") for bs in (16, 32)]


def test_grid_covers_the_basic_sweepers_grid_and_finds_the_same_best(tmp_path):
    grid = {"optimizer.learning_rate": "choice(0.001, 0.01)", "trainer.batch_size": "choice(16, 32)"}
    launcher = RecordingLauncher()
    study = make_sweep(tmp_path, launcher, sampler=GridSamplerConfig(seed=0), params=grid, n_trials=50).sweep([])
    basic = BasicSweeper.split_arguments(
        OverridesParser.create().parse_overrides(["optimizer.learning_rate=0.001,0.01", "trainer.batch_size=16,32"]),
        None)
    basic_trials = [tuple(o) for batch in basic for o in batch]
    assert len(launcher.calls) == 4  # n_trials is capped at the grid's size
    assert sorted(trial_params(launcher)) == sorted(basic_trials)
    basic_best = max(score(dict(o.split("=", 1) for o in t)) for t in basic_trials)
    assert study.best_value == basic_best
    assert OmegaConf.load(tmp_path / "optimization_results.yaml").best_value == basic_best


def test_a_grid_run_in_full_says_so_and_leaves_the_sweeps_files_as_they_were(tmp_path, caplog):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    grid = {"optimizer.learning_rate": "choice(0.001, 0.01)", "trainer.batch_size": "choice(16, 32)"}
    make_sweep(tmp_path, RecordingLauncher(), sampler=GridSamplerConfig(seed=0), params=grid, storage=storage,
               n_trials=10).sweep([])
    (tmp_path / "summary.md").write_text("the first command's summary")
    (tmp_path / "multirun.yaml").write_text("the first command's plan")
    launcher = RecordingLauncher()
    with caplog.at_level("INFO", logger="zoo"):  # the same grid with another fixed value: nothing runs under it
        study = make_sweep(tmp_path, launcher, sampler=GridSamplerConfig(seed=0), params=grid, storage=storage,
                           n_trials=10).sweep(["trainer.epochs=5"])
    assert launcher.calls == [] and len(study.trials) == 4
    assert (f"Study test in {storage}: every point of its grid (4) has run already, so this command runs none; its "
            f"summary: {tmp_path / 'summary.md'}") in caplog.text
    assert "0 trials to run" not in caplog.text
    assert (tmp_path / "multirun.yaml").read_text() == "the first command's plan"
    assert (tmp_path / "summary.md").read_text() == "the first command's summary"


def test_a_grid_walks_a_float_range_as_hydras_range_yields_it(tmp_path):
    launcher = RecordingLauncher(objective=lambda params: float(params["model.dropout"]))
    grid = {"model.dropout": "range(0.0, 0.3, 0.1)", "trainer.batch_size": "choice(16, 32)"}
    make_sweep(tmp_path, launcher, sampler=GridSamplerConfig(seed=0), params=grid, n_trials=50).sweep([])
    basic = BasicSweeper.split_arguments(
        OverridesParser.create().parse_overrides(["model.dropout=range(0.0,0.3,0.1)", "trainer.batch_size=16,32"]),
        None)
    assert sorted(trial_params(launcher)) == sorted(tuple(o) for batch in basic for o in batch)  # 6 points


def test_a_seeded_tpe_sweep_repeats_itself_and_another_seed_differs(tmp_path):
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        launcher = RecordingLauncher()
        # n_startup_trials=2: the last trials come from TPE's model, not from its random start
        make_sweep(tmp_path, launcher, sampler=TPESamplerConfig(seed=seed, n_startup_trials=2), n_trials=5).sweep([])
        runs[name] = trial_params(launcher)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]


def test_command_line_sweeps_and_values_replace_the_presets(tmp_path):
    launcher = RecordingLauncher()
    make_sweep(tmp_path, launcher, n_trials=3).sweep(["trainer.batch_size=32", "seed=choice(5, 6)"])
    for overrides in trial_params(launcher):
        params = dict(o.split("=", 1) for o in overrides)
        assert params["trainer.batch_size"] == "32" and params["seed"] in ("5", "6")
        assert 1e-4 <= float(params["optimizer.learning_rate"]) <= 1e-1


def test_a_failed_trial_is_recorded_with_its_reason_and_the_study_goes_on(tmp_path):
    def objective(params):
        if params["trainer.batch_size"] == "64":
            raise FloatingPointError("loss diverged")
        return score(params)

    study = make_sweep(tmp_path, RecordingLauncher(objective), n_trials=8, max_failure_rate=1.0).sweep([])
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(study.trials) == 8 and failed
    assert all(t.params["trainer.batch_size"] == 64 for t in failed)
    assert {t.user_attrs["fail_reason"] for t in failed} == {"FloatingPointError: loss diverged"}



def test_a_sweep_whose_every_trial_failed_exits_with_the_first_ones_reason(tmp_path):
    """With max_failure_rate 1.0 (the presets') a failed trial does not stop the sweep; but a command whose every
    trial failed learnt nothing, and exiting 0 would tell a script it had: it ends in one sentence giving the first
    failure's reason (which names its setting), after running them all."""
    def objective(params):
        raise UserError("trainer.batch_size=32 does not split evenly across 3 devices; use 30 or 33.")

    launcher = RecordingLauncher(objective)
    with pytest.raises(UserError, match=r"^every one of the 3 trials this command ran failed \(trial 0: UserError: "
                                        r"trainer\.batch_size=32 does not split evenly across 3 devices; use 30 or "
                                        r"33\); the sweep summary lists each one's reason\.$"):
        make_sweep(tmp_path, launcher, n_trials=3, max_failure_rate=1.0).sweep([])
    assert len(launcher.calls) == 3  # all of them ran
    assert OmegaConf.load(tmp_path / "optimization_results.yaml").n_trials == 3

    calls = []

    def failed_then_pruned(params):  # a pruned trial ended as its pruner decided: not every trial failed
        calls.append(params)
        if len(calls) == 1:
            raise FloatingPointError("loss diverged")
        raise TrialPruned("pruned at step 100")

    study = make_sweep(tmp_path / "pruned", RecordingLauncher(failed_then_pruned), n_trials=3,
                       max_failure_rate=1.0).sweep([])
    assert [t.state.name for t in study.trials] == ["FAIL", "PRUNED", "PRUNED"]


def test_a_batch_failing_past_max_failure_rate_stops_the_sweep_in_one_sentence_naming_it(tmp_path):
    def objective(params):
        if params["trainer.batch_size"] == "64":
            raise FloatingPointError("loss diverged")
        return score(params)

    storage = f"sqlite:///{tmp_path}/optuna.db"
    grid = {"trainer.batch_size": "choice(16, 64)", "optimizer.learning_rate": "choice(0.01)"}
    launcher = RecordingLauncher(objective)
    with pytest.raises(UserError, match=r"^the sweep stopped: 1 of the 2 trials of its last batch failed, more than "
                                        r"hydra\.sweeper\.max_failure_rate=0\.4 allows \(trial (\d) failed: "
                                        r"FloatingPointError: loss diverged\); the best of the 1 trial\(s\) that "
                                        r"completed is in \S+/optimization_results\.yaml; raise "
                                        r"hydra\.sweeper\.max_failure_rate \(1\.0: never stop\) to go on past failed "
                                        r"trials\.$") as raised:
        make_sweep(tmp_path, launcher, sampler=GridSamplerConfig(seed=0), params=grid, storage=storage, n_trials=6,
                   n_jobs=2, max_failure_rate=0.4).sweep([])
    assert len(launcher.calls) == 1
    # as a sweep that ran its n_trials: the best so far, of the trials that completed
    assert f"is in {tmp_path / 'optimization_results.yaml'};" in str(raised.value)
    results = OmegaConf.load(tmp_path / "optimization_results.yaml")
    assert results.best_params == {"trainer.batch_size": 16, "optimizer.learning_rate": 0.01}
    assert results.best_value == score({"trainer.batch_size": "16", "optimizer.learning_rate": "0.01"})
    assert results.n_trials == 2
    study = optuna.load_study(study_name="test", storage=storage)
    failed = int(re.search(r"trial (\d) failed", str(raised.value)).group(1))
    assert study.trials[failed].state == optuna.trial.TrialState.FAIL
    assert study.trials[failed].params["trainer.batch_size"] == 64

    strict = make_sweep(tmp_path, RecordingLauncher(objective), n_trials=8, max_failure_rate=0.0)
    with pytest.raises(UserError, match=r"more than hydra.sweeper.max_failure_rate=0.0 allows \(trial 0 failed: "
                                        r"FloatingPointError: loss diverged\); raise") as raised:
        strict.sweep(["trainer.batch_size=64"])  # no trial completed: no best to point to
    assert isinstance(raised.value.__cause__, FloatingPointError)  # its traceback, for HYDRA_FULL_ERROR=1


def test_a_stored_study_continues_with_n_trials_new_trials(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    suggested = []
    for _ in range(2):
        launcher = RecordingLauncher()
        make_sweep(tmp_path, launcher, storage=storage, n_trials=3).sweep([])
        suggested.append(trial_params(launcher))
    study = optuna.load_study(study_name="test", storage=storage)
    assert [t.number for t in study.trials] == list(range(6))
    assert [first for first, _ in launcher.calls] == [3, 4, 5]  # new jobs, not the first run's directories
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert not set(suggested[0]) & set(suggested[1])  # the seeded sampler does not start over


def test_a_stored_study_seeded_near_the_largest_seed_continues(tmp_path):
    """The rerun's sampler is seeded with the seed plus the trials so far: past 2**32 - 1, the largest seed Optuna
    takes, a rerun of a command the first run had taken was refused (`could not build hydra.sweeper.sampler ...:
    Seed must be between 0 and 2**32 - 1`)."""
    storage = f"sqlite:///{tmp_path}/optuna.db"
    for _ in range(2):
        make_sweep(tmp_path, RecordingLauncher(), sampler=TPESamplerConfig(seed=2**32 - 1), storage=storage,
                   n_trials=2).sweep([])
    assert len(optuna.load_study(study_name="test", storage=storage).trials) == 4


def test_a_continued_study_suggests_the_same_trials_when_its_rerun_is_repeated(tmp_path):
    suggested = []
    for copy in ("a", "b"):
        storage = f"sqlite:///{tmp_path}/{copy}.db"
        make_sweep(tmp_path, RecordingLauncher(), storage=storage, n_trials=2).sweep([])
        launcher = RecordingLauncher()
        make_sweep(tmp_path, launcher, storage=storage, n_trials=2).sweep([])
        suggested.append(trial_params(launcher))
    assert suggested[0] == suggested[1]


class StoppedLauncher(RecordingLauncher):
    """Runs a batch's first job, then ends the sweep the way a stop signal does (the callback's sys.exit)."""

    def launch(self, job_overrides, initial_job_idx):
        self.asked = [list(o[:-1]) for o in job_overrides]
        super().launch(job_overrides[:1], initial_job_idx)
        raise SystemExit(143)


def save_job_dir(sweep_dir, name: str, trial_number: int, study_name: str, **files) -> None:
    """A sweep job's directory: the .hydra/ files run_job writes (what finding a trial's job reads) and `files`
    (results.json, failure.json: {name: record})."""
    hydra_dir = sweep_dir / name / ".hydra"
    hydra_dir.mkdir(parents=True)
    hydra = {"job": {"env_set": {trial_link.TRIAL_KEY: trial_number}}, "sweeper": {"study_name": study_name}}
    OmegaConf.save(OmegaConf.create({"hydra": hydra}), hydra_dir / "hydra.yaml")
    OmegaConf.save(OmegaConf.create([]), hydra_dir / "overrides.yaml")
    for file_name, record in files.items():
        (sweep_dir / name / f"{file_name}.json").write_text(json.dumps(record))


def stop_a_sweep(tmp_path, storage: str, n_jobs: int) -> list:
    """Ask a batch of n_jobs trials, then stop as a signal does; returns each trial's overrides."""
    stopped = StoppedLauncher()
    with pytest.raises(SystemExit):
        make_sweep(tmp_path, stopped, storage=storage, n_trials=n_jobs, n_jobs=n_jobs).sweep([])
    return stopped.asked


@pytest.fixture
def runs_jobs_here(monkeypatch):
    """The recording launcher stands for a launcher whose jobs end with the sweep's process (basic, population)."""
    monkeypatch.setattr(optuna_sweeper, "IN_PROCESS_LAUNCHERS", ("RecordingLauncher", "StoppedLauncher"))


STOPPED = {"status": "failed", "error": "Preempted", "reason": "stopped by SIGTERM at step 200", "step": 200}


def test_trials_a_stopped_sweep_left_running_are_settled_first(tmp_path, runs_jobs_here, caplog):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    asked = stop_a_sweep(tmp_path, storage, n_jobs=5)
    interrupted = "2026-12-01_12-00-00_lr=1e-3,0"  # characters an override must escape
    save_job_dir(tmp_path, interrupted, 0, "test", failure=STOPPED)
    save_job_dir(tmp_path, "other_1", 1, "another_study")  # trial 1 never started; this is not its directory
    save_job_dir(tmp_path, "done_2", 2, "test", results={"objective": 0.5})  # ended before the stop
    save_job_dir(tmp_path, "pruned_3", 3, "test", failure={"status": "pruned", "error": "TrialPruned",
                                                           "reason": "pruned at step 100"})
    save_job_dir(tmp_path, "it's_4", 4, "test")  # killed: nothing written; a quote in its name
    launcher = RecordingLauncher()
    with caplog.at_level("INFO", logger="zoo"):
        make_sweep(tmp_path, launcher, storage=storage, n_trials=2, n_jobs=2).sweep([])
    assert [(idx, len(batch)) for idx, batch in launcher.calls] == [(0, 2), (4, 1), (5, 2)]  # then 2 new trials
    assert ("Trial(s) 0, 1, 2, 3, 4 of study test were left unfinished by a stopped run: 2, 3 had ended and take "
            "what their files say; running 0, 1, 4 again") in caplog.text
    (first, second), (fifth,) = launcher.calls[0][1], launcher.calls[1][1]
    assert first[:-2] == asked[0] and second[:-1] == asked[1]  # their own parameters; 1 in a new directory
    for overrides, job_dir in ((first, interrupted), (fifth, "it's_4")):
        subdir = OverridesParser.create().parse_overrides([overrides[-2]])[0]
        assert (subdir.key_or_group, subdir.value()) == ("hydra.sweep.subdir", job_dir)
    study = optuna.load_study(study_name="test", storage=storage)
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "PRUNED", "COMPLETE", "COMPLETE", "COMPLETE"]
    assert [t.value for t in study.trials[:3]] == [score(dict(o.split("=", 1) for o in overrides))
                                                   for overrides in asked[:2]] + [0.5]
    assert study.trials[2].user_attrs["run_dir"] == str(tmp_path / "done_2")


def test_with_a_launcher_running_jobs_elsewhere_only_trials_that_saved_a_stop_run_again(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    asked = stop_a_sweep(tmp_path, storage, n_jobs=3)
    save_job_dir(tmp_path, "0", 0, "test", failure=STOPPED)
    save_job_dir(tmp_path, "1", 1, "test")  # its job may still be running on the cluster; 2 may be queued
    launcher = RecordingLauncher()
    make_sweep(tmp_path, launcher, storage=storage, n_trials=1).sweep([])
    assert [(idx, [o[:-2] for o in batch]) for idx, batch in launcher.calls[:1]] == [(0, [asked[0]])]
    assert [idx for idx, _ in launcher.calls] == [0, 3]
    states = [t.state.name for t in optuna.load_study(study_name="test", storage=storage).trials]
    assert states == ["COMPLETE", "RUNNING", "RUNNING", "COMPLETE"]


def test_with_resume_never_a_stopped_trial_fails_and_new_ones_follow(tmp_path, runs_jobs_here):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    stop_a_sweep(tmp_path, storage, n_jobs=1)
    save_job_dir(tmp_path, "0", 0, "test", failure=STOPPED)
    launcher = RecordingLauncher()
    sweep = make_sweep(tmp_path, launcher, storage=storage, n_trials=1)
    sweep.config = OmegaConf.merge(sweep.config, {"trainer": {"resume": "never"}})
    sweep.sweep([])
    assert [idx for idx, _ in launcher.calls] == [1]  # job 0's directory holds the stopped run: not touched
    trials = optuna.load_study(study_name="test", storage=storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    reason = "stopped before it finished; trainer.resume=never does not continue it"
    assert trials[0].user_attrs["fail_reason"] == reason
    # its directory says so too: the summary called it stopped, to be resumed by a rerun that never would
    row = sweep_jobs.read_job(str(tmp_path / "0"), str(tmp_path))
    assert (row["status"], row["reason"], row["steps"]) == ("failed", f"UserError: {reason} ({STOPPED['reason']})",
                                                            STOPPED["step"])  # and what the stop said


def test_a_stopped_trial_refused_under_other_settings_stays_stopped_for_the_sweeps_own_command(tmp_path,
                                                                                               runs_jobs_here):
    """Its job refuses the stopped run under the rerun's other fixed overrides and leaves it as it was, saying the
    sweep's own command goes on with it: the study told the trial FAIL, so that command never did."""
    storage = f"sqlite:///{tmp_path}/optuna.db"
    stop_a_sweep(tmp_path, storage, n_jobs=1)
    save_job_dir(tmp_path, "0", 0, "test", failure=STOPPED)
    refusal = RunRefused(f"hydra.run.dir={tmp_path}/0 holds this sweep job's run, stopped at step 200 and trained "
                         "with other settings: seed (0 -> 1); rerun the sweep's own command to go on with it, or "
                         "choose a new hydra.sweep.dir.")

    def refused(params):
        raise refusal

    with pytest.raises(UserError, match=r"max_failure_rate=0\.0 allows \(trial 0 stays stopped: RunRefused: hydra"
                                        r"\.run\.dir=.*; rerun the sweep's own command to go on with it, or choose a "
                                        r"new hydra\.sweep\.dir\); raise"):  # the refusal's sentence, whole
        make_sweep(tmp_path, RecordingLauncher(refused), storage=storage, n_trials=1).sweep([])
    assert trial_link.job_outcome(str(tmp_path / "0"), str(tmp_path))[1]["status"] == "stopped"
    assert [t.state.name for t in optuna.load_study(study_name="test", storage=storage).trials] == ["RUNNING"]
    launcher = RecordingLauncher()  # the sweep's own command
    make_sweep(tmp_path, launcher, storage=storage, n_trials=1).sweep([])
    assert [idx for idx, _ in launcher.calls] == [0, 1]  # continues trial 0 in its directory, then a new one
    assert [t.state.name for t in optuna.load_study(study_name="test", storage=storage).trials] == ["COMPLETE"] * 2

@pytest.mark.parametrize("settings, message", [
    ({"sampler": {"_target_": "os.system"}}, r"^hydra\.sweeper\.sampler names _target_='os\.system', which is not "
                                             r"allowed; it is not a class of optuna\.samplers; name one, e\.g\. "
                                             r"optuna\.samplers\.TPESampler\.$"),
    ({"sampler": {"_target_": "optuna.samplers.TPESampler", "n_startup": 3}},
     r"^could not build hydra\.sweeper\.sampler from _target_=optuna\.samplers\.TPESampler: .*n_startup"),
    ({"pruner": {"_target_": "optuna.samplers.TPESampler"}}, r"hydra\.sweeper\.pruner names _target_=.*, which is "
                                                             r"not allowed; it is not a class of optuna\.pruners"),
    ({"direction": ["maximize", "minimize"], "pruner": MedianPrunerConfig()}, "Optuna cannot prune a multi-objective"),
    ({"direction": "up"}, "hydra.sweeper.direction must be minimize, maximize or a list of them"),
    ({"params": {"optimizer.learning_rate": "interval(1e-3, 1e-1)"}, "sampler": GridSamplerConfig()},
     r"hydra\.sweeper\.params\.optimizer\.learning_rate is a continuous interval"),
    # a trial failed in Optuna's ValueError (FloatDistribution.step must be given), and the sweep in its traceback
    ({"params": {"optimizer.learning_rate": "tag(log, interval(1e-3, 1e-1))", "seed": "choice(0, 1)"},
      "sampler": {"_target_": "optuna.samplers.BruteForceSampler"}},
     r"^hydra\.sweeper\.params\.optimizer\.learning_rate is a continuous interval, which a grid cannot walk; use "
     r"choice\(\.\.\.\) or range\(\.\.\.\) with hydra\.sweeper\.sampler\._target_=optuna\.samplers\.BruteForceSampler\.$"),
    ({"params": {"optimizer.learning_rate": "interval(1, 0)"}}, r"^optimizer\.learning_rate=interval\(1, 0\) "
                                                                r"cannot be searched: .*low <= high"),
    ({"params": {"optimizer.learning_rate": "tag(log, interval(0, 1))"}}, r"cannot be searched: .*low > 0"),
    ({"params": {"trainer.batch_size": "range(4, 4)"}}, r"^trainer\.batch_size=range\(4, 4\) is an empty range"),
    # a tag the sweeper does not read searched on a linear scale without a word
    ({"params": {"optimizer.learning_rate": "tag(lgo, interval(1e-4, 1e-1))"}},
     r"^optimizer\.learning_rate=tag\(lgo, interval\(1e-4, 1e-1\)\) is tagged lgo, which the Optuna sweeper does "
     r"not read; tag\(log, interval\(a, b\)\) is the one tag it takes \(a log scale\)\.$"),
    ({"params": {"trainer.batch_size": "tag(log, range(16, 128))"}},
     r"^trainer\.batch_size=tag\(log, range\(16, 128\)\) asks for a log scale, which only an interval has; search "
     r"tag\(log, interval\(a, b\)\) \(tag\(log, int\(interval\(a, b\)\)\) for integers\), or leave the tag "
     r"out\.$"),
    ({"params": {"trainer.batch_size": "tag(log, choice(16, 32))"}}, r"asks for a log scale, which only an interval"),
    # every trial trained the same run: n_trials of them
    ({"params": {}}, r"^the Optuna sweep searches nothing \(neither hydra\.sweeper\.params nor the command line has "
                     r"an interval\(\.\.\.\), choice\(\.\.\.\) or range\(\.\.\.\)\), so each of its 6 trials would "
                     r"train the same run; search a setting, e\.g\. "
                     r"'optimizer\.learning_rate=tag\(log,interval\(1e-4,1e-1\)\)', or leave hydra/sweeper out\.$"),
    ({"params": {"seed": "3"}}, r"^the Optuna sweep searches nothing "),
    # it said `a sweep parameter could not be parsed`, naming none
    ({"params": {**PARAMS, "seed": "choice(1,"}}, r"^hydra\.sweeper\.params\.seed=choice\(1, could not be parsed "
                                                  r"\(no viable alternative at input 'choice\(1,'\); write it in "
                                                  r"Hydra's override grammar, e\.g\. choice\(1, 2\), "
                                                  r"interval\(0\.1, 0\.5\), range\(1, 10\)\.$"),
])
def test_bad_sweeper_settings_are_one_sentence_naming_the_setting(tmp_path, settings, message, runs_jobs_here):
    settings = {k: OmegaConf.structured(v) if k in ("sampler", "pruner") else v for k, v in settings.items()}
    with pytest.raises(UserError, match=message):
        make_sweep(tmp_path, RecordingLauncher(), **settings).sweep([])


@pytest.mark.parametrize("settings, message", [
    ({"sampler": "abc"}, r"^hydra\.sweeper\.sampler must be a sampler's settings or null, got abc; choose one with "
                         r"hydra/sweeper/sampler=tpe \(or random, grid, cmaes, gp, qmc, nsgaii\), or set "
                         r"hydra\.sweeper\.sampler\._target_ to a class of optuna\.samplers\.$"),
    ({"pruner": 3}, r"^hydra\.sweeper\.pruner must be a pruner's settings or null, got 3; choose one with "
                    r"hydra/sweeper/pruner=median \(or successive_halving, hyperband\), or set "
                    r"hydra\.sweeper\.pruner\._target_ to a class of optuna\.pruners\.$"),
    ({"params": "abc"}, r"^hydra\.sweeper\.params must map each key to the values searched, e\.g\. "
                        r"hydra\.sweeper\.params=\{optimizer\.learning_rate:'tag\(log, interval\(1e-4, 1e-1\)\)'\}, "
                        r"got abc\.$"),
    ({"params": ["a", "b"]}, r"^hydra\.sweeper\.params must map each key .*, got \['a', 'b'\]\.$"),
])
def test_sweeper_settings_of_the_wrong_kind_are_one_sentence(tmp_path, settings, message):
    """`hydra.sweeper.sampler=abc` (or pruner, params) passed Hydra's merge (they take any value) and ended in an
    AttributeError traceback (`'str' object has no attribute 'get'`), exit 1."""
    given = dict(sampler=OmegaConf.structured(TPESamplerConfig(seed=0)), direction="maximize", directions=None,
                 storage=None, study_name="test", n_trials=6, n_jobs=1, max_failure_rate=0.0,
                 params=OmegaConf.create(PARAMS), pruner=None)
    with pytest.raises(UserError, match=message):  # as Hydra passes them: the value as given, a list as ListConfig
        OptunaSweep(**{**given, **{k: OmegaConf.create(v) if isinstance(v, list) else v for k, v in settings.items()}})


def test_a_sweep_dir_of_a_study_kept_in_memory_is_refused_before_any_trial(tmp_path, runs_jobs_here):
    """Its study ended with its command: every trial of a rerun was refused in turn by the directory its number
    named."""
    save_job_dir(tmp_path / "old", "0", 0, "test", results={"objective": 0.5})
    launcher = RecordingLauncher()

    def sweep(directory, subdir="${hydra.job.num}"):
        s = make_sweep(directory, launcher, n_trials=1)
        s.config.hydra.sweep.subdir = subdir
        return s

    with pytest.raises(UserError, match=rf"^hydra\.sweep\.dir={tmp_path / 'old'} holds the trials of a study kept in "
                                        r"memory \(hydra\.sweeper\.storage=null\), which no command can continue; "
                                        r"choose a new hydra\.sweep\.dir \(with hydra\.sweeper\.storage="):
        sweep(tmp_path / "old").sweep([])
    assert launcher.calls == []
    sweep(tmp_path / "new").sweep([])  # a new one
    sweep(tmp_path / "old", "${now:%H-%M-%S-%f}_${hydra.job.num}").sweep([])  # as the presets: new trials, new dirs
    assert len(launcher.calls) == 2


def test_a_sweep_dir_of_a_stored_study_without_a_name_is_refused_before_any_trial(tmp_path, runs_jobs_here):
    """Optuna names a study created without study_name anew each time: a rerun would open another study in the
    same storage, whose trials repeated the first one's suggestions into the directories of its numbers."""
    storage = f"sqlite:///{tmp_path}/optuna.db"
    launcher = RecordingLauncher()

    def sweep():
        s = make_sweep(tmp_path, launcher, storage=storage, study_name=None, n_trials=1)
        s.config.hydra.sweep.subdir = "${hydra.job.num}"
        return s

    first = sweep().sweep([])
    save_job_dir(tmp_path, "0", 0, None, results={"objective": 0.5})
    with pytest.raises(UserError, match=rf"^hydra\.sweep\.dir={tmp_path} holds the trials of an earlier study, and "
                                        r"hydra\.sweeper\.study_name=null names each command's study anew, so this "
                                        r"one would not continue it; set hydra\.sweeper\.study_name="
                                        rf"{first.study_name} to continue it \(the studies in {re.escape(storage)}: "
                                        rf"{first.study_name}\), or choose a new hydra\.sweep\.dir\.$"):
        sweep().sweep([])
    assert len(launcher.calls) == 1
    assert optuna.get_all_study_names(storage) == [first.study_name]  # no second study opened


def test_a_pruner_without_periodic_evals_is_refused_before_any_trial(tmp_path, runs_jobs_here):
    launcher = RecordingLauncher()
    sweep = make_sweep(tmp_path, launcher, pruner=OmegaConf.structured(MedianPrunerConfig()), n_trials=2)
    for arguments in ([], ["trainer.eval_every=0"]):  # from the composed config, or on the command line
        sweep.config = OmegaConf.merge(sweep.config, {"trainer": {"eval_every": 0 if not arguments else 10}})
        with pytest.raises(UserError, match=r"^hydra\.sweeper\.pruner needs periodic evals to judge a trial by; "
                                            r"set trainer\.eval_every to a number of steps\.$"):
            sweep.sweep(arguments)
    assert launcher.calls == []  # not one trial launched to fail the same way
    sweep.sweep(["trainer.eval_every=choice(5,10)"])  # the trials' own values decide
    assert len(launcher.calls) == 2


def test_a_metric_no_trial_could_report_is_refused_before_any_trial(tmp_path, make_cfg):
    launcher = RecordingLauncher()
    sweep = make_sweep(tmp_path, launcher, n_trials=2)
    def config(*overrides):  # the whole config, as the sweeper gets it: the hydra node beside the task's
        task = make_cfg(*overrides, "dataset.validation_fraction=0.2")
        return OmegaConf.merge(hydra_node, OmegaConf.to_container(task))

    hydra_node = sweep.config
    sweep.config = config("optimized_metric=validation/acc")
    with pytest.raises(UserError, match=r"^optimized_metric=validation/acc is not a result of a classification run; "
                                        r"use one of \[.*'validation/accuracy'"):
        sweep.sweep([])
    assert launcher.calls == []  # not one trial launched to fail the same way
    sweep.config = config("optimized_metric=validation/accuracy")
    sweep.sweep([])
    assert len(launcher.calls) == 2


@pytest.mark.parametrize("metric, given, directions", [
    ("validation/accuracy", None, ["maximize"]),
    ("validation/loss", None, ["minimize"]),  # e.g. a preset's metric overridden: its direction follows
    (None, None, ["minimize"]),  # the default objective of a regression run with a validation split: its loss
    (["validation/accuracy", "wall_time_s"], None, ["maximize", "minimize"]),
    (["validation/r2", "examples_per_s"], ["maximize", "maximize"], ["maximize", "maximize"]),
    ("validation/accuracy", ["minimize"], r"hydra\.sweeper\.direction=minimize would rank the worst "
                                          r"validation/accuracy best; set maximize or leave hydra\.sweeper\.direction "
                                          r"unset \(it follows optimized_metric\)\."),
    (["validation/accuracy", "wall_time_s"], ["maximize"], r"hydra\.sweeper\.direction gives 1 direction\(s\) for "
                                                           r"the 2 objective\(s\) validation/accuracy, wall_time_s; "
                                                           r"give one for each"),
])
def test_the_study_directions_follow_the_objectives_the_runs_return(metric, given, directions):
    config = OmegaConf.create({"optimized_metric": metric, "dataset": {"task": "regression",
                                                                       "validation_fraction": 0.2}})
    if isinstance(directions, str):
        with pytest.raises(UserError, match=directions):
            objective_directions(config, given)
    else:
        assert objective_directions(config, given) == directions


def test_a_task_that_is_not_the_zoos_training_gets_optunas_default_direction():
    assert objective_directions(OmegaConf.create({"x": 1}), None) == ["minimize"]
    assert objective_directions(OmegaConf.create({"x": 1}), ["maximize"]) == ["maximize"]


def test_hydra_discovers_the_sweeper_and_composes_its_groups():
    from hydra import compose, initialize_config_dir
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    assert "ZooOptunaSweeper" in {cls.__name__ for cls in Plugins.instance().discover(Sweeper)}
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("train", ["hparams_search=digits_mlp", "hydra/sweeper/sampler=gp", "hydra/sweeper/pruner=median"],
                      return_hydra_config=True)
    assert cfg.hydra.sweeper.sampler._target_ == "optuna.samplers.GPSampler"
    assert cfg.hydra.sweeper.sampler.seed == 1234  # the preset's seed reaches whichever sampler is chosen
    assert cfg.hydra.sweeper.pruner._target_ == "optuna.pruners.MedianPruner"
    assert cfg.optimized_metric == "validation/accuracy" and cfg.dataset.validation_fraction > 0


def test_a_pruned_trial_without_periodic_evals_fails_with_one_sentence():
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("train", ["hparams_search=digits_mlp", "hydra/sweeper/pruner=median", "trainer.eval_every=0",
                                f"++hydra.job.env_set.{trial_link.TRIAL_KEY}=0"], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    try:
        with pytest.raises(UserError, match="hydra.sweeper.pruner needs periodic evals to judge a trial by"):
            trial_link.eval_reporter(cfg, TASKS["classification"])
    finally:
        HydraConfig.instance().cfg = None


def test_the_summarys_pareto_front_is_optunas():
    from zoo.sweeps import pareto

    values = [[0.9, 10.0], [0.95, 20.0], [0.9, 12.0], [0.8, 5.0], [0.95, 25.0], [0.7, 5.0]]
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trials([optuna.trial.create_trial(values=v) for v in values])
    rows = [{"objective": v} for v in values]
    assert [r["objective"] for r in pareto.front(rows, ["maximize", "minimize"])] == \
        [t.values for t in sorted(study.best_trials, key=lambda t: t.number)] == [[0.9, 10.0], [0.95, 20.0], [0.8, 5.0]]


def test_trials_whose_jobs_never_ran_fail_and_a_rerun_asks_new_ones(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"

    class RefusingLauncher(RecordingLauncher):  # as Hydra refuses an override no config takes, before any job
        def launch(self, job_overrides, initial_job_idx):
            raise ValueError("Could not override 'model.nonexistent'. Key 'nonexistent' is not in struct")

    with pytest.raises(ValueError, match="not in struct"):
        make_sweep(tmp_path, RefusingLauncher(), storage=storage, n_trials=2, n_jobs=2).sweep([])
    trials = optuna.load_study(study_name="test", storage=storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
    assert trials[0].user_attrs["fail_reason"].startswith("not run: ValueError: Could not override 'model.nonexistent'")
    launcher = RecordingLauncher()
    make_sweep(tmp_path, launcher, storage=storage, n_trials=2, n_jobs=2).sweep([])
    assert [first for first, _ in launcher.calls] == [2]  # new trials; the failed ones are not run again

    class FailingAfterOneLauncher(RecordingLauncher):  # its first job ended before the launch raised
        def launch(self, job_overrides, initial_job_idx):
            save_job_dir(tmp_path, "done", initial_job_idx, "test", results={"objective": 0.5})
            raise RuntimeError("the cluster refused the second job")

    with pytest.raises(RuntimeError):
        make_sweep(tmp_path, FailingAfterOneLauncher(), storage=storage, n_trials=2, n_jobs=2).sweep([])
    trials = optuna.load_study(study_name="test", storage=storage).trials[4:]
    assert [(t.state.name, t.value) for t in trials] == [("COMPLETE", 0.5), ("FAIL", None)]


@pytest.mark.parametrize("ending, state", [(KeyboardInterrupt(), "RUNNING"), (SystemExit(143), "RUNNING"),
                                           (SystemExit(2), "FAIL")])
def test_only_a_stop_leaves_its_trials_running_for_the_same_command_to_continue(tmp_path, ending, state):
    storage = f"sqlite:///{tmp_path}/optuna.db"

    class EndingLauncher(RecordingLauncher):
        def launch(self, job_overrides, initial_job_idx):
            raise ending

    with pytest.raises(type(ending)):
        make_sweep(tmp_path, EndingLauncher(), storage=storage, n_trials=1).sweep([])
    assert [t.state.name for t in optuna.load_study(study_name="test", storage=storage).trials] == [state]


def test_a_sampler_that_fails_while_asked_leaves_no_trial_running(tmp_path, monkeypatch):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    monkeypatch.setattr(optuna.samplers.TPESampler, "sample_independent",
                        lambda *args, **kwargs: (_ for _ in ()).throw(ImportError("No module named 'cmaes'")))
    with pytest.raises(ImportError):
        make_sweep(tmp_path, RecordingLauncher(), storage=storage, n_trials=2, n_jobs=2).sweep([])
    assert [t.state.name for t in optuna.load_study(study_name="test", storage=storage).trials] == ["FAIL"]


@pytest.mark.parametrize("where, instead", [
    # the presets' storage: a new sweep dir is a new study; another study_name alone was refused there too, as
    # a sweep dir keeps one study's trials (tests/test_sweeps.py)
    ("sweep dir", r"choose a new hydra\.sweep\.dir \(its storage then holds a new study\)\.$"),
    ("elsewhere", r"choose another hydra\.sweeper\.study_name \(or storage\) and a new hydra\.sweep\.dir\.$"),
])
def test_a_stored_study_of_another_direction_is_refused(tmp_path, where, instead):
    storage = f"sqlite:///{tmp_path}/optuna.db" if where == "sweep dir" else f"sqlite:///{tmp_path}_shared.db"
    make_sweep(tmp_path, RecordingLauncher(), storage=storage, n_trials=1).sweep([])
    with pytest.raises(UserError, match=r"^study test in sqlite:///.*\.db was created to maximize, and this "
                                        r"command would minimize; " + instead):
        make_sweep(tmp_path, RecordingLauncher(), storage=storage, n_trials=1, direction="minimize").sweep([])


@pytest.mark.parametrize("storage", ["sqlite:////proc/no-such-dir/x.db", "notadb://x"])
def test_a_storage_that_cannot_be_opened_is_one_sentence(tmp_path, storage):
    with pytest.raises(UserError, match=rf"^hydra\.sweeper\.storage={re.escape(storage)} cannot be opened \(.*\); set it "
                                        r"to sqlite:///<a writable path>\.db or null \(in memory\)\.$"):
        make_sweep(tmp_path, RecordingLauncher(), storage=storage, n_trials=1).sweep([])
    assert not (tmp_path / "multirun.yaml").exists()


def test_a_sampler_whose_package_is_missing_is_refused_before_any_trial(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cmaes" else real(name, *a))
    launcher = RecordingLauncher()
    with pytest.raises(UserError, match=r"^hydra\.sweeper\.sampler=CmaEsSampler needs cmaes, which requirements\.txt "
                                        r"does not install; pip install cmaes, or choose another"):
        make_sweep(tmp_path, launcher, sampler=OmegaConf.create({"_target_": "optuna.samplers.CmaEsSampler"})).sweep([])
    assert launcher.calls == []


def test_a_rerun_with_other_choices_is_refused_and_one_with_a_new_parameter_runs_its_points(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    grid = {"optimizer.learning_rate": "choice(1e-3, 1e-2)", "trainer.batch_size": "choice(16, 32)"}
    make_sweep(tmp_path, RecordingLauncher(), sampler=GridSamplerConfig(), params=grid, storage=storage,
               n_trials=10).sweep([])
    launcher = RecordingLauncher()
    with pytest.raises(UserError, match=r"^study test searched trainer\.batch_size over \[16, 32\], and this command "
                                        r"over \[64\]; a study keeps a choice's values: keep them, or choose a new "
                                        r"hydra\.sweep\.dir \(its storage then holds a new study\)\.$"):
        make_sweep(tmp_path, launcher, sampler=GridSamplerConfig(), params=grid, storage=storage,
                   n_trials=10).sweep(["trainer.batch_size=choice(64)"])
    assert launcher.calls == []
    make_sweep(tmp_path, launcher, sampler=GridSamplerConfig(), params={**grid, "model.hidden": "choice([64])"},
               storage=storage, n_trials=10).sweep([])
    assert len(trial_params(launcher)) == 4  # the grid's 4 points with the new parameter; "0 trials" before


def test_what_fails_every_pruned_trial_is_refused_before_any_trial(tmp_path, make_cfg, runs_jobs_here, monkeypatch):
    launcher = RecordingLauncher()
    sweep = make_sweep(tmp_path, launcher, pruner=OmegaConf.structured(MedianPrunerConfig()), n_trials=2,
                       direction=None)
    hydra_node = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    sweep.config = OmegaConf.merge(hydra_node, OmegaConf.to_container(make_cfg("optimized_metric=wall_time_s",
                                                                               "dataset.validation_fraction=0.1")))
    with pytest.raises(UserError, match=r"^hydra\.sweeper\.pruner needs optimized_metric to name an eval metric "
                                        r"\(validation/loss, validation/accuracy\), got wall_time_s\.$"):
        sweep.sweep([])
    sweep.config = OmegaConf.merge(hydra_node, OmegaConf.to_container(make_cfg()))
    sweep.directions = None
    monkeypatch.setattr(optuna_sweeper, "IN_PROCESS_LAUNCHERS", ())  # a launcher running trials elsewhere: submitit
    with pytest.raises(UserError, match=r"^hydra\.sweeper\.pruner with a launcher that runs trials in other "
                                        r"processes needs a shared study; set hydra\.sweeper\.storage"):
        sweep.sweep([])
    assert launcher.calls == []


@pytest.mark.parametrize("params,arguments,origin", [
    ({"seed": "interval(0, 100)"}, [], "hydra.sweeper.params"),
    ({}, ["trainer.batch_size=tag(log, interval(16, 128))"], "the command line"),
], ids=["params", "command-line"])
def test_an_interval_of_fractions_over_an_integer_setting_is_refused_before_any_trial(tmp_path, make_cfg, params,
                                                                                     arguments, origin):
    """Hydra reads interval(0, 100) as 0.0 to 100.0: every trial drew a fraction and failed in Hydra's `Error merging
    override seed=37.45...`, `could not be converted to Integer`."""
    from omegaconf import open_dict

    launcher = RecordingLauncher()
    sweep = make_sweep(tmp_path, launcher, params=params, n_trials=2)
    sweep.config = make_cfg()
    with open_dict(sweep.config):
        sweep.config.hydra = {"sweep": {"dir": str(tmp_path)}}
    key, _, searched = (arguments or [f"{k}={v}" for k, v in params.items()])[0].partition("=")
    with pytest.raises(UserError) as refused:
        sweep.sweep(arguments)
    assert str(refused.value) == (f"the sweep searches {key} ({origin}) over {searched}, whose values have fractions, "
                                  f"and {key} must be an integer; draw integers with int(interval(...)), e.g. "
                                  f"{key}=int({searched}) (or range(...), choice(...)).").replace(
        "int(tag(log, interval(16, 128)))", "tag(log, int(interval(16, 128)))")
    assert launcher.calls == []


def test_every_batch_is_composed_before_it_is_launched(tmp_path):
    """A launcher whose jobs compose in their own processes (submitit) ended the sweep in submitit's FailedJobError
    traceback when a later batch drew a value no config takes ('trainer.batch_size=choice(16,abc)'): only the
    first batch was composed in the sweep's process. Each is now, as Hydra's sweepers do: the error is Hydra's own
    message, the batch is not launched and its trial is told failed."""
    from hydra.errors import ConfigCompositionException

    class SecondBatchRefused:
        calls = 0

        def load_sweep_config(self, master_config, sweep_overrides):
            self.calls += 1
            if self.calls == 2:
                raise ConfigCompositionException("Error merging override trainer.batch_size=abc")
            return OmegaConf.create()

    launcher, storage = RecordingLauncher(), f"sqlite:///{tmp_path}/optuna.db"
    sweep = make_sweep(tmp_path, launcher, storage=storage, n_trials=3, n_jobs=1)
    sweep.config_loader = SecondBatchRefused()
    with pytest.raises(ConfigCompositionException):
        sweep.sweep([])
    assert [first for first, _ in launcher.calls] == [0]
    trials = optuna.load_study(study_name="test", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"]
    assert trials[1].user_attrs["fail_reason"] == ("not run: ConfigCompositionException: Error merging override "
                                                   "trainer.batch_size=abc")


def test_a_sweep_without_a_sampler_asks_optunas_default_one(tmp_path):
    """hydra.sweeper.sampler=null, as pruner=null means no pruner: Optuna's create_study picks its default sampler
    (TPE for one objective), also for a stored study run again."""
    storage = f"sqlite:///{tmp_path}/study.db"
    for run in range(2):
        launcher = RecordingLauncher()
        sweep = make_sweep(tmp_path, launcher, n_trials=3, storage=storage)
        sweep.sampler_cfg = None
        study = sweep.sweep([])
        assert isinstance(study.sampler, optuna.samplers.TPESampler)
        assert len(trial_params(launcher)) == 3 and len(study.trials) == 3 * (run + 1)


@pytest.mark.parametrize("overrides,said", [
    (["optimized_metric=train/loss", "dataset.validation_fraction=0.1"], "(validation/loss, validation/accuracy)"),
    (["optimized_metric=test/accuracy", "dataset.validation_fraction=0.1"], "(validation/loss, validation/accuracy)"),
    (["optimized_metric=train/accuracy"], "(test/loss, test/accuracy)"),
])
def test_a_pruner_judging_another_split_than_the_objectives_is_refused(make_cfg, overrides, said):
    """The periodic evals run on validation (or on test without it): a train/ or test/ objective beside them was
    judged by the eval split's metric of the same name, so trials were pruned by a figure the sweep did not ask for."""
    cfg = make_cfg(*overrides)
    with pytest.raises(UserError, match=re.escape(f"hydra.sweeper.pruner needs optimized_metric to name an eval "
                                                  f"metric {said}, got {cfg.optimized_metric}.")):
        trial_link.prunable_metric(cfg, TASKS["classification"])
    assert trial_link.prunable_metric(make_cfg("dataset.validation_fraction=0.1"), TASKS["classification"]) == \
        trial_link.prunable_metric(make_cfg("optimized_metric=test/accuracy"), TASKS["classification"]) == "accuracy"


@pytest.mark.parametrize("sampler", [
    {"_target_": "optuna.samplers.CmaEsSampler"},
    {"_target_": "optuna.samplers.PartialFixedSampler", "fixed_params": {},
     "base_sampler": {"_target_": "optuna.samplers.CmaEsSampler"}},
], ids=["cmaes", "wrapped"])
def test_a_sampler_that_would_unpickle_from_the_stored_study_is_refused_before_any_trial(tmp_path, sampler,
                                                                                         monkeypatch):
    """Optuna's CmaEsSampler unpickles its optimizer from the study's trials: a stored study is a file any
    editor of it could make run code. In memory (storage=null) it is built."""
    monkeypatch.setattr(optuna_sweeper, "SAMPLER_PACKAGES", {})  # as if cmaes were installed: Optuna imports it late
    storage = f"sqlite:///{tmp_path}/optuna.db"
    launcher = RecordingLauncher()
    with pytest.raises(UserError, match=r"^hydra\.sweeper\.sampler=\w+ keeps its state in the study as a pickle, "
                                        r"which continuing the study would load from hydra\.sweeper\.storage=sqlite:"
                                        r".*; set hydra\.sweeper\.storage=null \(the study then lives in memory\) or "
                                        r"choose another hydra/sweeper/sampler\.$"):
        make_sweep(tmp_path, launcher, sampler=OmegaConf.create(sampler), storage=storage).sweep([])
    assert launcher.calls == []
    in_memory = make_sweep(tmp_path, launcher, sampler=OmegaConf.create(sampler), storage=None)._sampler({})
    assert isinstance(getattr(in_memory, "_base_sampler", in_memory), optuna.samplers.CmaEsSampler)


@pytest.mark.parametrize("name, value, distribution, says", [
    ("++hydra.job_logging.handlers.evil", 0,
     {"name": "CategoricalDistribution", "attributes": {"choices": ["{class:logging.FileHandler,filename:x}"]}},
     r"\+\+hydra\.job_logging\.handlers\.evil='\{class:logging\.FileHandler,filename:x\}', which this command does "
     r"not search;"),
    ("trainer.batch_size", 7.5, {"name": "FloatDistribution", "attributes": {"low": 1.0, "high": 8.0, "log": False,
                                                                            "step": None}},
     r"trainer\.batch_size=7\.5, which this command does not search over \[16, 32, 64\];"),
], ids=["another-setting", "another-value"])
def test_a_stopped_trials_stored_parameters_this_command_does_not_search_are_refused(tmp_path, runs_jobs_here, name,
                                                                                      value, distribution, says):
    """A stopped trial runs again with its stored parameters as overrides, and the storage is a file: a parameter
    written into it became any override at all (a logging handler that emptied another sweep's results.json)."""
    import sqlite3

    storage = f"sqlite:///{tmp_path}/optuna.db"
    stop_a_sweep(tmp_path, storage, n_jobs=2)
    save_job_dir(tmp_path, "0", 0, "test", failure=STOPPED)
    with sqlite3.connect(tmp_path / "optuna.db") as db:
        trial_id = db.execute("select trial_id from trials where number = 0").fetchone()[0]
        db.execute("delete from trial_params where trial_id = ? and param_name = ?", (trial_id, name))
        db.execute("insert into trial_params (trial_id, param_name, param_value, distribution_json) values "
                   "(?, ?, ?, ?)", (trial_id, name, value, json.dumps(distribution)))
    launcher = RecordingLauncher()
    with pytest.raises(UserError, match=rf"^study test holds stopped trial 0 with {says} search what the study "
                                        r"searched, or choose a new hydra\.sweep\.dir \(its storage then holds a new "
                                        r"study\)\.$"):
        make_sweep(tmp_path, launcher, storage=storage, n_trials=1).sweep([])
    assert launcher.calls == []


def test_a_stopped_trials_job_with_a_damaged_record_is_one_sentence_or_not_its_job(tmp_path, runs_jobs_here):
    """A trial number that is no number in a job's hydra.yaml ended the rerun in a ValueError: that folder is no job
    of the study, and the trial runs again in a new one. A job whose overrides.yaml does not read ended it in a
    DamagedJob traceback: it is the one sentence that names the file."""
    storage = f"sqlite:///{tmp_path}/optuna.db"
    stop_a_sweep(tmp_path, storage, n_jobs=1)
    save_job_dir(tmp_path, "0", "abc", "test", failure=STOPPED)
    launcher = RecordingLauncher()
    make_sweep(tmp_path, launcher, storage=storage, n_trials=1).sweep([])
    assert [idx for idx, _ in launcher.calls] == [0, 1]
    assert not any(o.startswith("hydra.sweep.subdir=") for o in launcher.calls[0][1][0])  # not continued in "0"
    storage = f"sqlite:///{tmp_path}/other.db"
    stop_a_sweep(tmp_path / "other", storage, n_jobs=1)
    save_job_dir(tmp_path / "other", "0", 0, "test", failure=STOPPED)
    (tmp_path / "other" / "0" / ".hydra" / "overrides.yaml").write_text("5\n")
    with pytest.raises(UserError, match=r"^.*/other/0/\.hydra/overrides\.yaml cannot be read \(.*\); repair it, or "
                                        r"move that job's directory out of the sweep\.$"):
        make_sweep(tmp_path / "other", RecordingLauncher(), storage=storage, n_trials=1).sweep([])
