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
from omegaconf import OmegaConf

from conftest import ROOT
from zoo.population.launch import _sweep_config, remember_compositions


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


class CountingLoader:
    def __init__(self):
        self.calls = []

    def load_sweep_config(self, master_config, sweep_overrides):
        self.calls.append(list(sweep_overrides))
        return OmegaConf.create({"overrides": list(sweep_overrides), "hydra": {"job": {"num": None}}})


def test_each_job_is_composed_once_when_the_sweeper_validated_its_batch():
    loader, master = CountingLoader(), OmegaConf.create({})
    remember_compositions(loader)
    remember_compositions(loader)  # a second launcher setup in the same process wraps nothing twice
    validated = loader.load_sweep_config(master, ["lr=1"])  # what Sweeper.validate_batch_is_legal does
    validated.hydra.job.num = 99  # a sweeper's own copy: changing it leaves the launcher's unchanged
    job = _sweep_config(loader, master, ["lr=1"])
    assert loader.calls == [["lr=1"]] and job.overrides == ["lr=1"] and job.hydra.job.num is None
    assert _sweep_config(loader, master, ["lr=2"]).overrides == ["lr=2"]  # not validated: composed here
    assert _sweep_config(loader, master, ["lr=1"]).overrides == ["lr=1"]  # taken once; then composed again
    assert loader.calls == [["lr=1"], ["lr=2"], ["lr=1"]]
