"""A sweep composes each job once: the composition its sweeper validated is the one its launcher runs; jobs
that choose the same config groups share the defaults tree and merged files, and compose what Hydra composes."""
import copy
import os
import shutil

from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from conftest import CONF
from zoo.sweeps.compose_once import KEPT, ComposeOnce, remember_compositions, reuse_defaults, share_config_store


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
    ["+optimizer.min_dim_size_to_factor=16", "seed=6"], ["++seed=8"], ["model.hidden=[32,32]"],
    ["trainer={epochs: 2}"], ["hydra.job.chdir=true", "seed=7"], ["seed=1", "optimizer.learning_rate=3e-3"],
    ["experiment=digits_cnn_cosine"], ["~recipe", "model=linear", "dataset=diabetes"], ["hydra/launcher=basic"],
    ["hydra/job_logging=disabled", "seed=9"],
]


def sweep_loader(conf=CONF):
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf)))
    return loader, loader.load_configuration("train", ["seed=0,1"], RunMode.MULTIRUN)


def test_reused_defaults_compose_what_hydra_composes():
    fresh, master = sweep_loader()
    expected = [OmegaConf.to_yaml(fresh.load_sweep_config(master, job)) for job in JOBS]
    reusing, master = sweep_loader()
    reuse_defaults(reusing)
    assert [OmegaConf.to_yaml(reusing.load_sweep_config(master, job)) for job in JOBS] == expected
    assert len(reusing.merged) == 8  # one per choice of config groups (hydra.* settings count as one)


def test_a_copied_config_repository_shares_the_store_and_composes_what_hydra_composes():
    with initialize_config_dir(config_dir=str(CONF), version_base=None):  # hydra.main's search path
        loader = GlobalHydra.instance().config_loader()
        source = next(s for s in loader.repository.get_sources() if s.scheme() == "structured")
        shared = vars(type(source)).get("__deepcopy__")
        if shared is not None:  # applied by an earlier test: compose as Hydra does first
            del type(source).__deepcopy__
        try:
            master = loader.load_configuration("train", ["seed=0,1"], RunMode.MULTIRUN)
            expected = [OmegaConf.to_yaml(loader.load_sweep_config(master, job)) for job in JOBS]
            assert copy.deepcopy(source).store is not source.store  # Hydra copies the whole store
            share_config_store(loader)
            copied = copy.deepcopy(source)
            assert copied.store is source.store and copied is not source and copied.path == source.path
            assert [OmegaConf.to_yaml(loader.load_sweep_config(master, job)) for job in JOBS] == expected
        finally:
            if shared is not None:
                type(source).__deepcopy__ = shared


def test_a_config_file_edited_during_a_sweep_is_read_again(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    loader, master = sweep_loader(conf)
    reuse_defaults(loader)
    assert loader.load_sweep_config(master, ["seed=1"]).trainer.epochs == 30
    (conf / "trainer" / "default.yaml").write_text((conf / "trainer" / "default.yaml").read_text().replace(
        "epochs: 30", "epochs: 7"))
    os.utime(conf / "trainer" / "default.yaml", ns=(1, 1))  # a new mtime even where the clock is coarse
    assert loader.load_sweep_config(master, ["seed=2"]).trainer.epochs == 7


def test_compositions_outside_a_sweeps_jobs_are_hydras_own():
    loader, _ = sweep_loader()
    reuse_defaults(loader)
    first, second = (loader.load_configuration("train", ["seed=1"], RunMode.RUN) for _ in range(2))
    assert not loader.kept_defaults and not loader.merged
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(second)


def test_a_sweeps_jobs_read_the_primary_config_once(monkeypatch):
    """Hydra reads train.yaml for every job only to look for hydra.searchpath; the kept trees need it no more."""
    jobs = [["seed=1"], ["seed=2"], ["seed=3", "optimizer.learning_rate=3e-3"]]
    fresh, master = sweep_loader()
    expected = [OmegaConf.to_yaml(fresh.load_sweep_config(master, job)) for job in jobs]
    loader, master = sweep_loader()
    reuse_defaults(loader)
    files = next(type(s) for s in loader.repository.get_sources() if s.scheme() == "file")  # Hydra's plugin scan
    reads, read = [], files.load_config  # may have imported its module again: the class the loader uses
    monkeypatch.setattr(files, "load_config", lambda self, config_path: reads.append(config_path) or
                        read(self, config_path))
    assert [OmegaConf.to_yaml(loader.load_sweep_config(master, job)) for job in jobs] == expected
    assert reads.count("train") == 1  # the first job's composition; Hydra's own reads it for each job


def test_a_primary_config_with_a_search_path_composes_what_hydra_composes(tmp_path):
    conf, extra = tmp_path / "conf", tmp_path / "extra"
    shutil.copytree(CONF, conf)
    (extra / "model").mkdir(parents=True)
    (extra / "model" / "narrow.yaml").write_text((CONF / "model" / "mlp.yaml").read_text().replace(
        "hidden: [256, 256]", "hidden: [8]"))
    train = (conf / "train.yaml").read_text()
    assert "\nhydra:\n" in train
    (conf / "train.yaml").write_text(train.replace("\nhydra:\n", f"\nhydra:\n  searchpath: [file://{extra}]\n"))
    jobs = [["model=narrow", "seed=1"], ["model=narrow", "seed=2"], ["seed=3"], ["model=narrow", "seed=4"]]
    fresh, master = sweep_loader(conf)
    expected = [OmegaConf.to_yaml(fresh.load_sweep_config(master, job)) for job in jobs]
    reusing, master = sweep_loader(conf)
    reuse_defaults(reusing)
    composed = [reusing.load_sweep_config(master, job) for job in jobs]
    assert [OmegaConf.to_yaml(c) for c in composed] == expected
    assert list(composed[3].model.hidden) == [8] and list(composed[2].model.hidden) != [8]
