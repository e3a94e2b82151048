"""zoo: a Flax NNX model zoo driven by Hydra configs."""
