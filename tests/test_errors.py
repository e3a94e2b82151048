"""The bad-input catalog (docs/errors.md): every row's input gives its one-sentence message, and loses nothing.

Most rows run in-process (train(cfg) / evaluate(cfg) raising UserError); a few run the real commands to show
the exit code and that no traceback reaches the terminal.
"""
import asyncio
import dataclasses
import errno
import gc
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from hydra.errors import ConfigCompositionException

import commands
from conftest import ROOT, subprocess_env
import zoo.cli
from zoo.checkpoint import Checkpoints
from zoo.cli import RunDirCheck, run_task
from zoo.data import build_dataset, embedded, load_dataset
from zoo.errors import Interrupted, RunRefused, UserError
from zoo.evaluate import evaluate
from zoo.loop import NonFiniteLoss
from zoo.preemption import Preempted
from zoo.train import build, train

CALLBACK = "++hydra.callbacks.run_dir_check._target_=zoo.cli.RunDirCheck"  # the conf registers it by name too


def run(args, data_dir, script="train.py"):
    return commands.run([sys.executable, str(script), *args], cwd=ROOT, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=180)


def assert_one_sentence(done, code, fragment):
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert fragment in last and (not fragment.startswith("error: ") or last.startswith("error: ")), done.stderr


def eval_cfg(make_cfg, run_dir, *overrides):
    return make_cfg(f"run_dir={run_dir}", *overrides, config_name="eval")


# --- The command line: Hydra refuses it while composing (exit 1, Hydra's own message) --------------------------

@pytest.mark.parametrize("override,fragment", [
    ("model=transformer", "Available options in 'model':\n\tcnn\n\tlinear\n\tmlp"),
    ("trainer.epoch=3", "Key 'epoch' not in 'TrainerConfig'"),
    ("trainer.epochs=three", "Value 'three' of type 'str' could not be converted to Integer"),
])
def test_hydra_refuses_unknown_options_keys_and_types(make_cfg, override, fragment):
    with pytest.raises(ConfigCompositionException) as err:
        make_cfg(override)
    assert fragment in str(err.value) + str(err.value.__cause__)


@pytest.mark.parametrize("override,message", [
    ("+trainer.epoch=3", r"trainer\.epoch is not a setting; remove it or fix its spelling \(settings of trainer: "
                         r"epochs, "),
    ("+trainer.early_stopping.patince=1", r"trainer\.early_stopping\.patince is not a setting; remove it or fix "
                                          r"its spelling \(settings of trainer\.early_stopping: patience, "),
], ids=["group", "nested-group"])
def test_a_key_added_with_plus_is_refused_not_ignored(make_cfg, override, message):
    with pytest.raises(UserError, match=message):
        train(make_cfg("debug=smoke", override))


# --- Values refused before any JAX work, or before compiling (exit 2) ------------------------------------------

BAD_VALUES = [
    ("optimizer.learning_rate=0", r"optimizer\.learning_rate must be a positive finite number, got 0\."),
    ("optimizer.learning_rate=-1e-3", r"optimizer\.learning_rate must be a positive finite number, got -0\.001\."),
    ("optimizer.learning_rate=inf", r"optimizer\.learning_rate must be a positive finite number, got inf\."),
    ("trainer.batch_size=0", r"trainer\.batch_size must be a positive integer, got 0\."),
    ("trainer.batch_size=5000", r"trainer\.batch_size=5000 is larger than the train split \(1438 examples\); "
                                r"lower trainer\.batch_size\."),
    ("dataset.validation_fraction=0.99", r"trainer\.batch_size=16 is larger than the train split \(14 examples "
                                         r"after dataset\.validation_fraction=0\.99 carved a validation split from "
                                         r"it\); lower trainer\.batch_size or dataset\.validation_fraction\."),
    ("trainer.epochs=0", r"trainer\.epochs must be a positive integer, got 0\."),
    ("trainer.epochs=-2", r"trainer\.epochs must be a positive integer, got -2\."),
    ("model.dropout=1.0", r"model\.dropout must be in \[0, 1\), got 1\.0\."),
    ("model.dropout=-0.1", r"model\.dropout must be in \[0, 1\), got -0\.1\."),
    ("model.hidden=[0]", r"model\.hidden must be a list of positive layer widths, got \[0\]\."),
    ("model.activation=relux", r"model\.activation must name an elementwise activation of jax\.nn \(relu, relu6, "
                               r"gelu, .*\), got 'relux'\."),
    ("model.activation=glu", r"model\.activation must name an elementwise activation of jax\.nn .*got 'glu'\."),
    ("model=cnn model.channels=[]", r"model\.channels must be a non-empty list of positive channel counts"),
    ("model=cnn model.batch_norm=null", r"model\.batch_norm must be true or false, got None\."),
    ("model=cnn model.batch_norm=yes", r"model\.batch_norm must be true or false, got 'yes'\."),
    ("model=cnn dataset=diabetes", r"model=cnn cannot be built for dataset=diabetes \(inputs \(10,\)\): .*"
                                   r"model=linear and model=mlp take any input\."),
    ("dataset.num_classes=1", r"dataset\.num_classes must be an integer >= 2 for classification, got 1\."),
    ("dataset.num_classes=5", r"dataset=digits has 10 classes \(its labels 0\.\.9\), not the 5 dataset\.num_classes=5"),
    ("dataset.task=regression", r"the test split of dataset=digits has targets of dtype int64 .* set "
                                r"dataset\.task=classification or pick a regression dataset"),
    ("dataset.noise=0.5", r"dataset\.noise only applies to dataset=synthetic_linear \(it generates that data\); "
                          r"remove it for dataset=digits\."),
    ("dataset.normalize_target=true", r"dataset\.normalize_target only applies to regression targets; "
                                      r"dataset=digits is classification, so remove it \(or set "
                                      r"dataset\.normalize_target=false\)\."),
    # diabetes.yaml sets it, not the user: removing it from the command line leaves it set
    ("dataset=diabetes dataset.task=classification dataset.num_classes=10",
     r"dataset=diabetes is classification, so remove it \(or set dataset\.normalize_target=false\)\."),
    ("dataset=diabetes model=linear dataset.num_classes=3", r"dataset\.num_classes only applies to classification; "
                                                          r"dataset=diabetes is regression, so remove it \(or set "
                                                          r"dataset\.num_classes=null\)\."),
    ("dataset=mnist model=cnn dataset.test_fraction=0.3", r"dataset\.test_fraction only applies to the embedded "
                                                          r"datasets, which ship without a split; dataset=mnist has "
                                                          r"its own test split, so remove it\."),
    ("dataset=synthetic_linear dataset.num_features=0", r"dataset\.num_features must be positive for "
                                                        r"dataset=synthetic_linear, got 0\.$"),
    ("dataset=synthetic_linear dataset.noise=-1", r"dataset\.noise must be >= 0 for dataset=synthetic_linear, "
                                                  r"got -1\.0\.$"),
    ("dataset=synthetic_linear dataset.num_examples=null", r"dataset\.num_examples must be positive for "
                                                           r"dataset=synthetic_linear, got None\.$"),
    ("optimized_metric=test/r2", r"optimized_metric=test/r2 is not a result of a classification run; use one "
                                 r"of \['test/loss', 'test/accuracy'"),
    ("optimized_metric=validation/accuracy", r"optimized_metric=validation/accuracy needs a validation split, which "
                                             r"dataset\.validation_fraction=0\.0 does not carve; set "
                                             r"dataset\.validation_fraction > 0 \(e\.g\. 0\.1\) or use one of "
                                             r"\['test/loss', 'test/accuracy', 'train/loss', 'train/accuracy'\]\."),
    ("optimized_metric=test/count", r"optimized_metric=test/count is the number of examples in the test split, the "
                                    r"same for every run, so it ranks nothing; use one of \['test/loss', "
                                    r"'test/accuracy', 'train/loss', 'train/accuracy'\]\."),
    ("checkpoint.metric=f1", r"checkpoint\.metric=f1 is not a classification metric; use one of \['loss', "
                             r"'accuracy'\] or null\."),
    ("schedule=warmup_cosine", r"schedule\.warmup_steps=50 must be smaller than the run's 6 steps"),
    ("schedule=warmup_cosine schedule.warmup_steps=-5", r"schedule\.warmup_steps must be an integer >= 0, got -5\."),
    ("schedule=warmup_cosine schedule.warmup_steps=null",  # a TypeError in the schedule's length check
     r"schedule\.warmup_steps must be an integer >= 0, got None\."),
    ("seed=-1", r"seed must be an integer in \[0, 2\*\*32\), got seed=-1\."),
    ("trainer.early_stopping.patience=1 trainer.eval_every=7",
     r"trainer\.early_stopping needs periodic evals before the run's end, and trainer\.eval_every=7 gives none in the "
     r"run's 6 steps \(the eval at step 6 is the final one, which it does not count\); lower trainer\.eval_every\."),
    ("trainer.early_stopping.patience=1 trainer.eval_every=6",  # the only eval due is the final one
     r"trainer\.early_stopping needs periodic evals before the run's end, and trainer\.eval_every=6 gives none in the "
     r"run's 6 steps \(the eval at step 6 is the final one, which it does not count\); lower trainer\.eval_every\."),
    ("trainer.early_stopping.patience=1 trainer.eval_every=1 trainer.max_steps=1",  # no eval_every is lower than 1
     r"trainer\.early_stopping needs periodic evals before the run's end, and trainer\.eval_every=1 gives none in the "
     r"run's 1 steps \(the eval at step 1 is the final one, which it does not count\); train more than one step "
     r"\(trainer\.max_steps, trainer\.epochs\) or leave out trainer\.early_stopping\.patience\."),
    ("seed=4294967296", r"seed must be an integer in \[0, 2\*\*32\), got seed=4294967296\."),
    ("model=cnn model.batch_norm=flase", r"model\.batch_norm must be true or false, got 'flase'\."),
    ("optimizer=sgd optimizer.nesterov=maybe", r"optimizer\.nesterov must be true or false, got 'maybe'\."),
    ("+optimizer.b1=abc", r"optimizer\.b1 must be a number, got 'abc'\."),
    ("+model.dropuot=0.1", r"model\.dropuot is not a parameter of zoo\.models\.MLP; remove it or fix its spelling "
                           r"\(its parameters: hidden, activation, dropout\)\."),
    ("schedule=warmup_cosine +schedule.peak_value=0.5", r"schedule\.peak_value is set from optimizer\.learning_rate; "
                                                        r"remove schedule\.peak_value\."),
    ("+schedule.warmup_steps=3",  # Hydra's hint for schedule.warmup_steps=3 on the default schedule=constant
     r"^schedule\.warmup_steps is set, but schedule=constant builds no schedule to take it \(the learning rate stays "
     r"optimizer\.learning_rate\); choose one, e\.g\. schedule=warmup_cosine, or remove schedule\.warmup_steps\.$"),
    ("~optimizer._target_", r"^optimizer\.learning_rate is set, but optimizer has no _target_ to pass it to; choose "
                            r"one, e\.g\. optimizer=adamw\.$"),
    ("schedule=warmup_cosine schedule.end_value=-1", r"schedule\.end_value must be a finite learning rate >= 0, "
                                                     r"got -1\."),
    ("schedule=warmup_cosine +schedule.exponent=-1",  # the decay would rise instead, to inf at the run's end
     r"schedule\.exponent must be a positive finite number, got -1\."),
    ("optimizer.weight_decay=-0.1", r"optimizer\.weight_decay must be >= 0, got -0\.1\."),
    ("optimizer.weight_decay=null", r"optimizer\.weight_decay must be >= 0, got None\."),  # a traceback in the step
    ("+optimizer.b1=null", r"optimizer\.b1 must be in \[0, 1\), got None\."),
    ("optimizer=sgd optimizer.momentum=1.0", r"optimizer\.momentum must be in \[0, 1\), got 1\.0\."),
    ("+optimizer.b1=2", r"optimizer\.b1 must be in \[0, 1\), got 2\."),
    ("+optimizer.b2=1.0", r"optimizer\.b2 must be in \[0, 1\), got 1\.0\."),
    ("+optimizer.b2=-0.1", r"optimizer\.b2 must be in \[0, 1\), got -0\.1\."),
    ("optimized_metric=[test/accuracy]", r"optimized_metric=\[test/accuracy\] lists one objective; write it alone, "
                                         r"optimized_metric=test/accuracy, or list two or more\."),
    ("optimized_metric=[]", r"optimized_metric=\[\] lists no objective; set optimized_metric=null for the default, "
                            r"name one, or list two or more\."),
    ("optimized_metric=[test/accuracy,test/loss,test/accuracy]",
     r"optimized_metric lists test/accuracy more than once; list each objective once\."),
    ("+optimizer.eps=-1", r"optimizer\.eps must be >= 0, got -1\."),
    ("+optimizer.eps=0", r"optimizer\.eps=0 with optimizer\.eps_root=0 divides a zero gradient by zero; set "
                         r"optimizer\.eps > 0 \(e\.g\. 1e-8\) or optimizer\.eps_root > 0\."),
    ("+optimizer.eps_root=-1e-8", r"optimizer\.eps_root must be >= 0, got -1e-08\."),
    ("optimizer=adam optimizer._target_=optax.lion +optimizer.b1=1.5",
     r"optimizer\.b1 must be in \[0, 1\), got 1\.5\."),
    ("optimizer=adam optimizer._target_=optax.rmsprop +optimizer.eps=-1", r"optimizer\.eps must be >= 0, got -1\."),
    ("optimizer._target_=builtins.eval", r"optimizer names _target_='builtins\.eval', which is not allowed; only "
                                         r"targets under zoo\., optax\. can be instantiated\."),
    ("model._target_=os.system", r"model names _target_='os\.system', which is not allowed"),
    ("model._target_=zoo.cli.os.system", r"model names _target_='zoo\.cli\.os\.system', which is not allowed; it "
                                        r"resolves to posix\.system, not a model of the zoo"),
    ("model._target_=zoo.outputs.open_outputs", r"model names _target_='zoo\.outputs\.open_outputs', which is not "
                                               r"allowed; it resolves to zoo\.outputs\.open_outputs, not a model"),
    ("model._target_=zoo.bench.__main__.main", r"model names _target_='zoo\.bench\.__main__\.main', which is not "
                                              r"allowed; it names nothing in the zoo's models or optax\."),
    ("optimizer._target_=optax.tree_utils.functools.partial",
     r"optimizer names _target_='optax\.tree_utils\.functools\.partial', which is not allowed; it resolves to "
     r"functools\.partial"),
    ("checkpoint.metric=count", r"^checkpoint\.metric=count is the number of examples in the split each eval "
                                r"counts, the same at every eval, so it ranks no checkpoint; use one of \['loss', "
                                r"'accuracy'\] or null\.$"),
    ("checkpoint.metric=count checkpoint.mode=max", r"^checkpoint\.metric=count is the number of examples"),
    ("checkpoint.mode=min", r"^checkpoint\.mode=min would keep the lowest accuracy \(checkpoint\.metric=null: the "
                            r"task's\) as the best checkpoint, and early stopping would wait for it to fall; set "
                            r"checkpoint\.mode=max or leave it null \(it follows the metric\)\.$"),
    ("dataset=diabetes checkpoint.metric=mse checkpoint.mode=max",
     r"^checkpoint\.mode=max would keep the highest mse as the best checkpoint, and early stopping would wait for it "
     r"to rise; set checkpoint\.mode=min or leave it null \(it follows the metric\)\.$"),
    ("parallel.cpu_devices=1000", r"parallel\.cpu_devices must be between 1 and 512 \(or null\), got 1000\."),
    ("parallel.cpu_devices=16", r"parallel\.cpu_devices=16 but this process already started JAX with 8 CPU "
                                r"device\(s\); lower parallel\.cpu_devices or start a fresh process \(a multirun's "
                                r"jobs share one: list the largest parallel\.cpu_devices first\)\."),
    ("parallel=pmap parallel.fsdp=true",
     r"parallel\.fsdp=true shards parameters over a mesh, which parallel\.mode=pmap has not; use parallel=sharded "
     r"or parallel\.fsdp=false\."),
    ("parallel=pmap parallel.cpu_devices=8 trainer.batch_size=100",
     r"trainer\.batch_size=100 does not split evenly across 8 devices; use 96 or 104\."),
    ("distributed.num_processes=2 distributed.process_id=1",  # ignored, process 1 trained alone and wrote results
     r"^distributed\.num_processes only applies to distributed=explicit, and without it this command runs one "
     r"process alone; add distributed=explicit, or remove distributed\.num_processes\.$"),
    ("distributed=auto distributed.process_id=1",  # auto reads the processes from the cluster: ignored there too
     r"^distributed\.process_id only applies to distributed=explicit; distributed=auto reads the processes from the "
     r"environment \(SLURM, Open MPI, \.\.\.\) and ignores it: use distributed=explicit, or remove "
     r"distributed\.process_id\.$"),
    ("parallel=sharded distributed=explicit distributed.coordinator_address=localhost:12355 "
     "distributed.num_processes=2 distributed.process_id=1 distributed.timeout_s=0",  # peers awaited without end
     r"^distributed\.timeout_s must be a positive number of seconds, got 0\.$"),
    ("distributed=auto distributed.timeout_s=-1",
     r"^distributed\.timeout_s must be a positive number of seconds, got -1\.$"),
    ("parallel=sharded distributed=explicit distributed.coordinator_address=localhost:12355 "
     "distributed.num_processes=2 distributed.process_id=1 distributed.lost_after_s=1",  # a busy peer taken for lost
     r"^distributed\.lost_after_s must be at least 5 seconds \(each process writes its heartbeat once a second\), "
     r"got 1\.0\.$"),
    ("distributed=auto distributed.lost_after_s=nan",
     r"^distributed\.lost_after_s must be at least 5 seconds \(each process writes its heartbeat once a second\), "
     r"got nan\.$"),
    ("parallel=pmap distributed=explicit distributed.coordinator_address=localhost:12355 "
     "distributed.num_processes=2 distributed.process_id=0",  # was refused only once every peer had joined
     r"^parallel\.mode=pmap runs in one process; distributed\.num_processes=2 needs parallel=sharded\.$"),
    ("distributed=explicit distributed.coordinator_address=localhost:12355 distributed.num_processes=2 "
     "distributed.process_id=1",
     r"^parallel\.mode=none runs in one process; distributed\.num_processes=2 needs parallel=sharded\.$"),
    ("parallel=sharded distributed=explicit distributed.coordinator_address=nosuchhost.invalid:1234 "
     "distributed.num_processes=2 distributed.process_id=0",  # aborted from C++ once distributed.timeout_s was out
     r"^distributed\.coordinator_address=nosuchhost\.invalid:1234 names a host that cannot be resolved \([^)]+\); "
     r"set it to process 0's host:port\.$"),
    ("parallel=sharded distributed=explicit distributed.coordinator_address=localhost distributed.num_processes=2 "
     "distributed.process_id=0",  # was "could not start ... (list index out of range)"
     r"^distributed\.coordinator_address=localhost is not host:port; set it to process 0's host and a free port, "
     r"e\.g\. distributed\.coordinator_address=localhost:12355\.$"),
    ("parallel=sharded distributed=explicit distributed.coordinator_address=localhost:http "
     "distributed.num_processes=2 distributed.process_id=1",
     r"^distributed\.coordinator_address=localhost:http is not host:port; set it to process 0's host and a free "
     r"port, e\.g\. distributed\.coordinator_address=localhost:12355\.$"),
    ("trainer.accumulate=0", r"trainer\.accumulate must be a positive number of micro-batches per update, got 0\."),
    ("trainer.accumulate=4", r"trainer\.accumulate=4 does not divide the run's 6 steps, so its last micro-batches "
                             r"would never be applied; set trainer\.max_steps to 4 or 8\."),
    ("trainer.accumulate=100", r"trainer\.accumulate=100 does not divide the run's 6 steps, so its last "
                               r"micro-batches would never be applied; lower trainer\.accumulate to a divisor of 6, "
                               r"or set trainer\.max_steps to 100 with trainer\.epochs raised to 2\."),
    ("trainer.accumulate=7 trainer.max_steps=100",  # an 89-step epoch: 91 steps need a second one
     r"trainer\.accumulate=7 does not divide the run's 89 steps, so its last micro-batches would never be applied; "
     r"set trainer\.max_steps to 84, or to 91 with trainer\.epochs raised to 2\."),
    ("trainer.ema_decay=1.0", r"trainer\.ema_decay must be in \[0, 1\) or null, got 1\.0\."),
    ("trainer.ema_decay=-0.5", r"trainer\.ema_decay must be in \[0, 1\) or null, got -0\.5\."),
    ("trainer.early_stopping.patience=0",
     r"trainer\.early_stopping\.patience must be a positive number of evals or null, got 0\."),
    ("trainer.early_stopping.patience=3 trainer.early_stopping.min_delta=-0.1",
     r"trainer\.early_stopping\.min_delta must be >= 0, got -0\.1\."),
    ("trainer.early_stopping.patience=3 trainer.eval_every=0",
     r"trainer\.early_stopping counts periodic evals; set trainer\.eval_every to a positive number of steps\."),
    ("trainer.early_stopping.patience=3 checkpoint.enabled=false",
     r"trainer\.early_stopping reports the best checkpoint; set checkpoint\.enabled=true and "
     r"checkpoint\.keep_best >= 1\."),
]


@pytest.mark.parametrize("overrides,message", BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_bad_values_are_one_sentence_naming_the_setting(make_cfg, tmp_path, overrides, message):
    with pytest.raises(UserError, match=message) as err:
        train(make_cfg("debug=smoke", *overrides.split()))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()  # refused before the run wrote anything


CLUSTERS = {  # what distributed=auto reads the processes from, as srun and mpirun set it
    "slurm": {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2", "SLURM_PROCID": "0",
              "SLURM_LOCALID": "0"},
    "openmpi": {"OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://127.0.0.1:34911", "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
}


@pytest.mark.parametrize("cluster,variable", [("slurm", "SLURM_NTASKS"), ("openmpi", "OMPI_COMM_WORLD_SIZE")])
@pytest.mark.parametrize("parallel", ["pmap", "none"])
def test_distributed_auto_with_several_processes_needs_sharded_before_joining(make_cfg, tmp_path, monkeypatch,
                                                                              cluster, variable, parallel):
    """Refused only once every process had joined: one whose peers never came waited out distributed.timeout_s."""
    for name, value in CLUSTERS[cluster].items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=rf"^parallel\.mode={parallel} runs in one process; distributed=auto joins "
                                        rf"the 2 processes {variable}=2 names, which need parallel=sharded\.$"):
        train(make_cfg("debug=smoke", f"parallel={parallel}", "distributed=auto", "distributed.timeout_s=2"))
    assert not (tmp_path / "run").exists()


def test_distributed_auto_outside_a_cluster_says_so_and_names_distributed_explicit(data_dir, tmp_path):
    """It said to check distributed.coordinator_address, num_processes and process_id, which distributed=auto
    refuses: it reads the processes from a cluster's environment, and there was none."""
    env = {k: v for k, v in subprocess_env(data_dir).items() if not k.startswith(("SLURM_", "OMPI_"))}
    done = commands.run([sys.executable, "train.py", "debug=smoke", "parallel=sharded", "distributed=auto",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=180)
    assert_one_sentence(done, 2, "error: jax.distributed could not start with distributed=auto (")
    assert re.search(r"\); distributed=auto reads the processes from a cluster's environment \(SLURM, Open MPI, "
                     r"Kubernetes, TPU pods\) and found none here; run the command inside a cluster job, or use "
                     r"distributed=explicit with distributed\.coordinator_address, distributed\.num_processes and "
                     r"distributed\.process_id\.$", done.stderr.strip()), done.stderr


FOLLOWED_ADVICE = [  # (refused overrides, what the message advises), each trained in a debug=smoke run
    ("trainer.accumulate=100", "trainer.max_steps=100 trainer.epochs=2"),
    ("trainer.accumulate=7 trainer.max_steps=100", "trainer.max_steps=84"),
    ("trainer.accumulate=7 trainer.max_steps=100", "trainer.max_steps=91 trainer.epochs=2"),
    ("optimized_metric=validation/accuracy", "dataset.validation_fraction=0.1"),
    ("+optimizer.eps=0", "+optimizer.eps_root=1e-8"),
    ("trainer.early_stopping.patience=1 trainer.eval_every=1 trainer.max_steps=1", "trainer.max_steps=2"),
]


def test_eps_zero_is_allowed_where_nothing_divides_by_it_alone(make_cfg):
    """adagrad adds an initial accumulator to what it divides by: eps=0 trains, to a finite loss."""
    results = train(make_cfg("debug=smoke", "optimizer=sgd", "optimizer._target_=optax.adagrad", "~optimizer.momentum",
                             "~optimizer.nesterov", "+optimizer.eps=0", "checkpoint.enabled=false"))
    assert results["steps"] == 6 and np.isfinite(results["train"]["loss"]) and np.isfinite(results["test"]["loss"])


@pytest.mark.parametrize("overrides,advice", FOLLOWED_ADVICE, ids=[f"{o} -> {a}" for o, a in FOLLOWED_ADVICE])
def test_following_the_advice_trains(make_cfg, overrides, advice):
    """The messages of BAD_VALUES for these overrides say what to set; set so, the run trains."""
    with pytest.raises(UserError):
        train(make_cfg("debug=smoke", *overrides.split()))
    steps = dict(a.split("=") for a in advice.split()).get("trainer.max_steps", "6")
    assert train(make_cfg("debug=smoke", *overrides.split(), *advice.split()))["steps"] == int(steps)


# --- Data ------------------------------------------------------------------------------------------------------

def test_catalog_dataset_offline_fails_fast_and_says_what_to_do(make_cfg, tmp_path, monkeypatch):
    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    cfg = make_cfg("dataset=mnist", "model=cnn", "debug=smoke", f"paths.data_dir={tmp_path / 'empty'}")
    with pytest.raises(UserError, match=r"dataset=mnist is not prepared in paths\.data_dir=.* could not be downloaded "
                                        r"\(ConnectionError: no network: .*copy DIR/mnist to \S+/empty/mnist, or"):
        train(cfg)  # without the DNS probe TFDS retries for minutes before failing
    versioned = make_cfg("dataset.embedded=false", "dataset.tfds_name=mnist:3.0.1", "debug=smoke",
                         f"paths.data_dir={tmp_path / 'empty'}")
    with pytest.raises(UserError, match=r"^dataset=digits \(dataset\.tfds_name=mnist:3\.0\.1\) is not prepared in "
                                        r".*copy DIR/mnist/3\.0\.1 to \S+/empty/mnist/3\.0\.1, or"):
        train(versioned)  # named as set, and its directory where TFDS writes it


def test_unwritable_data_dir(make_cfg, tmp_path):
    (tmp_path / "a_file").write_text("")  # a file where a directory must go fails for root too
    with pytest.raises(UserError, match=r"paths\.data_dir=.*a_file/sub is not writable \(Not a directory\); set "
                                        r"paths\.data_dir to a directory you can write\."):
        train(make_cfg("debug=smoke", f"paths.data_dir={tmp_path / 'a_file' / 'sub'}"))


@pytest.fixture
def prepared_copy(make_cfg, data_dir, tmp_path):
    """A private copy of the prepared digits dataset and the path of its train records."""
    load_dataset(make_cfg().dataset, data_dir)  # prepared once per session
    shutil.copytree(pathlib.Path(data_dir) / "zoo_digits", tmp_path / "data" / "zoo_digits")
    return tmp_path / "data", next((tmp_path / "data").rglob("zoo_digits-train.array_record*"))


@pytest.mark.parametrize("damage", ["truncate", "empty", "delete"])
def test_damaged_prepared_dataset_names_the_directory_to_delete(make_cfg, prepared_copy, damage):
    data, records = prepared_copy
    if damage == "delete":
        records.unlink()
    else:
        records.write_bytes(records.read_bytes()[:records.stat().st_size // 2] if damage == "truncate" else b"")
    cfg = make_cfg("debug=smoke", f"paths.data_dir={data}")
    with pytest.raises(UserError, match=r"the prepared dataset=digits in .*/zoo_digits/test_fraction0\.2/1\.0\.0 is "
                                        r"damaged \(.*\); delete that directory and the next run prepares"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    shutil.rmtree(records.parent)  # what the message says to do
    assert len(load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]) == 1438


def _interrupt_after(n):
    original = embedded._ArrayBuilder._generate_examples

    def generate(self, x, y, indices):
        for i, example in enumerate(original(self, x, y, indices)):
            if i == n:
                raise KeyboardInterrupt  # what Ctrl-C raises in the main thread, halfway through a split
            yield example

    return generate


def test_ctrl_c_while_preparing_keeps_nothing_and_the_next_run_prepares(make_cfg, tmp_path, monkeypatch):
    cfg = make_cfg("debug=smoke", f"paths.data_dir={tmp_path / 'data'}")
    with monkeypatch.context() as patch:
        patch.setattr(embedded._ArrayBuilder, "_generate_examples", _interrupt_after(100))
        with pytest.raises(Interrupted, match=r"interrupted while preparing dataset=digits in paths\.data_dir=.*; "
                                              r"nothing half-written was kept and the next run prepares it again\.") \
                as err:
            load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert err.value.exit_code == 130
    left = [p.name for p in (tmp_path / "data").rglob("*")]
    assert "dataset_info.json" not in left and not [n for n in left if n.startswith("incomplete")], left
    assert len(load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]) == 1438


CONTRACT = [
    ("nan inputs", "classification", lambda x, y: (np.where(x > 0.5, np.nan, x), y),
     r"the test split of dataset=d has non-finite or non-float inputs"),
    ("other shape", "classification", lambda x, y: (x[:, :3], y), r"the test split .* inputs of shape \(3,\) but "
                                                                   r"train has \(4,\)"),
    ("float labels", "classification", lambda x, y: (x, y + 0.5), r"labels of the test split must be integers"),
    ("empty split", "classification", lambda x, y: (x[:0], y[:0]), r"the test split .* has 0 inputs and 0 targets"),
    ("class ids as targets", "regression", lambda x, y: (x, y), r"targets of dtype int64 and shape \(\), not finite "
                                                               r"float rows for regression"),
]


@pytest.mark.parametrize("name,task,damage,message", CONTRACT, ids=[c[0] for c in CONTRACT])
def test_data_contract_is_checked_before_compiling(name, task, damage, message):
    from omegaconf import OmegaConf

    rng = np.random.default_rng(0)
    x, y = rng.random((20, 4)).astype(np.float32), rng.integers(0, 3, 20)
    cfg = OmegaConf.create({"name": "d", "task": task, "num_classes": 3, "validation_fraction": 0.0,
                            "normalize": "none", "normalize_target": False})
    with pytest.raises(UserError, match=message):
        build_dataset(cfg, {"train": (x, y), "test": damage(x, y)})


# --- Run directories, resume -------------------------------------------------------------------------------------

def test_unwritable_output_dir(make_cfg, tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(UserError, match=r"cannot create checkpoints in .*a_file/out/checkpoints \(Not a directory\); "
                                        r"choose a writable hydra\.run\.dir"):
        train(make_cfg("debug=smoke", f"paths.output_dir={tmp_path / 'a_file' / 'out'}"))


def test_unwritable_hydra_run_dir_is_refused_before_hydra_creates_it(tmp_path, capsys):
    from omegaconf import OmegaConf

    (tmp_path / "a_file").write_text("")
    config = OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path / "a_file" / "run")}}})
    with pytest.raises(SystemExit) as exit_:
        RunDirCheck().on_run_start(config)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"error: hydra.run.dir={tmp_path}/a_file/run is not writable (Not a directory); "
                                       "set hydra.run.dir to a directory you can write.\n")
    config.hydra.run.dir = str(tmp_path / "a_file")  # it said 'not writable (File exists)'
    with pytest.raises(SystemExit):
        RunDirCheck().on_run_start(config)
    assert capsys.readouterr().err == (f"error: hydra.run.dir={tmp_path}/a_file is not writable (it is a file); set "
                                       "hydra.run.dir to a directory you can write.\n")


def test_resume_with_a_changed_state_shape_names_the_settings(make_cfg):
    base = ["debug=smoke", "optimizer=sgd", "model.hidden=[16]"]
    train(make_cfg(*base))
    with pytest.raises(UserError, match=r"was trained with other settings: model\.hidden \(\[16\] -> \[32\]\); restore "
                                        r"those settings or start in a new hydra\.run\.dir\."):
        train(make_cfg(*base, "model.hidden=[32]"))
    with pytest.raises(UserError, match=r"does not fit this run's model and optimizer state; it was trained with "
                                        r"optimizer\.momentum \(0\.9 -> None\)"):
        train(make_cfg(*base, "optimizer.momentum=null", "trainer.max_steps=8"))
    assert train(make_cfg(*base, "trainer.max_steps=8"))["start_step"] == 6  # nothing was lost


def test_resume_over_damaged_checkpoints_says_damaged_not_different(make_cfg, tmp_path):
    train(make_cfg("debug=smoke", "model.hidden=[16]", "trainer.checkpoint_every=2"))
    for blob in (tmp_path / "run" / "checkpoints").rglob("*"):
        if blob.is_file() and blob.parent.name == "d":
            blob.write_bytes(b"junk")
    # a changed learning rate is allowed on resume: the message says damaged, not "other settings"
    with pytest.raises(UserError, match=r"no checkpoint in .*/run/checkpoints can be restored \(tried steps "
                                        r"\[6, 4, 2\]\); start in a new hydra\.run\.dir\.$"):
        train(make_cfg("debug=smoke", "model.hidden=[16]", "optimizer.learning_rate=1e-4", "trainer.max_steps=8"))


def test_resume_from_another_runs_checkpoints_under_other_settings_says_to_leave_out_trainer_resume(make_cfg,
                                                                                                    tmp_path):
    """A new hydra.run.dir with the same trainer.resume meets the same checkpoint: the way out is the setting."""
    train(make_cfg("debug=smoke", "optimizer=sgd", "model.hidden=[16]", "trainer.checkpoint_every=2", out="source"))
    source = tmp_path / "source" / "checkpoints"
    way_out = r"restore those settings or leave out trainer\.resume to start afresh\.$"
    with pytest.raises(UserError, match=rf"the checkpoint in {source} was trained with other settings: model\.hidden "
                                        rf"\(\[16\] -> \[32\]\); {way_out}"):
        train(make_cfg("debug=smoke", "optimizer=sgd", "model.hidden=[32]", f"trainer.resume={source}", out="a"))
    with pytest.raises(UserError, match=rf"does not fit this run's model and optimizer state; it was trained with "
                                        rf"optimizer\.momentum \(0\.9 -> None\): {way_out}"):
        train(make_cfg("debug=smoke", "optimizer=sgd", "model.hidden=[16]", "optimizer.momentum=null",
                       f"trainer.resume={source}", out="b"))
    for blob in source.rglob("*"):
        if blob.is_file() and blob.parent.name == "d":
            blob.write_bytes(b"junk")
    with pytest.raises(UserError, match=rf"no checkpoint in {source} can be restored \(tried steps \[6, 4, 2\]\); "
                                        r"leave out trainer\.resume to start afresh\.$"):
        train(make_cfg("debug=smoke", "optimizer=sgd", "model.hidden=[16]", f"trainer.resume={source}", out="c"))


def test_resume_from_a_path_that_is_not_a_checkpoint_dir(make_cfg, tmp_path):
    with pytest.raises(UserError, match=r"trainer\.resume=.*nowhere is not a checkpoint directory; use auto, never"):
        train(make_cfg("debug=smoke", f"trainer.resume={tmp_path / 'nowhere'}"))
    train(make_cfg("debug=smoke", out="earlier"))
    with pytest.raises(UserError, match=r"trainer\.resume=.*/earlier is a run directory; pass its checkpoints: "
                                        r"trainer\.resume=.*/earlier/checkpoints\."):
        train(make_cfg("debug=smoke", f"trainer.resume={tmp_path / 'earlier'}"))
    refused = tmp_path / "refused"  # a run refused before its first step keeps its (empty) checkpoints/
    (refused / "checkpoints").mkdir(parents=True)
    (refused / ".hydra").mkdir()
    with pytest.raises(UserError, match=rf"^trainer\.resume={refused} holds no checkpoint; pass the checkpoints/ "):
        train(make_cfg("debug=smoke", f"trainer.resume={refused}"))
    step = tmp_path / "earlier" / "checkpoints" / "6"
    with pytest.raises(UserError, match=rf"trainer\.resume={step} is one checkpoint step; pass the checkpoints/ "
                                        rf"directory that holds it: trainer\.resume={step.parent}\."):
        train(make_cfg("debug=smoke", f"trainer.resume={step}", out="b"))
    for empty in (tmp_path / "empty", tmp_path / "sweep" / "0"):  # a job folder is named by a number too
        empty.mkdir(parents=True)
        with pytest.raises(UserError, match=rf"trainer\.resume={empty} holds no checkpoint; pass the checkpoints/"):
            train(make_cfg("debug=smoke", f"trainer.resume={empty}", out="c"))
    own = tmp_path / "d" / "checkpoints"  # created by the run before it looks for one to resume
    with pytest.raises(UserError, match=r"trainer\.resume=.*/d/checkpoints is this run's own checkpoints/ directory, "
                                        r"which holds none yet"):
        train(make_cfg("debug=smoke", f"trainer.resume={own}", out="d"))
    # its own run directory: it said to pass its checkpoints/, which the line above then refused
    with pytest.raises(UserError, match=r"^trainer\.resume=.*/d is this run's own directory, which holds no "
                                        r"checkpoint yet; pass the checkpoints/ directory of an earlier run, or use "
                                        r"auto or never\.$"):
        train(make_cfg("debug=smoke", f"trainer.resume={own.parent}", out="d"))


def test_resume_from_a_folder_of_runs_names_its_runs_checkpoints_by_name(make_cfg, tmp_path):
    """trainer.resume=outputs (runs below it) said only to pass an earlier run's checkpoints/, then named the newest
    by modification time, which a copy (cp -r) or a touch of an older run makes the newest. Not the run being started
    there, whose checkpoints/ is newer still."""
    outputs = tmp_path / "outputs"
    older, newer = outputs / "2026-12-04" / "09-00-00", outputs / "2026-12-05" / "13-01-02"
    train(make_cfg("debug=smoke", out="outputs/2026-12-05/13-01-02"))
    shutil.copytree(newer, older)  # the older one touched last
    with pytest.raises(UserError, match=rf"^trainer\.resume={outputs} holds no checkpoint; pass the checkpoints/ "
                                        rf"directory of an earlier run, e\.g\. one of trainer\.resume="
                                        rf"{older / 'checkpoints'} or trainer\.resume={newer / 'checkpoints'}, or use "
                                        r"auto or never\.$"):
        train(make_cfg("debug=smoke", f"trainer.resume={outputs}", out="outputs/2026-12-05/14-00-00"))
    with pytest.raises(UserError, match=rf"^trainer\.resume={outputs / '2026-12-05'} holds no checkpoint; pass the "
                                        rf"checkpoints/ directory of an earlier run, e\.g\. trainer\.resume="
                                        rf"{newer / 'checkpoints'}, or use auto or never\.$"):
        train(make_cfg("debug=smoke", f"trainer.resume={outputs / '2026-12-05'}", out="outputs/2026-12-05/14-00-00"))


def test_resume_from_a_folder_inside_a_run_names_its_checkpoints(make_cfg, tmp_path):
    """trainer.resume=RUN/.hydra (or RUN/export, or a folder inside a step) said only that it held no checkpoint, as
    for an unrelated folder; eval.py's run_dir names the run such a folder is in."""
    run = tmp_path / "earlier"
    train(make_cfg("debug=smoke", out="earlier"))
    for folder in (".hydra", "export"):  # as a command run from the shell writes them
        (run / folder).mkdir(exist_ok=True)
    inside_a_step = next(p for p in (run / "checkpoints" / "6").iterdir() if p.is_dir())
    for folder in (run / ".hydra", run / "export", inside_a_step):
        with pytest.raises(UserError, match=rf"^trainer\.resume={folder} is a folder inside a run; pass its "
                                            rf"checkpoints: trainer\.resume={run / 'checkpoints'}\.$"):
            train(make_cfg("debug=smoke", f"trainer.resume={folder}", out="b"))


def test_resume_from_a_copy_of_an_export_names_its_runs_checkpoints(make_cfg, tmp_path):
    """A copy of a run's export/ elsewhere said only that it held no checkpoint; eval.py's run_dir names the run its
    signature.json was exported from."""
    run, copy = tmp_path / "earlier", tmp_path / "shipped"  # its signature.json names the run
    (run / "checkpoints" / "6").mkdir(parents=True)
    (run / "results.json").write_text("{}")
    copy.mkdir()
    (copy / "model.jax").write_bytes(b"")
    (copy / "signature.json").write_text(json.dumps({"config": {"paths": {"output_dir": str(run)}}}))
    with pytest.raises(UserError, match=rf"^trainer\.resume={copy} is an export's folder \(model\.jax, "
                                        rf"signature\.json\), not a checkpoint directory; pass the checkpoints of the "
                                        rf"run it was exported from, trainer\.resume={run / 'checkpoints'}\.$"):
        train(make_cfg("debug=smoke", f"trainer.resume={copy}", out="b"))


def test_resume_from_a_multiruns_directory_names_one_of_its_jobs_checkpoints(make_cfg, tmp_path):
    """A sweep's job folders (0, 1, ...) look like checkpoint steps: the sweep is named as such, not as a step whose
    metadata is unreadable."""
    sweep = tmp_path / "sweep"
    train(make_cfg("debug=smoke", out="sweep/0"))
    (sweep / "0" / ".hydra").mkdir()
    (sweep / "0" / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    with pytest.raises(UserError, match=rf"^trainer\.resume={sweep} is a multirun's directory; pass the checkpoints/ "
                                        rf"of one of its jobs, e.g\. trainer\.resume={sweep / '0' / 'checkpoints'} "
                                        r"\(its summary\.md ranks them\)\.$"):
        train(make_cfg("debug=smoke", f"trainer.resume={sweep}", "trainer.max_steps=8", out="b"))


@pytest.mark.parametrize("embedded, message", [
    ("true", r"dataset\.tfds_name=no_such_ds is not an embedded dataset \(zoo_diabetes, zoo_digits, "
             r"zoo_synthetic_linear\); set dataset\.embedded=false"),
    ("false", r"dataset\.tfds_name=no_such_ds is neither prepared in paths\.data_dir=.* nor a TFDS catalog dataset; "
              r"check its spelling")])
def test_an_unknown_dataset_name_is_one_sentence(make_cfg, embedded, message):
    with pytest.raises(UserError, match=message):
        train(make_cfg("debug=smoke", "dataset.tfds_name=no_such_ds", f"dataset.embedded={embedded}"))


@pytest.mark.parametrize("dataset", ["digits", "diabetes", "synthetic_linear"])
def test_an_embedded_dataset_read_as_a_catalog_one_names_dataset_embedded(make_cfg, dataset):
    """It was told to download zoo_digits on a machine with internet and TensorFlow, which no catalog holds, or to
    pick an embedded dataset: the one it had."""
    name = f"zoo_{dataset}"
    with pytest.raises(UserError, match=rf"^dataset={dataset} \(dataset\.tfds_name={name}\) cannot be downloaded: "
                                        rf"{name} is one of the zoo's embedded datasets, which are made on this "
                                        r"machine, never downloaded; set dataset\.embedded=true\.$"):
        train(make_cfg("debug=smoke", f"dataset={dataset}", "model=linear", "dataset.embedded=false"))


@pytest.mark.parametrize("dataset", ["digits", "synthetic_linear"])
@pytest.mark.parametrize("embedded", ["true", "false"])
def test_an_embedded_dataset_pinned_to_a_version_is_told_its_plain_name(make_cfg, embedded, dataset):
    """embedded=true said to set dataset.embedded=false, which then said to set dataset.embedded=true; synthetic_linear
    was told to remove its dataset.num_examples, which only it takes."""
    name = f"zoo_{dataset}"
    with pytest.raises(UserError, match=rf"dataset\.tfds_name={name}:1\.0\.0.* set dataset\.tfds_name={name}"
                                        r"( and dataset\.embedded=true)?\.$"):
        train(make_cfg("debug=smoke", "model=linear", f"dataset={dataset}", f"dataset.tfds_name={name}:1.0.0",
                       f"dataset.embedded={embedded}"))


def test_a_compilation_cache_dir_that_cannot_be_written_is_named_in_a_warning(make_cfg, tmp_path, caplog):
    """JAX warned 'Error reading persistent compilation cache entry ... File exists' at the programs it could not
    cache, naming neither the setting nor what to do; the run trains uncached and says so once."""
    in_the_way = tmp_path / "a_file"
    in_the_way.write_text("")
    results = train(make_cfg("debug=smoke", f"paths.compilation_cache_dir={in_the_way}"))
    assert results["test"]["count"] == 359
    assert (f"paths.compilation_cache_dir={in_the_way} cannot be written (it is a file), so compiled programs are not "
            "cached; set it to a writable directory, or to null to turn the cache off") in caplog.text


def test_a_finished_run_without_checkpoints_is_not_overwritten(make_cfg, tmp_path):
    train(make_cfg("debug=smoke", "checkpoint.enabled=false"))
    results = (tmp_path / "run" / "results.json").read_text()
    with pytest.raises(UserError, match=r"hydra\.run\.dir=.*/run already holds a finished run and "
                                        r"checkpoint\.enabled=false; choose a new hydra\.run\.dir\."):
        train(make_cfg("debug=smoke", "checkpoint.enabled=false"))
    assert (tmp_path / "run" / "results.json").read_text() == results


def test_an_unfinished_run_is_not_started_over_without_checkpointing(make_cfg, tmp_path):
    train(make_cfg("debug=smoke"))
    (tmp_path / "run" / "results.json").unlink()  # stopped before its end: checkpoints, no results
    logged = (tmp_path / "run" / "metrics.jsonl").read_text()
    with pytest.raises(UserError, match=r"hydra\.run\.dir=.*/run holds the checkpoints of an unfinished run, which "
                                        r"checkpoint\.enabled=false would start over; set checkpoint\.enabled=true"):
        train(make_cfg("debug=smoke", "checkpoint.enabled=false"))
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == logged


def test_a_finished_run_whose_checkpoints_are_gone_is_not_trained_again(make_cfg, tmp_path):
    train(make_cfg("debug=smoke"))
    results = (tmp_path / "run" / "results.json").read_text()
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    with pytest.raises(UserError, match=r"hydra\.run\.dir=.*/run already holds a finished run \(results\.json\) but "
                                        r"no checkpoint to continue from; choose a new hydra\.run\.dir\."):
        train(make_cfg("debug=smoke"))
    assert (tmp_path / "run" / "results.json").read_text() == results


def test_a_finished_run_run_again_reports_its_results_and_writes_nothing(make_cfg, tmp_path):
    first = train(make_cfg("debug=smoke"))
    files = {name: (tmp_path / "run" / name).read_bytes() for name in ("results.json", "metrics.jsonl")}
    again = train(make_cfg("debug=smoke", "optimized_metric=test/loss", "logger.tensorboard=false"))
    assert again["test"] == first["test"] and again["objective"] == first["test"]["loss"]  # this command's aim
    assert {name: (tmp_path / "run" / name).read_bytes() for name in files} == files


def test_a_run_with_a_schedule_continues_only_under_the_length_it_was_scheduled_for(make_cfg, tmp_path):
    """The schedule's curve spans the run: steps 4-6 of a 6-step cosine would follow a curve that steps 0-4,
    scheduled over 4 steps, did not. With a constant rate a longer run continues (test_checkpoint.py)."""
    scheduled = ["debug=smoke", "schedule=warmup_cosine", "schedule.warmup_steps=1"]
    first = train(make_cfg(*scheduled, "trainer.max_steps=4"))
    saved = (tmp_path / "run" / "results.json").read_text()
    for other_length in (["trainer.max_steps=6"], ["trainer.max_steps=8", "trainer.batch_size=8"]):
        with pytest.raises(UserError, match=r"follow a learning-rate schedule over 4 steps, and trainer\.epochs, "
                                            r"trainer\.max_steps and trainer\.batch_size now give [68]; restore them"):
            train(make_cfg(*scheduled, *other_length))
    assert (tmp_path / "run" / "results.json").read_text() == saved
    same_length = train(make_cfg(*scheduled, "trainer.max_steps=4", "trainer.epochs=2"))  # still 4 steps
    assert same_length["test"] == first["test"]


@pytest.mark.parametrize("changed", ["optimizer.learning_rate=0.01", "seed=5", "trainer.batch_size=8"])
def test_a_finished_run_asked_for_other_settings_is_refused(make_cfg, tmp_path, changed):
    train(make_cfg("debug=smoke"))
    results = (tmp_path / "run" / "results.json").read_text()
    key = changed.partition("=")[0].replace(".", r"\.")
    with pytest.raises(UserError, match=rf"hydra\.run\.dir=.*/run already holds a finished run trained with other "
                                        rf"settings: {key} \(.*\); choose a new hydra\.run\.dir\.$"):
        train(make_cfg("debug=smoke", changed))
    assert (tmp_path / "run" / "results.json").read_text() == results
    with pytest.raises(UserError, match=r"hydra\.run\.dir=.*/run holds a run at step 6, past the 4 steps "
                                        r"trainer\.epochs, trainer\.max_steps and trainer\.batch_size now give"):
        train(make_cfg("debug=smoke", "trainer.max_steps=4"))
    source = tmp_path / "run" / "checkpoints"  # the same, taken as the start of a new run: the source is named
    with pytest.raises(UserError, match=rf"trainer\.resume={source} holds a run at step 6, past the 4 steps "
                                        r"trainer\.epochs, trainer\.max_steps and trainer\.batch_size now give; "
                                        r"restore them or resume from an earlier run\.$"):
        train(make_cfg("debug=smoke", "trainer.max_steps=4", f"trainer.resume={source}", out="new"))


def test_a_run_past_the_length_another_batch_size_gives_names_the_batch_size(make_cfg, tmp_path):
    """An epoch-long run is shorter in steps at a larger batch: the sentence names the setting that changed it,
    not only trainer.epochs and trainer.max_steps, which the command left as they were."""
    train(make_cfg("debug=smoke", "trainer.max_steps=null", "trainer.batch_size=64"))  # 22 steps of 1438 examples
    results = (tmp_path / "run" / "results.json").read_text()
    with pytest.raises(UserError, match=r"holds a run at step 22, past the 11 steps trainer\.epochs, "
                                        r"trainer\.max_steps and trainer\.batch_size now give; restore them"):
        train(make_cfg("debug=smoke", "trainer.max_steps=null", "trainer.batch_size=128"))
    assert (tmp_path / "run" / "results.json").read_text() == results


def test_a_finished_run_that_only_another_batch_size_makes_longer_is_refused(make_cfg, tmp_path):
    """At half the batch an epoch-long run is twice as many steps: the plain command run again in the directory of
    one trained at a larger batch went on with a warning, replacing its results and its newest checkpoints. Asking
    for more epochs (or steps) lengthens a finished run, and then may change what the rest trains with."""
    epoch = ["debug=smoke", "trainer.max_steps=null"]
    train(make_cfg(*epoch, "trainer.batch_size=128"))  # 11 steps of 1438 examples
    run = tmp_path / "run"
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and "tensorboard" not in p.parts}
    with pytest.raises(UserError, match=r"hydra\.run\.dir=.*/run already holds a finished run trained with other "
                                        r"settings: trainer\.batch_size \(128 -> 64\); choose a new hydra\.run\.dir"):
        train(make_cfg(*epoch, "trainer.batch_size=64"))
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and "tensorboard" not in p.parts} \
        == before
    assert train(make_cfg(*epoch, "trainer.batch_size=64", "trainer.epochs=2"))["steps"] == 44  # 2 epochs of 22


def test_a_finished_run_missing_its_results_is_finished_only_with_its_own_settings(make_cfg, tmp_path):
    """Stopped between its last checkpoint and results.json: finishing it under other settings would report
    results under settings it was not trained with."""
    first = train(make_cfg("debug=smoke"))
    (tmp_path / "run" / "results.json").unlink()
    with pytest.raises(UserError, match=r"hydra\.run\.dir=.*/run already holds a finished run trained with other "
                                        r"settings: optimizer\.learning_rate \(0\.001 -> 0\.01\); choose a new "):
        train(make_cfg("debug=smoke", "optimizer.learning_rate=0.01"))
    assert not (tmp_path / "run" / "results.json").exists()
    assert train(make_cfg("debug=smoke"))["test"] == first["test"]


def test_a_finished_run_is_compared_by_what_decides_its_results(make_cfg, tmp_path):
    first = train(make_cfg("debug=smoke"))
    for meta in (tmp_path / "run" / "checkpoints").rglob("meta/metadata"):  # saved before these settings existed
        saved = json.loads(meta.read_text())
        del saved["config"]["privacy"], saved["config"]["dataset"]["validation_fraction"]
        meta.write_text(json.dumps(saved))
    for same in (["privacy=none"], ["trainer.epochs=2"], ["trainer.early_stopping.min_delta=0.5"]):
        assert train(make_cfg("debug=smoke", *same))["test"] == first["test"]  # unused here, or the same 6 steps


def test_results_written_before_the_runs_last_step_are_written_again(make_cfg, tmp_path):
    first = train(make_cfg("debug=smoke"))
    path = tmp_path / "run" / "results.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "steps": 4}))  # stopped before rewriting them
    again = train(make_cfg("debug=smoke"))
    assert again["steps"] == 6 and json.loads(path.read_text())["steps"] == 6 and again["test"] == first["test"]


# --- Evaluating a run ----------------------------------------------------------------------------------------------

@pytest.fixture
def trained(make_cfg, tmp_path):
    train(make_cfg("debug=smoke", "model.hidden=[16]", "trainer.checkpoint_every=2"))
    return tmp_path / "run"


@pytest.mark.parametrize("command", ["eval", "export"])
def test_eval_of_a_run_still_training_before_its_first_checkpoint_says_so(make_cfg, tmp_path, command):
    """A run training now, its first checkpoint not yet saved, was said to have 'ended before its first checkpoint'
    and to be trained again, which its own command holding the directory refuses."""
    import fcntl

    from zoo.export.artifact import export

    live = tmp_path / "live"
    (live / ".hydra").mkdir(parents=True)
    (live / ".hydra" / "config.yaml").write_text("checkpoint:\n  enabled: true\n")
    (live / "metrics.jsonl").write_text("")
    (live / "checkpoints").mkdir()
    fd = os.open(live, os.O_RDONLY)  # as train.py holds its directory while it runs
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UserError, match=rf"^run_dir={live} has no checkpoint yet and is in use by a command running "
                                            r"now, a run still training; run this command again once it has saved "
                                            r"its first checkpoint \(every trainer\.checkpoint_every steps, and at its "
                                            r"end\), or pass another run_dir\.$"):
            {"eval": evaluate, "export": export}[command](make_cfg(f"run_dir={live}", config_name=command))
    finally:
        os.close(fd)
    with pytest.raises(UserError, match=rf"^run_dir={live} ended before its first checkpoint"):  # once it has ended
        evaluate(eval_cfg(make_cfg, live))


def test_eval_without_missing_or_empty_run_dir(make_cfg, tmp_path):
    with pytest.raises(UserError, match=r"run_dir is required: python eval\.py run_dir=outputs/<date>/<time>"):
        evaluate(make_cfg(config_name="eval"))
    with pytest.raises(UserError, match=r"run_dir=.*missing does not exist; pass the directory of a training run\."):
        evaluate(eval_cfg(make_cfg, tmp_path / "missing"))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(UserError, match=r"run_dir=.*a_file is a file, not a directory; pass the directory of a"):
        evaluate(eval_cfg(make_cfg, tmp_path / "a_file"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"run_dir=.*empty has no complete checkpoint in checkpoints/; train it"):
        evaluate(eval_cfg(make_cfg, tmp_path / "empty"))
    ended = tmp_path / "ended"  # began training with checkpoints on, ended before the first (a non-finite loss)
    (ended / ".hydra").mkdir(parents=True)
    (ended / ".hydra" / "config.yaml").write_text("checkpoint:\n  enabled: true\n")
    (ended / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match=rf"^run_dir={ended} ended before its first checkpoint \(its train\.log says "
                                        r"why, e\.g\. a non-finite loss\), so there is no state to evaluate; train it "
                                        r"again or pass another run_dir\.$"):
        evaluate(eval_cfg(make_cfg, ended))
    refused = tmp_path / "refused"  # its settings stopped it before its first step: train.log ends in why
    (refused / ".hydra").mkdir(parents=True)
    (refused / "train.log").write_text("[2026-12-05 16:14:20,570][zoo][ERROR] - error: privacy=dpsgd needs "
                                       "privacy.target_epsilon or privacy.noise_multiplier; set one of them.\n")
    with pytest.raises(UserError, match=rf"^run_dir={refused} was refused before training \(privacy=dpsgd needs "
                                        r"privacy\.target_epsilon or privacy\.noise_multiplier; set one of them\), so "
                                        r"there is no state to evaluate; train it again with that setting changed, or "
                                        r"pass another run_dir\.$"):
        evaluate(eval_cfg(make_cfg, refused))
    with pytest.raises(UserError, match=r"^chekpoint is not a setting; remove it or fix its spelling \(settings at "
                                        r"the top level: run_dir, checkpoint, parallel, distributed, trainer, paths, "
                                        r"dataset, split\)\.$"):
        evaluate(eval_cfg(make_cfg, tmp_path / "empty", "+chekpoint=best"))
    with pytest.raises(UserError, match=r"parallel\.cpu_devices must be between 1 and 512 \(or null\), got 0\."):
        evaluate(eval_cfg(make_cfg, tmp_path / "empty", "parallel.cpu_devices=0"))


def test_eval_of_a_run_finished_without_checkpoints_says_to_train_it_in_a_new_directory(make_cfg, tmp_path):
    from zoo.train import train

    train(make_cfg("debug=smoke", "checkpoint.enabled=false", out="unsaved"))
    with pytest.raises(UserError, match=r"unsaved holds a finished run's results\.json but no complete checkpoint "
                                        r"\(trained with checkpoint\.enabled=false, or its checkpoints/ removed\), so "
                                        r"there is no state to evaluate; .* Train it again in a new hydra\.run\.dir with "
                                        r"checkpoint\.enabled=true"):
        evaluate(eval_cfg(make_cfg, tmp_path / "unsaved"))


def test_eval_on_corrupt_checkpoints(make_cfg, trained, caplog):
    for blob in (trained / "checkpoints").rglob("*"):
        if blob.is_file() and blob.parent.name == "d":  # the array data of every step
            blob.write_bytes(b"junk")
    with pytest.raises(UserError, match=r"no checkpoint in .*/checkpoints can be restored \(tried steps \[6, 4, 2\]\); "
                                        r"train the run again or pass another run_dir\."):
        evaluate(eval_cfg(make_cfg, trained))
    with pytest.raises(UserError, match=r"can be restored") as damaged:  # training on: damage, not a refusal of
        train(make_cfg("debug=smoke", "model.hidden=[16]", "trainer.checkpoint_every=2"))  # its settings, so a
    assert not isinstance(damaged.value, RunRefused)  # sweep's job ends failed, not stopped-and-resumable
    for meta in (trained / "checkpoints").rglob("meta/metadata"):
        meta.write_text("{not json")
    for choice in ("final", "latest", "best"):  # every step tried: said so, with the way out
        with pytest.raises(UserError, match=r"^no checkpoint in .*/checkpoints has readable metadata \(tried steps "
                                            r"\[6, 4, 2\]; step 6: Expecting .*\); train the run again or pass "
                                            r"another run_dir\.$"):
            evaluate(eval_cfg(make_cfg, trained, f"checkpoint={choice}"))


def _reads_abandoned_at_the_first_failure(files: str, abandoned: list):
    """What orbax leaves when a restore's first read fails: it closes its event loop, and another read that failed
    meanwhile keeps an exception nobody retrieves (in `abandoned` here), which asyncio logs with a traceback once
    the task is collected."""

    async def read(name):
        raise ValueError(f'NOT_FOUND: Error reading "{name}" in OCDBT database at local file "{files}"')

    async def reads():
        abandoned.append(asyncio.ensure_future(read("state.params.layers.0.bias.value/.zarray")))
        await asyncio.sleep(0)  # it runs, and fails
        await read("sums.loss_sum/.zarray")

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(reads())
    finally:
        loop.close()


def test_a_damaged_newest_step_is_said_once_not_again_by_its_abandoned_reads(make_cfg, trained, caplog,
                                                                             monkeypatch):
    """A newest step whose array files were deleted: besides the warning that falls back, asyncio's 'Task exception
    was never retrieved' traceback followed on some evals (1 of 4 on a loaded machine), the same damage said again.
    Its leftovers are made here every time; an exception of anything else that is never retrieved is still logged."""
    restore, abandoned = ocp.CheckpointManager.restore, []

    def newest_step_damaged(self, step, args):
        if step == 6 and "state" in args:  # its arrays; its metadata reads
            _reads_abandoned_at_the_first_failure(f"{trained}/checkpoints/6/state/", abandoned)
        return restore(self, step, args=args)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", newest_step_damaged)
    assert evaluate(eval_cfg(make_cfg, trained))["step"] == 4
    assert "checkpoint step 6" in caplog.text and "cannot be restored" in caplog.text
    abandoned.clear()
    gc.collect()  # when asyncio logs an abandoned task's exception
    assert "never retrieved" not in caplog.text
    with pytest.raises(ValueError):
        _reads_abandoned_at_the_first_failure("/elsewhere/", abandoned)
    abandoned.clear()
    gc.collect()
    assert "Task exception was never retrieved" in caplog.text and 'local file "/elsewhere/"' in caplog.text


def test_eval_of_a_run_whose_reported_step_is_gone_says_which_step_it_read_instead(make_cfg, trained, caplog):
    """checkpoint=final is the step results.json reports; with that step deleted, the newest older one was evaluated
    and printed as the run's final state without a word."""
    shutil.rmtree(trained / "checkpoints" / "6")
    with caplog.at_level("WARNING", logger="zoo"):
        assert evaluate(eval_cfg(make_cfg, trained))["step"] == 4
    assert (f"run_dir={trained}'s results.json reports step 6, which is not among its readable checkpoints: "
            "checkpoint=final evaluates step 4 instead, whose metrics are not the ones results.json reports.") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="zoo"):
        evaluate(eval_cfg(make_cfg, trained, "checkpoint=latest"))  # one named on purpose
    assert "results.json reports" not in caplog.text


def test_a_checkpoint_whose_parameters_read_back_non_finite_is_damaged_not_evaluated_or_trained_on(make_cfg, trained,
                                                                                                   caplog):
    """Orbax keeps no checksums: damaged bytes of a step's weights read back as values (here NaN), and that step was
    evaluated as the run's final state (loss nan, exit 0), and trained on, failing as if the run had diverged. No run
    saves non-finite parameters, so such a step is damaged, and the one before it is read."""
    run = build(make_cfg("debug=smoke", "model.hidden=[16]", "trainer.checkpoint_every=2"), for_training=False)
    ckpts = Checkpoints(str(trained / "checkpoints"), metric="accuracy", mode="max")
    tree, meta = ckpts.restore(6, {"state": run.host_state, "sums": run.compiled.zero_sums})
    nan = jax.tree.map(lambda x: np.full_like(x, np.nan), tree["state"].params)
    tree["state"] = dataclasses.replace(tree["state"], params=nan)
    ckpts.delete(6)
    ckpts.save(6, tree, meta, metrics=meta["metrics"])
    ckpts.wait()
    ckpts.close()
    with caplog.at_level("WARNING", logger="zoo"):
        assert evaluate(eval_cfg(make_cfg, trained))["step"] == 4
    assert ("checkpoint step 6 in " f"{trained / 'checkpoints'} cannot be restored (its parameters hold non-finite values, "
            "which no run saves: its files are damaged). Falling back to the previous checkpoint.") in caplog.text
    assert "results.json reports step 6" in caplog.text
    results = train(make_cfg("debug=smoke", "model.hidden=[16]", "trainer.checkpoint_every=2", "trainer.max_steps=8"))
    assert results["steps"] == 8 and np.isfinite(results["test"]["loss"])  # lengthened from step 4


def test_eval_over_damaged_metadata_uses_the_steps_that_are_readable(make_cfg, trained, caplog):
    metas = {int(p.parent.parent.name): p for p in (trained / "checkpoints").rglob("meta/metadata")}
    saved = {step: json.loads(path.read_text()) for step, path in metas.items()}
    metas[6].write_text("{not json")  # the newest step's: latest falls back, best is chosen among the others
    assert evaluate(eval_cfg(make_cfg, trained))["step"] == 4 and "Falling back" in caplog.text
    scored = {step: meta["metrics"]["accuracy"] for step, meta in saved.items() if step != 6 and meta["metrics"]}
    best = max(sorted(scored), key=scored.get)
    assert evaluate(eval_cfg(make_cfg, trained, "checkpoint=best"))["step"] == best
    for step, path in metas.items():  # metadata that reads, but without a config: as unreadable
        path.write_text(json.dumps({k: v for k, v in saved[step].items() if k != "config"}))
    with pytest.raises(UserError, match=r"no checkpoint in .*/checkpoints has readable metadata \(tried steps "
                                        r"\[6, 4, 2\]; step 6: it holds no config\)"):
        evaluate(eval_cfg(make_cfg, trained))
    for step, path in metas.items():
        path.write_text(json.dumps({**saved[step], "config": {**saved[step]["config"], "model": None}}))
    with pytest.raises(UserError, match=r"does not fit this version of the zoo \(its model is None, not a mapping "):
        evaluate(eval_cfg(make_cfg, trained))
    for step, path in metas.items():  # a config from another version of the zoo: a setting it does not know
        path.write_text(json.dumps({**saved[step], "config": {**saved[step]["config"], "bogus": 1}}))
    with pytest.raises(UserError, match=r"the config saved in .*/checkpoints does not fit this version of the zoo "
                                        r"\(Key 'bogus' not in 'TrainConfig'\); evaluate it with the version that "):
        evaluate(eval_cfg(make_cfg, trained))


def test_a_damaged_saved_metric_is_one_sentence_for_eval_and_resume(make_cfg, trained):
    damaged = trained / "checkpoints" / "4" / "metrics" / "metrics"  # orbax reads these when it opens the run
    damaged.write_text("")
    # the step is named: the run holds several, and orbax's error names no file
    message = (rf"the checkpoints in .*/checkpoints cannot be opened: step 4's saved metrics \({damaged}\) are "
               rf"damaged \(JSONDecodeError: .*\); move that step out of it \({damaged.parent.parent}\) or ")
    # the way out is the command's own: eval.py and another run's trainer.resume have no run dir of theirs to start
    with pytest.raises(UserError, match=message + r"pass another run_dir\.$"):
        evaluate(eval_cfg(make_cfg, trained))
    with pytest.raises(UserError, match=message + r"start in a new hydra\.run\.dir\.$"):
        train(make_cfg("debug=smoke", "model.hidden=[16]", "trainer.checkpoint_every=2", "trainer.max_steps=8"))
    with pytest.raises(UserError, match=message + r"leave out trainer\.resume to start afresh\.$"):
        train(make_cfg("debug=smoke", "model.hidden=[16]", f"trainer.resume={trained / 'checkpoints'}", out="new"))


def test_several_damaged_saved_metrics_are_named_at_once(make_cfg, trained):
    """Only the first was named: moved out, the next command named the next."""
    damaged = [trained / "checkpoints" / str(step) / "metrics" / "metrics" for step in (4, 6)]
    for path in damaged:
        path.write_text("")
    message = (rf"the checkpoints in .*/checkpoints cannot be opened: steps 4 and 6's saved metrics \({damaged[0]}, "
               rf"{damaged[1]}\) are damaged \(JSONDecodeError: .*\); move those steps out of it "
               rf"\({damaged[0].parent.parent}, {damaged[1].parent.parent}\) or pass another run_dir\.$")
    with pytest.raises(UserError, match=message):
        evaluate(eval_cfg(make_cfg, trained))
    for path in damaged:  # the way out it names
        shutil.move(path.parent.parent, trained.parent / f"step{path.parent.parent.name}")
    assert evaluate(eval_cfg(make_cfg, trained))["step"] == 2


def test_eval_of_a_folder_inside_or_above_a_run_names_the_run(make_cfg, trained, tmp_path):
    for inside in (trained / "checkpoints", trained / "checkpoints" / "4"):
        with pytest.raises(UserError, match=rf"run_dir={inside} is inside a run's checkpoints/; pass the run's "
                                            rf"directory, run_dir={trained}\."):
            evaluate(eval_cfg(make_cfg, inside))
    for folder in ("export", "eval", ".hydra"):  # not "train it": the run beside it is trained
        (trained / folder).mkdir(exist_ok=True)
        with pytest.raises(UserError, match=rf"^run_dir={trained / folder} is a folder inside a run; pass the run's "
                                            rf"directory, run_dir={trained}\.$"):
            evaluate(eval_cfg(make_cfg, trained / folder))
    sweep = tmp_path / "sweep"  # a multirun's root: multirun.yaml beside numbered jobs
    (sweep / "0" / ".hydra").mkdir(parents=True)
    (sweep / "0" / ".hydra" / "overrides.yaml").write_text("[]")
    (sweep / "multirun.yaml").write_text("{}")
    (sweep / "summary.md").write_text("")
    with pytest.raises(UserError, match=rf"run_dir={sweep} is a multirun's directory; pass one of its jobs, e\.g\. "
                                        rf"run_dir={sweep / '0'} \(its summary\.md ranks them\)\."):
        evaluate(eval_cfg(make_cfg, sweep))


def test_a_file_inside_a_run_as_run_dir_names_the_run(make_cfg, tmp_path):
    """run_dir=<run>/results.json or <run>/export/model.jax (a path completed one level too far) was told to pass
    'the directory of a training run', where a folder inside a run names the run."""
    from hydra import compose, initialize_config_dir

    from zoo.export.predict import predict

    run = tmp_path / "outputs" / "2026-12-05" / "13-18-44"
    (run / "checkpoints" / "2").mkdir(parents=True)
    (run / "export").mkdir()
    for name in ("results.json", "export/model.jax", "checkpoints/2/_METADATA"):
        (run / name).write_text("")
        with pytest.raises(UserError, match=rf"^run_dir={run / name} is a file inside a run; pass the run's "
                                            rf"directory, run_dir={run}\.$"):
            evaluate(eval_cfg(make_cfg, run / name))
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 1), np.float32))
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("predict", overrides=[f"run_dir={run / 'export' / 'model.jax'}", f"input={tmp_path / 'x.npy'}"])
    with pytest.raises(UserError, match=rf"^run_dir={run / 'export' / 'model.jax'} is a file inside a run; pass the "
                                        rf"run's directory, run_dir={run}\.$"):
        predict(cfg)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(UserError, match=r"^run_dir=.*notes\.txt is a file, not a directory; pass the directory of a "
                                        r"training run\.$"):
        evaluate(eval_cfg(make_cfg, tmp_path / "notes.txt"))


def test_eval_of_a_multirun_names_a_job_with_a_checkpoint(make_cfg, tmp_path):
    """An Optuna sweep whose trial 0 was pruned or failed before its first checkpoint: its directory was told to pass
    job 0, refused in turn; and 'its summary.md ranks them' was said of a sweep still running, which has none yet."""
    sweep = tmp_path / "multirun" / "2026-12-05" / "13-19-02"
    for job in (0, 1):
        (sweep / str(job) / ".hydra").mkdir(parents=True)
        (sweep / str(job) / ".hydra" / "overrides.yaml").write_text(f"- seed={job}\n")
    (sweep / "0" / "failure.json").write_text('{"status": "pruned"}')
    (sweep / "1" / "checkpoints" / "4").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}\n")
    with pytest.raises(UserError, match=rf"^run_dir={sweep} is a multirun's directory; pass one of its jobs, e\.g\. "
                                        rf"run_dir={sweep / '1'}\.$"):
        evaluate(eval_cfg(make_cfg, sweep))
    (sweep / "summary.md").write_text("")
    with pytest.raises(UserError, match=rf"^run_dir={sweep} is a multirun's directory; pass one of its jobs, e\.g\. "
                                        rf"run_dir={sweep / '1'} \(its summary\.md ranks them\)\.$"):
        evaluate(eval_cfg(make_cfg, sweep))


@pytest.mark.parametrize("command", ["eval", "export"])
def test_eval_of_a_folder_of_runs_names_its_runs_by_name(make_cfg, tmp_path, command):
    """outputs/ or outputs/<date>/ (a path completed one level short) was told to be trained, with
    checkpoint.enabled=true; then to pass 'the newest' by modification time, which a copy (cp -r) or a touch of an
    older run makes the newest. The runs to choose from are named, by name."""
    import os

    from zoo.export.artifact import export

    read = {"eval": evaluate, "export": export}[command]
    day = tmp_path / "outputs" / "2026-12-05"
    for i, name in enumerate(("09-00-00", "10-00-00")):
        (day / name / "checkpoints" / "2").mkdir(parents=True)
        os.utime(day / name, (1000 - i, 1000 - i))  # the older one touched last
    (tmp_path / "outputs" / "eval" / "2026-12-05" / "11-00-00-000001" / ".hydra").mkdir(parents=True)  # no run
    for folder in (tmp_path / "outputs", day):
        with pytest.raises(UserError, match=rf"^run_dir={folder} is not a run but holds 2 runs below it; pass one of "
                                            rf"them: run_dir={day / '09-00-00'} or run_dir={day / '10-00-00'}\.$"):
            read(make_cfg(f"run_dir={folder}", config_name=command))
    shutil.rmtree(day / "10-00-00")
    with pytest.raises(UserError, match=rf"^run_dir={day} is not a run but holds a run below it; pass it: "
                                        rf"run_dir={day / '09-00-00'}\.$"):
        read(make_cfg(f"run_dir={day}", config_name=command))


def test_eval_of_the_folder_of_the_sweeps_names_its_jobs_by_number(make_cfg, tmp_path):
    """multirun/ (the folder of the dated sweeps, whose jobs lie three levels below it) was told to be trained, with
    checkpoint.enabled=true, where outputs/ names its runs; then to pass 'the newest' job by modification time."""
    import os

    sweep = tmp_path / "multirun" / "2026-12-05" / "13-19-02"
    for i in (0, 1, 2, 10):
        (sweep / str(i) / "checkpoints" / "4").mkdir(parents=True)
        os.utime(sweep / str(i), (1000 - i, 1000 - i))
    (sweep / "multirun.yaml").write_text("{}\n")
    folder = tmp_path / "multirun"
    with pytest.raises(UserError, match=rf"^run_dir={folder} is not a run but holds 4 runs below it; pass one of "
                                        rf"them: run_dir={sweep / '0'}, run_dir={sweep / '1'}, run_dir={sweep / '2'} "
                                        rf"or run_dir={sweep / '10'}\.$"):
        evaluate(eval_cfg(make_cfg, folder))


@pytest.mark.parametrize("command", ["eval", "export"])
def test_eval_of_an_eval_or_export_commands_own_directory_names_the_run_it_read(make_cfg, tmp_path, command):
    """outputs/eval/<date>/<time> (eval.py's own .hydra/ and log, or export.py's) and the folders above it were told
    to be trained with checkpoint.enabled=true."""
    import os

    run = tmp_path / "outputs" / "2026-12-05" / "13-18-44"
    (run / "checkpoints").mkdir(parents=True)
    earlier = tmp_path / "outputs" / "2026-12-05" / "09-00-00"  # read last: named beside the other, not alone
    (earlier / "checkpoints").mkdir(parents=True)
    dated = tmp_path / "outputs" / command / "2026-12-05"
    for i, (name, read) in enumerate([("13-18-48-064020", run), ("13-19-00-000001", tmp_path / "typo"),
                                      ("13-19-30-000002", earlier)]):
        (dated / name / ".hydra").mkdir(parents=True)
        (dated / name / ".hydra" / "config.yaml").write_text(f"run_dir: {read}\ncheckpoint: final\n")
        (dated / name / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    name: {command}\n")
        (dated / name / f"{command}.log").write_text("")
        os.utime(dated / name, (1000 + i, 1000 + i))
    own = dated / "13-18-48-064020"
    with pytest.raises(UserError, match=rf"^run_dir={own} is the directory of an {command}\.py command \(its \.hydra/ "
                                        rf"and {command}\.log\), not a training run; pass the run it read, "
                                        rf"run_dir={run}\.$"):
        evaluate(eval_cfg(make_cfg, own))
    with pytest.raises(UserError, match=r"is the directory of an .*; pass a training run\.$"):  # it read no run
        evaluate(eval_cfg(make_cfg, dated / "13-19-00-000001"))
    for folder in (dated, dated.parent):  # the runs they read, by name (not by which was read or touched last)
        with pytest.raises(UserError, match=rf"^run_dir={folder} holds the directories of eval\.py or export\.py "
                                            r"commands, not training runs; pass a training run's directory, e\.g\. "
                                            rf"one of those they read: run_dir={earlier} or run_dir={run}\.$"):
            evaluate(eval_cfg(make_cfg, folder))


@pytest.mark.parametrize("command", ["eval", "export"])
def test_eval_of_a_multirun_of_eval_or_export_commands_names_the_run_they_read(make_cfg, tmp_path, command):
    """python eval.py -m run_dir=R checkpoint=2,4 leaves a multirun whose jobs are eval.py's own directories: passed
    as run_dir (to eval.py, export.py or predict.py), it was told to pass one of its jobs, which is then refused as
    not a training run."""
    run = tmp_path / "outputs" / "2026-12-05" / "13-18-44"
    (run / "checkpoints" / "2").mkdir(parents=True)
    sweep = tmp_path / "multirun" / "2026-12-05" / "13-20-00"
    (sweep / "multirun.yaml").parent.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}\n")
    for job, step in ((0, 2), (1, "latest")):
        (sweep / str(job) / ".hydra").mkdir(parents=True)
        (sweep / str(job) / ".hydra" / "overrides.yaml").write_text(f"- run_dir={run}\n- checkpoint={step}\n")
        (sweep / str(job) / ".hydra" / "config.yaml").write_text(f"run_dir: {run}\ncheckpoint: {step}\n")
        (sweep / str(job) / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    name: {command}\n")
    from hydra import compose, initialize_config_dir

    from zoo.export.predict import predict

    said = (rf"^run_dir={sweep} holds the directories of eval\.py or export\.py commands, not training runs; pass a "
            rf"training run's directory, e\.g\. the one they read, run_dir={run}\.$")
    with pytest.raises(UserError, match=said):
        evaluate(eval_cfg(make_cfg, sweep))
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 1), np.float32))
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("predict", overrides=[f"run_dir={sweep}", f"input={tmp_path / 'x.npy'}"])
    with pytest.raises(UserError, match=said):  # predict.py, told the same of the job
        predict(cfg)


def test_eval_of_a_sweep_job_that_failed_before_its_first_checkpoint_says_why(make_cfg, tmp_path):
    job = tmp_path / "sweep" / "1"
    (job / "checkpoints").mkdir(parents=True)
    (job / "failure.json").write_text(json.dumps({"status": "failed", "error": "NonFiniteLoss",
                                                  "reason": "training loss became non-finite at step 5."}))
    with pytest.raises(UserError, match=rf"^run_dir={job} failed before its first checkpoint \(NonFiniteLoss: "
                                        r"training loss became non-finite at step 5\); nothing there can be "
                                        r"evaluated\.$"):
        evaluate(eval_cfg(make_cfg, job))


def test_eval_choices_that_are_not_in_the_run(make_cfg, trained):
    with pytest.raises(UserError, match=r"checkpoint=5 is not in .*; use final, latest, best or one of the steps "
                                        r"\[2, 4, 6\]"):
        evaluate(eval_cfg(make_cfg, trained, "checkpoint=5"))
    with pytest.raises(UserError, match=r"^split=validation is not in this run: it was trained with "  # not why
                                        r"dataset\.validation_fraction=0\.0, which holds out no validation split "
                                        r"\(train one with dataset\.validation_fraction=0\.1 to have one\); choose one "
                                        r"of \['test'\]\.$"):
        evaluate(eval_cfg(make_cfg, trained, "split=validation"))
    with pytest.raises(UserError, match=r"split=train: eval\.py evaluates a run's held-out splits \(its "
                                        r"results\.json's train metrics are those its last log interval trained "
                                        r"with\); choose one of \['test'\]\."):
        evaluate(eval_cfg(make_cfg, trained, "split=train"))
    with pytest.raises(UserError, match=r"trainer\.batch_size must be a positive integer or null, got 0\."):
        evaluate(eval_cfg(make_cfg, trained, "trainer.batch_size=0"))
    with pytest.raises(UserError, match=r"trainer\.eval_batch_size must be a positive integer or null, got 0\."):
        evaluate(eval_cfg(make_cfg, trained, "trainer.eval_batch_size=0"))
    with pytest.raises(UserError, match=r"^trainer\.batch_size=8 and trainer\.eval_batch_size=16 both set the eval "
                                        r"batch size; set one of them\.$"):
        evaluate(eval_cfg(make_cfg, trained, "trainer.batch_size=8", "trainer.eval_batch_size=16"))
    shutil.rmtree(trained / "eval", ignore_errors=True)
    (trained / "eval").write_text("")  # a file where eval/ must go: the run is writable, that file is in the way
    with pytest.raises(UserError, match=rf"^a file is in the way at {trained / 'eval'}, where eval results go; move "
                                        r"it and run the command again\.$"):
        evaluate(eval_cfg(make_cfg, trained))


# --- Training that goes wrong: the NaN guard, a full disk ----------------------------------------------------------

def _latest_restores_finite(cfg):
    ckpts = Checkpoints(os.path.join(cfg.paths.output_dir, "checkpoints"), read_only=True)
    run_ = build(cfg)
    restored, _ = ckpts.restore(ckpts.steps()[-1], {"state": run_.host_state, "sums": run_.compiled.zero_sums})
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(restored["state"].params))
    return ckpts.steps()


DIVERGE = ["optimizer=sgd", "model=mlp", "optimizer.learning_rate=1e6", "logger=quiet", "trainer.max_steps=20",
           "trainer.checkpoint_every=1", "trainer.eval_every=0"]


@pytest.mark.parametrize("log_every,message", [
    (1, r"training loss became non-finite by step (\d+) \(last finite loss: [\d.e+]+\); lower "
        r"optimizer\.learning_rate or set trainer\.clip_norm\."),
    (50, r"parameters became non-finite by step (\d+); the checkpoint was not written — lower "
         r"optimizer\.learning_rate or set trainer\.clip_norm\."),
], ids=["loss-guard", "parameter-guard"])
def test_divergence_stops_with_the_guard_and_keeps_the_last_good_checkpoint(make_cfg, log_every, message):
    cfg = make_cfg(*DIVERGE, f"trainer.log_every={log_every}")
    with pytest.raises(NonFiniteLoss, match=message) as err:
        train(cfg)
    bad_step = int(re.search(message, str(err.value)).group(1))
    steps = _latest_restores_finite(cfg)
    assert steps and steps[-1] < bad_step


@pytest.mark.parametrize("overrides,advice", [
    (["dataset=synthetic_linear", "model=linear", "dataset.noise=1e19"],
     "lower optimizer.learning_rate or set trainer.clip_norm, or lower dataset.noise (now 1e+19), which sets the "
     "targets' scale."),
    (["privacy=dpsgd", "optimizer=sgd", "privacy.noise_multiplier=1", "privacy.l2_clip=1e15"],
     "lower optimizer.learning_rate or privacy.l2_clip (now 1e+15; the noise's std is privacy.noise_multiplier x "
     "privacy.l2_clip), or set trainer.clip_norm."),
    (["optimizer.weight_decay=1e6"],
     "lower optimizer.learning_rate or set trainer.clip_norm, or lower optimizer.weight_decay (now 1e+06: each step "
     "multiplies the parameters by 1 - optimizer.learning_rate x optimizer.weight_decay = -999)."),
    (["optimizer.learning_rate=1e6"], "; lower optimizer.learning_rate or set trainer.clip_norm."),  # the rate's fault
], ids=["synthetic-noise", "dpsgd-clip", "weight-decay", "learning-rate"])
def test_a_non_finite_loss_names_the_settings_of_the_run_that_can_cause_it(make_cfg, overrides, advice):
    """The advice named only optimizer.learning_rate and trainer.clip_norm: a synthetic_linear noise whose targets'
    squares float32 cannot hold makes the loss inf at any learning rate; under DP-SGD the noise scales with
    privacy.l2_clip; a weight decay past 1 / learning rate grows the parameters whatever the gradients."""
    with pytest.raises(NonFiniteLoss) as err:
        train(make_cfg("debug=smoke", *overrides))
    assert str(err.value).endswith(advice), str(err.value)


def test_an_r2_objective_undefined_on_its_split_names_the_split_not_the_learning_rate(make_cfg):
    """R^2 of a validation split of one example (its targets cannot vary) is NaN however well the run trained: it
    was blamed on optimizer.learning_rate."""
    with pytest.raises(UserError, match=r"^the objective validation/r2 is nan: R² is undefined on the validation "
                                        r"split \(1 example\), whose targets do not vary measurably; carve a larger "
                                        r"one with dataset\.validation_fraction \(now 0\.0001\), or optimise "
                                        r"validation/loss\.$"):
        train(make_cfg("debug=smoke", "dataset=diabetes", "model=linear", "dataset.validation_fraction=0.0001",
                       "optimized_metric=validation/r2"))


def test_nan_check_step_stops_at_the_first_bad_batch(make_cfg):
    # the losses of steps 1, 2, 3 are 2.31, 5.9e16, inf: step 3 is the first bad batch, named exactly
    with pytest.raises(NonFiniteLoss, match=r"training loss became non-finite (by|at) step 3 "):
        train(make_cfg(*DIVERGE, "trainer.nan_check=step", "trainer.checkpoint_every=0"))


def test_nan_check_step_names_the_batch_position(make_cfg):
    with pytest.raises(NonFiniteLoss, match=r"step 3 \(batch 2 of epoch 0"):
        train(make_cfg(*DIVERGE, "trainer.nan_check=step", "trainer.checkpoint_every=0"))


def test_disk_full_during_a_save_keeps_the_previous_checkpoint(make_cfg, monkeypatch):
    common = ["debug=smoke", "model.hidden=[16]", "trainer.checkpoint_every=2"]
    real_save = ocp.CheckpointManager.save

    def full_at_step_4(self, step, *args, **kwargs):
        if step == 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(self, step, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(ocp.CheckpointManager, "save", full_at_step_4)
        with pytest.raises(UserError, match=r"could not write checkpoint step 4 in .*/run/checkpoints \(no space left "
                                            r"on device\); step 2 stays the latest checkpoint — free space there and "
                                            r"rerun the same command to resume\."):
            train(make_cfg(*common))
    assert _latest_restores_finite(make_cfg(*common)) == [2]
    assert train(make_cfg(*common))["start_step"] == 2  # the same command resumes once there is space


def test_ctrl_c_and_io_errors_outside_the_loop_are_one_line(make_cfg, capsys, monkeypatch):
    cfg = make_cfg("debug=smoke")

    def hard_exit(code):  # the real one ends the process without finalising it
        raise SystemExit(code)

    monkeypatch.setattr(zoo.cli, "_hard_exit", hard_exit)

    def interrupted(cfg):
        raise KeyboardInterrupt

    def disk_full(cfg):
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/metrics.jsonl")

    for fn, code, text in [(interrupted, 130, "error: interrupted by Ctrl-C; no checkpoint was written yet"),
                           (disk_full, 1, "error: No space left on device: /runs/x/metrics.jsonl; free space")]:
        with pytest.raises(SystemExit) as exit_:
            run_task(fn, cfg)
        err = capsys.readouterr().err
        assert exit_.value.code == code and err.startswith(text) and err.count("\n") == 1, err


@pytest.mark.parametrize("resume", ["auto", "never"])
def test_a_stop_outside_the_loop_names_the_directory_the_run_resumes_in(make_cfg, capsys, monkeypatch, tmp_path,
                                                                        resume):
    """A second Ctrl-C (or a stop before the loop) said 'the same command resumes from the newest one': under the
    default hydra.run.dir, outputs/<date>/<time>, the same command trains from scratch in a new directory, and with
    trainer.resume=never it is refused once the run holds checkpoints."""
    monkeypatch.setattr(zoo.cli, "_hard_exit", lambda code: sys.exit(code))
    (tmp_path / "run" / "checkpoints" / "4").mkdir(parents=True)

    def interrupted(cfg):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_:
        run_task(interrupted, make_cfg("debug=smoke", f"trainer.resume={resume}"))
    how = ", trainer.resume=auto instead of never," if resume == "never" else ""
    assert exit_.value.code == 130 and capsys.readouterr().err == (
        f"error: interrupted by Ctrl-C; checkpoints already written are kept — resume with the same command{how} and "
        f"hydra.run.dir={tmp_path / 'run'}.\n")


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_a_stop_before_the_first_checkpoint_does_not_say_checkpoints_are_kept(make_cfg, capsys, monkeypatch,
                                                                              tmp_path, stop):
    """A run stopped while it loaded its data or compiled said 'checkpoints already written are kept' and to
    'resume' with the same command, where none had been written: the same command trains it from its start."""
    from zoo.startup import Terminated

    monkeypatch.setattr(zoo.cli, "_hard_exit", lambda code: sys.exit(code))
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)  # opened, no step in it

    def stopped(cfg):
        raise Terminated if stop == "sigterm" else KeyboardInterrupt

    with pytest.raises(SystemExit) as exit_:
        run_task(stopped, make_cfg("debug=smoke"))
    how, code = ("stopped by SIGTERM", 143) if stop == "sigterm" else ("interrupted by Ctrl-C", 130)
    assert exit_.value.code == code and capsys.readouterr().err == (
        f"error: {how}; no checkpoint was written yet — train it with the same command and "
        f"hydra.run.dir={tmp_path / 'run'}.\n")


def test_a_file_in_the_way_is_named_and_only_a_full_disk_asks_for_space(make_cfg, capsys, tmp_path):
    cfg = make_cfg("debug=smoke")
    (tmp_path / "a_file").write_text("")
    in_the_way = "; move it and run the command again.\n"
    for error, code, text in [
            (OSError(errno.EISDIR, "Is a directory", "/runs/x/results.json.123.tmp", None, "/runs/x/results.json"), 2,
             "error: something is in the way at /runs/x/results.json (Is a directory)" + in_the_way),  # a rename's
            (OSError(errno.EEXIST, "File exists", "/runs/x/tensorboard"), 2,
             "error: something is in the way at /runs/x/tensorboard (File exists)" + in_the_way),
            (OSError(errno.EISDIR, "Is a directory", "/runs/x/metrics.jsonl"), 2,
             "error: something is in the way at /runs/x/metrics.jsonl (Is a directory)" + in_the_way),
            (OSError(errno.ENOTDIR, "Not a directory", str(tmp_path / "a_file" / "events")), 2,  # the file above it
             f"error: something is in the way at {tmp_path / 'a_file'} (Not a directory)" + in_the_way),
            (OSError(errno.EACCES, "Permission denied", "/runs/x/metrics.jsonl"), 1,
             "error: Permission denied: /runs/x/metrics.jsonl; choose another hydra.run.dir / paths.data_dir.\n")]:
        def refused(cfg):
            raise error

        with pytest.raises(SystemExit) as exit_:
            run_task(refused, cfg)
        assert exit_.value.code == code and capsys.readouterr().err == text


def test_a_run_that_cannot_open_its_log_closes_its_checkpoints(make_cfg, tmp_path, monkeypatch):
    """An open checkpoint manager's threads outlive the exit's sentence, and print an orbax traceback after it."""
    closed, close = [], Checkpoints.close
    monkeypatch.setattr(Checkpoints, "close", lambda self: (closed.append(self.directory), close(self))[-1])
    (tmp_path / "run" / "metrics.jsonl").mkdir(parents=True)  # a directory where the log file goes
    with pytest.raises(UserError, match=re.escape(f"something is in the way at {tmp_path / 'run' / 'metrics.jsonl'} "
                                                  "(Is a directory); move it")):
        train(make_cfg("debug=smoke"))
    assert str(tmp_path / "run" / "checkpoints") in closed


def test_a_file_where_the_checkpoints_go_is_named_before_training(make_cfg, tmp_path):
    """orbax opened it without a word and failed the first save from a thread of its own (an orbax traceback)."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").write_text("")
    with pytest.raises(UserError, match=re.escape(f"something is in the way at {tmp_path / 'run' / 'checkpoints'} "
                                                  "(a file where a run keeps its checkpoints); move it")):
        train(make_cfg("debug=smoke"))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_hydras_own_files_in_the_way_are_one_sentence(tmp_path, capsys):
    """Hydra writes <run dir>/.hydra/ and <job>.log before the task: a file or directory there was its traceback."""
    from omegaconf import OmegaConf

    def config(run_dir):
        return OmegaConf.create({"hydra": {"run": {"dir": str(run_dir)}, "output_subdir": ".hydra",
                                           "job": {"name": "train"},
                                           "job_logging": {"handlers": {"file": {"filename": "train.log"}}}}})

    (tmp_path / "a" / ".hydra").mkdir(parents=True)
    (tmp_path / "a" / "train.log").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".hydra").write_text("")
    for run_dir, obstacle, why in [(tmp_path / "a", "train.log", "a directory where Hydra writes the command's log"),
                                   (tmp_path / "b", ".hydra", "a file where Hydra keeps the run's record")]:
        with pytest.raises(SystemExit) as exit_:
            RunDirCheck().on_run_start(config(run_dir))
        assert exit_.value.code == 2
        assert capsys.readouterr().err == (f"error: something is in the way at {run_dir / obstacle} ({why}); move it, "
                                           "or choose another hydra.run.dir.\n")
    sweep = config(tmp_path / "sweep")  # a rerun's sweep dir: the job directories it already holds
    sweep.hydra.sweep = {"dir": str(tmp_path)}
    with pytest.raises(SystemExit):
        RunDirCheck().on_multirun_start(sweep)
    err = capsys.readouterr().err  # job a's or b's, whichever is listed first
    assert err.startswith(f"error: something is in the way at {tmp_path}/") and err.endswith("hydra.sweep.dir.\n")


def test_a_file_where_a_sweeps_job_folder_goes_is_one_sentence(tmp_path, capsys):
    """Hydra makes each job's folder <sweep dir>/<job number> before the task: a file there was its traceback."""
    from omegaconf import OmegaConf

    (tmp_path / "0").write_text("")
    (tmp_path / "notes").write_text("")  # no job's folder: left alone

    def sweep(subdir):
        return OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path), "subdir": subdir}, "output_subdir": ".hydra",
                                           "job": {"name": "train"}}})

    with pytest.raises(SystemExit) as exit_:
        RunDirCheck().on_multirun_start(sweep("${hydra.job.num}"))
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"error: something is in the way at {tmp_path / '0'} (a file where job 0 of a "
                                       "sweep keeps its run); move it, or choose another hydra.sweep.dir.\n")
    RunDirCheck().on_multirun_start(sweep("${hydra.job.override_dirname}"))  # no job is named 0 there
    assert capsys.readouterr().err == ""


def test_a_sweeps_job_folder_that_is_a_link_is_refused(tmp_path, capsys):
    """A job continues the run its folder holds: a link to another sweep's stopped trial was resumed there, and that
    trial's records rewritten under this sweep's settings."""
    from omegaconf import OmegaConf

    from zoo.cli import jobs_dir_blocked

    other = tmp_path / "other" / "0"
    other.mkdir(parents=True)
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "0").symlink_to(other)
    (sweep / "x_3").symlink_to(other)

    def job(subdir, num=3):
        return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep), "subdir": subdir}, "output_subdir": ".hydra",
                                           "job": {"name": "train", "num": num}}})

    with pytest.raises(SystemExit) as exit_:
        RunDirCheck().on_multirun_start(job("${hydra.job.num}"))
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"error: {sweep / '0'}, where job 0 of the sweep keeps its run, is a link to "
                                       f"{other}; a job writes in a directory of its own: remove the link, or choose "
                                       "another hydra.sweep.dir.\n")
    assert str(jobs_dir_blocked(job("x_${hydra.job.num}"))) == (
        f"{sweep / 'x_3'}, where job 3 of the sweep keeps its run, is a link to {other}; a job writes in a directory "
        "of its own: remove the link, or choose another hydra.sweep.subdir.")
    assert list(other.iterdir()) == []

def test_what_is_in_the_way_of_a_job_under_a_subdir_of_ones_own_is_found_once_the_job_is_composed(tmp_path):
    """A subdir other than the job number is known only per job: a file at its directory, at a folder on the way
    down to it, or at its .hydra/ record is named, with the job's number; a free path is not."""
    from omegaconf import OmegaConf

    from zoo.cli import jobs_dir_blocked

    def job(subdir, num=3):
        return OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path), "subdir": subdir}, "output_subdir": ".hydra",
                                           "job": {"name": "train", "num": num}}})

    (tmp_path / "x_3").write_text("")
    (tmp_path / "runs").write_text("")
    (tmp_path / "y_3").mkdir()
    (tmp_path / "y_3" / ".hydra").write_text("")
    (tmp_path / "z_3").mkdir()
    assert str(jobs_dir_blocked(job("x_${hydra.job.num}"))) == (
        f"something is in the way at {tmp_path / 'x_3'} (a file where job 3 of a sweep keeps its run); move it, or "
        "choose another hydra.sweep.subdir.")
    assert str(jobs_dir_blocked(job("runs/lr_${hydra.job.num}"))).startswith(
        f"something is in the way at {tmp_path / 'runs'} (a file where job 3 ")
    assert str(jobs_dir_blocked(job("y_${hydra.job.num}"))) == (
        f"something is in the way at {tmp_path / 'y_3' / '.hydra'} (a file where Hydra keeps the run's record); "
        "move it, or choose another hydra.sweep.subdir.")
    for free in ("z_${hydra.job.num}", "new/x_${hydra.job.num}", "x_${hydra.job.num}"):
        assert jobs_dir_blocked(job(free, num=4)) is None, free


@pytest.mark.parametrize("launcher", ["basic", "population"])
def test_a_file_where_a_job_under_a_subdir_of_ones_own_goes_is_one_sentence(launcher, data_dir, tmp_path):
    """Hydra's run_job made such a job's folder and raised a traceback at the file in its way; the population
    launcher's own set-up did the same. The basic launcher runs the jobs before it; the population launcher,
    which trains its batch together, refuses the batch before any job trains."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "x_1").write_text("notes")
    done = run(["-m", "debug=smoke", "seed=0,1", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=x_${hydra.job.num}",
                f"hydra/launcher={launcher}"], data_dir)
    assert_one_sentence(done, 2, f"something is in the way at {sweep / 'x_1'} (a file where job 1 of a sweep keeps "
                                 "its run); move it, or choose another hydra.sweep.subdir.")
    assert (sweep / "x_1").read_text() == "notes"
    if launcher == "basic":
        assert (sweep / "x_0" / "results.json").is_file()
    else:
        assert os.listdir(sweep) == ["x_1"]  # nor the plan of a batch that never ran


@pytest.mark.parametrize("folder, why", [
    # orbax would take the command's files there for a step, and delete them with the run's old steps
    ("checkpoints", "whose old steps are deleted as it trains"),
    # export.py replaces a run's export/ whole: a run trained inside it was deleted, checkpoints and all
    ("export", "which export.py replaces whole"),
])
def test_a_run_dir_inside_a_runs_checkpoints_or_export_is_refused(tmp_path, capsys, folder, why):
    from omegaconf import OmegaConf

    run = tmp_path / "r"
    (run / folder / "6").mkdir(parents=True)
    (run / "results.json").write_text("{}")
    for setting, path in [("hydra.run.dir", run / folder / "6"), ("hydra.run.dir", run / folder / "new"),
                          ("hydra.sweep.dir", run / folder)]:  # a sweep's jobs would go below it
        key = setting.split(".")[1]
        config = OmegaConf.create({"hydra": {key: {"dir": str(path)}, "output_subdir": ".hydra"}})
        with pytest.raises(SystemExit) as exit_:
            (RunDirCheck().on_run_start if key == "run" else RunDirCheck().on_multirun_start)(config)
        assert exit_.value.code == 2
        assert capsys.readouterr().err == (f"error: {setting}={path} is inside a run's {folder}/ ({run}), {why}; "
                                           f"choose another {setting} outside it.\n")
    assert not (run / folder / "new").exists()  # refused before anything was created there
    elsewhere = tmp_path / folder / "exp1"  # a folder of that name beside no run is anyone's to use
    RunDirCheck().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": str(elsewhere)}, "output_subdir": ".hydra"}}))
    assert elsewhere.is_dir()


def test_a_run_in_a_sweeps_root_and_a_sweep_in_a_runs_directory_are_refused(tmp_path, capsys):
    """A sweep's summary lists the job directories below its root, stopping at the first: a run in the root
    stood as the sweep's only job, and a sweep in a run's directory listed that run alone, not its own jobs."""
    from omegaconf import OmegaConf

    sweep, run = tmp_path / "sweep", tmp_path / "run"
    (sweep / "0" / ".hydra").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("[]\n")
    for setting, path, message in [
            ("hydra.run.dir", sweep, "is a multirun's directory, whose summary would list this run in place of its "
                                     "jobs"),
            ("hydra.sweep.dir", run, "holds a run, which this sweep's summary would list in place of its jobs")]:
        key = setting.split(".")[1]
        config = OmegaConf.create({"hydra": {key: {"dir": str(path)}, "output_subdir": ".hydra"}})
        with pytest.raises(SystemExit) as exit_:
            (RunDirCheck().on_run_start if key == "run" else RunDirCheck().on_multirun_start)(config)
        assert exit_.value.code == 2
        assert capsys.readouterr().err == f"error: {setting}={path} {message}; choose another {setting}.\n"
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "multirun.yaml"]  # refused before Hydra wrote there


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the interrupt Python drops
def test_a_ctrl_c_python_lost_before_training_still_stops_the_run(make_cfg, capsys):
    """Raised inside a garbage-collection callback (JAX runs one while compiling), a KeyboardInterrupt is only
    printed; the run must not then train to its end as if nothing had been pressed."""
    class CollectedDuringCtrlC:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # its KeyboardInterrupt is "ignored" by Python

    def ctrl_c_then_train(cfg):
        CollectedDuringCtrlC()
        return train(cfg)

    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a shell's background job
    with pytest.raises(SystemExit) as exit_:
        run_task(ctrl_c_then_train, make_cfg("debug=smoke"))
    assert exit_.value.code == 130 and "error: stopped by SIGINT at step" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before  # put back


def test_hydra_full_error_shows_the_traceback_behind_every_error(make_cfg, capsys, monkeypatch):
    cfg = make_cfg("debug=smoke")

    def refused(cfg):
        raise UserError("trainer.batch_size must be a positive integer, got 0.")

    with pytest.raises(SystemExit) as exit_:
        run_task(refused, cfg)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: trainer.batch_size must be a positive integer, got 0.\n"
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(UserError, match="trainer.batch_size"):  # Hydra prints it with its traceback
        run_task(refused, cfg)

    def stopped(cfg):
        raise Preempted(6, signal.SIGTERM, "/runs/x")

    with pytest.raises(SystemExit) as exit_:  # a stop keeps its exit code: requeue scripts read 128 + signal
        run_task(stopped, cfg)
    assert exit_.value.code == 143


# --- The real commands: exit codes, and never a traceback ----------------------------------------------------------

INTERRUPT_PREPARE = """
import os, runpy, signal, sys
import zoo.data.embedded as embedded
original = embedded._ArrayBuilder._generate_examples
def generate(self, x, y, indices):
    for i, example in enumerate(original(self, x, y, indices)):
        if i == 100:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, halfway through writing a split
        yield example
embedded._ArrayBuilder._generate_examples = generate
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.parametrize("args,code,fragment", [
    (["model=transformer"], 1, "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."),
    (["parallel.cpu_devices=1000"], 2, "error: parallel.cpu_devices must be between 1 and 512"),
    (["hydra.run.dir={tmp}/a_file/run", CALLBACK], 2, "error: hydra.run.dir={tmp}/a_file/run is not writable"),
    (["paths.output_dir={tmp}/a_file/out"], 2, "error: paths.output_dir={tmp}/a_file/out is not writable"),
    (DIVERGE + ["trainer.log_every=1", "logger.progress=true"], 2, "error: training loss became non-finite by step"),
    (["parallel=sharded", "distributed=explicit", "distributed.coordinator_address=nosuchhost.invalid:1234",
      "distributed.num_processes=2", "distributed.process_id=0", "distributed.timeout_s=5"],  # was exit 134
     2, "error: distributed.coordinator_address=nosuchhost.invalid:1234 names a host that cannot be resolved"),
], ids=["hydra-unknown-option", "cpu-devices-cap", "run-dir", "output-dir", "nan-guard", "coordinator-host"])
def test_commands_exit_with_one_sentence(data_dir, tmp_path, args, code, fragment):
    (tmp_path / "a_file").write_text("")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if not any(a.startswith("hydra.run.dir=") for a in args):
        args.append(f"hydra.run.dir={tmp_path / 'run'}")
    done = run(["debug=smoke", *args], data_dir)
    assert_one_sentence(done, code, fragment.replace("{tmp}", str(tmp_path)))


@pytest.mark.parametrize("flags", [["-m", "--cfg", "job"], ["--info", "-m"]])
def test_multirun_with_cfg_or_info_is_one_sentence(data_dir, tmp_path, flags):
    """Hydra refuses the pair with a ValueError traceback, raised before it reads any override."""
    done = run(["debug=smoke", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}", *flags], data_dir)
    assert_one_sentence(done, 2, "error: -m (--multirun), --cfg, --info, --run and --shell-completion each choose "
                                 "what the command does, so give one of them; to see a sweep job's config, drop -m "
                                 "and give each swept key one of its values.")
    assert not (tmp_path / "sweep").exists()


def test_ctrl_c_while_preparing_exits_130_and_the_next_run_prepares(data_dir, tmp_path, make_cfg):
    fresh, script = tmp_path / "data", tmp_path / "interrupt_prepare.py"
    script.write_text(INTERRUPT_PREPARE)
    done = run(["debug=smoke", f"paths.data_dir={fresh}", f"hydra.run.dir={tmp_path / 'run'}"], data_dir, script)
    assert_one_sentence(done, 130, "error: interrupted while preparing dataset=digits")
    assert not list(fresh.rglob("dataset_info.json"))
    cfg = make_cfg(f"paths.data_dir={fresh}")
    assert len(load_dataset(cfg.dataset, cfg.paths.data_dir).splits["train"]) == 1438


def test_eval_without_run_dir_exits_2(data_dir, tmp_path):
    done = run([f"hydra.run.dir={tmp_path / 'eval'}"], data_dir, script="eval.py")
    assert_one_sentence(done, 2, "error: run_dir is required")


def test_eval_of_a_folder_of_runs_names_the_runs_that_hold_a_checkpoint(make_cfg, tmp_path):
    """A run refused before its first step leaves an empty checkpoints/: named, it would be refused for having no
    complete checkpoint. The runs holding a step are named; where none does, each run, to be told why."""
    outputs = tmp_path / "outputs" / "2026-12-05"
    (outputs / "09-00-00" / "checkpoints" / "5").mkdir(parents=True)
    (outputs / "10-00-00" / "checkpoints").mkdir(parents=True)  # refused before its first step
    with pytest.raises(UserError, match=rf"^run_dir={outputs} is not a run but holds 2 runs below it, 1 with a "
                                        rf"checkpoint; pass it: run_dir={outputs / '09-00-00'}\.$"):
        evaluate(eval_cfg(make_cfg, outputs))
    shutil.rmtree(outputs / "09-00-00" / "checkpoints" / "5")
    with pytest.raises(UserError, match=rf"^run_dir={outputs} is not a run but holds 2 runs below it, none with a "
                                        rf"checkpoint \(run_dir={outputs / '09-00-00'} or run_dir="
                                        rf"{outputs / '10-00-00'}, each says why when passed\); train one with "
                                        r"checkpoint\.enabled=true, or pass another run_dir\.$"):
        evaluate(eval_cfg(make_cfg, outputs))


def test_hydra_full_error_shows_the_traceback_of_a_tasks_refusal_only(data_dir, tmp_path):
    """As docs/errors.md says: a task's sentence (a value out of range) becomes its traceback, exit 1; a refusal of
    the command line before Hydra starts (a value of the wrong type) stays one sentence, exit 2."""
    env = dict(subprocess_env(data_dir), HYDRA_FULL_ERROR="1")
    task, line = (commands.run([sys.executable, "train.py", "debug=smoke", override, f"hydra.run.dir={tmp_path / d}"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
                  for override, d in [("optimizer.learning_rate=0", "a"), ("trainer.epochs=three", "b")])
    assert task.returncode == 1 and "Traceback" in task.stderr, task.stderr
    assert task.stderr.strip().splitlines()[-1] == ("zoo.errors.UserError: optimizer.learning_rate must be a positive "
                                                    "finite number, got 0.")
    assert line.returncode == 2 and line.stderr == "error: trainer.epochs must be an integer, got three.\n"
