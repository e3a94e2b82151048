"""Checkpoints: round trip, resume == uninterrupted (bitwise), cross-mode restore, eval.py, refusals."""
import contextlib
import json
import pathlib
import re
import shutil
import signal

import jax
import numpy as np
import pytest
from omegaconf import OmegaConf
from conftest import SignalAtRead

import zoo.train
from zoo.checkpoint import Checkpoints, StateMismatch
from zoo.errors import UserError
from zoo.evaluate import evaluate
from zoo.preemption import Preempted
from zoo.resume import result_changes
from zoo.data import TrainStream
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
    # every leaf of the target differs from the saved one (a fresh state's moments and sums are zeros): a restore
    # that handed back its target, or any part of it, would compare unequal
    other = jax.tree.map(lambda x: np.asarray(x) + np.ones_like(x), tree)
    assert not any(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(other), jax.tree.leaves(tree)))
    restored, meta = Checkpoints(str(tmp_path / "ckpt"), read_only=True).restore(7, other)
    assert meta["step"] == 7 and leaves_equal(restored, tree)
    assert jax.tree.structure(restored) == jax.tree.structure(tree)
    assert len(jax.tree.leaves(restored["state"].model_state)) == 4  # BatchNorm mean/var of both convs


def stop_at_step(monkeypatch, step: int, signum=signal.SIGTERM, times: int = 1) -> None:
    """`signum` arrives (`times` times) while the compiled call that reaches `step` runs, as a preemption would.

    zoo.loop.fit prepares each call's data while the call before it runs, so the signal goes off as the data
    of the call after that one (the first starting at `step` or later) is prepared."""
    indices = TrainStream.indices  # what every call's data comes from, resident or streamed
    fired = []

    def indices_then_signal(self, start, k, pad_to=None):
        if start >= step and not fired:
            fired.append(start)
            for _ in range(times):
                signal.raise_signal(signum)
        return indices(self, start, k, pad_to)

    monkeypatch.setattr(TrainStream, "indices", indices_then_signal)


# (overrides, step the run stops at). K=3 steps per call reach 3, 4, 6, 8: the stop at 6 falls inside the
# log interval 5..8, so the checkpoint carries non-zero partial metric sums that the resumed run continues.
RESUME_CASES = {
    "cnn-K1-log1": (["model=cnn", "trainer.log_every=1"], 5),
    "mlp-K3-log4": (["model=mlp", "trainer.steps_per_call=3", "trainer.log_every=4"], 6),
}


@pytest.mark.parametrize("case", list(RESUME_CASES))
@pytest.mark.parametrize("mode", ["parallel.mode=none", "parallel.mode=pmap"])
def test_preempted_then_resumed_is_bitwise_identical_to_uninterrupted(make_cfg, monkeypatch, mode, case):
    overrides, stopped_at = RESUME_CASES[case]
    common = [*overrides, "model.dropout=0.2", mode, "parallel.cpu_devices=2", "debug=smoke", "trainer.max_steps=8",
              "trainer.checkpoint_every=3", "trainer.eval_every=4"]
    whole = train(make_cfg(*common, out="whole"))
    with monkeypatch.context() as patch:
        stop_at_step(patch, 5)
        with pytest.raises(Preempted, match=f"stopped by SIGTERM at step {stopped_at}"):
            train(make_cfg(*common, out="resumed"))
    resumed = train(make_cfg(*common, out="resumed"))
    assert resumed["start_step"] == stopped_at
    assert leaves_equal(whole["state"], resumed["state"])
    assert whole["test"] == resumed["test"]
    assert records(make_cfg(out="whole").paths.output_dir) == records(make_cfg(out="resumed").paths.output_dir)


def whole_and_resumed(make_cfg, monkeypatch, overrides, stop_after: int, stopped_at: int) -> tuple:
    """The checkpoints of a run trained whole and of the same run stopped by a signal and resumed."""
    train(make_cfg(*overrides, out="whole"))
    with monkeypatch.context() as patch:
        stop_at_step(patch, stop_after)
        with pytest.raises(Preempted, match=f"at step {stopped_at}"):
            train(make_cfg(*overrides, out="resumed"))
    train(make_cfg(*overrides, out="resumed"))
    return tuple(Checkpoints(str(pathlib.Path(make_cfg(out=out).paths.output_dir) / "checkpoints"), read_only=True)
                 for out in ("whole", "resumed"))


def test_a_stop_at_an_eval_step_leaves_the_best_checkpoint_of_the_uninterrupted_run(make_cfg, monkeypatch):
    """The checkpoint written because of a stop is an extra one: scored by the eval of its step, it became the
    best (eval.py checkpoint=best, export.py) of the resumed run and pushed out the one the whole run keeps."""
    common = ["debug=smoke", "trainer.max_steps=30", "trainer.checkpoint_every=10", "trainer.eval_every=2",
              "optimizer.learning_rate=0.3"]  # test accuracy 0.1504 at step 10, 0.1588 at 12, less from 14 on
    whole, resumed = whole_and_resumed(make_cfg, monkeypatch, common, stop_after=12, stopped_at=12)
    assert whole.best_step() == resumed.best_step() == 10
    assert set(whole.steps()) <= set(resumed.steps())


def test_a_stopped_and_resumed_run_keeps_the_checkpoints_of_the_uninterrupted_run(make_cfg, monkeypatch):
    """The checkpoint written because of a stop (step 8, between the regular 6 and 9) is where the rerun resumes;
    counted among the checkpoint.keep newest, it pushed out step 6, which the uninterrupted run keeps."""
    common = ["debug=smoke", "trainer.max_steps=12", "trainer.checkpoint_every=3", "checkpoint.keep=3"]
    whole, resumed = whole_and_resumed(make_cfg, monkeypatch, common, stop_after=7, stopped_at=8)
    assert resumed.steps() == whole.steps() == [6, 9, 12]


def test_a_finished_run_stopped_while_lengthened_keeps_no_results_of_a_state_it_replaced(make_cfg, monkeypatch):
    """Lengthened, a finished run trains past the state its results.json reports; stopped on the way, that
    results.json would stand beside checkpoints of other steps (eval.py's `final` would not be what it reports)."""
    common = ["debug=smoke", "trainer.checkpoint_every=2", "checkpoint.keep=1"]
    train(make_cfg(*common))
    run_dir = pathlib.Path(make_cfg().paths.output_dir)
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 6
    with monkeypatch.context() as patch:
        stop_at_step(patch, 8)
        with pytest.raises(Preempted):
            train(make_cfg(*common, "trainer.max_steps=12"))
    assert not (run_dir / "results.json").exists()
    assert 6 not in Checkpoints(str(run_dir / "checkpoints"), read_only=True).steps()  # the state it reported is gone
    assert train(make_cfg(*common, "trainer.max_steps=12"))["steps"] == 12
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 12


def test_a_lengthened_run_names_the_length_its_withdrawn_results_reported(make_cfg, caplog):
    """Its final step gone, the run resumes from an older one; the line said that older step was what results.json
    reported."""
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2"))
    run_dir = pathlib.Path(make_cfg().paths.output_dir)
    shutil.rmtree(run_dir / "checkpoints" / "6")
    with caplog.at_level("INFO", logger="zoo"):
        assert train(make_cfg("debug=smoke", "trainer.checkpoint_every=2", "trainer.max_steps=8"))["start_step"] == 4
    assert "results.json of the run's 6 steps is withdrawn while the run trains on" in caplog.text


@pytest.mark.parametrize("stopping", [[], ["trainer.early_stopping.patience=1", "optimizer.learning_rate=1e-9"]],
                         ids=["plain", "early-stopping"])
def test_a_lengthened_run_makes_the_periodic_eval_of_its_old_end(make_cfg, tmp_path, stopping):
    """A run ending at step 4 evaluates there as a finished run (final evals), not periodically; lengthened, it
    drops those final evals and must make the periodic one a run trained 8 steps at once made at step 4: logged,
    and counted by early stopping (at a learning rate too small to improve, patience 1 ends the run there)."""
    common = ["debug=smoke", "trainer.eval_every=2", *stopping]
    train(make_cfg(*common, "trainer.max_steps=4"))
    lengthened = train(make_cfg(*common, "trainer.max_steps=8"))
    whole = train(make_cfg(*common, "trainer.max_steps=8", out="whole"))
    assert records(tmp_path / "run") == records(tmp_path / "whole")
    for key in ("steps", "train", "test", "early_stopping"):
        assert lengthened.get(key) == whole.get(key)
    assert train(make_cfg(*common, "trainer.max_steps=8"))["steps"] == whole["steps"]  # reported again as it is
    assert records(tmp_path / "run") == records(tmp_path / "whole")


@pytest.mark.parametrize("stopping,end", [([], 6), ([], 8), (["trainer.early_stopping.patience=5"], 6)],
                         ids=["plain", "plain-at-an-eval-step", "early-stopping"])
def test_a_lengthened_run_keeps_and_reports_the_best_checkpoint_of_a_run_trained_that_long_at_once(make_cfg,
                                                                                                     tmp_path,
                                                                                                     stopping, end):
    """A run ending at step 6 saved its final state with its final eval, better than the periodic eval at step 4
    (diabetes at this rate). A run trained 20 steps at once evaluates no state at step 6 (eval_every=4), and saves
    none at step 8 (checkpoint_every=100, no early stopping): lengthened, the old end must not compete as the best
    checkpoint, pushing out the best one the run at once keeps and (with early stopping) becoming the state the
    run reports."""
    common = ["debug=smoke", "model=linear", "dataset=diabetes", "optimizer=sgd", "optimizer.learning_rate=0.6",
              "trainer.eval_every=4", "trainer.checkpoint_every=100", *stopping]
    train(make_cfg(*common, f"trainer.max_steps={end}"))
    lengthened = train(make_cfg(*common, "trainer.max_steps=20"))
    whole = train(make_cfg(*common, "trainer.max_steps=20", out="whole"))
    steps = [sorted(int(p.name) for p in (tmp_path / run / "checkpoints").iterdir()) for run in ("run", "whole")]
    assert steps[0] == steps[1]
    for key in ("test", "early_stopping"):
        assert lengthened.get(key) == whole.get(key)
    best = [evaluate(eval_cfg(make_cfg, tmp_path / run, "checkpoint=best"))["step"] for run in ("run", "whole")]
    assert best[0] == best[1] == (4 if stopping else 20)
    assert records(tmp_path / "run") == records(tmp_path / "whole")


def test_a_lengthened_run_killed_once_its_old_end_is_written_unscored_still_makes_the_eval_there(make_cfg, tmp_path,
                                                                                                   monkeypatch):
    """The old end (step 8, a periodic eval step) is written again without its final eval before training: a kill
    right then leaves a run whose rerun must still make and log the periodic eval at step 8."""
    common = ["debug=smoke", "trainer.eval_every=4", "trainer.checkpoint_every=100"]
    train(make_cfg(*common, "trainer.max_steps=8"))

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(zoo.train, "fit", killed)
        with pytest.raises(RuntimeError, match="killed"):
            train(make_cfg(*common, "trainer.max_steps=20"))
    train(make_cfg(*common, "trainer.max_steps=20"))
    train(make_cfg(*common, "trainer.max_steps=20", out="whole"))
    assert records(tmp_path / "run") == records(tmp_path / "whole")


def test_a_lengthened_run_early_stopping_ends_at_its_old_end_reports_the_speed_of_the_run_it_continued(make_cfg,
                                                                                                       tmp_path):
    """It trains no step: its examples_per_s (and achieved GFLOP/s) are those of the run that trained its steps,
    not 0.0."""
    common = ["debug=smoke", "trainer.eval_every=2", "trainer.early_stopping.patience=1",
              "optimizer.learning_rate=1e-9"]
    first = train(make_cfg(*common, "trainer.max_steps=4"))
    lengthened = train(make_cfg(*common, "trainer.max_steps=8"))
    assert lengthened["steps"] == lengthened["start_step"] == 4  # ended at its first eval, its old end
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert written["examples_per_s"] == first["examples_per_s"] > 0
    assert written["model"]["achieved_gflop_s"] == first["model"]["achieved_gflop_s"]


@pytest.mark.parametrize("stopping", [[], ["trainer.early_stopping.patience=1", "optimizer.learning_rate=1e-9"]],
                         ids=["plain", "early-stopping"])
def test_a_run_finished_again_after_a_kill_before_results_json_reports_the_speed_it_trained_at(make_cfg, tmp_path,
                                                                                               stopping):
    """Killed between its last checkpoint and results.json, the run is finished by a rerun that trains no step: its
    examples_per_s (and achieved GFLOP/s) are those its train records logged, not 0.0. Without early stopping
    they span its steps as its own end's figures did; early stopping's last eval and checkpoint come after them."""
    common = ["debug=smoke", "logger.summary=true", "trainer.eval_every=2", *stopping]
    first = train(make_cfg(*common))
    (tmp_path / "run" / "results.json").unlink()
    again = train(make_cfg(*common))
    assert again["steps"] == again["start_step"] == first["steps"]
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    logged = [json.loads(line)["examples_per_s"] for line in open(tmp_path / "run" / "metrics.jsonl")
              if json.loads(line)["split"] == "train"]
    assert min(logged) <= written["examples_per_s"] <= max(logged)
    flops_per_example = written["model"]["train_step_flops"] / 16  # debug=smoke's batch
    assert written["model"]["achieved_gflop_s"] == pytest.approx(written["examples_per_s"] * flops_per_example / 1e9)
    if not stopping:
        assert written["examples_per_s"] == pytest.approx(first["examples_per_s"], rel=0.01)


def test_a_lengthened_run_killed_before_its_next_checkpoint_logs_the_eval_of_its_old_end_once(make_cfg, tmp_path):
    """kill -9 after the lengthened run logged its periodic eval at the old end (step 4) but before any later
    checkpoint: the rerun resumes at step 4 again, whose eval its metrics.jsonl already holds."""
    common = ["debug=smoke", "trainer.eval_every=2", "trainer.checkpoint_every=100"]
    train(make_cfg(*common, "trainer.max_steps=4"))
    train(make_cfg(*common, "trainer.max_steps=8"))
    run_dir = tmp_path / "run"
    shutil.rmtree(run_dir / "checkpoints" / "8")  # as if killed before it was written
    (run_dir / "results.json").unlink()
    train(make_cfg(*common, "trainer.max_steps=8"))
    train(make_cfg(*common, "trainer.max_steps=8", out="whole"))
    assert records(run_dir) == records(tmp_path / "whole")


@pytest.mark.parametrize("stopping", [[], ["trainer.early_stopping.patience=1", "dataset.validation_fraction=0.2"]],
                         ids=["plain", "early-stopping"])
def test_a_run_stopped_after_its_final_checkpoint_finishes_as_if_uninterrupted(make_cfg, stopping):
    """A command ended between the final checkpoint and results.json (Ctrl-C in the final save, kill -9): the
    rerun resumes at the end and must not log the final evals twice nor report other train metrics."""
    common = ["debug=smoke", "trainer.max_steps=8", "trainer.checkpoint_every=3", "trainer.eval_every=2", *stopping]
    whole = train(make_cfg(*common, out="whole"))
    train(make_cfg(*common, out="again"))
    run_dir = pathlib.Path(make_cfg(out="again").paths.output_dir)
    (run_dir / "results.json").unlink()  # what the stopped command had left
    again = train(make_cfg(*common, out="again"))
    assert again["start_step"] == again["steps"]  # nothing left to train
    assert again["train"] == whole["train"] and again["test"] == whole["test"]
    assert records(make_cfg(out="whole").paths.output_dir) == records(run_dir)
    assert sum(bool(r.get("final")) for r in records(run_dir)) == 1 + bool(stopping)  # test (+ validation)


def test_checkpoint_from_pmap_restores_under_none_and_sharded(make_cfg, tmp_path):
    results = train(make_cfg("model=cnn", "debug=smoke", "parallel.mode=pmap", "parallel.cpu_devices=4"))
    run_dir = tmp_path / "run"
    for overrides in (["parallel=none"], ["parallel.mode=sharded", "parallel.cpu_devices=2"],
                      ["parallel.mode=pmap", "parallel.cpu_devices=4", "trainer.batch_size=7"],
                      ["parallel.mode=pmap", "parallel.cpu_devices=3"]):  # 3 devices need not divide its batch
        returned = evaluate(eval_cfg(make_cfg, run_dir, *overrides))
        evaluated = returned["metrics"]
        assert evaluated["count"] == results["test"]["count"] == 359
        np.testing.assert_allclose(evaluated["loss"], results["test"]["loss"], rtol=1e-6)
        assert evaluated["accuracy"] == results["test"]["accuracy"]
        assert returned["path"] == str(run_dir / "eval" / "test-6.json")
        assert json.loads((run_dir / "eval" / "test-6.json").read_text()) == {"step": 6, "split": "test", **evaluated}


def test_eval_picks_latest_and_steps(make_cfg, tmp_path):
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2"))
    run_dir = tmp_path / "run"
    assert Checkpoints(str(run_dir / "checkpoints"), read_only=True).steps() == [2, 4, 6]
    assert evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=4"))["step"] == 4
    assert evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=latest"))["step"] == 6
    with pytest.raises(UserError, match=r"checkpoint=5 is not in .*\[2, 4, 6\]"):
        evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=5"))


def test_eval_of_the_best_of_a_run_that_kept_none_says_it_is_the_best_of_those_kept(make_cfg, tmp_path, caplog):
    """checkpoint.keep_best=0: the run's best (step 12) is gone, and checkpoint=best was step 20 without a word."""
    train(make_cfg("debug=smoke", "trainer.max_steps=30", "trainer.checkpoint_every=10", "trainer.eval_every=2",
                   "optimizer.learning_rate=0.3", "checkpoint.keep=2", "checkpoint.keep_best=0"))
    with caplog.at_level("WARNING", logger="zoo"):
        assert evaluate(eval_cfg(make_cfg, tmp_path / "run", "checkpoint=best"))["step"] == 20
    assert ("the run kept no best checkpoint (checkpoint.keep_best=0): checkpoint=best is step 20, the best by "
            "accuracy of the steps it kept [20, 30]") in caplog.text


def test_eval_of_a_run_still_training_reads_its_newer_checkpoints(make_cfg, tmp_path, monkeypatch, caplog):
    """The trainer saves new steps and deletes old ones while eval reads: eval reads the steps on disk again."""
    import zoo.evaluate

    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2"))  # steps 2, 4, 6
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2", "trainer.max_steps=12", out="later"))  # 8, 10, 12
    run_dir, real = tmp_path / "run", zoo.evaluate.restore_latest_good

    def trainer_moves_on(ckpts, target, steps, **kwargs):
        if steps == [6, 4, 2]:  # what eval chose, replaced now by the steps the run saved since
            shutil.rmtree(run_dir / "checkpoints")
            shutil.copytree(tmp_path / "later" / "checkpoints", run_dir / "checkpoints")
        return real(ckpts, target, steps, **kwargs)

    monkeypatch.setattr(zoo.evaluate, "restore_latest_good", trainer_moves_on)
    with caplog.at_level("INFO", logger="zoo"):
        assert evaluate(eval_cfg(make_cfg, run_dir))["step"] == 12
    assert "is still training: checkpoint step(s) [2, 4, 6] were replaced while being read" in caplog.text
    assert "cannot be restored" not in caplog.text  # steps the trainer deleted are not reported as damaged


def test_a_step_deleted_while_the_best_is_chosen_is_not_called_unreadable(make_cfg, tmp_path, monkeypatch, caplog):
    """checkpoint=best reads every step's metrics: one the trainer deletes meanwhile is no candidate, and no
    warning calls its metadata unreadable (as restore_latest_good says nothing of such a step either)."""
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2", "trainer.eval_every=2"))  # steps 2, 4, 6
    ckpts = Checkpoints(str(tmp_path / "run" / "checkpoints"), read_only=True)
    real = Checkpoints.meta

    def trainer_deletes_step_2(self, step):
        if step == 2:
            shutil.rmtree(tmp_path / "run" / "checkpoints" / "2", ignore_errors=True)
        return real(self, step)

    monkeypatch.setattr(Checkpoints, "meta", trainer_deletes_step_2)
    with caplog.at_level("WARNING", logger="zoo"):
        assert ckpts.best_step("accuracy", "max") in (4, 6)
    assert "unreadable metadata" not in caplog.text


def test_eval_reads_newer_checkpoints_when_the_step_it_reads_the_config_from_is_replaced(make_cfg, tmp_path,
                                                                                          monkeypatch):
    """checkpoint=final reads the run's config first (early stopping or not): the trainer may delete that step."""
    import zoo.evaluate

    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2"))  # steps 2, 4, 6
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2", "trainer.max_steps=12", out="later"))  # 8, 10, 12
    run_dir, real, moved = tmp_path / "run", zoo.evaluate._run_config, []

    def trainer_moves_on(ckpts, cfg):
        if not moved:
            moved.append(shutil.rmtree(run_dir / "checkpoints"))
            shutil.copytree(tmp_path / "later" / "checkpoints", run_dir / "checkpoints")
        return real(ckpts, cfg)

    monkeypatch.setattr(zoo.evaluate, "_run_config", trainer_moves_on)
    assert evaluate(eval_cfg(make_cfg, run_dir))["step"] == 12


def test_eval_of_a_run_replacing_its_checkpoints_faster_than_they_are_read_says_so(make_cfg, tmp_path, monkeypatch):
    """Each read finds the steps it chose replaced (a run checkpointing every few steps): the last failure is
    the run still training, not a damaged checkpoint."""
    import zoo.evaluate

    for out, steps in (("run", 6), ("b", 12), ("c", 18), ("d", 24)):
        train(make_cfg("debug=smoke", "trainer.checkpoint_every=2", f"trainer.max_steps={steps}", out=out))
    run_dir, real, later = tmp_path / "run", zoo.evaluate.restore_latest_good, ["b", "c", "d"]

    def trainer_moves_on(ckpts, target, steps, **kwargs):
        shutil.rmtree(run_dir / "checkpoints")
        shutil.copytree(tmp_path / later.pop(0) / "checkpoints", run_dir / "checkpoints")
        return real(ckpts, target, steps, **kwargs)

    monkeypatch.setattr(zoo.evaluate, "restore_latest_good", trainer_moves_on)
    with pytest.raises(UserError, match=r"^run_dir=.*/run is still training and replaced checkpoint step\(s\) "
                                        r"\[14, 16, 18\] while they were read, 3 times in a row; run the command"):
        evaluate(eval_cfg(make_cfg, run_dir))


@pytest.mark.parametrize("key", ["batch_size", "eval_batch_size"])  # the latter: its name in the run's config
@pytest.mark.parametrize("batch_size,rows", [(5, 5), (10**6, 359)], ids=["small", "larger-than-the-split"])
def test_eval_batches_are_trainer_batch_size_up_to_the_split(make_cfg, tmp_path, monkeypatch, batch_size, rows, key):
    final = train(make_cfg("debug=smoke"))["test"]
    sizes = []
    real = zoo.train.eval_batches
    monkeypatch.setattr(zoo.train, "eval_batches", lambda split, size: sizes.append(size) or real(split, size))
    evaluated = evaluate(eval_cfg(make_cfg, tmp_path / "run", f"trainer.{key}={batch_size}"))
    assert sizes == [rows] and evaluated["metrics"]["count"] == 359  # a larger batch would only be padding
    assert evaluated["metrics"]["accuracy"] == final["accuracy"]
    np.testing.assert_allclose(evaluated["metrics"]["loss"], final["loss"], rtol=1e-6)


# The best checkpoint follows its metric's direction, whatever the task's objective is.
BEST_BY = [("digits", "accuracy", max), ("diabetes", "r2", max), ("diabetes", "mae", min), ("diabetes", "loss", min)]


@pytest.mark.parametrize("dataset,metric,better", BEST_BY, ids=[f"{d}-{m}" for d, m, _ in BEST_BY])
def test_best_checkpoint_follows_the_metric(make_cfg, tmp_path, dataset, metric, better):
    train(make_cfg(f"dataset={dataset}", "debug=smoke", "trainer.checkpoint_every=2", "trainer.eval_every=2",
                   f"checkpoint.metric={metric}", "checkpoint.keep=1", "checkpoint.keep_best=1"))
    run_dir = tmp_path / "run"
    logged = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    by_step = {r["step"]: r[metric] for r in logged if r["split"] == "test"}
    assert sorted(by_step) == [2, 4, 6] and len(set(by_step.values())) == 3  # the direction decides
    best_step = better(by_step, key=by_step.get)
    assert Checkpoints(str(run_dir / "checkpoints"), read_only=True).steps() == sorted({best_step, 6})
    best = evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=best"))
    assert best["step"] == best_step and best["metrics"][metric] == by_step[best_step]


@pytest.mark.parametrize("metric,mode,values", [("accuracy", "max", [0.5, 0.9, 0.9, 0.7]),
                                                 ("loss", "min", [0.5, 0.2, 0.2, 0.3])])
def test_the_best_step_is_the_later_one_on_a_tie(tmp_path, metric, mode, values):
    ckpts = Checkpoints(str(tmp_path / "checkpoints"), keep=4, metric=metric, mode=mode, async_save=False)
    for step, value in enumerate(values, start=1):
        ckpts.save(step, {"w": np.zeros(2, np.float32)}, {"step": step, "metrics": {metric: value}},
                   metrics={metric: value})
    assert ckpts.best_step() == 3
    ckpts.close()


# (step, accuracy) saved in order, every=2: the best early, a tie with a later step, a stop's unscored step, nan
SAVES = {"best-early": [(2, 0.9), (4, 0.5), (6, 0.6), (8, 0.7), (10, 0.8)],
         "tie": [(2, 0.5), (4, 0.7), (6, 0.7), (8, 0.6), (10, 0.6), (12, 0.4)],
         "stopped": [(2, 0.4), (4, 0.3), (6, 0.5), (7, None), (8, 0.45), (10, 0.2)],
         "nan": [(2, float("nan")), (4, 0.3), (6, float("nan")), (8, 0.2), (10, 0.1)]}


@pytest.mark.parametrize("saves", list(SAVES.values()), ids=list(SAVES))
def test_skipping_the_saves_the_policy_outlives_leaves_the_checkpoints_of_saving_them_all(tmp_path, saves):
    """A population's writer skips a save when orbax would delete it once the saves due after it are made: the
    steps on disk must end as they do when every save is made."""
    def save_all(name, skip):
        ckpts = Checkpoints(str(tmp_path / name), keep=2, keep_best=1, every=2, async_save=False)
        made = []
        for i, (step, acc) in enumerate(saves):
            metrics = None if acc is None else {"accuracy": acc}
            if skip and ckpts.outlived([(s, None if a is None else {"accuracy": a}) for s, a in saves[i:]]):
                continue
            ckpts.save(step, {"w": np.full(2, step, np.float32)}, {"step": step}, metrics=metrics)
            made.append(step)
        ckpts.close()
        return made, ckpts.steps()

    made_all, kept_all = save_all("all", skip=False)
    made, kept = save_all("skipping", skip=True)
    assert kept == kept_all
    assert len(made) < len(made_all) and set(kept) <= set(made)


def test_corrupt_latest_falls_back_only_for_latest(make_cfg, tmp_path, caplog):
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2"))
    run_dir = tmp_path / "run"
    for blob in (run_dir / "checkpoints" / "6" / "state").rglob("d/*"):
        if blob.is_file():
            blob.write_bytes(b"truncated")
    result = evaluate(eval_cfg(make_cfg, run_dir))
    assert result["step"] == 4 and "Falling back" in caplog.text
    with pytest.raises(UserError, match=r"checkpoint step 6 .* cannot be restored .*; choose another with "
                                         r"checkpoint=latest or one of the steps \[2, 4\]\.$"):
        evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=6"))


@pytest.mark.parametrize("chosen", ["state", "metadata"])
def test_a_damaged_chosen_step_names_only_the_steps_that_restore(make_cfg, tmp_path, chosen):
    """Steps 6 and 4 damaged: checkpoint=6 named step 4 as one to choose instead. Step 6's metadata damaged, the
    run's config is read from another step to try them."""
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2"))
    run_dir = tmp_path / "run"

    def damage(step):
        for blob in (run_dir / "checkpoints" / str(step) / "state").rglob("d/*"):
            if blob.is_file():
                blob.write_bytes(b"truncated")

    if chosen == "state":
        damage(6)
    else:
        (run_dir / "checkpoints" / "6" / "meta" / "metadata").write_text("{not json")
    damage(4)
    failed = "cannot be restored" if chosen == "state" else "has unreadable metadata"
    with pytest.raises(UserError, match=rf"checkpoint step 6 .* {failed} .*; choose another with "
                                         r"checkpoint=latest or one of the steps \[2\]\.$"):
        evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=6"))
    assert evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=2"))["step"] == 2  # the way out it names
    damage(2)
    with pytest.raises(UserError, match=rf"checkpoint step 6 .* {failed} .*; no other step of it restores "
                                         r"\(tried steps \[2, 4\]\): train the run again or pass another run_dir\.$"):
        evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=6"))
    for step in (2, 4):  # no config to try them under: told apart by their metadata alone
        (run_dir / "checkpoints" / str(step) / "meta" / "metadata").write_text("{not json")
    with pytest.raises(UserError, match=rf"checkpoint step 6 .* {failed} .*; no other step of it restores "
                                         r"\(tried steps \[2, 4\]\): train the run again or pass another run_dir\.$"):
        evaluate(eval_cfg(make_cfg, run_dir, "checkpoint=6"))


def test_a_damaged_final_checkpoint_is_replaced_when_the_rerun_trains_that_step_again(make_cfg, tmp_path):
    common = ["debug=smoke", "trainer.checkpoint_every=2"]
    whole = train(make_cfg(*common, out="whole"))
    train(make_cfg(*common))
    run_dir = tmp_path / "run"
    for blob in (run_dir / "checkpoints" / "6" / "state").rglob("d/*"):
        if blob.is_file():
            blob.write_bytes(b"truncated")
    again = train(make_cfg(*common))  # falls back to step 4, trains to 6 again and writes results.json anew
    assert again["start_step"] == 4 and again["test"] == whole["test"]
    result = evaluate(eval_cfg(make_cfg, run_dir))  # reads the retrained step 6, not the damaged one
    assert result["step"] == 6 and result["metrics"] == pytest.approx(whole["test"], rel=1e-6)


def test_resuming_from_a_run_early_stopping_ended_is_one_sentence(make_cfg, tmp_path):
    """The new run stood stopped at the source's end and looked for the best checkpoint in its own, empty
    checkpoints/: 'checkpoint step None ... cannot be restored (FileNotFoundError: No steps found ...)'."""
    common = ["debug=smoke", "trainer.max_steps=40", "trainer.eval_every=2", "trainer.checkpoint_every=4",
              "trainer.early_stopping.patience=2", "optimizer.learning_rate=0.3"]  # stops at 16, best 12
    source = train(make_cfg(*common, out="source"))
    assert source["early_stopping"]["stopped_step"] == 16 and source["early_stopping"]["best_checkpoint_step"] == 12
    resume = tmp_path / "source" / "checkpoints"
    with pytest.raises(UserError, match=rf"^trainer\.resume={resume} holds a run that early stopping ended at step 16 "
                                        r"\(its best checkpoint, step 12, is what it reports\); evaluate it with "
                                        rf"eval\.py run_dir={resume.parent}, or leave out "
                                        r"trainer\.early_stopping\.patience to train on from step 16\.$"):
        train(make_cfg(*common, f"trainer.resume={resume}", out="new"))
    train(make_cfg(*common[:4], f"trainer.resume={resume}", out="new"))  # the way out it names


def test_resuming_from_a_run_early_stopping_ended_names_the_checkpoint_it_reports(make_cfg, tmp_path):
    """The sentence named early stopping's best_step, the last eval that improved by more than min_delta, as the
    checkpoint the run reports; the run reports its best checkpoint by checkpoint.metric (the later on a tie)."""
    common = ["debug=smoke", "trainer.max_steps=40", "trainer.eval_every=2", "trainer.checkpoint_every=4",
              "trainer.early_stopping.patience=2", "trainer.early_stopping.min_delta=10"]  # nothing improves by 10
    stopping = train(make_cfg(*common, out="source"))["early_stopping"]
    assert stopping["best_step"] != stopping["best_checkpoint_step"]
    resume = tmp_path / "source" / "checkpoints"
    with pytest.raises(UserError, match=rf"\(its best checkpoint, step {stopping['best_checkpoint_step']}, is what "
                                        r"it reports\)"):
        train(make_cfg(*common, f"trainer.resume={resume}", out="new"))


@pytest.mark.parametrize("stopping,chosen", [([], "its newest checkpoint"),
                                             (["trainer.early_stopping.patience=100"], "its best checkpoint so far")],
                         ids=["plain", "early-stopping"])
def test_eval_of_an_unfinished_run_says_it_is_not_the_runs_final_state(make_cfg, tmp_path, monkeypatch, caplog,
                                                                       stopping, chosen):
    """checkpoint=final, eval.py's default, is 'what results.json reports'; a run stopped (or still training) has no
    results.json, and eval.py evaluated one of its steps and printed it as any other, as if the run were done."""
    common = ["debug=smoke", "trainer.max_steps=12", "trainer.eval_every=2", "trainer.checkpoint_every=2", *stopping]
    with monkeypatch.context() as patch:
        stop_at_step(patch, 6)
        with pytest.raises(Preempted):
            train(make_cfg(*common))
    with caplog.at_level("WARNING", logger="zoo"):
        step = evaluate(eval_cfg(make_cfg, tmp_path / "run"))["step"]
    assert step <= 8
    assert (f"run_dir={tmp_path / 'run'} has not finished (no results.json): checkpoint=final evaluates {chosen}, "
            f"step {step} of the 12 it trains, not its final state; train it to its end, or name checkpoint=latest, "
            "best or a step to evaluate that one.") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="zoo"):
        evaluate(eval_cfg(make_cfg, tmp_path / "run", "checkpoint=latest"))  # one named on purpose
        train(make_cfg(*common))
        evaluate(eval_cfg(make_cfg, tmp_path / "run"))
    assert "has not finished" not in caplog.text


def test_a_run_early_stopping_ended_asked_again_for_that_length_says_how_it_ended(make_cfg, tmp_path, caplog):
    """Started for 40 steps, it stopped early at step 16. Asked again with trainer.max_steps=16 (or 40), it reports
    the results.json it has, stopped early at 16 of 40 (a run trained 16 steps at once is not stopped early, and
    does not count the eval at its end), while the line said only 'already holds this finished run', as of a run
    of the length asked that trained to its end. The line now says how it ended and which checkpoint it reports."""
    common = ["debug=smoke", "trainer.eval_every=2", "trainer.checkpoint_every=4",
              "trainer.early_stopping.patience=2", "optimizer.learning_rate=0.3"]  # stops at 16, best 12
    first = train(make_cfg(*common, "trainer.max_steps=40"))
    assert first["early_stopping"]["stopped_step"] == 16 and first["early_stopping"]["best_checkpoint_step"] == 12
    written = (tmp_path / "run" / "results.json").read_text()
    for steps in (16, 40):
        caplog.clear()
        with caplog.at_level("INFO", logger="zoo"):
            again = train(make_cfg(*common, f"trainer.max_steps={steps}"))
        assert (again["steps"], again["early_stopping"], again["test"]) == (16, first["early_stopping"], first["test"])
        assert (tmp_path / "run" / "results.json").read_text() == written
        assert ("already holds this finished run, which early stopping ended at step 16 of the 40 it was started for; "
                "its results.json stands, with the metrics of its best checkpoint, step 12 (test: ") in caplog.text


@pytest.mark.parametrize("schedule", [[], ["schedule=warmup_cosine", "schedule.warmup_steps=2"]],
                         ids=["constant", "warmup-cosine"])
def test_resuming_from_a_finished_run_of_the_same_length_is_one_sentence(make_cfg, tmp_path, schedule):
    """A new run seeded with a run at its own end trained nothing and wrote a results.json of no train metrics at
    0.0 examples/s. Only a constant learning rate lets it train on under a longer length."""
    source = train(make_cfg("debug=smoke", *schedule, out="source"))
    resume = tmp_path / "source" / "checkpoints"
    train_on = ", or raise trainer.max_steps or trainer.epochs to train on from step 6" if not schedule else ""
    with pytest.raises(UserError, match=rf"^trainer\.resume={resume} holds a run at step 6, the 6 steps "
                                        r"trainer\.epochs and trainer\.max_steps give, so this run would train "
                                        rf"nothing; evaluate it with eval\.py run_dir={resume.parent}{train_on}\.$"):
        train(make_cfg("debug=smoke", *schedule, f"trainer.resume={resume}", out="new"))
    assert not (tmp_path / "new" / "results.json").exists()
    if not schedule:
        assert train(make_cfg("debug=smoke", "trainer.max_steps=8", f"trainer.resume={resume}", out="new"))[
            "start_step"] == source["steps"]


def test_rerun_after_preemption_continues_its_own_checkpoints_not_the_source(make_cfg, tmp_path, monkeypatch):
    """trainer.resume=<path> seeds an empty run; once the run has checkpoints of its own it continues from them."""
    train(make_cfg("debug=smoke", "trainer.max_steps=2", out="source"))
    common = ["debug=smoke", "trainer.max_steps=8", "trainer.log_every=1",
              f"trainer.resume={tmp_path / 'source' / 'checkpoints'}"]
    stop_at_step(monkeypatch, 5)
    with pytest.raises(Preempted, match="stopped by SIGTERM at step 5"):
        train(make_cfg(*common))
    monkeypatch.undo()
    resumed = train(make_cfg(*common))
    assert resumed["start_step"] == 5
    seeded = train(make_cfg(*common, out="whole"))
    assert seeded["start_step"] == 2
    assert leaves_equal(seeded["state"], resumed["state"])


@pytest.mark.parametrize("missing", [False, True], ids=["mistyped", "no-such-path"])
def test_a_run_with_checkpoints_of_its_own_refuses_a_trainer_resume_that_names_no_directory(make_cfg, tmp_path,
                                                                                           missing):
    """Such a run continues from its own checkpoints whatever trainer.resume names, and a mistyped value (Never for
    never) or a path that is not there passed unseen: the run went on, exit 0."""
    train(make_cfg("debug=smoke", "trainer.max_steps=4"))
    resume = str(tmp_path / "gone" / "checkpoints") if missing else "Never"
    with pytest.raises(UserError, match=rf"^trainer\.resume={re.escape(resume)} is not a checkpoint directory, and "
                                        r"this run continues from its own checkpoints \(steps \[4\]\) whatever it "
                                        r"names; leave trainer\.resume out, or use auto\.$"):
        train(make_cfg("debug=smoke", "trainer.max_steps=6", f"trainer.resume={resume}"))


def test_trainer_resume_reads_a_path_from_the_home_directory(make_cfg, tmp_path, monkeypatch):
    """trainer.resume="~/..." was refused as 'not a checkpoint directory', where paths.data_dir reads ~ as home."""
    train(make_cfg("debug=smoke", "trainer.max_steps=2", out="source"))
    monkeypatch.setenv("HOME", str(tmp_path))
    seeded = train(make_cfg("debug=smoke", "trainer.max_steps=4", 'trainer.resume="~/source/checkpoints"'))
    assert seeded["start_step"] == 2 and seeded["steps"] == 4


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


def test_an_interrupted_run_resumed_under_another_learning_rate_says_so(make_cfg, monkeypatch, caplog):
    common = ["debug=smoke", "trainer.max_steps=8", "trainer.log_every=1", "trainer.checkpoint_every=2"]
    with monkeypatch.context() as patch:
        stop_at_step(patch, 3, signal.SIGTERM)
        with pytest.raises(Preempted):
            train(make_cfg(*common))
    with caplog.at_level("WARNING", logger="zoo"):
        resumed = train(make_cfg(*common, "optimizer.learning_rate=1e-4"))
    assert resumed["start_step"] == 3
    assert "the steps before 3 were trained with other settings than this command's: optimizer.learning_rate " \
           "(0.001 -> 0.0001)" in caplog.text


def test_a_setting_the_run_left_out_is_compared_with_its_default(make_cfg, caplog):
    """The saved config leaves optimizer.b1 out: the run trained with optax.adamw's default, 0.9, not None."""
    train(make_cfg("debug=smoke"))
    with caplog.at_level("WARNING", logger="zoo"):
        train(make_cfg("debug=smoke", "trainer.max_steps=8", "+optimizer.b1=0.5"))
    assert "other settings than this command's: optimizer.b1 (default 0.9 -> 0.5)" in caplog.text
    saved = OmegaConf.to_container(make_cfg("debug=smoke"), resolve=True)
    assert result_changes(saved, make_cfg("debug=smoke", "+optimizer.b1=0.9")) == []  # its default: no change
    assert result_changes(saved, make_cfg("debug=smoke", "+optimizer.eps=1e-6")) == ["optimizer.eps (default 1e-08 "
                                                                                      "-> 1e-06)"]


def test_ctrl_c_saves_and_stops_and_a_second_one_stops_at_once(make_cfg, tmp_path, monkeypatch):
    common = ["debug=smoke", "trainer.max_steps=8", "trainer.log_every=1", "trainer.checkpoint_every=2"]
    checkpoints = tmp_path / "run" / "checkpoints"
    with monkeypatch.context() as patch:
        stop_at_step(patch, 3, signal.SIGINT)
        with pytest.raises(Preempted, match="stopped by SIGINT at step 3") as stopped:
            train(make_cfg(*common))
    assert stopped.value.exit_code == 130
    assert Checkpoints(str(checkpoints), read_only=True).steps() == [2, 3]  # the step it stopped at is saved
    with monkeypatch.context() as patch:
        stop_at_step(patch, 5, signal.SIGINT, times=2)
        with pytest.raises(KeyboardInterrupt):
            train(make_cfg(*common))
    # nothing saved after the 2nd; step 3, saved only for the stop, went once the regular step 4 was saved
    assert Checkpoints(str(checkpoints), read_only=True).steps() == [2, 4]
    assert train(make_cfg(*common))["start_step"] == 4


def test_a_stop_without_checkpoints_says_nothing_was_saved(make_cfg, tmp_path, monkeypatch):
    stop_at_step(monkeypatch, 3, signal.SIGTERM)
    with pytest.raises(Preempted, match="checkpoint.enabled=false, so nothing was saved") as stopped:
        train(make_cfg("debug=smoke", "trainer.max_steps=8", "trainer.log_every=1", "checkpoint.enabled=false"))
    assert "checkpoint is saved" not in str(stopped.value) and not (tmp_path / "run" / "checkpoints").exists()


def test_a_signal_landing_mid_step_still_saves_the_step_the_run_stops_at(make_cfg, tmp_path):
    from zoo.loop import fit
    from zoo.run_logger import RunLogger

    cfg = make_cfg("model.hidden=[8]", "trainer.max_steps=20", "trainer.log_every=1", "trainer.eval_every=0",
                   "logger=quiet")
    run = build(cfg)
    saved = []
    logger = RunLogger(str(tmp_path / "log"), cfg.logger, run.total_steps)
    _, _, _, step = fit(run.compiled.mode.put_state(run.host_state), run.compiled, run.feed, run.eval_sets,
                        cfg.trainer, run.total_steps, logger, save=lambda s, *_: saved.append(s),
                        stop=SignalAtRead(2))
    logger.close("accuracy")
    assert step < run.total_steps and saved == [step]  # stopped early, and where it stopped is saved


def test_a_resumed_runs_kept_records_are_on_disk_before_its_first_new_one(make_cfg, tmp_path):
    """A resumed run killed before it logs again (e.g. while compiling) must not leave metrics.jsonl empty."""
    from zoo.run_logger import RunLogger

    path = tmp_path / "metrics.jsonl"
    records = [{"step": 7, "split": "train", "loss": 1.0}, {"step": 10, "split": "test", "loss": 0.5},
               {"step": 14, "split": "train", "loss": 0.25}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    logger = RunLogger(str(tmp_path), make_cfg("logger=quiet").logger, 40, start_step=13)
    on_disk = [json.loads(line) for line in path.read_text().splitlines()]  # what a kill -9 now would leave
    assert on_disk == records[:2]
    logger.log(20, "train", {"loss": 0.125})
    logger.close("loss")
    assert [r["step"] for r in map(json.loads, path.read_text().splitlines())] == [7, 10, 20]


def test_a_run_resumed_after_a_torn_last_record_finishes_as_if_uninterrupted(make_cfg, tmp_path):
    """A full disk (or a kill) while a record was written leaves its line cut short at the file's end: that record
    lies past the run's latest checkpoint, so the rerun drops it, as it drops the other records it redoes."""
    common = ["debug=smoke", "trainer.max_steps=8", "trainer.checkpoint_every=4", "trainer.eval_every=2"]
    train(make_cfg(*common, out="whole"))
    train(make_cfg(*common))
    run_dir = tmp_path / "run"
    shutil.rmtree(run_dir / "checkpoints" / "8")
    (run_dir / "results.json").unlink()
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 8, "split": "tr')
    train(make_cfg(*common))
    assert records(run_dir) == records(tmp_path / "whole")


def test_a_torn_last_record_is_not_continued_by_the_next_one(make_cfg, tmp_path):
    """Every whole record is kept (the run resumes past them): the next record must start a line of its own."""
    from zoo.run_logger import RunLogger

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 2, "split": "train", "loss": 1.0}\n{"step": 4, "split": "train", "loss": 0.5}\n'
                    '{"step": 6, "spl')
    logger = RunLogger(str(tmp_path), make_cfg("logger=quiet").logger, 40, start_step=4)
    logger.log(6, "train", {"loss": 0.25})
    logger.close("loss")
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [2, 4, 6]


@pytest.mark.parametrize("line", [b'{"step": 4, "spl', b'{"foo": 1}', b'[1]', b'\xff\xfe'],
                         ids=["cut", "not-a-record", "not-a-mapping", "not-utf8"])
def test_a_damaged_record_before_the_last_is_one_sentence(make_cfg, tmp_path, line):
    """JSON that is no metrics record, and bytes that are not UTF-8, ended in a KeyError or UnicodeDecodeError."""
    from zoo.run_logger import RunLogger

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 2, "split": "train", "loss": 1.0}\n' + line + b'\n{"step": 6, "split": "train"}\n')
    with pytest.raises(UserError, match=r"^line 2 of .*metrics.jsonl is damaged \(not a JSON record\); delete that "
                                        r"line or start in a new "):
        RunLogger(str(tmp_path), make_cfg("logger=quiet").logger, 40, start_step=4)


def test_a_signal_during_the_last_call_lets_the_run_finish(make_cfg, monkeypatch):
    monkeypatch.setattr(zoo.train, "stop_on_signals", lambda: contextlib.nullcontext(SignalAtRead(20)))
    cfg = make_cfg("model.hidden=[8]", "trainer.max_steps=20", "trainer.log_every=1", "trainer.eval_every=0",
                   "trainer.checkpoint_every=100", "logger=quiet")  # one step per call: the 20th read is the last
    results = train(cfg)
    assert results["steps"] == 20 and results["test"]["count"] == 359
    assert Checkpoints(cfg.paths.output_dir + "/checkpoints", read_only=True).steps() == [20]


def test_preempted_survives_pickling_as_a_launcher_in_another_process_sends_it_back():
    import pickle

    for sweep_dir in (None, "/runs"):  # a single run's stop, a sweep job's
        stopped = pickle.loads(pickle.dumps(Preempted(37, signal.SIGTERM, "/runs/x", sweep_dir)))
        assert isinstance(stopped, Preempted) and stopped.exit_code == 143 and str(stopped) == str(
            Preempted(37, signal.SIGTERM, "/runs/x", sweep_dir))
    assert "hydra.sweep.dir=/runs" in str(stopped)
    unsaved = pickle.loads(pickle.dumps(Preempted(37, signal.SIGTERM, "/runs/x", saved=False)))
    assert str(unsaved) == str(Preempted(37, signal.SIGTERM, "/runs/x", saved=False))
    assert "nothing was saved" in str(unsaved)


def test_a_checkpoint_of_other_shapes_but_the_same_structure_is_a_state_mismatch(tmp_path):
    ckpts = Checkpoints(str(tmp_path / "c"), async_save=False)
    ckpts.save(1, {"w": np.zeros(3, np.float32)}, {"config": {}})
    ckpts.wait()
    with pytest.raises(StateMismatch, match="other shapes"):
        ckpts.restore(1, {"w": np.zeros(4, np.float32)})
    ckpts.close()


def test_resuming_under_another_accumulate_is_refused(make_cfg):
    train(make_cfg("debug=smoke", "trainer.accumulate=2", "trainer.max_steps=4", "trainer.checkpoint_every=2",
                   "trainer.eval_every=0"))
    with pytest.raises(UserError, match=r"trainer\.accumulate \(2 -> 4\)"):
        train(make_cfg("debug=smoke", "trainer.accumulate=4", "trainer.max_steps=8", "trainer.checkpoint_every=2",
                       "trainer.eval_every=0"))


def test_a_finished_run_asked_again_with_privacy_is_refused(make_cfg):
    train(make_cfg("debug=smoke"))
    with pytest.raises(UserError, match=r"privacy\.mode \('none' -> 'dpsgd'\)"):
        train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=1.0"))


def test_orbax_logs_of_a_file_system_failure_are_left_to_the_one_sentence_the_run_prints(tmp_path):
    import errno
    import logging
    import sys

    Checkpoints(str(tmp_path / "ckpts"))  # installs the filter on the absl logger

    def record(error, pathname="/site-packages/orbax/checkpoint/_src/futures/future.py", level=logging.ERROR):
        try:
            raise error
        except Exception:
            exc_info = sys.exc_info()
        return logging.LogRecord("absl", level, pathname, 1, "_SignalingThread.run() raised an exception", (),
                                 exc_info)

    absl = logging.getLogger("absl")
    assert not absl.filter(record(OSError(errno.ENOSPC, "No space left on device")))
    assert not absl.filter(record(ValueError("RESOURCE_EXHAUSTED: Failed to write [os_error_code='28']")))
    assert absl.filter(record(ValueError("tree structures do not match")))  # not the file system's: kept
    assert absl.filter(record(OSError(errno.ENOSPC, "No space left on device"), pathname="/zoo/train.py"))
    assert absl.filter(record(OSError(errno.ENOSPC, "No space"), level=logging.WARNING))


def test_resuming_is_said_only_for_a_run_that_goes_on(make_cfg, caplog):
    import logging

    from zoo.errors import RunRefused
    from zoo.train import train

    train(make_cfg("debug=smoke"))
    with caplog.at_level(logging.INFO, logger="zoo"), pytest.raises(RunRefused, match="trained with other settings"):
        train(make_cfg("debug=smoke", "seed=1"))  # a finished run asked for under another seed
    assert "resuming from step" not in caplog.text
    with caplog.at_level(logging.INFO, logger="zoo"):
        train(make_cfg("debug=smoke", "trainer.max_steps=8"))
    assert "resuming from step 6 of " in caplog.text


@pytest.mark.parametrize("metric,mode,values", [("r2", "max", [float("nan"), 0.5, 0.3, float("nan"), float("nan")]),
                                                 ("loss", "min", [float("nan"), 0.5, 0.7, float("nan"), float("nan")])])
def test_a_step_whose_metric_is_undefined_is_never_the_best_kept(tmp_path, metric, mode, values):
    """A nan metric sorted anywhere: it was kept as the best, and the best step deleted."""
    ckpts = Checkpoints(str(tmp_path / "checkpoints"), keep=1, keep_best=1, metric=metric, mode=mode, async_save=False)
    for step, value in enumerate(values, start=1):
        ckpts.save(step, {"w": np.zeros(2, np.float32)}, {"step": step, "metrics": {metric: value}},
                   metrics={metric: value})
    assert ckpts.steps() == [2, 5] and ckpts.best_step() == 2
    ckpts.close()


@pytest.mark.parametrize("damaged", ["[]", "null", '{"steps": 6, "test": {"accuracy": "abc"}}',
                                     '{"steps": 6, "test": 5}'],
                         ids=["list", "null", "not-a-number", "not-a-mapping"])
def test_a_finished_runs_damaged_results_json_is_written_again_by_the_same_command(make_cfg, damaged):
    """Valid JSON of another shape ended the rerun in an AttributeError, TypeError or ValueError traceback: it is
    damaged like a cut-short file, and rerunning the finished run evaluates its final checkpoint again."""
    cfg = make_cfg("debug=smoke", "trainer.max_steps=6", "logger=quiet")
    results = train(cfg)
    path = pathlib.Path(cfg.paths.output_dir) / "results.json"
    path.write_text(damaged)
    again = train(cfg)
    assert again["steps"] == 6 and again["test"] == results["test"]
    assert json.loads(path.read_text())["test"] == results["test"]
