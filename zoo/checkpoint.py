"""Orbax checkpoints: the unreplicated train state (+ partial metric sums) and JSON metadata per step.

Orbax writes each step into a temporary directory and renames it when complete, so a save cut short
(kill -9, full disk) is never listed as a step: the previous one stays the latest.
"""
import dataclasses
import datetime
import errno
import json
import logging
import math
import os
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy as pp

from zoo.errors import UserError, brief

log = logging.getLogger("zoo")


def _quiet_closed_loop_callbacks() -> None:
    """A failed orbax read or write abandons its asyncio loop while tensorstore still holds callbacks into
    it; each later prints 'RuntimeError: Event loop is closed' as a traceback. They carry no information."""
    previous = sys.unraisablehook
    if getattr(previous, "zoo_filter", False):
        return

    def hook(unraisable):
        if not (isinstance(unraisable.exc_value, RuntimeError) and str(unraisable.exc_value) == "Event loop is closed"):
            previous(unraisable)

    hook.zoo_filter = True
    sys.unraisablehook = hook


_STEPS_READ = set()  # directories of the steps this process restores from


def _quiet_abandoned_reads() -> None:
    """orbax restores a step in an event loop of its own and closes it at the first failed read: the step's other
    reads fail too, and asyncio logs each with a traceback, 'Task exception was never retrieved', whenever the
    garbage collector gets to it (on some runs only). Those naming a step this process reads say nothing new: a
    failed read fails the step's restore, which is said in one sentence. Any other is kept."""
    asyncio_log = logging.getLogger("asyncio")
    if any(getattr(f, "zoo_filter", False) for f in asyncio_log.filters):
        return

    def keep(record):
        err = record.exc_info[1] if record.exc_info else None
        return not (err is not None and "exception was never retrieved" in record.getMessage()
                    and any(step in str(err) for step in _STEPS_READ))

    keep.zoo_filter = True
    asyncio_log.addFilter(keep)


def _io_reason(err: BaseException):
    """'no space left on device' etc. when `err` (or its cause) is a file-system failure, else None."""
    while err is not None:
        text = str(err)
        if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "No space left on device" in text:
            return "no space left on device"
        if isinstance(err, OSError):
            return err.strerror or text
        if "os_error_code" in text or text.startswith(("RESOURCE_EXHAUSTED", "PERMISSION_DENIED")):
            return text.splitlines()[0][:200]
        err = err.__cause__ or err.__context__
    return None


def _quiet_orbax_logs() -> None:
    """Steps saved between evals carry no metrics by design; orbax warns about each of them. A write that fails
    for the file system (a full disk) orbax logs with a traceback from each thread it ran on; Checkpoints
    reports it as one sentence that says which checkpoint stays the latest."""
    absl = logging.getLogger("absl")
    if not any(getattr(f, "zoo_filter", False) for f in absl.filters):
        def keep(record):
            if "did not provide metrics" in record.getMessage():
                return False
            reported = record.levelno >= logging.ERROR and "orbax" in record.pathname and (
                _io_reason(record.exc_info[1] if record.exc_info else None) or "os_error_code" in record.getMessage())
            return not reported

        keep.zoo_filter = True
        absl.addFilter(keep)


@dataclasses.dataclass
class NewestRegular(pp.PreservationPolicy):
    """The `n` newest regular checkpoints (at a multiple of `every` steps, or scored by an eval: the final one, early
    stopping's) and the newest of all. One saved only because a signal stopped the run is where its rerun resumes;
    counted among the newest it would push out a regular one the uninterrupted run keeps, so it is kept only while
    it is the newest."""

    n: int
    every: int = 0  # trainer.checkpoint_every; 0: only the end

    def should_preserve(self, checkpoints, *, context) -> list:
        regular = [i for i, c in enumerate(checkpoints)
                   if (self.every and c.step % self.every == 0) or c.metrics is not None]
        kept = set(regular[-self.n:]) | {len(checkpoints) - 1}
        return [i in kept for i in range(len(checkpoints))]


def _damaged_metrics(directory: str) -> list:
    """(step, path) of each step in `directory` whose saved metrics are not JSON: all are named at once, so that
    moving them out is one command, not one a damaged step."""
    steps = sorted((name for name in os.listdir(directory) if name.isdigit()), key=int)
    damaged = []
    for step in steps:
        path = os.path.join(directory, step, "metrics", "metrics")
        try:
            with open(path) as f:
                json.load(f)
        except FileNotFoundError:  # a step saved without metrics
            continue
        except (OSError, ValueError):
            damaged.append((step, path))
    return damaged


@dataclasses.dataclass
class _Due:  # a save not made yet, as orbax's preservation policies see a checkpoint
    step: int
    metrics: dict | None
    time: datetime.datetime


class StateMismatch(UserError):
    """The checkpoint holds a state of another structure or shapes than the run restoring it: not damage."""


class Checkpoints:
    def __init__(self, directory: str, *, keep: int = 3, keep_best: int = 1, metric: str = "accuracy",
                 mode: str = "max", every: int = 0, async_save: bool = True, read_only: bool = False,
                 way_out: str = "start in a new hydra.run.dir."):
        """`every`: trainer.checkpoint_every, which tells a stop's extra checkpoint from the regular ones. `way_out`:
        what else to do when they cannot be opened, besides moving the damaged steps out (the command's own: a new
        hydra.run.dir for a run's own, not for eval.py or another run's trainer.resume)."""
        self.directory = os.path.abspath(directory)
        worst = -math.inf if mode == "max" else math.inf

        def ranked(m):  # an undefined metric (nan) sorts anywhere: it would be kept as the best, the best deleted
            return worst if math.isnan(m[metric]) else m[metric]

        self.policy = pp.AnyPreservationPolicy([
            NewestRegular(n=keep, every=every),
            pp.BestN(get_metric_fn=ranked, reverse=mode == "min", n=keep_best, keep_checkpoints_without_metrics=False),
        ])
        # best_fn only makes orbax write each step's metrics to disk, so a reopened manager (a resumed run)
        # still knows which steps are the best; which steps are kept is the policy's decision alone
        options = ocp.CheckpointManagerOptions(preservation_policy=self.policy, enable_async_checkpointing=async_save,
                                               best_fn=ranked, best_mode=mode,
                                               create=not read_only, read_only=read_only,
                                               cleanup_tmp_directories=not read_only)  # leftovers of killed saves
        self.metric, self.mode = metric, mode
        self._pending, self._failed = None, False  # step written in the background; a write already failed
        _quiet_closed_loop_callbacks()
        _quiet_abandoned_reads()
        _quiet_orbax_logs()
        if not read_only and os.path.lexists(self.directory) and not os.path.isdir(self.directory):
            # orbax opens it without a word, and fails the first save (or the close) from a thread of its own
            raise UserError(f"something is in the way at {self.directory} (a file where a run keeps its "
                            "checkpoints); move it and run the command again.")
        try:
            self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))
        except OSError as e:  # a file in the way, read-only file system
            raise UserError(f"cannot create checkpoints in {self.directory} ({e.strerror or e}); choose a "
                            "writable hydra.run.dir (or paths.output_dir).") from None
        except ValueError as e:  # orbax reads each step's saved metrics here; one is damaged
            damaged = _damaged_metrics(self.directory)  # orbax's error names no file, and a run holds several steps
            if not damaged:
                raise UserError(f"the checkpoints in {self.directory} cannot be opened ({brief(e)}); move the "
                                f"damaged step out of it or {way_out}") from None
            steps = [step for step, _ in damaged]
            paths = ", ".join(path for _, path in damaged)
            folders = ", ".join(os.path.join(self.directory, step) for step in steps)
            which = (f"step {steps[0]}'s" if len(steps) == 1
                     else f"steps {', '.join(steps[:-1])} and {steps[-1]}'s")
            those = "that step" if len(steps) == 1 else "those steps"
            raise UserError(f"the checkpoints in {self.directory} cannot be opened: {which} saved metrics ({paths}) "
                            f"are damaged ({brief(e)}); move {those} out of it ({folders}) or {way_out}") from None

    def steps(self) -> list:
        return sorted(self.manager.all_steps())

    def reload(self) -> list:
        """The steps on disk now (another process, a run still training, may have saved and deleted some)."""
        self.manager.reload()
        return self.steps()

    def save(self, step: int, tree, meta: dict, metrics: dict | None = None) -> None:
        """`tree` must be host (unreplicated) arrays; writing continues in the background."""
        self.wait()  # orbax waits for the previous write anyway; waiting here reports its failure under its step
        args = ocp.args.Composite(state=ocp.args.StandardSave(tree), meta=ocp.args.JsonSave(meta))
        self._surface_errors(lambda: self.manager.save(step, args=args, metrics=metrics, force=True), step)
        self._pending = step

    def outlived(self, due: list) -> bool:
        """Whether saving the first of `due` ((step, eval metrics) of saves to make in that order) is in vain: this
        manager's policy deletes it once the others are saved. The policy keeps the newest steps and the best, so
        a step it would delete among these it deletes among all the steps on disk too."""
        now = datetime.datetime.now(datetime.timezone.utc)
        infos = [_Due(step, metrics, now) for step, metrics in due]
        return len(infos) > 1 and not self.policy.should_preserve(infos, context=pp.PreservationContext())[0]

    def delete(self, step: int) -> None:
        self.wait()
        self._surface_errors(lambda: self.manager.delete(step), step)

    def _surface_errors(self, fn, step) -> None:
        """Run fn; a full disk or refused write becomes one sentence that says what is kept."""
        try:
            fn()
        except Exception as e:
            reason = _io_reason(e)
            if reason is None:
                raise
            self._failed = True
            kept = [s for s in self.steps() if s != step]
            latest = f"step {kept[-1]} stays the latest checkpoint" if kept else "no earlier checkpoint exists"
            raise UserError(f"could not write checkpoint step {step} in {self.directory} ({reason}); {latest} — "
                            "free space there and rerun the same command to resume.") from None

    def meta(self, step: int) -> dict:
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta

    def restore(self, step: int, target):
        """Restore into the structure of `target` (host arrays); raises UserError if unreadable."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(jax.device_get(target)),
                                  meta=ocp.args.JsonRestore())
        _STEPS_READ.add(os.path.join(self.directory, str(step), ""))
        try:
            restored = self.manager.restore(step, args=args)
        except Exception as e:  # truncated files, changed structure: orbax raises many types
            error = StateMismatch if "tree structures do not match" in str(e) else UserError
            raise error(f"checkpoint step {step} in {self.directory} cannot be restored ({brief(e)}).") from None
        expected = [(np.shape(x), np.result_type(x)) for x in jax.tree.leaves(target)]
        found = [(np.shape(x), np.result_type(x)) for x in jax.tree.leaves(restored.state)]
        if expected != found:  # orbax restores numpy targets without checking shapes
            raise StateMismatch(f"checkpoint step {step} in {self.directory} holds arrays of other shapes than this "
                            "run's model and optimizer; restore the settings it was trained with.")
        if not _params_finite(restored.state):  # orbax keeps no checksums: damaged bytes read back as values
            raise UserError(f"checkpoint step {step} in {self.directory} cannot be restored (its parameters hold "
                            "non-finite values, which no run saves: its files are damaged).")
        return restored.state, restored.meta

    def best_step(self, metric=None, mode=None):
        """Step with the best eval `metric` (default: the one this manager keeps the best by), the later on a tie;
        a step whose metric is undefined (nan) is none's best."""
        metric, mode = metric or self.metric, mode or self.mode
        sign = 1 if mode == "max" else -1
        scored = [(self.metrics_or_none(s), s) for s in self.steps()]
        scored = [(sign * m[metric], s) for m, s in scored if m and metric in m and not math.isnan(m[metric])]
        return max(scored)[1] if scored else None

    def first_readable_meta(self, steps: list, hint: str = "") -> dict:
        """The metadata of the first of `steps` that reads (every step of a run holds its config); a damaged step
        is skipped, as restore_latest_good skips it. When none reads, a UserError names the first."""
        first_error = None
        for step in steps:
            try:
                meta = self.meta(step)
                if not isinstance(meta.get("config"), dict):  # what every caller reads first
                    raise ValueError("it holds no config")
                return meta
            except Exception as e:  # noqa: BLE001 — orbax raises many types for a damaged file
                first_error = first_error or e
        if len(steps) > 1:
            raise UserError(f"no checkpoint in {self.directory} has readable metadata (tried steps {steps}; step "
                            f"{steps[0]}: {first_error})" + (f"; {hint}" if hint else "."))
        raise UserError(f"checkpoint step {steps[0]} in {self.directory} has unreadable metadata ({first_error})"
                        + (f"; {hint}" if hint else "."))

    def metrics_or_none(self, step: int):
        """The eval metrics saved with `step`; None when it has none, or its metadata is unreadable (then said)."""
        try:
            return self.meta(step).get("metrics")
        except Exception:  # noqa: BLE001 — a step with damaged metadata cannot be restored either: not a candidate
            if not os.path.isdir(os.path.join(self.directory, str(step))):
                return None  # deleted while being read by a run still training, which saves newer ones: not damage
            log.warning("checkpoint step %d in %s has unreadable metadata; it is not a candidate for the best",
                        step, self.directory)
            return None

    def wait(self) -> None:
        self._surface_errors(self.manager.wait_until_finished, self._pending)
        self._surface_errors(self.manager.check_for_errors, self._pending)

    def close(self) -> None:
        """Finish background writes; after a write failure was reported, only release what can be released."""
        # orbax's close() does not wait for the clean-up of killed saves' leftovers that opening started: a run
        # refused right after opening would exit under it, and that thread would log a traceback at shutdown
        cleanup = getattr(self.manager, "_cleanup_tmp_directory_future", None)
        if cleanup is not None:
            cleanup.result()
        if not self._failed:
            self._surface_errors(self.manager.close, self._pending)
            return
        try:
            self.manager.close()
        except Exception:  # the same failure again; it is already on its way to the user
            pass


def restorable_steps(ckpts: Checkpoints, target, steps: list) -> list:
    """Those of `steps` that restore into `target` (None: whose metadata holds a config): the ones a refusal may name
    to choose instead, as several steps of a run may be damaged at once."""
    readable = []
    for step in steps:
        try:
            if target is None:
                ckpts.first_readable_meta([step])
            else:
                ckpts.restore(step, target)
        except UserError:
            continue
        readable.append(step)
    return readable


def _params_finite(tree) -> bool:
    """Whether a restored run state's parameters are finite, as every save checks them (zoo.outputs._saver)."""
    params = getattr(tree.get("state") if isinstance(tree, dict) else None, "params", None)
    return all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(params)
               if np.issubdtype(np.result_type(leaf), np.inexact))


def restore_latest_good(ckpts: Checkpoints, target, steps=None, hint="start in a new hydra.run.dir."):
    """First of `steps` (default: all, newest first) that restores; each failure is said before the next try."""
    steps = list(reversed(ckpts.steps())) if steps is None else steps
    for step in steps:
        try:
            return step, *ckpts.restore(step, target)
        except StateMismatch:
            raise  # all steps of a run share one structure: an older one would not fit either
        except UserError as e:
            if len(steps) == 1:
                raise
            if not os.path.isdir(os.path.join(ckpts.directory, str(step))):
                continue  # deleted while being read by a run still training, which saves newer ones: not damage
            log.warning("%s Falling back to the previous checkpoint.", e)
    raise UserError(f"no checkpoint in {ckpts.directory} can be restored (tried steps {steps}); {hint}")
