"""Populations: every member equals its solo run; a failing member fails alone; preemption resumes bitwise;
the population axis spreads over devices; members that would change shapes are refused."""
import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SignalAtRead, subprocess_env

from zoo.checkpoint import Checkpoints
from zoo.data import TrainStream
from zoo.data.feed import fold_mask
from zoo.errors import UserError
from zoo.loop import NonFiniteLoss
import zoo.population.program as population_program
import zoo.population.train as population_train
import zoo.train
from zoo.population.grouping import group_indices
from zoo.population.loop import CheckpointWriter
from zoo.population.program import PopulationProgram
from zoo.population.train import member_hyperparameters, train_population
from zoo.preemption import Preempted
from zoo.train import train

SMALL = ["debug=smoke", "trainer.max_steps=12", "trainer.log_every=3", "trainer.eval_every=6",
         "trainer.checkpoint_every=6", "trainer.steps_per_call=4", "dataset.validation_fraction=0.2"]
GRID = [("0.05", "0"), ("0.05", "1"), ("0.2", "0")]  # learning rate x seed


def records(run_dir):
    """metrics.jsonl without its timing field."""
    rows = [json.loads(line) for line in open(pathlib.Path(run_dir) / "metrics.jsonl")]
    return [{k: v for k, v in r.items() if k != "examples_per_s"} for r in rows]


def configs(make_cfg, prefix, *overrides, grid=GRID):
    return [make_cfg(*SMALL, *overrides, f"optimizer.learning_rate={lr}", f"seed={seed}", out=f"{prefix}-{lr}-{seed}")
            for lr, seed in grid]


def assert_same_trajectory(a, b, rel=1e-5):
    ra, rb = records(a), records(b)
    assert [(r["step"], r["split"]) for r in ra] == [(r["step"], r["split"]) for r in rb]
    for x, y in zip(ra, rb):
        assert x.keys() == y.keys()
        for key in x:
            if key in ("step", "split", "count"):
                assert x[key] == y[key]
            else:
                assert x[key] == pytest.approx(y[key], rel=rel, abs=1e-7), (x["step"], x["split"], key)


DROPOUT = ["0.1", "0.0", "0.3"]  # each member its own rate: 0 must equal the solo run, which skips the layer
SHARED_DROPOUT = ["0.1"] * 3  # one rate for all: left a Python number in the model, as in the solo runs


@pytest.mark.parametrize("optimizer, dropout", [("sgd", DROPOUT), ("adamw", DROPOUT), ("sgd", SHARED_DROPOUT)])
def test_every_member_equals_its_solo_run(make_cfg, optimizer, dropout):
    cfgs = [make_cfg(*SMALL, f"optimizer={optimizer}", f"model.dropout={p}", f"optimizer.learning_rate={lr}",
                     f"seed={seed}", out=f"pop-{i}") for i, ((lr, seed), p) in enumerate(zip(GRID, dropout))]
    outcomes = train_population(cfgs)
    for i, (cfg, outcome) in enumerate(zip(cfgs, outcomes)):
        solo_cfg = make_cfg(*SMALL, f"optimizer={optimizer}", f"model.dropout={dropout[i]}",
                            f"optimizer.learning_rate={cfg.optimizer.learning_rate}", f"seed={cfg.seed}",
                            out=f"solo-{i}")
        solo = train(solo_cfg)
        assert outcome["test"]["count"] == solo["test"]["count"] == 359
        if optimizer == "sgd":
            assert_same_trajectory(cfg.paths.output_dir, solo_cfg.paths.output_dir)
        else:  # within one test example, and every logged loss close (Adam's step divides by tiny moments)
            assert abs(outcome["test"]["accuracy"] - solo["test"]["accuracy"]) <= 1 / 359 + 1e-12
            assert_same_trajectory(cfg.paths.output_dir, solo_cfg.paths.output_dir, rel=1e-3)
        assert outcome["population"] == {"members": 3, "member": cfgs.index(cfg)}
        steps = sorted(int(p.name) for p in (pathlib.Path(cfg.paths.output_dir) / "checkpoints").iterdir())
        assert steps == [6, 12]
    assert ("dropout" in member_hyperparameters(cfgs)[0]) == (dropout == DROPOUT)  # traced only where they differ
    # the members really differ: different seeds and rates give different trajectories
    assert records(cfgs[0].paths.output_dir) != records(cfgs[1].paths.output_dir)
    assert records(cfgs[0].paths.output_dir) != records(cfgs[2].paths.output_dir)


@pytest.mark.parametrize("grid", [GRID, [("0.05", "0"), ("0.05", "1")]], ids=["rates-differ", "rate-shared"])
def test_members_with_a_learning_rate_schedule_equal_their_solo_runs(make_cfg, grid):
    """optax builds a schedule from its values in Python: a traced peak rate must give each member the curve its
    solo run follows (end_value > 0 checks the values given relative to the peak)."""
    schedule = ["optimizer=sgd", "schedule=warmup_cosine", "schedule.warmup_steps=3", "schedule.end_value=0.01"]
    cfgs = configs(make_cfg, "pop", *schedule, grid=grid)
    outcomes = train_population(cfgs)
    for cfg, outcome, (lr, seed) in zip(cfgs, outcomes, grid):
        assert not isinstance(outcome, Exception), outcome
        solo_cfg = make_cfg(*SMALL, *schedule, f"optimizer.learning_rate={lr}", f"seed={seed}", out=f"solo-{lr}-{seed}")
        train(solo_cfg)
        assert_same_trajectory(cfg.paths.output_dir, solo_cfg.paths.output_dir)
    assert ("learning_rate" in member_hyperparameters(cfgs)[0]["optimizer"]) == (grid == GRID)


@pytest.mark.parametrize("model", ["model=mlp", "model=cnn"])
def test_members_models_are_bitwise_those_of_their_solo_runs(make_cfg, data_dir, model):
    """One compiled initialiser draws every member's parameters; a member's model must be the one its solo run
    builds eagerly from its own seed: parameters, model state (BatchNorm's) and graph."""
    from flax import nnx

    from zoo.data import load_dataset

    cfg = make_cfg(model, "model.dropout=0.3")
    data = load_dataset(cfg.dataset, data_dir)
    seeds = [0, 7, 123]
    for seed, built in zip(seeds, population_train._member_models(cfg, data, seeds)):
        solo = zoo.train.build_model(make_cfg(model, "model.dropout=0.3", f"seed={seed}"), data)
        (graph, state), (solo_graph, solo_state) = nnx.split(built), nnx.split(solo)
        assert graph == solo_graph and jax.tree.structure(state) == jax.tree.structure(solo_state)
        for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(solo_state)):
            assert np.array_equal(jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a,
                                  jax.random.key_data(b) if jnp.issubdtype(b.dtype, jax.dtypes.prng_key) else b)


def test_a_members_model_summary_counts_its_solo_runs_flops(make_cfg):
    """Linear regression on diabetes, whose step is small enough that the solo run counts a one-step call from
    the resident split (zoo.summary): a member reports the same count, index handling included."""
    model = ["model=linear", "dataset=diabetes", "logger.summary=true"]
    outcomes = train_population(configs(make_cfg, "pop", *model, grid=GRID[:2]))
    solo = train(make_cfg(*SMALL, *model, f"optimizer.learning_rate={GRID[0][0]}", f"seed={GRID[0][1]}", out="solo"))
    for outcome in outcomes:
        assert outcome["model"]["train_step_flops"] == pytest.approx(solo["model"]["train_step_flops"], rel=1e-3)
        assert outcome["model"]["eval_flops_per_example"] == pytest.approx(solo["model"]["eval_flops_per_example"])


def test_with_nan_check_step_a_diverging_member_names_its_batch_as_its_solo_run_does(make_cfg):
    grid = [("0.05", "0"), ("1e6", "0")]
    outcomes = train_population(configs(make_cfg, "pop", "optimizer=sgd", "trainer.nan_check=step", grid=grid))
    with pytest.raises(NonFiniteLoss) as solo:
        train(make_cfg(*SMALL, "optimizer=sgd", "trainer.nan_check=step", "optimizer.learning_rate=1e6", out="solo"))
    assert "(batch " in str(solo.value) and str(outcomes[1]) == str(solo.value)
    assert outcomes[0]["steps"] == 12


def test_a_diverging_member_names_the_settings_of_its_own_config_as_its_solo_run_does(make_cfg):
    """Member 1's weight decay times its learning rate is past 2 (each step multiplies its parameters by -4999):
    its advice names optimizer.weight_decay, as its solo run's does; member 0's rate keeps it in bounds."""
    grid = [("1e-7", "0"), ("0.05", "0")]
    common = ["optimizer=adamw", "optimizer.weight_decay=1e5"]
    outcomes = train_population(configs(make_cfg, "pop", *common, grid=grid))
    with pytest.raises(NonFiniteLoss) as solo:
        train(make_cfg(*SMALL, *common, "optimizer.learning_rate=0.05", out="solo"))
    assert "optimizer.weight_decay (now 100000" in str(solo.value) and str(outcomes[1]) == str(solo.value)
    assert outcomes[0]["steps"] == 12


def test_a_member_that_cannot_open_its_run_dir_leaves_the_others_their_own_dropout_rate(make_cfg):
    rates = ["0.3", "0.1", "0.1"]  # the survivors share 0.1, member 0's 0.3 must not become theirs
    cfgs = [make_cfg(*SMALL, "optimizer=sgd", f"model.dropout={p}", "trainer.resume=never",
                     f"optimizer.learning_rate={lr}", f"seed={seed}", out=f"pop-{i}")
            for i, ((lr, seed), p) in enumerate(zip(GRID, rates))]
    train(cfgs[0])  # member 0's run dir now holds checkpoints, which resume=never refuses to touch
    outcomes = train_population(cfgs)
    assert isinstance(outcomes[0], UserError) and "trainer.resume" in str(outcomes[0])
    for i in (1, 2):
        solo = make_cfg(*SMALL, "optimizer=sgd", "model.dropout=0.1", f"optimizer.learning_rate={GRID[i][0]}",
                        f"seed={GRID[i][1]}", out=f"solo-{i}")
        train(solo)
        assert_same_trajectory(cfgs[i].paths.output_dir, solo.paths.output_dir)


def test_a_member_whose_run_dir_has_a_file_in_the_way_fails_alone_as_its_job_would(make_cfg):
    """A file where member 0 keeps its checkpoints, a directory where member 1 writes metrics.jsonl: each fails with
    the sentence its solo run gives, and member 2 trains as alone (an OSError failed the whole group)."""
    cfgs = configs(make_cfg, "pop", "optimizer=sgd")
    run_dirs = [pathlib.Path(c.paths.output_dir) for c in cfgs]
    run_dirs[0].mkdir(parents=True)
    (run_dirs[0] / "checkpoints").write_text("")
    (run_dirs[1] / "metrics.jsonl").mkdir(parents=True)
    outcomes = train_population(cfgs)
    for i, (obstacle, why) in enumerate([("checkpoints", "a file where a run keeps its checkpoints"),
                                          ("metrics.jsonl", "Is a directory")]):
        assert isinstance(outcomes[i], UserError), outcomes[i]
        assert str(outcomes[i]) == f"something is in the way at {run_dirs[i] / obstacle} ({why}); move it and run " \
                                   "the command again."
    solo = make_cfg(*SMALL, "optimizer=sgd", f"optimizer.learning_rate={GRID[2][0]}", f"seed={GRID[2][1]}",
                    out="solo-2")
    train(solo)
    assert_same_trajectory(run_dirs[2], solo.paths.output_dir)
    assert isinstance(outcomes[2], dict) and (run_dirs[2] / "results.json").exists()


def test_any_error_opening_one_members_outputs_fails_that_member_alone(make_cfg, monkeypatch):
    cfgs = configs(make_cfg, "pop", "optimizer=sgd")
    opened = population_train.open_outputs

    def refused_for_member_1(cfg, *args, **kwargs):
        if cfg.paths.output_dir == cfgs[1].paths.output_dir:
            raise PermissionError(13, "Permission denied", cfg.paths.output_dir)
        return opened(cfg, *args, **kwargs)

    monkeypatch.setattr(population_train, "open_outputs", refused_for_member_1)
    outcomes = train_population(cfgs)
    assert isinstance(outcomes[1], PermissionError)
    assert isinstance(outcomes[0], dict) and isinstance(outcomes[2], dict)


def test_a_diverging_member_fails_alone(make_cfg):
    grid = [("0.05", "0"), ("1e6", "0"), ("0.05", "1")]
    cfgs = configs(make_cfg, "pop", "optimizer=sgd", grid=grid)
    outcomes = train_population(cfgs)
    assert isinstance(outcomes[1], NonFiniteLoss) and "non-finite" in str(outcomes[1])
    for i in (0, 2):
        solo = make_cfg(*SMALL, "optimizer=sgd", f"optimizer.learning_rate={grid[i][0]}", f"seed={grid[i][1]}",
                        out=f"solo-{i}")
        train(solo)
        assert_same_trajectory(cfgs[i].paths.output_dir, solo.paths.output_dir)
    assert not (pathlib.Path(cfgs[1].paths.output_dir) / "results.json").exists()


def stop_population_at(monkeypatch, step: int) -> None:
    """SIGTERM arrives while the call that reaches `step` is prepared, as a preemption would."""
    indices = TrainStream.indices

    def indices_then_signal(self, start, k, **padding):
        if start < step <= start + k:
            signal.raise_signal(signal.SIGTERM)
        return indices(self, start, k, **padding)

    monkeypatch.setattr(TrainStream, "indices", indices_then_signal)


@pytest.mark.parametrize("devices", ["parallel.mode=none", "parallel.mode=sharded"])
def test_preempted_population_resumes_bitwise(make_cfg, monkeypatch, devices):
    common = ["optimizer=adamw", "model.dropout=0.1", devices, "parallel.cpu_devices=2", "trainer.log_every=4"]
    whole = train_population(configs(make_cfg, "whole", *common))
    cfgs = configs(make_cfg, "cut", *common)
    with monkeypatch.context() as patch:
        stop_population_at(patch, 5)  # the call from step 4 ends at the eval at 6, inside the log interval 4..8
        stopped = train_population(cfgs)
    assert all(isinstance(o, Preempted) and "at step 6" in str(o) for o in stopped), stopped
    for cfg in cfgs:
        assert [int(p.name) for p in (pathlib.Path(cfg.paths.output_dir) / "checkpoints").iterdir()] == [6]
    resumed = train_population(configs(make_cfg, "cut", *common))
    for a, b, cfg_a, cfg_b in zip(whole, resumed, configs(make_cfg, "whole", *common), cfgs):
        assert b["start_step"] == 6
        assert a["test"] == b["test"]
        assert records(cfg_a.paths.output_dir) == records(cfg_b.paths.output_dir)
        # the final states themselves, optimizer moments and step counters included, not only what they evaluate to
        final_a, final_b = (final_checkpoint(cfg) for cfg in (cfg_a, cfg_b))
        assert jax.tree.structure(final_a) == jax.tree.structure(final_b)
        assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(final_a), jax.tree.leaves(final_b)))


def final_checkpoint(cfg):
    """The state a run's newest checkpoint holds, restored into its own structure."""
    run = zoo.train.build(cfg, for_training=False)
    ckpts = Checkpoints(os.path.join(cfg.paths.output_dir, "checkpoints"), read_only=True)
    try:
        return ckpts.restore(ckpts.steps()[-1], {"state": run.host_state, "sums": run.compiled.zero_sums})[0]
    finally:
        ckpts.close()


def test_a_signal_landing_mid_step_saves_every_member_at_the_step_they_stop_at(make_cfg, monkeypatch):
    flag = SignalAtRead(2)  # lands while the population checks its members at the second boundary
    monkeypatch.setattr(population_train, "stop_on_signals", lambda: contextlib.nullcontext(flag))
    cfgs = configs(make_cfg, "cut", "optimizer=sgd", "trainer.log_every=2", "trainer.steps_per_call=2")
    stopped = train_population(cfgs)
    assert all(isinstance(o, Preempted) and "at step 4" in str(o) for o in stopped), stopped
    for cfg in cfgs:  # every member saved the step the population stopped at, none an earlier one alone
        assert [int(p.name) for p in (pathlib.Path(cfg.paths.output_dir) / "checkpoints").iterdir()] == [4]


def test_a_member_still_waiting_for_its_resume_step_says_it_stopped_there(make_cfg, monkeypatch):
    longer = ["optimizer=sgd", "trainer.log_every=2", "trainer.steps_per_call=2", "trainer.max_steps=24"]
    cfgs = configs(make_cfg, "wait", *longer, grid=GRID[:2])
    train(make_cfg(*SMALL, *longer, "trainer.max_steps=12", "optimizer.learning_rate=0.05", "seed=0",
                   out=pathlib.Path(cfgs[0].paths.output_dir).name))  # member 0 already reached step 12
    monkeypatch.setattr(population_train, "stop_on_signals", lambda: contextlib.nullcontext(SignalAtRead(2)))
    stopped = train_population(cfgs)
    assert "at step 12;" in str(stopped[0]) and "at step 4;" in str(stopped[1]), stopped


def test_checkpoints_written_behind_the_loop_end_as_the_solo_runs_with_the_outlived_ones_skipped(make_cfg,
                                                                                                monkeypatch):
    """With every write held until the end, each member's checkpoints are still its solo run's: its newest and its
    best, which here is a different early step for each learning rate; the saves orbax would delete are not made."""
    every_4 = ["optimizer=sgd", "trainer.max_steps=24", "trainer.eval_every=4", "trainer.checkpoint_every=4",
               "trainer.log_every=4", "checkpoint.keep=1"]
    grid = [("0.05", "0"), ("0.2", "0"), ("1.0", "0")]
    cfgs = configs(make_cfg, "behind", *every_4, grid=grid)
    monkeypatch.setattr(CheckpointWriter, "AHEAD", 100)
    monkeypatch.setattr(CheckpointWriter, "LATE_S", 1e9)
    made = []
    save = Checkpoints.save
    monkeypatch.setattr(Checkpoints, "save", lambda self, step, *a, **k: (made.append(step), save(self, step, *a, **k)))
    assert all(isinstance(o, dict) for o in train_population(cfgs))
    monkeypatch.setattr(Checkpoints, "save", save)
    kept = []
    for cfg, (lr, seed) in zip(cfgs, grid):
        solo_cfg = make_cfg(*SMALL, *every_4, f"optimizer.learning_rate={lr}", f"seed={seed}", out=f"solo-{lr}")
        train(solo_cfg)
        steps = sorted(int(p.name) for p in (pathlib.Path(cfg.paths.output_dir) / "checkpoints").iterdir())
        assert steps == sorted(int(p.name) for p in (pathlib.Path(solo_cfg.paths.output_dir) / "checkpoints").iterdir())
        kept.append(steps)
    assert len({tuple(k) for k in kept}) == 3 and all(len(k) == 2 and k[-1] == 24 for k in kept), kept  # bests differ
    assert sorted(made) == sorted(sum(kept, []))  # 6 saves due per member, 2 made


def fake_write(log: list, step: int, error=None):
    def write():
        if error is not None:
            raise error
        log.append(step)

    write.step, write.metrics, write.outlived = step, None, lambda later: False
    return write


def eventually(condition, seconds=10.0) -> bool:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)
    return condition()


def test_the_checkpoint_writer_holds_writes_until_ahead_are_due_or_the_oldest_is_late(monkeypatch):
    member = types.SimpleNamespace(error=None)
    written = []
    monkeypatch.setattr(CheckpointWriter, "AHEAD", 2)
    with CheckpointWriter() as writer:
        writer.submit([(member, fake_write(written, 1))])
        time.sleep(0.2)
        assert written == []  # one boundary due, not late: held
        writer.submit([(member, fake_write(written, 2)), (member, None)])
        assert eventually(lambda: written == [1, 2])  # two due: both written
        writer.submit([(member, fake_write(written, 3))])
        time.sleep(0.2)
        assert written == [1, 2]
        writer.wait()
        assert written == [1, 2, 3]
    monkeypatch.setattr(CheckpointWriter, "LATE_S", 0.3)
    with CheckpointWriter() as writer:
        writer.submit([(member, fake_write(written, 3.5))])
        assert eventually(lambda: written[-1] == 3.5)  # late: written without a wait
        other = types.SimpleNamespace(error=None)
        # a refused write fails its member alone, and nothing more of it is written
        writer.submit([(member, fake_write(written, 4, UserError("disk full"))), (other, fake_write(written, 5))])
        writer.submit([(member, fake_write(written, 6)), (other, fake_write(written, 7))])
        writer.wait()
        assert str(member.error) == "disk full" and other.error is None
        assert written == [1, 2, 3, 3.5, 5, 7]
        writer.submit([(other, fake_write(written, 8, RuntimeError("bug")))])
        with pytest.raises(RuntimeError, match="bug"):  # any other error reaches the loop's thread
            writer.wait()
        writer.submit([(other, fake_write(written, 9))])
    assert written == [1, 2, 3, 3.5, 5, 7, 9]  # closing writes what is due
    with pytest.raises(KeyboardInterrupt), CheckpointWriter() as writer:
        writer.submit([(other, fake_write(written, 10))])
        raise KeyboardInterrupt  # closed by an error: what waits is dropped
    assert written == [1, 2, 3, 3.5, 5, 7, 9]


def test_a_member_s_newest_checkpoint_due_is_written_with_the_boundaries_taken_not_skipped_for_one_still_waiting(
        monkeypatch):
    """Boundaries falling due as fast as they are written: each time the writer takes the boundaries due (here 4
    at a time), the member's newest among them is written, and an older one is skipped only for newer ones written
    with it. Skipping one for newer ones still waiting, which are skipped in turn for even newer ones, wrote nothing
    until the training ended: a process killed then lost every checkpoint."""
    member = types.SimpleNamespace(error=None)
    written = []

    def keep_3(step):  # as checkpoint.keep=3: a save with 3 newer ones due is deleted once they are made
        write = fake_write(written, step)
        write.outlived = lambda later: len(later) >= 3
        return write

    monkeypatch.setattr(CheckpointWriter, "AHEAD", 4)
    monkeypatch.setattr(CheckpointWriter, "LATE_S", 1e9)
    with CheckpointWriter() as writer:
        for step in range(1, 31):  # a submit waits while 4 are due: the writer takes 1-4, 5-8, ..., then 29-30
            writer.submit([(member, keep_3(step))])
        writer.wait()
    assert written == [s for s in range(1, 31) if s % 4 != 1 or s == 29]


def test_a_signal_during_the_last_call_lets_the_members_finish(make_cfg, monkeypatch):
    monkeypatch.setattr(population_train, "stop_on_signals", lambda: contextlib.nullcontext(SignalAtRead(4)))
    cfgs = configs(make_cfg, "last", "optimizer=sgd")  # calls end at steps 3, 6, 9, 12: the 4th read is the last
    outcomes = train_population(cfgs)
    for cfg, outcome in zip(cfgs, outcomes):
        assert outcome["steps"] == 12, outcome
        assert sorted(int(p.name) for p in (pathlib.Path(cfg.paths.output_dir) / "checkpoints").iterdir()) == [6, 12]


def test_sharded_population_equals_none(make_cfg):
    one = train_population(configs(make_cfg, "none", "optimizer=sgd", "parallel.cpu_devices=1"))
    spread = train_population(configs(make_cfg, "sharded", "optimizer=sgd", "parallel.mode=sharded",
                                      "parallel.cpu_devices=2"))  # 3 members on 2 devices: one padding member
    for a, b in zip(one, spread):
        assert b["devices"] == 2
        assert a["test"]["accuracy"] == b["test"]["accuracy"]
        assert a["test"]["loss"] == pytest.approx(b["test"]["loss"], rel=1e-5)


def test_on_cpu_members_spread_over_one_device_per_core(make_cfg, monkeypatch):
    monkeypatch.setattr(population_train, "cpu_cores", lambda: 3)  # this test process has 8 CPU devices
    spread = train_population(configs(make_cfg, "cores", "optimizer=sgd"))
    assert [o["devices"] for o in spread] == [3, 3, 3]
    one = train_population(configs(make_cfg, "one", "optimizer=sgd", "parallel.cpu_devices=1"))
    for a, b in zip(one, spread):
        assert a["devices"] == 1 and a["test"]["accuracy"] == b["test"]["accuracy"]
        assert a["test"]["loss"] == pytest.approx(b["test"]["loss"], rel=1e-5)


def test_members_take_as_many_cpu_devices_as_they_fill_evenly_and_can_hold_the_data(make_cfg, monkeypatch):
    monkeypatch.setattr(population_train, "cpu_cores", lambda: 8)
    split = types.SimpleNamespace(x=np.zeros((100, 10), np.float32), y=np.zeros(100, np.int32))  # 4,400 bytes

    def count(members, *overrides):
        return len(population_train.member_devices(make_cfg(*SMALL, *overrides), ["cpu:0", "cpu:1"], members, split))

    assert [count(n) for n in (1, 2, 3, 16, 17)] == [1, 2, 3, 8, 6]  # 17 on 6 devices: one padding row, not 7
    assert count(16, "parallel.device_data_mb=0.01") == 2  # 10 kB of the host's memory: two copies of the split
    assert count(16, "parallel.cpu_devices=2") == 1  # parallel=none with its devices set: one, as before


def test_members_spread_over_cpu_devices_need_no_collectives(make_cfg, monkeypatch):
    """A program with collectives over several CPU devices must run one call at a time (zoo.parallel.
    cpu_collectives); a population's members are independent, so its calls may overlap the host's work."""
    texts, original = [], PopulationProgram.train_chunk

    def compile_first(self, states, accs, idx, mask, hyper):
        if not texts:  # before the call donates the states
            lowered = self._train.lower(states, accs, {"idx": fold_mask(idx, mask)}, self.rows, hyper)
            texts.append(lowered.compile().as_text())
        return original(self, states, accs, idx, mask, hyper)

    monkeypatch.setattr(PopulationProgram, "train_chunk", compile_first)
    train_population(configs(make_cfg, "hlo", "optimizer=sgd", "parallel.mode=sharded", "parallel.cpu_devices=2"))
    assert "num_partitions=2" in texts[0]
    assert not re.search(r"all-reduce|all-gather|collective-permute|all-to-all|reduce-scatter", texts[0])
    assert "__ynn_fusion" not in texts[0]  # XLA's batched matmuls: faster here than YNNPACK's (zoo.parallel.compiler)


@pytest.mark.parametrize("devices", ["parallel.mode=none", "parallel.mode=sharded"])
def test_the_train_and_eval_programs_are_compiled_ahead_and_the_loop_compiles_nothing(make_cfg, monkeypatch,
                                                                                       devices):
    """compile_ahead's programs are the ones the loop calls: built for other arguments than the calls pass
    (another sharding, dtype or call length), the loop would trace and compile them again on the host's critical
    path."""
    compiles, fitting, fit = [], [], population_train.fit_population
    loop_thread = threading.get_ident()  # compile_ahead's own threads may still be compiling when the loop starts

    def compiled(event, seconds, **_):  # tracing, lowering, compiling: none of them is cached on disk
        if event.startswith("/jax/core/compile/") and fitting and threading.get_ident() == loop_thread:
            compiles.append(event)

    def fit_counting_compiles(*args, **kwargs):
        fitting.append(True)
        try:
            return fit(*args, **kwargs)
        finally:
            fitting.clear()

    monkeypatch.setattr(population_train, "fit_population", fit_counting_compiles)
    slow_compiles(monkeypatch)  # a first call that did not wait for its program would compile it again itself
    jax.monitoring.register_event_duration_secs_listener(compiled)
    try:
        outcomes = train_population(configs(make_cfg, "ahead", devices, "parallel.cpu_devices=2"))
    finally:
        jax.monitoring.unregister_event_duration_listener(compiled)
    assert all(isinstance(o, dict) for o in outcomes)
    assert compiles == []


def slow_compiles(monkeypatch, seconds=0.5):
    """Programs compiled ahead take `seconds` longer to start compiling."""
    compile_on_thread = population_program._compile_on_thread

    class Slow:
        def __init__(self, traced):
            self.traced = traced

        def lower(self):
            time.sleep(seconds)
            return self.traced.lower()

    monkeypatch.setattr(population_program, "_compile_on_thread", lambda name, traced: compile_on_thread(
        name, Slow(traced)))


def test_a_group_ended_before_its_programs_ran_leaves_none_compiling(make_cfg, monkeypatch):
    def compiling():
        return [t for t in threading.enumerate() if t.name == "zoo-population-compile"]

    def failing_report(*args, **kwargs):
        assert compiling(), "the programs are compiled ahead while the group is prepared"
        raise RuntimeError("the group ends here")

    slow_compiles(monkeypatch)
    monkeypatch.setattr(population_train, "report", failing_report)
    with pytest.raises(RuntimeError, match="the group ends here"):
        train_population(configs(make_cfg, "ended", "optimizer=sgd"))
    assert compiling() == []


def test_a_population_launchers_process_gives_runs_one_cpu_device_as_usual(tmp_path):
    code = ("import jax; from omegaconf import OmegaConf; from zoo.parallel import cpu_devices_for_populations, "
            "select_devices; n = cpu_devices_for_populations(); "
            "print(n, len(jax.local_devices()), len(select_devices(OmegaConf.create({'cpu_devices': None}))))")
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env(str(tmp_path)), capture_output=True,
                         text=True, check=True).stdout.split()
    cores = len(os.sched_getaffinity(0))
    assert out == [str(cores), str(cores), "1"]


def test_members_that_would_change_shapes_are_refused(make_cfg):
    cfgs = [make_cfg(*SMALL, "model.hidden=[32]", out="a"), make_cfg(*SMALL, "model.hidden=[64]", out="b")]
    with pytest.raises(UserError, match="differ in model.hidden"):
        train_population(cfgs)
    assert not pathlib.Path(cfgs[0].paths.output_dir).exists()


def test_grouping_keeps_structural_changes_apart(make_cfg):
    cfgs = [make_cfg(*SMALL, *o, out=str(i)) for i, o in enumerate([
        ["seed=1"], ["optimizer.learning_rate=0.1"], ["model.hidden=[32]"], ["optimizer.weight_decay=0.5"],
        ["trainer.batch_size=8"], ["seed=2", "model.hidden=[32]"], ["model.dropout=0.3"]])]
    assert group_indices(cfgs, max_size=64) == [[0, 1, 3, 6], [2, 5], [4]]
    assert group_indices(cfgs, max_size=3) == [[0, 1, 3], [6], [2, 5], [4]]


def test_integer_optimizer_settings_stay_constants_and_split_groups(make_cfg):
    adafactor = ["optimizer=sgd", "optimizer._target_=optax.adafactor", "~optimizer.nesterov"]
    cfgs = [make_cfg(*SMALL, *adafactor, f"+optimizer.min_dim_size_to_factor={size}", f"seed={seed}", out=f"pop-{i}")
            for i, (size, seed) in enumerate([(16, 0), (16, 1), (128, 0)])]
    assert group_indices(cfgs, max_size=64) == [[0, 1], [2]]
    outcomes = train_population(cfgs[:2])  # traced, the factored dimension would fail every member
    for cfg, outcome in zip(cfgs, outcomes):
        solo = make_cfg(*SMALL, *adafactor, "+optimizer.min_dim_size_to_factor=16", f"seed={cfg.seed}",
                        out=f"solo-{cfg.seed}")
        assert outcome["test"] == pytest.approx(train(solo)["test"], rel=1e-5)


def test_an_optional_integer_optimizer_setting_splits_groups_instead_of_being_traced(make_cfg):
    # schedule_free_adamw(warmup_steps: Optional[int] = None): an int annotation, no int default
    free = ["optimizer._target_=optax.contrib.schedule_free_adamw"]
    cfgs = [make_cfg(*SMALL, *free, f"+optimizer.warmup_steps={steps}", f"seed={seed}", out=f"free-{i}")
            for i, (steps, seed) in enumerate([(2, 0), (2, 1), (3, 0)])]
    assert group_indices(cfgs, max_size=64) == [[0, 1], [2]]
    assert "warmup_steps" not in member_hyperparameters(cfgs)[0]["optimizer"]


def test_an_optimizer_state_holding_a_random_key_trains_job_by_job(make_cfg):
    noisy = make_cfg(*SMALL, "optimizer=sgd", "optimizer._target_=optax.noisy_sgd", "~optimizer.nesterov",
                     "~optimizer.momentum", out="noisy")
    assert "optax.noisy_sgd's state holds a random key" in population_train.trains_alone(noisy)
    assert population_train.trains_alone(make_cfg(*SMALL, out="adamw")) is None


@pytest.mark.parametrize("overrides, setting", [
    (["parallel.mode=pmap", "parallel.cpu_devices=2"], "parallel=sharded"),
    (["parallel.mode=sharded", "parallel.fsdp=true", "parallel.cpu_devices=2"], "set parallel.fsdp=false"),
    (["parallel.device_data_mb=0.01"],  # the split's size as a figure, however small: not "(0 MB)"
     r"\((?!0 MB)[0-9.e-]+ MB\) exceeds parallel\.device_data_mb=0\.01; raise that limit"),
    (["trainer.profile=true"], "set trainer.profile=false"),
    (["optimized_metric=[test/accuracy,wall_time_s]"],  # each member's would be the group's
     r"optimized_metric names wall_time_s, which a population's members share .*use hydra/launcher=basic"),
], ids=["pmap", "fsdp", "device-data", "profile", "time-objective"])
def test_what_a_population_cannot_train_is_refused_with_the_setting_to_change(make_cfg, overrides, setting):
    with pytest.raises(UserError, match=setting):
        train_population(configs(make_cfg, "refused", *overrides))


def test_early_stopping_ends_each_member_alone_as_in_its_solo_run(make_cfg):
    stopping = ["optimizer=sgd", "trainer.max_steps=24", "trainer.eval_every=3",
                "trainer.early_stopping.patience=1", "trainer.early_stopping.min_delta=0.02"]
    grid = [("0.05", "0"), ("1e-9", "0"), ("0.2", "1")]  # 1e-9 cannot improve by min_delta: stops at its 2nd eval
    cfgs = configs(make_cfg, "pop", *stopping, grid=grid)
    outcomes = train_population(cfgs)
    stopped = [o["early_stopping"]["stopped_step"] for o in outcomes]
    assert stopped[1] == 6 and len(set(stopped)) > 1, stopped  # members stop at different steps
    for (lr, seed), cfg, outcome in zip(grid, cfgs, outcomes):
        solo_cfg = make_cfg(*SMALL, *stopping, f"optimizer.learning_rate={lr}", f"seed={seed}", out=f"solo-{lr}")
        solo = train(solo_cfg)
        assert outcome["early_stopping"] == solo["early_stopping"]
        assert outcome["test"] == pytest.approx(solo["test"], rel=1e-5)
        assert_same_trajectory(cfg.paths.output_dir, solo_cfg.paths.output_dir)


def test_a_signal_after_early_stopping_ended_a_member_lets_that_member_finish(make_cfg, monkeypatch):
    monkeypatch.setattr(population_train, "stop_on_signals", lambda: contextlib.nullcontext(SignalAtRead(2)))
    stopping = ["optimizer=sgd", "trainer.max_steps=24", "trainer.eval_every=3",
                "trainer.early_stopping.patience=1", "trainer.early_stopping.min_delta=0.02"]
    grid = [("0.05", "0"), ("1e-9", "0")]  # 1e-9 stops at its 2nd eval, step 6, where the signal lands
    outcomes = train_population(configs(make_cfg, "pop", *stopping, grid=grid))
    assert outcomes[1]["early_stopping"]["stopped_step"] == 6  # complete when the signal came: it finished
    assert isinstance(outcomes[0], Preempted) and "at step 6" in str(outcomes[0])


def test_convnet_members_with_batch_norm_equal_their_solo_runs(make_cfg):
    cnn = ["model=cnn", "model.channels=[4,8]", "model.dense=16", "optimizer=sgd", "trainer.steps_per_call=null"]
    grid = [("0.05", "0"), ("0.1", "1")]
    cfgs = configs(make_cfg, "pop", *cnn, grid=grid)
    outcomes = train_population(cfgs)
    for (lr, seed), cfg, outcome in zip(grid, cfgs, outcomes):
        solo = make_cfg(*SMALL, *cnn, f"optimizer.learning_rate={lr}", f"seed={seed}", out=f"solo-{lr}")
        train(solo)
        assert_same_trajectory(cfg.paths.output_dir, solo.paths.output_dir)
        assert outcome["test"]["count"] == 359


def test_a_member_whose_checkpoint_cannot_be_written_fails_alone(make_cfg, monkeypatch):
    from zoo.checkpoint import Checkpoints

    save = Checkpoints.save

    def full_disk_for_one(self, step, *args, **kwargs):
        if "pop-0.2-0" in self.directory and step == 6:
            raise UserError(f"could not write checkpoint step {step} in {self.directory} (no space left on device)")
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpoints, "save", full_disk_for_one)
    cfgs = configs(make_cfg, "pop", "optimizer=sgd")
    outcomes = train_population(cfgs)
    assert isinstance(outcomes[2], UserError) and "no space left" in str(outcomes[2])
    assert [o["steps"] for o in outcomes[:2]] == [12, 12]
    # nothing more of it is saved, though its final checkpoint was due before its refused one was written
    assert not any(p.name.isdigit() for p in (pathlib.Path(cfgs[2].paths.output_dir) / "checkpoints").iterdir())


def test_a_member_with_a_bad_value_fails_alone(make_cfg):
    cfgs = configs(make_cfg, "pop", "optimizer=sgd", grid=[("0.05", "0"), ("-1", "0"), ("0.05", "1")])
    outcomes = train_population(cfgs)
    assert isinstance(outcomes[1], UserError) and "optimizer.learning_rate must be a positive" in str(outcomes[1])
    assert outcomes[0]["population"]["members"] == outcomes[2]["population"]["members"] == 2


def test_a_member_resumed_ahead_of_the_others_mid_log_interval_equals_its_solo_run(make_cfg, monkeypatch):
    """Member 0 alone was preempted at step 6, inside the log interval 4..8: in the population it waits (masked,
    untrained) until the others reach step 6, and its first log still covers the whole interval."""
    longer = ["optimizer=sgd", "trainer.log_every=4", "trainer.steps_per_call=2", "trainer.max_steps=24"]
    cfgs = configs(make_cfg, "wait", *longer, grid=GRID[:2])
    name = pathlib.Path(cfgs[0].paths.output_dir).name
    with monkeypatch.context() as patch:
        patch.setattr(zoo.train, "stop_on_signals", lambda: contextlib.nullcontext(SignalAtRead(3)))
        with pytest.raises(Preempted):
            train(make_cfg(*SMALL, *longer, "optimizer.learning_rate=0.05", "seed=0", out=name))
    outcomes = train_population(cfgs)
    solo = make_cfg(*SMALL, *longer, "optimizer.learning_rate=0.05", "seed=0", out="solo")
    assert outcomes[0]["start_step"] == 6 and outcomes[0]["test"] == train(solo)["test"]
    assert_same_trajectory(cfgs[0].paths.output_dir, solo.paths.output_dir)


@pytest.mark.parametrize("stopping", [[], ["trainer.early_stopping.patience=1"]], ids=["plain", "early-stopping"])
def test_a_lengthened_member_makes_the_periodic_eval_of_its_old_end_as_its_solo_run(make_cfg, stopping):
    """Member 0 had finished 12 steps (final evals at 12, a periodic eval step): lengthened to 24 in a population
    where member 1 starts afresh, it makes the periodic eval at 12 that its solo run makes, which early stopping
    counts (at learning rate 1e-9 nothing improves: patience 1 ends it there, at its start)."""
    longer = ["optimizer=sgd", "trainer.max_steps=24", *stopping]
    grid = [("1e-9", "0"), ("0.05", "1")]
    cfgs = configs(make_cfg, "len", *longer, grid=grid)
    for out in (pathlib.Path(cfgs[0].paths.output_dir).name, "solo"):
        train(make_cfg(*SMALL, *longer, "trainer.max_steps=12", "optimizer.learning_rate=1e-9", "seed=0", out=out))
    outcomes = train_population(cfgs)
    solo_cfg = make_cfg(*SMALL, *longer, "optimizer.learning_rate=1e-9", "seed=0", out="solo")
    solo = train(solo_cfg)
    assert outcomes[0]["steps"] == solo["steps"] and outcomes[0].get("early_stopping") == solo.get("early_stopping")
    assert_same_trajectory(cfgs[0].paths.output_dir, solo_cfg.paths.output_dir)


def test_a_lengthened_member_early_stopping_ends_at_its_start_reports_the_speed_of_the_run_it_continued(make_cfg):
    """It trains no step in the population: its examples_per_s is that of the run that trained its steps, not 0.0."""
    longer = ["optimizer=sgd", "trainer.max_steps=24", "trainer.early_stopping.patience=1"]
    cfgs = configs(make_cfg, "speed", *longer, grid=[("1e-9", "0"), ("0.05", "1")])
    first = train(make_cfg(*SMALL, *longer, "trainer.max_steps=12", "optimizer.learning_rate=1e-9", "seed=0",
                           out=pathlib.Path(cfgs[0].paths.output_dir).name))
    outcomes = train_population(cfgs)
    assert outcomes[0]["steps"] == outcomes[0]["start_step"] == 12
    assert outcomes[0]["examples_per_s"] == first["examples_per_s"] > 0
    assert outcomes[1]["examples_per_s"] > 0


def test_a_members_train_rows_time_its_steps_not_their_dispatch(make_cfg, monkeypatch):
    """A call returns once dispatched, and its steps run until their sums are fetched: the interval was timed before
    that fetch, so the rows' examples_per_s (and gflop_s) were ~14x a solo run's on the same machine."""
    fetch = jax.device_get

    def slow(tree):  # the interval's steps as if they took 0.2 s to compute, which the fetch waits for
        time.sleep(0.2)
        return fetch(tree)

    cfgs = configs(make_cfg, "rates", grid=GRID[:2])
    monkeypatch.setattr(jax, "device_get", slow)
    train_population(cfgs)
    rows = [json.loads(line) for line in open(pathlib.Path(cfgs[0].paths.output_dir) / "metrics.jsonl")]
    rates = [r["examples_per_s"] for r in rows if r["split"] == "train" and not r.get("final")]
    examples = 3 * cfgs[0].trainer.batch_size  # trainer.log_every=3 steps a row
    assert len(rates) == 4 and all(0 < rate <= examples / 0.2 for rate in rates), rates


def test_a_batch_its_solo_runs_cannot_split_over_their_devices_is_refused(make_cfg):
    """parallel=sharded splits each solo run's batch over its devices: a batch of 6 on 4 devices fails alone,
    so the group fails with the same sentence instead of training runs that have no solo equal."""
    cfgs = configs(make_cfg, "odd", "parallel=sharded", "parallel.cpu_devices=4", "trainer.batch_size=6")
    with pytest.raises(UserError, match="trainer.batch_size=6 does not split evenly across 4 devices"):
        train_population(cfgs)
    assert not any((pathlib.Path(c.paths.output_dir) / "metrics.jsonl").exists() for c in cfgs)
    # digits' 1438 training examples: 1440, which its solo run names no more, would be refused as above the split
    cfgs = configs(make_cfg, "big", "parallel=sharded", "parallel.cpu_devices=4", "trainer.batch_size=1438",
                   "dataset.validation_fraction=0")
    with pytest.raises(UserError, match=r"trainer\.batch_size=1438 does not split evenly across 4 devices; use 1436\.$"):
        train_population(cfgs)


def test_without_checkpoints_neither_a_solo_run_nor_a_population_ends_its_calls_at_checkpoint_boundaries(
        make_cfg, monkeypatch):
    """checkpoint.enabled=false: a call ran only to the next checkpoint_every boundary (and the state was copied to
    the host there) though nothing was saved. Calls end at log and eval boundaries only, and the trajectories
    stay each solo run's."""
    import zoo.loop
    import zoo.population.loop

    ends = {"solo": [], "population": []}

    def spy(kind, real):
        def boundary(step, total, *periods):
            ends[kind].append(real(step, total, *periods))
            return ends[kind][-1]
        return boundary

    monkeypatch.setattr(zoo.loop, "next_boundary", spy("solo", zoo.loop.next_boundary))
    monkeypatch.setattr(zoo.population.loop, "next_boundary", spy("population", zoo.population.loop.next_boundary))
    unsaved = ["trainer.checkpoint_every=5", "checkpoint.enabled=false"]  # log 3, eval 6, 12 steps, 4 a call
    cfgs = configs(make_cfg, "pop", *unsaved, grid=GRID[:2])
    train_population(cfgs)
    for cfg in cfgs:
        solo = make_cfg(*SMALL, *unsaved, f"optimizer.learning_rate={cfg.optimizer.learning_rate}",
                        f"seed={cfg.seed}", out=f"solo-{cfg.seed}")
        train(solo)
        assert_same_trajectory(cfg.paths.output_dir, solo.paths.output_dir)
    assert ends["population"] == [3, 6, 9, 12]
    assert ends["solo"] == [3, 6, 9, 12] * 2
