"""The Sweeper plugin Hydra discovers: a shim over zoo.sweeps.optuna_sweeper.OptunaSweep.

Hydra imports every plugin on every run, so this module imports neither Optuna nor JAX.
"""
from hydra.plugins.sweeper import Sweeper

from zoo.errors import UserError, exit_with
from zoo.sweeps.config import register

register()


class ZooOptunaSweeper(Sweeper):
    def __init__(self, **settings) -> None:
        from zoo.sweeps.optuna_sweeper import OptunaSweep

        self.sweep_impl = _or_exit(OptunaSweep, **settings)

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.sweep_impl.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments):
        return _or_exit(self.sweep_impl.sweep, arguments)


def _or_exit(fn, *args, **kwargs):
    """A sweep setting to change is one sentence and exit code 2, like the zoo's other mistakes."""
    try:
        return fn(*args, **kwargs)
    except UserError as e:
        exit_with(e)
