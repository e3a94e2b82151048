"""The decoded copy beside a prepared dataset gives exactly what reading every record gives, and a copy that no
longer matches the prepared dataset (other files, another version) or is damaged is never used."""
import json
import os
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow_datasets as tfds

from zoo.data import decoded, embedded, sources


def per_record(cfg, data_dir) -> dict:
    """{split: (x, y)} read one record at a time through TFDS: what the zoo read before it kept a copy."""
    builder = sources._prepare_embedded(cfg, data_dir)
    out = {}
    for split, source in zip(sources.SPLITS, builder.as_data_source(split=list(sources.SPLITS))):
        records = [source[i] for i in range(len(source))]
        out[split] = (np.stack([r["x"] for r in records]).astype(np.float32), np.stack([r["y"] for r in records]))
    return out


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[s][i], b[s][i]) and a[s][i].dtype == b[s][i].dtype
                                        for s in a for i in (0, 1))


def prepared_dir(cfg, data_dir) -> pathlib.Path:
    return pathlib.Path(sources._prepare_embedded(cfg, data_dir).data_dir)


@pytest.fixture
def decodes(monkeypatch):
    """One entry per split decoded from the records (rather than mapped from the copy)."""
    calls, real = [], sources._decode
    monkeypatch.setattr(sources, "_decode", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.fixture
def diabetes(make_cfg, tmp_path):
    """(dataset config, data dir) of diabetes prepared in a directory of this test's own."""
    data_dir = str(tmp_path / "data")
    return make_cfg("dataset=diabetes", f"paths.data_dir={data_dir}").dataset, data_dir


@pytest.mark.parametrize("name", ["diabetes", "digits"])  # float targets, integer labels
def test_copy_equals_the_per_record_read(make_cfg, tmp_path, decodes, name):
    data_dir = str(tmp_path / "data")
    cfg = make_cfg(f"dataset={name}", f"paths.data_dir={data_dir}").dataset
    first = sources.read_splits(cfg, data_dir)  # decoded in batched reads; the copy is written
    again = sources.read_splits(cfg, data_dir)  # mapped from the copy
    assert decodes == [1, 1] and isinstance(again["train"][0], np.memmap)
    reference = per_record(cfg, data_dir)
    assert same(first, reference) and same(again, reference)
    copy = prepared_dir(cfg, data_dir) / decoded.DIRNAME
    assert copy.stat().st_mode & 0o777 == copy.parent.stat().st_mode & 0o777  # readable by the dataset's readers
    assert sorted(p.name for p in copy.glob("*.npy")) == ["test_x.npy", "test_y.npy", "train_x.npy", "train_y.npy"]
    for path in copy.glob("*.npy"):  # plain arrays: readable without pickle
        assert np.load(path, allow_pickle=False).dtype != object


def test_changed_prepared_files_rebuild_the_copy(diabetes, decodes):
    cfg, data_dir = diabetes
    first = sources.read_splits(cfg, data_dir)
    record = next(prepared_dir(cfg, data_dir).glob("*-train.array_record*"))
    os.utime(record, ns=(0, 0))  # prepared again, or touched: the copy no longer describes these files
    again = sources.read_splits(cfg, data_dir)
    assert decodes == [1, 1, 1, 1] and same(first, again)
    sources.read_splits(cfg, data_dir)  # the rebuilt copy matches the files again
    assert decodes == [1, 1, 1, 1]


def test_copy_made_for_another_version_is_not_used(diabetes, decodes, monkeypatch):
    """The prepared files of 1.0.0, copy included, moved under 1.0.1 with sizes and times kept: only the version
    tells the copy apart, and it is decoded again."""
    cfg, data_dir = diabetes
    first = sources.read_splits(cfg, data_dir)
    old = prepared_dir(cfg, data_dir)
    new = old.parent / "1.0.1"
    shutil.copytree(old, new)  # copy2: sizes and modification times kept
    info = new / "dataset_info.json"
    stat = info.stat()
    info.write_text(info.read_text().replace('"version": "1.0.0"', '"version": "1.0.1"'))
    os.utime(info, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert info.stat().st_size == stat.st_size
    monkeypatch.setattr(embedded.BUILDERS[cfg.tfds_name], "VERSION", tfds.core.Version("1.0.1"))
    assert prepared_dir(cfg, data_dir) == new
    again = sources.read_splits(cfg, data_dir)
    assert decodes == [1, 1, 1, 1] and same(first, again)
    assert json.loads((new / decoded.DIRNAME / decoded.MANIFEST).read_text())["source"]["version"] == "1.0.1"


def _flip_last_byte(path: pathlib.Path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated": lambda copy: (copy / "train_x.npy").write_bytes((copy / "train_x.npy").read_bytes()[:1000]),
    "byte_changed": lambda copy: _flip_last_byte(copy / "train_x.npy"),  # same size: only the CRC tells
    "file_missing": lambda copy: (copy / "test_y.npy").unlink(),
    "manifest_garbled": lambda copy: (copy / decoded.MANIFEST).write_text("{"),
    "a_file_in_its_place": lambda copy: shutil.rmtree(copy) or copy.write_text("x"),  # it was never written again
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_copy_is_never_used(diabetes, decodes, damage):
    cfg, data_dir = diabetes
    first = sources.read_splits(cfg, data_dir)
    DAMAGE[damage](prepared_dir(cfg, data_dir) / decoded.DIRNAME)
    again = sources.read_splits(cfg, data_dir)
    assert decodes == [1, 1, 1, 1] and same(first, again)
    sources.read_splits(cfg, data_dir)  # written whole again: the next read maps it
    assert decodes == [1, 1, 1, 1]


def test_a_copy_interrupted_while_written_leaves_nothing_behind(tmp_path, monkeypatch):
    arrays = {"train": (np.zeros((4, 3), np.float32), np.zeros(4, np.int64))}
    writes = []

    def save_then_stop(path, array, allow_pickle):  # Ctrl-C arrives after the first array is written
        writes.append(path)
        if len(writes) > 1:
            raise KeyboardInterrupt
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, allow_pickle=allow_pickle)

    monkeypatch.setattr(decoded.np, "save", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        decoded.save(str(tmp_path), {"source": "s"}, arrays)
    assert len(writes) == 2 and list(tmp_path.iterdir()) == []
