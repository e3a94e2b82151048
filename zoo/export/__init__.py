"""A trained model as a portable artifact (export) and predictions from it (predict).

Nothing is imported here: `zoo.export.predict` needs only jax and numpy, and must not pull in flax."""
