"""Training contracts: loss falls, eval is exact for any batch size, runs are deterministic, artifacts exist."""
import json

import numpy as np
import pytest

from zoo.train import train

PAIRS = [("linear", "digits"), ("linear", "diabetes"), ("linear", "synthetic_linear"),
         ("mlp", "digits"), ("mlp", "diabetes"), ("mlp", "synthetic_linear"), ("cnn", "digits")]


def read_jsonl(path):
    return [json.loads(line) for line in open(path)]


@pytest.mark.parametrize("model,dataset", PAIRS, ids=[f"{m}-{d}" for m, d in PAIRS])
def test_loss_falls(make_cfg, tmp_path, model, dataset):
    cfg = make_cfg(f"model={model}", f"dataset={dataset}", "debug=smoke", "trainer.epochs=10", "trainer.max_steps=40", "trainer.batch_size=32",
                   "trainer.log_every=10", "trainer.eval_every=0", "optimizer.learning_rate=1e-2")
    train(cfg)
    losses = [r["loss"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["split"] == "train"]
    assert len(losses) == 4 and losses[-1] < losses[0]


@pytest.mark.parametrize("eval_batch_size", [1, 7, 100, 359, 512])
def test_eval_counts_every_example_once_for_any_batch_size(make_cfg, eval_batch_size):
    # digits' test split has 359 examples (a prime): only 1 and 359 divide it
    results = train(make_cfg("debug=smoke", f"trainer.eval_batch_size={eval_batch_size}"))
    assert results["test"]["count"] == 359
    reference = train(make_cfg("debug=smoke", "trainer.eval_batch_size=359", out="ref"))
    np.testing.assert_allclose(results["test"]["loss"], reference["test"]["loss"], rtol=1e-6)
    assert results["test"]["accuracy"] == reference["test"]["accuracy"]


def test_same_seed_same_metrics_and_other_seed_differs(make_cfg):
    a = train(make_cfg("debug=smoke", "model.dropout=0.1", out="a"))
    b = train(make_cfg("debug=smoke", "model.dropout=0.1", out="b"))
    c = train(make_cfg("debug=smoke", "model.dropout=0.1", "seed=1", out="c"))
    assert a["test"] == b["test"] and a["train"] == b["train"]
    assert a["test"]["loss"] != c["test"]["loss"]


def test_run_artifacts(make_cfg, tmp_path):
    cfg = make_cfg("debug=smoke", "logger.tensorboard=true", "logger.plot=true")
    returned = train(cfg)
    run = tmp_path / "run"
    results = json.loads((run / "results.json").read_text())
    assert results["test"]["count"] == 359 and results["steps"] == 6
    assert results["objective"] == returned["test"]["accuracy"] == results["test"]["accuracy"]
    for key in ("train", "wall_time_s", "examples_per_s"):
        assert key in results
    events = read_jsonl(run / "metrics.jsonl")
    assert [e["step"] for e in events if e["split"] == "train"] == [2, 4, 6]
    assert [e["step"] for e in events if e["split"] == "test"] == [4, 6]
    assert (run / "curves.png").stat().st_size > 0
    assert any((run / "tensorboard").iterdir())


def test_steps_per_call_changes_nothing_but_speed(make_cfg, tmp_path):
    base = ["debug=smoke", "model=mlp", "model.dropout=0.1", "trainer.max_steps=20", "trainer.log_every=10",
            "trainer.eval_every=10"]
    one = train(make_cfg(*base, "trainer.steps_per_call=1", out="k1"))
    five = train(make_cfg(*base, "trainer.steps_per_call=5", out="k5"))
    np.testing.assert_allclose(five["test"]["loss"], one["test"]["loss"], rtol=1e-6)
    losses = lambda d: [r["loss"] for r in read_jsonl(tmp_path / d / "metrics.jsonl") if r["split"] == "train"]  # noqa: E731
    np.testing.assert_allclose(losses("k5"), losses("k1"), rtol=1e-6)
