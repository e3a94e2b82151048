"""Every parallel mode computes what one device computes: same losses, same exact eval, any device count."""
import json

import jax
import numpy as np
import pytest

import zoo.train
from zoo.errors import UserError
from zoo.train import train

MODELS = ["linear", "mlp", "cnn"]  # cnn carries BatchNorm: under pmap its statistics are synchronised
MODES = [("pmap", 1), ("pmap", 2), ("pmap", 4), ("sharded", 1), ("sharded", 2), ("sharded", 4),
         ("sharded_fsdp", 2), ("sharded_fsdp", 4)]
# dropout 0: under pmap each device draws its own mask, which is equivalent in distribution only
# sgd: Adam divides by sqrt(v), which magnifies reduction-order rounding in the first steps
COMMON = ["debug=smoke", "model.dropout=0.0", "trainer.batch_size=24", "trainer.max_steps=4", "trainer.log_every=1",
          "trainer.eval_every=0", "trainer.eval_batch_size=7", "optimizer=sgd", "checkpoint.enabled=false"]


def mode_overrides(mode: str, devices: int) -> list:
    name, _, fsdp = mode.partition("_")
    return [f"parallel.mode={name}", f"parallel.cpu_devices={devices}", f"parallel.fsdp={bool(fsdp)}"]


def train_losses(run_dir) -> list:
    return [r["loss"] for r in map(json.loads, open(run_dir / "metrics.jsonl")) if r["split"] == "train"]


@pytest.fixture(scope="module")
def references():
    """model -> (single-device results, its train losses), computed once per model."""
    return {}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode,devices", MODES, ids=[f"{m}-{d}" for m, d in MODES])
def test_mode_equals_single_device(make_cfg, tmp_path, references, model, mode, devices):
    common = [f"model={model}"] + [c for c in COMMON if model != "linear" or "dropout" not in c]
    if model not in references:
        ref = train(make_cfg(*common, "parallel=none", out="ref"))
        references[model] = (ref, train_losses(tmp_path / "ref"))
    reference, reference_losses = references[model]
    result = train(make_cfg(*common, *mode_overrides(mode, devices)))
    assert result["devices"] == devices
    np.testing.assert_allclose(train_losses(tmp_path / "run"), reference_losses, rtol=1e-5)
    assert result["test"]["count"] == reference["test"]["count"] == 359
    np.testing.assert_allclose(result["test"]["loss"], reference["test"]["loss"], rtol=1e-5)
    assert abs(result["test"]["accuracy"] - reference["test"]["accuracy"]) <= 1 / 359  # a near-tie may flip


def test_fsdp_keeps_parameters_and_optimizer_moments_sharded_while_training(make_cfg, monkeypatch):
    """Equal results alone would not show that anything is sharded: each device holds a quarter of every large
    array of the trained state (kernels, Adam's moments)."""
    fit, trained = zoo.train.fit, {}

    def recording_fit(*args, **kwargs):
        trained["state"], *rest = fit(*args, **kwargs)
        return (trained["state"], *rest)

    monkeypatch.setattr(zoo.train, "fit", recording_fit)
    train(make_cfg(*COMMON, "model=mlp", "optimizer=adamw", *mode_overrides("sharded_fsdp", 4)))
    large = [x for x in jax.tree.leaves(trained["state"]) if x.size >= 1024]
    assert len(large) >= 6  # two hidden kernels and the head's, each with two moments
    assert all(len(x.addressable_shards) == 4 and x.addressable_shards[0].data.size * 4 == x.size for x in large)


@pytest.mark.parametrize("mode", ["pmap", "sharded"])
@pytest.mark.parametrize("devices", [1, 2, 3, 8])
def test_eval_counts_the_whole_split_on_any_device_count(make_cfg, references, mode, devices):
    """7-example batches padded to a multiple of `devices`, the padding masked: the metrics are one device's."""
    if "one-step" not in references:
        references["one-step"] = train(make_cfg(*COMMON, "trainer.max_steps=1", "parallel=none", out="ref"))["test"]
    reference = references["one-step"]
    result = train(make_cfg(*COMMON, "trainer.max_steps=1", f"parallel.mode={mode}", f"parallel.cpu_devices={devices}"))
    assert result["test"]["count"] == reference["count"] == 359
    np.testing.assert_allclose(result["test"]["loss"], reference["loss"], rtol=1e-5)
    assert abs(result["test"]["accuracy"] - reference["accuracy"]) <= 1 / 359  # a near-tie may flip


def test_batch_that_does_not_split_says_the_valid_sizes(make_cfg):
    with pytest.raises(UserError, match=r"trainer\.batch_size=100 does not split evenly across 8 devices; use 96 or 104"):
        train(make_cfg("debug=smoke", "parallel.mode=pmap", "parallel.cpu_devices=8", "trainer.batch_size=100"))


def test_the_valid_sizes_named_fit_the_train_split(make_cfg):
    """Digits' 1438 training examples over 4 devices: 1440 would be refused as larger than the train split."""
    message = r"trainer\.batch_size=1438 does not split evenly across 4 devices; use 1436\.$"
    with pytest.raises(UserError, match=message):
        train(make_cfg("debug=smoke", "parallel.mode=pmap", "parallel.cpu_devices=4", "trainer.batch_size=1438"))
    with pytest.raises(UserError, match=r"trainer\.batch_size=5000 is larger than the train split \(1438 examples\)"):
        train(make_cfg("debug=smoke", "parallel.mode=pmap", "parallel.cpu_devices=3", "trainer.batch_size=5000"))


def test_more_devices_than_the_process_has(make_cfg):
    with pytest.raises(UserError, match=r"parallel\.cpu_devices=16 but this process already started JAX with 8"):
        train(make_cfg("debug=smoke", "parallel.mode=sharded", "parallel.cpu_devices=16"))


# The defaults (AdamW, dropout 0) with K=3 steps per call and logs every 4 steps: calls of 3 and 1 steps, and
# metric sums carried across calls, under every mode. AdamW divides by sqrt(v), so in the first steps a
# parameter whose gradient is near 0 moves by about +-lr whichever way reduction-order rounding tips it.
# Measured relative differences: mlp 1.2e-7, cnn (BatchNorm) 3.4e-4 on the loss of steps 5-8; with the
# gradient psum removed from the pmap step they are 8e-2 (mlp) and 0.44 (cnn).
CHUNKED = ["debug=smoke", "trainer.batch_size=24", "trainer.max_steps=8", "trainer.log_every=4",
           "trainer.eval_every=0", "trainer.eval_batch_size=7", "checkpoint.enabled=false"]
ADAMW_RTOL = {"mlp": 1e-5, "cnn": 1e-3}


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("mode,devices", [("pmap", 2), ("sharded", 2), ("sharded_fsdp", 8)],
                         ids=["pmap-2", "sharded-2", "sharded_fsdp-8"])
def test_chunked_calls_with_the_default_optimizer_equal_single_device(make_cfg, tmp_path, references, model, mode,
                                                                      devices):
    if f"{model}-chunked" not in references:
        ref = train(make_cfg(f"model={model}", *CHUNKED, "parallel=none", "trainer.steps_per_call=1", out="ref"))
        references[f"{model}-chunked"] = (ref, train_losses(tmp_path / "ref"))
    reference, reference_losses = references[f"{model}-chunked"]
    result = train(make_cfg(f"model={model}", *CHUNKED, "trainer.steps_per_call=3", *mode_overrides(mode, devices)))
    losses = train_losses(tmp_path / "run")
    assert len(losses) == 2
    np.testing.assert_allclose(losses, reference_losses, rtol=ADAMW_RTOL[model])
    np.testing.assert_allclose(result["test"]["loss"], reference["test"]["loss"], rtol=ADAMW_RTOL[model])
    assert abs(result["test"]["accuracy"] - reference["test"]["accuracy"]) <= 1 / 359  # a near-tie may flip


def test_a_job_asking_for_fewer_cpu_devices_keeps_what_the_population_launcher_set(data_dir):
    import subprocess
    import sys

    from conftest import ROOT, subprocess_env

    # hydra/launcher=population sets the most its jobs ask for (4); a job asking for 2 may be the first to run
    script = ("import jax; from omegaconf import OmegaConf; "
              "from zoo.parallel import cpu_devices_for_populations, select_devices; "
              "cpu_devices_for_populations(4); "
              "chosen = select_devices(OmegaConf.create({'cpu_devices': 2})); "
              "print(len(chosen), len(jax.local_devices()))")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=subprocess_env(data_dir), capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[-2:] == ["2", "4"]  # the job trains on its 2; a later job asking for 4 finds them
