"""Shared fixtures: 8 simulated CPU devices, one prepared data dir per session, Hydra compose helper."""
import atexit
import copy
import os
import pathlib
import shutil
import signal
import tempfile

import jax

# The temporary folders of this test process and of the commands it starts go under one of its own, removed at its
# end: TFDS leaves an empty one behind at each catalog builder that asks its bucket for metadata
# (DatasetInfo.initialize_from_bucket's tempfile.mkdtemp), and a suite run left ~40 of them in the system's /tmp.
SCRATCH = tempfile.mkdtemp(prefix="zoo-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = SCRATCH
atexit.register(shutil.rmtree, SCRATCH, True)

jax.config.update("jax_num_cpu_devices", 8)  # before any JAX work in the test process
assert len(jax.devices()) == 8  # start the backend now, so runs asking for fewer devices select, not resize
# One persistent compilation cache per test process and the runs it starts, as a user's runs share
# ~/.cache/zoo/jax: the many runs of the same tiny configs compile each program once. Per process, not per
# session, so that two xdist workers never read an entry the other is still writing. (JAX puts the cache's path
# in its keys, so each worker's folder serves only it; one folder for both, tried on a whole run, held 1,395
# programs against 1,411 in two: the workers' tests compile different programs, and the run was no faster.)
COMPILATION_CACHE = tempfile.mkdtemp(prefix="zoo-test-compilation-cache-")
atexit.register(shutil.rmtree, COMPILATION_CACHE, True)

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra._internal.config_loader_impl import ConfigLoaderImpl  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from hydra.core.override_parser.overrides_parser import OverridesParser  # noqa: E402

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
        return composed(config_name, base + list(overrides))

    return make


_COMPOSED = {}  # (config name, the overrides that choose config groups) -> the config merged from them
_PARSER = OverridesParser.create()


def composed(config_name: str, overrides: list):
    """Hydra's compose of `config_name` with `overrides`, made as Hydra makes it: the config files the config groups
    choose, merged, then the value overrides applied (ConfigLoaderImpl._apply_overrides_to_config). The merged
    config is made once per process for each choice of groups and copied, as zoo.sweeps.compose_once reuses it for
    a sweep's jobs: Hydra takes ~0.1 s a composition, and most tests make several."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        try:
            parsed = _PARSER.parse_overrides(overrides)
        except Exception:  # noqa: BLE001 — Hydra's compose raises it as the test expects
            parsed = None
        if parsed is None or any(o.is_sweep_override() for o in parsed):
            return compose(config_name=config_name, overrides=overrides)
        repo = GlobalHydra.instance().hydra.config_loader.repository
        values = [o for o in parsed if not o.is_hydra_override() and (isinstance(o.value(), dict) or
                                                                      not repo.group_exists(o.key_or_group))]
        key = (config_name, tuple(o.input_line for o in parsed if not any(o is v for v in values)))
        if key not in _COMPOSED:
            _COMPOSED[key] = compose(config_name=config_name, overrides=list(key[1]))
    cfg = copy.deepcopy(_COMPOSED[key])
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    return cfg


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


# train.py with orbax's final rename of step KILL_AT replaced by SIGKILL: the process dies mid-save, its
# temporary directory fully written but never renamed, the worst moment for a kill. Run it as
# `python -c KILL_IN_SAVE <train.py's arguments>` with KILL_AT in the environment.
KILL_IN_SAVE = """
import os, runpy, signal, sys
from orbax.checkpoint._src.path import atomicity
rename = atomicity.AtomicRenameTemporaryPath.finalize
async def finalize(self):
    if self._final_path.name == os.environ["KILL_AT"]:
        os.kill(os.getpid(), signal.SIGKILL)
    return await rename(self)
atomicity.AtomicRenameTemporaryPath.finalize = finalize
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""
