"""Every option of every config group composes and builds; bad values are refused before any JAX work."""
import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import CONF
from zoo.config import validate
from zoo.errors import UserError
from zoo.optim import build_optimizer
from zoo.parallel import make_mode, select_devices
from zoo.train import build_model
from zoo.data import load_dataset

GROUP_OPTIONS = sorted((p.parent.name, p.stem) for p in CONF.glob("*/*.yaml"))
CATALOG = {"mnist", "fashion_mnist", "cifar10"}


@pytest.mark.parametrize("group,option", GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_every_option_composes_and_builds(make_cfg, group, option):
    overrides = [f"{group}={option}", "debug=smoke"] if group != "debug" else [f"debug={option}"]
    if group == "model" and option == "cnn":
        overrides.append("dataset=digits")
    if group == "privacy" and option == "dpsgd":  # a privacy level is the user's choice: no default
        overrides.append("privacy.target_epsilon=3")
    cfg = make_cfg(*overrides)
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    validate(cfg)
    build_optimizer(cfg, total_steps=100)
    make_mode(cfg.parallel, select_devices(cfg.parallel))
    if cfg.dataset.name not in CATALOG:  # catalog sets are covered with mock data in test_datasets.py
        data = load_dataset(cfg.dataset, cfg.paths.data_dir)
        outputs = build_model(cfg, data)(data.splits["test"].x[:3])
        assert outputs.shape == (3, data.out_features)


@pytest.mark.parametrize("override,setting", [
    ("optimizer.learning_rate=0", "optimizer.learning_rate"),
    ("optimizer.learning_rate=-1e-3", "optimizer.learning_rate"),
    ("trainer.batch_size=0", "trainer.batch_size"),
    ("trainer.epochs=0", "trainer.epochs"),
    ("trainer.eval_batch_size=-4", "trainer.eval_batch_size"),
    ("trainer.log_every=0", "trainer.log_every"),
    ("trainer.steps_per_call=0", "trainer.steps_per_call"),
    ("model.dropout=1.0", "model.dropout"),
    ("parallel.mode=spmd", "parallel.mode"),
    ("trainer.nan_check=sometimes", "trainer.nan_check"),
])
def test_bad_values_name_the_setting(make_cfg, override, setting):
    cfg = make_cfg(override)
    with pytest.raises(UserError, match=setting.replace(".", r"\.")):
        validate(cfg)


@pytest.mark.parametrize("override,fragment", [
    ("trainer.epoch=3", "trainer.epoch"),  # unknown key (typo)
    ("trainer.epochs=three", "trainer.epochs"),  # wrong type
    ("trainer.batch_size=1.5", "trainer.batch_size"),
    ("model=transformer", "model"),  # unknown group option
])
def test_schema_rejects_unknown_keys_and_wrong_types(make_cfg, override, fragment):
    with pytest.raises(ConfigCompositionException) as err:
        make_cfg(override)
    text = str(err.value) + str(err.value.__cause__)
    assert fragment in text


def test_cnn_on_tabular_data_says_what_to_choose(make_cfg):
    cfg = make_cfg("model=cnn", "dataset=diabetes")
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    with pytest.raises(UserError, match=r"model=cnn cannot be built for dataset=diabetes.*model=linear"):
        build_model(cfg, data)


def _built_after_a_lost_stop(monkeypatch, cfg, signum, wrapped: bool):
    """The model's class, patched: its build runs the stop signal's handler, whose exception does not leave it as
    itself (Python drops one raised inside a garbage-collection callback, C code may clear it, a library may wrap
    it: `wrapped`), and then fails with an error as OmegaConf words it."""
    import functools
    import signal

    from zoo.targets import _resolve_loaded

    cls = _resolve_loaded(cfg.model._target_)
    real = cls.__init__

    @functools.wraps(real)
    def stopped_while_built(self, *args, **kwargs):
        try:
            signal.getsignal(signum)(signum, None)
        except KeyboardInterrupt as e:
            stop = e
        raise TypeError("Unsupported value type\n    full_key: \n    object_type=None") from (stop if wrapped else None)

    monkeypatch.setattr(cls, "__init__", stopped_while_built)


@pytest.mark.parametrize("signum", [2, 15], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["dropped", "wrapped"])
def test_a_stop_while_the_model_is_built_stops_the_command(make_cfg, monkeypatch, signum, wrapped):
    """A Ctrl-C (or a reading command's SIGTERM) inside the model's build that reached the build as another error
    ended as 'model=mlp cannot be built for dataset=digits ... object_type=None', exit 2, not as the stop."""
    from zoo import preemption, startup

    if signum == 15:
        monkeypatch.setattr(startup, "_sigterm_as_ctrl_c", True)  # export.py's, eval.py's and predict.py's
    cfg = make_cfg("debug=smoke")
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    _built_after_a_lost_stop(monkeypatch, cfg, signum, wrapped)
    with preemption.interrupts_remembered():
        with pytest.raises(startup.Terminated if signum == 15 else KeyboardInterrupt):
            build_model(cfg, data)


def test_a_stop_while_the_optimizer_is_built_stops_the_command(make_cfg, monkeypatch):
    """As for the model: optax's factory, called with the learning rate once Hydra has resolved it, failing after
    a Ctrl-C it lost ended as 'could not build optimizer from _target_=optax.adamw: ...', exit 2."""
    import signal

    import zoo.optim
    from zoo import preemption

    def make(**kwargs):
        try:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        except KeyboardInterrupt:
            pass
        raise TypeError("unsupported operand type(s) for *: 'NoneType' and 'float'")

    monkeypatch.setattr(zoo.optim, "safe_instantiate", lambda node, where, **kwargs: make)
    with preemption.interrupts_remembered():
        with pytest.raises(KeyboardInterrupt):
            build_optimizer(make_cfg("debug=smoke"), total_steps=100)


@pytest.mark.parametrize("overrides", [
    ["debug=smoke", "trainer.max_steps=12", "optimizer.learning_rate=0.05", "seed=1"],
    ["model=cnn", "+trainer.extra=1", "model.channels=[4,8]"],
    ["model=linear", "dataset=diabetes", "optimizer=sgd", "schedule=warmup_cosine", "schedule.warmup_steps=3"],
    ["experiment=digits_cnn_cosine", "hparams_search=digits_mlp", "hydra.job.chdir=true"],
    ["model=mlp", "paths.data_dir=/elsewhere", "trainer.resume=${paths.output_dir}/c", "~trainer.early_stopping"],
    ["~checkpoint.keep"], ["trainer.no_such_setting=1"], ["model=no_such_model"]])
def test_the_suites_compositions_are_hydras(tmp_path, overrides):
    """make_cfg keeps each choice of config groups' merged config and applies a test's value overrides to a copy
    (conftest.composed): what it gives must be what Hydra's compose gives, errors included."""
    import conftest
    from hydra import compose, initialize_config_dir

    def outcome(make):
        try:
            cfg = make()
        except Exception as e:  # noqa: BLE001 — the same refusal either way
            return type(e), str(e)
        return OmegaConf.to_yaml(cfg), OmegaConf.is_struct(cfg)

    for _ in range(2):  # composed, then copied from what was kept
        ours = outcome(lambda: conftest.composed("train", [f"paths.output_dir={tmp_path}", *overrides]))
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            hydras = outcome(lambda: compose("train", [f"paths.output_dir={tmp_path}", *overrides]))
        assert ours == hydras
