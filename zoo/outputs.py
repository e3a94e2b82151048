"""What one run writes and decides besides its arrays: checkpoints, logs, early stopping and results.json.

train() opens one for its run; a population (zoo.population) opens one per member, so every member's run
directory holds exactly what its solo run's would.
"""
import json
import logging
import os
from dataclasses import dataclass, field

import jax
import numpy as np
from omegaconf import DictConfig, OmegaConf

from zoo import run_record
from zoo.checkpoint import Checkpoints
from zoo.cli import (IN_THE_WAY, in_multirun, launch_dir_path, named_run_dir, new_run_dir, os_error_sentence,
                     run_dir_setting, shared_job_dir)
from zoo.early_stopping import EarlyStopping, early_stopping_for, restore_best
from zoo.errors import RunRefused, UserError
from zoo.files import load_json
from zoo.loop import NonFiniteLoss, divergence_advice, metric_summary
from zoo.optim import learning_rate_at
from zoo.parallel.distributed import is_primary
from zoo.privacy.plan import EpsilonLogger
from zoo.resume import checkpoint_settings, find_start, ranked_by, result_changes
from zoo.run_logger import RunLogger

log = logging.getLogger("zoo")


@dataclass
class RunOutputs:
    cfg: DictConfig
    task: object
    total_steps: int
    ckpts: Checkpoints | None
    logger: RunLogger
    save: object  # save(step, host state, host sums, eval metrics=None, wait=False, replace=False, scheduled=None)
    zero_sums: dict
    target: dict  # {"state", "sums"} shaped like a checkpoint, for restores
    start_step: int = 0
    host_state: object = None  # where the run starts: fresh or restored
    sums: dict | None = None  # a partial metric interval restored with the state
    early: EarlyStopping | None = None
    results: dict = field(default_factory=dict)
    recorded: dict | None = None  # the results of a run that had finished before this command, which leaves it so
    # lengthened: the run it continues ended at start_step with final evals, which this run drops, so the periodic
    # eval a run trained this long at once makes there is still to be made
    eval_at_start: bool = False
    # lengthened: the speed its results.json gave ({"examples_per_s", "achieved_gflop_s"}), reported again if this
    # command trains no step (early stopping ends it at its old end): 0.0 would say the run trained at no speed.
    # A run killed before its results.json has none: its train records' speed stands in (_logged_speed)
    continued_speed: dict | None = None
    _final_logged: bool = False

    @property
    def end_step(self) -> int:
        return self.start_step if self.early and self.early.stopped_step else self.total_steps  # stopped stays so

    def reported_state(self, host_state, periodic_metrics, periodic_split: str):
        """Early stopping reports its best checkpoint, the final state competing (saved first with its periodic
        eval, `periodic_metrics`, needed only when the run was not stopped early, and logged as that split's row
        at the last step, as any eval patience counts); None without early stopping."""
        if self.early is None:
            return None
        if self.early.stopped_step is None:
            self.logger.log(self.total_steps, periodic_split, periodic_metrics, end=True)
            self.save(self.total_steps, host_state, self.zero_sums, periodic_metrics)
        best_step, host_state = restore_best(self.ckpts, self.target)
        # a run patience did not stop: the final state's eval counts as one more, whichever checkpoint it reports
        stopping = (self.early.state_dict() if self.early.stopped_step is not None else
                    self.early.with_the_end(self.total_steps, periodic_metrics))
        self.results["early_stopping"] = {**stopping, "best_checkpoint_step": best_step}
        return host_state

    def log_final(self, step: int, split_metrics: dict) -> None:
        """Log the final evals and close the logs, once: curves.png is drawn from here on (in a sweep by a
        drawing child, while this process writes the final checkpoints)."""
        if self._final_logged:
            return
        # With early stopping the final evals are of the best checkpoint: they are logged at its step, so that no
        # step holds two different results
        step = self.results.get("early_stopping", {}).get("best_checkpoint_step", step)
        for split, metrics in split_metrics.items():
            self.logger.log(step, split, metrics, final=True)
        self.logger.close("accuracy" if self.cfg.dataset.task == "classification" else "r2")
        self._final_logged = True

    def finish(self, step: int, train_metrics: dict, split_metrics: dict, final_state, **extras) -> dict:
        """Log the final evals and close the logs (unless log_final did), take the final checkpoint, then write
        results.json: a results.json always has its checkpoint."""
        results = {"train": train_metrics or self.logger.last("train"), **self.results, **split_metrics}
        self.log_final(step, split_metrics)
        if self.early is None:
            self.save(self.total_steps, final_state, self.zero_sums, next(iter(split_metrics.values())), wait=True)
        speed = (self.continued_speed or _logged_speed(self.logger)) if step == self.start_step else None
        if speed is not None:
            extras["examples_per_s"] = speed["examples_per_s"]
            if "model" in extras:
                extras["model"] = {**extras["model"], "achieved_gflop_s": speed["achieved_gflop_s"]}
        results.update(extras)
        results["objective"] = objective_of(self.cfg, results, self.task)
        self.logger.write_results(results)
        if self.early is not None:
            log.info("final metrics are those of the best checkpoint, step %d",
                     results["early_stopping"]["best_checkpoint_step"])
        log.info("test: %s", metric_summary(results["test"]))
        log.info("run directory: %s", os.path.abspath(self.cfg.paths.output_dir))
        return results

    def close(self) -> None:
        self.logger.end_progress()  # closed by finish() already, unless the run failed
        if self.ckpts:
            self.ckpts.close()


def open_outputs(cfg: DictConfig, task, stream, total_steps: int, host_state, zero_sums, privacy=None,
                 population_member: bool = False) -> RunOutputs:
    """Checkpoints (resuming from them when the run dir has some), logger, saver and early stopping of a run.

    A population's member has no progress bar (the members share one progress log). In a sweep, curves.png
    is drawn in the background, while the sweep goes on. A file where the run keeps a directory (checkpoints/)
    or the reverse (metrics.jsonl) is a UserError naming it: one sentence, and in a sweep that trial alone fails,
    a population's member too."""
    try:
        return _open_outputs(cfg, task, stream, total_steps, host_state, zero_sums, privacy, population_member)
    except OSError as e:
        if e.errno not in IN_THE_WAY:
            raise
        raise UserError(os_error_sentence(e)) from None


def _open_outputs(cfg: DictConfig, task, stream, total_steps: int, host_state, zero_sums, privacy,
                  population_member: bool) -> RunOutputs:
    out_dir = cfg.paths.output_dir
    ckpts, settings = None, checkpoint_settings(cfg, task)
    if cfg.checkpoint.enabled:
        ckpts = Checkpoints(os.path.join(out_dir, "checkpoints"), **settings)
    results_path = os.path.join(out_dir, "results.json")
    if ckpts is None and os.path.exists(results_path):
        raise RunRefused(f"{named_run_dir(out_dir)} already holds a finished run and checkpoint.enabled=false; "
                         f"choose a new {new_run_dir(out_dir)}.")
    if ckpts is None and _has_entries(os.path.join(out_dir, "checkpoints")):  # a stopped run: its log too
        raise RunRefused(f"{named_run_dir(out_dir)} holds the checkpoints of an unfinished run, which "
                         "checkpoint.enabled=false would start over; set checkpoint.enabled=true to resume it or "
                         f"choose a new {new_run_dir(out_dir)}.")
    target = {"state": host_state, "sums": zero_sums}
    early = early_stopping_for(cfg, settings)
    try:
        if ckpts is not None and not ckpts.steps() and os.path.exists(results_path):
            raise RunRefused(f"{named_run_dir(out_dir)} already holds a finished run (results.json) but no checkpoint "
                             f"to continue from; choose a new {new_run_dir(out_dir)}.")
        own = bool(ckpts and ckpts.steps())  # its own checkpoints, not trainer.resume's
        start_step, restored, meta = find_start(cfg, ckpts, target)
        if early is not None and meta:
            early.load_state_dict(_counters_to_resume(meta, early, task, start_step))
        stopped_early = early is not None and early.stopped_step is not None
        if stopped_early and restored is not None and not own:  # its best checkpoint is in the other run alone
            resume = str(cfg.trainer.resume)
            reported = _reported_checkpoint(launch_dir_path(resume), early)
            raise UserError(f"trainer.resume={resume} holds a run that early stopping ended at step {start_step} (its "
                            f"best checkpoint, step {reported}, is what it reports); evaluate it with eval.py "
                            f"run_dir={os.path.dirname(os.path.normpath(resume))}, or leave out "
                            f"trainer.early_stopping.patience to train on from step {start_step}.")
        if restored is not None and not own and start_step == total_steps:  # results of no train step at 0.0 ex/s
            source = os.path.dirname(os.path.normpath(str(cfg.trainer.resume)))
            longer = cfg.schedule is None and meta["config"].get("schedule") is None  # a schedule spans its length
            raise UserError(f"trainer.resume={cfg.trainer.resume} holds a run at step {start_step}, the {total_steps} "
                            f"steps trainer.epochs and trainer.max_steps give, so this run would train nothing; "
                            f"evaluate it with eval.py run_dir={source}" +
                            (f", or raise trainer.max_steps or trainer.epochs to train on from step {start_step}."
                             if longer else "."))
        # stopped early past the length asked, it cannot stand for that shorter run: its final state would have
        # competed for the best checkpoint, and patience would not have stopped it where it did
        if restored is not None and start_step > total_steps:
            where, instead = ((named_run_dir(out_dir), f"choose a new {new_run_dir(out_dir)}") if own else
                              (f"trainer.resume={cfg.trainer.resume}", "resume from an earlier run"))
            what = "a run early stopping ended" if stopped_early else "a run"
            raise (RunRefused if own else UserError)(
                f"{where} holds {what} at step {start_step}, past the {total_steps} steps trainer.epochs, "
                f"trainer.max_steps and trainer.batch_size now give; restore them or {instead}.")
        _check_scheduled_length(cfg, meta, total_steps, ckpts, own)
        ended = start_step == total_steps or stopped_early
        recorded = _recorded_results(cfg, task, results_path, meta, start_step) if restored is not None and ended \
            else None
        if restored is not None and recorded is None:  # it trains on, or finishes (its results.json is missing)
            _say_other_settings(cfg, meta, start_step, own, ended)
        shared = shared_job_dir(out_dir) if recorded is None else None
        if shared:  # an earlier job of this sweep ran here: this one would replace its run or its failure
            left = (f"the run an earlier job of this sweep left at step {start_step}, which this job would train on "
                    f"to step {total_steps}" if own else "what an earlier job of this sweep left there (its "
                    "failure.json and logs), which this job would replace")
            raise RunRefused(f"{named_run_dir(out_dir)} holds {left}; choose a new {shared}.")
        if restored is not None and recorded is None:  # said once the run is known to go on, after any refusal
            log.info("resuming from step %d of %s", start_step, ckpts.directory if own else cfg.trainer.resume)
    except BaseException:  # refused (other settings, resume=never): release the manager opened above
        if ckpts is not None:
            ckpts.close()
        raise
    sums = None
    if restored is not None:
        host_state, sums = restored["state"], restored["sums"]
    if recorded is not None:  # nothing to train or write: the run's record stays as it was
        if not population_member:  # a population's launcher writes its members' records later, and restores them
            run_record.restore(out_dir)
        log.info("%s=%s already holds this finished run%s (test: %s)", run_dir_setting(out_dir),
                 os.path.abspath(out_dir), _how_it_ended(recorded, meta, start_step, stopped_early),
                 metric_summary(recorded.get("test", {})))
        return RunOutputs(cfg, task, total_steps, ckpts, RunLogger(out_dir, cfg.logger, total_steps, enabled=False),
                          None, zero_sums, target, start_step, host_state, sums, early, recorded=recorded)
    if privacy is not None:  # said once the run trains: a refusal or a finished run's rerun is not preceded by it
        log.info("%s", privacy.summary)
    logger_cfg = OmegaConf.merge(cfg.logger, {"progress": False}) if population_member else cfg.logger
    try:
        logger = RunLogger(out_dir, logger_cfg, total_steps, start_step=start_step, enabled=is_primary(),
                           learning_rate=learning_rate_at(cfg, total_steps),
                           plot_in_background=population_member or in_multirun())
    except BaseException:  # e.g. a directory where metrics.jsonl goes: an open manager's threads outlive the exit
        if ckpts is not None:
            ckpts.close()
        raise
    if privacy:
        logger = EpsilonLogger(logger, privacy)
    run_record.accepted(out_dir)  # from here on, .hydra/ describes this run, whatever ends it
    continued_speed = None
    if restored is not None and is_primary() and os.path.exists(results_path):
        continued_speed = _speed_of(results_path)
        _withdraw_results(results_path)
    saver = _saver(cfg, ckpts, stream, total_steps, early, start_step)
    lengthened = restored is not None and meta.get("total_steps") == start_step < total_steps
    if lengthened and ckpts is not None and not _scored_at_once(cfg, start_step, early) and \
            ckpts.metrics_or_none(start_step):
        # its old end's checkpoint holds the final eval, where a run trained this long at once saves no scored
        # checkpoint: kept as scored, it would compete for the best checkpoint (early stopping's report) and push
        # out the one that run keeps. Written again unscored (and still of the shorter run, so that a rerun after a
        # kill makes the periodic eval due there), it is kept only while it is the newest, as a stop's would be
        saver(start_step, host_state, sums, None, wait=True, replace=True, scheduled=start_step)
    return RunOutputs(cfg, task, total_steps, ckpts, logger, saver, zero_sums, target,
                      start_step, host_state, sums, early, eval_at_start=lengthened, continued_speed=continued_speed)


def _counters_to_resume(meta: dict, early: EarlyStopping, task, step: int):
    """The early-stopping counters a run goes on with. Kept by another checkpoint.metric (or mode), their best is a
    value of that metric, which the new one's evals cannot be compared with: an unfinished run counts afresh. A run
    early stopping ended keeps them, as its results stand (or the other settings are refused)."""
    saved = meta.get("early_stopping")
    if not saved or saved.get("stopped_step") is not None:
        return saved
    metric, mode = ranked_by((meta.get("config") or {}).get("checkpoint") or {}, task)
    if (metric, mode) == (early.metric, early.mode):
        return saved
    log.warning("the evals before step %d were ranked by %s (%s), and this run ranks them by %s (%s): early stopping "
                "counts its patience afresh from step %d", step, metric, mode, early.metric, early.mode, step)
    return None


def _reported_checkpoint(checkpoints: str, early: EarlyStopping):
    """The step a run early stopping ended reports: its best checkpoint by checkpoint.metric, the later on a tie,
    which results.json records. Not early.best_step, the last eval that improved by more than min_delta."""
    try:
        return load_json(os.path.join(os.path.dirname(os.path.normpath(checkpoints)), "results.json"))[
            "early_stopping"]["best_checkpoint_step"]
    except (KeyError, TypeError):  # none (stopped while it finished) or damaged: its checkpoints say
        pass
    source = Checkpoints(checkpoints, metric=early.metric, mode=early.mode, read_only=True)
    try:
        return source.best_step()
    finally:
        source.close()


def _how_it_ended(recorded: dict, meta: dict, step: int, stopped_early: bool) -> str:
    """What a finished run's rerun says of it before its test metrics: one early stopping ended (a trainer.max_steps
    of that step asks for it too) reports its best checkpoint, which its results.json says and the line did not."""
    if not stopped_early:
        return "; its results.json stands"
    planned = meta.get("total_steps")
    started_for = f" of the {planned} it was started for" if planned and planned != step else ""
    best = (recorded.get("early_stopping") or {}).get("best_checkpoint_step")
    reports = f", with the metrics of its best checkpoint, step {best}" if best is not None else ""
    return f", which early stopping ended at step {step}{started_for}; its results.json stands{reports}"


def _scored_at_once(cfg: DictConfig, step: int, early) -> bool:
    """Whether a run training through `step` saves a checkpoint there with eval metrics (zoo.loop.fit): an eval step
    that is a checkpoint step, or any eval step under early stopping."""
    eval_every, checkpoint_every = cfg.trainer.eval_every, cfg.trainer.checkpoint_every
    return bool(eval_every and step % eval_every == 0 and
                (early is not None or (checkpoint_every and step % checkpoint_every == 0)))


def _say_other_settings(cfg: DictConfig, meta: dict, step: int, own: bool, ended: bool) -> None:
    """A run going on under other settings than its first steps had: allowed (a lower learning rate for the rest
    of a run, say) but never unsaid. Refused where its results would be reported under settings it was not trained
    with: its own run already at its end (results.json missing), or a sweep's job, which is what its overrides
    say. (A finished run with its results.json is refused by _recorded_results.)"""
    changed = result_changes(meta["config"], cfg)
    # a run that had finished (its newest checkpoint ends the run it was trained as) is lengthened by asking for
    # more steps or epochs; one that only other settings (a smaller batch) make longer would report them
    finished = meta.get("total_steps") == step and not _asks_for_another_length(meta["config"], cfg)
    if changed and own and (ended or finished):
        raise RunRefused(f"{named_run_dir(cfg.paths.output_dir)} already holds a finished run trained with other "
                         f"settings: {'; '.join(changed)}; choose a new {new_run_dir(cfg.paths.output_dir)}.")
    if changed and own and in_multirun():
        new = shared_job_dir(cfg.paths.output_dir) or "hydra.sweep.dir"
        raise RunRefused(f"hydra.run.dir={cfg.paths.output_dir} holds this sweep job's run, stopped at step {step} and "
                         f"trained with other settings: {'; '.join(changed)}; rerun the sweep's own command to go on "
                         f"with it, or choose a new {new}.")
    if changed:
        log.warning("the steps before %d were trained with other settings than this command's: %s", step,
                    "; ".join(changed))


def _asks_for_another_length(saved: dict, cfg: DictConfig) -> bool:
    trainer = saved.get("trainer", {})
    return any(trainer.get(key) != cfg.trainer.get(key) for key in ("epochs", "max_steps"))


def _check_scheduled_length(cfg: DictConfig, meta, total_steps: int, ckpts, own: bool) -> None:
    """A learning-rate schedule spans the run's length: continued under another length, the rest of the run would
    follow another curve than its first steps did. (Checkpoints saved before their length was recorded pass.)"""
    scheduled = (meta or {}).get("total_steps")
    if scheduled is None or scheduled == total_steps:
        return
    if cfg.schedule is not None or meta["config"].get("schedule") is not None:
        raise (RunRefused if own else UserError)(
            f"the checkpoints in {ckpts.directory} follow a learning-rate schedule over {scheduled} steps, and "
            f"trainer.epochs, trainer.max_steps and trainer.batch_size now give {total_steps}; restore them or start "
            f"in a new {new_run_dir(cfg.paths.output_dir)}.")


def _saver(cfg: DictConfig, ckpts, stream, total_steps: int, early=None, start_step: int = 0):
    """save(step, host state, host sums, eval metrics): refuses non-finite params, so the latest is good.
    save.later(...) takes the same arguments, checks and describes the checkpoint now and returns the call that
    writes it (None when there is nothing to write): a population writes its members' on another thread."""
    config = OmegaConf.to_container(cfg, resolve=True)
    written = set()  # steps this run has saved: a population saves its final step before finish() asks again

    def later(step, state, sums, eval_metrics=None, replace=False, scheduled=None):
        if ckpts is None:
            return None
        host_state = jax.device_get(state)
        if not all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(host_state.params)):
            raise NonFiniteLoss(f"parameters became non-finite by step {step}; the checkpoint was not written "
                                f"— {divergence_advice(cfg)}.")
        epoch, index = stream.position(step)  # informative: the step alone decides the next batch
        meta = {"step": step, "epoch": epoch, "index": index, "metrics": eval_metrics, "config": config,
                "total_steps": scheduled or total_steps}
        if early is not None:  # patience survives a preemption
            meta["early_stopping"] = early.state_dict()

        def write():
            if step in written:
                return
            if step in ckpts.steps():
                if step <= start_step and not replace:
                    return  # a finished run's own step, evaluated again
                if not replace:  # past the step this run resumed from: its restore skipped this one as unreadable
                    log.warning("replacing checkpoint step %d in %s, which could not be restored", step,
                                ckpts.directory)
                ckpts.delete(step)
            ckpts.save(step, {"state": host_state, "sums": sums}, meta, metrics=eval_metrics)
            written.add(step)

        def outlived(later: list) -> bool:
            """Whether orbax would delete this checkpoint once `later` (writes of this run due after it, in order)
            are saved, so that writing it is in vain. A step on disk or replaced is always written."""
            return (bool(later) and not replace and step not in ckpts.steps()
                    and ckpts.outlived([(step, eval_metrics)] + [(w.step, w.metrics) for w in later]))

        write.step, write.metrics, write.outlived = step, eval_metrics, outlived
        return write

    def save(step, state, sums, eval_metrics=None, wait=False, replace=False, scheduled=None):
        """`replace`: the step is written again even where it is on disk (its early-stopping counters changed).
        `scheduled`: the run length its metadata records, when not this run's (a lengthened run's old end)."""
        write = later(step, state, sums, eval_metrics, replace, scheduled)
        if write is not None:
            write()
            if wait:
                ckpts.wait()

    save.later = later
    return save


class RecordedResults(dict):
    """A finished run's results.json, reported again by a command that trained nothing."""


def _recorded_results(cfg: DictConfig, task, results_path: str, meta: dict, step: int):
    """The results of a run with nothing left to train, with this command's objective; None when its results.json
    is missing or from before it reached `step` (it was stopped between its last checkpoint and writing them:
    finishing it writes them). A command with other settings is refused: the run would report results it was
    not trained with."""
    results = load_json(results_path)
    if results is None or results.get("steps") != step:
        return None
    changed = result_changes(meta["config"], cfg)
    if changed:
        raise RunRefused(f"{named_run_dir(cfg.paths.output_dir)} already holds a finished run trained with other "
                         f"settings: {'; '.join(changed)}; choose a new {new_run_dir(cfg.paths.output_dir)}.")
    if not all(isinstance(results.get(split, {}), dict) for split in ("train", "validation", "test")):
        return None  # damaged (a split's metrics not a mapping): finishing the run writes them again
    try:
        objective = objective_of(cfg, results, task)
    except ValueError:  # a metric that is no number: damaged as well
        return None
    return RecordedResults(results, objective=objective)


def objective_of(cfg: DictConfig, results: dict, task):
    """The value of what a sweeper optimises (Task.optimized); a list of names gives one value each."""
    names = task.optimized(cfg)
    if isinstance(names, str):
        return _result_value(names, results, cfg)
    return [_result_value(str(name), results, cfg) for name in names]


def _result_value(name: str, results: dict, cfg: DictConfig) -> float:
    split, _, metric = name.partition("/")
    try:
        value = float(results[split][metric] if metric else results[split])
    except (KeyError, TypeError):
        choices = [f"{s}/{m}" for s in ("test", "validation", "train") for m in results.get(s, {})]
        raise UserError(f"optimized_metric={name!r} is not in the results; use one of {choices}.") from None
    if not np.isfinite(value):  # a sweeper given NaN would end the whole sweep; raising fails this trial only
        held_out = results.get(split) if split in ("validation", "test") else None
        if metric == "r2" and held_out and np.isfinite(held_out.get("loss", np.nan)):
            # the run trained well enough: R^2 divides by the split's target variance, which a tiny split lacks
            count = held_out.get("count", 0)
            raise UserError(f"the objective {name} is {value}: R² is undefined on the {split} split ({count} example"
                            f"{'' if count == 1 else 's'}), whose targets do not vary measurably; carve a larger one "
                            f"with dataset.{split}_fraction (now {cfg.dataset[split + '_fraction']}), or optimise "
                            f"{split}/loss.")
        raise NonFiniteLoss(f"the objective {name} is {value}; {divergence_advice(cfg)}.")
    return value


def _speed_of(results_path: str) -> dict | None:
    """The examples_per_s and model.achieved_gflop_s a finished run's results.json gives, or None."""
    try:
        with open(results_path) as f:
            results = json.load(f)
        return {"examples_per_s": results["examples_per_s"],
                "achieved_gflop_s": results.get("model", {}).get("achieved_gflop_s")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # unreadable: the new figures stand
        return None


def _logged_speed(logger) -> dict | None:
    """The examples_per_s and achieved_gflop_s of the steps the run's kept train records logged (the examples they
    cover over the time they took), or None without any: what a run killed between its last checkpoint and
    results.json, finished by a command that trains no step, reports. Its records are those up to its end."""
    steps = seconds = 0.0
    before = 0
    for record in logger.history:
        if record["split"] != "train" or record.get("final") or record["step"] <= before:
            continue
        if record.get("examples_per_s", 0) > 0:  # per example: the batch size the records share cancels out
            steps += record["step"] - before
            seconds += (record["step"] - before) / record["examples_per_s"]
        before = record["step"]
    if not seconds:
        return None
    examples_per_s = steps / seconds
    flops = logger.train_flops_per_example
    return {"examples_per_s": examples_per_s, "achieved_gflop_s": flops * examples_per_s / 1e9 if flops else None}


def _withdraw_results(results_path: str) -> None:
    """A finished run trained on (a larger trainer.epochs or max_steps): its results.json reports the state of a
    step whose checkpoint the run's newer ones replace. Stopped before its new end, the directory would hold results
    no checkpoint has; the run's end writes them anew."""
    steps = (load_json(results_path) or {}).get("steps")  # the run's length; the step it resumed from may be older
    os.remove(results_path)
    log.info("results.json%s is withdrawn while the run trains on; its end writes it again",
             f" of the run's {steps} steps" if isinstance(steps, int) else "")


def _has_entries(directory: str) -> bool:
    try:
        return bool(os.listdir(directory))
    except OSError:  # none there
        return False
