"""evaluate(cfg): rebuild a finished run from its checkpoint's saved config and run the exact eval loop."""
import logging
import os

import jax
from omegaconf import DictConfig, OmegaConf

from zoo.checkpoint import Checkpoints, StateMismatch, restorable_steps, restore_latest_good
from zoo.cli import in_use_now, launch_dir_path, require_dir, unwritable_reason, write_stdout, written_whole
from zoo.config import (EvalConfig, ExportConfig, builder_name, check_known_keys, refuse_interpolations,
                        saved_with_defaults, validate, validate_placement)
from zoo.errors import UserError
from zoo.files import load_json, write_json
from zoo.loop import evaluate as eval_loop, metric_summary
from zoo.parallel import select_devices
from zoo.parallel.distributed import check_same_settings, is_primary
from zoo.resume import checkpoint_settings
from zoo.run_dirs import (a_commands_own_directory, a_folder_of_commands, a_multiruns_directory, export_origin,
                           holds_steps, run_choices, run_whose_checkpoints_hold, runs_below)
from zoo.targets import check_targets

log = logging.getLogger("zoo")


def _check_command(cfg: DictConfig, script: str) -> None:
    check_known_keys(cfg, {"eval.py": EvalConfig, "export.py": ExportConfig}[script])
    validate_placement(cfg)
    if OmegaConf.is_missing(cfg, "run_dir"):
        raise UserError(f"run_dir is required: python {script} run_dir=outputs/<date>/<time> (a training run's "
                        "directory).")
    for key in ("batch_size", "eval_batch_size"):
        if cfg.trainer[key] is not None and cfg.trainer[key] <= 0:
            raise UserError(f"trainer.{key} must be a positive integer or null, got {cfg.trainer[key]}.")
    if None not in (cfg.trainer.batch_size, cfg.trainer.eval_batch_size) and \
            cfg.trainer.batch_size != cfg.trainer.eval_batch_size:
        raise UserError(f"trainer.batch_size={cfg.trainer.batch_size} and trainer.eval_batch_size="
                        f"{cfg.trainer.eval_batch_size} both set the eval batch size; set one of them.")


def _open_checkpoints(run_dir: str) -> Checkpoints:
    require_dir(run_dir, "run_dir", "a training run")
    directory = os.path.join(run_dir, "checkpoints")
    ckpts = None
    if os.path.isdir(directory):  # a damaged one's way out is this command's own
        ckpts = Checkpoints(directory, read_only=True, way_out="pass another run_dir.")
    if ckpts is None or not ckpts.steps():
        if ckpts is not None:
            ckpts.close()
        raise UserError(_not_a_run(run_dir) or _training_now(run_dir) or _failed_before_a_checkpoint(run_dir) or
                        _finished_unsaved(run_dir) or _stopped_before_a_checkpoint(run_dir) or
                        _ended_before_a_checkpoint(run_dir) or
                        _refused_before_training(run_dir) or
                        f"run_dir={run_dir} has no complete checkpoint in checkpoints/; train it (with "
                        "checkpoint.enabled=true) or pass another run_dir.")
    return ckpts


def _training_now(run_dir: str):
    """A run training now that has not saved its first checkpoint yet (its command holds its directory): it has not
    ended, as the sentences below would say. A sentence, else None."""
    try:
        enabled = OmegaConf.load(os.path.join(run_dir, ".hydra", "config.yaml")).checkpoint.enabled
    except Exception:  # noqa: BLE001 — no record, or not a train config's: not known to be a run
        return None
    if enabled is not True or not in_use_now(run_dir):
        return None
    return (f"run_dir={run_dir} has no checkpoint yet and is in use by a command running now, a run still training; "
            "run this command again once it has saved its first checkpoint (every trainer.checkpoint_every steps, "
            "and at its end), or pass another run_dir.")


def _failed_before_a_checkpoint(run_dir: str):
    """A sweep's job that failed before its first checkpoint (failure.json says why): a sentence, else None."""
    failure = load_json(os.path.join(run_dir, "failure.json"))
    if not isinstance(failure, dict) or failure.get("status") == "pruned":
        return None
    return (f"run_dir={run_dir} failed before its first checkpoint ({failure.get('error', 'Error')}: "
            f"{str(failure.get('reason', '')).rstrip('.')}); nothing there can be evaluated.")


def _ended_before_a_checkpoint(run_dir: str):
    """A single run that began training with checkpoints on and ended before its first (a non-finite loss, a
    kill): 'train it with checkpoint.enabled=true' would not say what happened. A sentence, else None."""
    try:
        enabled = OmegaConf.load(os.path.join(run_dir, ".hydra", "config.yaml")).checkpoint.enabled
    except Exception:  # noqa: BLE001 — no record, or not a train config's: nothing known about the run
        return None
    if enabled is not True or not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        return None
    return (f"run_dir={run_dir} ended before its first checkpoint (its train.log says why, e.g. a non-finite loss), "
            "so there is no state to evaluate; train it again or pass another run_dir.")


def _stopped_before_a_checkpoint(run_dir: str):
    """A run a Ctrl-C or SIGTERM stopped before its first checkpoint (while it loaded its data, compiled, or a second
    Ctrl-C): its train.log ends in the stop's line, which was taken for a refusal ('train it again with that setting
    changed') or a failure. A sentence, else None."""
    ended = _error_lines(run_dir)
    if not ended or not ended[-1].startswith(STOPS):
        return None
    return (f"run_dir={run_dir} was stopped before its first checkpoint ({ended[-1].split(';')[0]}), so there is no "
            "state to evaluate; run its train.py command again (same hydra.run.dir) to train it, or pass another "
            "run_dir.")


def _error_lines(run_dir: str) -> list:
    """The sentences a run's train.log records it ended with, oldest first."""
    try:
        with open(os.path.join(run_dir, "train.log"), errors="replace") as f:
            return [line.partition(REFUSAL)[2].strip() for line in f if REFUSAL in line]
    except OSError:
        return []


def _refused_before_training(run_dir: str):
    """A run its settings stopped before its first step (privacy=dpsgd without a noise): its train.log ends in the
    refusal, which 'train it with checkpoint.enabled=true' would not say. A sentence, else None."""
    if os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        return None
    refusals = _error_lines(run_dir)
    if not refusals:
        return None
    return (f"run_dir={run_dir} was refused before training ({refusals[-1].rstrip('.')}), so there is no state to "
            "evaluate; train it again with that setting changed, or pass another run_dir.")


STOPS = ("interrupted", "stopped by SIG")  # how the sentences of a Ctrl-C or SIGTERM before training begin
REFUSAL = "][zoo][ERROR] - error: "  # how train.log records the sentence a refused run ended with


def _finished_unsaved(run_dir: str):
    """A run that finished without checkpoints (checkpoint.enabled=false): its results.json stands, and its
    directory refuses to be trained again (nothing to resume from), so the advice is a new run directory."""
    if not os.path.isfile(os.path.join(run_dir, "results.json")):
        return None
    return (f"run_dir={run_dir} holds a finished run's results.json but no complete checkpoint (trained with "
            "checkpoint.enabled=false, or its checkpoints/ removed), so there is no state to evaluate; results.json "
            "holds its final metrics. Train it again in a new hydra.run.dir with checkpoint.enabled=true, or pass "
            "another run_dir.")


def _not_a_run(run_dir: str):
    """What run_dir is when it is a folder above or inside a run rather than a run: a sentence, else None."""
    run = run_whose_checkpoints_hold(run_dir)  # checkpoints/ itself, or one of its steps
    if run:
        return f"run_dir={run_dir} is inside a run's checkpoints/; pass the run's directory, run_dir={run}."
    parent = os.path.dirname(os.path.abspath(run_dir))  # one of the run's own folders: export/, eval/, .hydra/
    if run_whose_checkpoints_hold(os.path.join(parent, "checkpoints")) == parent:
        return f"run_dir={run_dir} is a folder inside a run; pass the run's directory, run_dir={parent}."
    origin = export_origin(run_dir)  # a copy of export/ elsewhere
    if origin is not None:
        return (f"run_dir={run_dir} is an export's folder (model.jax, signature.json), not a training run; pass the "
                f"run it was exported from{f', run_dir={origin}' if origin else ''}.")
    multirun = a_multiruns_directory(run_dir, lambda job: holds_steps(os.path.join(job, "checkpoints")))
    if multirun:
        return multirun
    own = a_commands_own_directory(run_dir) or a_folder_of_commands(run_dir)
    if own:  # outputs/eval/<date>/<time>, outputs/eval/, eval.py -m's multirun: was told to be trained itself
        return own
    runs = runs_below(run_dir)
    if runs:  # outputs/, outputs/<date>/, multirun/ or multirun/<date>/: was told to be trained itself
        return _the_runs_below(run_dir, runs)
    return None


def _the_runs_below(run_dir: str, runs: list) -> str:
    """The runs of a folder of runs to pass, by name (zoo.run_dirs.run_choices): those holding a step, not one refused
    before its first step, whose checkpoints/ is empty and has nothing to read; where none does, each run, which
    says why it has none once passed."""
    steps = [run for run in runs if holds_steps(os.path.join(run, "checkpoints"))]
    below = f"{len(runs)} runs below it" if len(runs) > 1 else "a run below it"
    if not steps:
        each = "each says" if len(runs) > 1 else "which says"
        return (f"run_dir={run_dir} is not a run but holds {below}, {'none with' if len(runs) > 1 else 'without'} a "
                f"checkpoint ({run_choices(runs)}, {each} why when passed); train one with checkpoint.enabled=true, "
                "or pass another run_dir.")
    if len(steps) < len(runs):
        below += f", {len(steps)} with a checkpoint"
    return (f"run_dir={run_dir} is not a run but holds {below}; pass {'it' if len(steps) == 1 else 'one of them'}: "
            f"{run_choices(steps)}.")


def _naming_the_other_steps(error: UserError, ckpts: Checkpoints, candidates, target=None) -> UserError:
    """A chosen step (checkpoint=best, final with early stopping, or a step) that does not restore: only `latest`
    falls back on its own, so the refusal names the steps left to choose from: those that restore into `target`
    (other steps may be damaged too), or without one, those whose metadata reads (zoo.checkpoint.restorable_steps)."""
    others = [s for s in ckpts.steps() if s not in (candidates or [])]
    if not candidates or len(candidates) > 1 or not others or isinstance(error, StateMismatch):
        return error
    readable = restorable_steps(ckpts, target, others)
    if not readable:
        return UserError(f"{str(error).rstrip('.')}; no other step of it restores (tried steps {others}): train the "
                         "run again or pass another run_dir.")
    return UserError(f"{str(error).rstrip('.')}; choose another with checkpoint=latest or one of the steps "
                     f"{readable}.")


def _restore_target(run, ckpts: Checkpoints, candidates, cfg: DictConfig):
    """What the other steps of a chosen step that failed are tried in: the run's, or one built from another step's
    config where the chosen step's own did not read; None where none is built."""
    from zoo.train import build

    others = [s for s in reversed(ckpts.steps()) if s not in (candidates or [])]
    if run is None and candidates and len(candidates) == 1 and others:
        try:
            run = build(saved_train_config(ckpts, others, cfg), for_training=False)
        except Exception:  # noqa: BLE001 — no other step's config reads, or builds: the sentence already due stands
            return None
    return None if run is None else {"state": run.host_state, "sums": run.compiled.zero_sums}


def _pick_steps(ckpts: Checkpoints, which, cfg: DictConfig) -> list:
    """Candidate steps, best first; only `latest` may fall back to an older one. `final` is the state the run's
    results.json reports: its best checkpoint with early stopping, else `latest`."""
    steps = ckpts.steps()
    saved = _run_config(ckpts, cfg) if which in ("final", "best") else None
    final = which == "final"
    if final:
        which = "latest" if saved.trainer.early_stopping.patience is None else "best"
    if which == "latest":
        return list(reversed(steps))
    if which == "best":
        settings = _best_settings(saved)
        best = ckpts.best_step(**settings)
        if best is None and final:  # its metric nan at every eval: the run reported its newest step (restore_best)
            return [steps[-1]]
        if best is None:
            metric = settings["metric"]
            scored = [m for m in map(ckpts.metrics_or_none, steps) if m and metric in m]
            if scored:  # each nan (zoo.early_stopping)
                raise UserError(f"no checkpoint in {ckpts.directory} has a defined {metric} to pick the best from "
                                "(it is nan at every eval); use checkpoint=latest or a step.")
            raise UserError(f"no checkpoint in {ckpts.directory} has eval metrics to pick the best from; "
                            "use checkpoint=latest or a step.")
        if saved.checkpoint.keep_best == 0:  # its best may be long deleted: the step alone would pass for it
            log.warning("the run kept no best checkpoint (checkpoint.keep_best=0): checkpoint=best is step %d, the "
                        "best by %s of the steps it kept %s", best, settings["metric"], steps)
        return [best]
    if str(which).isdigit() and int(which) in steps:
        return [int(which)]
    raise UserError(f"checkpoint={which} is not in {ckpts.directory}; use final, latest, best or one of the steps "
                    f"{steps}.")


def _run_config(ckpts: Checkpoints, cfg: DictConfig) -> DictConfig:
    """The run's config as eval reads it (from its newest readable step, checked), to choose among its steps."""
    saved = saved_train_config(ckpts, list(reversed(ckpts.steps())), cfg)
    validate(saved, new_run=False)
    return saved


def best_step_of(run_dir: str, saved_config: dict):
    """The step `checkpoint=best` names in a run (by the metric it keeps its best by), None where none has one."""
    ckpts = Checkpoints(os.path.join(run_dir, "checkpoints"), read_only=True, way_out="pass another run_dir.")
    try:
        return ckpts.best_step(**_best_settings(saved_with_defaults(saved_config)))
    finally:
        ckpts.close()


def _best_settings(saved: DictConfig) -> dict:
    """The metric and direction the run kept its best checkpoint by."""
    from zoo.tasks import TASKS

    settings = checkpoint_settings(saved, TASKS[saved.dataset.task])
    return {"metric": settings["metric"], "mode": settings["mode"]}


def saved_train_config(ckpts: Checkpoints, steps: list, cfg: DictConfig) -> DictConfig:
    """The run's own config, from the first of `steps` with readable metadata, checked against the allow-list,
    with this command's overrides for placement."""
    # every step of the run unreadable: nothing left to choose; one chosen step names the others (_restore)
    hint = "train the run again or pass another run_dir." if set(steps) == set(ckpts.steps()) else ""
    saved = ckpts.first_readable_meta(steps, hint=hint)["config"]
    refuse_interpolations(saved, ckpts.directory, "train the run again or pass another run_dir.")
    try:
        train_cfg = saved_with_defaults(saved)
    except Exception as e:  # noqa: BLE001 — omegaconf's key and type errors
        raise UserError(f"the config saved in {ckpts.directory} does not fit this version of the zoo "
                        f"({str(e).splitlines()[0]}); evaluate it with the version that trained it.") from None
    try:
        check_targets(train_cfg)  # before anything is instantiated
    except UserError as e:
        raise UserError(f"the config saved in {ckpts.directory} is refused: {e}") from None
    train_cfg.parallel, train_cfg.distributed = cfg.parallel, cfg.distributed
    _pin_the_datasets_version(train_cfg, cfg)
    train_cfg.paths.data_dir = cfg.paths.data_dir
    train_cfg.paths.compilation_cache_dir = cfg.paths.compilation_cache_dir
    if cfg.trainer.batch_size or cfg.trainer.eval_batch_size:
        train_cfg.trainer.eval_batch_size = cfg.trainer.batch_size or cfg.trainer.eval_batch_size
    return train_cfg


def _pin_the_datasets_version(train_cfg: DictConfig, cfg: DictConfig) -> None:
    """dataset.tfds_name=NAME:VERSION reads a catalog copy of another version of the run's own dataset, as in
    train.py (the data's refusal of such a copy says to set it); another dataset is refused."""
    pinned = OmegaConf.select(cfg, "dataset.tfds_name")
    if pinned is None:
        return
    own = train_cfg.dataset.tfds_name
    if builder_name(str(pinned)) != builder_name(own):
        raise UserError(f"dataset.tfds_name={pinned} is not a version of the run's dataset (dataset.tfds_name={own}), "
                        f"which the run is read with; pin one of its versions, dataset.tfds_name={builder_name(own)}:"
                        "VERSION, or leave dataset.tfds_name out.")
    train_cfg.dataset.tfds_name = pinned


def restore_run(cfg: DictConfig, script: str, out_name: str, what: str):
    """(run, step, host state, checkpoint metadata) of the checkpoint `cfg` names; `<run_dir>/<out_name>/`
    is checked writable first.

    Shared by the commands that read a finished run (eval.py, export.py): devices are chosen before the
    checkpoints are opened, and the saved config passes the allow-list before anything is built."""
    _check_command(cfg, script)
    cfg.run_dir = launch_dir_path(cfg.run_dir)
    select_devices(cfg.parallel, cfg.distributed)  # before opening checkpoints starts JAX with its defaults
    if jax.process_count() > 1:  # each would restore its own run's checkpoint, and wait for the others
        check_same_settings(OmegaConf.to_container(cfg, resolve=True))
    ckpts = _open_checkpoints(cfg.run_dir)
    try:
        return _restore(cfg, ckpts, out_name, what)
    finally:
        ckpts.close()


READS_OF_A_TRAINING_RUN = 3  # a run still training deletes old steps as it saves new ones: eval reads again


def _restore(cfg: DictConfig, ckpts: Checkpoints, out_name: str, what: str):
    from zoo.train import build

    out_dir = os.path.join(cfg.run_dir, out_name)
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):  # the run is writable; this one file is not
        raise UserError(f"a file is in the way at {out_dir}, where {what} go; move it and run the command again.")
    reason = unwritable_reason(out_dir)  # now, not after the whole command
    if reason:
        raise UserError(f"run_dir={cfg.run_dir} is not writable ({reason}): {what} go to its {out_name}/ "
                        "directory; copy the run somewhere writable and pass that run_dir.")
    run = None
    for attempt in range(READS_OF_A_TRAINING_RUN):
        listed, candidates = ckpts.steps(), None
        try:  # choosing reads the run's config (final, best) from a step the trainer may be deleting
            candidates = _pick_steps(ckpts, cfg.checkpoint, cfg)
            run = run or build(saved_train_config(ckpts, candidates, cfg), for_training=False)  # one config a run
            step, tree, meta = restore_latest_good(ckpts, {"state": run.host_state, "sums": run.compiled.zero_sums},
                                                   candidates, hint="train the run again or pass another run_dir.")
            _refuse_another_runs_steps(ckpts, step, meta)
            return run, step, tree["state"], meta
        except UserError as e:
            gone = set(listed if candidates is None else candidates) - set(ckpts.reload())
            if not gone or (candidates is None and attempt == READS_OF_A_TRAINING_RUN - 1):
                target = _restore_target(run, ckpts, candidates, cfg)
                raise _naming_the_other_steps(e, ckpts, candidates, target) from None  # damaged; or not in it
            if attempt == READS_OF_A_TRAINING_RUN - 1:  # what failed to read was replaced, not damaged
                raise UserError(f"run_dir={cfg.run_dir} is still training and replaced checkpoint step(s) "
                                f"{sorted(gone)} while they were read, {READS_OF_A_TRAINING_RUN} times in a row; run "
                                "the command again, or once the run has finished.") from None
            log.info("run_dir=%s is still training: checkpoint step(s) %s were replaced while being read; reading "
                     "its newer ones", cfg.run_dir, sorted(gone))


def _refuse_another_runs_steps(ckpts: Checkpoints, step: int, meta: dict) -> None:
    """Every step of one run holds its settings (resuming refuses others): a step trained with another model,
    dataset or optimizer was put there from another run. Evaluated, it would pass for this run's (and its own
    config would make the run's true steps seem unreadable)."""
    from zoo.resume import STATE_DEFINING, changed_settings, comparable_config

    chosen = comparable_config(meta["config"])
    for other in ckpts.steps():
        if other == step:
            continue
        try:
            config = ckpts.meta(other)["config"]
        except Exception:  # noqa: BLE001 — a damaged (or just deleted) step: no settings to compare
            continue
        changed = changed_settings(comparable_config(config), chosen, STATE_DEFINING) if isinstance(config, dict) \
            else []
        if changed:
            raise UserError(f"the checkpoints in {ckpts.directory} are not all of one run: step {other} and step "
                            f"{step} were trained with other settings ({'; '.join(changed[:3])}); move the steps that "
                            "are not the run's out of it, or pass another run_dir.")


def evaluate(cfg: DictConfig) -> dict:
    if OmegaConf.is_missing(cfg, "run_dir"):
        return _evaluate(cfg)  # refused there
    out_dir = os.path.join(launch_dir_path(cfg.run_dir), "eval")
    made_here = not os.path.lexists(out_dir)  # restore_run makes eval/ to check that it can be written
    try:
        return _evaluate(cfg)
    except BaseException:
        if made_here and os.path.isdir(out_dir) and not os.listdir(out_dir):
            os.rmdir(out_dir)  # stopped or refused before its result: not an empty eval/ left in the run
        raise


def warn_if_unfinished(cfg: DictConfig, step: int, meta: dict, verb: str = "evaluate") -> None:
    """checkpoint=final is what results.json reports: a run stopped or still training has none yet, and the step
    evaluated (or exported) was printed as any other, as if it were the run's final state."""
    if cfg.checkpoint != "final":
        return
    if os.path.exists(os.path.join(cfg.run_dir, "results.json")):
        _warn_if_not_the_reported_step(cfg, step, verb)
        return
    failure = load_json(os.path.join(cfg.run_dir, "failure.json")) or {}
    if failure.get("status") == "pruned":  # it ended there: its step is its final state
        return
    early = (meta["config"]["trainer"].get("early_stopping") or {}).get("patience") is not None
    chosen = "its best checkpoint so far" if early else "its newest checkpoint"
    total = meta.get("total_steps")
    of = f" of the {total} it trains" if total else ""
    error = _ended_in_an_error(cfg.run_dir, failure)
    if error:  # "train it to its end" would meet the same error
        log.warning("run_dir=%s ended in an error before it finished (%s): checkpoint=final %ss %s, step %d%s, "
                    "saved before the error; name checkpoint=latest, best or a step to %s another one.",
                    cfg.run_dir, error.rstrip("."), verb, chosen, step, of, verb)
        return
    log.warning("run_dir=%s has not finished (no results.json): checkpoint=final %ss %s, step %d%s, not its "
                "final state; train it to its end, or name checkpoint=latest, best or a step to %s that one.",
                cfg.run_dir, verb, chosen, step, of, verb)


def _warn_if_not_the_reported_step(cfg: DictConfig, step: int, verb: str) -> None:
    """checkpoint=final is the step results.json reports; where that step is gone (deleted, or damaged and passed
    over), the newest older one was read without a word, its metrics printed as the run's."""
    results = load_json(os.path.join(cfg.run_dir, "results.json"))
    if not isinstance(results, dict):
        return
    reported = (results.get("early_stopping") or {}).get("best_checkpoint_step", results.get("steps"))
    if isinstance(reported, int) and reported != step:
        log.warning("run_dir=%s's results.json reports step %d, which is not among its readable checkpoints: "
                    "checkpoint=final %ss step %d instead, whose metrics are not the ones results.json reports.",
                    cfg.run_dir, reported, verb, step)


def _ended_in_an_error(run_dir: str, failure: dict):
    """The error a run not training now ended in (a sweep's job: its failure.json; a single run: the last sentence
    its train.log records, unless that is a stop, which the same command resumes from). None if none."""
    if failure.get("status") == "failed":
        return str(failure.get("reason") or failure.get("error") or "see its train.log")
    if in_use_now(run_dir):
        return None
    ended = _error_lines(run_dir)
    return ended[-1] if ended and not ended[-1].startswith(STOPS) else None


def _evaluate(cfg: DictConfig) -> dict:
    run, step, state, meta = restore_run(cfg, "eval.py", "eval", "eval results")
    warn_if_unfinished(cfg, step, meta)
    ema_decay = meta["config"]["trainer"].get("ema_decay")
    if cfg.split not in run.eval_sets:
        fraction = (meta["config"].get("dataset") or {}).get("validation_fraction") or 0.0
        what = (": eval.py evaluates a run's held-out splits (its results.json's train metrics are those its last log "
                "interval trained with)"
                if cfg.split == "train" else
                f" is not in this run: it was trained with dataset.validation_fraction={fraction}, which holds out no "
                "validation split (train one with dataset.validation_fraction=0.1 to have one)"
                if cfg.split == "validation" else " is not in this run")
        raise UserError(f"split={cfg.split}{what}; choose one of {sorted(run.eval_sets)}.")
    batches, count = run.eval_sets[cfg.split]
    metrics = eval_loop(run.compiled.mode.put_state(state), run.compiled, batches, count)
    path = os.path.join(cfg.run_dir, "eval", f"{cfg.split}-{step}.json")
    if is_primary():  # with distributed=explicit|auto every process evaluates; one writes
        averaged_with = {} if ema_decay is None else {"ema_decay": ema_decay}
        with written_whole():
            write_json(path, {"step": step, "split": cfg.split, **metrics, **averaged_with})
        averaged = ("" if ema_decay is None
                    else f" (exponential moving average of the parameters, ema_decay={ema_decay})")
        write_stdout(f"{cfg.split} @ step {step}: {metric_summary(metrics)}{averaged}\n",
                     lambda why: f"the metrics could not be printed to stdout ({why}); they are written to {path}.")
        log.info("wrote %s", path)
    return {"split": cfg.split, "step": step, "metrics": metrics, "path": path,
            "objective": metrics.get(run.compiled.task.objective)}
