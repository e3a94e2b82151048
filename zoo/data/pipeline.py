"""In-memory pipeline: normalisation from train statistics, seeded epoch shuffles, padded eval batches.

The stream position is the global step alone: epoch = step // steps_per_epoch, so resuming at any step
reproduces the same batches.
"""
from dataclasses import dataclass

import numpy as np

from zoo.errors import UserError


@dataclass(frozen=True)
class Split:
    x: np.ndarray
    y: np.ndarray

    def __len__(self):
        return len(self.x)


@dataclass(frozen=True)
class Standardizer:
    """(a - mean) / std with statistics fitted on train; kept so an exported model applies the same arithmetic."""

    mean: np.ndarray
    std: np.ndarray

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return ((a - self.mean) / self.std).astype(np.float32)


@dataclass(frozen=True)
class Dataset:
    splits: dict  # name -> Split; always 'train' and 'test', 'validation' when carved
    task: str
    input_shape: tuple
    out_features: int
    x_scaler: Standardizer = None  # raw inputs -> model inputs
    y_scaler: Standardizer = None  # regression only: raw targets -> model targets

    @property
    def eval_split(self) -> str:
        """The split periodic evals report: validation when there is one, test otherwise."""
        return "validation" if "validation" in self.splits else "test"


def _normalizer(x: np.ndarray, how: str) -> Standardizer:
    if how == "none":
        return Standardizer(np.float32(0.0), np.float32(1.0))  # float32 a - 0 and a / 1 are exactly a
    axis = 0 if how == "per_feature" else None
    mean, std = x.mean(axis=axis), x.std(axis=axis)
    std = np.where(std > 1e-6, std, 1.0)  # constant features (e.g. blank border pixels) stay 0
    return Standardizer(mean, std)


def check_contract(cfg, raw: dict) -> None:
    """What every split must hold before anything is compiled: examples, finite float inputs of one shape,
    and targets that fit the task (class ids in range, or finite float rows)."""
    shapes = {name: x.shape[1:] for name, (x, _) in raw.items()}
    for name, (x, y) in raw.items():
        where = f"the {name} split of dataset={cfg.name}"
        if len(x) == 0 or len(x) != len(y):
            lower = " or dataset.test_fraction" if cfg.get("embedded", True) else ""  # a catalog set refuses it
            raise UserError(f"{where} has {len(x)} inputs and {len(y)} targets; it needs as many of each, at least "
                            f"one (lower dataset.validation_fraction{lower} if a split is empty).")
        if shapes[name] != shapes["train"]:
            raise UserError(f"{where} has inputs of shape {shapes[name]} but train has {shapes['train']}; "
                            "delete the prepared dataset in paths.data_dir to prepare it again.")
        if not np.issubdtype(x.dtype, np.floating) or not np.isfinite(x).all():
            raise UserError(f"{where} has non-finite or non-float inputs; delete the prepared dataset in "
                            "paths.data_dir to prepare it again.")
        if cfg.task == "classification":
            if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1 or y.min() < 0 or y.max() >= cfg.num_classes:
                raise UserError(f"labels of the {name} split must be integers in [0, {cfg.num_classes}); check "
                                f"dataset.num_classes (now {cfg.num_classes}) and dataset.task (now classification) "
                                f"for dataset={cfg.name}.")
        elif not np.issubdtype(y.dtype, np.floating) or y.ndim != 2 or not np.isfinite(y).all():
            raise UserError(f"{where} has targets of dtype {y.dtype} and shape {y.shape[1:]}, not finite float rows "
                            "for regression; set dataset.task=classification or pick a regression dataset "
                            "(dataset=diabetes|synthetic_linear).")
    if cfg.task != "classification" and cfg.num_classes is not None:  # checked after the targets: they say more
        raise UserError(f"dataset.num_classes only applies to classification; dataset={cfg.name} is {cfg.task}, so "
                        "remove it (or set dataset.num_classes=null).")


def build_dataset(cfg, arrays: dict) -> Dataset:
    """Carve validation, check the data contract, fit normalisation on train only."""
    x_train, y_train = arrays["train"]
    raw = {"test": arrays["test"]}
    if cfg.validation_fraction > 0:
        order = np.random.default_rng(0).permutation(len(x_train))
        n_val = max(1, int(round(len(x_train) * cfg.validation_fraction)))
        if 0 < len(x_train) <= n_val:  # a split emptied by this setting alone: naming dataset.test_fraction too misled
            raise UserError(f"dataset.validation_fraction={cfg.validation_fraction} carves all {len(x_train)} "
                            f"examples of the train split of dataset={cfg.name} into validation; lower "
                            "dataset.validation_fraction so that train keeps at least one example.")
        raw["validation"] = (x_train[order[:n_val]], y_train[order[:n_val]])
        x_train, y_train = x_train[order[n_val:]], y_train[order[n_val:]]
    raw["train"] = (x_train, y_train)
    check_contract(cfg, raw)
    norm_x = _normalizer(x_train, cfg.normalize)
    if cfg.task == "classification":
        out_features = cfg.num_classes
        norm_y = lambda y: y.astype(np.int32)  # noqa: E731
        y_scaler = None
    else:
        out_features = y_train.shape[-1]
        norm_y = y_scaler = _normalizer(y_train, "per_feature" if cfg.normalize_target else "none")
    splits = {name: Split(norm_x(x), norm_y(y)) for name, (x, y) in raw.items()}
    return Dataset(splits, cfg.task, tuple(x_train.shape[1:]), int(out_features), norm_x, y_scaler)


# A train chunk's mask, per row: 1 an example, 0 a masked row of a step that runs (a DP-SGD step's Poisson sample
# may hold none: it still runs, its update the noise alone), PADDING_STEP every row of a step the call skips.
PADDING_STEP = -1.0


class IndexedStream:
    """What every train stream shares: a step's place in its epoch, and batches gathered by its `indices`."""

    def position(self, step: int) -> tuple:
        return divmod(step, self.steps_per_epoch)  # (epoch, index in epoch)

    def chunk(self, step: int, k: int, pad_to: int | None = None) -> dict:
        """The batches of `indices`, stacked: x (k, B, ...), y (k, B, ...), mask (k, B)."""
        idx, mask = self.indices(step, k, pad_to)
        return {"x": self.split.x[idx], "y": self.split.y[idx], "mask": mask}


class TrainStream(IndexedStream):
    """Fixed-size shuffled batches; the last partial batch of each epoch is dropped (fresh order next epoch)."""

    def __init__(self, split: Split, batch_size: int, seed: int, carved: float = 0.0):
        """`carved`: the dataset.validation_fraction taken out of this split, named when the batch is too big."""
        if batch_size > len(split):
            after, lower = ((f" after dataset.validation_fraction={carved} carved a validation split from it",
                             "trainer.batch_size or dataset.validation_fraction") if carved else
                            ("", "trainer.batch_size"))
            raise UserError(f"trainer.batch_size={batch_size} is larger than the train split "
                            f"({len(split)} examples{after}); lower {lower}.")
        self.split, self.batch_size, self.seed = split, batch_size, seed
        self.steps_per_epoch = len(split) // batch_size
        self._epoch, self._order = -1, None

    def _order_for(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.split))
            self._epoch, self._order = epoch, order.astype(np.int32)
        return self._order

    def indices(self, step: int, k: int, pad_to: int | None = None) -> tuple:
        """Example indices (k, B) int32 of the batches of steps [step, step + k) and their mask (k, B).

        `pad_to` appends copies of the last batch up to that many rows, marked as padding steps (mask
        PADDING_STEP): the train step skips them, so a call of fewer steps keeps the compiled shape."""
        rows, b, done = max(pad_to or k, k), self.batch_size, 0
        idx = np.empty((rows, b), np.int32)
        while done < k:  # one slice per epoch touched
            epoch, i = self.position(step + done)
            m = min(k - done, self.steps_per_epoch - i)
            idx[done:done + m] = self._order_for(epoch)[i * b:(i + m) * b].reshape(m, b)
            done += m
        idx[k:] = idx[k - 1]
        mask = np.full((rows, b), PADDING_STEP, np.float32)
        mask[:k] = 1.0
        return idx, mask


def eval_batches(split: Split, batch_size: int) -> list:
    """Every example exactly once; the last batch is padded with mask 0 so shapes never change."""
    n = len(split)
    batches = []
    for start in range(0, n, batch_size):
        idx = np.arange(start, start + batch_size)
        valid = idx < n
        idx = np.where(valid, idx, 0)
        batches.append({"x": split.x[idx], "y": split.y[idx], "mask": valid.astype(np.float32)})
    return batches
