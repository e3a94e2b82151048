"""Sweeps: the Optuna sweeper (hydra/sweeper=zoo_optuna), pruning through train(), and the sweep summary."""
