"""train_population(cfgs): a group of a sweep's trials trained together as one vmapped program.

Each member keeps everything its solo run has — its own seed (initialisation, data order, dropout keys), its
own optimizer settings, its own run directory with the same checkpoints, logs and results.json — so
eval.py, resume and the sweep summary treat it as the solo run it equals.
"""
import functools
import logging
import signal
import time

import jax
import numpy as np
from flax import nnx
from omegaconf import OmegaConf

from zoo.cli import as_job
from zoo.config import validate
from zoo.data import TrainStream
from zoo.data.feed import MB, fits_on_device, fold_mask, split_bytes
from zoo.errors import UserError
from zoo.loop import total_steps_for
from zoo.optim import build_optimizer, check_run_length, hyperparameters
from zoo.outputs import open_outputs
from zoo.parallel import check_batch_divides, cpu_cores, select_devices
from zoo.population.grouping import check_one_group
from zoo.population.logs import MemberLogs, member_lines
from zoo.population.loop import CheckpointWriter, Member, evaluate_members, first_call, fit_population
from zoo.population.program import PopulationProgram, member, stack
from zoo.preemption import preempted, stop_on_signals
from zoo.state import create_state
from zoo.steps import make_steps
from zoo.summary import count_parameters, report, step_flops
from zoo.sweeps.trial_link import eval_reporter
from zoo.tasks import TASKS
from zoo.train import (build_model, default_steps_per_call, eval_host_batches, eval_step_for, load_dataset_once,
                       log_ema, model_initialiser, result_extras, setup_compilation_cache, unrolled_on_cpu)

log = logging.getLogger("zoo")


def check_population_settings(cfg) -> None:
    """What a population cannot train: one sentence naming the setting, before any JAX work."""
    if cfg.parallel.mode == "pmap":
        raise UserError("hydra/launcher=population spreads its members over devices with parallel=sharded; "
                        "parallel=pmap cannot, so use parallel=sharded or parallel=none.")
    if cfg.distributed.mode != "none":
        raise UserError("hydra/launcher=population trains in one process; set distributed=none (or use "
                        "hydra/launcher=basic for multi-process runs).")
    if cfg.trainer.profile:
        raise UserError("hydra/launcher=population trains its members as one program, not one profile per trial; "
                        "set trainer.profile=false (or use hydra/launcher=basic to profile each trial).")
    if cfg.parallel.get("fsdp"):
        raise UserError("hydra/launcher=population shards its members over devices, not their parameters; set "
                        "parallel.fsdp=false (or use hydra/launcher=basic for sharded parameters).")
    if cfg.privacy.mode != "none":
        raise UserError("hydra/launcher=population does not train privacy=dpsgd members (their Poisson-sampled "
                        "batches differ in size); use hydra/launcher=basic.")
    objectives = cfg.optimized_metric if OmegaConf.is_list(cfg.optimized_metric) else [cfg.optimized_metric]
    timed = [str(name) for name in objectives if str(name) in ("wall_time_s", "examples_per_s")]
    if timed:
        raise UserError(f"optimized_metric names {timed[0]}, which a population's members share (they train as one "
                        "program, in one time); use hydra/launcher=basic to optimise time.")


def trains_alone(cfg) -> str | None:
    """Why trials of this config train faster one after another than as a population, or None. Convnets on
    CPU: XLA:CPU runs a vmapped convolution as one grouped convolution, slower than the members' convolutions one
    after another (4 digits CNNs' steps 32 ms against 23 ms), and over two devices it gathers the members onto
    each first (75 ms); on an accelerator they train as one population. An optimizer whose state holds a random
    key (optax.noisy_sgd) trains job by job on any backend."""
    try:
        data = _group_dataset(cfg)
        model = nnx.eval_shape(lambda: build_model(cfg, data))
        total_steps = total_steps_for(cfg.trainer, max(1, len(data.splits["train"]) // cfg.trainer.batch_size),
                                      warn=False)
        opt_state = jax.eval_shape(build_optimizer(cfg, total_steps).init, nnx.state(model, nnx.Param))
    except Exception:  # noqa: BLE001 — the jobs themselves report what fails, as they would in a population
        return None
    if any(jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) for leaf in jax.tree.leaves(opt_state)):
        return f"{cfg.optimizer._target_}'s state holds a random key, which a population cannot stack"
    if jax.default_backend() == "cpu" and unrolled_on_cpu(model):
        return "on a CPU, vmapped convolutions are slower than each trial's own"
    return None


_last_dataset = {}  # (dataset settings, data dir) -> Dataset: the latest group's only


def _group_dataset(cfg):
    """The dataset of a group: the launcher's trains_alone check and the group's training read it once."""
    key = (OmegaConf.to_yaml(cfg.dataset), cfg.paths.data_dir)
    if key not in _last_dataset:
        _last_dataset.clear()
        _last_dataset[key] = load_dataset_once(cfg.dataset, cfg.paths.data_dir)
    return _last_dataset[key]


def train_population(cfgs: list, hydra_cfgs: list | None = None) -> list:
    """One outcome per config: its results (as train() returns them, without the state) or the exception that
    ended that member alone. `hydra_cfgs` are the members' Hydra configs (for their sweep trial's pruner and
    what a stop tells them to rerun)."""
    hydra_cfgs = hydra_cfgs or [None] * len(cfgs)
    outcomes, valid = [None] * len(cfgs), []
    for i, cfg in enumerate(cfgs):
        try:
            validate(cfg)
            valid.append(i)
        except UserError as e:  # a bad value in one trial fails that trial, as it would alone
            outcomes[i] = e
    if valid:
        trained = _train_valid([cfgs[i] for i in valid], [hydra_cfgs[i] for i in valid])
        for i, outcome in zip(valid, trained):
            outcomes[i] = outcome
    return outcomes


def _train_valid(cfgs: list, hydra_cfgs: list) -> list:
    t0 = time.perf_counter()
    check_one_group(cfgs)
    cfg = cfgs[0]
    check_population_settings(cfg)
    devices = select_devices(cfg.parallel, cfg.distributed)
    solo_devices = len(devices) if cfg.parallel.mode == "sharded" else 1  # what each member's solo run splits over
    setup_compilation_cache(cfg.paths.compilation_cache_dir)
    data = _group_dataset(cfg)
    task, train_split = TASKS[data.task], data.splits["train"]
    if not fits_on_device(train_split, cfg.parallel.device_data_mb):
        size_mb = split_bytes(train_split) / MB
        raise UserError(f"hydra/launcher=population keeps the train split on the device, and dataset="
                        f"{cfg.dataset.name}'s ({size_mb:.3g} MB) exceeds parallel.device_data_mb="
                        f"{cfg.parallel.device_data_mb}; raise that limit or use hydra/launcher=basic, which "
                        "streams it from the host.")
    devices = member_devices(cfg, devices, len(cfgs), train_split)
    streams = [TrainStream(train_split, cfg.trainer.batch_size, c.seed, cfg.dataset.validation_fraction)
               for c in cfgs]
    # each member's solo run refuses a batch that does not divide over its devices (after the stream has refused
    # one above the train split, so that the sizes named fit the split)
    check_batch_divides(cfg.trainer.batch_size, solo_devices, len(train_split))
    total_steps = total_steps_for(cfg.trainer, streams[0].steps_per_epoch, warn=False)  # warned in each train.log
    check_run_length(cfg, total_steps, streams[0].steps_per_epoch)
    models = _member_models(cfg, data, [c.seed for c in cfgs])
    initial = [create_state(model, build_optimizer(c, total_steps), c.seed) for model, c in zip(models, cfgs)]
    graphdef = initial[0][0]
    # over the whole group: a dropout rate all members share is a constant of member 0's graphdef, whoever
    # of them fails to open its outputs below
    hypers = member_hyperparameters(cfgs)
    unroll = unrolled_on_cpu(models[0])
    optimizer = functools.partial(_member_optimizer, cfg, total_steps)
    train_chunk, eval_step, zero_sums = make_steps(graphdef, task, optimizer, unroll=unroll, members=True)
    eval_step = eval_step_for(cfg, eval_step)
    host_batches = eval_host_batches(data, cfg.trainer.eval_batch_size)
    zero = zero_sums(initial[0][1], host_batches["test"][0])
    members, outcomes, logs, program = [], [None] * len(cfgs), MemberLogs(), None
    try:  # every member opened is closed, whatever ends the group
        for i, (c, (_, host_state)) in enumerate(zip(cfgs, initial)):
            out = None
            logs.open(c.paths.output_dir, hydra_cfgs[i])
            try:
                with member_lines(c.paths.output_dir), as_job(hydra_cfgs[i]):  # its lines go to its own train.log
                    total_steps_for(c.trainer, streams[i].steps_per_epoch)  # a max_steps past its epochs, as alone
                    out = open_outputs(c, task, streams[i], total_steps, host_state, zero, population_member=True)
                if out.recorded is not None:  # finished before this command: it reports its results.json
                    outcomes[i] = out.recorded
                    out.close()
                    logs.close(c.paths.output_dir)
                    continue
                members.append((i, Member(out, streams[i], eval_reporter(c, task, hydra_cfgs[i]), hydra_cfgs[i])))
            except BaseException as e:  # e.g. its run dir holds another run's checkpoints: this member alone fails
                logs.close(c.paths.output_dir)  # nothing of the group goes into another run's log
                if out is not None:
                    out.close()
                if not isinstance(e, Exception):  # a stop (Ctrl-C, SIGTERM) ends the group
                    raise
                outcomes[i] = e  # as its job under the basic launcher: the others train
        if not members:
            return outcomes
        run = [m for _, m in members]
        program = PopulationProgram(devices, train_chunk, eval_step, train_split, zero, len(members))
        steps_per_call = default_steps_per_call(unroll)
        start, length = first_call(run, cfg.trainer, total_steps, steps_per_call)
        eval_batch = next(iter(host_batches.values()))[0]  # every split's batches share its shape
        program.compile_ahead(initial[0][1], hypers[members[0][0]], length, cfg.trainer.batch_size, eval_batch,
                              train=start < total_steps)
        eval_sets = {s: ([program.put_replicated(b) for b in batches], len(data.splits[s]))
                     for s, batches in host_batches.items()}
        model = count_parameters(initial[0][1].params)
        if cfg.logger.summary:  # FLOPs of one member's solo step from the resident split, as its solo run counts
            solo_step = jax.jit(functools.partial(train_chunk, hyper=hypers[0]))
            state, one_step = initial[0][1], {"idx": fold_mask(*streams[0].indices(0, 1))}
            rows = {"x": train_split.x, "y": train_split.y}
            model.update(step_flops(solo_step, (state, zero, one_step, rows), jax.jit(eval_step),
                                    (state, zero, eval_batch), 1))
        model = report(cfg, model, cfg.trainer.batch_size, [m.outputs.logger for m in run])
        _train(program, run, [cfgs[i] for i, _ in members], [hypers[i] for i, _ in members], task, total_steps,
               eval_sets, model, t0, steps_per_call)
    finally:
        try:
            if program is not None:
                program.close()
            for _, m in members:
                m.outputs.close()
        finally:  # a failed close must not leave the members' log files attached to later jobs
            logs.close_all()
    for i, m in members:
        outcomes[i] = m.error if m.error is not None else m.results
    return outcomes


def _member_models(cfg, data, seeds: list) -> list:
    """Each member's model, its parameters drawn by one compiled initialiser for all, as in each member's solo
    run; the members share `cfg`'s structure (check_one_group), and what differs between them (optimizer
    settings, dropout rate) is not the model's parameters."""
    graphdef, init = model_initialiser(cfg, data)
    return [nnx.merge(graphdef, init(jax.random.key(seed))) for seed in seeds]


def member_devices(cfg, devices: list, members: int, train_split) -> list:
    """The devices the population axis is spread over: parallel=sharded's devices, or one with parallel=none.
    On CPU without parallel.cpu_devices, whatever the mode: up to one CPU device per core, as few as give each
    the same number of members (no padding where it can be helped), and only as many as can each hold a copy
    of the train split within parallel.device_data_mb (CPU devices share the host's memory). XLA:CPU runs one
    program's small batched matmuls on about one core: 16 digits MLPs trained ~1.4x faster as two devices'
    halves than as one program (docs/benchmarks.md, Populations)."""
    if jax.default_backend() == "cpu" and cfg.parallel.cpu_devices is None and jax.process_count() == 1:
        cpus = jax.local_devices(backend="cpu")
        copies = int(cfg.parallel.device_data_mb * MB // max(split_bytes(train_split), 1))
        most = max(1, min(cpu_cores(), members, copies, len(cpus)))
        per_device = -(-members // most)  # members each device trains, rounded up
        return cpus[:-(-members // per_device)]  # as few devices as hold them at that many each
    return devices if cfg.parallel.mode == "sharded" else devices[:1]


def member_hyperparameters(cfgs: list) -> list:
    """Each member's traced hyperparameters: those the members set differently. A value all share stays a Python
    number, as in a solo run: a traced dropout rate draws masks on every step, at rate 0 too, and optax's
    schedules and optimizers may branch on their settings' values."""
    hypers = [hyperparameters(c) for c in cfgs]
    for name in list(hypers[0]["optimizer"]):
        if len({h["optimizer"][name] for h in hypers}) == 1:
            for h in hypers:
                del h["optimizer"][name]
    if len({h.get("dropout") for h in hypers}) == 1:
        for h in hypers:
            h.pop("dropout", None)
    return hypers


def _member_optimizer(cfg, total_steps: int, hyper: dict):
    """A member's optax transformation, built inside the traced step from its hyperparameters."""
    return build_optimizer(cfg, total_steps, hyper["optimizer"])


def _padded(trees: list, size: int) -> list:
    return trees + [trees[0]] * (size - len(trees))  # frozen copies: their rows are always masked


def _train(program, run: list, cfgs: list, hypers: list, task, total_steps: int, eval_sets: dict, model: dict,
           t0: float, steps_per_call: int) -> None:
    cfg = cfgs[0]
    states = program.put_members(stack(_padded([m.outputs.host_state for m in run], program.size)))
    accs = program.put_members(stack(_padded([m.outputs.sums or program.zero_sums for m in run], program.size)))
    hyper = program.put_members(jax.tree.map(lambda *v: np.array(_padded(list(v), program.size), np.float32),
                                             *hypers))
    periodic = next(iter(eval_sets))
    for c in cfgs:  # each train.log says what its evals use, as its solo run's does
        with member_lines(c.paths.output_dir):
            log_ema(c)
    log.info("population of %d members on %d device(s), %d steps", len(run), program.num_devices, total_steps)
    t_fit = time.perf_counter()
    # signals are held until the members finish: a signal then lets them finish
    with stop_on_signals() as stop, CheckpointWriter() as writer:
        states, step = fit_population(program, states, accs, run, hyper, cfg.trainer, total_steps, task,
                                      (periodic, *eval_sets[periodic]), stop, writer, steps_per_call)
        stopped = bool(stop)
        if stopped:  # a member the signal stopped before its end was saved there; one already complete finishes
            writer.wait()
            for m in (m for m in run if m.error is None and m.outputs.start_step < m.end and step < m.end):
                try:
                    if m.outputs.ckpts:
                        m.outputs.ckpts.wait()
                    at = max(step, m.outputs.start_step)  # a member still waiting for its resume step stays there
                    m.error = preempted(at, stop.signum, m.outputs.cfg.paths.output_dir, m.hydra_cfg,
                                        saved=m.outputs.ckpts is not None,
                                        resume_never=m.outputs.cfg.trainer.resume == "never")
                except UserError as e:  # its save at the stop failed: it alone reports that
                    m.error = e
            if all(m.error is not None for m in run):
                return
        _finish(program, run, cfgs, states, task, total_steps, eval_sets, model, t0, time.perf_counter() - t_fit,
                writer)
        if stop and not stopped:  # it came while the members finished: finishing was quicker than stopping
            log.info("%s arrived while the population finished; its complete members finished first",
                     signal.Signals(stop.signum).name)


def _finish(program, run: list, cfgs: list, states, task, total_steps: int, eval_sets: dict, model: dict, t0: float,
            fit_seconds: float, writer) -> None:
    """The members trained to their end get their final evals, checkpoints and results.json (m.results)."""
    periodic = next(iter(eval_sets))
    host = jax.device_get(states)
    if any(m.outputs.early is not None for m in run):
        writer.wait()  # early stopping reports a member's best checkpoint, read back from disk
    finals = _reported_states(program, run, host, periodic, eval_sets[periodic], task)
    placed = program.put_members(stack(_padded(finals, program.size)))
    split_metrics = {s: evaluate_members(program, placed, b, count, task, len(run)) for s, (b, count) in
                     eval_sets.items()}
    # the group's, to its final evals as a solo run's: its members trained together, none alone
    wall_time_s = time.perf_counter() - t0
    for i, m in enumerate(run):  # their curves.png are drawn by the drawing children while the saves run here
        if m.error is None:
            m.outputs.log_final(m.end, {s: v[i] for s, v in split_metrics.items()})
    _save_finals(run, finals, split_metrics, writer)
    for i, (m, c) in enumerate(zip(run, cfgs)):
        if m.error is not None:
            continue
        steps_run = sum(m.running_at(s) for s in range(m.outputs.start_step, total_steps))
        examples_per_s = steps_run * m.stream.batch_size / max(fit_seconds, 1e-9)
        extras = result_extras(c, m.end, m.outputs.start_step, wall_time_s, examples_per_s, program.num_devices, model,
                               m.stream.batch_size)
        extras["population"] = {"members": len(run), "member": i}
        try:
            with member_lines(c.paths.output_dir):
                m.results = m.outputs.finish(m.end, m.train_metrics, {s: v[i] for s, v in split_metrics.items()},
                                             member(host, i), **extras)
        except UserError as e:  # a non-finite objective fails this member only
            m.error = e


def _save_finals(run: list, finals: list, split_metrics: dict, writer) -> None:
    """Every member's final checkpoint written after the ones still due, then waited for: orbax writes each in the
    background, so the members' overlap. finish then finds the step saved and writes results.json."""
    due = [(i, m) for i, m in enumerate(run) if m.error is None and m.outputs.early is None]
    periodic = next(iter(split_metrics.values()))
    writes = []
    for i, m in due:
        try:  # non-finite parameters (here) or a full disk (on the writer) fail this member alone
            outputs = m.outputs
            writes.append((m, outputs.save.later(outputs.total_steps, finals[i], outputs.zero_sums, periodic[i])))
        except UserError as e:
            m.error = e
    writer.submit(writes)
    writer.wait()
    for _, m in due:
        try:
            if m.error is None and m.outputs.ckpts:
                m.outputs.ckpts.wait()
        except UserError as e:
            m.error = e


def _reported_states(program, run, host, periodic_split: str, periodic_set, task) -> list:
    """Each member's state to report: its final one, or with early stopping its best checkpoint's."""
    states = [member(host, i) for i in range(len(run))]
    if not any(m.outputs.early is not None and m.error is None for m in run):
        return states
    batches, count = periodic_set
    periodic = evaluate_members(program, program.put_members(host), batches, count, task, len(run))
    for i, m in enumerate(run):
        if m.error is None:
            try:
                with member_lines(m.outputs.cfg.paths.output_dir):
                    best = m.outputs.reported_state(states[i], periodic[i], periodic_split)
            except UserError as e:  # its best checkpoint cannot be written or read back: it alone fails
                m.error, best = e, None
            states[i] = states[i] if best is None else best
    return states
