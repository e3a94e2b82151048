"""Measurement of the training system, kept apart from it: `python -m zoo.bench` (the speed table),
`python -m zoo.bench.modes` (steps/s per parallel mode) and `python -m zoo.bench.population` (a sweep's wall
time with the population launcher against the basic one; minutes, so not in the default suite). Nothing in
`zoo` outside this package imports it."""
