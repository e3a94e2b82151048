"""Datasets: embedded TFDS builders, catalog sources, and the in-memory pipeline."""
from zoo.data.pipeline import Dataset, Split, TrainStream, build_dataset, eval_batches
from zoo.data.sources import read_splits


def load_dataset(cfg, data_dir: str) -> Dataset:
    return build_dataset(cfg, read_splits(cfg, data_dir))


__all__ = ["Dataset", "Split", "TrainStream", "build_dataset", "eval_batches", "load_dataset", "read_splits"]
