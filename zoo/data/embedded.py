"""Offline datasets written as real TFDS datasets (array_record, no TensorFlow needed).

Prepared once into `paths.data_dir`, then read through `tfds.data_source` like any catalog dataset.
The split is made here, deterministically, because the sources ship without one.
"""
import abc
import functools

import numpy as np
import tensorflow_datasets as tfds

SPLIT_SEED = 0  # the train/test split never depends on the run's seed


def synthetic_linear_params(num_features: int, seed: int = SPLIT_SEED):
    """The true W (features, 1) and b (1,) behind `synthetic_linear`."""
    rng = np.random.default_rng([seed, 1])
    return rng.normal(size=(num_features, 1)).astype(np.float32), rng.normal(size=(1,)).astype(np.float32)


def _split_indices(n: int, test_fraction: float):
    order = np.random.default_rng(SPLIT_SEED).permutation(n)
    n_test = int(round(n * test_fraction))
    return {"train": np.sort(order[n_test:]), "test": np.sort(order[:n_test])}


class _MadeHere(tfds.core.DatasetInfo):
    def initialize_from_bucket(self) -> None:
        """No lookup on TFDS's bucket, where no embedded dataset is: at every builder of one not prepared yet, it
        asked the network and left an empty temporary directory behind (tempfile.mkdtemp, never removed)."""


class _ArrayBuilder(tfds.core.GeneratorBasedBuilder):
    """A builder over in-memory arrays `x`, `y`; subclasses say where the arrays come from."""

    VERSION = tfds.core.Version("1.0.0")
    x_shape: tuple = ()
    y_spec: tuple = ((), np.int64)
    num_classes: int | None = None  # a classification set's label count

    def __init__(self, *, test_fraction: float = 0.2, **kwargs):
        self.test_fraction = test_fraction
        super().__init__(**kwargs)

    @abc.abstractmethod
    def arrays(self):
        """Return all examples as (x, y) numpy arrays."""

    @functools.cached_property
    def examples(self):
        """`arrays()`, made once: the split sizes are checked before preparing, which then writes them."""
        return self.arrays()

    def split_sizes(self) -> dict:
        """{'train': n, 'test': n} that preparing would write."""
        return {name: len(idx) for name, idx in _split_indices(len(self.examples[0]), self.test_fraction).items()}

    def _info(self):
        y_shape, y_dtype = self.y_spec
        features = tfds.features.FeaturesDict({
            "x": tfds.features.Tensor(shape=self.x_shape, dtype=np.float32),
            "y": tfds.features.Tensor(shape=y_shape, dtype=y_dtype),
        })
        return _MadeHere(builder=self, features=features, supervised_keys=("x", "y"))

    def _split_generators(self, dl_manager):
        x, y = self.examples
        splits = _split_indices(len(x), self.test_fraction)
        return {name: self._generate_examples(x, y, idx) for name, idx in splits.items()}

    def _generate_examples(self, x, y, indices):
        for i in indices:
            yield int(i), {"x": x[i], "y": y[i]}


class ZooDigits(_ArrayBuilder):
    """scikit-learn's 8x8 handwritten digits: 1,797 images, 10 classes, pixel values 0..16."""

    x_shape = (8, 8, 1)
    num_classes = 10  # labels 0..9

    def arrays(self):
        from sklearn.datasets import load_digits

        d = load_digits()
        return d.images[..., None].astype(np.float32), d.target.astype(np.int64)


class ZooDiabetes(_ArrayBuilder):
    """scikit-learn's diabetes regression set: 442 rows, 10 features, unscaled target."""

    x_shape = (10,)
    y_spec = ((1,), np.float32)

    def arrays(self):
        from sklearn.datasets import load_diabetes

        x, y = load_diabetes(return_X_y=True, scaled=False)
        return x.astype(np.float32), y.astype(np.float32)[:, None]


class ZooSyntheticLinear(_ArrayBuilder):
    """y = x W + b + noise with a known W, b (see `synthetic_linear_params`)."""

    y_spec = ((1,), np.float32)

    def __init__(self, *, num_examples: int = 1000, num_features: int = 8, noise: float = 0.1, **kwargs):
        self.num_examples, self.num_features, self.noise = num_examples, num_features, noise
        self.x_shape = (num_features,)
        super().__init__(**kwargs)

    def arrays(self):
        w, b = synthetic_linear_params(self.num_features)
        rng = np.random.default_rng([SPLIT_SEED, 2])
        x = rng.normal(size=(self.num_examples, self.num_features)).astype(np.float32)
        noise = self.noise * rng.normal(size=(self.num_examples, 1))
        with np.errstate(over="ignore"):  # a noise beyond float32 gives inf, refused with a sentence that names it
            return x, (x @ w + b + noise).astype(np.float32)


BUILDERS = {"zoo_digits": ZooDigits, "zoo_diabetes": ZooDiabetes, "zoo_synthetic_linear": ZooSyntheticLinear}
