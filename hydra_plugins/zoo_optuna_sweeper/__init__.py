"""Hydra finds the zoo's Optuna sweeper here (`hydra/sweeper=zoo_optuna`); the work is in zoo.sweeps."""
