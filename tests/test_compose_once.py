"""A sweep composes each job once: the composition its sweeper validated is the one its launcher runs."""
from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from conftest import CONF
from zoo.sweeps.compose_once import KEPT, ComposeOnce, remember_compositions, reuse_defaults


class CountingLoader:
    def __init__(self):
        self.calls = []

    def load_sweep_config(self, master_config, sweep_overrides):
        self.calls.append(list(sweep_overrides))
        return OmegaConf.create({"overrides": list(sweep_overrides), "hydra": {"job": {"num": None}}})


def test_a_validated_job_is_not_composed_again_to_launch_it():
    loader, master = CountingLoader(), OmegaConf.create({})
    remember_compositions(loader)
    remember_compositions(loader)  # a second setup in the same process wraps nothing twice
    validated = loader.load_sweep_config(master, ["lr=1"])  # what Sweeper.validate_batch_is_legal does
    validated.hydra.job.num = 99  # the sweeper's own copy: changing it leaves the launcher's unchanged
    job = loader.load_sweep_config(master, ["lr=1"])  # what the launcher does
    assert loader.calls == [["lr=1"]] and job.overrides == ["lr=1"] and job.hydra.job.num is None
    assert loader.load_sweep_config(master, ["lr=1"]).overrides == ["lr=1"]  # taken once: composed again
    assert loader.load_sweep_config(master, ["lr=2"]).overrides == ["lr=2"]
    assert loader.calls == [["lr=1"], ["lr=1"], ["lr=2"]]
    for i in range(KEPT + 5):  # an unbounded sweep keeps a bounded number
        loader.load_sweep_config(master, [f"seed={i}"])
    assert len(loader.composed) == KEPT


def test_a_batch_larger_than_kept_composes_only_its_overflow_again():
    loader, master = CountingLoader(), OmegaConf.create({})
    remember_compositions(loader)
    batch = [[f"seed={i}"] for i in range(KEPT + 44)]
    for job in batch:  # the sweeper validates the whole batch, then the launcher runs it
        loader.load_sweep_config(master, job)
    for job in batch:
        loader.load_sweep_config(master, job)
    assert len(loader.calls) == len(batch) + 44


def test_the_kept_composition_is_the_one_hydra_composes():
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    master = loader.load_configuration("train", ["seed=0,1", "optimizer.learning_rate=1e-3,3e-3"], RunMode.MULTIRUN)
    job = ["seed=1", "optimizer.learning_rate=3e-3"]
    fresh = OmegaConf.to_container(loader.load_sweep_config(master, job))
    remember_compositions(loader)
    loader.load_sweep_config(master, job)
    kept = loader.load_sweep_config(master, job)
    assert OmegaConf.to_container(kept) == fresh and kept.seed == 1 and kept.optimizer.learning_rate == 3e-3


def test_the_train_config_wraps_the_running_hydras_loader():
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        hydra = GlobalHydra.instance().hydra
        cfg = hydra.compose_config("train", [], run_mode=RunMode.MULTIRUN)
        assert cfg.hydra.callbacks.compose_once._target_ == "zoo.sweeps.compose_once.ComposeOnce"
        ComposeOnce().on_multirun_start(cfg)
        assert hydra.config_loader.composed is not None


JOBS = [  # values only, then other choices of config groups, additions, deletions, dict values, hydra settings
    ["seed=1", "optimizer.learning_rate=3e-3"], ["seed=2", "optimizer.learning_rate=1e-2"],
    ["seed=2"], ["model=linear", "dataset=diabetes", "seed=3"], ["model=linear", "dataset=diabetes", "seed=4"],
    ["optimizer=sgd", "~optimizer.nesterov", "seed=5"], ["optimizer=sgd", "optimizer.momentum=0.5"],
    ["+optimizer.min_dim_size_to_factor=16", "seed=6"], ["model.hidden=[32,32]"], ["trainer={epochs: 2}"],
    ["hydra.job.chdir=true", "seed=7"], ["seed=1", "optimizer.learning_rate=3e-3"], ["experiment=digits_cnn_cosine"],
]


def test_reused_defaults_compose_what_hydra_composes():
    def compose(loader, job):
        return OmegaConf.to_yaml(loader.load_configuration("train", job, RunMode.RUN))

    fresh = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    expected = [compose(fresh, job) for job in JOBS]
    reusing = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    reuse_defaults(reusing)
    assert [compose(reusing, job) for job in JOBS] == expected
    assert len(reusing.merged) == 5  # one per choice of config groups (hydra.* settings count as one)
