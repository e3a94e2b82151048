"""DP-SGD: per-example gradients, clipping and noise, Poisson sampling, the accountant, modes and resume."""
import functools
import json
import logging
import math
import re
import signal

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from flax import nnx

from zoo.data import load_dataset
from zoo.errors import UserError
from zoo.preemption import Preempted
from zoo.privacy.gradients import make_private_gradients, per_example_grads
from zoo.privacy import ghost
from zoo.privacy.plan import plan_privacy
from zoo.privacy.sampling import chunk_bounds
from zoo.run_logger import RunLogger
from zoo.state import create_state
from zoo.steps import make_steps
from zoo.tasks import TASKS
from zoo.train import build_model, train

MODELS = {"mlp": ["model=mlp", "model.hidden=[32,16]"], "cnn": ["model=cnn", "model.batch_norm=false",
          "model.channels=[4,8]", "model.dense=16"], "linear-diabetes": ["model=linear", "dataset=diabetes"]}
DP = ["privacy=dpsgd", "privacy.noise_multiplier=1.0"]


def parts(make_cfg, model):
    """(batch of 8 train examples, graphdef, state, task) for `model`."""
    cfg = make_cfg("debug=smoke", *MODELS[model])
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    graphdef, state = create_state(build_model(cfg, data), optax.sgd(0.1), cfg.seed)
    train_split = data.splits["train"]
    batch = {"x": train_split.x[:8], "y": train_split.y[:8], "mask": np.ones(8, np.float32)}
    return batch, graphdef, state, TASKS[data.task]


def tree_norm(tree) -> float:
    return float(optax.tree.norm(tree))


@pytest.mark.parametrize("model", MODELS)
def test_per_example_gradients_equal_a_loop_of_single_example_gradients(make_cfg, model):
    batch, graphdef, state, task = parts(make_cfg, model)
    keys = jax.random.split(jax.random.key(0), 8)
    # jitted, as in a step: one compile each, not one per operation
    grads, _ = jax.jit(lambda *a: per_example_grads(graphdef, task, *a))(state.params, state.model_state, batch, keys)

    @jax.jit
    def single_grad(params, x, y, mask):
        def loss(params):
            out = nnx.merge(graphdef, params, state.model_state)(x, train=True)
            return task.sums(out, y, mask)["loss_sum"]

        return jax.grad(loss)(params)

    for i in range(8):
        expected = single_grad(state.params, batch["x"][i:i + 1], batch["y"][i:i + 1], batch["mask"][i:i + 1])
        for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(expected)):
            np.testing.assert_allclose(got[i], want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_dp_step_without_clipping_or_noise_equals_the_ordinary_step(make_cfg, model):
    batch, graphdef, state, task = parts(make_cfg, model)
    tx = optax.sgd(0.1)
    chunk = jax.tree.map(lambda x: np.stack([x, x[::-1]]), batch)  # two steps
    gradients = make_private_gradients(graphdef, task, l2_clip=math.inf, noise_multiplier=0.0, expected_batch_size=8)
    acc = None
    results = []
    for hook in (None, gradients):
        train_chunk, _, zero_sums = make_steps(graphdef, task, tx, gradients=hook)
        acc = zero_sums(state, batch)
        results.append(jax.jit(train_chunk)(state, acc, chunk))
    (ordinary, ordinary_sums), (private, private_sums) = results
    assert tree_norm(jax.tree.map(jnp.subtract, ordinary.params, state.params)) > 1e-3  # the step moved
    for got, want in zip(jax.tree.leaves(private.params), jax.tree.leaves(ordinary.params)):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)
    for got, want in zip(jax.tree.leaves(private_sums), jax.tree.leaves(ordinary_sums)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_under_pmap_each_device_draws_its_own_dropout_masks(make_cfg):
    """Both devices get the same 8 rows: with one dropout key for both, their loss sums would be equal, so the
    psum-med sum would be exactly twice device 0's, which the same call gives alone when device 1's rows are
    masked."""
    cfg = make_cfg("debug=smoke", "model=mlp", "model.hidden=[32]", "model.dropout=0.5")
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    graphdef, state = create_state(build_model(cfg, data), optax.sgd(0.1), cfg.seed)
    task, x, y = TASKS[data.task], data.splits["train"].x[:8], data.splits["train"].y[:8]
    gradients = make_private_gradients(graphdef, task, l2_clip=1.0, noise_multiplier=0.0, expected_batch_size=8,
                                       axis_name="batch")
    train_chunk, _, zero_sums = make_steps(graphdef, task, optax.sgd(0.1), axis_name="batch", gradients=gradients)
    two = jax.pmap(train_chunk, axis_name="batch", devices=jax.devices()[:2])
    replicate = functools.partial(jax.tree.map, lambda v: np.stack([np.asarray(v)] * 2))
    loss_sums = []
    for device_1_mask in (1.0, 0.0):
        chunk = {"x": np.stack([x[None]] * 2), "y": np.stack([y[None]] * 2),
                 "mask": np.stack([np.ones((1, 8), np.float32), np.full((1, 8), device_1_mask, np.float32)])}
        batch = {"x": x, "y": y, "mask": np.ones(8, np.float32)}
        _, acc = two(replicate(state), replicate(zero_sums(state, batch)), chunk)
        loss_sums.append(float(acc["loss_sum"][0]))
    both, device_0 = loss_sums
    assert not np.isclose(both, 2 * device_0, rtol=1e-4)


def test_every_clipped_example_gradient_is_within_l2_clip(make_cfg):
    batch, graphdef, state, task = parts(make_cfg, "mlp")
    batch["x"] = batch["x"] * 50.0  # large inputs: large gradients, so most examples are clipped
    keys = jax.random.split(jax.random.key(0), 8)
    raw, _ = jax.jit(lambda *a: per_example_grads(graphdef, task, *a))(state.params, state.model_state, batch, keys)
    clip = 0.5
    gradients = jax.jit(make_private_gradients(graphdef, task, l2_clip=clip, noise_multiplier=0.0,
                                               expected_batch_size=1))
    norms = []
    for i in range(8):  # one example per batch: the step's gradient is that example's clipped gradient
        alone = dict(batch, mask=np.eye(8, dtype=np.float32)[i])
        clipped = tree_norm(gradients(state, alone)[0])
        raw_norm = tree_norm(jax.tree.map(lambda g: g[i], raw))
        assert clipped <= clip + 1e-6
        np.testing.assert_allclose(clipped, min(raw_norm, clip), rtol=1e-5)
        norms.append(raw_norm)
    assert sum(n > clip for n in norms) >= 4


@pytest.mark.parametrize("model", MODELS)
def test_ghost_clipping_equals_clipping_materialised_per_example_gradients(make_cfg, model):
    batch, graphdef, state, task = parts(make_cfg, model)
    batch = dict(batch, x=batch["x"] * 20.0, mask=np.array([1, 1, 1, 1, 1, 1, 0, 0], np.float32))  # most clipped
    sums = {}
    for use_ghost in (True, False):
        gradients = make_private_gradients(graphdef, task, l2_clip=0.5, noise_multiplier=0.0, expected_batch_size=1,
                                           ghost_clipping=use_ghost)
        sums[use_ghost] = jax.jit(gradients)(state, batch)[0]
    raw, _ = jax.jit(lambda *a: per_example_grads(graphdef, task, *a))(state.params, state.model_state, batch,
                                                                      jax.random.split(jax.random.key(0), 8))
    assert sum(tree_norm(jax.tree.map(lambda g: g[i], raw)) > 0.5 for i in range(6)) >= 3
    for got, want in zip(jax.tree.leaves(sums[True]), jax.tree.leaves(sums[False])):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


def test_ghost_clipping_covers_linear_and_conv_layers_only():
    class Normed(nnx.Module):
        def __init__(self, rngs):
            self.dense, self.norm = nnx.Linear(4, 3, rngs=rngs), nnx.LayerNorm(3, rngs=rngs)

    from zoo.models import CNN, MLP
    assert ghost.supports(MLP((8, 8, 1), 10, rngs=nnx.Rngs(0)))
    assert ghost.supports(CNN((8, 8, 1), 10, batch_norm=False, rngs=nnx.Rngs(0)))
    assert not ghost.supports(Normed(nnx.Rngs(0)))  # its gradients come from vmap(grad)


@pytest.mark.parametrize("conv", [dict(strides=2, padding="VALID"), dict(kernel_dilation=2, padding=((1, 2), (0, 1))),
                                  dict(padding="SAME", use_bias=False, kernel_size=(2, 3))])
def test_ghost_clipping_follows_strides_dilation_and_padding(conv):
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.conv = nnx.Conv(2, 3, **{"kernel_size": (3, 3), **conv}, rngs=rngs)
            self.head = nnx.Linear(1, 4, rngs=rngs)

        def __call__(self, x, *, train=False, rngs=None):
            return self.head(jnp.mean(self.conv(x), axis=(1, 2, 3))[:, None])

    graphdef, params, rest = nnx.split(Net(nnx.Rngs(0)), nnx.Param, ...)
    batch = {"x": jax.random.normal(jax.random.key(1), (5, 9, 8, 2)) * 5, "y": np.arange(5) % 4,
             "mask": np.ones(5, np.float32)}
    task, key = TASKS["classification"], jax.random.key(0)
    # jitted, as in a step: one compile each, not one per operation
    got, _ = jax.jit(lambda *a: ghost.clipped_gradient_sum(graphdef, task, *a, 0.1))(params, rest, batch, key)
    raw, _ = jax.jit(lambda *a: per_example_grads(graphdef, task, *a))(params, rest, batch, jax.random.split(key, 5))
    want, _ = optax.per_example_global_norm_clip(raw, 0.1)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_chunks_that_skip_padding_give_the_one_pass_result(make_cfg, model):
    batch, graphdef, state, task = parts(make_cfg, model)
    batch["mask"] = np.array([1, 1, 1, 1, 0, 0, 0, 0], np.float32)  # sampled examples first, as PoissonStream
    results = {}
    for chunks in (None, [0, 2, 4, 6, 8], [0, 3, 5, 8]):  # a chunk of padding only; one with sampled and padding
        gradients = make_private_gradients(graphdef, task, l2_clip=1.0, noise_multiplier=0.0, expected_batch_size=4,
                                           chunks=chunks)
        results[str(chunks)] = jax.jit(gradients)(state, batch)[:2]
    one_pass = results.pop("None")
    assert tree_norm(one_pass[0]) > 1e-3
    for grads, sums in results.values():
        for got, want in zip(jax.tree.leaves((grads, sums)), jax.tree.leaves(one_pass)):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


def test_chunk_bounds_hold_the_sample_in_few_chunks():
    assert chunk_bounds(128, 220) == [0, 152, 200, 220]  # the whole sample almost always in the first
    for expected, rows in [(1, 9), (16, 16), (64, 120), (1000, 1200)]:
        bounds = chunk_bounds(expected, rows)
        assert bounds[0] == 0 and bounds[-1] == rows and all(a < b for a, b in zip(bounds, bounds[1:]))
        assert bounds[1] >= expected


def test_noise_has_the_configured_standard_deviation(make_cfg):
    batch, graphdef, state, task = parts(make_cfg, "mlp")
    batch["mask"] = np.zeros(8, np.float32)  # no example: the gradient is the noise alone
    sigma, clip, expected = 1.3, 0.7, 5.0
    gradients = jax.jit(make_private_gradients(graphdef, task, l2_clip=clip, noise_multiplier=sigma,
                                               expected_batch_size=expected))
    noise = np.concatenate([np.ravel(g) for g in jax.tree.leaves(gradients(state, batch)[0])]) * expected
    n = noise.size  # 64*32 + 32*16 + 16*10 + biases
    assert n > 2500
    # std of the sample std is ~ sigma*clip / sqrt(2n): 1.4% here; 5% is > 3.5 of them
    np.testing.assert_allclose(noise.std(), sigma * clip, rtol=0.05)
    assert abs(noise.mean()) < 4 * sigma * clip / math.sqrt(n)
    later = jax.jit(make_private_gradients(graphdef, task, l2_clip=clip, noise_multiplier=sigma,
                                           expected_batch_size=expected))(state.replace(step=state.step + 1), batch)
    assert not np.allclose(jax.tree.leaves(later[0])[0], jax.tree.leaves(gradients(state, batch)[0])[0])


def test_a_runs_plan_adds_the_noise_its_record_reports(make_cfg):
    """The test above gives make_private_gradients its own sigma; the epsilon tests recompute epsilon from the
    sigma the record states. This one goes through the run's own plan (PrivacyPlan.gradients, as zoo.train builds
    the step): the noise on an empty sample has the std of the recorded noise_multiplier x l2_clip."""
    cfg = make_cfg("debug=smoke", *MODELS["mlp"], "privacy=dpsgd", "privacy.noise_multiplier=1.3",
                   "privacy.l2_clip=0.7")
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    plan = plan_privacy(cfg, data.splits["train"], 6, 1)
    record = plan.record(6)
    model = build_model(cfg, data)
    graphdef, state = create_state(model, optax.sgd(0.1), cfg.seed)
    train_split = data.splits["train"]
    empty = {"x": train_split.x[:plan.rows], "y": train_split.y[:plan.rows], "mask": np.zeros(plan.rows, np.float32)}
    gradients = jax.jit(plan.gradients(model, graphdef, TASKS[data.task]))
    noise = np.concatenate([np.ravel(g) for g in jax.tree.leaves(gradients(state, empty)[0])]) * plan.stream.batch_size
    assert noise.size > 2500
    np.testing.assert_allclose(noise.std(), record["noise_multiplier"] * record["l2_clip"], rtol=0.05)
    assert (record["noise_multiplier"], record["l2_clip"]) == (1.3, 0.7)

def reference_epsilon(record) -> float:
    """dp-accounting itself, for the (q, sigma, steps, delta) the run reports."""
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        record["q"], dp_accounting.GaussianDpEvent(record["noise_multiplier"])), record["steps"])
    accountant = RdpAccountant() if record["accountant"] == "rdp" else PLDAccountant(value_discretization_interval=1e-3)
    return accountant.compose(event).get_epsilon(record["accountant_delta"])


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_reported_epsilon_is_what_dp_accounting_computes(make_cfg, tmp_path, accountant):
    results = train(make_cfg("debug=smoke", *DP, f"privacy.accountant={accountant}", "logger.summary=true"))
    record = json.loads((tmp_path / "run" / "results.json").read_text())["privacy"]
    assert record["steps"] == 6 and record["q"] == 16 / 1438 and record["accountant"] == accountant
    assert record["epsilon"] == pytest.approx(reference_epsilon(record), rel=1e-9) == results["privacy"]["epsilon"]
    # the overflow of truncated Poisson batches is paid from delta: (1 + e^eps) p on top of the accountant's
    assert record["accountant_delta"] + (1 + math.exp(record["epsilon"])) * record["overflow_probability"] <= 1e-5
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    epsilons = [r["epsilon"] for r in logged if r["split"] == "train"]
    assert epsilons == sorted(epsilons) and epsilons[-1] == record["epsilon"] and len(epsilons) == 3
    assert all(r["gflop_s"] > 0 for r in logged if r["split"] == "train")  # as in a run without privacy


def test_pld_epsilon_equals_dp_accountings_own_accountant_at_every_step_asked_again():
    """epsilon() builds the one-step PLD once per (q, sigma); every answer, the first and the repeated ones, is
    what a fresh PLDAccountant composing the whole event gives."""
    from zoo.privacy.accountant import dpsgd_event, epsilon

    for q, sigma in ((16 / 1438, 1.0), (256 / 1437, 0.6), (0.5, 3.0)):
        for steps in (1, 7, 300, 7, 1):
            fresh = PLDAccountant(value_discretization_interval=1e-3).compose(dpsgd_event(q, sigma, steps))
            assert epsilon(q, sigma, steps, 1e-5, "pld") == fresh.get_epsilon(1e-5) > 0


def test_target_epsilon_solves_the_noise_and_a_fixed_noise_stops_at_the_budget(make_cfg):
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "privacy.target_epsilon=2", "privacy.accountant=rdp")
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    solved = plan_privacy(cfg, split, 50, 1)
    assert 1.99 < solved.epsilon(50) <= 2.0 and solved.total_steps == 50
    cfg.privacy.noise_multiplier = 1.0  # with a fixed noise the target is a budget
    capped = plan_privacy(cfg, split, 1000, 1)
    assert capped.total_steps < 1000 and capped.record(capped.total_steps)["stopped_by_budget"]
    assert capped.epsilon(capped.total_steps) <= 2.0 < capped.epsilon(capped.total_steps + 1)


def test_jobs_with_the_same_privacy_settings_in_one_process_search_for_the_noise_once(make_cfg, monkeypatch):
    """A search for the noise multiplier takes ~2 s (PLD); a sweep's DP jobs in one process (a population's members,
    the basic launcher's jobs) each searched again for the same settings. Other settings search anew."""
    from zoo.privacy import accountant

    searches = []
    accountant.solve_noise_multiplier.cache_clear()  # what earlier tests in this process searched for
    calibrate = accountant.dp_accounting.calibrate_dp_mechanism
    monkeypatch.setattr(accountant.dp_accounting, "calibrate_dp_mechanism",
                        lambda *a, **k: searches.append(a[2]) or calibrate(*a, **k))
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "privacy.target_epsilon=2.5", "privacy.accountant=rdp")
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    plans = [plan_privacy(cfg, split, 50, 1) for _ in range(3)]
    assert searches == [2.5] and plans[0].noise_multiplier == plans[2].noise_multiplier
    cfg.privacy.target_epsilon = 2.4
    assert plan_privacy(cfg, split, 50, 1).noise_multiplier > plans[0].noise_multiplier and searches == [2.5, 2.4]


def test_the_truncation_term_is_paid_from_delta_up_to_epsilon_10_and_reported_in_delta_beyond(make_cfg, caplog):
    """Up to epsilon 10 the rows keep (1 + e^eps) p within 1% of delta; beyond, growing them would approach the
    whole split (epsilon 25: all 1439 rows for 64 expected), so they are not grown and delta carries it."""
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=0.6", "trainer.batch_size=64")
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    for steps, eps_range in ((44, (5, 10)), (150, (10, 15))):
        plan = plan_privacy(cfg, split, steps, 1)
        record = plan.record(steps)
        paid = record["accountant_delta"] + (1 + math.exp(record["epsilon"])) * record["overflow_probability"]
        assert eps_range[0] < record["epsilon"] < eps_range[1]
        if record["epsilon"] <= 10:
            assert paid <= record["delta"] == 1e-5
        else:
            assert 1e-5 < record["delta"] == paid < 1 and plan.rows < 2 * 64
    assert "raise privacy.noise_multiplier to at least 0.66 for a guarantee" in caplog.text
    caplog.clear()
    cfg.privacy.noise_multiplier, cfg.privacy.target_epsilon = None, 12.0  # the noise solved: the target is the knob
    plan_privacy(cfg, split, 660, 1)
    assert "lower privacy.target_epsilon to at most 10 for a guarantee" in caplog.text


@pytest.mark.parametrize("settings,steps,refused,remedy,cure", [
    ({"noise_multiplier": 0.6}, 660, True, "raise privacy.noise_multiplier to at least 0.88",
     {"noise_multiplier": 0.88}),
    ({"target_epsilon": 30.0}, 660, True, "lower privacy.target_epsilon to at most 10", {"target_epsilon": 10.0}),
    ({"noise_multiplier": 1.5, "target_epsilon": 20.0}, 5000, False, "lower privacy.target_epsilon to at most 10",
     {"target_epsilon": 10.0}),
    ({"noise_multiplier": 1.0, "delta": 1e-300, "accountant": "rdp"}, 100, False, "raise privacy.delta to 1e-05",
     {"delta": 1e-5}),
], ids=["noise-delta-1", "target-delta-1", "budget-over-10", "tiny-delta-rdp"])
def test_beyond_epsilon_10_the_setting_named_is_the_one_that_brings_it_within(make_cfg, caplog, settings, steps,
                                                                               refused, remedy, cure):
    """Beyond epsilon 10 delta carries the truncation term: where that makes it 1 (any algorithm is (epsilon, 1)-DP)
    the run is refused, else warned. More noise does not help a run its target_epsilon stops, nor is it what a
    delta of 1e-300 asks for; the remedy named is applied here and must cure it."""
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "trainer.batch_size=64")
    cfg.privacy.update(settings)
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    if refused:
        with pytest.raises(UserError, match=rf"^epsilon \S+ is so large that the truncation of oversized Poisson "
                                            rf"samples, counted in delta beyond epsilon 10, makes delta 1, which "
                                            rf"guarantees nothing; {re.escape(remedy)}\.$"):
            plan_privacy(cfg, split, steps, 1)
    else:
        assert plan_privacy(cfg, split, steps, 1).delta > (cfg.privacy.delta or 1e-5)
        assert f"; {remedy} for a guarantee that bounds something." in caplog.text
    caplog.clear()
    cfg.privacy.update(cure)
    plan = plan_privacy(cfg, split, steps, 1)
    assert plan.epsilon(plan.total_steps) <= 10 and plan.delta == (cfg.privacy.delta or 1e-5)
    assert "bounds little" not in caplog.text


@pytest.mark.parametrize("delta, warned", [(0.01, True), (1e-3, True), (1e-4, False)])
def test_a_delta_not_below_one_over_n_is_warned_of(make_cfg, caplog, delta, warned):
    """privacy.delta=0.01 over digits' 1438 training examples was taken without a word, though a mechanism that
    publishes one example in full meets (epsilon, delta) for any delta >= 1/n."""
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "trainer.batch_size=64", "privacy.target_epsilon=3",
                   f"privacy.delta={delta}")
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    plan_privacy(cfg, split, 100, 1)
    said = (f"privacy.delta={delta:g} is not below 1/n = {1 / len(split):.3g} (n = {len(split)} training examples): "
            "publishing one example in full meets such a delta; set it well below 1/n, or to null for "
            "min(1e-5, 1/(10 n)).")
    assert (said in caplog.text) == warned, caplog.text


def test_a_budget_that_ends_the_run_ends_it_on_an_update(make_cfg):
    """With trainer.accumulate=2 a run stopped by its budget after an odd step would pay for a micro-batch it never
    applies: it stops one step earlier."""
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=1.0", "privacy.target_epsilon=2.2",
                   "privacy.accountant=rdp", "trainer.batch_size=32")
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    alone = plan_privacy(cfg, split, 200, 1).total_steps
    assert alone % 2 == 1 and alone < 200  # the budget's own length is odd here
    cfg.trainer.accumulate = 2
    assert plan_privacy(cfg, split, 200, 1).total_steps == alone - 1


def test_a_budget_that_ends_the_run_before_early_stoppings_first_eval_is_one_sentence(make_cfg):
    """The run length was checked for early stopping's periodic evals before the budget shortened it: such a run
    trained to the budget's end with no eval counted, a refusal for a run of that length without privacy."""
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=1.0", "privacy.target_epsilon=2.2",
                   "privacy.accountant=rdp", "trainer.batch_size=32", "trainer.early_stopping.patience=1")
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    stopped = plan_privacy(cfg, split, 1000, 1).total_steps  # debug=smoke evaluates every 4 steps
    assert stopped < 1000
    cfg.trainer.eval_every = stopped  # its only eval due is the final one
    with pytest.raises(UserError, match=rf"^privacy\.target_epsilon=2\.2 ends the run at step {stopped} \(privacy\."
                                        rf"noise_multiplier=1\.0\), before trainer\.eval_every={stopped} gives "
                                        r"trainer\.early_stopping a periodic eval; lower trainer\.eval_every, or raise "
                                        r"privacy\.target_epsilon or privacy\.noise_multiplier\.$"):
        plan_privacy(cfg, split, 1000, 1)
    cfg.trainer.eval_every = stopped - 1  # the way out it names
    assert plan_privacy(cfg, split, 1000, 1).total_steps == stopped


def test_poisson_batches_follow_the_step_and_the_rate(make_cfg):
    cfg = make_cfg("debug=smoke", *DP)
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    stream = plan_privacy(cfg, split, 400, 4).stream
    assert stream.rows % 4 == 0 and stream.rows > 16
    whole = stream.chunk(10, 3)
    for i in range(3):  # the step alone decides its batch, however the steps are chunked
        one = stream.chunk(10 + i, 1)
        assert all(np.array_equal(whole[k][i], one[k][0]) for k in whole)
    masks = stream.chunk(0, 400)["mask"]
    assert masks.shape == (400, stream.rows) and set(np.unique(masks)) == {0.0, 1.0}
    padded = stream.chunk(10, 3, pad_to=5)["mask"]  # steps the call skips are marked as such, not as empty samples
    assert np.array_equal(padded[:3], whole["mask"]) and (padded[3:] == -1).all()
    counts = masks.sum(1)  # Binomial(1438, 16/1438): mean 16, std ~4
    assert abs(counts.mean() - 16) < 4 * 4 / math.sqrt(400) and 3 < counts.std() < 5
    inclusions = np.bincount(np.concatenate([stream.sample(s) for s in range(400)]), minlength=len(split))
    # each example independently in each step: Binomial(400, q) inclusions (a shuffle would give ~4 each)
    assert abs(inclusions.mean() - 400 * stream.q) < 4 * math.sqrt(400 * stream.q / len(split))
    assert 0.9 < inclusions.std() / math.sqrt(400 * stream.q * (1 - stream.q)) < 1.1
    assert not np.array_equal(stream.sample(0), type(stream)(split, 16, cfg.seed + 1, stream.rows).sample(0))


def test_a_step_whose_poisson_sample_is_empty_still_runs(make_cfg, tmp_path):
    """At an expected batch of 1 about a third of the steps sample no example: each is still a step (its update
    the noise alone, as the accountant counts it), and an interval of only such steps logs no train row."""
    cfg = make_cfg("debug=smoke", *DP, "trainer.batch_size=1", "trainer.max_steps=20", "trainer.log_every=1",
                   "trainer.checkpoint_every=0")
    split = load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]
    sampled = [len(plan_privacy(cfg, split, 20, 1).stream.sample(s)) for s in range(20)]
    assert 0 in sampled and sum(n > 0 for n in sampled) > 5
    results = train(cfg)
    assert int(results["state"].step) == results["privacy"]["steps"] == 20
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [r["step"] for r in logged if r["split"] == "train"] == [s + 1 for s, n in enumerate(sampled) if n]
    assert [r["count"] for r in logged if r["split"] == "train"] == [n for n in sampled if n]


@pytest.mark.parametrize("mode", [["parallel.mode=pmap", "parallel.cpu_devices=2"],
                                  ["parallel.mode=sharded", "parallel.cpu_devices=2"],
                                  # the expected batch of 16 need not split over 3 devices: the padded rows do
                                  ["parallel.mode=sharded", "parallel.cpu_devices=3"]],
                         ids=["pmap", "sharded", "sharded-3-devices"])
def test_parallel_modes_equal_one_device(make_cfg, mode):
    common = ["debug=smoke", *DP, "optimizer=sgd", "optimizer.learning_rate=0.1"]
    single = train(make_cfg(*common, out="single"))
    parallel = train(make_cfg(*common, *mode, out="parallel"))
    for got, want in zip(jax.tree.leaves(parallel["state"].params), jax.tree.leaves(single["state"].params)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert parallel["train"]["count"] == single["train"]["count"]
    assert parallel["privacy"] == single["privacy"]  # the truncation too: only the padding splits across devices


def _train_preempted_at(stop: int, cfg, monkeypatch) -> None:
    """Trains `cfg` until a SIGTERM raised as step `stop` is logged, which saves it there."""
    def sigterm(self, step, *args):
        if step == stop:
            signal.raise_signal(signal.SIGTERM)

    with monkeypatch.context() as patch:
        patch.setattr(RunLogger, "progress", sigterm)
        with pytest.raises(Preempted):
            train(cfg)


def test_resumed_dp_run_is_bitwise_identical_to_uninterrupted(make_cfg, monkeypatch):
    common = ["debug=smoke", *DP, "model.dropout=0.2", "trainer.max_steps=8", "trainer.checkpoint_every=3",
              "trainer.log_every=1"]
    whole = train(make_cfg(*common, out="whole"))
    _train_preempted_at(5, make_cfg(*common, out="resumed"), monkeypatch)
    for changed in ("privacy.noise_multiplier=2.0", "seed=1", "trainer.batch_size=8", "trainer.max_steps=10"):
        with pytest.raises(UserError, match=re.escape(changed.split("=")[0])):  # other steps were accounted
            train(make_cfg(*common, changed, out="resumed"))
    resumed = train(make_cfg(*common, out="resumed"))
    assert resumed["start_step"] == 5
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(whole["state"]), jax.tree.leaves(resumed["state"])))
    assert whole["privacy"] == resumed["privacy"] and whole["test"] == resumed["test"]


def test_the_plan_line_names_the_rows_samples_are_truncated_at_on_several_devices(make_cfg, caplog):
    """It said 'batches of 44 rows' where a batch on 3 devices is padded to 45: the 44 are the truncation."""
    with caplog.at_level(logging.INFO, logger="zoo"):
        results = train(make_cfg("debug=smoke", *DP, *MODELS["linear-diabetes"], "trainer.max_steps=2",
                                 "parallel=sharded", "parallel.cpu_devices=3"))
    rows = re.search(r"truncated at (\d+)\)", results["privacy"]["sampling"]).group(1)
    assert f"; samples truncated at {rows} rows (expected " in caplog.text


@pytest.mark.parametrize("first, then", [(["parallel=sharded", "parallel.cpu_devices=3"], ["parallel=none"]),
                                         (["parallel=none"], ["parallel=sharded", "parallel.cpu_devices=3"])],
                         ids=["3-devices-then-1", "1-device-then-3"])
def test_a_dp_run_resumed_on_another_device_count_records_the_truncation_its_steps_had(make_cfg, monkeypatch,
                                                                                      first, then):
    """The rows a Poisson sample is truncated at were rounded up to a multiple of the device count: 45 on 3 devices,
    44 on one. Resumed on the other count, the record named the last rows and their overflow probability alone, below
    the one the first steps had (1 device, then 3). The truncation no longer depends on the devices."""
    common = ["debug=smoke", *DP, *MODELS["linear-diabetes"], "trainer.max_steps=12", "trainer.checkpoint_every=3",
              "trainer.log_every=1"]
    whole = {"first": train(make_cfg(*common, *first, out="first")), "then": train(make_cfg(*common, *then,
                                                                                             out="then"))}
    _train_preempted_at(6, make_cfg(*common, *first, out="resumed"), monkeypatch)
    resumed = train(make_cfg(*common, *then, out="resumed"))
    assert resumed["start_step"] == 6
    assert resumed["privacy"] == whole["first"]["privacy"] == whole["then"]["privacy"]
    for got, want in zip(jax.tree.leaves(resumed["state"].params), jax.tree.leaves(whole["first"]["state"].params)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides,message", [
    (["model=cnn", *DP], "set model.batch_norm=false"),
    (["privacy=dpsgd"], "needs privacy.target_epsilon"),
    ([*DP, "privacy.l2_clip=0"], "privacy.l2_clip must be a positive finite number"),
    ([*DP, "privacy.l2_clip=1e-39"], "privacy.l2_clip=1e-39 is below float32's smallest normal number, 1.18e-38, "
                                     "which the step computes as 0; raise privacy.l2_clip."),
    ([*DP, "privacy.delta=1.5"], "privacy.delta must be in (0, 1)"),
    ([*DP, "privacy.accountant=moments"], "privacy.accountant must be one of"),
    ([*DP, "privacy.noise_multiplier=0.01"], "privacy.noise_multiplier=0.01 is below 0.3, where the guarantee "
                                             "bounds nothing and its accounting takes minutes; use at least 0.3"),
    (["privacy=dpsgd", "privacy.noise_multiplier=1e200"], "privacy.noise_multiplier=1e+200 is above 1e+06"),
    (["privacy=dpsgd", "privacy.noise_multiplier=1", "privacy.l2_clip=1e300"],
     "privacy.noise_multiplier * privacy.l2_clip = 1e+300 is a noise std beyond float32"),
], ids=["batch-norm", "no-noise-or-target", "clip", "tiny-clip", "delta", "accountant", "tiny-noise", "huge-noise",
        "huge-std"])
def test_bad_privacy_settings_are_one_sentence(make_cfg, overrides, message):
    with pytest.raises(UserError, match=re.escape(message)):
        train(make_cfg("debug=smoke", *overrides))


@pytest.mark.parametrize("setting", ["privacy.target_epsilon=3", "privacy.noise_multiplier=1.0", "privacy.delta=1e-6",
                                     "privacy.l2_clip=0.5", "privacy.accountant=rdp"])
def test_a_dpsgd_setting_without_privacy_dpsgd_is_refused_not_ignored(make_cfg, tmp_path, setting):
    """Ignored, it trained an ordinary model, exit 0, with no privacy in results.json."""
    key = setting.partition("=")[0]
    with pytest.raises(UserError, match=rf"^{key} only applies to privacy=dpsgd, .* add privacy=dpsgd to train "
                                        rf"privately, or remove {key}\.$"):
        train(make_cfg("debug=smoke", setting))
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_model_with_batch_norm_is_refused_by_the_step_too(make_cfg):
    cfg = make_cfg("debug=smoke", "model=cnn", "model.channels=[4]", "model.dense=8")
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    cfg.privacy.merge_with({"mode": "dpsgd", "noise_multiplier": 1.0})
    plan = plan_privacy(cfg, data.splits["train"], 6, 1)
    model = build_model(cfg, data)
    with pytest.raises(UserError, match="BatchNorm"):
        plan.gradients(model, nnx.split(model)[0], TASKS[data.task])


def test_quick_privacy_benchmark_reports_every_row(data_dir, tmp_path, monkeypatch):
    import tempfile

    from zoo.bench.privacy import main

    out, scratch = tmp_path / "privacy.json", tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    rows = main(["--quick", "--out", str(out), "--data-dir", data_dir])["rows"]
    assert not any(scratch.iterdir())  # its runs' outputs are gone with it
    assert [r["id"] for r in rows] == ["dp_step/mlp", "dp_step/cnn", "accuracy/digits_mlp/non_private",
                                       "accuracy/digits_mlp/eps=3"]
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in rows)
    assert [r["id"] for r in json.loads(out.read_text())["rows"]] == [r["id"] for r in rows]


ACCOUNTANT_PROBE = """
import runpy, sys
sys.argv = ["train.py", *sys.argv[1:]]
try:
    runpy.run_path("train.py", run_name="__main__")
finally:
    print(sorted(m for m in ("dp_accounting", "scipy.stats") if m in sys.modules))
"""


def test_runs_without_privacy_do_not_import_the_accountant(make_cfg, data_dir, tmp_path):
    """dp-accounting and scipy.stats take ~1 s to import; a whole run with privacy=none never needs them."""
    import subprocess
    import sys

    from conftest import ROOT, subprocess_env

    cfg = make_cfg("debug=smoke")
    load_dataset(cfg.dataset, cfg.paths.data_dir)  # prepared before: preparing reads scikit-learn, which needs scipy
    command = [sys.executable, "-c", ACCOUNTANT_PROBE, "debug=smoke", f"hydra.run.dir={tmp_path / 'run'}"]
    done = subprocess.run(command, cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0 and (tmp_path / "run" / "results.json").exists(), done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_batch_bound_holds_for_the_neighbouring_dataset_of_one_more_example():
    from scipy import stats

    from zoo.privacy.sampling import max_batch_size

    rows, p = max_batch_size(100, 0.5, 10, 1e-6)
    assert p <= 1e-6 and 10 * stats.binom.sf(rows, 101, 0.5) <= 1e-6  # 101: the neighbour may hold one more
    assert 10 * stats.binom.sf(rows - 1, 101, 0.5) > 1e-6  # and no fewer rows would do


def test_a_small_delta_does_not_grow_the_batch_to_the_whole_split():
    """A small privacy.delta asks for an overflow probability below 1e-17, where scipy's binom.isf gives n."""
    from scipy import stats

    from zoo.privacy.sampling import max_batch_size

    n, q = 1437, 16 / 1437
    for target in (1e-10, 1e-19, 1e-30):
        rows, p = max_batch_size(n, q, 6, target)
        assert p <= target and 6 * stats.binom.sf(rows - 1, n + 1, q) > target  # the fewest rows that do
        assert rows < 100  # 65 rows at 1e-19 for 16 expected examples, not 1438


def test_each_train_record_carries_the_epsilon_spent_by_its_step(make_cfg, tmp_path):
    from zoo.privacy.accountant import epsilon
    results = train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=1.0"))
    p = results["privacy"]
    logged = [r for r in map(json.loads, open(tmp_path / "run" / "metrics.jsonl")) if r["split"] == "train"]
    assert [r["step"] for r in logged] == [2, 4, 6]
    for r in logged:
        assert r["epsilon"] == pytest.approx(epsilon(p["q"], p["noise_multiplier"], r["step"], p["accountant_delta"]),
                                             rel=1e-9)
    assert logged[0]["epsilon"] < logged[1]["epsilon"] < logged[2]["epsilon"]


def test_clipping_without_noise_records_no_epsilon_and_writes_valid_json(make_cfg, tmp_path, caplog):
    """noise_multiplier=0 is allowed (clipped gradients, no guarantee): epsilon is unbounded, so it is null in
    results.json and absent from the train records, which stay strict JSON (no Infinity)."""
    def strict(text):
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))

    results = train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=0"))
    assert results["privacy"]["epsilon"] is None and "no privacy guarantee" in caplog.text
    assert strict((tmp_path / "run" / "results.json").read_text())["privacy"]["epsilon"] is None
    records = [strict(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in records if r["split"] == "train"] and not any("epsilon" in r for r in records)


def test_eval_of_a_dp_run_does_not_log_its_training_plan_again(make_cfg, tmp_path, caplog):
    """The plan (budget, noise, when training stops) is the training's; eval reads a checkpoint and trains nothing."""
    from zoo.evaluate import evaluate

    caplog.set_level("INFO", logger="zoo")
    trained = train(make_cfg("debug=smoke", *DP, "trainer.max_steps=4000"))
    assert "DP-SGD: q=" in caplog.text and "trainer.max_steps=4000 is more than" in caplog.text
    caplog.clear()
    evaluated = evaluate(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="eval"))
    assert evaluated["metrics"] == trained["test"]
    assert "DP-SGD: q=" not in caplog.text and "is more than" not in caplog.text


def test_a_delta_the_pld_accountant_cannot_bound_is_refused(make_cfg):
    """Below ~1e-15 PLD gives epsilon inf at any sensible noise: target_epsilon=3 was met by noise 113 (accuracy at
    chance, epsilon 0.006 recorded). RDP bounds it."""
    with pytest.raises(UserError, match=r"^privacy\.delta=1e-20 is below what the pld accountant can bound .*; raise "
                                        r"privacy\.delta \(e\.g\. 1e-10\) or set privacy\.accountant=rdp\.$"):
        train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.target_epsilon=3", "privacy.delta=1e-20"))
    results = train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.target_epsilon=3", "privacy.delta=1e-20",
                             "privacy.accountant=rdp"))
    assert results["privacy"]["noise_multiplier"] < 2


def test_the_plan_is_said_only_by_a_run_that_trains(make_cfg, caplog):
    """A rerun refused for other settings, or of the finished run, trains nothing: no plan line precedes it."""
    from zoo.errors import UserError

    caplog.set_level("INFO", logger="zoo")
    train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=1.0"))
    assert "DP-SGD: q=" in caplog.text
    caplog.clear()
    with pytest.raises(UserError, match=r"privacy\.noise_multiplier \(1\.0 -> 2\.0\)"):
        train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=2.0"))
    train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=1.0"))
    assert "already holds this finished run" in caplog.text and "DP-SGD: q=" not in caplog.text


def test_a_dp_run_asked_to_train_longer_is_told_why_it_cannot(make_cfg):
    """A run lengthened goes on from its end; a DP-SGD run's budget was accounted for the steps it planned, so it
    is refused. The refusal named the setting alone, as if any other run were refused too."""
    from zoo.errors import UserError

    train(make_cfg("debug=smoke", *DP))
    with pytest.raises(UserError, match=r"trainer\.max_steps \(6 -> 8\).*, which a DP-SGD run cannot change: its "
                                        r"privacy was accounted for the run those settings planned; "):
        train(make_cfg("debug=smoke", *DP, "trainer.max_steps=8"))


def test_an_exported_dp_model_carries_the_guarantee_of_its_step_and_not_its_seed(make_cfg, tmp_path):
    """The noise and the sampling are drawn from the seed, which would undo the guarantee: signature.json, the file
    shipped beside model.jax, leaves it out."""
    from zoo.export.artifact import export

    results = train(make_cfg("debug=smoke", *DP, "trainer.checkpoint_every=2"))
    for checkpoint, steps in (("final", 6), ("2", 2)):
        signature = export(make_cfg(f"run_dir={tmp_path / 'run'}", f"checkpoint={checkpoint}",
                                    config_name="export"))["signature"]
        record = signature["privacy"]
        assert record["steps"] == steps and record["noise_multiplier"] == 1.0
        assert record["epsilon"] == pytest.approx(reference_epsilon(record), rel=1e-9)
    assert record["epsilon"] < results["privacy"]["epsilon"]  # step 2 spent less than the whole run
    written = json.loads((tmp_path / "run" / "export" / "signature.json").read_text())
    assert "seed" not in written["config"] and written["privacy"]["seed"].startswith("withheld from this file")
    assert written["config"]["privacy"]["noise_multiplier"] == 1.0  # the rest of the config stays


@pytest.mark.parametrize("results_json", [None, "{\"test\": ", "{}"], ids=["missing", "cut-short", "no-record"])
def test_an_exported_dp_model_of_a_run_without_a_readable_privacy_record_has_it_made_from_its_settings(
        make_cfg, tmp_path, results_json):
    """A run not finished (stopped, or still training) has no results.json: its export said only that, and pointed
    to the train records' epsilon, spent at an earlier step than the one exported. The record is now made from the
    run's saved settings (the noise solved again for its target), as its results.json would hold it."""
    from zoo.export.artifact import export

    results = train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.target_epsilon=3", "trainer.checkpoint_every=2"))
    path = tmp_path / "run" / "results.json"
    if results_json is None:
        path.unlink()
    else:
        path.write_text(results_json)
    said = {None: "the run has no results.json (it has not finished)", "{\"test\": ": f"{path} cannot be read",
            "{}": f"{path} holds no privacy record"}[results_json]
    record = export(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="export"))["signature"]["privacy"]
    assert record.pop("note") == f"{said}: this record is made from the run's saved settings, for the 6 steps it had " \
                                 "trained"
    assert record.pop("seed").startswith("withheld")
    assert record == {k: v for k, v in results["privacy"].items() if k != "stopped_by_budget"}
    at_2 = export(make_cfg(f"run_dir={tmp_path / 'run'}", "checkpoint=2", config_name="export"))["signature"]["privacy"]
    assert at_2["steps"] == 2 and at_2["epsilon"] == pytest.approx(reference_epsilon(at_2), rel=1e-9)
    assert at_2["epsilon"] < results["privacy"]["epsilon"]


def test_an_exported_best_dp_checkpoint_carries_the_guarantee_of_the_steps_it_was_chosen_among(make_cfg, tmp_path):
    """The best checkpoint is chosen by comparing it with the later ones, which the later steps' private batches
    shaped: the model released is then no more private than the whole run, however the step is named (its number
    got the epsilon of its own steps)."""
    from zoo.export.artifact import export

    results = train(make_cfg("debug=smoke", *DP, "optimizer.learning_rate=0.3", "trainer.eval_every=2",
                             "trainer.checkpoint_every=2", "trainer.early_stopping.patience=5"))
    assert results["early_stopping"]["best_checkpoint_step"] == 2 and results["privacy"]["steps"] == 6
    for checkpoint in ("final", "best", "2"):
        exported = export(make_cfg(f"run_dir={tmp_path / 'run'}", f"checkpoint={checkpoint}", config_name="export"))
        record = exported["signature"]["privacy"]
        assert exported["step"] == 2 and record["steps"] == 6 and record["exported_step"] == 2
        assert record["epsilon"] == results["privacy"]["epsilon"]
    record = export(make_cfg(f"run_dir={tmp_path / 'run'}", "checkpoint=4", config_name="export"))["signature"]["privacy"]
    assert record["steps"] == 4 and "exported_step" not in record and record["epsilon"] < results["privacy"]["epsilon"]


def test_the_plan_line_shows_a_small_epsilon_as_spent_not_as_zero(make_cfg, caplog):
    """A strict target (1e-4) is met: the line says so in figures that show it, not 'epsilon 0.000'."""
    caplog.set_level("INFO", logger="zoo")
    results = train(make_cfg("debug=smoke", "privacy=dpsgd", "privacy.target_epsilon=1e-4"))
    assert 0 < results["privacy"]["epsilon"] <= 1e-4
    assert f"epsilon {results['privacy']['epsilon']:.4g} at delta" in caplog.text and "epsilon 0.000 " not in caplog.text


@pytest.mark.parametrize("overrides", [
    ["privacy.target_epsilon=1e-4", "privacy.delta=1e-12"],  # PLD's grid keeps epsilon near 1e-3
    ["privacy.target_epsilon=1e-6", "privacy.accountant=rdp", "privacy.delta=1e-200"],
], ids=["pld-never-reaches-it", "rdp-needs-2.8e6"])
def test_a_target_epsilon_no_noise_within_bounds_meets_is_one_sentence(make_cfg, tmp_path, overrides):
    """The first ended in dp-accounting's NoBracketIntervalFoundError traceback; the second trained with a noise
    multiplier of 2.8e6, which a privacy.noise_multiplier above 1e6 is refused for."""
    with pytest.raises(UserError, match=r"^privacy\.target_epsilon=\S+ needs a noise multiplier above 1e\+06 at this "
                                        r"privacy\.delta .* raise privacy\.target_epsilon or privacy\.delta\.$"):
        train(make_cfg("debug=smoke", "privacy=dpsgd", *overrides))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("n, delta", [(1438, 1e-5), (60_000, 1e-5 / 6), (1_000_000, 1e-7)])
def test_the_default_delta_is_well_below_one_over_n(make_cfg, caplog, n, delta):
    """privacy.delta=null gave min(1e-5, 1/n): from n = 100,000 on exactly the 1/n that publishing one example in full
    meets, which the zoo warns of when it is set by hand. It is now at most a tenth of 1/n."""
    cfg = make_cfg("debug=smoke", "privacy=dpsgd", "trainer.batch_size=64", "privacy.target_epsilon=3")
    plan = plan_privacy(cfg, np.arange(n), 100, 1)  # only its length and indices are read
    assert plan.delta == pytest.approx(delta, rel=1e-12) and plan.delta <= 0.1 / n
    assert "not below 1/n" not in caplog.text


def test_the_rdp_accountant_does_not_report_an_epsilon_0_that_rounding_made(make_cfg):
    """At noise ~1e6 and q ~1e-3 dp-accounting computes the RDP of some orders as negative (rounding) and then
    returns epsilon 0 for the whole: `privacy.noise_multiplier=1e6 privacy.accountant=rdp privacy.delta=1e-12
    trainer.batch_size=1` recorded epsilon 0 where pld gives 0.001. An epsilon 0 from its bound through the total
    variation (below delta: the run is (0, delta)-DP) is the true answer, and stays."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    settings = ["debug=smoke", "privacy=dpsgd", "privacy.noise_multiplier=1e6", "trainer.batch_size=1"]
    plan = plan_privacy(make_cfg(*settings, "privacy.accountant=rdp", "privacy.delta=1e-12"), np.arange(1437), 6, 1)
    record = plan.record(6)
    pld = plan_privacy(make_cfg(*settings, "privacy.delta=1e-12"), np.arange(1437), 6, 1).record(6)
    assert record["epsilon"] > pld["epsilon"] > 0  # rdp is the looser bound
    rdp = RdpAccountant().compose(dp_accounting.dp_event.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
        record["q"], dp_accounting.GaussianDpEvent(1e6)), 6))
    kept = rdp.rdp >= 0
    assert not kept.all()
    assert record["epsilon"] == compute_epsilon(rdp.orders[kept], rdp.rdp[kept], record["accountant_delta"])[0]
    plan = plan_privacy(make_cfg(*settings, "privacy.accountant=rdp"), np.arange(1437), 6, 1)
    assert plan.record(6)["epsilon"] == 0.0 and 1 - math.exp(-rdp.rdp[rdp.orders == 2][0]) < plan.accountant_delta ** 2
