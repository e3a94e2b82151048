"""The entry scripts' imports, made without the garbage collector.

Importing jax, flax, optax, orbax, hydra and tensorflow-datasets leaves ~300,000 objects for the collector to
track, nearly all of them alive as long as the process. Counting allocations, it runs over 400 passes while they
load, three of them over everything loaded so far, and every later full pass (the interpreter's exit runs one)
would scan them again. So the imports run with the collector off, and what they made is then frozen: left out of
every later pass. `python train.py` finishes ~1 s sooner on two cores (6.9 s against 8.0, paired runs).
"""
import contextlib
import gc
import os
import sys


@contextlib.contextmanager
def loading_libraries():
    """Ctrl-C while they load ends the command with one line (exit 130) instead of an import traceback; nothing
    has been written yet. It exits without finalising Python, which a half-imported JAX could crash."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    except KeyboardInterrupt:
        print("error: interrupted by Ctrl-C while the command started; nothing was written.", file=sys.stderr)
        sys.stderr.flush()
        os._exit(130)
    finally:
        gc.freeze()  # what the imports made is never garbage: no later pass needs to look at it
        if enabled:
            gc.enable()
