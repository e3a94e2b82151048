"""What a user gets with no overrides: every model x dataset pair reaches its baseline on the same split.

Only logger and paths are overridden, so these runs use the real defaults (conf/recipe/ included).
"""
import functools

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.svm import SVC
from threadpoolctl import threadpool_limits

from zoo.data import load_dataset
from zoo.data.embedded import synthetic_linear_params
from zoo.train import train


# The baselines fit in one BLAS thread: beside other work OpenBLAS's threads spin waiting for each other (the
# MLPClassifier's fit took 36 s, not 2.5 s, on a busy 2-core machine); the scores are the same.
one_blas_thread = functools.partial(threadpool_limits, 1)


def _splits(make_cfg, dataset):
    cfg = make_cfg(f"dataset={dataset}")
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    flat = lambda s: (s.x.reshape(len(s.x), -1), s.y)  # noqa: E731
    return flat(data.splits["train"]), flat(data.splits["test"])


def least_squares_r2(make_cfg, dataset) -> float:
    (x, y), (x_test, y_test) = _splits(make_cfg, dataset)
    design = lambda a: np.hstack([a, np.ones((len(a), 1))])  # noqa: E731
    coef, *_ = np.linalg.lstsq(design(x), y, rcond=None)
    residual = y_test - design(x_test) @ coef
    return float(1 - np.sum(residual**2) / np.sum((y_test - y_test.mean()) ** 2))


def logistic_regression_accuracy(make_cfg, dataset) -> float:
    (x, y), (x_test, y_test) = _splits(make_cfg, dataset)
    with one_blas_thread():
        return float(LogisticRegression(max_iter=5000).fit(x, y).score(x_test, y_test))


def run_defaults(make_cfg, model, dataset):
    return train(make_cfg(f"model={model}", f"dataset={dataset}", "logger=quiet"))


@pytest.mark.parametrize("model,dataset,margin", [("linear", "diabetes", 0.01), ("linear", "synthetic_linear", 0.005),
                                                  ("mlp", "diabetes", 0.03), ("mlp", "synthetic_linear", 0.03)])
def test_regression_defaults_reach_least_squares(make_cfg, model, dataset, margin):
    r2 = run_defaults(make_cfg, model, dataset)["test"]["r2"]
    baseline = least_squares_r2(make_cfg, dataset)
    assert r2 >= baseline - margin, (r2, baseline)
    if model == "linear":
        assert abs(r2 - baseline) <= margin, (r2, baseline)


def test_linear_defaults_recover_synthetic_weights(make_cfg):
    cfg = make_cfg("model=linear", "dataset=synthetic_linear", "logger=quiet")
    params = train(cfg)["state"].params
    w, b = synthetic_linear_params(cfg.dataset.num_features)
    np.testing.assert_allclose(np.asarray(params["dense"]["kernel"][...]), w, atol=1e-2)
    np.testing.assert_allclose(np.asarray(params["dense"]["bias"][...]), b, atol=1e-2)


def test_softmax_regression_defaults_match_logistic_regression(make_cfg):
    accuracy = run_defaults(make_cfg, "linear", "digits")["test"]["accuracy"]
    assert accuracy >= logistic_regression_accuracy(make_cfg, "digits")


def test_mlp_defaults_reach_scikit_learns_mlp_of_the_same_widths(make_cfg):
    (x, y), (x_test, y_test) = _splits(make_cfg, "digits")
    with one_blas_thread():
        baseline = MLPClassifier((256, 256), max_iter=500, random_state=0).fit(x, y).score(x_test, y_test)
    accuracy = run_defaults(make_cfg, "mlp", "digits")["test"]["accuracy"]
    assert accuracy >= baseline, (accuracy, baseline)


def test_cnn_defaults_reach_a_support_vector_machine(make_cfg):
    """Among scikit-learn's classic classifiers on these 8x8 digits, RBF SVC is the strongest (0.9916, as k-NN)."""
    (x, y), (x_test, y_test) = _splits(make_cfg, "digits")
    with one_blas_thread():
        baseline = SVC().fit(x, y).score(x_test, y_test)
    accuracy = run_defaults(make_cfg, "cnn", "digits")["test"]["accuracy"]
    assert accuracy >= baseline, (accuracy, baseline)
