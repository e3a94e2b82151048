"""Measurement of the training system, kept apart from it: `python -m zoo.bench` (the speed table) and
`python -m zoo.bench.modes` (steps/s per parallel mode). Nothing in `zoo` outside this package imports it."""
