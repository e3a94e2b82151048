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
