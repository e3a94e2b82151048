"""`python -m zoo.bench.timed_train CLOCK [train.py arguments]`: train.py, with each training call stamped.

zoo.bench.sweep_overhead runs its multirun through this, so "work per job outside train()" is measured against
the training calls themselves (zoo.train.train per job, zoo.population.train.train_population per group):
the stamps `train_start`/`train_end` go to CLOCK beside the sweep's own. train.py binds both functions when it
is imported, so they are wrapped before it runs.
"""
import functools
import json
import runpy
import sys
import time

import zoo.population.train
import zoo.train
from zoo.bench.util import ROOT


def stamped(fn, clock: str):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        _stamp(clock, "train_start")
        try:
            return fn(*args, **kwargs)
        finally:
            _stamp(clock, "train_end")

    return call


def _stamp(clock: str, event: str) -> None:
    with open(clock, "a") as f:
        f.write(json.dumps({"event": event, "t": time.time()}) + "\n")


def main() -> None:
    clock = sys.argv.pop(1)
    zoo.train.train = stamped(zoo.train.train, clock)
    zoo.population.train.train_population = stamped(zoo.population.train.train_population, clock)
    sys.argv[0] = str(ROOT / "train.py")
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
