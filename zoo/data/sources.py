"""Read a dataset's splits into numpy arrays through `tfds.data_source` (embedded and catalog alike)."""
import os

import numpy as np
import tensorflow_datasets as tfds

from zoo.data.embedded import BUILDERS
from zoo.errors import UserError

tfds.disable_progress_bar()


def _embedded_kwargs(cfg) -> dict:
    kwargs = {"test_fraction": cfg.test_fraction}
    if cfg.tfds_name == "zoo_synthetic_linear":
        kwargs.update(num_examples=cfg.num_examples, num_features=cfg.num_features, noise=cfg.noise)
    # Every generation setting is in the config name, so a change never reuses stale prepared data.
    name = "_".join(f"{k}{v}" for k, v in sorted(kwargs.items()))
    return {"config": tfds.core.BuilderConfig(name=name), **kwargs}


def _prepare_embedded(cfg, data_dir: str) -> dict:
    kwargs = _embedded_kwargs(cfg)
    builder = BUILDERS[cfg.tfds_name](data_dir=data_dir, **kwargs)
    try:
        os.makedirs(data_dir, exist_ok=True)
        builder.download_and_prepare(file_format="array_record")
    except OSError as e:  # permission denied, a file in the way, read-only or full disk
        raise UserError(f"paths.data_dir={data_dir} is not writable ({e.strerror or e}); set paths.data_dir "
                        "to a directory you can write.") from None
    return kwargs


def _catalog_error(cfg, data_dir: str, err: Exception) -> UserError:
    return UserError(
        f"dataset={cfg.name} is not prepared in paths.data_dir={data_dir} and could not be downloaded "
        f"({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else 'no detail'}); on a machine "
        f"with internet run `python -c \"import tensorflow_datasets as tfds; tfds.data_source('{cfg.tfds_name}', "
        f"data_dir='DIR')\"`, copy DIR/{cfg.tfds_name} into paths.data_dir, or pick an embedded dataset "
        "(dataset=digits|diabetes|synthetic_linear).")


def _to_arrays(source, x_key: str, y_key: str):
    examples = [source[i] for i in range(len(source))]
    return (np.stack([e[x_key] for e in examples]).astype(np.float32), np.stack([e[y_key] for e in examples]))


def read_splits(cfg, data_dir: str) -> dict:
    """{'train': (x, y), 'test': (x, y)} as numpy, in the stored (deterministic) order."""
    data_dir = os.path.expanduser(data_dir)
    if cfg.embedded:
        builder_kwargs = _prepare_embedded(cfg, data_dir)
        keys, download = ("x", "y"), False
    else:
        builder_kwargs, keys, download = None, ("image", "label"), True
    try:
        train, test = tfds.data_source(cfg.tfds_name, split=["train", "test"], data_dir=data_dir,
                                       download=download, builder_kwargs=builder_kwargs)
    except Exception as e:  # tfds raises many types for "no network / not prepared"
        if cfg.embedded:
            raise UserError(f"the prepared dataset in paths.data_dir={data_dir} could not be read ({e}); "
                            f"delete {os.path.join(data_dir, cfg.tfds_name)} to prepare it again.") from None
        raise _catalog_error(cfg, data_dir, e) from None
    return {"train": _to_arrays(train, *keys), "test": _to_arrays(test, *keys)}
