"""After warm-up nothing recompiles: several epochs, periodic evals and a padded last eval batch included."""
import pytest

from zoo.loop import evaluate, fit
from zoo.run_logger import RunLogger
from zoo.train import build


# (K, log_every): periods that are multiples of K, and log_every=3 with the default K (a call runs to the next
# log or eval), which with eval_every=4 asks for calls of 3, 1, 2, 2, 1 and 3 steps.
PERIODS = [("1", 4), ("4", 4), ("null", 3)]


@pytest.mark.parametrize("mode", ["none", "sharded"])
@pytest.mark.parametrize("steps_per_call,log_every", PERIODS, ids=[f"K={k}-log{n}" for k, n in PERIODS])
def test_train_and_eval_steps_compile_exactly_once(make_cfg, tmp_path, mode, steps_per_call, log_every):
    cfg = make_cfg("debug=smoke", f"parallel.mode={mode}", "parallel.cpu_devices=2", "trainer.epochs=3",
                   "trainer.max_steps=null", "trainer.batch_size=320", "trainer.eval_batch_size=100",
                   f"trainer.log_every={log_every}", "trainer.eval_every=4", f"trainer.steps_per_call={steps_per_call}")
    run = build(cfg)
    assert run.stream.steps_per_epoch == 4 and run.total_steps == 12  # 3 epochs
    state = run.compiled.mode.put_state(run.host_state)
    state, *_ = fit(state, run.compiled, run.feed, run.eval_sets, cfg.trainer, run.total_steps,
                    RunLogger(str(tmp_path), cfg.logger, run.total_steps))
    batches, count = run.eval_sets["test"]
    assert count == 359 and len(batches) == 4  # the last eval batch holds 59 real examples, 41 padding
    assert evaluate(state, run.compiled, batches, count)["count"] == 359
    assert run.compiled.train_chunk._cache_size() == 1
    assert run.compiled.eval_step._cache_size() == 1
