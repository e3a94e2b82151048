"""Trainer features: model summary and FLOPs, early stopping, gradient accumulation, weight averaging, learning rate."""
import json
import logging
import signal
import subprocess
import sys

import jax
import numpy as np
import optax
import pytest

from conftest import ROOT, subprocess_env
from test_checkpoint import leaves_equal, records
from zoo import summary
from zoo.early_stopping import EarlyStopping
from zoo.errors import UserError
from zoo.evaluate import evaluate
from zoo.preemption import Preempted
import zoo.run_logger
from zoo.run_logger import RunLogger
from zoo.train import build, train

SGD = ["debug=smoke", "model=mlp", "model.hidden=[32]", "model.dropout=0.0", "optimizer=sgd"]


def read_jsonl(path):
    return [json.loads(line) for line in open(path)]


def close(a, b, tol=1e-5):
    return all(np.allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def sigterm_at(step_to_stop):
    def progress(self, step, *args):
        if step == step_to_stop:
            signal.raise_signal(signal.SIGTERM)

    return progress


# --- Model summary ---------------------------------------------------------------------------------------------

def test_summary_counts_parameters_and_reports_xla_flops(make_cfg, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="zoo")
    results = train(make_cfg("debug=smoke", "logger.summary=true"))
    model, batch = results["model"], 16
    sizes = [64 * 256 + 256, 256 * 256 + 256, 256 * 10 + 10]  # mlp's default hidden=[256, 256] on 8x8 digits
    assert model["params"] == sum(sizes) == sum(np.size(p) for p in jax.tree.leaves(results["state"].params))
    assert model["param_bytes"] == 4 * model["params"]
    forward = 2 * (64 * 256 + 256 * 256 + 256 * 10)  # multiply-adds of the three matmuls, per example
    assert 1.0 < model["eval_flops_per_example"] / forward < 1.05  # plus biases, relu, softmax
    assert 3.0 < model["train_step_flops"] / (batch * forward) < 3.6  # forward + backward + the optimizer
    assert model["achieved_gflop_s"] == pytest.approx(
        model["train_step_flops"] / batch * results["examples_per_s"] / 1e9)
    assert "layers.1        65,792" in caplog.text and "total           85,002  (340 kB)" in caplog.text
    trained = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["split"] == "train"]
    assert all(r["gflop_s"] == pytest.approx(r["examples_per_s"] * model["train_step_flops"] / batch / 1e9)
               for r in trained)
    # pmap: each device's program counted; every device repeats the optimizer update on its replica
    spread = train(make_cfg("debug=smoke", "logger.summary=true", "parallel=pmap", "parallel.cpu_devices=2",
                            out="pmap"))["model"]
    assert spread["eval_flops_per_example"] == pytest.approx(model["eval_flops_per_example"], rel=0.01)
    assert 1.0 < spread["train_step_flops"] / model["train_step_flops"] < 1.5
    # sharded: the global program is lowered before XLA splits it, so it is counted once, not once a device
    whole = train(make_cfg("debug=smoke", "logger.summary=true", "parallel=sharded", "parallel.cpu_devices=2",
                           out="sharded"))["model"]
    assert whole["eval_flops_per_example"] == pytest.approx(model["eval_flops_per_example"], rel=0.01)
    assert whole["train_step_flops"] == pytest.approx(model["train_step_flops"], rel=0.05)
    # a streamed split lowers one step (no K batches copied for the count): the same count, less the gathers
    streamed = train(make_cfg("debug=smoke", "logger.summary=true", "parallel.device_data_mb=0", out="streamed"))
    assert streamed["model"]["train_step_flops"] == pytest.approx(model["train_step_flops"], rel=0.01)


def test_where_a_lowering_has_no_cost_analysis_the_flops_are_those_of_its_program_lowered_on_the_cpu(
        make_cfg, monkeypatch):
    """A TPU's lowering reports no cost analysis (a PJRT plug-in analyses compiled programs only): the summary
    counts the same programs lowered for the host's CPU, as many FLOPs as the backend's own count would be."""
    counted = train(make_cfg("debug=smoke", "logger.summary=true", out="own"))["model"]
    analyse = jax.stages.Lowered.cost_analysis
    # as on a TPU: only a lowering made on the CPU device by choice reports its cost
    monkeypatch.setattr(jax.stages.Lowered, "cost_analysis",
                        lambda self: analyse(self) if jax.config.jax_default_device is not None else None)
    monkeypatch.setattr(summary, "_counted_on_cpu", {})
    lowered_on_cpu = []
    on_cpu = summary._flops_on_cpu
    monkeypatch.setattr(summary, "_flops_on_cpu", lambda fn, args: lowered_on_cpu.append(fn) or on_cpu(fn, args))
    model = train(make_cfg("debug=smoke", "logger.summary=true", out="plugin"))["model"]
    assert model["train_step_flops"] == counted["train_step_flops"] > 0
    assert model["eval_flops_per_example"] == counted["eval_flops_per_example"] > 0
    assert model["achieved_gflop_s"] > 0
    assert lowered_on_cpu
    # a sweep's next job with only another seed runs the same programs: their counts are not lowered again
    del lowered_on_cpu[:]
    reseeded = train(make_cfg("debug=smoke", "logger.summary=true", "seed=1", out="reseeded"))["model"]
    assert (reseeded["train_step_flops"], reseeded["eval_flops_per_example"]) == (
        model["train_step_flops"], model["eval_flops_per_example"])
    assert lowered_on_cpu == []
    narrower = train(make_cfg("debug=smoke", "logger.summary=true", "model.hidden=[48,32]", out="narrower"))["model"]
    assert lowered_on_cpu and 0 < narrower["train_step_flops"] < model["train_step_flops"]


@pytest.mark.parametrize("model", ["model=linear", "model.dropout=0.5", "model=mlp"])
def test_a_k_step_calls_flops_count_is_one_steps(make_cfg, model):
    """XLA counts a K-step call's loop body once but its work before the loop whole (the rows' indices, the
    dropout masks drawn ahead): the count reported for 40-step calls equals a one-step call's."""
    def flops(*overrides):
        cfg = make_cfg("debug=smoke", model, "logger.summary=true", "trainer.max_steps=40", "trainer.log_every=40",
                       "trainer.eval_every=40", *overrides, out=f"run{len(overrides)}")
        return train(cfg)["model"]["train_step_flops"]

    assert flops() == pytest.approx(flops("trainer.steps_per_call=1"), rel=0.005)


# --- Early stopping --------------------------------------------------------------------------------------------

# The loss falls from eval to eval, never by min_delta: only the first eval (step 2) counts as an improvement, so the
# evals at 4 and 6 exhaust the patience and the run ends at 6 of 20 steps.
STOPPING = [*SGD, "trainer.max_steps=20", "trainer.eval_every=2", "trainer.log_every=1", "checkpoint.metric=loss",
            "trainer.early_stopping.min_delta=100", "trainer.early_stopping.patience=2"]


def test_min_delta_decides_what_counts_as_an_improvement():
    stopping = EarlyStopping(patience=2, min_delta=0.1, metric="accuracy", mode="max")
    evals = [(1, 0.5), (2, 0.55), (3, 0.65), (4, 0.7), (5, 0.74)]  # +0.05 and +0.04 over 0.65 do not count
    assert [stopping.update(s, {"accuracy": a}) for s, a in evals] == [False, False, False, False, True]
    assert (stopping.best, stopping.best_step, stopping.stopped_step) == (0.65, 3, 5)
    lower = EarlyStopping(patience=1, min_delta=0.0, metric="loss", mode="min")
    assert [lower.update(s, {"loss": v}) for s, v in [(1, 2.0), (2, 1.5), (3, 1.5)]] == [False, False, True]
    by_a_margin = EarlyStopping(patience=1, min_delta=0.1, metric="loss", mode="min")  # 0.95 is not 0.1 below 1
    assert [by_a_margin.update(s, {"loss": v}) for s, v in [(1, 1.0), (2, 0.95)]] == [False, True]


def test_an_undefined_metric_is_said_once_and_is_never_the_best(caplog):
    """A nan eval (r2 of a split with constant targets) counted as the best, and nothing could improve on it."""
    stopping = EarlyStopping(patience=1, min_delta=0.0, metric="r2", mode="max", split="validation")
    nan = float("nan")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        assert [stopping.update(s, {"r2": v}) for s, v in [(2, nan), (4, nan), (6, 0.5), (8, nan), (10, 0.7)]] == [
            False] * 5
    assert (stopping.best, stopping.best_step, stopping.bad_evals) == (0.7, 10, 0)
    said = [r.getMessage() for r in caplog.records if "undefined" in r.getMessage()]
    assert said == ["checkpoint.metric=r2 is undefined (nan) on the validation split at step 2: early stopping counts "
                    "no such eval and keeps none as the best checkpoint; set checkpoint.metric to one defined there "
                    "(e.g. loss), or give the validation split more than one example and targets that vary (r2 "
                    "divides by their variance)."]
    diverged = EarlyStopping(patience=1, min_delta=0.0, metric="loss", mode="min")  # not "choose loss" for loss
    with caplog.at_level(logging.WARNING, logger="zoo"):
        assert diverged.update(4, {"loss": nan}) is False
    assert caplog.records[-1].getMessage() == (
        "checkpoint.metric=loss is undefined (nan) on the test split at step 4: early stopping counts no such eval and "
        "keeps none as the best checkpoint; the model's outputs on the test split are not finite; lower "
        "optimizer.learning_rate or set trainer.clip_norm.")


def test_a_run_whose_metric_is_undefined_trains_to_its_end_and_reports_the_final_state(make_cfg, tmp_path, caplog):
    """One validation example: its r2 is nan at every eval. The run stopped at its second eval and reported its
    first as the best, saying nothing."""
    with caplog.at_level(logging.WARNING, logger="zoo"):
        results = train(make_cfg("debug=smoke", "dataset=synthetic_linear", "model=linear",
                                 "dataset.validation_fraction=0.001", "checkpoint.metric=r2", "trainer.max_steps=8",
                                 "trainer.eval_every=2", "trainer.early_stopping.patience=1"))
    assert results["steps"] == 8 and results["early_stopping"]["stopped_step"] is None
    assert results["early_stopping"]["best_checkpoint_step"] == 8
    assert sum("r2 is undefined (nan) on the validation split at step 2" in r.getMessage()
               for r in caplog.records) == 1
    evaluated = evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="eval"))  # checkpoint=final
    assert (evaluated["step"], evaluated["metrics"]) == (8, results["test"])  # what results.json reports
    with pytest.raises(UserError, match=r"^no checkpoint in .*/checkpoints has a defined r2 to pick the best from \(it "
                                        r"is nan at every eval\); use checkpoint=latest or a step\.$"):
        evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", "checkpoint=best", config_name="eval"))


def test_early_stopping_ends_the_run_and_reports_the_best_checkpoint(make_cfg, tmp_path):
    results = train(make_cfg(*STOPPING))
    assert results["steps"] == 6
    logged = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert max(r["step"] for r in logged) == 6
    at_2, at_6 = (next(r for r in logged if r["split"] == "test" and r["step"] == s and not r.get("final"))
                  for s in (2, 6))
    # the best checkpoint is the lowest loss, at 6: a fall smaller than min_delta resets no patience, yet is lower
    assert results["early_stopping"] == {"best": at_2["loss"], "best_step": 2, "bad_evals": 2, "stopped_step": 6,
                                         "best_checkpoint_step": 6}
    assert at_6["loss"] < at_2["loss"]
    assert results["test"] == {k: v for k, v in at_6.items() if k not in ("step", "split")}
    final = [r for r in logged if r.get("final")]  # the best checkpoint's evals, at its step: one result a step
    assert [(r["split"], r["step"]) for r in final] == [("test", 6)]
    assert {k: v for k, v in final[0].items() if k != "final"} == at_6
    evaluated = evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="eval"))  # checkpoint=final
    assert (evaluated["step"], evaluated["metrics"]) == (6, results["test"])  # what results.json reports
    assert evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", "checkpoint=latest", config_name="eval"))["step"] == 6
    again = train(make_cfg(*STOPPING))  # the same command on a stopped run does not train on: its results stand
    assert again["steps"] == 6 and again["test"] == results["test"]
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl") == logged
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(again["state"].params),
                                                    jax.tree.leaves(results["state"].params)))  # the best, again


def test_early_stopping_reports_its_best_checkpoint_where_a_newer_one_is_kept(make_cfg, tmp_path):
    """Above, the best checkpoint is also the newest: reporting the newest would pass there. Here the loss rises
    after step 4 (SGD at 0.5), the run stops at 6, and what it reports is step 4's state, not step 6's."""
    results = train(make_cfg(*STOPPING, "optimizer.learning_rate=0.5"))
    logged = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    at_4, at_6 = (next(r for r in logged if r["split"] == "test" and r["step"] == s and not r.get("final"))
                  for s in (4, 6))
    assert at_6["loss"] > at_4["loss"]
    assert (results["steps"], results["early_stopping"]["best_checkpoint_step"]) == (6, 4)
    assert results["test"] == {k: v for k, v in at_4.items() if k not in ("step", "split")}
    evaluated = evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="eval"))  # checkpoint=final
    assert (evaluated["step"], evaluated["metrics"]) == (4, results["test"])
    assert evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", "checkpoint=latest", config_name="eval"))["step"] == 6

def test_a_run_early_stopping_ended_asked_for_fewer_steps_than_it_trained_is_refused(make_cfg, tmp_path):
    """Stopped at step 6, it cannot stand for a 4-step run, which would have evaluated its final state at step 4
    and stopped nowhere: its results.json was reported again as that run's."""
    train(make_cfg(*STOPPING))
    results = (tmp_path / "run" / "results.json").read_text()
    with pytest.raises(UserError, match=r"^hydra\.run\.dir=.*/run holds a run early stopping ended at step 6, past "
                                        r"the 4 steps trainer\.epochs, trainer\.max_steps and trainer\.batch_size now "
                                        r"give; restore them or choose a new hydra\.run\.dir\.$"):
        train(make_cfg(*STOPPING, "trainer.max_steps=4"))
    assert (tmp_path / "run" / "results.json").read_text() == results
    assert train(make_cfg(*STOPPING, "trainer.max_steps=10"))["steps"] == 6  # as a 10-step run stops there too


def test_early_stopping_reports_the_final_state_as_its_best_when_it_beats_every_eval(make_cfg, tmp_path):
    """A run patience never stopped: its final state competes with its periodic evals for the best checkpoint; when
    it wins, early stopping's best and best_step are its, not the last periodic eval's."""
    results = train(make_cfg(*SGD, "trainer.max_steps=6", "trainer.eval_every=2", "trainer.log_every=1",
                             "checkpoint.metric=loss", "trainer.early_stopping.patience=5"))
    stopping = results["early_stopping"]
    assert stopping["stopped_step"] is None and stopping["best_checkpoint_step"] == 6  # the loss falls to the end
    assert (stopping["best_step"], stopping["best"], stopping["bad_evals"]) == (6, results["test"]["loss"], 0)
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["split"] == "test" and not r.get("final")]
    assert results["test"]["loss"] < min(r["loss"] for r in rows[:2])
    # the final state's eval, which patience counted, is a row too (the log had none of it), marked as the end's
    assert [(r["step"], r.get("end")) for r in rows] == [(2, None), (4, None), (6, True)]
    assert rows[2]["loss"] == pytest.approx(results["test"]["loss"], rel=1e-6)


def test_the_final_eval_of_a_run_patience_did_not_stop_counts_as_a_bad_eval_where_it_does_not_improve(make_cfg):
    """The loss rises after step 4 (SGD at 0.5): the final state's eval at 6 lost to step 4's, and bad_evals still
    said 0, as if the run had ended at its best eval."""
    results = train(make_cfg(*SGD, "optimizer.learning_rate=0.5", "trainer.max_steps=6", "trainer.eval_every=2",
                             "trainer.log_every=1", "checkpoint.metric=loss", "trainer.early_stopping.patience=5"))
    stopping = results["early_stopping"]
    assert (stopping["best_step"], stopping["best_checkpoint_step"], stopping["stopped_step"]) == (4, 4, None)
    assert stopping["bad_evals"] == 1 and stopping["best"] == results["test"]["loss"]

def test_early_stopping_patience_survives_preemption(make_cfg, monkeypatch):
    whole = train(make_cfg(*STOPPING, out="whole"))
    with monkeypatch.context() as patch:
        patch.setattr(RunLogger, "progress", sigterm_at(5))  # after the eval at 4 counted one bad eval
        with pytest.raises(Preempted):
            train(make_cfg(*STOPPING, out="resumed"))
    resumed = train(make_cfg(*STOPPING, out="resumed"))
    assert resumed["start_step"] == 5 and resumed["early_stopping"] == whole["early_stopping"]
    assert resumed["test"] == whole["test"]


def test_a_run_resumed_under_another_checkpoint_metric_counts_its_patience_afresh(make_cfg, monkeypatch, caplog):
    """Its counters held the best accuracy (0.14) and compared each loss (~2) with it as a loss: every eval was a bad
    one, the run stopped at step 10 while its loss fell, and results.json gave the accuracy as the best loss."""
    common = [*SGD, "optimizer.learning_rate=0.01", "trainer.max_steps=40", "trainer.eval_every=2",
              "trainer.log_every=1", "trainer.early_stopping.patience=3"]
    whole = train(make_cfg(*common, "checkpoint.metric=loss", out="whole"))
    assert whole["steps"] == 40  # the loss falls at every eval
    with monkeypatch.context() as patch:
        patch.setattr(RunLogger, "progress", sigterm_at(5))
        with pytest.raises(Preempted):
            train(make_cfg(*common, out="resumed"))  # ranked by accuracy
    with caplog.at_level(logging.WARNING, logger="zoo"):
        resumed = train(make_cfg(*common, "checkpoint.metric=loss", out="resumed"))
    assert resumed["steps"] == 40 and resumed["early_stopping"] == whole["early_stopping"]
    assert any("early stopping counts its patience afresh from step 5" in r.getMessage() for r in caplog.records)


def test_a_run_stopped_under_trainer_resume_never_says_to_resume_with_auto(make_cfg, monkeypatch):
    """Its stop line said to resume with the same command, which trainer.resume=never then refused: the run's
    directory held checkpoints."""
    with monkeypatch.context() as patch:
        patch.setattr(RunLogger, "progress", sigterm_at(5))
        with pytest.raises(Preempted, match=r"the checkpoint is saved — resume with the same command, "
                                            r"trainer\.resume=auto instead of never, and hydra\.run\.dir="):
            train(make_cfg(*SGD, "trainer.log_every=1", "trainer.resume=never"))
    assert train(make_cfg(*SGD, "trainer.log_every=1", "trainer.resume=auto"))["start_step"] == 5


def test_without_a_stop_the_final_metrics_are_the_best_checkpoints(make_cfg, tmp_path):
    results = train(make_cfg(*SGD, "trainer.max_steps=8", "trainer.eval_every=2", "optimizer.learning_rate=1.0",
                             "trainer.early_stopping.patience=100"))
    assert results["early_stopping"]["stopped_step"] is None and results["steps"] == 8
    best = evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", "checkpoint=best", config_name="eval"))
    assert best["step"] == results["early_stopping"]["best_checkpoint_step"]
    assert best["metrics"] == results["test"]


# --- Gradient accumulation ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["parallel=none", "parallel=pmap"])
def test_accumulated_micro_batches_equal_one_large_batch(make_cfg, mode):
    # steps 0-3 of 8 examples are, in order, the first 32 examples of the epoch: step 0 of the 32-example run
    common = [*SGD, mode, "parallel.cpu_devices=2", "trainer.eval_every=0", "checkpoint.enabled=false"]
    large = train(make_cfg(*common, "trainer.batch_size=32", "trainer.max_steps=3", out="large"))
    micro = train(make_cfg(*common, "trainer.batch_size=8", "trainer.accumulate=4", "trainer.max_steps=12",
                           out="micro"))
    assert close(micro["state"].params, large["state"].params)
    np.testing.assert_allclose(micro["test"]["loss"], large["test"]["loss"], rtol=1e-5)
    plain = train(make_cfg(*common, "trainer.batch_size=8", "trainer.max_steps=12", out="plain"))
    assert not close(plain["state"].params, large["state"].params, tol=1e-3)  # the comparison can fail


# --- Gradient clipping -------------------------------------------------------------------------------------------

def test_clip_norm_bounds_each_update_by_the_learning_rate_times_the_norm(make_cfg):
    """Plain SGD moves the parameters by learning_rate x the clipped gradient: one step with trainer.clip_norm
    below the gradient's norm moves them by exactly learning_rate x clip_norm, measured over all parameters."""
    common = ["debug=smoke", "optimizer=sgd", "optimizer.momentum=0.0", "model.dropout=0.0", "trainer.max_steps=1",
              "trainer.eval_every=0", "checkpoint.enabled=false"]

    def moved(*overrides):
        initial = build(make_cfg(*common, *overrides)).host_state.params
        trained = train(make_cfg(*common, *overrides, out=f"run{len(overrides)}"))["state"].params
        return float(optax.global_norm(jax.tree.map(lambda a, b: a - b, trained, initial)))

    assert moved("trainer.clip_norm=1e-3") == pytest.approx(0.05 * 1e-3, rel=1e-4)
    assert moved() > 0.05 * 1e-2  # the unclipped gradient is larger: the clip was in force


def test_profile_writes_a_trace_of_the_training(make_cfg, tmp_path):
    train(make_cfg("debug=smoke", "trainer.profile=true"))
    profile = tmp_path / "run" / "profile"
    traces = [*profile.rglob("*.xplane.pb"), *profile.rglob("*.trace.json.gz")]  # TensorBoard's and Perfetto's
    assert len(traces) == 2 and all(t.stat().st_size > 0 for t in traces)


# --- Weight averaging ---------------------------------------------------------------------------------------------

def test_ema_null_is_todays_state_and_decay_zero_changes_nothing(make_cfg):
    plain = train(make_cfg(*SGD, out="plain"))
    assert jax.tree.structure(plain["state"].opt_state) == jax.tree.structure(
        optax.sgd(0.05, momentum=0.9).init(plain["state"].params))  # no averaging state at all
    zero = train(make_cfg(*SGD, "trainer.ema_decay=0.0", out="zero"))
    assert leaves_equal(zero["state"].params, plain["state"].params)  # averaging never touches training
    assert zero["test"] == plain["test"]  # the average with decay 0 is the parameters: evals agree exactly


def test_ema_follows_the_parameters_and_every_eval_uses_it(make_cfg, tmp_path, capsys):
    params = [build(make_cfg(*SGD)).host_state.params]
    for steps in (1, 2, 3):
        params.append(train(make_cfg(*SGD, f"trainer.max_steps={steps}", out=f"p{steps}"))["state"].params)
    averaged = train(make_cfg(*SGD, "trainer.max_steps=3", "trainer.ema_decay=0.75", out="ema"))
    expected = params[0]
    for p in params[1:]:
        expected = jax.tree.map(lambda e, x: 0.75 * e + 0.25 * x, expected, p)
    assert close(optax.tree_utils.tree_get(averaged["state"].opt_state, "ema_params"), expected, tol=1e-6)
    assert leaves_equal(averaged["state"].params, params[3])
    assert averaged["test"] != train(make_cfg(*SGD, "trainer.max_steps=3", out="again"))["test"]
    evaluated = evaluate(make_cfg(f"run_dir={tmp_path / 'ema'}", config_name="eval"))
    assert evaluated["metrics"] == averaged["test"]
    assert "exponential moving average of the parameters, ema_decay=0.75" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["parallel.mode=none", "parallel.mode=pmap"])
def test_averaged_and_accumulated_run_resumes_bitwise(make_cfg, monkeypatch, mode):
    common = [*SGD, mode, "parallel.cpu_devices=2", "trainer.max_steps=8", "trainer.checkpoint_every=3",
              "trainer.log_every=1", "trainer.ema_decay=0.9", "trainer.accumulate=2"]
    whole = train(make_cfg(*common, out="whole"))
    with monkeypatch.context() as patch:
        patch.setattr(RunLogger, "progress", sigterm_at(5))  # halfway through an accumulation
        with pytest.raises(Preempted):
            train(make_cfg(*common, out="resumed"))
    resumed = train(make_cfg(*common, out="resumed"))
    assert resumed["start_step"] == 5 and leaves_equal(whole["state"], resumed["state"])
    assert whole["test"] == resumed["test"]
    assert records(make_cfg(out="whole").paths.output_dir) == records(make_cfg(out="resumed").paths.output_dir)


# --- Learning rate in the logs -------------------------------------------------------------------------------------

class ScalarRecorder:
    """Stands in for zoo.run_logger.TensorBoardWriter: what the run would have written to TensorBoard."""

    scalars = []

    def __init__(self, *args, **kwargs):
        pass

    def add_scalars(self, step, scalars):
        self.scalars.extend((tag, np.float32(value), step) for tag, value in scalars.items())

    def close(self):
        pass


@pytest.mark.parametrize("accumulate", [1, 2])
def test_logged_learning_rate_is_the_one_optax_applied(make_cfg, tmp_path, monkeypatch, accumulate):
    monkeypatch.setattr(zoo.run_logger, "TensorBoardWriter", ScalarRecorder)
    monkeypatch.setattr(ScalarRecorder, "scalars", [])
    train(make_cfg(*SGD, "schedule=warmup_cosine", "schedule.warmup_steps=2", "trainer.max_steps=8",
                   "trainer.log_every=1", f"trainer.accumulate={accumulate}", "logger.tensorboard=true"))
    logged = [r["learning_rate"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["split"] == "train"]
    np.testing.assert_allclose([v for tag, v, _ in ScalarRecorder.scalars if tag == "train/learning_rate"], logged,
                               rtol=1e-6)  # TensorBoard keeps float32
    # optax's own record of each update's rate: inject_hyperparams stores the rate of the update it just made
    schedule = optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, 8 // accumulate, 0.0)
    tx = optax.MultiSteps(optax.inject_hyperparams(optax.sgd)(learning_rate=schedule), accumulate)
    params = {"w": np.zeros(1, np.float32)}
    state, applied = tx.init(params), []
    for _ in range(8):
        _, state = tx.update({"w": np.ones(1, np.float32)}, state, params)
        applied.append(float(state.inner_opt_state.hyperparams["learning_rate"]))
    np.testing.assert_allclose(logged, applied, rtol=1e-6)
    assert len(set(logged)) > 3  # warm-up and decay, not a constant


def test_tensorboard_events_are_written_without_importing_pytorch(tmp_path, data_dir):
    """tensorboardX imports torch wherever it is installed: seconds at each start, for nothing the zoo writes.
    A stand-in finder records every attempt to import torch, as an installed PyTorch would be found."""
    script = f"""
import importlib.abc, sys
asked = []
class Torch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            asked.append(name)
        return None
sys.meta_path.insert(0, Torch())
from zoo.run_logger import TensorBoardWriter
writer = TensorBoardWriter({str(tmp_path)!r})
writer.add_scalars(1, {{"train/loss": 0.5}})
writer.close()
assert "torch" not in sys.modules, "the mark hiding torch was left behind"
print("asked", asked)
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=subprocess_env(data_dir), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "asked []" in proc.stdout
    assert list(tmp_path.glob("events*"))
