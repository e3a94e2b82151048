"""No raw tracebacks: random mixes of valid and invalid overrides either train or fail with a catalog message.

Hydra's ConfigCompositionException (unknown option, key or type) and zoo's UserError are the catalog
(docs/errors.md); any other exception is a bug. In-process for speed. `ZOO_FUZZ_EXAMPLES=200` tries more;
run with -s to see how many combinations were tried and how they ended.
"""
import collections
import os
import re
import tempfile

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from conftest import CONF
from zoo.errors import UserError
from zoo.train import train

GROUPS = {  # valid options first; the last one of each is not an option
    "model": ["mlp", "linear", "cnn", "transformer"],
    "dataset": ["digits", "diabetes", "synthetic_linear", "imagenet"],  # embedded only: no downloads
    "optimizer": ["adamw", "adam", "sgd", "lamb"],
    "schedule": ["constant", "warmup_cosine", "cosine"],
    "parallel": ["none", "pmap", "sharded", "spmd"],
    "logger": ["quiet", "default", "loud"],
}
VALUES = {  # setting -> (valid values, invalid values); "abc" is a wrong type
    "trainer.batch_size": ([8, 16, 32], [0, -4, 5000, "abc"]),
    "trainer.epochs": ([1, 2], [0, -1]),
    "trainer.max_steps": (["null", 2, 5], [0, -3]),
    "trainer.eval_batch_size": ([7, 64], [0]),
    "trainer.log_every": ([1, 3], [0]),
    "trainer.eval_every": ([0, 2], [-1]),
    "trainer.steps_per_call": ([1, 2], [0]),
    "trainer.clip_norm": (["null", 1.0], [0, -1.0]),
    "trainer.nan_check": (["log", "step"], ["sometimes"]),
    "trainer.checkpoint_every": ([0, 2], [-1]),
    "trainer.accumulate": ([1, 2], [0]),
    "trainer.ema_decay": (["null", 0.9], [1.0]),
    "trainer.early_stopping.patience": (["null", 2], [0]),
    "optimizer.learning_rate": ([1e-3, 0.1], [0, -1, 1e6, "fast"]),  # 1e6 diverges: the NaN guard's message
    "model.dropout": ([0.0, 0.3], [1.0, -0.1]),  # linear has no dropout: Hydra refuses the key
    "parallel.cpu_devices": (["null", 1, 2, 4], [3, 16, 1000]),
    "dataset.validation_fraction": ([0.0, 0.1], [1.0]),
    "optimized_metric": (["null", "test/loss"], ["test/f1"]),
    "seed": ([0, 1], ["x", -1]),
    "optimizer.weight_decay": ([0.0, 1e-4], [-0.1]),
    "debug": (["smoke"], ["verbose"]),  # always smoke-sized unless invalid: a full run would take minutes
}
TINY = {"mlp": ["model.hidden=[8]"], "cnn": ["model.channels=[4]", "model.dense=8"]}
OUTCOMES = collections.Counter()


ALL_KEYS = list(VALUES) + list(GROUPS)  # hypothesis favours early entries: value errors reach deeper code


@st.composite
def overrides(draw) -> list:
    """Mostly valid settings with at most two invalid ones, so that runs train as well as fail."""
    bad = set(draw(st.lists(st.sampled_from(ALL_KEYS), max_size=2, unique=True)))
    chosen = []
    for group, options in GROUPS.items():
        if group in bad:
            chosen.append(f"{group}={options[-1]}")
        elif draw(st.booleans()):
            chosen.append(f"{group}={draw(st.sampled_from(options[:-1]))}")
    model = next((o.split("=")[1] for o in chosen if o.startswith("model=")), "mlp")
    chosen += TINY.get(model, [])
    for key, (valid, invalid) in VALUES.items():
        if key in bad:
            chosen.append(f"{key}={draw(st.sampled_from(invalid))}")
        elif key == "debug" or draw(st.booleans()):
            chosen.append(f"{key}={draw(st.sampled_from(valid))}")
    return chosen


def setting_names(cfg) -> set:
    """Every dotted key of the composed config ('trainer.batch_size', 'model', ...) and the run directory."""
    names = {"hydra.run.dir"}

    def walk(node, prefix):
        for key, value in node.items():
            names.add(prefix + key)
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")

    walk(OmegaConf.to_container(cfg), "")
    return names


def names_a_setting(message: str, cfg) -> bool:
    """A dotted key of this config as a whole word, or a top-level one as `key=` (`model=cnn`): `jax.nn` or `e.g`
    name nothing."""
    patterns = [re.escape(name) + (r"(?![\w])" if "." in name else "=") for name in setting_names(cfg)]
    return any(re.search(r"(?<![\w.])" + pattern, message) for pattern in patterns)


def outcome(args: list, data_dir: str) -> str:
    with tempfile.TemporaryDirectory() as out:
        base = [f"paths.data_dir={data_dir}", "paths.compilation_cache_dir=null", f"paths.output_dir={out}"]
        try:
            with initialize_config_dir(config_dir=str(CONF), version_base=None):
                cfg = compose(config_name="train", overrides=base + args)
        except ConfigCompositionException:  # includes Hydra's MissingConfigException
            return "refused by Hydra"
        try:
            results = train(cfg)
        except UserError as e:
            message = str(e)
            assert message and "\n" not in message, f"not one line: {message!r}"
            assert names_a_setting(message, cfg), f"names no setting: {message!r}"
            return f"UserError ({type(e).__name__})"
        assert results["test"]["count"] > 0
        return "trained"


def test_random_overrides_train_or_fail_with_a_catalog_message(data_dir):
    @settings(max_examples=int(os.environ.get("ZOO_FUZZ_EXAMPLES", 25)), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(overrides())
    def check(args):
        OUTCOMES[outcome(args, data_dir)] += 1  # anything else raised fails the test, with these args

    check()
    print(f"\n{sum(OUTCOMES.values())} override combinations: {dict(OUTCOMES)}")
    assert OUTCOMES["trained"]  # hypothesis starts from the simplest example: defaults, which train
