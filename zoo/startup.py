"""The entry scripts' imports, made without the garbage collector.

Importing jax, flax, optax, orbax, hydra and tensorflow-datasets leaves ~300,000 objects for the collector to
track, nearly all of them alive as long as the process. Counting allocations, it runs over 400 passes while they
load, three of them over everything loaded so far, and every later full pass (the interpreter's exit runs one)
would scan them again. So the imports run with the collector off, and what they made is then frozen: left out of
every later pass. `python train.py` finishes ~1 s sooner on two cores (6.9 s against 8.0, paired runs).
"""
import contextlib
import gc
import logging
import os
import signal
import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM to a command that only reads runs (eval.py, export.py, predict.py), or to a single training run
    before its train loop: it stops as on Ctrl-C, what it was writing undone, and exits 143 (128 + SIGTERM) with
    its line."""


_sigterm_as_ctrl_c = False


def stop_on_sigterm_as_on_ctrl_c() -> None:
    """For the commands that read runs and single training runs, before anything else: SIGTERM's default ended them
    without a word. (A run's train loop handles SIGTERM itself: it saves and stops, zoo.preemption.)"""
    global _sigterm_as_ctrl_c
    _sigterm_as_ctrl_c = True
    signal.signal(signal.SIGTERM, _terminated)


def stops_on_sigterm_as_on_ctrl_c() -> bool:
    """Whether this process is a command that reads runs or a single training run (stop_on_sigterm_as_on_ctrl_c)."""
    return _sigterm_as_ctrl_c


def _terminated(signum, frame):
    raise Terminated


@contextlib.contextmanager
def starting():
    """Ctrl-C (or a reading command's SIGTERM) before Hydra starts (the imports, the configs' registration, the
    command line's checks) ends the command with one line (exit 130, 143) instead of a traceback; nothing has been
    written yet. It exits without finalising Python, which a half-imported JAX could crash."""
    try:
        yield
    except KeyboardInterrupt as e:
        stopped = "stopped by SIGTERM" if isinstance(e, Terminated) else "interrupted by Ctrl-C"
        print(f"error: {stopped} while the command started; nothing was written.", file=sys.stderr)
        sys.stderr.flush()
        os._exit(143 if isinstance(e, Terminated) else 130)


@contextlib.contextmanager
def loading_libraries():
    """The imports, as `starting`, without the garbage collector. A library that logs through the root logger while
    it is imported (logging.warning) gives it a stderr handler of its own (logging.basicConfig), through which each of
    Hydra's lines before it configures logging (`--info`) was printed twice: it is taken away again."""
    enabled = gc.isenabled()
    gc.disable()
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        with starting():
            yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        gc.freeze()  # what the imports made is never garbage: no later pass needs to look at it
        if enabled:
            gc.enable()
