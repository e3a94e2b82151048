"""Catalog datasets through tfds.testing.mock_data; the offline failure message; embedded split contracts."""
import contextlib
import importlib.util
import json
import logging
import re
import shutil
import socket
import tempfile

import numpy as np
import pytest
import tensorflow_datasets as tfds

from zoo.checkpoint import Checkpoints
from zoo.data import load_dataset, pipeline, read_splits, sources
from zoo.errors import UserError
from zoo.train import train

CATALOG = [("mnist", (28, 28, 1)), ("fashion_mnist", (28, 28, 1)), ("cifar10", (32, 32, 3))]


@pytest.mark.parametrize("name,shape", CATALOG, ids=[n for n, _ in CATALOG])
def test_catalog_dataset_trains_on_mock_data(make_cfg, name, shape):
    cfg = make_cfg(f"dataset={name}", "model=cnn", "debug=smoke", "trainer.batch_size=8", "trainer.max_steps=2",
                   "trainer.eval_every=0", "model.channels=[4,8]", "model.dense=16")
    with tfds.testing.mock_data(num_examples=24):
        data = load_dataset(cfg.dataset, cfg.paths.data_dir)
        assert data.input_shape == shape and data.out_features == 10
        assert len(data.splits["train"]) == 24 and data.splits["train"].x.dtype == np.float32
        results = train(cfg)
    assert results["test"]["count"] == 24 and np.isfinite(results["test"]["loss"])


@pytest.mark.parametrize("resolves", [True, False], ids=["host-resolves", "no-dns"])
def test_catalog_dataset_offline_says_what_to_do(make_cfg, tmp_path, monkeypatch, resolves):
    """Both paths, whatever this machine's network: a failed download, or no download tried when DNS fails."""
    calls = []

    def no_network(*args, download, **kwargs):
        calls.append(download)
        raise ConnectionError("Failed to establish a new connection")

    monkeypatch.setattr(tfds, "data_source", no_network)
    monkeypatch.setattr(sources, "_network_reachable", lambda: resolves)
    cfg = make_cfg("dataset=mnist", f"paths.data_dir={tmp_path / 'empty'}")
    cause = r"ConnectionError: Failed to establish" if resolves else r"ConnectionError: no network: .* does not resolve"
    with pytest.raises(UserError, match=r"dataset=mnist is not prepared in paths\.data_dir=.*could not be "
                                        rf"downloaded \({cause}"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert calls == ([False, True] if resolves else [False])  # prepared data first, then a download if any


def test_a_catalog_dataset_offline_for_a_finished_run_names_paths_data_dir_not_another_dataset(make_cfg, tmp_path,
                                                                                              monkeypatch):
    """eval.py and export.py read a run's own dataset and refuse dataset=...: the advice to pick an embedded dataset
    led to that refusal, where the way out is the folder that holds the run's data."""
    monkeypatch.setattr(tfds, "data_source", lambda *args, download, **kwargs: (_ for _ in ()).throw(
        ConnectionError("not prepared")))
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    cfg = make_cfg("dataset=mnist", f"paths.data_dir={tmp_path / 'empty'}")
    with pytest.raises(UserError, match=r"dataset=mnist is not prepared in paths\.data_dir=.*, or set paths\.data_dir to "
                                        r"a folder that holds it prepared, such as the one the run was trained with\.$"):
        load_dataset(cfg.dataset, cfg.paths.data_dir, new_run=False)
    with pytest.raises(UserError, match=r", or pick an embedded dataset \(dataset=digits\|diabetes\|synthetic_linear\)\.$"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)  # a run to train may pick another


def test_a_damaged_catalog_copy_is_named_by_its_version_folder(make_cfg, tmp_path, monkeypatch):
    """The sentence said to delete the dataset's folder, which holds every version prepared (those of another
    version, which offline cannot be prepared again, with it)."""
    cfg = _stand_in_for_mnist(make_cfg, tmp_path)
    monkeypatch.setattr(sources, "_refuse_an_embedded_name_from_the_catalog", lambda cfg: None)
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    sources._open_catalog(cfg, str(tmp_path))
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    for check in ("_refuse_other_features", "_refuse_other_classes"):  # the stand-in is no image dataset
        monkeypatch.setattr(sources, check, lambda *args: None)
    monkeypatch.setattr(sources, "_read_arrays", lambda *args: (_ for _ in ()).throw(OSError("truncated record")))
    copy = re.escape(str(tmp_path / "zoo_digits" / "1.0.0"))
    with pytest.raises(UserError, match=rf"^the prepared dataset=mnist in {copy} is damaged \(truncated record\); "
                                        r"delete that directory and the next run"):
        sources.read_splits(cfg, str(tmp_path))


def test_a_proxy_that_does_not_answer_counts_as_no_network(make_cfg, tmp_path, monkeypatch):
    """With a proxy set, names are resolved by the proxy: it is the proxy that must answer, or TFDS retries the
    download through it for minutes."""
    for variable in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(variable, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert sources._network_reachable()
    monkeypatch.setattr(tfds, "data_source", lambda *args, download, **kwargs: pytest.fail("downloads") if download
                        else (_ for _ in ()).throw(ConnectionError("not prepared")))
    cfg = make_cfg("dataset=mnist", f"paths.data_dir={tmp_path / 'empty'}")  # the port is closed now
    with pytest.raises(UserError, match=r"could not be downloaded \(ConnectionError: no network: the proxy "
                                        r"http://127\.0\.0\.1:\d+ does not answer\); on a machine with internet"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


def _stand_in_for_mnist(make_cfg, data_dir):
    """zoo_digits is a registered TFDS builder like mnist: the same download call, with nothing to fetch."""
    return make_cfg("dataset=mnist", "dataset.tfds_name=zoo_digits", f"paths.data_dir={data_dir}").dataset


def test_a_catalog_download_prepares_a_format_read_without_tensorflow(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    train_source, test_source = sources._open_catalog(_stand_in_for_mnist(make_cfg, tmp_path), str(tmp_path))
    assert (len(train_source), len(test_source)) == (1438, 359)
    [info] = (tmp_path / "zoo_digits").rglob("dataset_info.json")
    assert json.loads(info.read_text())["fileFormat"] == "array_record"


def test_what_tfds_prints_while_preparing_is_logged_not_written_to_stdout(make_cfg, tmp_path, monkeypatch, capsys,
                                                                          caplog):
    """TFDS prints 'Downloading and preparing dataset ...' to stdout: into the stream that carries eval.py's result
    line alone, and on a stdout that could not be written the preparation failed as if paths.data_dir could not be."""
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    with caplog.at_level(logging.INFO, logger="zoo.data.sources"):
        read_splits(make_cfg("dataset=diabetes").dataset, str(tmp_path / "embedded"))
        sources._open_catalog(_stand_in_for_mnist(make_cfg, tmp_path), str(tmp_path / "catalog"))
    assert capsys.readouterr().out == ""
    said = [r.getMessage() for r in caplog.records if r.name == "zoo.data.sources"]
    begins = ("Downloading and preparing dataset Unknown size (download: Unknown size, generated: Unknown size, "
              "total: Unknown size)")
    assert [m.split(" to ")[0] for m in said] == [begins, "Dataset zoo_diabetes downloaded and prepared",
                                                  begins, "Dataset zoo_digits downloaded and prepared"], said


def test_preparing_an_embedded_dataset_leaves_nothing_in_the_temporary_directory(make_cfg, tmp_path, monkeypatch):
    """TFDS looked every unprepared builder up on its bucket, leaving an empty <tmp>/tmp*tfds directory each time."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert len(read_splits(make_cfg("dataset=diabetes").dataset, str(tmp_path / "data"))["test"][1]) == 88
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_catalog_dataset_prepared_as_tfrecord_is_named_as_such(make_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    cfg = _stand_in_for_mnist(make_cfg, tmp_path)
    sources._open_catalog(cfg, str(tmp_path))
    [info] = (tmp_path / "zoo_digits").rglob("dataset_info.json")  # as `tfds.load` would have left it
    info.write_text(info.read_text().replace('"fileFormat": "array_record"', '"fileFormat": "tfrecord"'))
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    with pytest.raises(UserError, match=r"dataset=mnist \(dataset\.tfds_name=zoo_digits\) in paths\.data_dir=.* is "
                                        r"prepared as tfrecord, which "
                                        r"cannot be read record by record; prepare it again with builder_kwargs="):
        sources._open_catalog(cfg, str(tmp_path))


@pytest.mark.parametrize("catalog", [True, False], ids=["catalog", "embedded"])
def test_a_prepared_copy_with_a_garbled_dataset_info_is_named_damaged(make_cfg, tmp_path, monkeypatch, catalog):
    """Not 'not prepared': downloading or preparing again would meet the same copy."""
    cfg = _stand_in_for_mnist(make_cfg, tmp_path) if catalog else make_cfg("dataset=digits",
                                                                           f"paths.data_dir={tmp_path}").dataset
    # the stand-in is an embedded builder read as a catalog dataset, which a user's command is refused
    monkeypatch.setattr(sources, "_refuse_an_embedded_name_from_the_catalog", lambda cfg: None)
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    (sources._open_catalog if catalog else read_splits)(cfg, str(tmp_path))
    [info] = (tmp_path / "zoo_digits").rglob("dataset_info.json")
    info.write_text("garbage\n")
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    # it named the whole dataset dir (zoo_digits/), not the file, nor the version's directory that holds it
    with pytest.raises(UserError, match=rf"^the prepared dataset={cfg.name} in {re.escape(str(info.parent))} is "
                                        rf"damaged \({re.escape(str(info))} cannot be read\); delete that directory "
                                        r"and the next run prepares \(or downloads\) it again\.$"):
        read_splits(cfg, str(tmp_path))
    assert info.read_text() == "garbage\n"
    shutil.rmtree(info.parent)  # the way out it names
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    (sources._open_catalog if catalog else read_splits)(cfg, str(tmp_path))


def test_a_prepared_embedded_copy_without_its_dataset_info_is_named_damaged(make_cfg, tmp_path):
    """TFDS takes the directory for prepared and reuses it, knowing no splits: it was a KeyError traceback."""
    cfg = make_cfg("dataset=digits", f"paths.data_dir={tmp_path}").dataset
    read_splits(cfg, str(tmp_path))
    [info] = (tmp_path / "zoo_digits").rglob("dataset_info.json")
    info.unlink()
    copy = re.escape(str(info.parent))
    with pytest.raises(UserError, match=rf"the prepared dataset=digits in {copy} is damaged \(its dataset_info\.json "
                                        r"is missing\); delete that directory and the next run prepares"):
        read_splits(cfg, str(tmp_path))


@pytest.mark.parametrize("emptied", [False, True], ids=["info", "all"])
@pytest.mark.parametrize("online", [True, False], ids=["online", "offline"])
def test_a_prepared_catalog_copy_without_its_dataset_info_is_named_damaged(make_cfg, tmp_path, monkeypatch, online,
                                                                           emptied):
    """It was 'not prepared and could not be downloaded' (offline, or a KeyError online: TFDS reuses the directory
    it would download into, even empty), whose advice to download or copy it again meets the same directory."""
    cfg = _stand_in_for_mnist(make_cfg, tmp_path)
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    sources._open_catalog(cfg, str(tmp_path))
    [info] = (tmp_path / "zoo_digits").rglob("dataset_info.json")
    for f in info.parent.iterdir() if emptied else [info]:
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    monkeypatch.setattr(sources, "_network_reachable", lambda: online)
    copy = re.escape(str(tmp_path / "zoo_digits" / "1.0.0"))  # not zoo_digits/, which may hold other versions
    with pytest.raises(UserError, match=rf"the prepared dataset=mnist in {copy} is damaged \(its dataset_info\.json "
                                        r"is missing\); delete that directory and the next run prepares"):
        sources._open_catalog(cfg, str(tmp_path))


def test_a_catalog_copy_of_another_version_offline_names_the_version_to_read(make_cfg, tmp_path, monkeypatch):
    """A copy prepared where TFDS has another version of the builder: offline it was 'not prepared', though
    dataset.tfds_name=NAME:VERSION reads it."""
    cfg = _stand_in_for_mnist(make_cfg, tmp_path)
    monkeypatch.setattr(sources, "_refuse_an_embedded_name_from_the_catalog", lambda cfg: None)
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    sources._open_catalog(cfg, str(tmp_path))
    (tmp_path / "zoo_digits" / "1.0.0").rename(tmp_path / "zoo_digits" / "0.9.0")
    info = tmp_path / "zoo_digits" / "0.9.0" / "dataset_info.json"
    info.write_text(info.read_text().replace('"version": "1.0.0"', '"version": "0.9.0"'))
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    with pytest.raises(UserError, match=r"^dataset=mnist \(dataset\.tfds_name=zoo_digits\) is prepared in "
                                        rf"paths\.data_dir={re.escape(str(tmp_path))} as version 0\.9\.0 only, not the "
                                        r"1\.0\.0 this TFDS reads, and cannot be downloaded \(no network: .*\); set "
                                        r"dataset\.tfds_name=zoo_digits:0\.9\.0 to read that copy\.$"):
        sources._open_catalog(cfg, str(tmp_path))
    pinned = make_cfg("dataset=mnist", "dataset.tfds_name=zoo_digits:0.9.0", f"paths.data_dir={tmp_path}").dataset
    assert [len(s) for s in sources._open_catalog(pinned, str(tmp_path))] == [1438, 359]


def test_preparing_a_catalog_dataset_runs_tfds_own_builder_and_says_when_it_needs_tensorflow(make_cfg, tmp_path,
                                                                                            monkeypatch):
    """TFDS's real mnist builder on local files of the raw format; only the download itself is replaced."""
    files = {}
    for split, n in (("train", 60000), ("test", 10000)):
        files[f"{split}_data"], files[f"{split}_labels"] = tmp_path / f"{split}_x", tmp_path / f"{split}_y"
        files[f"{split}_data"].write_bytes(bytes(16) + bytes(n * 784))
        files[f"{split}_labels"].write_bytes(bytes(8) + (np.arange(n) % 10).astype(np.uint8).tobytes())
    monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract", lambda self, urls: files)
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    cfg = make_cfg("dataset=mnist", f"paths.data_dir={tmp_path / 'data'}").dataset
    if importlib.util.find_spec("tensorflow") is None:  # as requirements.txt installs: the zoo reads without it
        with pytest.raises(UserError, match=r"preparing dataset=mnist runs TFDS's own mnist builder, which reads the "
                                            r"downloaded files with TensorFlow: `pip install tensorflow-cpu`"):
            sources._open_catalog(cfg, str(tmp_path / "data"))
    else:  # a machine that prepares catalog datasets
        train_source, test_source = sources._open_catalog(cfg, str(tmp_path / "data"))
        assert (len(train_source), len(test_source)) == (60000, 10000)


@pytest.mark.parametrize("overrides,empty", [
    (("dataset=diabetes", "dataset.test_fraction=0.9999"), "train"),
    (("dataset=synthetic_linear", "dataset.test_fraction=0.0001"), "test"),
    (("dataset=synthetic_linear", "dataset.num_examples=1"), "test"),
], ids=["no-train", "no-test", "one-example"])
def test_a_split_left_empty_is_refused_before_anything_is_written(make_cfg, tmp_path, overrides, empty):
    cfg = make_cfg(*overrides, f"paths.data_dir={tmp_path / 'data'}")
    with pytest.raises(UserError, match=rf"dataset\.test_fraction=\S+ leaves the {empty} split of dataset=\w+ "
                                        r"\(\d+ examples\) empty; change dataset\.test_fraction"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert not (tmp_path / "data").exists()


def test_embedded_splits_are_deterministic_and_disjoint(make_cfg):
    cfg = make_cfg("dataset=digits")
    a, b = load_dataset(cfg.dataset, cfg.paths.data_dir), load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert len(a.splits["train"]) == 1438 and len(a.splits["test"]) == 359
    np.testing.assert_array_equal(a.splits["test"].x, b.splits["test"].x)
    train_rows = {row.tobytes() for row in a.splits["train"].x}
    assert sum(row.tobytes() in train_rows for row in a.splits["test"].x) < 5  # sklearn digits has a few duplicates


@pytest.mark.parametrize("validation_fraction", [0.0, 0.2])
def test_normalisation_uses_train_statistics_only(make_cfg, validation_fraction):
    cfg = make_cfg("dataset=diabetes", f"dataset.validation_fraction={validation_fraction}")
    data = load_dataset(cfg.dataset, cfg.paths.data_dir)
    np.testing.assert_allclose(data.splits["train"].x.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(data.splits["train"].x.std(axis=0), 1, atol=1e-4)
    for split in ("test", "validation") if validation_fraction else ("test",):  # scaled with train's numbers
        assert np.abs(data.splits[split].x.mean(axis=0)).max() > 1e-3


@pytest.mark.parametrize("dataset,size", [("diabetes", 354), ("fashion_mnist", 4)])
def test_a_validation_fraction_that_takes_all_of_train_names_only_that_setting(make_cfg, dataset, size):
    # it said "lower dataset.validation_fraction or dataset.test_fraction", which a catalog dataset refuses
    cfg = make_cfg(f"dataset={dataset}", "dataset.validation_fraction=0.999")
    mock = tfds.testing.mock_data(num_examples=4) if dataset == "fashion_mnist" else contextlib.nullcontext()
    with mock, pytest.raises(UserError) as err:
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert str(err.value) == (f"dataset.validation_fraction=0.999 carves all {size} examples of the train split of "
                              f"dataset={dataset} into validation; lower dataset.validation_fraction so that train "
                              "keeps at least one example.")


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_train_split_smaller_than_the_device_count_names_the_devices_not_a_batch_size(make_cfg, batch_size):
    # it said "use 3", which the train split's 2 examples refuse as larger than the split
    cfg = make_cfg("debug=smoke", "dataset=synthetic_linear", "dataset.num_examples=3", "parallel=pmap",
                   "parallel.cpu_devices=3", f"trainer.batch_size={batch_size}")
    with pytest.raises(UserError) as err:
        train(cfg)
    assert str(err.value) == (f"trainer.batch_size={batch_size} does not split evenly across 3 devices, and the train "
                              "split (2 examples) holds fewer than one example per device; run on at most 2 devices "
                              "(parallel.cpu_devices=2 on CPU) or train on more examples.")


def test_validation_split_is_carved_from_train_and_chooses_the_best_checkpoint(make_cfg, tmp_path):
    cfg = make_cfg("debug=smoke", "dataset.validation_fraction=0.1", "trainer.eval_every=2",
                   "trainer.checkpoint_every=2", "checkpoint.keep=1", "checkpoint.keep_best=1")
    splits = load_dataset(cfg.dataset, cfg.paths.data_dir).splits
    assert (len(splits["train"]), len(splits["validation"]), len(splits["test"])) == (1294, 144, 359)
    train_rows = {row.tobytes() for row in splits["train"].x}
    assert sum(row.tobytes() in train_rows for row in splits["validation"].x) < 5  # digits' few duplicates
    results = train(cfg)
    assert results["validation"]["count"] == 144 and results["test"]["count"] == 359
    records = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    periodic = {r["step"]: r["accuracy"] for r in records if r["split"] == "validation"}
    assert sorted(periodic) == [2, 4, 6] and [r["step"] for r in records if r["split"] == "test"] == [6]
    best = [step for step, accuracy in periodic.items() if accuracy == max(periodic.values())]
    kept = Checkpoints(str(tmp_path / "run" / "checkpoints"), read_only=True).steps()
    assert kept in [sorted({step, 6}) for step in best]  # the newest plus the best on validation


def test_unwritable_data_dir_names_the_setting(make_cfg, tmp_path):
    blocker = tmp_path / "a_file"  # a file where a directory must go fails for root too
    blocker.write_text("")
    cfg = make_cfg("dataset=digits", f"paths.data_dir={blocker / 'sub'}")
    with pytest.raises(UserError, match=r"paths\.data_dir=.* is not writable"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("below", [False, True], ids=["itself", "below"])
@pytest.mark.parametrize("dataset", ["digits", "mnist"])
def test_a_data_dir_that_is_a_file_is_named_as_such(make_cfg, tmp_path, monkeypatch, dataset, below):
    # below a file, mnist's offline refusal said to copy the prepared dataset to a_file/sub/mnist, which cannot be made
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cfg = make_cfg(f"dataset={dataset}", f"paths.data_dir={blocker / 'sub' if below else blocker}")
    message = (r"a_file/sub is not writable \(Not a directory\); set paths\.data_dir to a directory you can write\.$"
               if below else r"a_file is a file, not a directory; set paths\.data_dir to a directory")
    with pytest.raises(UserError, match=rf"^paths\.data_dir=.*{message}"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("below", [False, True], ids=["itself", "below"])
@pytest.mark.parametrize("dataset", ["digits", "mnist"])
def test_a_data_dir_through_a_dangling_link_names_the_missing_target(make_cfg, tmp_path, monkeypatch, dataset, below):
    """A link to an unmounted disk: it said 'not writable (File exists)', or for a catalog dataset 'not prepared'."""
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    link = tmp_path / "tfds"
    link.symlink_to(tmp_path / "unmounted" / "tfds")
    cfg = make_cfg(f"dataset={dataset}", f"paths.data_dir={link / 'sub' if below else link}")
    through = rf"/sub is reached through {re.escape(str(link))}, a link" if below else " is a link"
    with pytest.raises(UserError, match=rf"^paths\.data_dir={re.escape(str(link))}{through} to "
                                        rf"{re.escape(str(tmp_path))}/unmounted/tfds, "
                                        r"which does not exist; create \(or mount\) it, or set paths\.data_dir to "
                                        r"another directory\.$"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert not (tmp_path / "unmounted").exists()


@pytest.mark.parametrize("dataset", ["digits", "mnist"])
def test_an_empty_data_dir_is_named_as_such(make_cfg, monkeypatch, dataset):
    """`export TFDS_DATA_DIR=` leaves the default paths.data_dir empty."""
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    cfg = make_cfg(f"dataset={dataset}", "paths.data_dir=''")
    with pytest.raises(UserError, match=r"^paths\.data_dir is empty \(as is TFDS_DATA_DIR when it is set but "
                                        r"empty\); set paths\.data_dir"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


def test_a_dataset_prepared_by_a_parallel_job_is_used(make_cfg, tmp_path, monkeypatch):
    """Parallel trials (submitit) on a fresh data dir prepare at once; the job whose rename loses reads the winner's."""
    cfg = make_cfg("dataset=digits", f"paths.data_dir={tmp_path / 'data'}")
    builder_class = sources.BUILDERS[cfg.dataset.tfds_name]
    prepare = builder_class.download_and_prepare

    def lose_the_rename(self, **kwargs):
        prepare(builder_class(data_dir=self.data_dir_root, **sources._embedded_kwargs(cfg.dataset)), **kwargs)
        raise FileExistsError(17, "Destination already exists")  # what TFDS's rename of incomplete.* raises

    monkeypatch.setattr(builder_class, "download_and_prepare", lose_the_rename)
    splits = load_dataset(cfg.dataset, cfg.paths.data_dir).splits
    assert (len(splits["train"]), len(splits["test"])) == (1438, 359)


def test_a_dataset_a_parallel_job_prepared_before_this_one_began_is_read(make_cfg, tmp_path, monkeypatch):
    """The other job's copy was complete by the time this job came to prepare it: TFDS reuses it without reading
    its description, so the builder opened before knew no splits ("splits is empty", a KeyError)."""
    cfg = make_cfg("dataset=digits", f"paths.data_dir={tmp_path / 'data'}")
    builder_class = sources.BUILDERS[cfg.dataset.tfds_name]
    prepare = builder_class.download_and_prepare

    def prepared_by_another_job_first(self, **kwargs):
        prepare(builder_class(data_dir=self.data_dir_root, **sources._embedded_kwargs(cfg.dataset)), **kwargs)
        prepare(self, **kwargs)

    monkeypatch.setattr(builder_class, "download_and_prepare", prepared_by_another_job_first)
    splits = load_dataset(cfg.dataset, cfg.paths.data_dir).splits
    assert (len(splits["train"]), len(splits["test"])) == (1438, 359)


def test_synthetic_linear_targets_carry_the_configured_noise(make_cfg):
    from zoo.data.embedded import synthetic_linear_params
    for noise in (0.1, 0.5):  # the same data_dir: a changed setting must not reuse the data prepared for another
        cfg = make_cfg("dataset=synthetic_linear", f"dataset.noise={noise}")
        x, y = read_splits(cfg.dataset, cfg.paths.data_dir)["train"]
        w, b = synthetic_linear_params(cfg.dataset.num_features)
        assert np.std(y - (x @ w + b)) == pytest.approx(noise, rel=0.1)


def test_a_label_equal_to_num_classes_is_refused():
    from omegaconf import OmegaConf

    from zoo.data.pipeline import build_dataset

    x, y = np.zeros((4, 2), np.float32), np.array([0, 1, 2, 3])
    cfg = OmegaConf.create({"name": "d", "task": "classification", "num_classes": 3, "validation_fraction": 0.0,
                            "normalize": "none", "normalize_target": False})
    with pytest.raises(UserError, match=r"labels of the train split must be integers in \[0, 3\)"):
        build_dataset(cfg, {"train": (x, y), "test": (x, y % 3)})


def test_a_finished_regression_run_saved_with_num_classes_is_read_as_it_was_trained(make_cfg):
    """dataset.num_classes on a regression dataset is refused for a new run; a run trained while it was ignored
    holds it in its saved config, which eval.py and export.py read and cannot change."""
    from omegaconf import OmegaConf

    from zoo.config import saved_with_defaults
    from zoo.train import build

    cfg = make_cfg("debug=smoke", "dataset=diabetes", "model=linear", "dataset.num_classes=3")
    with pytest.raises(UserError, match=r"^dataset\.num_classes only applies to classification"):
        build(cfg)
    read = saved_with_defaults(OmegaConf.to_container(cfg, resolve=True))  # as eval.py and resuming read it
    assert read.dataset.num_classes is None and build(read, for_training=False).data.task == "regression"


def test_a_finished_regression_run_saved_with_num_classes_goes_on_without_it(make_cfg):
    """Its command without dataset.num_classes (which a new run refuses) is the run's own settings, not others."""
    from omegaconf import OmegaConf

    from zoo.resume import comparable_config, result_changes

    cfg = make_cfg("debug=smoke", "dataset=diabetes", "model=linear")
    saved = OmegaConf.to_container(cfg, resolve=True)
    saved["dataset"]["num_classes"] = 3
    assert result_changes(saved, cfg) == []
    assert comparable_config(saved)["dataset"]["num_classes"] is None  # as resuming its checkpoints compares it
    saved["dataset"].update(task="classification", num_classes=3)
    assert result_changes(saved, cfg) != []  # a classification run's num_classes decides its results


def test_an_http_only_proxy_is_not_the_one_https_downloads_take(monkeypatch):
    """The catalog downloads over https, which HTTP_PROXY does not carry: one that does not answer is no reason
    to call the network absent when the download host resolves."""
    for variable in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(variable, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        closed = server.getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed}")
    monkeypatch.setattr(sources, "_resolves", lambda host: True)
    assert sources._network_reachable()


@pytest.mark.parametrize("value", [10**14, 10**20], ids=["no-memory", "no-numpy-array"])
@pytest.mark.parametrize("setting", ["num_examples", "num_features"])
def test_synthetic_linear_too_big_for_memory_is_one_sentence_and_writes_nothing(make_cfg, tmp_path, setting, value):
    # 10**14 rows or columns of float64 is beyond any address space: numpy's MemoryError, never an OOM kill;
    # 10**20 is beyond what numpy can even describe (ValueError)
    cfg = make_cfg("dataset=synthetic_linear", f"dataset.{setting}={value}", f"paths.data_dir={tmp_path / 'data'}")
    with pytest.raises(UserError, match=rf"dataset=synthetic_linear does not fit in memory .*dataset\.{setting}="
                                        rf"{value}.*; lower dataset\.num_examples or dataset\.num_features\.$"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("noise", ["inf", "1e39"])
def test_synthetic_linear_noise_beyond_float32_is_refused_before_anything_is_written(make_cfg, tmp_path, noise):
    # it was prepared, then refused as "not finite float rows for regression; ... pick a regression dataset"
    cfg = make_cfg("dataset=synthetic_linear", f"dataset.noise={noise}", f"paths.data_dir={tmp_path / 'data'}")
    with pytest.raises(UserError, match=re.escape(f"dataset.noise={cfg.dataset.noise} makes targets of "
                                                  "dataset=synthetic_linear that float32 cannot hold (inf); lower "
                                                  "dataset.noise.")):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert not (tmp_path / "data").exists()


def test_a_catalog_dataset_without_image_and_label_is_named_so_not_damaged(make_cfg, tmp_path):
    # it was "damaged ('image'); delete that directory", which deletes a good prepared copy for nothing
    cfg = make_cfg("dataset=mnist", "dataset.tfds_name=imdb_reviews", "dataset.num_classes=2")
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(UserError, match=r"^dataset=mnist \(dataset\.tfds_name=imdb_reviews\) has the features "
                                            r"\['label', 'text'\], not the 'image' and 'label' .*mnist"):
            load_dataset(cfg.dataset, cfg.paths.data_dir)


def test_a_catalog_dataset_whose_images_differ_in_shape_is_named_so_not_damaged(make_cfg):
    # it was "damaged (all input arrays must have the same shape); delete that directory", which deletes a good
    # prepared copy for nothing: a download meets the same images
    cfg = make_cfg("dataset=mnist", "dataset.tfds_name=tf_flowers", "dataset.num_classes=5")
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(UserError, match=r"^dataset=mnist \(dataset\.tfds_name=tf_flowers\) has images of varying "
                                            r"shape \(None, None, 3\), which .* one shape \(e\.g\. mnist, "):
            load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("num_classes", [100, 5])
def test_a_num_classes_other_than_the_catalog_datasets_own_is_refused(make_cfg, num_classes):
    """dataset=cifar10 dataset.num_classes=100 trained a model of 100 outputs, 90 of them for no label; too few
    classes were told only once a label reached them."""
    cfg = make_cfg("dataset=cifar10", f"dataset.num_classes={num_classes}")
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(UserError, match=rf"^dataset=cifar10 has 10 classes \(its label's ClassLabel\), not the "
                                            rf"{num_classes} dataset\.num_classes={num_classes} gives; set "
                                            r"dataset\.num_classes=10\.$"):
            load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("num_classes", [12, 5])
def test_a_num_classes_other_than_the_embedded_datasets_own_is_refused(make_cfg, num_classes):
    """dataset=digits dataset.num_classes=12 trained a model of 12 outputs, 2 of them for no label; too few
    classes were told without the count to set."""
    cfg = make_cfg("dataset=digits", f"dataset.num_classes={num_classes}")
    with pytest.raises(UserError, match=rf"^dataset=digits has 10 classes \(its labels 0\.\.9\), not the "
                                        rf"{num_classes} dataset\.num_classes={num_classes} gives; set "
                                        r"dataset\.num_classes=10\.$"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("dataset", ["digits", "cifar10"])
def test_a_finished_run_saved_with_more_classes_than_its_dataset_has_is_read_as_it_was_trained(make_cfg, dataset):
    """A new run is refused; one trained before that holds the count in its saved config, which eval.py and
    export.py read and cannot change: they were refused with a sentence asking to change it."""
    from zoo.train import build

    cfg = make_cfg("debug=smoke", f"dataset={dataset}", "dataset.num_classes=12", "model.hidden=[8]",
                   "trainer.batch_size=2")
    with tfds.testing.mock_data(num_examples=4) if dataset == "cifar10" else contextlib.nullcontext():
        with pytest.raises(UserError, match=rf"^dataset={dataset} has 10 classes"):
            build(cfg)
        assert build(cfg, for_training=False).data.out_features == 12


class ZooTestTrainOnly(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A catalog-like dataset prepared with a train split alone (as eurosat, tf_flowers, cats_vs_dogs are)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        features = {"image": tfds.features.Tensor(shape=(2, 2, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=2)}
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i in range(4):
            yield i, {"image": np.full((2, 2, 1), i, np.uint8), "label": i % 2}


@pytest.mark.parametrize("registered", [True, False], ids=["catalog-builder", "prepared-copy-alone"])
def test_a_prepared_catalog_dataset_without_a_test_split_names_its_splits(make_cfg, tmp_path, monkeypatch,
                                                                          registered):
    # it said the dataset was not prepared and could not be downloaded (offline), or that it was neither prepared
    # nor a catalog dataset (a copy whose builder this TFDS lacks)
    ZooTestTrainOnly(data_dir=str(tmp_path / "data"), file_format="array_record").download_and_prepare()
    if registered:
        monkeypatch.setattr(tfds, "builder_cls", lambda name: ZooTestTrainOnly)
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    cfg = make_cfg("dataset=mnist", "dataset.tfds_name=zoo_test_train_only", f"paths.data_dir={tmp_path / 'data'}")
    with pytest.raises(UserError, match=r"^dataset=mnist \(dataset\.tfds_name=zoo_test_train_only\) in paths\.data_dir"
                                        r"=\S+ has the splits \['train'\], not the 'test' split the zoo reads "
                                        r"besides train; pick .*mnist"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("name,prepared", [("mnist", "mnist"), ("mnist:3.0.1", "mnist/3.0.1"),
                                           ("emnist/letters", "emnist/letters"), ("mnist:3.*.*", "mnist"),
                                           ("emnist/letters:3.*.*", "emnist/letters")])
def test_the_offline_refusal_names_where_the_copy_goes_for_a_version_or_config(make_cfg, tmp_path, monkeypatch, name,
                                                                               prepared):
    # "copy DIR/mnist/3.0.1 into paths.data_dir" made paths.data_dir/3.0.1, where TFDS does not look
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    data_dir = tmp_path / "data"
    cfg = make_cfg("dataset=mnist", f"dataset.tfds_name={name}", f"paths.data_dir={data_dir}")
    where = re.escape(str(data_dir / prepared))
    with pytest.raises(UserError, match=rf"copy DIR/{re.escape(prepared)} to {where}, or "):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("name,refusal", [
    ("emnist/leters", r"dataset\.tfds_name=emnist/leters names no config of the catalog dataset emnist that this TFDS "
                      r"knows \(byclass, .*letters.*\); check its spelling\.$"),
    ("emnist/leters:3.1.0", r"dataset\.tfds_name=emnist/leters:3\.1\.0 names no config of the catalog dataset emnist "),
    ("mnist/letters", r"dataset\.tfds_name=mnist/letters names a config of the catalog dataset mnist, which has none; "
                      r"set dataset\.tfds_name=mnist\.$"),
    ("mnsit:3.0.1", r"dataset\.tfds_name=mnsit:3\.0\.1 is neither prepared in paths\.data_dir=\S+ nor a TFDS catalog "
                    r"dataset; check its spelling"),
    # a community dataset's namespace is no dataset name: the download decides, as for any name TFDS knows
    ("huggingface:mnist/mnist", r"(?!.*check its spelling)"),
])
@pytest.mark.parametrize("online", [True, False], ids=["online", "offline"])
def test_a_misspelt_catalog_config_or_name_with_a_version_is_named_not_sent_to_download(make_cfg, tmp_path,
                                                                                       monkeypatch, name, refusal,
                                                                                       online):
    # offline it said to run tfds.data_source(NAME) on a machine with internet, which fails there as here; online
    # the download's failure was cut at 200 characters in a sentence saying the dataset could not be downloaded
    monkeypatch.setattr(sources, "_network_reachable", lambda: online)
    cfg = make_cfg("dataset=mnist", f"dataset.tfds_name={name}", f"paths.data_dir={tmp_path / 'data'}")
    with pytest.raises(UserError, match=f"^{refusal}"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


def test_a_catalog_dataset_downloaded_without_a_test_split_names_its_splits(make_cfg, tmp_path, monkeypatch):
    # the download prepared it, then reading its splits failed: it said the dataset could not be downloaded
    data_source = tfds.data_source

    def download(name, *, download, data_dir, **kwargs):
        if download:
            ZooTestTrainOnly(data_dir=data_dir, file_format="array_record").download_and_prepare()
        return data_source(name, download=download, data_dir=data_dir, **kwargs)

    monkeypatch.setattr(tfds, "data_source", download)
    monkeypatch.setattr(tfds, "builder_cls", lambda name: ZooTestTrainOnly)
    monkeypatch.setattr(sources, "_network_reachable", lambda: True)
    cfg = make_cfg("dataset=mnist", "dataset.tfds_name=zoo_test_train_only", f"paths.data_dir={tmp_path / 'data'}")
    with pytest.raises(UserError, match=r"^dataset=mnist \(dataset\.tfds_name=zoo_test_train_only\) in paths\.data_dir"
                                        r"=\S+ has the splits \['train'\], not the 'test' split the zoo reads"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("where", ["reading", "normalising"])
def test_a_catalog_dataset_larger_than_memory_is_named_so_not_damaged(make_cfg, monkeypatch, where):
    # reading it said "damaged (MemoryError); delete that directory", which deletes a good prepared copy that took
    # its download to make; normalising it ended in numpy's _ArrayMemoryError traceback
    def out_of_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 36.2 GiB for an array with shape (327680, 96, 96, 3) and data type "
                          "float32")

    if where == "reading":
        monkeypatch.setattr(sources, "_decode", out_of_memory)
    else:
        monkeypatch.setattr(pipeline, "_normalizer", out_of_memory)
    cfg = make_cfg("dataset=mnist", "dataset.tfds_name=patch_camelyon", "dataset.num_classes=2")
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(UserError, match=r"^dataset=mnist \(dataset\.tfds_name=patch_camelyon\) does not fit in "
                                            r"this machine's memory \(.*\); free some memory or pick a smaller "
                                            r"dataset\.$"):
            load_dataset(cfg.dataset, cfg.paths.data_dir)


@pytest.mark.parametrize("dataset", ["digits", "mnist"])
@pytest.mark.parametrize("from_env", [True, False], ids=["TFDS_DATA_DIR", "set"])
def test_a_data_dir_that_is_a_url_is_named_as_such(make_cfg, tmp_path, monkeypatch, dataset, from_env):
    # TFDS_DATA_DIR=gs://bucket/tensorflow_datasets (as on a Cloud TPU VM) ended in an ImportError traceback
    # (`Please install gcsfs`) for an embedded dataset, and told to copy a catalog one "to gs://..."
    monkeypatch.setattr(sources, "_network_reachable", lambda: False)
    monkeypatch.chdir(tmp_path)
    url = "gs://bucket/tensorflow_datasets"
    if from_env:
        monkeypatch.setenv("TFDS_DATA_DIR", url)
        cfg = make_cfg(f"dataset={dataset}", "paths.data_dir=${oc.env:TFDS_DATA_DIR}")
    else:
        cfg = make_cfg(f"dataset={dataset}", f"paths.data_dir={url}")
    source = r" \(from TFDS_DATA_DIR\)" if from_env else ""
    with pytest.raises(UserError, match=rf"^paths\.data_dir=gs://bucket/tensorflow_datasets{source} is a URL; the "
                                        r"zoo prepares and reads datasets in a local directory: set paths\.data_dir "
                                        r"to one"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
    assert not any(tmp_path.iterdir())  # no local gs:/ directory made


@pytest.mark.parametrize("name", ["fashion-mnist", "cifar-10", "mnist:"])
@pytest.mark.parametrize("online", [True, False], ids=["online", "offline"])
def test_a_catalog_name_tfds_cannot_parse_is_named_misspelt(make_cfg, tmp_path, monkeypatch, name, online):
    # offline it said to run tfds.data_source('fashion-mnist') on a machine with internet, where TFDS refuses the name
    monkeypatch.setattr(sources, "_network_reachable", lambda: online)
    cfg = make_cfg("dataset=mnist", f"dataset.tfds_name={name}", f"paths.data_dir={tmp_path / 'data'}")
    with pytest.raises(UserError, match=rf"^dataset\.tfds_name={re.escape(name)} is neither prepared in "
                                        r"paths\.data_dir=\S+ nor a TFDS catalog dataset; check its spelling \(e\.g\. "
                                        r"mnist, cifar10, "
                                        r"fashion_mnist\)\.$"):
        load_dataset(cfg.dataset, cfg.paths.data_dir)
