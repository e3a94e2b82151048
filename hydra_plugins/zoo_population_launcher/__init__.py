"""Hydra finds the zoo's population launcher here (`hydra/launcher=population`); the work is in zoo.population."""
