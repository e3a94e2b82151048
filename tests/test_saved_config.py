"""A run dir's saved config is data, not code: its targets are checked and its placement is not reused."""
import json
import pathlib
import sys

import pytest
from omegaconf import OmegaConf

from zoo.errors import UserError
from zoo.evaluate import evaluate
from zoo.targets import check_targets
from zoo.train import train


def eval_cfg(make_cfg, run_dir, *overrides):
    return make_cfg(f"run_dir={run_dir}", *overrides, config_name="eval")


def tamper_saved_config(run_dir, key: str, value) -> None:
    """Write `value` at `key` of the newest checkpoint's saved config, as someone with the run dir could."""
    ckpts = pathlib.Path(run_dir) / "checkpoints"
    meta_file = ckpts / str(max(int(p.name) for p in ckpts.iterdir() if p.name.isdigit())) / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta["config"][key] = value
    meta_file.write_text(json.dumps(meta))


def shell_target(marker) -> dict:
    return {"_target_": "zoo.cli.os.system", "_args_": [f"touch {marker}"]}


BAD_TARGETS = {  # key of the saved config -> (its new value, what the refusal names)
    "os": ("model", lambda m: {"_target_": "os.system"}, r"model names _target_='os\.system'"),
    "through-zoo": ("model", lambda m: {**shell_target(m), "hidden": [8]}, r"model names _target_='zoo\.cli\.os\.system'"),
    "through-optax": ("optimizer", lambda m: {"_target_": "optax._src.base.jax.numpy.save", "learning_rate": 0.1},
                      r"optimizer names _target_='optax\._src\.base\.jax\.numpy\.save'"),
    "nested-args": ("optimizer", lambda m: {"_target_": "optax.chain", "_args_": [shell_target(m)],
                                            "learning_rate": 0.1},
                    r"optimizer\._args_\[0\] names _target_='zoo\.cli\.os\.system'"),
}


@pytest.mark.parametrize("command", ["eval", "resume"])
@pytest.mark.parametrize("bad", list(BAD_TARGETS))
def test_disallowed_target_in_a_run_dir_is_refused(make_cfg, tmp_path, bad, command):
    """A target is judged by what it resolves to: `zoo.cli.os.system` is os.system, whatever its prefix."""
    train(make_cfg("debug=smoke", "trainer.max_steps=2", out="source"))
    key, value, names = BAD_TARGETS[bad]
    marker = tmp_path / "command_ran"
    tamper_saved_config(tmp_path / "source", key, value(marker))
    with pytest.raises(UserError, match=rf"config saved in .* is refused: {names}, which is not allowed"):
        if command == "eval":
            evaluate(eval_cfg(make_cfg, tmp_path / "source"))
        else:
            train(make_cfg("debug=smoke", f"trainer.resume={tmp_path / 'source' / 'checkpoints'}"))
    assert not marker.exists()



@pytest.mark.parametrize("command", ["eval", "resume", "rerun"])
@pytest.mark.parametrize("value, shown", [
    ("${nonexistent.key}", r"'\$\{nonexistent\.key\}'"),
    ("${oc.env:HOME}", r"'\$\{oc\.env:HOME\}'"),  # not resolved: the refusal shows no one's environment
], ids=["missing-key", "environment"])
def test_an_interpolation_in_a_saved_config_is_refused_in_one_sentence(make_cfg, tmp_path, command, value, shown):
    """A run saves its config resolved: an interpolation there ended eval, export and resume in omegaconf's
    traceback (a missing key), or took a value from the environment of whoever ran them."""
    train(make_cfg("debug=smoke", "trainer.max_steps=2", out="source"))
    tamper_saved_config(tmp_path / "source", "model", {**_saved_model(tmp_path / "source"), "activation": value})
    with pytest.raises(UserError, match=rf"^the config saved in .*/source/checkpoints is damaged: model\.activation "
                                        rf"holds {shown}, an interpolation, where a run saves plain values; "):
        if command == "eval":
            evaluate(eval_cfg(make_cfg, tmp_path / "source"))
        elif command == "resume":
            train(make_cfg("debug=smoke", f"trainer.resume={tmp_path / 'source' / 'checkpoints'}"))
        else:
            train(make_cfg("debug=smoke", "trainer.max_steps=4", out="source"))


def _saved_model(run_dir) -> dict:
    ckpts = pathlib.Path(run_dir) / "checkpoints"
    newest = max(int(p.name) for p in ckpts.iterdir() if p.name.isdigit())
    return json.loads((ckpts / str(newest) / "meta" / "metadata").read_text())["config"]["model"]

def test_eval_uses_its_own_distributed_settings(make_cfg, tmp_path):
    """A multi-process run's coordinator is gone by evaluation time; eval.py does not try to rejoin it."""
    results = train(make_cfg("debug=smoke", "trainer.max_steps=2"))
    tamper_saved_config(tmp_path / "run", "distributed", {
        "mode": "explicit", "coordinator_address": "localhost:1", "num_processes": 2, "process_id": 1,
        "timeout_s": 1})
    evaluated = evaluate(eval_cfg(make_cfg, tmp_path / "run"))
    assert evaluated["metrics"] == results["test"]


def test_checking_a_target_imports_no_module(monkeypatch):
    """zoo.bench.__main__ runs the benchmark when imported: naming it in a config must not import it."""
    monkeypatch.delitem(sys.modules, "zoo.bench.__main__", raising=False)
    with pytest.raises(UserError, match=r"it names nothing in the zoo's models or optax"):
        check_targets(OmegaConf.create({"model": {"_target_": "zoo.bench.__main__.main"}}))
    assert "zoo.bench.__main__" not in sys.modules


def test_checking_a_target_runs_no_lazy_import(monkeypatch):
    """tensorflow_datasets loads its submodules on attribute access (a module __getattr__): a path through it
    is judged without loading one."""
    import zoo.data.sources  # noqa: F401 — the module that holds `tfds`

    monkeypatch.delitem(sys.modules, "tensorflow_datasets.testing", raising=False)
    with pytest.raises(UserError, match=r"it names nothing in the zoo's models or optax"):
        check_targets(OmegaConf.create({"model": {"_target_": "zoo.data.sources.tfds.testing.TestCase"}}))
    assert "tensorflow_datasets.testing" not in sys.modules


def test_checkpoint_best_reads_the_saved_config_as_the_rest_of_eval_does(make_cfg, tmp_path):
    """The metric the best checkpoint is picked by comes from the saved config with this version's defaults for
    settings added since, and a damaged value there is one sentence."""
    train(make_cfg("debug=smoke", "trainer.checkpoint_every=2", "trainer.eval_every=2", "checkpoint.metric=loss"))
    before = evaluate(eval_cfg(make_cfg, tmp_path / "run", "checkpoint=best"))
    saved = json.loads((tmp_path / "run" / "checkpoints" / "6" / "meta" / "metadata").read_text())["config"]
    del saved["checkpoint"]["mode"]  # saved before checkpoint.mode existed
    tamper_saved_config(tmp_path / "run", "checkpoint", saved["checkpoint"])
    after = evaluate(eval_cfg(make_cfg, tmp_path / "run", "checkpoint=best"))
    assert (after["step"], after["metrics"]) == (before["step"], before["metrics"])
    tamper_saved_config(tmp_path / "run", "dataset", {**saved["dataset"], "task": "ranking"})
    with pytest.raises(UserError, match=r"dataset\.task must be one of"):
        evaluate(eval_cfg(make_cfg, tmp_path / "run", "checkpoint=best"))


def test_a_step_of_another_run_among_a_runs_checkpoints_is_refused_not_evaluated(make_cfg, tmp_path):
    """A step copied in from a run of another model was evaluated as the run's newest (exit 0, the other model's
    metrics), and the run's own steps were then said unreadable."""
    import shutil

    train(make_cfg("debug=smoke", "trainer.max_steps=4", "trainer.checkpoint_every=2", out="run"))
    train(make_cfg("debug=smoke", "model=linear", "trainer.max_steps=2", out="other"))
    shutil.copytree(tmp_path / "other" / "checkpoints" / "2", tmp_path / "run" / "checkpoints" / "6")
    with pytest.raises(UserError, match=r"^the checkpoints in .*/run/checkpoints are not all of one run: step \d and "
                                        r"step 6 were trained with other settings \(model\._target_ "
                                        r"\('zoo\.models\.MLP' -> 'zoo\.models\.Linear'\).*\); move the steps that "
                                        r"are not the run's out of it, or pass another run_dir\.$"):
        evaluate(eval_cfg(make_cfg, tmp_path / "run"))
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "6")  # moved out, as the sentence says: the run evaluates
    assert evaluate(eval_cfg(make_cfg, tmp_path / "run"))["step"] == 4
