"""Datasets: embedded TFDS builders, catalog sources, and the in-memory pipeline."""
from zoo.data.pipeline import Dataset, Split, TrainStream, build_dataset, eval_batches
from zoo.data.sources import read_splits, too_big


def load_dataset(cfg, data_dir: str, new_run: bool = True) -> Dataset:
    arrays = read_splits(cfg, data_dir, new_run)
    try:  # normalising makes a float32 copy of every split
        return build_dataset(cfg, arrays)
    except MemoryError:
        raise too_big(cfg) from None


__all__ = ["Dataset", "Split", "TrainStream", "build_dataset", "eval_batches", "load_dataset", "read_splits"]
