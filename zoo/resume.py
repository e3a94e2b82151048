"""Where a run starts: fresh, or from a checkpoint whose config is compatible with this one."""
import logging
import os

from omegaconf import DictConfig, OmegaConf

from zoo.checkpoint import Checkpoints, StateMismatch, restore_latest_good
from zoo.cli import launch_dir_path, new_run_dir
from zoo.config import METRIC_MODES, dotted_settings, refuse_interpolations, saved_with_defaults
from zoo.errors import RunRefused, UserError
from zoo.privacy.plan import resume_defining
from zoo.run_dirs import export_origin, holds_steps, run_choices, run_whose_checkpoints_hold, runs_below
from zoo.sweeps.jobs import find_job_dirs
from zoo.targets import check_targets, parameter_defaults

log = logging.getLogger("zoo")

# Settings that change the state's shapes or meaning; a checkpoint taken under others is refused.
STATE_DEFINING = ("model", "dataset", "optimizer._target_", "schedule", "trainer.clip_norm", "trainer.accumulate")
# May change, e.g. a lower learning rate for the rest of a run; named when the state then does not restore.
STATE_SHAPING = ("optimizer", "schedule", "trainer.ema_decay")
# What a finished run's results depend on besides its length (compared as the steps it gives): a command asking
# for other values cannot report them. Privacy and early stopping settings count where either side uses them.
RESULT_DEFINING = STATE_DEFINING + STATE_SHAPING + ("seed", "trainer.batch_size")
PRIVACY_DEFINING = ("privacy",)
EARLY_STOPPING_DEFINING = ("trainer.early_stopping", "trainer.eval_every", "checkpoint.metric", "checkpoint.mode")


def changed_settings(saved: dict, current: dict, prefixes=STATE_DEFINING) -> list:
    """'name (old -> new)' for each setting under `prefixes` that differs. A setting one side leaves out took its
    target's default there ('default 0.9'): the same value set on the other side is no change."""
    old, new = dotted_settings(saved), dotted_settings(current)
    old_defaults, new_defaults = _target_defaults(saved), _target_defaults(current)
    keys = {k for k in old.keys() | new.keys() if any(k == p or k.startswith(p + ".") for p in prefixes)}
    changed = []
    for k in sorted(keys):
        before, after = _value(k, old, old_defaults), _value(k, new, new_defaults)
        if before[0] != after[0]:
            changed.append(f"{k} ({before[1]} -> {after[1]})")
    return changed


def _target_defaults(config: dict) -> dict:
    """{'optimizer.b1': 0.9, ...}: the defaults of the `_target_` groups' factories, by dotted name."""
    return {f"{group}.{name}": default for group in ("model", "optimizer", "schedule")
            for name, default in parameter_defaults(config.get(group)).items()}


def _value(key: str, settings: dict, defaults: dict) -> tuple:
    """(value, how to show it) of a setting, or of the default its config took by leaving it out."""
    if key not in settings and key in defaults:
        return defaults[key], f"default {defaults[key]!r}"
    return settings.get(key), repr(settings.get(key))


def comparable_config(saved: dict) -> dict:
    """A saved config with the settings added since it was saved at their defaults, to compare with a new one."""
    try:
        return OmegaConf.to_container(saved_with_defaults(saved), resolve=True)
    except Exception:  # noqa: BLE001 — a setting this version lacks: compared as saved, and so reported
        return saved


def result_changes(saved: dict, cfg: DictConfig) -> list:
    """The settings of `cfg` that differ from a finished run's saved config and decide its results."""
    current, saved = OmegaConf.to_container(cfg, resolve=True), comparable_config(saved)
    prefixes = RESULT_DEFINING
    if "dpsgd" in ((saved.get("privacy") or {}).get("mode"), current["privacy"]["mode"]):
        prefixes += PRIVACY_DEFINING
    if any(((c.get("trainer") or {}).get("early_stopping") or {}).get("patience") is not None
           for c in (saved, current)):
        prefixes += EARLY_STOPPING_DEFINING
    return changed_settings(saved, current, prefixes)


def ranked_by(checkpoint, task) -> tuple:
    """(metric, mode) a run's checkpoints are ranked by: its checkpoint settings' (a config or a saved dict), or
    their defaults for the task; mode None where the metric has no direction of its own."""
    metric = checkpoint.get("metric") or task.objective
    return metric, checkpoint.get("mode") or METRIC_MODES.get(metric)


def checkpoint_settings(cfg: DictConfig, task) -> dict:
    metric, mode = ranked_by(cfg.checkpoint, task)
    if mode is None:  # validate() refuses this for new runs; a config saved by an older version may hold it
        raise UserError(f"checkpoint.metric={metric} has no direction of its own; set checkpoint.mode=max or min.")
    return dict(keep=cfg.checkpoint.keep, keep_best=cfg.checkpoint.keep_best, metric=metric, mode=mode,
                every=cfg.trainer.checkpoint_every, async_save=cfg.checkpoint.async_save)


def find_start(cfg: DictConfig, ckpts: Checkpoints | None, target):
    """(step, restored tree or None, its metadata or None). Never silently starts over an existing run.

    A run with checkpoints of its own continues from them; a `trainer.resume` path only seeds an empty run,
    so rerunning the same command after a preemption does not go back to the source checkpoint."""
    resume = cfg.trainer.resume
    path = launch_dir_path(resume)  # said as given; read where the user meant it (~: home)
    own_steps = ckpts.steps() if ckpts else []
    if resume == "never" and own_steps:
        raise RunRefused(f"{ckpts.directory} already holds checkpoints (steps {own_steps}) and "
                         f"trainer.resume=never; choose a new {new_run_dir(cfg.paths.output_dir)} or set "
                         "trainer.resume=auto.")
    if own_steps and resume not in ("auto", "never"):  # the same command again, after a stop: its own steps go on
        if not os.path.isdir(path):  # a mistyped value (trainer.resume=Never) passed unseen
            raise UserError(f"trainer.resume={resume} is not a checkpoint directory, and this run continues from "
                            f"its own checkpoints (steps {own_steps}) whatever it names; leave trainer.resume out, "
                            "or use auto.")
        log.info("continuing from this run's own checkpoints: trainer.resume=%s seeds only a run without any", resume)
    if own_steps:
        source = ckpts
    elif resume in ("auto", "never"):
        return 0, None, None
    elif not os.path.isdir(path):
        raise UserError(f"trainer.resume={resume} is not a checkpoint directory; use auto, never or the "
                        "checkpoints/ directory of an earlier run.")
    elif ckpts is not None and os.path.isdir(os.path.join(path, "checkpoints")) and \
            os.path.samefile(os.path.join(path, "checkpoints"), ckpts.directory):  # its checkpoints/ refused below
        raise UserError(f"trainer.resume={resume} is this run's own directory, which holds no checkpoint yet; pass "
                        "the checkpoints/ directory of an earlier run, or use auto or never.")
    elif holds_steps(os.path.join(path, "checkpoints")):  # not a refused run's, left empty: it says so below
        raise UserError(f"trainer.resume={resume} is a run directory; pass its checkpoints: trainer.resume="
                        f"{os.path.join(resume, 'checkpoints')}.")
    elif os.path.isfile(os.path.join(path, "multirun.yaml")):  # its jobs' folders (0, 1, ...) would pass for steps
        _refuse_multirun_resume(resume, path)
    else:
        source = Checkpoints(path, read_only=True, way_out="leave out trainer.resume to start afresh.")
        if not source.steps():
            source.close()
            _refuse_empty_resume(resume, path, own=ckpts is not None and os.path.samefile(path, ckpts.directory),
                                 this_run=cfg.paths.output_dir)
    try:
        return _restore_from(source, cfg, target, own=source is ckpts)
    finally:
        if source is not ckpts:  # another run's checkpoints, opened only to read
            source.close()


def _refuse_multirun_resume(resume: str, path: str) -> None:
    """trainer.resume names a multirun's directory (`path`, where it lies), whose jobs each have checkpoints."""
    jobs = find_job_dirs(path)
    example = (f", e.g. trainer.resume={os.path.join(resume, os.path.relpath(jobs[0], path), 'checkpoints')} (its "
               "summary.md ranks them)") if jobs else ""
    raise UserError(f"trainer.resume={resume} is a multirun's directory; pass the checkpoints/ of one of its "
                    f"jobs{example}.")


def _refuse_empty_resume(resume: str, path: str, own: bool, this_run: str) -> None:
    """trainer.resume names a directory (`path`, where it lies) with no checkpoint step in it: one step's folder,
    this run's own (empty) checkpoints/, a folder inside a run (its .hydra/, export/) or a copy of its export/, a
    folder of runs (outputs/, outputs/<date>/: its runs are named, not `this_run`, being started there), or no
    checkpoints at all."""
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.basename(os.path.abspath(path)).isdigit() and os.path.basename(parent) == "checkpoints":
        raise UserError(f"trainer.resume={resume} is one checkpoint step; pass the checkpoints/ directory that holds "
                        f"it: trainer.resume={parent}.")
    run = None if own else (run_whose_checkpoints_hold(path) or
                            run_whose_checkpoints_hold(os.path.join(parent, "checkpoints")))
    if run and holds_steps(os.path.join(run, "checkpoints")) and \
            not os.path.samefile(path, os.path.join(run, "checkpoints")):  # its .hydra/, export/, a step's part
        checkpoints = os.path.normpath(os.path.join(resume, os.path.relpath(run, path), "checkpoints"))  # as given
        raise UserError(f"trainer.resume={resume} is a folder inside a run; pass its checkpoints: "
                        f"trainer.resume={checkpoints}.")
    origin = export_origin(path)  # a copy of a run's export/ elsewhere
    if origin and holds_steps(os.path.join(origin, "checkpoints")):
        raise UserError(f"trainer.resume={resume} is an export's folder (model.jax, signature.json), not a checkpoint "
                        f"directory; pass the checkpoints of the run it was exported from, "
                        f"trainer.resume={os.path.join(origin, 'checkpoints')}.")
    what = "is this run's own checkpoints/ directory, which holds none yet" if own else "holds no checkpoint"
    runs = [] if own else [run for run in runs_below(path) if holds_steps(os.path.join(run, "checkpoints"))
                           and not (os.path.exists(this_run) and os.path.samefile(run, this_run))]
    example = ""
    if runs:  # said as trainer.resume was given; by name, not the newest by modification time (run_choices)
        named = run_choices([os.path.join(resume, os.path.relpath(run, path), "checkpoints") for run in runs],
                            setting="trainer.resume")
        example = f", e.g. {'one of ' if len(runs) > 1 else ''}{named}"
    raise UserError(f"trainer.resume={resume} {what}; pass the checkpoints/ directory of an earlier run{example}, or "
                    "use auto or never.")


def _restore_from(source: Checkpoints, cfg: DictConfig, target, own: bool):
    """`own`: the run's own checkpoints (a refusal for other settings then leaves its run as it was), not
    trainer.resume's."""
    # trainer.resume's checkpoints meet a new hydra.run.dir too: the way out is then the setting itself
    way_out = (f"start in a new {new_run_dir(cfg.paths.output_dir)}." if own
               else "leave out trainer.resume to start afresh.")
    newest_first = list(reversed(source.steps()))
    saved_config = source.first_readable_meta(newest_first, hint=way_out)["config"]
    refuse_interpolations(saved_config, source.directory, way_out)
    current, saved = OmegaConf.to_container(cfg, resolve=True), comparable_config(saved_config)
    try:
        check_targets(OmegaConf.create(saved_config))  # whatever wrote it, nothing it names is trusted blindly
    except UserError as e:
        raise UserError(f"the config saved in {source.directory} is refused: {e}") from None
    changed = changed_settings(saved, current, STATE_DEFINING + resume_defining(saved_config, current))
    if changed:
        # a run may go on with more steps or another batch size; a DP-SGD run may not, which the sentence says
        why = ("" if not changed_settings(saved, current, resume_defining(saved_config, current)) else
               ", which a DP-SGD run cannot change: its privacy was accounted for the run those settings planned")
        raise (RunRefused if own else UserError)(
            f"the checkpoint in {source.directory} was trained with other settings: {'; '.join(changed)}{why}; "
            f"restore those settings or {way_out}")
    try:
        step, tree, meta = restore_latest_good(source, target, hint=way_out)
    except StateMismatch:
        changed = changed_settings(saved_config, current, STATE_SHAPING)
        settings = "; ".join(changed) or "other settings"
        raise UserError(f"the checkpoint in {source.directory} does not fit this run's model and optimizer state; "
                        f"it was trained with {settings}: restore those settings or {way_out}") from None
    return step, tree, meta


