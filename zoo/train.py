"""train(cfg) -> results: an ordinary function; train.py wraps it for Hydra and the tests call it directly."""
import functools
import json
import logging
import os
import signal
import time
from dataclasses import dataclass

import jax
from flax import nnx
from omegaconf import DictConfig, OmegaConf

from zoo.cli import complete_despite_sigterm, exit_if_a_process_is_lost, unwritable_reason
from zoo.config import validate
from zoo.data import Dataset, TrainStream, eval_batches, load_dataset
from zoo.data.feed import TrainFeed, fits_on_device
from zoo.errors import UserError
from zoo.loop import DEFAULT_STEPS_PER_CALL, Compiled, call_length, divergence_advice, evaluate, fit, total_steps_for
from zoo.early_stopping import restore_best
from zoo.ema import evaluating_averaged
from zoo.optim import build_optimizer, check_run_length
from zoo.outputs import open_outputs
from zoo.parallel import check_batch_divides, make_mode, round_up, select_devices
from zoo.parallel.distributed import check_same_run, failed_processes, is_primary
from zoo.preemption import preempted, stop_on_signals
from zoo.privacy.plan import PrivacyPlan, plan_privacy
from zoo.startup import stops_on_sigterm_as_on_ctrl_c
from zoo.state import TrainState, create_state
from zoo.steps import PackedSums, make_steps, over_leaves
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
    feed: TrainFeed  # the stream as compiled calls take it: indices into a resident split, or host batches
    host_state: TrainState  # unreplicated, as checkpoints store it
    compiled: Compiled
    eval_sets: dict  # split -> (device batches, example count); the periodic split first
    total_steps: int
    privacy: PrivacyPlan | None = None  # privacy=dpsgd


def setup_compilation_cache(path) -> None:
    if path:
        path = os.path.expanduser(path)
        reason = unwritable_reason(path)
        if reason:  # JAX would warn at each program it could not cache, naming neither the setting nor a remedy
            log.warning("paths.compilation_cache_dir=%s cannot be written (%s), so compiled programs are not cached; "
                        "set it to a writable directory, or to null to turn the cache off", path, reason)
            return
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def build_model(cfg: DictConfig, data: Dataset, key=None) -> nnx.Module:
    """`key`: the parameters' PRNG key where it is traced (a population's members), else jax.random.key(seed)."""
    try:
        return _new_model(cfg.model, data.input_shape, data.out_features, cfg.seed if key is None else key)
    except UserError as e:
        model_name = str(cfg.model.get("_target_", "?")).rsplit(".", 1)[-1].lower()
        raise UserError(f"model={model_name} cannot be built for dataset={cfg.dataset.name} (inputs "
                        f"{data.input_shape}): {e}; model=linear and model=mlp take any input.") from None


def _new_model(node, input_shape, out_features, seed_or_key) -> nnx.Module:
    return safe_instantiate(node, "model", input_shape=input_shape, out_features=out_features,
                            rngs=nnx.Rngs(params=seed_or_key))


def model_initialiser(cfg: DictConfig, data: Dataset) -> tuple:
    """(graphdef, key -> the model's state drawn by one compiled program). Built eagerly, a model runs its
    initialisers op by op, each op and shape a program of its own to compile: the default MLP's 11 took 1.8 s on a
    cold compilation cache, the one 1.2 s. The draws are bitwise the eager ones (tests/test_training.py)."""
    graphdef = nnx.split(nnx.eval_shape(lambda: build_model(cfg, data)))[0]  # refuses a model the data cannot take
    model = json.dumps(OmegaConf.to_container(cfg.model, resolve=True), sort_keys=True)
    return graphdef, _compiled_initialiser(model, tuple(data.input_shape), data.out_features)


@functools.lru_cache(maxsize=8)
def _compiled_initialiser(model: str, input_shape: tuple, out_features):
    """One initialiser per model config and data shape in a process, so that a sweep's later jobs (seeds, learning
    rates) find it traced and compiled: a new one each run was traced, lowered and looked up in the compilation
    cache again (~0.35 s a job on a TPU v5e). It holds the config's JSON, not the run's config or data."""
    node = OmegaConf.create(json.loads(model))
    return jax.jit(lambda key: nnx.state(_new_model(node, input_shape, out_features, key)))


def initialised_model(cfg: DictConfig, data: Dataset) -> nnx.Module:
    graphdef, init = model_initialiser(cfg, data)
    return nnx.merge(graphdef, init(jax.random.key(cfg.seed)))


def unrolled_on_cpu(model: nnx.Module) -> bool:
    """Convnets on CPU run one unrolled step per call: XLA:CPU runs their convolutions slower inside a loop."""
    return jax.default_backend() == "cpu" and any(isinstance(m, nnx.Conv) for _, m in model.iter_modules())


def default_steps_per_call(unroll: bool) -> int:
    # unrolled convnets pay compile time per step instead, so they keep K=1
    return 1 if unroll else DEFAULT_STEPS_PER_CALL


def eval_host_batches(data: Dataset, batch_size: int, multiple: int = 1) -> dict:
    """split -> padded host batches for every eval split, the periodic one (data.eval_split) first. A batch
    larger than the largest split shrinks to it (rounded up to `multiple`): padding rows cost memory and time,
    and one shape for every split keeps a single compiled eval program."""
    periodic_first = sorted((s for s in data.splits if s != "train"), key=lambda s: s != data.eval_split)
    batch_size = min(batch_size, round_up(max(len(data.splits[s]) for s in periodic_first), multiple))
    return {s: eval_batches(data.splits[s], batch_size) for s in periodic_first}


def eval_step_for(cfg: DictConfig, eval_step):
    """With trainer.ema_decay every eval (periodic, final, eval.py) scores the averaged parameters."""
    return eval_step if cfg.trainer.ema_decay is None else evaluating_averaged(eval_step)


def result_extras(cfg: DictConfig, step: int, start_step: int, wall_time_s: float, examples_per_s: float,
                  devices: int, model: dict, batch_size: int) -> dict:
    """What results.json holds besides the metrics: the run's length, speed, devices and model summary."""
    return dict(steps=step, start_step=start_step, wall_time_s=wall_time_s, examples_per_s=examples_per_s,
                devices=devices, parallel=cfg.parallel.mode,
                model={**model, "achieved_gflop_s": achieved_gflop_s(model, batch_size, examples_per_s)},
                **ema_note(cfg))


def ema_note(cfg: DictConfig) -> dict:
    """What results.json says about the parameters its metrics were computed with."""
    if cfg.trainer.ema_decay is None:
        return {}
    return {"eval_params": f"exponential moving average, trainer.ema_decay={cfg.trainer.ema_decay}"}


def log_ema(cfg: DictConfig) -> None:
    if cfg.trainer.ema_decay is not None:
        log.info("evals use the exponential moving average of the parameters (trainer.ema_decay=%s)",
                 cfg.trainer.ema_decay)


def load_dataset_once(dataset_cfg, data_dir: str, new_run: bool = True) -> Dataset:
    """In multi-process runs process 0 prepares the data; the others read it once it is complete. A process that
    could not load it says why, and the others stop with a sentence naming it (they would wait at their next
    collective, then fail in a gloo traceback)."""
    def stop_if_failed(ok: bool) -> None:
        failed = failed_processes(ok)
        if ok and failed:
            raise UserError(f"process {failed[0]} could not load dataset={dataset_cfg.name} (its output says why); "
                            "this process stops with it.")

    if not is_primary():
        stop_if_failed(True)  # (1) released once process 0 has prepared it
    try:
        data = load_dataset(dataset_cfg, data_dir, new_run)
    except Exception:  # a sentence, or a damaged copy: the others stop too
        stop_if_failed(False)  # in place of the (1) or (2) this process would have met next
        raise
    stop_if_failed(True)  # process 0: (1), the others: (2)
    if is_primary():
        stop_if_failed(True)  # (2) once the others have read it
    return data


def build(cfg: DictConfig, for_training: bool = True) -> Run:
    """Everything a run needs; eval.py and export.py build a finished run's (for_training=False) on devices
    that need not divide its train batch, since eval batches are padded."""
    validate(cfg, new_run=for_training)
    # before any JAX work; a training run's processes hold their distributed.process_id in its dir, as they join
    explicit = for_training and OmegaConf.select(cfg, "distributed.mode") == "explicit"
    devices = select_devices(cfg.parallel, cfg.distributed, cfg.paths.output_dir if explicit else None)
    mode = make_mode(cfg.parallel, devices)
    if for_training and jax.process_count() > 1:
        check_same_run(cfg.paths.output_dir, OmegaConf.to_container(cfg, resolve=True))
    setup_compilation_cache(cfg.paths.compilation_cache_dir)
    data = load_dataset_once(cfg.dataset, cfg.paths.data_dir, for_training)
    task = TASKS[data.task]
    stream = TrainStream(data.splits["train"], cfg.trainer.batch_size, cfg.seed, cfg.dataset.validation_fraction)
    # after the stream has refused a batch above the train split, so that the sizes named fit the split
    if for_training and cfg.privacy.mode != "dpsgd":
        check_batch_divides(cfg.trainer.batch_size, mode.num_devices, len(data.splits["train"]))
    total_steps = total_steps_for(cfg.trainer, stream.steps_per_epoch, warn=for_training)
    check_run_length(cfg, total_steps, stream.steps_per_epoch)
    # a finished run's checkpoint is read, not trained on: its training plan would only be logged again, misleading
    privacy = plan_privacy(cfg, data.splits["train"], total_steps, mode.num_devices) if for_training else None
    if privacy:  # Poisson-sampled batches; the budget may end the run early
        stream, total_steps = privacy.stream, privacy.total_steps
    model = mode.prepare_model(initialised_model(cfg, data))
    tx = build_optimizer(cfg, total_steps)
    graphdef, host_state = create_state(model, tx, cfg.seed)
    unroll = unrolled_on_cpu(model)
    gradients = privacy.gradients(model, graphdef, task, mode.axis_name, mode.num_devices) if privacy else None
    train_chunk, eval_step, zero_sums = make_steps(graphdef, task, tx, mode.axis_name, unroll=unroll,
                                                   gradients=gradients)
    eval_step = eval_step_for(cfg, eval_step)
    host_batches = eval_host_batches(data, round_up(cfg.trainer.eval_batch_size, mode.num_devices), mode.num_devices)
    treedef = jax.tree.structure(host_state)
    zeros = zero_sums(host_state, host_batches["test"][0])
    packed = PackedSums(zeros)
    train_fn, eval_fn = mode.compile(over_leaves(train_chunk, treedef, packed), eval_step, host_state)
    steps_per_call = cfg.trainer.steps_per_call or default_steps_per_call(unroll)
    compiled = Compiled(mode, train_fn, eval_fn, zeros, task, treedef, packed, steps_per_call)
    eval_sets = {s: ([mode.put_batch(b) for b in batches], len(data.splits[s])) for s, batches in host_batches.items()}
    feed = TrainFeed(stream, mode, fits_on_device(stream.split, cfg.parallel.device_data_mb))
    return Run(data, stream, feed, host_state, compiled, eval_sets, total_steps, privacy)


def train(cfg: DictConfig) -> dict:
    t0 = time.perf_counter()
    run = build(cfg)
    compiled, mode = run.compiled, run.compiled.mode
    out = open_outputs(cfg, compiled.task, run.stream, run.total_steps, run.host_state, compiled.zero_sums,
                       run.privacy)
    if out.recorded is not None:  # finished before this command, with these settings
        try:  # with early stopping the run reports its best checkpoint, not its last
            state = out.host_state if out.early is None else restore_best(out.ckpts, out.target)[1]
        finally:
            out.close()
        return {**out.recorded, "state": state}
    state = mode.put_state(out.host_state)
    saving = out.ckpts is not None  # without checkpoints the calls are not split, nor the state copied, for them
    model = describe(cfg, run, state, out.logger, call_length(cfg.trainer, compiled.steps_per_call,
                                                                  out.end_step - out.start_step, saving=saving))
    log_ema(cfg)
    if cfg.trainer.profile:
        jax.profiler.start_trace(os.path.join(cfg.paths.output_dir, "profile"))
    # held until the outputs are closed: a signal while the run finishes, or while it closes its checkpoints and
    # logs (its results written), lets it finish; killed there it ended with 143 without a word
    with stop_on_signals() as stop:
        try:
            state, train_metrics, examples_per_s, step = fit(
                state, compiled, run.feed, run.eval_sets, cfg.trainer, out.end_step, out.logger,
                start_step=out.start_step, sums=out.sums, save=out.save if saving else None, stop=stop,
                on_eval=eval_reporter(cfg, compiled.task), stop_early=out.early.update if out.early else None,
                eval_at_start=out.eval_at_start, advice=divergence_advice(cfg))
            if stop and step < out.end_step:  # stopped before its end, and saved there
                if out.ckpts:
                    out.ckpts.wait()
                raise preempted(step, stop.signum, cfg.paths.output_dir, saved=out.ckpts is not None,
                                resume_never=cfg.trainer.resume == "never")
            results, state = _finish(cfg, run, out, state, step, train_metrics, examples_per_s, model, t0)
        except Exception as e:  # closing the outputs would wait for a lost process's part of the last checkpoint
            exit_if_a_process_is_lost(e, cfg.paths.output_dir)
            raise
        finally:
            if cfg.trainer.profile:
                jax.profiler.stop_trace()
            out.close()
        if stop:  # the signal came while the complete run finished: finishing was quicker than stopping
            log.info("%s arrived while the run finished; it completed first", signal.Signals(stop.signum).name)
    if stops_on_sigterm_as_on_ctrl_c():  # train.py's single run is complete: a SIGTERM from here on ends it so, exit 0
        complete_despite_sigterm()  # (the handler stop_on_signals gave back raised inside whatever ran, a GC callback)
    return {**results, "state": mode.get(state)}


def _finish(cfg: DictConfig, run: Run, out, state, step: int, train_metrics: dict, examples_per_s: float, model: dict,
            t0: float):
    """(results, the state reported): a run trained to its end gets its final evals, checkpoint and results.json."""
    compiled, mode = run.compiled, run.compiled.mode
    if out.early is not None:
        periodic = None
        if out.early.stopped_step is None:
            periodic = evaluate(state, compiled, *next(iter(run.eval_sets.values())))
        state = mode.put_state(out.reported_state(mode.get(state), periodic, next(iter(run.eval_sets))))
    split_metrics = {split: evaluate(state, compiled, batches, count)
                     for split, (batches, count) in run.eval_sets.items()}
    extras = result_extras(cfg, step, out.start_step, time.perf_counter() - t0, examples_per_s, mode.num_devices,
                           model, run.stream.batch_size)
    if run.privacy:
        extras["privacy"] = run.privacy.record(step)  # the steps run: early stopping may end sooner
    return out.finish(step, train_metrics, split_metrics, mode.get(state), **extras), state
