"""Checkpoints: round trip, resume == uninterrupted (bitwise), cross-mode restore, eval.py, refusals."""
import json
import pathlib
import signal

import jax
import numpy as np
import pytest

from zoo.checkpoint import Checkpoints
from zoo.errors import UserError
from zoo.evaluate import evaluate
from zoo.preemption import Preempted
from zoo.run_logger import RunLogger
from zoo.train import build, train


def leaves_equal(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def records(run_dir):
    """metrics.jsonl without the timing field, which differs run to run."""
    rows = [json.loads(line) for line in open(pathlib.Path(run_dir) / "metrics.jsonl")]
    return [{k: v for k, v in r.items() if k != "examples_per_s"} for r in rows]


def eval_cfg(make_cfg, run_dir, *overrides):
    return make_cfg(f"run_dir={run_dir}", *overrides, config_name="eval")


def test_round_trip_of_the_full_state(make_cfg, tmp_path):
    run = build(make_cfg("model=cnn", "debug=smoke"))
    tree = {"state": jax.device_get(run.host_state), "sums": run.compiled.zero_sums}
    ckpts = Checkpoints(str(tmp_path / "ckpt"))
    ckpts.save(7, tree, {"step": 7, "config": {}})
    ckpts.wait()
    restored, meta = Checkpoints(str(tmp_path / "ckpt"), read_only=True).restore(7, tree)
    assert meta["step"] == 7 and leaves_equal(restored, tree)
    assert jax.tree.structure(restored) == jax.tree.structure(tree)
    assert len(jax.tree.leaves(restored["state"].model_state)) == 4  # BatchNorm mean/var of both convs


@pytest.mark.parametrize("mode", ["parallel.mode=none", "parallel.mode=pmap"])
def test_preempted_then_resumed_is_bitwise_identical_to_uninterrupted(make_cfg, monkeypatch, mode):
    common = ["model=cnn", "model.dropout=0.2", mode, "parallel.cpu_devices=2", "debug=smoke", "trainer.max_steps=8",
              "trainer.checkpoint_every=3", "trainer.log_every=1", "trainer.eval_every=4"]
    whole = train(make_cfg(*common, out="whole"))

    def sigterm_at_step_5(self, step, *args):
        if step == 5:
            signal.raise_signal(signal.SIGTERM)

    with monkeypatch.context() as patch:
        patch.setattr(RunLogger, "progress", sigterm_at_step_5)
        with pytest.raises(Preempted, match="stopped by SIGTERM at step 5"):
            train(make_cfg(*common, out="resumed"))
    resumed = train(make_cfg(*common, out="resumed"))
    assert resumed["start_step"] == 5
    assert leaves_equal(whole["state"], resumed["state"])
    assert whole["test"] == resumed["test"]
    assert records(make_cfg(out="whole").paths.output_dir) == records(make_cfg(out="resumed").paths.output_dir)


def test_checkpoint_from_pmap_restores_under_none_and_sharded(make_cfg, tmp_path):
    results = train(make_cfg("model=cnn", "debug=smoke", "parallel.mode=pmap", "parallel.cpu_devices=4"))
    run_dir = tmp_path / "run"
    for overrides in (["parallel=none"], ["parallel.mode=sharded", "parallel.cpu_devices=2"],
                      ["parallel.mode=pmap", "parallel.cpu_devices=4", "trainer.batch_size=7"]):
        evaluated = evaluate(eval_cfg(make_cfg, run_dir, *overrides))["metrics"]
        assert evaluated["count"] == results["test"]["count"] == 359
        np.testing.assert_allclose(evaluated["loss"], results["test"]["loss"], rtol=1e-6)
        assert evaluated["accuracy"] == results["test"]["accuracy"]
    assert (run_dir / "eval" / "test-6.json").exists()


def test_eval_picks_best_latest_and_steps(make_cfg, tmp_path):
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2", "trainer.eval_every=2"))
    run_dir = tmp_path / "run"
    steps = Checkpoints(str(run_dir / "checkpoints"), read_only=True).steps()
    assert steps == [2, 4, 6]
    assert evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=4"))["step"] == 4
    assert evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=latest"))["step"] == 6
    best = evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=best"))
    logged = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    accuracy_by_step = {r["step"]: r["accuracy"] for r in logged if r["split"] == "test"}
    assert best["metrics"]["accuracy"] == max(accuracy_by_step.values()) == accuracy_by_step[best["step"]]
    with pytest.raises(UserError, match=r"checkpoint=5 is not in .*\[2, 4, 6\]"):
        evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=5"))


def test_corrupt_latest_falls_back_only_for_latest(make_cfg, tmp_path, caplog):
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2"))
    run_dir = tmp_path / "run"
    for blob in (run_dir / "checkpoints" / "6" / "state").rglob("d/*"):
        if blob.is_file():
            blob.write_bytes(b"truncated")
    result = evaluate(eval_cfg(make_cfg, run_dir))
    assert result["step"] == 4 and "Falling back" in caplog.text
    with pytest.raises(UserError, match=r"checkpoint step 6 .* cannot be restored"):
        evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=6"))


def test_disallowed_target_in_a_run_dir_is_refused(make_cfg, tmp_path):
    train(make_cfg("debug=smoke"))
    meta_file = tmp_path / "run" / "checkpoints" / "6" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta["config"]["model"]["_target_"] = "os.system"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(UserError, match=r"_target_='os\.system', which is not allowed"):
        evaluate(eval_cfg(make_cfg, tmp_path / "run"))


def test_eval_errors_name_the_problem(make_cfg, tmp_path):
    with pytest.raises(UserError, match=r"run_dir=.* does not exist"):
        evaluate(eval_cfg(make_cfg, tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"has no complete checkpoint"):
        evaluate(eval_cfg(make_cfg, tmp_path / "empty"))


def test_changed_model_or_resume_never_is_refused(make_cfg):
    train(make_cfg("debug=smoke"))
    with pytest.raises(UserError, match=r"model\.hidden \(\[256, 256\] -> \[32\]\)"):
        train(make_cfg("debug=smoke", "model.hidden=[32]"))
    with pytest.raises(UserError, match=r"already holds checkpoints .* trainer\.resume=never"):
        train(make_cfg("debug=smoke", "trainer.resume=never"))
