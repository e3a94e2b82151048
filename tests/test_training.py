"""Training contracts: loss falls, eval is exact for any batch size, runs are deterministic, artifacts exist."""
import functools
import json
import pathlib
import shutil
import struct
import types

import jax
import jax.numpy as jnp
import matplotlib.image
import numpy as np
import pytest
from flax import nnx

import zoo.steps
import zoo.train
from zoo.data import load_dataset
from zoo.data.feed import fold_mask
from zoo.data.pipeline import PADDING_STEP
from zoo.models.layers import draw_masks
from zoo.steps import PackedSums
from zoo.train import build, build_model, initialised_model, model_initialiser, train


def leaves_equal(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


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


@pytest.mark.parametrize("model,dataset,overrides", [
    ("mlp", "digits", ["model.dropout=0.1"]), ("cnn", "digits", ["model.channels=[4,8]", "model.dense=16"]),
    ("linear", "diabetes", []),
])
def test_the_compiled_initialiser_draws_the_eager_models_parameters_bitwise(make_cfg, model, dataset, overrides):
    cfg = make_cfg(f"model={model}", f"dataset={dataset}", "seed=3", *overrides)
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    eager, compiled = nnx.state(build_model(cfg, data)), nnx.state(initialised_model(cfg, data))
    assert jax.tree.structure(eager) == jax.tree.structure(compiled)
    assert leaves_equal(eager, compiled)
    assert not leaves_equal(eager, nnx.state(initialised_model(make_cfg(f"model={model}", f"dataset={dataset}",
                                                                         "seed=4", *overrides), data)))


def test_runs_of_one_process_with_the_same_model_share_its_compiled_initialiser(make_cfg):
    """A sweep's later jobs (other seeds, learning rates) find the initialiser traced and compiled; it still draws
    each job's own parameters. A model of other widths, or the same one on data of another shape, gets its own."""
    cfg = make_cfg("seed=1")
    digits = load_dataset(cfg.dataset, cfg.paths.data_dir)
    first = model_initialiser(cfg, digits)[1]
    other = make_cfg("seed=2", "optimizer.learning_rate=0.1")
    assert model_initialiser(other, digits)[1] is first
    assert leaves_equal(nnx.state(build_model(other, digits)), first(jax.random.key(2)))
    assert model_initialiser(make_cfg("model.hidden=[8]"), digits)[1] is not first
    regression = make_cfg("dataset=synthetic_linear")  # the same model config (no recipe), other inputs and outputs
    assert regression.model == cfg.model
    data = load_dataset(regression.dataset, regression.paths.data_dir)
    assert model_initialiser(regression, data)[1] is not first


@pytest.mark.parametrize("eval_batch_size", [1, 7, 100, 359, 512])
def test_eval_counts_every_example_once_for_any_batch_size(make_cfg, eval_batch_size):
    # digits' test split has 359 examples (a prime): only 1 and 359 divide it
    results = train(make_cfg("debug=smoke", f"trainer.eval_batch_size={eval_batch_size}"))
    assert results["test"]["count"] == 359
    reference = train(make_cfg("debug=smoke", "trainer.eval_batch_size=359", out="ref"))
    np.testing.assert_allclose(results["test"]["loss"], reference["test"]["loss"], rtol=1e-6)
    assert results["test"]["accuracy"] == reference["test"]["accuracy"]


def test_padding_rows_count_for_nothing_even_where_they_are_predicted_right():
    """eval pads its last batch with copies of an example; a smoke-trained model gets that one wrong, so a padding
    row counted as correct went unseen above. Here the padding rows are predicted perfectly (classification) or
    terribly (regression): the sums equal those of the real rows alone."""
    from zoo.tasks import classification_sums, regression_sums

    logits = jnp.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [5.0, 0.0], [5.0, 0.0]])
    labels = jnp.array([0, 0, 1, 0, 0])  # the last two rows, padding, argmax-correct
    mask = jnp.array([1.0, 1.0, 1.0, 0.0, 0.0])
    padded, real = classification_sums(logits, labels, mask), classification_sums(logits[:3], labels[:3], mask[:3])
    assert float(padded["correct"]) == float(real["correct"]) == 1.0
    assert float(padded["count"]) == 3.0 and float(padded["loss_sum"]) == pytest.approx(float(real["loss_sum"]))
    predictions, targets = jnp.array([[1.0], [2.0], [9.0], [100.0]]), jnp.array([[1.5], [2.0], [8.0], [0.0]])
    padded = regression_sums(predictions, targets, jnp.array([1.0, 1.0, 1.0, 0.0]))
    real = regression_sums(predictions[:3], targets[:3], jnp.ones(3))
    for key in real:
        np.testing.assert_allclose(np.asarray(padded[key]), np.asarray(real[key]), rtol=1e-6)

def test_same_seed_same_metrics(make_cfg):
    a = train(make_cfg("debug=smoke", "model.dropout=0.1", out="a"))
    b = train(make_cfg("debug=smoke", "model.dropout=0.1", out="b"))
    assert a["test"] == b["test"] and a["train"] == b["train"]


@pytest.mark.parametrize("mode", ["none", "sharded"])
def test_where_the_train_split_lives_changes_no_result(make_cfg, mode):
    """Indices gathered from a split resident on the device(s) == batches copied from the host, bitwise."""
    common = ("debug=smoke", "model.dropout=0.1", f"parallel.mode={mode}", "parallel.cpu_devices=2")
    resident = build(make_cfg(*common, out="resident"))
    streamed = build(make_cfg(*common, "parallel.device_data_mb=0", out="streamed"))
    assert resident.feed.resident and not streamed.feed.resident
    a = train(make_cfg(*common, out="resident"))
    b = train(make_cfg(*common, "parallel.device_data_mb=0", out="streamed"))
    assert a["test"] == b["test"] and a["train"] == b["train"]
    for x, y in zip(jax.tree.leaves(a["state"].params), jax.tree.leaves(b["state"].params), strict=True):
        np.testing.assert_array_equal(x, y)


def params_after_one_step(run, host_state):
    compiled, mode = run.compiled, run.compiled.mode
    fresh = jax.tree.map(np.array, host_state)  # a copy: the call donates (deletes) the state it is given
    state, _ = compiled.train(mode.put_state(fresh), compiled.put_sums(compiled.zero_sums),
                              *run.feed.args(0, 1))
    return jax.device_get(state.params)


def test_seed_decides_data_order_and_dropout_masks_not_only_initialisation(make_cfg):
    runs = {seed: build(make_cfg("debug=smoke", "model.dropout=0.5", f"seed={seed}")) for seed in (0, 1)}
    first = runs[0].stream.chunk(0, 3)["x"]
    np.testing.assert_array_equal(build(make_cfg("debug=smoke", "seed=0")).stream.chunk(0, 3)["x"], first)
    assert not np.array_equal(runs[1].stream.chunk(0, 3)["x"], first)  # another order of the same examples
    next_epoch = runs[0].stream.chunk(runs[0].stream.steps_per_epoch, 3)["x"]
    assert not np.array_equal(next_epoch, first)  # and a fresh order every epoch
    # Same parameters, same batch; only the dropout key (from the seed) differs.
    state, other_key = runs[0].host_state, runs[1].host_state.rng
    reference = params_after_one_step(runs[0], state)
    assert leaves_equal(params_after_one_step(runs[0], state), reference)
    assert not leaves_equal(params_after_one_step(runs[0], state.replace(rng=other_key)), reference)
    without_dropout = build(make_cfg("debug=smoke", "model.dropout=0.0"))
    assert leaves_equal(params_after_one_step(without_dropout, without_dropout.host_state.replace(rng=other_key)),
                        params_after_one_step(without_dropout, without_dropout.host_state))


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
    assert [e["step"] for e in events if e.get("final")] == [6]  # the finished run's eval, not the periodic one
    image = matplotlib.image.imread(run / "curves.png")
    assert image.shape[:2] == (400, 1000) and image.std() > 0.05  # 10x4 inches at 100 dpi, not blank
    logged = {(f"{e['split']}/{name}", e["step"]): value for e in events for name, value in e.items()
              if name not in ("step", "split", "count", "final")}
    scalars = tensorboard_scalars(run / "tensorboard")
    assert scalars.keys() == logged.keys()
    np.testing.assert_allclose([scalars[k] for k in logged], list(logged.values()), rtol=1e-6)  # float32 there


def tensorboard_scalars(directory) -> dict:
    """(tag, step) -> value, read back from the event files (records: u64 length, u32 crc, data, u32 crc) in
    the order they were written, as TensorBoard does: a SessionLog START at step s drops the events from s on.
    A (tag, step) written twice is an error: a viewer would show both values."""
    from tensorboardX.proto import event_pb2

    scalars = {}
    for path in sorted(pathlib.Path(directory).glob("events.out.tfevents.*")):  # named by their creation time
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            if event.session_log.status == event_pb2.SessionLog.START:
                scalars = {key: value for key, value in scalars.items() if key[1] < event.step}
            for v in event.summary.value:
                assert (v.tag, event.step) not in scalars, f"{v.tag} at step {event.step} twice"
                scalars[v.tag, event.step] = v.simple_value
    return scalars


def test_tensorboard_drops_what_a_resumed_run_redoes_as_metrics_jsonl_does(make_cfg, tmp_path, monkeypatch):
    import tensorboardX.event_file_writer

    # both attempts' event files within one second of the clock tensorboardX names them by
    monkeypatch.setattr(tensorboardX.event_file_writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    common = ["debug=smoke", "logger.tensorboard=true", "trainer.log_every=1", "trainer.checkpoint_every=2",
              "checkpoint.async_save=false"]
    train(make_cfg(*common))
    run = tmp_path / "run"
    for path in (run / "checkpoints" / "6", run / "results.json"):  # killed after logging step 6, before saving it
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    train(make_cfg(*common, "optimizer.learning_rate=1e-4"))  # redoes steps 5 and 6 otherwise
    assert_tensorboard_holds_metrics_jsonl(run)


def assert_tensorboard_holds_metrics_jsonl(run) -> None:
    """Each scalar of the run's event files once, equal to its metrics.jsonl value (counts are not scalars)."""
    events = read_jsonl(run / "metrics.jsonl")
    logged = {(f"{e['split']}/{name}", e["step"]): value for e in events for name, value in e.items()
              if name not in ("step", "split", "count", "final")}
    scalars = tensorboard_scalars(run / "tensorboard")
    assert scalars.keys() == logged.keys()
    np.testing.assert_allclose([scalars[k] for k in logged], list(logged.values()), rtol=1e-6)


def test_tensorboard_of_a_lengthened_run_holds_what_its_metrics_jsonl_holds(make_cfg, tmp_path, monkeypatch):
    """Lengthened, a run redoes the evals at its old end (step 4) as periodic ones: its event files held the old
    final evals there too, each scalar twice."""
    import tensorboardX.event_file_writer

    monkeypatch.setattr(tensorboardX.event_file_writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    common = ["debug=smoke", "logger.tensorboard=true", "trainer.eval_every=2", "trainer.log_every=2"]
    train(make_cfg(*common, "trainer.max_steps=4"))
    train(make_cfg(*common, "trainer.max_steps=8"))
    run = tmp_path / "run"
    assert_tensorboard_holds_metrics_jsonl(run)


def test_tensorboard_of_a_run_early_stopping_reports_holds_what_its_metrics_jsonl_holds(make_cfg, tmp_path):
    """Early stopping logs the final evals at the best checkpoint's step (4 here, of 6), where the periodic eval of
    the same state lies: its event files held that split's scalars there twice. Killed before results.json, the
    rerun resumes from step 6 and logs the final evals at step 4 again."""
    common = ["debug=smoke", "logger.tensorboard=true", "trainer.eval_every=2", "dataset.validation_fraction=0.2",
              "trainer.early_stopping.patience=1", "optimizer.learning_rate=3.0"]
    assert train(make_cfg(*common))["early_stopping"]["best_checkpoint_step"] == 4
    run = tmp_path / "run"
    assert_tensorboard_holds_metrics_jsonl(run)
    (run / "results.json").unlink()
    assert train(make_cfg(*common))["start_step"] == 6
    assert_tensorboard_holds_metrics_jsonl(run)


def test_dropout_masks_drawn_ahead_of_a_call_are_those_its_steps_would_draw(make_cfg, monkeypatch):
    """zoo.steps draws a call's masks before its scan; with that turned off each step draws its own (nnx.Dropout).
    Calls of 4 steps to log boundaries every 5: padded calls, so skipped rows must not take a step's masks."""
    base = ("debug=smoke", "model=mlp", "model.dropout=0.3", "trainer.steps_per_call=4", "trainer.max_steps=10",
            "trainer.log_every=5", "trainer.eval_every=5")
    drawn = []
    monkeypatch.setattr(zoo.steps, "draw_masks", lambda calls, key: drawn.append(calls) or draw_masks(calls, key))
    ahead = train(make_cfg(*base, out="ahead"))
    assert drawn and [shape for shape, _ in drawn[0]] == [(16, 256), (16, 256)]  # the two hidden layers' masks
    monkeypatch.setattr(zoo.steps, "PREDRAWN_MASKS_BYTES", 0)
    drawn.clear()
    inline = train(make_cfg(*base, out="inline"))
    assert not drawn
    assert ahead["steps"] == inline["steps"] == 10
    assert ahead["train"] == inline["train"] and ahead["test"] == inline["test"]
    assert leaves_equal(ahead["state"].params, inline["state"].params)


def test_rows_skipped_before_a_step_take_none_of_its_dropout_masks(make_cfg, monkeypatch):
    """A population member resumed later than the others waits, masked, at the start of a call: the masks drawn
    ahead must follow the steps that run, not the rows. Skipped, active, skipped, active rows, both ways."""
    def call(predraw_bytes):
        monkeypatch.setattr(zoo.steps, "PREDRAWN_MASKS_BYTES", predraw_bytes)
        run = build(make_cfg("debug=smoke", "model=mlp", "model.dropout=0.3", out=f"skip-{predraw_bytes}"))
        compiled, mode = run.compiled, run.compiled.mode
        idx, mask = run.stream.indices(0, 4)
        mask[[0, 2]] = PADDING_STEP  # rows 0 and 2 skipped: rows 1 and 3 run as steps 0 and 1
        state, _ = compiled.train(mode.put_state(jax.tree.map(np.array, run.host_state)),
                                  compiled.put_sums(compiled.zero_sums), mode.put_chunk({"idx": fold_mask(idx, mask)}),
                                  run.feed.rows)
        return jax.device_get(state)

    ahead, inline = call(zoo.steps.PREDRAWN_MASKS_BYTES), call(0)
    assert int(ahead.step) == int(inline.step) == 2
    assert leaves_equal(ahead.params, inline.params)


@pytest.mark.parametrize("members", [False, True])
def test_skipped_rows_are_no_steps_wherever_they_lie(make_cfg, monkeypatch, members):
    """A padding step (a call's padding, or a population member waiting) is no step: a call with skipped rows
    before, between and after its active ones leaves exactly the state and sums of a call of the active rows
    alone. `members`: the loop a population's vmapped program runs (all K iterations, the skipped last)."""
    monkeypatch.setattr(zoo.train, "make_steps", functools.partial(zoo.train.make_steps, members=members))
    run = build(make_cfg("debug=smoke", "model=mlp", "model.dropout=0.3", out="skips"))
    compiled, mode = run.compiled, run.compiled.mode

    def call(idx, mask):
        state, sums = compiled.train(mode.put_state(jax.tree.map(np.array, run.host_state)),
                                     compiled.put_sums(compiled.zero_sums), mode.put_chunk({"idx": fold_mask(idx, mask)}),
                                     run.feed.rows)
        return jax.device_get(state), compiled.get_sums(sums)

    idx, mask = run.stream.indices(0, 5)
    mask[[0, 2, 4]] = PADDING_STEP
    (skipping, skipping_sums), (dense, dense_sums) = call(idx, mask), call(idx[[1, 3]], mask[[1, 3]])
    assert int(skipping.step) == int(dense.step) == 2
    assert leaves_equal(skipping, dense) and leaves_equal(skipping_sums, dense_sums)
    assert skipping_sums["count"] == 2 * run.stream.batch_size


def test_steps_per_call_changes_nothing_but_speed(make_cfg, tmp_path):
    # 5 steps per epoch and K=3: calls of 3 steps cross the epoch boundaries at steps 5, 10 and 15
    base = ["debug=smoke", "model=mlp", "model.dropout=0.1", "trainer.batch_size=256", "trainer.epochs=4",
            "trainer.max_steps=null", "trainer.log_every=10", "trainer.eval_every=10"]
    one = train(make_cfg(*base, "trainer.steps_per_call=1", out="k1"))
    three = train(make_cfg(*base, "trainer.steps_per_call=3", out="k3"))
    assert one["steps"] == three["steps"] == 20
    np.testing.assert_allclose(three["test"]["loss"], one["test"]["loss"], rtol=1e-6)
    losses = lambda d: [r["loss"] for r in read_jsonl(tmp_path / d / "metrics.jsonl") if r["split"] == "train"]  # noqa: E731
    np.testing.assert_allclose(losses("k3"), losses("k1"), rtol=1e-6)


@pytest.mark.parametrize("traced", [False, True])
def test_packed_metric_sums_unpack_to_what_was_packed(traced):
    sums = {"loss_sum": np.float32(2.5), "count": np.float32(3), "y_sum": np.array([1.0, -2.0], np.float32),
            "conf": np.arange(6, dtype=np.float32).reshape(3, 2)}
    packed = PackedSums(sums)
    if traced:
        round_trip = jax.jit(lambda s: packed.unpack(packed.pack(s, jnp)))(sums)
    else:
        vector = packed.pack(sums)
        assert vector.shape == (10,)  # one array crosses to and from each train call
        round_trip = packed.unpack(vector)
    assert round_trip.keys() == sums.keys()
    for name, value in sums.items():
        np.testing.assert_array_equal(round_trip[name], value)
        assert np.shape(round_trip[name]) == np.shape(value)


def _regression_metrics_in_batches(predictions, targets, batch):
    from zoo.tasks import regression_metrics, regression_sums

    parts = [regression_sums(jnp.asarray(predictions[i:i + batch]), jnp.asarray(targets[i:i + batch]),
                             jnp.ones(len(targets[i:i + batch]), jnp.float32)) for i in range(0, len(targets), batch)]
    return regression_metrics({k: sum(np.asarray(p[k], np.float64) for p in parts) for k in parts[0]})


def test_r2_from_batch_sums_equals_scikit_learns_and_is_nan_when_rounding_is_all_there_is():
    from sklearn.metrics import r2_score

    rng = np.random.default_rng(0)
    targets = rng.normal(3.0, 2.0, (1000, 1)).astype(np.float32)
    predictions = (targets + rng.normal(0, 1.0, targets.shape)).astype(np.float32)
    for batch in (7, 256, 1000):
        r2 = _regression_metrics_in_batches(predictions, targets, batch)["r2"]
        assert abs(r2 - r2_score(targets, predictions)) < 1e-5, (batch, r2)
    one = _regression_metrics_in_batches(predictions[:1] + 1, targets[:1] * 1.001, 1)
    assert one["count"] == 1 and np.isnan(one["r2"])  # no variance in one example: sst is float32 rounding
    shifted = _regression_metrics_in_batches(predictions + 1e4, targets + 1e4, 256)  # spread 2, mean 1e4
    assert np.isnan(shifted["r2"])  # float32 sums cannot resolve this spread; a number would be noise


def test_each_step_draws_its_own_dropout_masks(make_cfg):
    run = build(make_cfg("debug=smoke", "model=mlp", "model.dropout=0.5", "optimizer=sgd", "optimizer.momentum=0.0"))
    compiled, mode = run.compiled, run.compiled.mode
    data, rows = run.feed.args(0, 1, pad_to=1)
    losses = []
    for step in (0, 1):  # the same parameters and batch: only the step, and so its dropout key, differs
        state = jax.tree.map(np.array, run.host_state).replace(step=np.int32(step))
        _, acc = compiled.train(mode.put_state(state), compiled.put_sums(compiled.zero_sums), data, rows)
        losses.append(float(compiled.get_sums(acc)["loss_sum"]))
    assert losses[0] != losses[1]


def test_under_pmap_each_device_draws_its_own_dropout_masks(make_cfg):
    """Both devices get the same 8 rows: with one key for both, their loss sums would be equal, so the psum-med
    sum would be exactly twice device 0's, which the same call gives alone when device 1's rows are masked."""
    run = build(make_cfg("debug=smoke", "model=mlp", "model.dropout=0.5", "parallel.mode=pmap",
                         "parallel.cpu_devices=2"))
    compiled, mode = run.compiled, run.compiled.mode
    idx, mask = run.feed.stream.indices(0, 1)
    half = idx.shape[1] // 2
    idx[:, half:] = idx[:, :half]
    sums = []
    for rows_mask in (mask, np.where(np.arange(idx.shape[1]) < half, mask, 0.0)):
        data = mode.put_chunk({"idx": fold_mask(idx, rows_mask)})
        _, acc = compiled.train(mode.put_state(run.host_state), compiled.put_sums(compiled.zero_sums), data,
                                run.feed.rows)
        sums.append(compiled.get_sums(acc))
    both, device_0 = sums
    assert both["count"] == 2 * device_0["count"] == idx.shape[1]
    assert not np.isclose(both["loss_sum"], 2 * device_0["loss_sum"], rtol=1e-4)


def test_the_last_partial_log_interval_is_logged_with_its_own_examples(make_cfg, tmp_path):
    results = train(make_cfg("debug=smoke", "trainer.max_steps=5", "trainer.log_every=2", "checkpoint.enabled=false"))
    records = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    train_records = [(r["step"], r["count"]) for r in records if r["split"] == "train"]
    assert train_records == [(2, 32), (4, 32), (5, 16)]  # batch 16: each interval counts its own steps only
    assert results["train"]["count"] == 16


def test_a_max_steps_beyond_the_epochs_is_named_in_a_warning(make_cfg, caplog):
    with caplog.at_level("WARNING", logger="zoo"):
        results = train(make_cfg("debug=smoke", "trainer.max_steps=500", "trainer.eval_every=0", "logger=quiet"))
    assert results["steps"] == 89  # debug=smoke: one epoch of 1438 examples in batches of 16
    assert "trainer.max_steps=500 is more than trainer.epochs=1 give (89 steps, 89 an epoch)" in caplog.text


def test_the_last_step_is_evaluated_once_as_the_final_eval(make_cfg, tmp_path):
    train(make_cfg("debug=smoke", "trainer.max_steps=8", "trainer.eval_every=4"))
    evals = [(r["step"], r.get("final", False)) for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")
             if r["split"] == "test"]
    assert evals == [(4, False), (8, True)]
