"""The function an export holds: raw inputs -> predictions, with the dataset's normalisation inside.

Parameters and statistics are closed over, so they become constants of the exported program: the artifact
needs no checkpoint, no config and no Flax to run."""
import jax
import jax.numpy as jnp
from flax import nnx

from zoo.data import Dataset

INPUT_DTYPE = "float32"


def output_names(task: str) -> list:
    """In the order the jax.export program returns them (a dict's outputs are flattened by sorted key)."""
    return ["logits", "probabilities"] if task == "classification" else ["predictions"]


def inference_function(model: nnx.Module, data: Dataset):
    """f(x) for x of shape (B, *data.input_shape), float32 in the dataset's raw units, any B.

    Classification returns logits and softmax probabilities; regression returns predictions in the
    targets' original units (the training-time target standardisation undone)."""
    graphdef, state = nnx.split(model)
    x_mean, x_std = _float32(data.x_scaler)
    y_mean, y_std = _float32(data.y_scaler) if data.y_scaler is not None else (None, None)

    def predict(x):
        outputs = nnx.merge(graphdef, state)((x - x_mean) / x_std, train=False)  # BatchNorm: running averages
        if data.task == "classification":
            return {"logits": outputs, "probabilities": jax.nn.softmax(outputs, axis=-1)}
        return {"predictions": outputs * y_std + y_mean}

    return predict


def _float32(scaler) -> tuple:
    return jnp.asarray(scaler.mean, jnp.float32), jnp.asarray(scaler.std, jnp.float32)


def export_function(predict, input_shape: tuple, platforms) -> jax.export.Exported:
    """jax.export with a symbolic batch dimension, so one artifact serves every batch size."""
    (batch,) = jax.export.symbolic_shape("batch")
    spec = jax.ShapeDtypeStruct((batch, *input_shape), jnp.dtype(INPUT_DTYPE))
    return jax.export.export(jax.jit(predict), platforms=list(platforms))(spec)
