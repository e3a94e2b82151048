"""Shared fixtures: 8 simulated CPU devices, one prepared data dir per session, Hydra compose helper."""
import atexit
import os
import pathlib
import shutil
import signal
import tempfile

import jax

jax.config.update("jax_num_cpu_devices", 8)  # before any JAX work in the test process
assert len(jax.devices()) == 8  # start the backend now, so runs asking for fewer devices select, not resize
# One persistent compilation cache per test process and the runs it starts, as a user's runs share
# ~/.cache/zoo/jax: the many runs of the same tiny configs compile each program once. Per process, not per
# session, so that two xdist workers never read an entry the other is still writing.
COMPILATION_CACHE = tempfile.mkdtemp(prefix="zoo-test-compilation-cache-")
atexit.register(shutil.rmtree, COMPILATION_CACHE, True)

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from zoo.config import register_configs  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
register_configs()


@pytest.fixture(autouse=True)
def no_stop_signal_from_an_earlier_test():
    """A stop signal a test's in-process run handled is process-wide state (zoo.preemption.received(), which a
    real multirun forgets at its start): each test starts without one, and outside a sweep."""
    from zoo import preemption

    preemption.forget()
    preemption.sweep_runs_jobs_here(False)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tensorflow_datasets"))


@pytest.fixture
def make_cfg(data_dir, tmp_path):
    """make_cfg(*overrides) -> a composed train config writing into this test's tmp dir."""

    def make(*overrides, config_name="train", out="run"):
        base = [f"paths.data_dir={data_dir}", f"paths.compilation_cache_dir={COMPILATION_CACHE}"]
        if config_name == "train":
            base.append(f"paths.output_dir={tmp_path / out}")
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            return compose(config_name=config_name, overrides=base + list(overrides))

    return make


def subprocess_env(data_dir: str) -> dict:
    env = dict(os.environ, TFDS_DATA_DIR=data_dir, ZOO_COMPILATION_CACHE=COMPILATION_CACHE, PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    return env


class SignalAtRead:
    """A stop flag (zoo.preemption.StopFlag) whose SIGTERM lands just after the train loop's `n - 1`-th read of
    it: the loop reads it once per call, after the call's step count, checkpoint and eval decisions."""

    def __init__(self, n: int):
        self.n, self.reads, self.signum = n, 0, None

    def __bool__(self):
        self.reads += 1
        if self.reads >= self.n:
            self.signum = signal.SIGTERM
        return self.signum is not None
