"""The Optuna sweeper's configuration: `hydra/sweeper=zoo_optuna`, with `hydra/sweeper/sampler=<name>` and
`hydra/sweeper/pruner=<name>` groups.

The keys and sampler groups follow Hydra's own Optuna sweeper for Optuna 4.7+ (hydra-optuna-sweeper after its
1.3.0 release), so a preset moves to that plugin by changing its `override /hydra/sweeper:` line. `pruner` and
`directions` are this sweeper's additions. Nothing here imports Optuna: Hydra imports every plugin on every run.
"""
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class TPESamplerConfig:
    _target_: str = "optuna.samplers.TPESampler"
    seed: Optional[int] = None
    n_startup_trials: int = 10
    n_ei_candidates: int = 24
    multivariate: bool = False


@dataclass
class RandomSamplerConfig:
    _target_: str = "optuna.samplers.RandomSampler"
    seed: Optional[int] = None


@dataclass
class GridSamplerConfig:
    """The search space comes from `params` when the sweep starts (every parameter must be discrete)."""

    _target_: str = "optuna.samplers.GridSampler"
    _partial_: bool = True
    seed: Optional[int] = None


@dataclass
class CmaEsSamplerConfig:
    _target_: str = "optuna.samplers.CmaEsSampler"
    seed: Optional[int] = None
    sigma0: Optional[float] = None
    n_startup_trials: int = 1
    use_separable_cma: bool = False


@dataclass
class GPSamplerConfig:
    _target_: str = "optuna.samplers.GPSampler"
    seed: Optional[int] = None
    n_startup_trials: int = 10
    deterministic_objective: bool = False


@dataclass
class QMCSamplerConfig:
    _target_: str = "optuna.samplers.QMCSampler"
    seed: Optional[int] = None
    qmc_type: str = "sobol"
    scramble: bool = False


@dataclass
class NSGAIISamplerConfig:
    _target_: str = "optuna.samplers.NSGAIISampler"
    seed: Optional[int] = None
    population_size: int = 50


@dataclass
class MedianPrunerConfig:
    _target_: str = "optuna.pruners.MedianPruner"
    n_startup_trials: int = 5  # completed trials before any pruning
    n_warmup_steps: int = 0  # train steps before a trial can be pruned
    interval_steps: int = 1


@dataclass
class SuccessiveHalvingPrunerConfig:
    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    min_resource: Any = "auto"
    reduction_factor: int = 4


@dataclass
class HyperbandPrunerConfig:
    _target_: str = "optuna.pruners.HyperbandPruner"
    min_resource: int = 1
    max_resource: Any = "auto"
    reduction_factor: int = 3


@dataclass
class ZooOptunaSweeperConfig:
    _target_: str = "hydra_plugins.zoo_optuna_sweeper.zoo_optuna_sweeper.ZooOptunaSweeper"
    _recursive_: bool = False  # the sweeper checks the sampler's and pruner's _target_ before building them
    # _self_ first: the chosen sampler and pruner options fill in the fields below instead of being reset by them
    defaults: List[Any] = field(default_factory=lambda: ["_self_", {"sampler": "tpe"}, {"pruner": None}])
    sampler: Any = None  # any optuna.samplers class by _target_; the groups above set the usual ones
    direction: Any = None  # minimize | maximize, or a list, one per objective; null: follows optimized_metric
    directions: Optional[List[str]] = None  # the same list under Optuna's name; wins over `direction`
    storage: Optional[str] = None  # sqlite:///<path>.db keeps the study: rerunning continues it
    study_name: Optional[str] = None
    n_trials: int = 20  # trials this command adds to the study
    n_jobs: int = 2  # trials asked at a time and handed to the launcher in one call
    max_failure_rate: float = 0.0  # fraction of a batch that may fail before the sweep stops
    params: Optional[Any] = None  # key -> sweep in Hydra's override grammar
    pruner: Any = None  # any optuna.pruners class by _target_; trials report their periodic eval metric


SAMPLERS = {"tpe": TPESamplerConfig, "random": RandomSamplerConfig, "grid": GridSamplerConfig,
            "cmaes": CmaEsSamplerConfig, "gp": GPSamplerConfig, "qmc": QMCSamplerConfig,
            "nsgaii": NSGAIISamplerConfig}
PRUNERS = {"median": MedianPrunerConfig, "successive_halving": SuccessiveHalvingPrunerConfig,
           "hyperband": HyperbandPrunerConfig}


def register() -> None:
    store = ConfigStore.instance()
    store.store(group="hydra/sweeper", name="zoo_optuna", node=ZooOptunaSweeperConfig, provider="zoo")
    for name, node in SAMPLERS.items():
        store.store(group="hydra/sweeper/sampler", name=name, node=node, provider="zoo")
    for name, node in PRUNERS.items():
        store.store(group="hydra/sweeper/pruner", name=name, node=node, provider="zoo")
