"""hydra/launcher=population is a well-behaved Hydra launcher: Hydra's own launcher test suites (those its
joblib and submitit launchers pass) run against it. Their task functions are not the zoo's training, so each
job runs on its own exactly as under Hydra's basic launcher."""
import pytest
from hydra.test_utils.launcher_common_tests import (
    BatchedSweeperTestSuite,
    IntegrationTestSuite,
    LauncherTestSuite,
)

from conftest import ROOT


@pytest.fixture(autouse=True)
def plugins_importable(monkeypatch):
    """The suites start apps in fresh processes; they find hydra_plugins/ through PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.syspath_prepend(str(ROOT))


@pytest.mark.parametrize("launcher_name, overrides", [("population", [])])
class TestPopulationLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("launcher_name, overrides", [("population", ["hydra.sweeper.max_batch_size=2"])])
class TestPopulationLauncherBatched(BatchedSweeperTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [({}, ["-m", "hydra/launcher=population"])])
class TestPopulationLauncherIntegration(IntegrationTestSuite):
    pass
