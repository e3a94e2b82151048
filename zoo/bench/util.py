"""Benchmark plumbing: sizes, config composition, synthetic images, interleaved timing, result rows."""
import contextlib
import dataclasses
import os
import pathlib
import tempfile
import time
from unittest import mock

import jax
import numpy as np
from hydra import compose, initialize_config_dir

from zoo.config import register_configs
from zoo.data import build_dataset

ROOT = pathlib.Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def scratch_dir(work_dir, prefix: str):
    """`work_dir` where one is given (kept, to look at afterwards), else a temporary folder removed at the end: a
    benchmark's runs leave checkpoints and logs nobody asked to keep."""
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
        yield work_dir
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        yield work


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much work each section does. QUICK keeps every row but shrinks models and repetitions."""

    image: tuple = (28, 28, 1)  # MNIST-shaped synthetic inputs for the step comparisons
    n_train: int = 2048
    mlp_hidden: tuple = (512, 512)
    cnn_channels: tuple = (32, 64)
    cnn_dense: int = 128
    batch: dict = dataclasses.field(default_factory=lambda: {"mlp": 128, "cnn": 128, "linear": 32})
    rounds: dict = dataclasses.field(default_factory=lambda: {"mlp": 15, "cnn": 5, "linear": 15})
    # steps per round; linear's rounds last ~0.1 s (with 300 steps, 13 ms: a scheduler hiccup moved the median)
    steps: dict = dataclasses.field(default_factory=lambda: {"mlp": 20, "cnn": 2, "linear": 2000})
    loop_steps: dict = dataclasses.field(default_factory=lambda: {"mlp": 100, "linear": 1000})
    loop_rounds: int = 7
    chunk_ks: tuple = (1, 4, 16, 50)  # 50: the default, a call to the next log boundary
    chunk_steps: dict = dataclasses.field(default_factory=lambda: {"linear": 8000, "mlp": 400})
    chunk_rounds: int = 15  # paired per-round ratios: with 5 the median moved ±15% between runs here
    chunk_mlp_hidden: tuple = (256, 256)  # conf/model/mlp.yaml
    cold_reps: int = 3
    tta_max_steps: int = 0  # 0: the configured epochs
    tta_eval_every: int = 10
    tta_overrides: dict = dataclasses.field(default_factory=dict)  # model -> extra overrides
    load_examples: int = 70000  # data_load: MNIST-sized synthetic_linear
    load_features: int = 784
    load_rounds: int = 5
    shared_cache: bool = False  # in-process runs share a persistent compilation cache (quick mode: speed)


# Quick: every row, tiny work. Shapes are aligned (digits-sized images, batch 64 as conf/trainer) so the
# step, chunking and time-to-accuracy runs compile the same programs and share them through the cache.
QUICK = Sizes(image=(8, 8, 1), n_train=256, mlp_hidden=(16,), cnn_channels=(4, 8), cnn_dense=16,
              batch={"mlp": 64, "cnn": 64, "linear": 32}, rounds={"mlp": 2, "cnn": 2, "linear": 2},
              steps={"mlp": 3, "cnn": 2, "linear": 5}, loop_steps={"mlp": 10, "linear": 10}, loop_rounds=2,
              chunk_ks=(1, 2), chunk_steps={"linear": 32, "mlp": 32}, chunk_rounds=1, chunk_mlp_hidden=(16,),
              cold_reps=1, tta_max_steps=4, tta_eval_every=2,
              tta_overrides={"mlp": ["model.hidden=[16]"], "cnn": ["model.channels=[4,8]", "model.dense=16"]},
              load_examples=500, load_features=16, load_rounds=1, shared_cache=True)


@dataclasses.dataclass(frozen=True)
class Where:
    data_dir: str  # prepared TFDS datasets
    work: str  # scratch: run outputs, caches
    cache_dir: str = None  # persistent compilation cache for in-process builds; None: none



def compose_cfg(overrides, data_dir: str, out_dir: str, cache_dir=None):
    """The train config exactly as `python train.py OVERRIDES` would see it (minus Hydra's run dir)."""
    register_configs()
    base = [f"paths.data_dir={data_dir}", f"paths.output_dir={out_dir}",
            f"paths.compilation_cache_dir={cache_dir or 'null'}"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose(config_name="train", overrides=base + list(overrides))


@contextlib.contextmanager
def synthetic_images(shape: tuple, n_train: int, n_test: int = 256, seed: int = 0):
    """Make zoo.train.build load random (N, *shape) images with 10 classes instead of reading TFDS."""

    def load(dataset_cfg, data_dir, new_run=True):  # zoo.data.load_dataset's signature
        rng = np.random.default_rng(seed)
        arrays = {split: (rng.random((n, *shape), np.float32), rng.integers(0, 10, n))
                  for split, n in (("train", n_train), ("test", n_test))}
        return build_dataset(dataset_cfg, arrays)

    with mock.patch("zoo.train.load_dataset", load):
        yield


def timed(fn) -> float:
    """Seconds for fn() including the device work it queued."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def round_order(names: list, r: int) -> list:
    """Round r's order: A,B,... / ...,B,A alternately, so drift and noise hit all alike."""
    return names if r % 2 == 0 else names[::-1]


def interleave(fns: dict, rounds: int, warmup: int = 1) -> dict:
    """name -> per-round seconds, in rounds of alternating order (round_order)."""
    for _ in range(warmup):
        for fn in fns.values():
            timed(fn)
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in round_order(names, r):
            times[name].append(timed(fns[name]))
    return times


def spread(values) -> dict:
    v = np.asarray(values, np.float64)
    q25, med, q75 = np.percentile(v, [25, 50, 75])
    return {"median": float(med), "q25": float(q25), "q75": float(q75), "min": float(v.min()),
            "max": float(v.max()), "n": int(v.size)}


def row(row_id: str, values, unit: str, target=None, note: str = "", **detail) -> dict:
    """One table row. `values` is a list of per-round numbers (median and IQR reported) or one number.

    `target` is (op, threshold) with op in {">=", "<="}, or None when the row is a plain measurement.
    """
    stats = spread(values) if isinstance(values, (list, tuple, np.ndarray)) and len(values) else None
    value = stats["median"] if stats else values
    met = None
    if target is not None and value is not None:
        op, threshold = target
        met = bool(value >= threshold) if op == ">=" else bool(value <= threshold)
    return {"id": row_id, "value": value, "spread": stats, "unit": unit,
            "target": f"{target[0]} {target[1]}" if target else None, "met": met, "note": note, **detail}


def per_step(seconds: list, steps: int) -> list:
    return [s / steps for s in seconds]


def ratios(numerators: list, denominators: list) -> list:
    """Per-round paired ratios (round r of A against round r of B)."""
    return [a / b for a, b in zip(numerators, denominators)]


def median(values) -> float:
    return float(np.median(np.asarray(values, np.float64)))
