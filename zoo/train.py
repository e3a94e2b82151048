"""train(cfg) -> results: an ordinary function; train.py wraps it for Hydra and the tests call it directly."""
import logging
import os
import time
from dataclasses import dataclass

import jax
import numpy as np
from flax import nnx
from omegaconf import DictConfig, OmegaConf

from zoo.checkpoint import Checkpoints
from zoo.config import validate
from zoo.data import Dataset, TrainStream, eval_batches, load_dataset
from zoo.errors import UserError
from zoo.loop import Compiled, NonFiniteLoss, evaluate, fit, metric_summary, total_steps_for
from zoo.early_stopping import early_stopping_for, restore_best
from zoo.ema import evaluating_averaged
from zoo.optim import build_optimizer, check_run_length, learning_rate_at
from zoo.parallel import check_batch_divides, make_mode, round_up, select_devices
from zoo.parallel.distributed import barrier, is_primary
from zoo.preemption import Preempted, stop_on_signals
from zoo.privacy.plan import EpsilonLogger, PrivacyPlan, plan_privacy
from zoo.resume import checkpoint_settings, find_start
from zoo.run_logger import RunLogger
from zoo.state import TrainState, create_state
from zoo.steps import make_steps
from zoo.summary import achieved_gflop_s, describe
from zoo.sweeps.trial_link import eval_reporter
from zoo.targets import safe_instantiate
from zoo.tasks import TASKS

log = logging.getLogger("zoo")


@dataclass
class Run:
    """Everything one run needs, built in data-flow order: devices -> data -> model -> state -> steps."""

    data: Dataset
    stream: TrainStream
    host_state: TrainState  # unreplicated, as checkpoints store it
    compiled: Compiled
    eval_sets: dict  # split -> (device batches, example count); the periodic split first
    total_steps: int
    privacy: PrivacyPlan | None = None  # privacy=dpsgd


def setup_compilation_cache(path) -> None:
    if path:
        jax.config.update("jax_compilation_cache_dir", os.path.expanduser(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def build_model(cfg: DictConfig, data: Dataset) -> nnx.Module:
    try:
        return safe_instantiate(cfg.model, "model", input_shape=data.input_shape, out_features=data.out_features,
                                rngs=nnx.Rngs(params=cfg.seed))
    except UserError as e:
        model_name = str(cfg.model.get("_target_", "?")).rsplit(".", 1)[-1].lower()
        raise UserError(f"model={model_name} cannot be built for dataset={cfg.dataset.name} (inputs "
                        f"{data.input_shape}): {e}; model=linear and model=mlp take any input.") from None


def load_dataset_once(dataset_cfg, data_dir: str) -> Dataset:
    """In multi-process runs process 0 prepares the data; the others read it once it is complete."""
    if not is_primary():
        barrier("dataset prepared")
    data = load_dataset(dataset_cfg, data_dir)
    if is_primary():
        barrier("dataset prepared")
    return data


def build(cfg: DictConfig) -> Run:
    validate(cfg)
    mode = make_mode(cfg.parallel, select_devices(cfg.parallel, cfg.distributed))  # before any JAX work
    setup_compilation_cache(cfg.paths.compilation_cache_dir)
    check_batch_divides(cfg.trainer.batch_size, mode.num_devices)
    data = load_dataset_once(cfg.dataset, cfg.paths.data_dir)
    task = TASKS[data.task]
    stream = TrainStream(data.splits["train"], cfg.trainer.batch_size, cfg.seed)
    total_steps = total_steps_for(cfg.trainer, stream.steps_per_epoch)
    check_run_length(cfg, total_steps)
    privacy = plan_privacy(cfg, data.splits["train"], total_steps, mode.num_devices)
    if privacy:  # Poisson-sampled batches; the budget may end the run early
        stream, total_steps = privacy.stream, privacy.total_steps
    model = mode.prepare_model(build_model(cfg, data))
    tx = build_optimizer(cfg, total_steps)
    graphdef, host_state = create_state(model, tx, cfg.seed)
    unroll = jax.default_backend() == "cpu" and any(isinstance(m, nnx.Conv) for _, m in model.iter_modules())
    gradients = privacy.gradients(model, graphdef, task, mode.axis_name) if privacy else None
    train_chunk, eval_step, zero_sums = make_steps(graphdef, task, tx, mode.axis_name, unroll=unroll,
                                                   gradients=gradients)
    if cfg.trainer.ema_decay is not None:  # every eval (periodic, final, eval.py) scores the averaged parameters
        eval_step = evaluating_averaged(eval_step)
    eval_batch_size = round_up(cfg.trainer.eval_batch_size, mode.num_devices)
    periodic_first = sorted((s for s in data.splits if s != "train"), key=lambda s: s != data.eval_split)
    host_batches = {s: eval_batches(data.splits[s], eval_batch_size) for s in periodic_first}
    train_fn, eval_fn = mode.compile(train_chunk, eval_step, host_state)
    # Measured (docs/benchmarks.md): K=10 runs linear ~2x and MLP ~1.2x faster than one step per call;
    # unrolled convnets pay compile time per step instead, so they keep K=1.
    steps_per_call = cfg.trainer.steps_per_call or (1 if unroll else 10)
    compiled = Compiled(mode, train_fn, eval_fn, zero_sums(host_state, host_batches["test"][0]), task, steps_per_call)
    eval_sets = {s: ([mode.put_batch(b) for b in batches], len(data.splits[s])) for s, batches in host_batches.items()}
    return Run(data, stream, host_state, compiled, eval_sets, total_steps, privacy)


def objective_of(cfg: DictConfig, results: dict, task):
    """What a sweeper optimises: `optimized_metric` ('validation/accuracy'; a list of names gives one value each,
    for a multi-objective sweep) or the task's default."""
    names = cfg.optimized_metric or f"test/{task.objective}"
    if isinstance(names, str):
        return _result_value(names, results)
    return [_result_value(str(name), results) for name in names]


def _result_value(name: str, results: dict) -> float:
    split, _, metric = name.partition("/")
    try:
        value = float(results[split][metric] if metric else results[split])
    except (KeyError, TypeError):
        choices = [f"{s}/{m}" for s in ("test", "validation", "train") for m in results.get(s, {})]
        raise UserError(f"optimized_metric={name!r} is not in the results; use one of {choices}.") from None
    if not np.isfinite(value):  # a sweeper given NaN would end the whole sweep; raising fails this trial only
        raise NonFiniteLoss(f"the objective {name} is {value}; lower optimizer.learning_rate or set trainer.clip_norm.")
    return value


def _saver(cfg: DictConfig, ckpts, stream: TrainStream, early=None):
    """save(step, host state, host sums, eval metrics): refuses non-finite params, so the latest is good."""
    config = OmegaConf.to_container(cfg, resolve=True)

    def save(step, state, sums, eval_metrics=None, wait=False):
        if ckpts is None or step in ckpts.steps():  # a finished run evaluated again
            return
        host_state = jax.device_get(state)
        if not all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(host_state.params)):
            raise NonFiniteLoss(f"parameters became non-finite by step {step}; the checkpoint was not written "
                                "— lower optimizer.learning_rate or set trainer.clip_norm.")
        epoch, index = stream.position(step)  # informative: the step alone decides the next batch
        meta = {"step": step, "epoch": epoch, "index": index, "metrics": eval_metrics, "config": config}
        if early is not None:  # patience survives a preemption
            meta["early_stopping"] = early.state_dict()
        ckpts.save(step, {"state": host_state, "sums": sums}, meta, metrics=eval_metrics)
        if wait:
            ckpts.wait()

    return save


def train(cfg: DictConfig) -> dict:
    t0 = time.perf_counter()
    run = build(cfg)
    compiled, mode, out_dir = run.compiled, run.compiled.mode, cfg.paths.output_dir
    ckpts, settings = None, checkpoint_settings(cfg, compiled.task)
    if cfg.checkpoint.enabled:
        ckpts = Checkpoints(os.path.join(out_dir, "checkpoints"), **settings)
    if ckpts is None and os.path.exists(os.path.join(out_dir, "results.json")):
        raise UserError(f"hydra.run.dir={out_dir} already holds a finished run and checkpoint.enabled=false; "
                        "choose a new hydra.run.dir.")
    target = {"state": run.host_state, "sums": compiled.zero_sums}
    start_step, restored, meta = find_start(cfg, ckpts, target)
    host_state, sums = (run.host_state, None) if restored is None else (restored["state"], restored["sums"])
    early = early_stopping_for(cfg, settings)
    if early is not None and meta:
        early.load_state_dict(meta.get("early_stopping"))
    logger = RunLogger(out_dir, cfg.logger, run.total_steps, start_step=start_step, enabled=is_primary(),
                       learning_rate=learning_rate_at(cfg, run.total_steps))
    if run.privacy:
        logger = EpsilonLogger(logger, run.privacy)
    save = _saver(cfg, ckpts, run.stream, early)
    state = mode.put_state(host_state)
    model = describe(cfg, run, state, logger)
    if cfg.trainer.ema_decay is not None:
        log.info("evals use the exponential moving average of the parameters (trainer.ema_decay=%s)",
                 cfg.trainer.ema_decay)
    if cfg.trainer.profile:
        jax.profiler.start_trace(os.path.join(out_dir, "profile"))
    try:
        with stop_on_signals() as stop:
            end = start_step if early and early.stopped_step else run.total_steps  # a stopped run stays stopped
            state, train_metrics, examples_per_s, step = fit(
                state, compiled, run.stream, run.eval_sets, cfg.trainer, end, logger, start_step=start_step,
                sums=sums, save=save, stop=stop, on_eval=eval_reporter(cfg, compiled.task),
                stop_early=early.update if early else None)
        if stop:
            if ckpts:
                ckpts.wait()
            raise Preempted(step, stop.signum, os.path.abspath(out_dir))
        results = {"train": train_metrics or logger.last("train")}
        if early is not None:
            if early.stopped_step is None:  # the final state competes for the best checkpoint too
                batches, count = next(iter(run.eval_sets.values()))
                save(run.total_steps, mode.get(state), compiled.zero_sums, evaluate(state, compiled, batches, count))
            best_step, state = restore_best(ckpts, target, mode)
            results["early_stopping"] = {**early.state_dict(), "best_checkpoint_step": best_step}
        for split, (batches, count) in run.eval_sets.items():
            results[split] = evaluate(state, compiled, batches, count)
            logger.log(step, split, results[split])
        if early is None:
            save(run.total_steps, mode.get(state), compiled.zero_sums, results[next(iter(run.eval_sets))], wait=True)
    finally:
        if cfg.trainer.profile:
            jax.profiler.stop_trace()
        if ckpts:
            ckpts.close()
    results.update(steps=step, start_step=start_step, wall_time_s=time.perf_counter() - t0,
                   examples_per_s=examples_per_s, devices=mode.num_devices, parallel=cfg.parallel.mode)
    results["model"] = {**model, "achieved_gflop_s": achieved_gflop_s(model, run.stream.batch_size, examples_per_s)}
    if cfg.trainer.ema_decay is not None:
        results["eval_params"] = f"exponential moving average, trainer.ema_decay={cfg.trainer.ema_decay}"
    if run.privacy:
        results["privacy"] = run.privacy.record(step)  # the steps run: early stopping may end sooner
    results["objective"] = objective_of(cfg, results, compiled.task)
    logger.write_results(results)
    logger.close("accuracy" if run.data.task == "classification" else "r2")
    if early is not None:
        log.info("final metrics are those of the best checkpoint, step %d",
                 results["early_stopping"]["best_checkpoint_step"])
    log.info("test: %s", metric_summary(results["test"]))
    log.info("run directory: %s", os.path.abspath(out_dir))
    return {**results, "state": mode.get(state)}
