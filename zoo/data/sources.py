"""Read a dataset's splits into numpy arrays through TFDS data sources (embedded and catalog alike), from
the decoded copy kept beside a prepared dataset once it has been read (zoo.data.decoded).

TFDS prepares into an `incomplete.*` directory and renames it when done, so an interrupted or failed
preparation is never taken for a dataset: the next run prepares again.
"""
import contextlib
import errno
import io
import logging
import os
import socket
import threading
import urllib.parse

import numpy as np
import tensorflow_datasets as tfds
from google.protobuf import json_format

from zoo.cli import launch_dir_path
from zoo.config import builder_name
from zoo.data import decoded
from zoo.data.embedded import BUILDERS
from zoo.errors import Interrupted, UserError
from zoo.startup import Terminated

tfds.disable_progress_bar()
log = logging.getLogger(__name__)
SPLITS = ("train", "test")
PROBE_HOST = "storage.googleapis.com"  # TFDS's own bucket and the MNIST mirror
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy")  # the catalog downloads over https: HTTP_PROXY does not carry it
# Given a data_dir, TFDS prepares tfrecord by default, which has no random access.
RANDOM_ACCESS = {"file_format": "array_record"}
UNREADABLE_INFO = "its dataset_info.json cannot be read"  # what TFDS's builder fails on, before any record is read


class _LogLines(io.TextIOBase):
    def __init__(self):
        super().__init__()
        self.partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.partial = (self.partial + text).split("\n")
        for line in filter(str.strip, lines):
            log.info("%s", line.strip())
        return len(text)


@contextlib.contextmanager
def prints_logged():
    """What TFDS prints while it prepares a dataset ('Downloading and preparing dataset ...') as lines of the command's
    log. On stdout they went, unformatted, into the stream that carries eval.py's result line alone, and a stdout that
    could not be written failed the preparation as if paths.data_dir could not be."""
    lines = _LogLines()
    try:
        with contextlib.redirect_stdout(lines):
            yield
    finally:
        lines.write("\n")


def _damaged(cfg, where: str, reason: str) -> UserError:
    return UserError(f"the prepared dataset={cfg.name} in {where} is damaged ({reason}); delete that directory and "
                     "the next run prepares (or downloads) it again.")


def _unreadable_info(cfg, where: str) -> UserError:
    """A garbled dataset_info.json under the dataset's directory `where`: TFDS's error names no file, and `where`
    holds one for each version (and config); the first that does not parse is named, with the directory holding it."""
    from tensorflow_datasets.core.dataset_info import read_from_json

    for folder, _, files in sorted(os.walk(where)):
        if "dataset_info.json" in files:
            path = os.path.join(folder, "dataset_info.json")
            try:
                read_from_json(path)
            except Exception:  # noqa: BLE001 — protobuf's ParseError, an unreadable file: damaged either way
                return _damaged(cfg, folder, f"{path} cannot be read")
    return _damaged(cfg, where, UNREADABLE_INFO)


def _embedded_kwargs(cfg) -> dict:
    kwargs = {"test_fraction": cfg.test_fraction}
    if cfg.tfds_name == "zoo_synthetic_linear":
        kwargs.update(num_examples=cfg.num_examples, num_features=cfg.num_features, noise=cfg.noise)
    # Every generation setting is in the config name, so a change never reuses stale prepared data.
    name = "_".join(f"{k}{v}" for k, v in sorted(kwargs.items()))
    return {"config": tfds.core.BuilderConfig(name=name), **kwargs}


def _prepare_embedded(cfg, data_dir: str):
    name = builder_name(cfg.tfds_name)
    if cfg.tfds_name not in BUILDERS and name in BUILDERS:
        raise UserError(f"dataset.tfds_name={cfg.tfds_name} names a version or config of the embedded dataset {name}, "
                        f"which has none to choose (its dataset.* settings make it); set dataset.tfds_name={name}.")
    if cfg.tfds_name not in BUILDERS:
        names = ", ".join(sorted(BUILDERS))
        raise UserError(f"dataset.tfds_name={cfg.tfds_name} is not an embedded dataset ({names}); set "
                        "dataset.embedded=false to read a TFDS catalog dataset.")
    if cfg.tfds_name == "zoo_synthetic_linear" and cfg.num_examples * cfg.num_features > np.iinfo(np.intp).max // 8:
        raise too_big(cfg)  # numpy could not even describe the array (ValueError), let alone allocate it
    builder = _open_embedded(cfg, data_dir)
    if not builder.is_prepared():
        try:  # makes the examples, all in memory, before anything is written
            _refuse_an_empty_split(cfg, builder)
        except MemoryError:
            raise too_big(cfg) from None
        _refuse_targets_beyond_float32(cfg, builder)
    try:
        os.makedirs(data_dir, exist_ok=True)
        with prints_logged():
            builder.download_and_prepare(file_format="array_record")
    except OSError as e:  # permission denied, a file in the way, read-only or full disk
        prepared_meanwhile = _open_embedded(cfg, data_dir)
        if prepared_meanwhile.is_prepared():  # parallel jobs (a sweep's trials) prepared it at once; one rename won
            return prepared_meanwhile
        raise UserError(f"paths.data_dir={data_dir} is not writable ({e.strerror or e}); set paths.data_dir "
                        "to a directory you can write.") from None
    except MemoryError:  # TFDS's writer keeps an unfinished preparation in a directory no run reads
        raise too_big(cfg) from None
    except KeyboardInterrupt as e:
        raise Interrupted(f"{_stopped(e)} while preparing dataset={cfg.name} in paths.data_dir={data_dir}; nothing "
                          "half-written was kept and the next run prepares it again.", e) from None
    if not builder.info.splits:  # a parallel job prepared it after this builder looked: TFDS reused that copy
        builder = _open_embedded(cfg, data_dir)  # without reading its description, which opening it again does
    if not builder.info.splits:  # TFDS reuses a directory of records whatever it lacks, its description too
        raise _damaged(cfg, builder.data_dir, "its dataset_info.json is missing")
    return builder


def _stopped(e: KeyboardInterrupt) -> str:
    return "stopped by SIGTERM" if isinstance(e, Terminated) else "interrupted"


def too_big(cfg) -> UserError:
    if not cfg.embedded:  # its inputs decoded as float32 take 4x the prepared copy (uint8 images)
        return UserError(f"{_catalog_name(cfg)} does not fit in this machine's memory (the zoo holds every split in it "
                         "as float32 arrays); free some memory or pick a smaller dataset.")
    if cfg.tfds_name != "zoo_synthetic_linear":
        return UserError(f"dataset={cfg.name} does not fit in this machine's memory; free some memory and run again.")
    gib = cfg.num_examples * cfg.num_features * 8 / 2**30  # generated as float64 before the float32 copy
    return UserError(f"dataset={cfg.name} does not fit in memory (dataset.num_examples={cfg.num_examples} x "
                     f"dataset.num_features={cfg.num_features} inputs are generated as {gib:.3g} GiB of float64); "
                     "lower dataset.num_examples or dataset.num_features.")


def _open_embedded(cfg, data_dir: str):
    try:
        return BUILDERS[cfg.tfds_name](data_dir=data_dir, **_embedded_kwargs(cfg))
    except json_format.ParseError:
        raise _unreadable_info(cfg, os.path.join(data_dir, cfg.tfds_name)) from None


def _refuse_an_empty_split(cfg, builder) -> None:
    """TFDS refuses to write an empty split only after it has created the dataset's directory, with a traceback."""
    sizes = builder.split_sizes()
    empty = [split for split, size in sizes.items() if size == 0]
    if empty:
        generated = " or dataset.num_examples" if cfg.tfds_name == "zoo_synthetic_linear" else ""
        raise UserError(f"dataset.test_fraction={cfg.test_fraction} leaves the {empty[0]} split of "
                        f"dataset={cfg.name} ({sum(sizes.values())} examples) empty; change dataset.test_fraction"
                        f"{generated} so that each split keeps at least one example.")


def _refuse_targets_beyond_float32(cfg, builder) -> None:
    """A noise too large for float32 makes inf targets, which the data contract would blame on the task."""
    if cfg.tfds_name == "zoo_synthetic_linear" and not np.isfinite(builder.examples[1]).all():
        raise UserError(f"dataset.noise={cfg.noise} makes targets of dataset={cfg.name} that float32 cannot hold "
                        "(inf); lower dataset.noise.")


def _network_reachable(timeout: float = 5.0) -> bool:
    """False when the download host does not even resolve, or the proxy set for downloads does not accept a
    connection: TFDS would retry for minutes before failing."""
    proxy = _proxy()
    check = (lambda: _answers(proxy, timeout)) if proxy else (lambda: _resolves(PROBE_HOST))
    resolved = []
    probe = threading.Thread(target=lambda: resolved.append(check()), daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(resolved and resolved[0])


def _proxy():
    """The proxy downloads go through, or None (then names are resolved here)."""
    return next((os.environ[v] for v in PROXY_VARIABLES if os.environ.get(v)), None)


def _offline() -> str:
    proxy = _proxy()
    return f"no network: the proxy {proxy} does not answer" if proxy else f"no network: {PROBE_HOST} does not resolve"


def _resolves(host: str) -> bool:
    try:
        return bool(socket.getaddrinfo(host, 443))
    except OSError:
        return False


def _answers(proxy: str, timeout: float) -> bool:
    """Whether the proxy accepts a connection; one this cannot parse is left for the download to judge."""
    url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        port = url.port or {"https": 443, "socks5": 1080, "socks5h": 1080}.get(url.scheme, 80)
    except ValueError:
        return True
    if not url.hostname:
        return True
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def _catalog_name(cfg) -> str:
    """How a refusal names the catalog dataset: by its config, and by its catalog name where that is another."""
    return f"dataset={cfg.name}" + ("" if cfg.tfds_name == cfg.name else f" (dataset.tfds_name={cfg.tfds_name})")


def _prepared_dir(tfds_name: str) -> str:
    """Where TFDS prepares a dataset, under its data dir: 'mnist:3.0.1' goes to mnist/3.0.1; 'mnist:3.*.*' to the
    version it matches, known once it is prepared: mnist/."""
    name, _, version = tfds_name.partition(":")
    return name if "*" in version else tfds_name.replace(":", "/")


def _refuse_an_embedded_name_from_the_catalog(cfg) -> None:
    """An embedded builder read as a catalog dataset (dataset.embedded=false) was looked for on the network, and the
    refusal told to download it elsewhere, which no catalog holds, or to pick an embedded dataset: the one it had."""
    name = builder_name(cfg.tfds_name)
    if not cfg.embedded and name in BUILDERS:
        plain = "" if cfg.tfds_name == name else f"dataset.tfds_name={name} and "  # embedded ones take no version
        raise UserError(f"{_catalog_name(cfg)} cannot be downloaded: {name} is one of the zoo's embedded datasets, "
                        f"which are made on this machine, never downloaded; set {plain}dataset.embedded=true.")


def _copy_to(data_dir: str, tfds_name: str) -> str:
    """Where a copy prepared elsewhere goes: the version's (or config's) directory itself, not into data_dir, which
    would leave data_dir/3.0.1 for mnist:3.0.1, where TFDS does not look."""
    return os.path.join(data_dir, _prepared_dir(tfds_name))


def _catalog_error(cfg, data_dir: str, err: Exception, new_run: bool) -> UserError:
    """`new_run`: a run to train, which may pick another dataset; eval.py and export.py read a run's own, from the
    paths.data_dir they are given (not the one it trained with)."""
    instead = ("pick an embedded dataset (dataset=digits|diabetes|synthetic_linear)" if new_run else
               "set paths.data_dir to a folder that holds it prepared, such as the one the run was trained with")
    return UserError(
        f"{_catalog_name(cfg)} is not prepared in paths.data_dir={data_dir} and could not be downloaded "
        f"({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else 'no detail'}); on a machine "
        f"with internet and TensorFlow run `python -c \"import tensorflow_datasets as tfds; "
        f"tfds.data_source('{cfg.tfds_name}', data_dir='DIR', builder_kwargs={RANDOM_ACCESS})\"`, copy "
        f"DIR/{_prepared_dir(cfg.tfds_name)} to {_copy_to(data_dir, cfg.tfds_name)}, or {instead}.")


def _refuse_a_copy_that_cannot_be_read(cfg, data_dir: str) -> None:
    """A copy prepared the usual TFDS way (`tfds.load`, `tfds build`) is tfrecord: it exists, but cannot be
    read record by record; a copy whose dataset_info.json is garbled cannot be opened at all; a dataset without
    a train or test split (eurosat, tf_flowers) has no split to read. Downloading again would only meet any of them."""
    try:
        builder = tfds.builder(cfg.tfds_name, data_dir=data_dir)
        prepared, file_format = builder.is_prepared(), builder.info.file_format
        splits = sorted(builder.info.splits.keys()) if prepared else []
    except json_format.ParseError:
        raise _unreadable_info(cfg, os.path.join(data_dir, _prepared_dir(cfg.tfds_name))) from None
    except Exception:  # noqa: BLE001 — nothing readable there: the download decides
        return
    if not prepared and os.path.isdir(builder.data_dir):  # TFDS prepares elsewhere and renames: never left so,
        # and a download reuses whatever directory is there, even an empty one
        raise _damaged(cfg, str(builder.data_dir), "its dataset_info.json is missing")  # that version's alone
    if prepared and file_format is not None and file_format.value != RANDOM_ACCESS["file_format"]:
        raise UserError(f"{_catalog_name(cfg)} in paths.data_dir={data_dir} is prepared as {file_format.value}, "
                        "which cannot be read record by record; prepare it again with builder_kwargs="
                        f"{RANDOM_ACCESS} (or delete {os.path.join(data_dir, _prepared_dir(cfg.tfds_name))}), or set "
                        "paths.data_dir to another directory.")
    missing = [s for s in SPLITS if s not in splits]
    if prepared and splits and missing:  # (no splits at all: its dataset_info.json lacks them, a damage named later)
        wanted = " and ".join(repr(s) for s in missing) + (" splits" if len(missing) > 1 else " split")
        besides = "".join(f" besides {s}" for s in SPLITS if s not in missing)
        raise UserError(f"{_catalog_name(cfg)} in paths.data_dir={data_dir} has the splits {splits}, not the "
                        f"{wanted} the zoo reads{besides}; pick an image classification dataset with train and test "
                        "splits (e.g. mnist, fashion_mnist, cifar10).")


def _refuse_offline_when_another_version_is_prepared(cfg, data_dir: str) -> None:
    """A copy prepared where TFDS has another version of the builder is not the one read by name alone; pinned
    (mnist:3.0.0) it is read from its own files, no download needed."""
    if ":" in cfg.tfds_name:
        return
    where = os.path.join(data_dir, _prepared_dir(cfg.tfds_name))
    try:
        versions = sorted((v for v in os.listdir(where) if os.path.isfile(os.path.join(where, v, "dataset_info.json"))),
                          key=lambda v: [int(p) if p.isdigit() else -1 for p in v.split(".")])
        wanted = str(tfds.builder_cls(builder_name(cfg.tfds_name)).VERSION)
    except Exception:  # noqa: BLE001 — no such directory, or a builder TFDS cannot name: the offline sentence says it
        return
    versions = [v for v in versions if v != wanted]  # that one, were it there, failed for a reason named before
    if versions:
        raise UserError(f"{_catalog_name(cfg)} is prepared in paths.data_dir={data_dir} as version "
                        f"{', '.join(versions)} only, not the {wanted} this TFDS reads, and cannot be downloaded "
                        f"({_offline()}); set dataset.tfds_name={cfg.tfds_name}:{versions[-1]} to read that copy.")


def _refuse_an_unknown_config(cfg, builder, name, kwargs: dict) -> None:
    """A config this TFDS's builder lacks (emnist/leters) was sent to a download elsewhere, which fails there as
    here (online, TFDS's refusal was cut short in a sentence saying the download failed)."""
    config, version = kwargs.get("config"), kwargs.get("version")
    if builder is None or not config:
        return
    configs = [c.name for c in builder.BUILDER_CONFIGS or []]
    if config in configs:
        return
    if not configs:
        raise UserError(f"dataset.tfds_name={cfg.tfds_name} names a config of the catalog dataset {name}, which has "
                        f"none; set dataset.tfds_name={name}{':' + version if version else ''}.")
    listed = ", ".join(configs[:12]) + (", ..." if len(configs) > 12 else "")
    raise UserError(f"dataset.tfds_name={cfg.tfds_name} names no config of the catalog dataset {name} that this TFDS "
                    f"knows ({listed}); check its spelling.")


def _open_catalog(cfg, data_dir: str, new_run: bool = True):
    """Prepared data first (no network needed); download only when it is missing."""
    try:
        return tfds.data_source(cfg.tfds_name, split=list(SPLITS), data_dir=data_dir, download=False,
                                builder_kwargs=RANDOM_ACCESS)
    except Exception:  # not prepared (tfds raises several types); try to download below
        pass
    _refuse_a_copy_that_cannot_be_read(cfg, data_dir)
    misspelt = UserError(f"dataset.tfds_name={cfg.tfds_name} is neither prepared in paths.data_dir={data_dir} nor a "
                         "TFDS catalog dataset; check its spelling (e.g. mnist, cifar10, fashion_mnist).")
    try:  # fashion-mnist, mnist: — no name TFDS could download
        name, kwargs = tfds.core.naming.parse_builder_name_kwargs(cfg.tfds_name)
    except ValueError:
        raise misspelt from None
    builder = None
    try:  # by its name alone: builder_cls refuses one with a version or config (mnsit:3.0.1 went to the download)
        if not name.namespace:  # a community dataset's (huggingface:mnist) is looked up by the download
            builder = tfds.builder_cls(name.name)
    except tfds.core.registered.DatasetNotFoundError:
        raise misspelt from None
    except Exception:  # noqa: BLE001 — the download decides
        pass
    _refuse_an_unknown_config(cfg, builder, name, kwargs)
    if not _network_reachable():
        _refuse_offline_when_another_version_is_prepared(cfg, data_dir)
        raise _catalog_error(cfg, data_dir, ConnectionError(_offline()), new_run)
    try:
        with prints_logged():
            return tfds.data_source(cfg.tfds_name, split=list(SPLITS), data_dir=data_dir, download=True,
                                    builder_kwargs=RANDOM_ACCESS)
    except KeyboardInterrupt as e:
        raise Interrupted(f"{_stopped(e)} while downloading dataset={cfg.name} into paths.data_dir={data_dir}; "
                          "nothing half-written is used and the next run downloads it again.", e) from None
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("tensorflow") or (e.name or "").startswith("tensorflow_datasets"):
            raise _catalog_error(cfg, data_dir, e, new_run) from None
        raise UserError(f"preparing dataset={cfg.name} runs TFDS's own {cfg.tfds_name} builder, which reads the "
                        "downloaded files with TensorFlow: `pip install tensorflow-cpu` once to prepare it (reading "
                        f"the prepared copy does not need it), or copy {_prepared_dir(cfg.tfds_name)}/ prepared as "
                        f"array_record elsewhere to {_copy_to(data_dir, cfg.tfds_name)}.") from None
    except Exception as e:  # tfds raises many types for "no network"
        _refuse_a_copy_that_cannot_be_read(cfg, data_dir)  # downloaded and prepared, but not as the zoo reads it
        raise _catalog_error(cfg, data_dir, e, new_run) from None


def _read(source, keys: range) -> list:
    """Records `keys` in one batched read (array_record reads them in parallel). TFDS's test mock sets a
    `__getitems__` that cannot be called; it is read record by record."""
    try:
        return source.__getitems__(keys)
    except TypeError:
        return [source[i] for i in keys]


def _decode(source, x_key: str, y_key: str, batch: int = 8192):
    """Every record as stacked (x, y), in stored order."""
    n = len(source)
    examples = [e for start in range(0, n, batch) for e in _read(source, range(start, min(start + batch, n)))]
    return np.stack([e[x_key] for e in examples]), np.stack([e[y_key] for e in examples])


def _refuse_other_features(cfg, info, keys) -> None:
    """A catalog dataset that is not an image classification set lacks the features read, or holds images of
    several sizes (tf_flowers): that is no damage."""
    names = sorted(info.features.keys()) if info.features is not None else None
    if names is not None and not set(keys) <= set(names):
        raise UserError(f"{_catalog_name(cfg)} has the features {names}, not the {keys[0]!r} and {keys[1]!r} the zoo "
                        "reads from a catalog dataset; pick an image classification dataset (e.g. mnist, "
                        "fashion_mnist, cifar10).")
    shape = getattr(info.features[keys[0]], "shape", None) if names is not None else None
    if shape is not None and None in shape:  # np.stack would fail on the first two that differ: no damage either
        raise UserError(f"{_catalog_name(cfg)} has {keys[0]}s of varying shape {tuple(shape)}, which the zoo cannot "
                        "stack into one array; pick an image classification dataset whose images share one shape "
                        "(e.g. mnist, fashion_mnist, cifar10).")


def _other_classes(cfg, count, new_run: bool) -> bool:
    """More classes than the labels trained outputs no label reaches, refused for a new run; a finished run so trained
    is read as it was (eval.py, export.py cannot change its settings). Fewer fail on the first label past them."""
    return bool(count) and cfg.task == "classification" and (
        cfg.num_classes < count or (new_run and cfg.num_classes != count))


def _refuse_other_classes(cfg, info, label_key: str, new_run: bool) -> None:
    """dataset.num_classes above the count the dataset's own info states trained outputs no label reaches (below it,
    the first label past it was refused without the count to set)."""
    label = info.features[label_key] if info.features is not None else None
    count = label.num_classes if isinstance(label, tfds.features.ClassLabel) else None
    if _other_classes(cfg, count, new_run):
        raise UserError(f"{_catalog_name(cfg)} has {count} classes (its {label_key}'s ClassLabel), not the "
                        f"{cfg.num_classes} dataset.num_classes={cfg.num_classes} gives; set "
                        f"dataset.num_classes={count}.")


def _refuse_other_embedded_classes(cfg, builder, new_run: bool) -> None:
    """As `_refuse_other_classes`, for an embedded set: more classes than its labels trained outputs for no label."""
    count = builder.num_classes
    if _other_classes(cfg, count, new_run):
        raise UserError(f"dataset={cfg.name} has {count} classes (its labels 0..{count - 1}), not the "
                        f"{cfg.num_classes} dataset.num_classes={cfg.num_classes} gives; set "
                        f"dataset.num_classes={count}.")


def _read_arrays(sources, keys, expected) -> dict:
    """From the decoded copy beside the prepared dataset when it matches it; else decode the records, check
    the counts and keep a copy for the next run."""
    info = sources[0].dataset_info
    key = decoded.source_key(info)
    arrays = decoded.load(info.data_dir, key, SPLITS) if key else None
    if arrays is None:
        arrays = {s: _decode(src, *keys) for s, src in zip(SPLITS, sources)}
        found = {s: len(arrays[s][0]) for s in SPLITS}
        if expected and found != expected:
            raise ValueError(f"found {found} examples, expected {expected}")
        if key:
            decoded.save(info.data_dir, key, arrays)
    return {s: (x.astype(np.float32, copy=False), y) for s, (x, y) in arrays.items()}


def _refuse_a_dangling_link(data_dir: str) -> None:
    """A link to a disk not mounted (or a folder since moved) made "not writable (File exists)", or "not prepared"
    for a catalog dataset: the directory it names was never looked at."""
    path = os.path.abspath(data_dir)
    while not os.path.exists(path):
        if os.path.islink(path):
            through = "is a link" if path == os.path.abspath(data_dir) else f"is reached through {path}, a link"
            raise UserError(f"paths.data_dir={data_dir} {through} to "
                            f"{os.path.join(os.path.dirname(path), os.readlink(path))}, which does not exist; create "
                            "(or mount) it, or set paths.data_dir to another directory.")
        if os.path.dirname(path) == path:
            return
        path = os.path.dirname(path)


def _refuse_a_file_above(data_dir: str) -> None:
    """A data dir below a file cannot be made: a catalog dataset's offline refusal told to copy the prepared dataset
    there."""
    path = os.path.dirname(os.path.abspath(data_dir))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"paths.data_dir={data_dir} is not writable ({os.strerror(errno.ENOTDIR)}); set "
                        "paths.data_dir to a directory you can write.")  # as preparing an embedded set says it


def read_splits(cfg, data_dir: str, new_run: bool = True) -> dict:
    """{'train': (x, y), 'test': (x, y)} as numpy, in the stored (deterministic) order. `new_run`: about to train,
    not a finished run's (see `_other_classes`)."""
    _refuse_an_embedded_name_from_the_catalog(cfg)
    if not data_dir:  # TFDS would read the command's directory, and makedirs('') fails with "No such file"
        raise UserError("paths.data_dir is empty (as is TFDS_DATA_DIR when it is set but empty); set "
                        "paths.data_dir to the directory that holds (or is to hold) the prepared datasets.")
    if "://" in data_dir:  # gs://, as TFDS_DATA_DIR often is on a Cloud TPU VM: TFDS needs gcsfs (else a traceback),
        # and the zoo's own reads and writes (its decoded copy, its checks) are of local files
        source = " (from TFDS_DATA_DIR)" if os.environ.get("TFDS_DATA_DIR") == data_dir else ""
        raise UserError(f"paths.data_dir={data_dir}{source} is a URL; the zoo prepares and reads datasets in a local "
                        "directory: set paths.data_dir to one (e.g. ~/tensorflow_datasets).")
    data_dir = launch_dir_path(data_dir)  # with hydra.job.chdir=true, still the user's
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):  # else "not writable (File exists)", or offline
        raise UserError(f"paths.data_dir={data_dir} is a file, not a directory; set paths.data_dir to a directory "
                        "that holds (or is to hold) the prepared datasets.")
    _refuse_a_file_above(data_dir)
    _refuse_a_dangling_link(data_dir)
    if cfg.embedded:
        builder = _prepare_embedded(cfg, data_dir)
        _refuse_other_embedded_classes(cfg, builder, new_run)
        where, keys = builder.data_dir, ("x", "y")
        expected = {s: builder.info.splits[s].num_examples for s in SPLITS}
    else:
        where, keys, expected = os.path.join(data_dir, _prepared_dir(cfg.tfds_name)), ("image", "label"), None
    try:  # a truncated or deleted record file fails here, on open or on the first bad record
        sources = builder.as_data_source(split=list(SPLITS)) if cfg.embedded else _open_catalog(cfg, data_dir,
                                                                                                  new_run)
        if not cfg.embedded:
            _refuse_other_features(cfg, sources[0].dataset_info, keys)
            _refuse_other_classes(cfg, sources[0].dataset_info, keys[1], new_run)
        arrays = _read_arrays(sources, keys, expected)
    except UserError:
        raise
    except MemoryError:  # no damage: deleting the copy, as a damaged one is told to, would only lose it
        raise too_big(cfg) from None
    except Exception as e:
        first_line = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise _damaged(cfg, where if cfg.embedded else _version_dir(cfg, data_dir, where), first_line) from None
    return arrays


def _version_dir(cfg, data_dir: str, default: str) -> str:
    """The folder of the version TFDS reads (mnist/3.0.1): deleting the dataset's whole folder, as a damaged copy is
    told to, would lose the other versions prepared beside it."""
    try:
        return tfds.builder(cfg.tfds_name, data_dir=data_dir).data_dir
    except Exception:  # noqa: BLE001 — the dataset's folder, as before
        return default
