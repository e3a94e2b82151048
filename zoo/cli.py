"""The thin layer between Hydra and train()/evaluate(): user mistakes become one sentence and exit code 2."""
import logging
import sys

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from zoo.errors import UserError


def _in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def run_task(fn, cfg):
    """Call fn(cfg); return its objective for sweepers. In a sweep an error fails only this trial."""
    for noisy in ("absl", "jax"):  # library chatter (TPU probing, orbax internals) stays out of run logs
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        return fn(cfg)["objective"]
    except UserError as e:
        if _in_multirun():
            raise  # the sweeper records the trial as failed and goes on
        print(f"error: {e}", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
