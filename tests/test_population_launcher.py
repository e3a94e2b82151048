"""hydra/launcher=population is a well-behaved Hydra launcher: Hydra's own launcher test suites (those its
joblib and submitit launchers pass) run against it. Their task functions are not the zoo's training, so each
job runs on its own exactly as under Hydra's basic launcher."""
import pytest
from hydra import version
from hydra.test_utils.launcher_common_tests import (
    BatchedSweeperTestSuite,
    IntegrationTestSuite,
    LauncherTestSuite,
)
import os
import sys

from omegaconf import OmegaConf

import commands
from conftest import ROOT


@pytest.fixture(autouse=True)
def as_in_hydras_own_tests(monkeypatch):
    """The suites start apps in fresh processes, which find hydra_plugins/ through PYTHONPATH, and expect
    Hydra's version base unset (1.1 behaviour), as in a fresh process; other tests here compose with
    version_base=None, which Hydra keeps in a process-wide singleton."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setattr(version.VersionBase.instance(), "version_base", version._UNSPECIFIED_)


@pytest.mark.parametrize("launcher_name, overrides", [("population", [])])
class TestPopulationLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("launcher_name, overrides", [("population", ["hydra.sweeper.max_batch_size=2"])])
class TestPopulationLauncherBatched(BatchedSweeperTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [({}, ["-m", "hydra/launcher=population"])])
class TestPopulationLauncherIntegration(IntegrationTestSuite):
    pass


def test_an_error_of_the_whole_group_is_raised_by_each_job_from_where_it_was_first_raised():
    import traceback

    from zoo.population.launch import _hand_backs

    try:
        raise RuntimeError("the group's program could not be built")
    except RuntimeError as e:
        outcomes = [e] * 3  # what _train_group returns for each job when the whole group fails
    depths = []
    for hand_back in _hand_backs(outcomes):  # as launch() hands the jobs back, one after another
        try:
            hand_back(OmegaConf.create({}))
        except RuntimeError as e:
            depths.append(len(traceback.extract_tb(e.__traceback__)))
    assert depths == [depths[0]] * 3, depths


@pytest.mark.parametrize("max_size", [0, -1])
def test_a_max_size_below_one_is_one_sentence(max_size, capsys):
    from hydra_plugins.zoo_population_launcher.population_launcher import PopulationLauncher

    with pytest.raises(SystemExit) as done:
        PopulationLauncher(max_size=max_size)
    assert done.value.code == 2 and "hydra.launcher.max_size must be a positive" in capsys.readouterr().err


@pytest.mark.parametrize("value,got", [("abc", "abc"), ("2.5", "2.5"), ("null", "null")])
def test_a_max_size_of_the_wrong_type_is_one_sentence_before_the_sweep(data_dir, tmp_path, value, got):
    """It ended in Hydra's 'Error merging override' and OmegaConf's node details, exit 1."""
    from conftest import subprocess_env

    done = commands.run([sys.executable, "train.py", "-m", "debug=smoke", "seed=0,1", "hydra/launcher=population",
                           f"hydra.launcher.max_size={value}", f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT,
                        env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == f"error: hydra.launcher.max_size must be an integer, got {got}.\n"
    assert not (tmp_path / "sweep").exists()


def test_without_an_output_subdir_a_group_writes_no_hydra_folder(tmp_path):
    from zoo.population.launch import PreparedJob, _train_group

    job = OmegaConf.create({"hydra": {"output_subdir": None, "overrides": {"task": []}, "job": {"name": "train"},
                                      "mode": "MULTIRUN", "sweep": {"dir": str(tmp_path)},
                                      "runtime": {"output_dir": str(tmp_path / "0")}}})
    cfg = OmegaConf.create({"paths": {"output_dir": str(tmp_path / "0")}})
    prepared = PreparedJob(job, cfg, OmegaConf.to_yaml(cfg), OmegaConf.masked_copy(job, ["hydra"]))
    # the job's own directory, inside the sweep's, is not one the job holds apart from it
    assert _train_group(lambda cfgs, hydra_cfgs: ["done"], [prepared]) == (["done"], [None])
    assert not (tmp_path / "0" / ".hydra").exists() and not (tmp_path / "0" / "None").exists()


def test_another_apps_jobs_see_as_many_cpu_devices_as_under_the_basic_launcher(tmp_path):
    (tmp_path / "app.py").write_text(
        "import hydra, jax\n"
        "@hydra.main(version_base=None, config_path=None)\n"
        "def main(cfg):\n    print('devices', jax.device_count())\n"
        "main()\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # JAX's own default: one CPU device
    counts = {}
    for launcher in ("basic", "population"):
        out = commands.run([sys.executable, "app.py", "-m", "+x=1,2", f"hydra/launcher={launcher}",
                              f"hydra.sweep.dir={tmp_path / launcher}"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True).stdout
        counts[launcher] = [line for line in out.splitlines() if line.startswith("devices")]
    assert counts["population"] == counts["basic"] == ["devices 1", "devices 1"]
