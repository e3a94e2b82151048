"""Loading a prepared split at MNIST scale (70,000 x 784 float features): decoding the TFDS records once
(batched reads), then every later run from the decoded copy kept beside them (zoo.data.decoded). Preparing
the dataset (a one-time TFDS generation) happens before and is not timed.
"""
import os
import shutil
import time

from zoo.bench.util import compose_cfg, row
from zoo.data import decoded, load_dataset
from zoo.data.sources import _prepare_embedded


def data_load_rows(sizes, where) -> list:
    n, features = sizes.load_examples, sizes.load_features
    cfg = compose_cfg(["dataset=synthetic_linear", f"dataset.num_examples={n}", f"dataset.num_features={features}"],
                      where.data_dir, os.path.join(where.work, "data_load")).dataset
    prepared = _prepare_embedded(cfg, where.data_dir).data_dir

    def load_seconds() -> float:
        start = time.perf_counter()
        load_dataset(cfg, where.data_dir)
        return time.perf_counter() - start

    shutil.rmtree(os.path.join(prepared, decoded.DIRNAME), ignore_errors=True)
    first = load_seconds()  # decodes every record and writes the copy
    again = [load_seconds() for _ in range(sizes.load_rounds)]
    what = f"{n:,} x {features} floats, train + test, load_dataset()"
    return [row("data_load/decode", first, "s", note=f"{what}: records decoded, copy written"),
            row("data_load/decoded_copy", again, "s", target=("<=", 1.0), note=f"{what}: from the decoded copy")]
