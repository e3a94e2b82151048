"""The Launcher plugin Hydra discovers: a shim over zoo.population.launch.

Hydra imports every plugin on every run, so this module imports neither JAX nor the zoo's training code.
"""
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra.plugins.launcher import Launcher

from zoo.errors import UserError, exit_with


@dataclass
class PopulationLauncherConf:
    _target_: str = "hydra_plugins.zoo_population_launcher.population_launcher.PopulationLauncher"
    max_size: int = 64  # members per compiled program; a larger group is split into several


ConfigStore.instance().store(group="hydra/launcher", name="population", node=PopulationLauncherConf,
                             provider="zoo")


class PopulationLauncher(Launcher):
    def __init__(self, max_size: int = 64) -> None:
        if not (isinstance(max_size, int) and max_size > 0):
            exit_with(UserError(f"hydra.launcher.max_size must be a positive number of members, got {max_size!r}."))
        self.max_size = max_size
        self.config = self.task_function = self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        from zoo.parallel import cpu_devices_for_populations
        from zoo.sweeps.compose_once import remember_compositions

        if getattr(task_function, "train_population", None) is not None:  # another app's jobs see JAX as usual
            cpu_devices_for_populations()  # before any JAX work: members spread over the cores (on CPU)
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context
        remember_compositions(hydra_context.config_loader)

    def launch(self, job_overrides, initial_job_idx):
        from zoo.population.launch import launch

        return launch(self.hydra_context, self.config, self.task_function, job_overrides, initial_job_idx,
                      self.max_size)
