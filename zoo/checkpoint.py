"""Orbax checkpoints: the unreplicated train state (+ partial metric sums) and JSON metadata per step.

Orbax writes each step into a temporary directory and renames it when complete, so a save cut short
(kill -9, full disk) is never listed as a step.
"""
import logging
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy as pp

from zoo.errors import UserError

log = logging.getLogger("zoo")


class Checkpoints:
    def __init__(self, directory: str, *, keep: int = 3, keep_best: int = 1, metric: str = "accuracy",
                 mode: str = "max", async_save: bool = True, read_only: bool = False):
        self.directory = os.path.abspath(directory)
        policy = pp.AnyPreservationPolicy([
            pp.LatestN(n=keep),
            pp.BestN(get_metric_fn=lambda m: m[metric], reverse=mode == "min", n=keep_best,
                     keep_checkpoints_without_metrics=False),
        ])
        options = ocp.CheckpointManagerOptions(preservation_policy=policy, enable_async_checkpointing=async_save,
                                               create=not read_only, read_only=read_only,
                                               cleanup_tmp_directories=not read_only)  # leftovers of killed saves
        self.metric, self.mode = metric, mode
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def steps(self) -> list:
        return sorted(self.manager.all_steps())

    def save(self, step: int, tree, meta: dict, metrics: dict | None = None) -> None:
        """`tree` must be host (unreplicated) arrays; writing continues in the background."""
        args = ocp.args.Composite(state=ocp.args.StandardSave(tree), meta=ocp.args.JsonSave(meta))
        self.manager.save(step, args=args, metrics=metrics, force=True)

    def meta(self, step: int) -> dict:
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta

    def restore(self, step: int, target):
        """Restore into the structure of `target` (host arrays); raises UserError if unreadable."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(jax.device_get(target)),
                                  meta=ocp.args.JsonRestore())
        try:
            restored = self.manager.restore(step, args=args)
        except Exception as e:  # truncated files, changed structure: orbax raises many types
            raise UserError(f"checkpoint step {step} in {self.directory} cannot be restored "
                            f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}).") from None
        expected = [(np.shape(x), np.result_type(x)) for x in jax.tree.leaves(target)]
        found = [(np.shape(x), np.result_type(x)) for x in jax.tree.leaves(restored.state)]
        if expected != found:  # orbax restores numpy targets without checking shapes
            raise UserError(f"checkpoint step {step} in {self.directory} holds arrays of other shapes than this "
                            "run's model and optimizer; restore the settings it was trained with.")
        return restored.state, restored.meta

    def best_step(self):
        scored = [(self.meta(s).get("metrics"), s) for s in self.steps()]
        scored = [(m[self.metric], s) for m, s in scored if m and self.metric in m]
        if not scored:
            return None
        return (max if self.mode == "max" else min)(scored)[1]

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def restore_latest_good(ckpts: Checkpoints, target):
    """Newest step that restores; older ones are tried only after saying why the newer failed."""
    steps = ckpts.steps()
    for step in reversed(steps):
        try:
            return step, *ckpts.restore(step, target)
        except UserError as e:
            log.warning("%s Falling back to the previous checkpoint.", e)
    raise UserError(f"no checkpoint in {ckpts.directory} can be restored (tried steps {steps}).")
