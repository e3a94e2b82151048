"""A decoded copy of a prepared dataset's splits, kept beside it as plain .npy files and memory-mapped.

TFDS decodes records one Python call at a time (70,000 MNIST-sized rows take many seconds); mapping the
decoded arrays takes milliseconds. The copy's manifest records what it was made from: the dataset's name,
config and version and the name, size and modification time of every file TFDS wrote for it. It is used
only when all of that still matches and every array file has the size and CRC-32 written with it; otherwise
the records are decoded again. Files are written into a temporary directory renamed into place, so a copy
is whole or absent.
"""
import json
import logging
import mmap
import os
import shutil
import tempfile
import zlib

import numpy as np

log = logging.getLogger("zoo")
DIRNAME = "zoo_decoded"
MANIFEST = "manifest.json"


def source_key(info) -> dict | None:
    """What a copy must match: the dataset version and the prepared files. None when the prepared directory
    holds no files to tie a copy to (a mocked or remote source): such sources are decoded every time."""
    where = info.data_dir
    try:
        names = sorted(n for n in os.listdir(where) if not n.startswith(DIRNAME))
        stats = [(n, os.stat(os.path.join(where, n))) for n in names]
    except OSError:
        return None
    files = [[n, s.st_size, s.st_mtime_ns] for n, s in stats if os.path.isfile(os.path.join(where, n))]
    if not files:
        return None
    return {"name": info.name, "config": info.config_name, "version": str(info.version), "files": files}


def _file_names(splits) -> list:
    return [f"{split}_{part}.npy" for split in splits for part in "xy"]


def _size_and_crc(path: str) -> list:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return [len(m), zlib.crc32(m)]


def load(prepared_dir: str, key: dict, splits) -> dict | None:
    """{split: (x, y)} memory-mapped from the copy, or None when there is none or it does not match `key`."""
    where = os.path.join(prepared_dir, DIRNAME)
    if not os.path.isdir(where):
        return None
    try:
        with open(os.path.join(where, MANIFEST)) as f:
            manifest = json.load(f)
        names = _file_names(splits)
        if manifest["source"] != key or sorted(manifest["arrays"]) != sorted(names):
            log.info("the decoded copy in %s was made from other prepared files; decoding the records", where)
            return None
        if any(_size_and_crc(os.path.join(where, n)) != manifest["arrays"][n] for n in names):
            log.info("the decoded copy in %s is damaged; decoding the records", where)
            return None
        return {s: tuple(np.load(os.path.join(where, f"{s}_{part}.npy"), mmap_mode="r", allow_pickle=False)
                         for part in "xy")
                for s in splits}
    except (OSError, ValueError, KeyError, TypeError) as e:  # unreadable, truncated or garbled: decode instead
        log.info("the decoded copy in %s is unreadable (%s); decoding the records", where, e)
        return None


def save(prepared_dir: str, key: dict, arrays: dict) -> None:
    """Write the copy; a read-only data dir or a full disk only means the next run decodes again."""
    where = os.path.join(prepared_dir, DIRNAME)
    try:
        tmp = tempfile.mkdtemp(prefix=DIRNAME + ".", dir=prepared_dir)
    except OSError as e:
        log.info("no decoded copy of %s (%s); the next run decodes the records again", prepared_dir, e)
        return
    try:
        for split, (x, y) in arrays.items():
            np.save(os.path.join(tmp, f"{split}_x.npy"), np.ascontiguousarray(x), allow_pickle=False)
            np.save(os.path.join(tmp, f"{split}_y.npy"), np.ascontiguousarray(y), allow_pickle=False)
        names = _file_names(arrays)
        manifest = {"source": key, "arrays": {n: _size_and_crc(os.path.join(tmp, n)) for n in names}}
        with open(os.path.join(tmp, MANIFEST), "w") as f:
            json.dump(manifest, f)
        os.chmod(tmp, os.stat(prepared_dir).st_mode & 0o777)  # whoever may read the dataset may read its copy
        if os.path.islink(where) or os.path.isfile(where):  # a file in its place (rmtree leaves it): the name is ours
            os.remove(where)
        shutil.rmtree(where, ignore_errors=True)
        os.rename(tmp, where)
    except OSError as e:  # full disk, or another process renamed its copy first: either way nothing half-kept
        log.info("no decoded copy of %s (%s); the next run decodes the records again", prepared_dir, e)
        shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:  # Ctrl-C or a stop signal while writing: the unfinished copy goes too
        shutil.rmtree(tmp, ignore_errors=True)
        raise
