"""Populations: a sweep's trials that differ only in seed and optimizer settings, trained as one program.

`hydra/launcher=population` (hydra_plugins/zoo_population_launcher) groups a sweep's jobs with
zoo.population.grouping and trains each group with zoo.population.train.train_population.
"""
