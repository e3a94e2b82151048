"""Plain nnx.Modules. They take input/output sizes from the dataset and know nothing of losses or devices."""
from zoo.models.cnn import CNN
from zoo.models.linear import Linear
from zoo.models.mlp import MLP

__all__ = ["CNN", "Linear", "MLP"]
