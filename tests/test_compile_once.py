"""After warm-up nothing recompiles: several epochs, periodic evals and a padded last eval batch included."""
import pytest

from zoo.loop import evaluate, fit
from zoo.run_logger import RunLogger
from zoo.train import build


@pytest.mark.parametrize("mode", ["none", "sharded"])
@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_train_and_eval_steps_compile_exactly_once(make_cfg, tmp_path, mode, steps_per_call):
    cfg = make_cfg("debug=smoke", f"parallel.mode={mode}", "parallel.cpu_devices=2", "trainer.epochs=3",
                   "trainer.max_steps=null", "trainer.batch_size=320", "trainer.eval_batch_size=100",
                   "trainer.log_every=4", "trainer.eval_every=4", f"trainer.steps_per_call={steps_per_call}")
    run = build(cfg)
    assert run.stream.steps_per_epoch == 4 and run.total_steps == 12  # 3 epochs
    state = run.compiled.mode.put_state(run.host_state)
    state, *_ = fit(state, run.compiled, run.stream, run.eval_sets, cfg.trainer, run.total_steps,
                    RunLogger(str(tmp_path), cfg.logger, run.total_steps))
    batches, count = run.eval_sets["test"]
    assert count == 359 and len(batches) == 4  # the last eval batch holds 59 real examples, 41 padding
    assert evaluate(state, run.compiled, batches, count)["count"] == 359
    assert run.compiled.train_chunk._cache_size() == 1
    assert run.compiled.eval_step._cache_size() == 1
