"""export.py / predict.py: the exported function equals the zoo's forward pass, runs without flax or zoo, and
predict.py refuses bad inputs without writing anything."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hydra import compose, initialize_config_dir

import commands
from conftest import CONF, ROOT, subprocess_env
from zoo.data import read_splits
from zoo.ema import with_averaged_params
from zoo.errors import UserError
from zoo.evaluate import evaluate
from zoo.export.artifact import export, write_directory
from zoo.export.predict import _refuse_a_header_line, load_export, predict
from zoo.train import build, build_model, train


def load_exported(run_dir):
    with open(run_dir / "export" / "model.jax", "rb") as f:
        return jax.export.deserialize(bytearray(f.read()))


def raw_inputs(cfg, n: int) -> np.ndarray:
    """n rows of the raw (unnormalised) test split, repeated if the split is smaller."""
    x, _ = read_splits(cfg.dataset, cfg.paths.data_dir)["test"]
    return x[np.random.default_rng(0).choice(len(x), n, replace=n > len(x))]


def zoo_forward(cfg, host_state):
    """The zoo's own inference: numpy normalisation, the nnx model in eval mode, targets' units restored.

    Returns it with the targets' std (None for classification)."""
    data = build(cfg).data
    graphdef, _, _ = nnx.split(build_model(cfg, data), nnx.Param, ...)
    model = nnx.merge(graphdef, host_state.params, host_state.model_state)

    def forward(x_raw):
        outputs = np.asarray(model(jnp.asarray(data.x_scaler(x_raw)), train=False))
        return outputs if data.y_scaler is None else outputs * data.y_scaler.std + data.y_scaler.mean

    return forward, None if data.y_scaler is None else data.y_scaler.std


@pytest.mark.parametrize("overrides", [
    ["model=linear"], ["model=mlp"], ["model=cnn"],
    ["model=cnn", "parallel.mode=pmap", "parallel.cpu_devices=2"],
    ["model=mlp", "parallel.mode=sharded", "parallel.cpu_devices=2"],
    ["model=linear", "dataset=diabetes"],
], ids=["linear", "mlp", "cnn", "cnn-pmap", "mlp-sharded", "linear-regression"])
def test_exported_outputs_equal_the_zoo_forward_pass(make_cfg, tmp_path, overrides):
    cfg = make_cfg("debug=smoke", *overrides)
    trained = train(cfg)
    export(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="export"))
    exported = load_exported(tmp_path / "run")
    forward, target_std = zoo_forward(cfg, trained["state"])
    for batch in (1, 7, 300):
        x = raw_inputs(cfg, batch)
        expected, got = forward(x), exported.call(x)
        if target_std is None:
            np.testing.assert_allclose(got["logits"], expected, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got["probabilities"], jax.nn.softmax(expected), rtol=1e-6, atol=1e-6)
            assert np.array_equal(np.argmax(got["logits"], -1), np.argmax(expected, -1))
        else:  # 1e-6 in the model's standardised units: one float32 rounding there is ~1e-7 * target std here
            np.testing.assert_allclose(got["predictions"], expected, rtol=1e-6, atol=1e-6 * target_std.max())
            assert got["predictions"].shape == (batch, 1)


def test_a_run_with_weight_averaging_exports_the_averaged_weights(make_cfg, tmp_path):
    cfg = make_cfg("debug=smoke", "model.hidden=[32]", "trainer.ema_decay=0.5")
    trained = train(cfg)
    export(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="export"))
    x = raw_inputs(cfg, 7)
    got = np.asarray(load_exported(tmp_path / "run").call(x)["logits"])
    averaged, _ = zoo_forward(cfg, with_averaged_params(trained["state"]))
    np.testing.assert_allclose(got, averaged(x), rtol=1e-6, atol=1e-6)
    last, _ = zoo_forward(cfg, trained["state"])
    assert not np.allclose(got, last(x), atol=1e-4)  # the average is not the last parameters


@pytest.fixture(scope="module")
def exported_run(tmp_path_factory, data_dir):
    """One trained and exported MLP run (kept two checkpoints apart so `best` and `latest` can differ)."""
    run_dir = tmp_path_factory.mktemp("exported") / "run"
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("train", overrides=["debug=smoke", "model.hidden=[32]", "trainer.checkpoint_every=2",
                                          f"paths.data_dir={data_dir}", f"paths.output_dir={run_dir}",
                                          "paths.compilation_cache_dir=null"])
        train(cfg)
        export(compose("export", overrides=[f"run_dir={run_dir}", "checkpoint=best", f"paths.data_dir={data_dir}",
                                            "paths.compilation_cache_dir=null"]))
    return run_dir, cfg


def test_exported_accuracy_on_the_test_split_equals_eval(make_cfg, exported_run):
    run_dir, cfg = exported_run
    x, y = read_splits(cfg.dataset, cfg.paths.data_dir)["test"]
    accuracy = float(np.mean(np.argmax(np.asarray(load_exported(run_dir).call(x)["logits"]), -1) == y))
    evaluated = evaluate(make_cfg(f"run_dir={run_dir}", "checkpoint=best", config_name="eval"))
    signature = json.loads((run_dir / "export" / "signature.json").read_text())
    assert accuracy == evaluated["metrics"]["accuracy"] == signature["checkpoint"]["test"]["accuracy"]
    assert signature["checkpoint"]["step"] == evaluated["step"]
    assert signature["input"] == {"name": "x", "shape": [None, 8, 8, 1], "dtype": "float32",
                                  "units": "raw, as the dataset stores them: normalisation is part of the model"}
    assert [o["name"] for o in signature["outputs"]] == ["logits", "probabilities"]
    assert signature["config"]["model"]["hidden"] == [32] and signature["versions"]["jax"] == jax.__version__


def readme_serving_example() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "jax.export.deserialize" in b]
    assert len(blocks) == 1, "README.md must hold one python block that serves model.jax"
    return blocks[0]


def test_the_readme_serving_example_runs_with_only_jax_and_numpy(exported_run, tmp_path, data_dir):
    run_dir, cfg = exported_run
    x = raw_inputs(cfg, 5)
    np.save(tmp_path / "new_digits.npy", x)
    script = tmp_path / "serve.py"
    script.write_text(readme_serving_example() + "\nassert 'flax' not in sys.modules and 'zoo' not in sys.modules\n")
    done = commands.run([sys.executable, str(script), str(run_dir), str(tmp_path / "new_digits.npy")],
                        cwd=tmp_path, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = np.argmax(load_exported(run_dir).call(x)["probabilities"], -1)
    assert done.stdout.split() == [str(c) for c in expected]


def predict_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):  # predict has no paths.* to set
        return compose("predict", overrides=list(overrides))


def test_the_exported_function_takes_any_batch_of_one_example_or_more_as_the_readme_says(exported_run):
    """The README said `model.call(inputs)` takes any N: the symbolic batch dimension is N >= 1, and an empty
    batch is refused by jax.export (predict.py refuses an input without examples before calling it)."""
    model = load_exported(exported_run[0])
    assert model.call(np.zeros((1, 8, 8, 1), np.float32))["probabilities"].shape == (1, 10)
    with pytest.raises(ValueError, match="Expected value >= 1 for dimension variable 'batch'"):
        model.call(np.zeros((0, 8, 8, 1), np.float32))
    assert "outputs = model.call(inputs)  # any N >= 1:" in readme_serving_example()
    assert "so any batch size runs" not in (ROOT / "README.md").read_text()


def test_predict_reads_npy_and_csv_and_writes_stdout_or_a_file(exported_run, tmp_path, capsys):
    run_dir, cfg = exported_run
    x = raw_inputs(cfg, 7)
    np.save(tmp_path / "x.npy", x.astype(np.float64))  # np.save's default dtype: converted, not refused
    np.savetxt(tmp_path / "x.csv", x.reshape(7, -1).astype(int), delimiter=",", fmt="%d")  # digits are integers
    # the same batches both ways (3, 3, 1): XLA:CPU need not round a batch of 3 as it rounds one of 7
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}", "batch_size=3"))
    printed = capsys.readouterr().out
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.csv'}", f"output={tmp_path / 'p.csv'}",
                        "batch_size=3"))
    assert (tmp_path / "p.csv").read_text() == printed
    rows = [line.split(",") for line in printed.splitlines()]
    assert rows[0] == ["class"] + [f"probability_{k}" for k in range(10)] and len(rows) == 8
    probabilities = load_exported(run_dir).call(x)["probabilities"]
    assert [int(r[0]) for r in rows[1:]] == list(np.argmax(probabilities, -1))
    np.testing.assert_allclose(np.array(rows[1:], float)[:, 1:], probabilities, rtol=1e-6)
    # a comment is no header: np.loadtxt skips it
    (tmp_path / "commented.csv").write_text("# five digits\n" + (tmp_path / "x.csv").read_text())
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'commented.csv'}", "batch_size=3"))
    assert capsys.readouterr().out == printed
    # spaces or tabs beside the commas are no other separator
    (tmp_path / "tabbed.csv").write_text((tmp_path / "x.csv").read_text().replace(",", ",\t"))
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'tabbed.csv'}", "batch_size=3"))
    assert capsys.readouterr().out == printed
    # Excel's "CSV UTF-8" begins the file with a byte order mark
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "x.csv").read_bytes())
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'bom.csv'}", "batch_size=3"))
    assert capsys.readouterr().out == printed
    # a spreadsheet or csv.QUOTE_ALL writer quotes every field, numbers too
    quoted = "\n".join(",".join(f'"{v}.0"' for v in row) for row in x.reshape(7, -1).astype(int)) + "\n"
    (tmp_path / "quoted.csv").write_text(quoted)
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'quoted.csv'}", "batch_size=3"))
    assert capsys.readouterr().out == printed


def test_predict_skips_a_csv_line_of_spaces_as_it_skips_an_empty_one(exported_run, tmp_path, capsys):
    """An empty line was skipped, while a line of spaces or a tab (one an editor leaves at the end of a file) was
    refused as 'the number of columns changed from 64 to 1', which names neither the line nor the spaces."""
    run_dir, cfg = exported_run
    rows = [",".join(map(str, row)) for row in raw_inputs(cfg, 3).reshape(3, -1).astype(int)]
    (tmp_path / "x.csv").write_text("\n".join(rows) + "\n")
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.csv'}"))
    printed = capsys.readouterr().out
    for name, text in {"empty.csv": "\n".join(rows) + "\n\n", "spaces.csv": "\n".join(rows) + "\n   \n",
                       "tab.csv": rows[0] + "\n\t\n" + "\n".join(rows[1:]) + "\n",
                       "crlf.csv": "\r\n".join(rows) + "\r\n  \r\n"}.items():
        (tmp_path / name).write_bytes(text.encode())
        predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / name}"))
        assert capsys.readouterr().out == printed, name


def test_predict_reads_a_npy_of_flattened_examples_as_the_csv_of_the_same_numbers(exported_run, tmp_path, capsys):
    """A .csv holds one flattened example per line: the same (N, 64) array saved with np.save is read alike, not
    refused for its shape while the .csv of its numbers is predicted."""
    run_dir, cfg = exported_run
    x = raw_inputs(cfg, 5).reshape(5, -1)
    np.save(tmp_path / "x.npy", x)
    np.savetxt(tmp_path / "x.csv", x, delimiter=",", fmt="%d")
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.csv'}"))
    from_csv = capsys.readouterr().out
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}"))
    assert capsys.readouterr().out == from_csv and len(from_csv.splitlines()) == 6


def test_predict_reads_one_channel_images_without_their_channel_axis(exported_run, tmp_path, capsys):
    """Grayscale images are often kept as (N, H, W) (scikit-learn's digits.images is (N, 8, 8)): for a model of
    (8, 8, 1) they are the same numbers; they were refused for their shape."""
    run_dir, cfg = exported_run
    x = raw_inputs(cfg, 5)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "images.npy", x[..., 0])
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}"))
    with_axis = capsys.readouterr().out
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'images.npy'}"))
    assert capsys.readouterr().out == with_axis and len(with_axis.splitlines()) == 6


def test_predict_output_dash_prints_to_stdout(exported_run, tmp_path, capsys, monkeypatch):
    """output=- is stdout, as for most commands that write a file: it wrote a file named '-' in the working
    directory."""
    run_dir, cfg = exported_run
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    monkeypatch.chdir(tmp_path)
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}"))
    printed = capsys.readouterr().out
    predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}", "output=-"))
    assert capsys.readouterr().out == printed and len(printed.splitlines()) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def test_predict_names_output_when_a_directory_that_looked_writable_refuses_the_file(exported_run, tmp_path,
                                                                                     monkeypatch):
    """As root on /sys: os.access says writable, the write is refused."""
    import zoo.export.predict

    def refused(path, text):
        raise PermissionError(13, "Permission denied", path + ".tmp")

    monkeypatch.setattr(zoo.export.predict, "write_text", refused)
    np.save(tmp_path / "x.npy", raw_inputs(exported_run[1], 2))
    with pytest.raises(UserError, match=r"^output=.*/p\.csv cannot be written \(Permission denied\); choose another "
                                        r"output or leave it out to print to stdout\.$"):
        predict(predict_cfg(f"run_dir={exported_run[0]}", f"input={tmp_path / 'x.npy'}",
                            f"output={tmp_path / 'p.csv'}"))


def test_predict_command_prints_only_predictions(exported_run, tmp_path, data_dir):
    run_dir, cfg = exported_run
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    done = commands.run([sys.executable, "predict.py", f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}"],
                        cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("class,probability_0") and len(done.stdout.splitlines()) == 4


EXPECTED = (r"\(N, 8, 8, 1\), or \(N, 64\) flattened: N >= 1 examples of shape \(8, 8, 1\) "
            r"\(a \.csv: one example per line, 64 comma")
NOT_NPY = (r"cannot be read as numbers \(it is not an \.npy file: np\.save writes those, ndarray\.tofile and "
           r"np\.savetxt do not\); it must hold " + EXPECTED)


@pytest.mark.parametrize("name,content,message", [
    ("x.npy", np.zeros((4, 8, 7)), r"has shape \(4, 8, 7\); the model expects " + EXPECTED),
    ("x.npy", np.zeros((0, 8, 8, 1)), r"holds no examples; the model expects " + EXPECTED),
    ("x.npy", np.full((2, 8, 8, 1), "a"), r"has dtype <U1; the model takes integers or floats of shape " + EXPECTED),
    ("x.npy", np.full((2, 8, 8, 1), None), r"cannot be read as numbers \(.*allow_pickle=False.*\); it must hold "),
    ("x.npy", np.full((2, 8, 8, 1), np.nan), r"holds NaN or infinite values"),
    ("x.npy", np.full((2, 8, 8, 1), 1e39), r"holds NaN or infinite values, or values beyond float32's range "
                                           r"\(±3\.4e\+38\)"),
    ("x.npy", "an npz archive", r"cannot be read as numbers \(it is an \.npz archive of several arrays; save one "
                                r"array with np\.save\)"),
    ("x.npy", "", r"holds no examples; the model expects " + EXPECTED),  # an empty file
    ("x.npy", "0," * 63 + "0\n", NOT_NPY),  # np.savetxt under an .npy name
    ("x.npy", "raw bytes", NOT_NPY),  # ndarray.tofile: the values without np.save's header
    ("x.csv", "1,2,3\n4,5,6\n", r"has shape \(2, 3\); the model expects " + EXPECTED),
    ("x.csv", "1," * 63 + "one\n", r"cannot be read as numbers \(.*one.*\); it must hold " + EXPECTED),
    ("x.csv", "0," * 63 + "0\n" + "0," * 59 + "0\n", r"cannot be read as numbers \(the number of columns changed from "
                                                   r"64 to 60 at row 2\); it must hold " + EXPECTED),  # not usecols
    ("x.csv", ("0," * 64 + "\n") * 2, r"ends its first line with a comma, which reads as one more number, an empty "
                                    r"one; remove it: it must hold " + EXPECTED),
    ("x.csv", "0;" * 63 + "0\n", r"separates its numbers with ';', not commas; it must hold " + EXPECTED),  # Excel's
    ("x.csv", "0,5;" * 63 + "0\n", r"separates its numbers with ';', not commas, and writes decimal commas, not "
                                  r"points; it must hold "),
    ("x.csv", "0.0 " * 63 + "0.0\n", r"separates its numbers with spaces \(np\.savetxt's default: pass it "
                                      r"delimiter=','\), not commas; it must hold "),
    ("x.csv", "0\t" * 63 + "0\n", r"separates its numbers with tabs, not commas; it must hold " + EXPECTED),  # locale
    ("x.csv", "", r"holds no examples; the model expects " + EXPECTED),
    ("x.csv", ",".join(f"p{i}" for i in range(64)) + "\n" + "0," * 63 + "0\n",
     r"begins with a header line \(p0,p1,p2,p3,p4,p5,p6,p7,p8,p9,p10,p11,p1…\); predict\.py reads examples only, one "
     r"per line: remove that line \(pandas: to_csv\(\.\.\., header=False\)\)\.$"),
    ("x.csv", ",".join(f"p{i}" for i in range(64)) + "\n",
     r"holds a header line \(p0,p1,p2,p3,p4,p5,p6,p7,p8,p9,p10,p11,p1…\) and no examples; the model expects "
     + EXPECTED),
    ("x.csv", ",".join(f'"p{i}"' for i in range(64)) + "\n" + '"0",' * 63 + '"0"\n',
     r'begins with a header line \("p0","p1","p2","p3","p4","p5","p6","p7",…\); predict\.py reads examples '
     r"only"),
    ("x.csv", '"0,5";' * 63 + '"0"\n', r"separates its numbers with ';', not commas, and writes decimal commas"),
    ("x.csv", ",".join(map(str, range(64))) + "\n" + "0," * 63 + "0\n",
     r"begins with the line 0,1,\.\.\.,63: column numbers \(the header pandas' to_csv writes\), not an example; remove "
     r"that line \(pandas: to_csv\(\.\.\., header=False\)\)\.$"),
    ("x.txt", "1\n", r"must be a \.npy or \.csv file of shape " + EXPECTED),
    ("missing.npy", None, r"does not exist; pass a \.npy or \.csv file of shape " + EXPECTED),
    ("folder.npy", "a directory", r"is not a file; pass a \.npy or \.csv file of shape " + EXPECTED),
], ids=["npy-shape", "npy-empty", "npy-strings", "npy-pickle", "npy-nan", "npy-overflow", "npy-npz",
        "npy-empty-file", "npy-text", "npy-tofile", "csv-columns", "csv-text", "csv-ragged", "csv-trailing-comma",
        "csv-semicolons",
        "csv-decimal-commas", "csv-spaces", "csv-tabs", "csv-empty",
        "csv-header-names", "csv-header-alone", "csv-quoted-header", "csv-quoted-decimal-commas", "csv-header-numbers", "extension",
        "missing", "directory"])
def test_predict_refuses_bad_input_in_one_sentence_and_writes_nothing(exported_run, tmp_path, capsys,
                                                                      name, content, message):
    path, output = tmp_path / name, tmp_path / "p.csv"
    if isinstance(content, str) and content == "a directory":
        path.mkdir()
    elif isinstance(content, str) and content == "raw bytes":
        np.zeros((2, 8, 8, 1), np.float32).tofile(path)
    elif isinstance(content, str) and content == "an npz archive":
        with open(path, "wb") as f:  # np.savez under an .npy name
            np.savez(f, x=np.zeros((2, 8, 8, 1)), y=np.zeros(2))
    elif isinstance(content, str):
        path.write_text(content)
    elif content is not None:
        np.save(path, content, allow_pickle=True)
    output.write_text("class,probability_0\n0,1\n")  # earlier predictions
    with pytest.raises(UserError, match=f"input={re.escape(str(path))} {message}"):
        predict(predict_cfg(f"run_dir={exported_run[0]}", f"input={path}", f"output={output}"))
    assert output.read_text() == "class,probability_0\n0,1\n" and capsys.readouterr().out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "p.csv"] if path.exists() else ["p.csv"])


@pytest.mark.parametrize("changed, says", [
    ({"input": {"shape": [None, 8]}}, r"gives input shape \[8\]; the model takes \[8, 8, 1\]"),
    ({"task": "regression"}, r"gives task regression; the model returns"),
])
def test_a_signature_that_is_not_its_models_is_refused(exported_run, tmp_path, changed, says):
    """A readable model beside a signature.json from another export: one sentence, not a failing call."""
    run_dir, _ = exported_run
    shutil.copytree(run_dir / "export", tmp_path / "export")
    signature = json.loads((tmp_path / "export" / "signature.json").read_text())
    (tmp_path / "export" / "signature.json").write_text(json.dumps({**signature, **changed}))
    np.save(tmp_path / "x.npy", np.zeros((3, 8), np.float32))
    with pytest.raises(UserError, match=rf"has no readable export \(ValueError: signature\.json {says}"):
        predict(predict_cfg(f"run_dir={tmp_path}", f"input={tmp_path / 'x.npy'}"))



def test_a_signature_naming_a_model_outside_export_is_refused_and_a_damaged_checkpoint_record_is_ignored(
        exported_run, tmp_path):
    """signature.json's model was opened wherever it pointed (/etc/passwd, read and then refused by the
    deserializer); its checkpoint record, there only for a warning, ended predict.py in an AttributeError when it
    was not a mapping."""
    run_dir, cfg = exported_run
    shutil.copytree(run_dir / "export", tmp_path / "export")
    signature = json.loads((tmp_path / "export" / "signature.json").read_text())
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    (tmp_path / "export" / "signature.json").write_text(json.dumps({**signature, "model": "/etc/passwd"}))
    with pytest.raises(UserError, match=r"has no readable export \(ValueError: its model '/etc/passwd' is not a file "
                                        r"name in export/\); run "):
        predict(predict_cfg(f"run_dir={tmp_path}", f"input={tmp_path / 'x.npy'}"))
    (tmp_path / "export" / "signature.json").write_text(json.dumps({**signature, "checkpoint": [1]}))
    assert predict(predict_cfg(f"run_dir={tmp_path}", f"input={tmp_path / 'x.npy'}",
                               f"output={tmp_path / 'p.csv'}"))["count"] == 3

def test_a_model_whose_program_is_damaged_is_refused_before_predicting(exported_run, tmp_path, capsys):
    """model.jax's header reads, its StableHLO does not: one sentence, not JAX's error from the first call (in an
    export whose signature.json holds no sha256 of model.jax to tell it by)."""
    run_dir, cfg = exported_run
    shutil.copytree(run_dir / "export", tmp_path / "export")
    signature = json.loads((tmp_path / "export" / "signature.json").read_text())
    del signature["model_sha256"]
    (tmp_path / "export" / "signature.json").write_text(json.dumps(signature))
    model = (tmp_path / "export" / "model.jax").read_bytes()
    program = load_exported(run_dir).mlir_module_serialized
    start = model.index(program)  # its bytecode's header
    (tmp_path / "export" / "model.jax").write_bytes(model[:start] + b"\xff" * 64 + model[start + 64:])
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    with pytest.raises(UserError, match=rf"^run_dir={tmp_path} has no readable export \(.*StableHLO.*\); run "
                                        rf"`python export\.py run_dir={tmp_path}` first\.$"):
        predict(predict_cfg(f"run_dir={tmp_path}", f"input={tmp_path / 'x.npy'}"))
    assert capsys.readouterr().out == ""


def test_a_model_whose_weights_are_damaged_is_refused_not_served(exported_run, tmp_path, capsys):
    """Bytes changed among the program's constants still deserialize and run, to other predictions: the export's
    signature.json records model.jax's sha256, which predict.py checks."""
    run_dir, cfg = exported_run
    shutil.copytree(run_dir / "export", tmp_path / "export")
    model = (tmp_path / "export" / "model.jax").read_bytes()
    program = load_exported(run_dir).mlir_module_serialized
    middle = model.index(program) + len(program) // 2
    (tmp_path / "export" / "model.jax").write_bytes(model[:middle] + b"\xff" * 64 + model[middle + 64:])
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    with pytest.raises(UserError, match=rf"^run_dir={tmp_path} has no readable export \(ValueError: model\.jax is not "
                                        rf"the file signature\.json describes: its sha256 differs\); run `python "
                                        rf"export\.py run_dir={tmp_path}` first\.$"):
        predict(predict_cfg(f"run_dir={tmp_path}", f"input={tmp_path / 'x.npy'}"))
    assert capsys.readouterr().out == ""


def test_predict_refuses_an_output_that_is_its_input_or_the_export(exported_run, tmp_path):
    """output= replaces the file it names: the input, or the export's own files, would be lost."""
    run_dir, cfg = exported_run
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    kept = {path: path.read_bytes() for path in (tmp_path / "x.npy", run_dir / "export" / "model.jax",
                                                 run_dir / "export" / "signature.json")}
    for output, what in ((tmp_path / "x.npy", "input"), (run_dir / "export" / "model.jax", "export's model.jax"),
                         (run_dir / "export" / "signature.json", "export's signature.json")):
        with pytest.raises(UserError, match=rf"^output={re.escape(str(output))} is the {what}, which the "
                                            r"predictions would replace; name another \.csv file"):
            predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}", f"output={output}"))
    assert all(path.read_bytes() == data for path, data in kept.items())


def test_predict_replaces_only_a_file_of_predictions_or_an_empty_one(exported_run, tmp_path):
    """Any other file output= names (a run's metrics.jsonl, its checkpoints' metadata, a document) would be lost
    for good: it was replaced without a word."""
    run_dir, cfg = exported_run
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    (tmp_path / "notes.csv").write_text("what,when\n")
    others = [run_dir / "metrics.jsonl", next(run_dir.glob("checkpoints/*/_CHECKPOINT_METADATA")),
              tmp_path / "notes.csv"]
    kept = {path: path.read_bytes() for path in others}
    for output in others:
        with pytest.raises(UserError, match=rf"^output={re.escape(str(output))} is a file that holds no predictions "
                                            r"\(its first line is not the 'class,probability_0,\.\.\.' or 'prediction' "
                                            r"header predict\.py writes\), which they would replace; name another"):
            predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}", f"output={output}"))
    assert all(path.read_bytes() == data for path, data in kept.items())
    (tmp_path / "empty.csv").write_text("")
    for output in (tmp_path / "p.csv", tmp_path / "p.csv", tmp_path / "empty.csv"):  # the same command run again
        predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}", f"output={output}"))
        assert output.read_text().startswith("class,probability_0,")


def test_predict_without_an_export_or_arguments(tmp_path):
    with pytest.raises(UserError, match=r"run_dir and input are required: python predict\.py run_dir="):
        predict(predict_cfg())
    with pytest.raises(UserError, match=r"has no readable export .*; run `python export\.py run_dir=.*` first\."):
        predict(predict_cfg(f"run_dir={tmp_path}", "input=x.npy"))
    with pytest.raises(UserError, match=r"run_dir=.*missing does not exist; pass the directory of an exported "
                                        r"training run\."):  # not "export it": there is nothing to export
        predict(predict_cfg(f"run_dir={tmp_path / 'missing'}", "input=x.npy"))
    (tmp_path / "export").mkdir()
    for signature, model in (({"model": "model.jax", "input": {"shape": [None, 8]}, "task": "regression"}, b"\0" * 9),
                             ([], b""), ({"model": "model.jax", "task": "regression"}, b"")):
        (tmp_path / "export" / "signature.json").write_text(json.dumps(signature))
        (tmp_path / "export" / "model.jax").write_bytes(model)  # damaged, or beside a damaged signature
        with pytest.raises(UserError, match=r"has no readable export \(.*\); run `python export\.py run_dir="):
            predict(predict_cfg(f"run_dir={tmp_path}", "input=x.npy"))
    with pytest.raises(UserError, match=r"output=.*/nodir/p\.csv cannot be written: .*/nodir is not a writable dir"):
        predict(predict_cfg(f"run_dir={tmp_path}", "input=x.npy", f"output={tmp_path / 'nodir' / 'p.csv'}"))
    with pytest.raises(UserError, match=r"output=.* is a directory; name a \.csv file to write, or leave output out"):
        predict(predict_cfg(f"run_dir={tmp_path}", "input=x.npy", f"output={tmp_path}"))
    with pytest.raises(UserError, match=r"ouput is not a setting; remove it or fix its spelling"):
        predict(predict_cfg(f"run_dir={tmp_path}", "input=x.npy", "+ouput=p.csv"))


def test_predict_names_the_run_to_pass_for_a_folder_above_or_inside_it(exported_run, tmp_path):
    """Not 'run export.py run_dir=<that folder>', which refuses it or exports nothing: the folder to pass."""
    run_dir, _ = exported_run
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 1), np.float32))
    x = f"input={tmp_path / 'x.npy'}"
    with pytest.raises(UserError, match=rf"^run_dir={run_dir / 'export'} is a run's export/ folder; pass the run's "
                                        rf"directory, run_dir={run_dir}\.$"):
        predict(predict_cfg(f"run_dir={run_dir / 'export'}", x))
    with pytest.raises(UserError, match=rf"^run_dir={run_dir / 'checkpoints'} is inside a run's checkpoints/; pass "
                                        rf"the run's directory, run_dir={run_dir}\.$"):
        predict(predict_cfg(f"run_dir={run_dir / 'checkpoints'}", x))
    (run_dir / "eval").mkdir(exist_ok=True)
    with pytest.raises(UserError, match=rf"^run_dir={run_dir / 'eval'} is a folder inside a run; pass the run's "
                                        rf"directory, run_dir={run_dir}\.$"):
        predict(predict_cfg(f"run_dir={run_dir / 'eval'}", x))
    sweep = tmp_path / "sweep"
    (sweep / "0" / ".hydra").mkdir(parents=True)
    (sweep / "0" / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    (sweep / "summary.md").write_text("")  # written at the sweep's end, which the refusal then names
    with pytest.raises(UserError, match=rf"^run_dir={sweep} is a multirun's directory; pass one of its jobs, e\.g\. "
                                        rf"run_dir={sweep / '0'} \(its summary\.md ranks them\)\.$"):
        predict(predict_cfg(f"run_dir={sweep}", x))


def test_export_checks_targets_first_and_keeps_the_previous_export_on_failure(make_cfg, exported_run, tmp_path,
                                                                                monkeypatch):
    run_dir = tmp_path / "run"
    shutil.copytree(exported_run[0], run_dir)
    before = (run_dir / "export" / "model.jax").read_bytes()
    with pytest.raises(TypeError):  # the second file fails to write
        write_directory(str(run_dir / "export"), {"model.jax": b"new", "signature.json": None})
    assert (run_dir / "export" / "model.jax").read_bytes() == before
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".export")]
    for meta in (run_dir / "checkpoints").rglob("meta/metadata"):
        saved = json.loads(meta.read_text())
        saved["config"]["model"]["_target_"] = "os.system"
        meta.write_text(json.dumps(saved))
    monkeypatch.setattr("zoo.train.build", lambda *a: pytest.fail("the run was built before the check"))
    with pytest.raises(UserError, match=r"_target_='os\.system', which is not allowed"):
        export(make_cfg(f"run_dir={run_dir}", config_name="export"))
    assert (run_dir / "export" / "model.jax").read_bytes() == before
    with pytest.raises(UserError, match=r"platforms=\['gpu'\] must be a non-empty list of cpu, cuda, rocm, tpu"):
        export(make_cfg(f"run_dir={run_dir}", "platforms=[gpu]", config_name="export"))
    with pytest.raises(UserError, match=r"platforms=\['cpu', 'cpu'\] must be .*, each named once"):
        export(make_cfg(f"run_dir={run_dir}", "platforms=[cpu,cpu]", config_name="export"))
    with pytest.raises(UserError, match=r"run_dir is required: python export\.py run_dir="):
        export(make_cfg(config_name="export"))
    with pytest.raises(UserError, match=r"checkpont is not a setting; remove it or fix its spelling"):
        export(make_cfg(f"run_dir={run_dir}", "+checkpont=best", config_name="export"))


@pytest.mark.parametrize("exported_before", [False, True], ids=["first", "again"])
def test_an_export_the_disk_has_no_room_for_is_one_sentence_and_changes_nothing(make_cfg, exported_run, tmp_path,
                                                                                  monkeypatch, exported_before):
    import zoo.export.artifact

    run_dir = tmp_path / "run"
    shutil.copytree(exported_run[0], run_dir, ignore=None if exported_before else shutil.ignore_patterns("export"))
    before = sorted(p.name for p in run_dir.iterdir())
    model = (run_dir / "export" / "model.jax").read_bytes() if exported_before else None

    def full(path, mode="r", *args, **kwargs):  # the disk fills as the files are written
        if "w" in mode and ".export-" in str(path):
            raise OSError(28, "No space left on device", str(path))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(zoo.export.artifact, "open", full, raising=False)
    with pytest.raises(UserError, match=rf"^the export cannot be written to {run_dir / 'export'} \(No space left on "
                                        rf"device\); nothing there was changed: free space on its file system, or copy "
                                        rf"the run somewhere with room and pass that run_dir\.$"):
        export(make_cfg(f"run_dir={run_dir}", config_name="export"))
    assert sorted(p.name for p in run_dir.iterdir()) == before  # no staging folder, no empty export/
    if exported_before:
        assert (run_dir / "export" / "model.jax").read_bytes() == model


def test_an_export_for_cpu_and_cuda_runs_here(make_cfg, exported_run, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    shutil.copytree(exported_run[0], run_dir)
    export(make_cfg(f"run_dir={run_dir}", "checkpoint=best", "platforms=[cpu,cuda]", config_name="export"))
    both, cpu_only = load_exported(run_dir), load_exported(exported_run[0])
    assert both.platforms == ("cpu", "cuda")
    x = raw_inputs(exported_run[1], 7)
    np.testing.assert_array_equal(both.call(x)["logits"], cpu_only.call(x)["logits"])
    # on an NVIDIA GPU JAX's backend is 'gpu' and an export's platform 'cuda': predict.py takes the export there
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax.export, "default_export_platform", lambda: "cuda")
    assert load_export(str(run_dir))[0].platforms == ("cpu", "cuda")
    with pytest.raises(UserError, match=r"runs on \['cpu'\], not on this cuda; export it again with platforms=\[cuda\]"):
        load_export(str(exported_run[0]))


def test_predict_writes_regression_predictions_at_full_precision(make_cfg, tmp_path, capsys):
    cfg = make_cfg("debug=smoke", "model=linear", "dataset=diabetes")
    train(cfg)
    export(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="export"))
    x = read_splits(cfg.dataset, cfg.paths.data_dir)["test"][0][:5]
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()  # what training and export printed
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        predict(compose("predict", overrides=[f"run_dir={tmp_path / 'run'}", f"input={tmp_path / 'x.npy'}",
                                              "batch_size=5"]))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "prediction"
    with open(tmp_path / "run" / "export" / "model.jax", "rb") as f:
        exported = jax.export.deserialize(bytearray(f.read()))
    np.testing.assert_allclose([float(v) for v in lines[1:]], np.asarray(exported.call(x)["predictions"])[:, 0],
                               rtol=1e-6)


@pytest.mark.parametrize("normalize_target", ["true", "false"])
def test_a_regression_exports_metrics_say_their_units(make_cfg, tmp_path, normalize_target):
    """The signature's test mae, in the units it names, is the mae of the exported model's predictions."""
    cfg = make_cfg("debug=smoke", "model=linear", "dataset=diabetes", f"dataset.normalize_target={normalize_target}")
    train(cfg)
    export(make_cfg(f"run_dir={tmp_path / 'run'}", config_name="export"))
    signature = json.loads((tmp_path / "run" / "export" / "signature.json").read_text())["checkpoint"]
    x, y = read_splits(cfg.dataset, cfg.paths.data_dir)["test"]
    mae = float(np.mean(np.abs(np.asarray(load_exported(tmp_path / "run").call(x)["predictions"]) - y)))
    scale = signature.get("target_std", [1.0])[0]
    assert signature["test_units"].startswith("loss, mse and mae on targets standardised" if normalize_target == "true"
                                              else "the dataset's")
    np.testing.assert_allclose(signature["test"]["mae"] * scale, mae, rtol=1e-4)


def test_a_swap_that_fails_after_moving_the_previous_export_aside_puts_it_back(tmp_path, monkeypatch):
    final = tmp_path / "export"
    write_directory(str(final), {"model.jax": b"old"})
    rename = os.rename

    def failing_rename(src, dst):
        if os.path.basename(str(src)).startswith(".export-") and not str(src).endswith(".previous"):
            raise OSError(28, "No space left on device")
        return rename(src, dst)

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(OSError):
        write_directory(str(final), {"model.jax": b"new"})
    monkeypatch.undo()
    assert (final / "model.jax").read_bytes() == b"old"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".export")]


@pytest.mark.parametrize("meanwhile", ["put-its-own", "moved-it-aside"])
def test_two_exports_of_a_run_at_once_both_complete_the_later_in_place(tmp_path, monkeypatch, meanwhile):
    """Another export of the run swapping its own export/ in between this one's two renames: this one failed, as
    'cannot be written (Directory not empty)' or '(No such file or directory)' with advice to free space, and left
    the export it had moved aside beside export/. Each now completes, the one that swaps last in place."""
    final = tmp_path / "export"
    write_directory(str(final), {"model.jax": b"old"})
    rename, once = os.rename, []

    def another_export_meanwhile(src, dst):
        if str(src) == str(final) and str(dst).endswith(".previous") and not once:
            once.append(dst)
            if meanwhile == "moved-it-aside":  # between this one's check that export/ exists and its move
                shutil.rmtree(final)
            else:
                rename(src, dst)
                (final).mkdir()
                (final / "model.jax").write_bytes(b"other")
                return None
        return rename(src, dst)

    monkeypatch.setattr(os, "rename", another_export_meanwhile)
    write_directory(str(final), {"model.jax": b"new"})
    monkeypatch.undo()
    assert (final / "model.jax").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_an_export_that_was_a_link_is_replaced_without_leaving_the_link_behind(tmp_path):
    """export/ linked to a folder elsewhere: the link is replaced like a folder, the folder it named left as it was."""
    elsewhere = tmp_path / "serving"
    elsewhere.mkdir()
    (elsewhere / "model.jax").write_bytes(b"old")
    run = tmp_path / "run"
    run.mkdir()
    (run / "export").symlink_to(elsewhere)
    write_directory(str(run / "export"), {"model.jax": b"new"})
    assert sorted(p.name for p in run.iterdir()) == ["export"] and not (run / "export").is_symlink()
    assert (run / "export" / "model.jax").read_bytes() == b"new" and (elsewhere / "model.jax").read_bytes() == b"old"


def test_a_narrow_first_example_that_counts_up_is_data_not_a_header(tmp_path):
    """0,1 may well be an example of two features; only a wide run of column numbers reads as pandas' header."""
    path = tmp_path / "narrow.csv"
    path.write_text("0,1\n2,3\n")
    _refuse_a_header_line(str(path), (2,))  # nothing refused
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(map(str, range(8))) + "\n" + ",".join(["1"] * 8) + "\n")
    with pytest.raises(UserError, match="column numbers"):
        _refuse_a_header_line(str(wide), (8,))


def test_a_copied_export_folder_is_not_taken_for_a_run(make_cfg, exported_run, tmp_path):
    """A copy of export/ under another name: not 'run export.py on it', nor 'train it with checkpoints'."""
    run_dir, _ = exported_run
    served = tmp_path / "served"
    shutil.copytree(run_dir / "export", served)
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 1), np.float32))
    with pytest.raises(UserError, match=rf"^run_dir={served} is an export's folder \(model\.jax, signature\.json\), "
                                        rf"not a run; predict\.py reads a run's export/: pass a folder that holds it "
                                        rf"as export/, or the run it was exported from, run_dir={run_dir}\.$"):
        predict(predict_cfg(f"run_dir={served}", f"input={tmp_path / 'x.npy'}"))
    for script, config in (("export.py", "export"), ("eval.py", "eval")):
        with pytest.raises(UserError, match=rf"^run_dir={served} is an export's folder \(model\.jax, "
                                            rf"signature\.json\), not a training run; pass the run it was exported "
                                            rf"from, run_dir={run_dir}\.$"):
            (export if script == "export.py" else evaluate)(make_cfg(f"run_dir={served}", config_name=config))
    assert sorted(p.name for p in served.iterdir()) == ["model.jax", "signature.json"]


def test_the_export_of_a_copied_run_names_the_copy_as_its_run(make_cfg, exported_run, tmp_path):
    """A run copied elsewhere (e.g. to a disk with room) and exported there: its signature names the copy, the run
    it was read from, which a copy of that export/ then points to; it named the original, which may be gone."""
    run_dir, _ = exported_run
    moved = tmp_path / "moved"
    shutil.copytree(run_dir, moved, ignore=shutil.ignore_patterns("export"))
    export(make_cfg(f"run_dir={moved}", config_name="export"))
    signature = json.loads((moved / "export" / "signature.json").read_text())
    assert signature["config"]["paths"]["output_dir"] == str(moved)
    original = json.loads((run_dir / "export" / "signature.json").read_text())
    assert original["config"]["paths"]["output_dir"] == str(run_dir)  # the copy's export changed nothing there
    served = tmp_path / "served"
    shutil.copytree(moved / "export", served)
    with pytest.raises(UserError, match=rf"pass the run it was exported from, run_dir={moved}\.$"):
        evaluate(make_cfg(f"run_dir={served}", config_name="eval"))


def test_predict_given_a_folder_of_runs_or_an_eval_commands_directory_names_a_run(tmp_path):
    """outputs/, outputs/<date>/, multirun/ and outputs/eval/<date>/<time> were told `run python export.py
    run_dir=<that folder> first`, which export.py refuses: the exported runs to choose from, each named, not one
    chosen by modification time, which a copy or a touch of an older run makes the newest."""
    import os

    outputs = tmp_path / "outputs"
    for i, (name, exported) in enumerate((("09-00-00", True), ("10-00-00", False), ("11-00-00", True))):
        run = outputs / "2026-12-05" / name
        (run / "checkpoints").mkdir(parents=True)
        if exported:
            (run / "export").mkdir()
            (run / "export" / "signature.json").write_text("{}")
        os.utime(run, (1000 - i, 1000 - i))  # the oldest touched last
    (outputs / "export" / "2026-12-05" / "11-00-00-000002" / ".hydra").mkdir(parents=True)  # export.py's own
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 1), np.float32))
    x = f"input={tmp_path / 'x.npy'}"
    day = outputs / "2026-12-05"
    for folder in (outputs, day):
        with pytest.raises(UserError, match=rf"^run_dir={folder} is not a run but holds 2 exported runs below it; pass "
                                            rf"one of them: run_dir={day / '09-00-00'} or "
                                            rf"run_dir={day / '11-00-00'}\.$"):
            predict(predict_cfg(f"run_dir={folder}", x))
    shutil.rmtree(day / "11-00-00" / "export")
    with pytest.raises(UserError, match=rf"^run_dir={day} is not a run but holds an exported run below it; pass it: "
                                        rf"run_dir={day / '09-00-00'}\.$"):
        predict(predict_cfg(f"run_dir={day}", x))
    shutil.rmtree(day / "09-00-00" / "export")
    with pytest.raises(UserError, match=rf"^run_dir={day} is not a run but holds 3 runs below it, none exported; "
                                        rf"export one with python export.py and pass it: run_dir={day / '09-00-00'}, "
                                        rf"run_dir={day / '10-00-00'} or run_dir={day / '11-00-00'}\.$"):
        predict(predict_cfg(f"run_dir={day}", x))
    exported = day / "09-00-00"
    own = outputs / "eval" / "2026-12-05" / "11-00-00-000001"
    (own / ".hydra").mkdir(parents=True)
    (own / ".hydra" / "config.yaml").write_text(f"run_dir: {exported}\ncheckpoint: final\n")
    (own / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    name: eval\n")
    with pytest.raises(UserError, match=rf"^run_dir={own} is the directory of an eval\.py command \(its \.hydra/ and "
                                        rf"eval\.log\), not a training run; pass the run it read, run_dir={exported}\.$"):
        predict(predict_cfg(f"run_dir={own}", x))


def test_the_runs_of_a_folder_are_named_in_order_a_sweeps_jobs_by_number():
    from zoo.run_dirs import run_choices as _choices

    sweep = "multirun/2026-12-05/10-00-00"
    assert _choices([f"{sweep}/{job}" for job in (10, 2, 0, 1, 9, 3, 11)]) == \
        ", ".join(f"run_dir={sweep}/{job}" for job in (2, 3, 9, 10, 11)) + " or one of the 2 before them"


SIGNAL_AT = """
import importlib, os, runpy, signal, sys
target, signum, sys.argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
module_name, name = target.split(":")
module = importlib.import_module(module_name)
while "." in name:  # module:os.rename, os's own function as the module calls it
    attribute, name = name.split(".", 1)
    module = getattr(module, attribute)
real, calls = getattr(module, name), []

def signalled(*args, **kwargs):
    if not calls:  # the first call only
        calls.append(os.kill(os.getpid(), signum))
    return real(*args, **kwargs)

setattr(module, name, signalled)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def signalled_at(target: str, signum: int, script: str, args: list, data_dir: str):
    """`python script args` sent `signum` as it first calls `target` (module:function)."""
    return commands.run([sys.executable, "-c", SIGNAL_AT, target, str(int(signum)), script, *args], cwd=ROOT,
                        env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("script, target, nothing, signum", [
    ("eval.py", "zoo.evaluate:eval_loop", "no eval results were written", signal.SIGTERM),
    ("export.py", "zoo.export.artifact:signature_of", "no export was written (export/ is as it was)", signal.SIGTERM),
    ("predict.py", "zoo.export.predict:run_exported", "no predictions were written", signal.SIGTERM),
    ("export.py", "zoo.export.artifact:signature_of", "no export was written (export/ is as it was)", signal.SIGINT),
], ids=["eval-SIGTERM", "export-SIGTERM", "predict-SIGTERM", "export-SIGINT"])
def test_a_reading_command_stopped_by_a_signal_says_what_it_did_not_write(exported_run, tmp_path, data_dir, script,
                                                                         target, nothing, signum):
    """SIGTERM ended eval.py, export.py and predict.py without a word (exit 143); Ctrl-C's line did not say what
    was left unwritten."""
    run_dir, cfg = exported_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("eval", "export"))
    if script == "predict.py":
        shutil.copytree(run_dir / "export", run / "export")
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    args = {"eval.py": [], "export.py": [],
            "predict.py": [f"input={tmp_path / 'x.npy'}", f"output={tmp_path / 'p.csv'}"]}[script]
    done = signalled_at(target, signum, script, [f"run_dir={run}", *args, f"hydra.run.dir={tmp_path / 'cmd'}"],
                        data_dir)
    stopped = "stopped by SIGTERM" if signum == signal.SIGTERM else "interrupted by Ctrl-C"
    assert done.returncode == 128 + signum, done.stderr
    assert done.stderr.endswith(f"error: {stopped}; {nothing} — run the same command again.\n"), done.stderr
    assert done.stderr.count("error:") == 1 and "Traceback" not in done.stderr
    assert not list(run.glob("eval/*")) and not (tmp_path / "p.csv").exists() and not list(run.glob(".export*"))
    assert (run / "export").exists() == (script == "predict.py")


def test_a_signal_once_the_export_is_written_ends_the_command_as_complete(exported_run, tmp_path, data_dir):
    """The export in place, a stop signal (while the command prints its line) is not 'no export was written'."""
    run_dir, _ = exported_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("eval", "export"))
    done = signalled_at("zoo.export.artifact:metric_summary", signal.SIGTERM, "export.py",
                        [f"run_dir={run}", f"hydra.run.dir={tmp_path / 'cmd'}"], data_dir)
    assert done.returncode == 0 and "error:" not in done.stderr, done.stderr
    assert sorted(p.name for p in (run / "export").iterdir()) == ["model.jax", "signature.json"]
    again = signalled_at("zoo.export.artifact:os.rename", signal.SIGTERM, "export.py",  # while export/ is replaced
                         [f"run_dir={run}", f"hydra.run.dir={tmp_path / 'again'}"], data_dir)
    assert again.returncode == 0 and "error:" not in again.stderr, again.stderr
    assert sorted(p.name for p in run.iterdir() if "export" in p.name) == ["export"]  # not the previous one beside it


def test_a_ctrl_c_python_lost_stops_predict_before_it_writes(exported_run, tmp_path):
    """A KeyboardInterrupt raised inside a garbage-collection callback, which Python only prints: predict.py went on
    and wrote its predictions, ending with 0 as if nothing had stopped it."""
    from zoo import preemption

    run_dir, cfg = exported_run
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    with preemption.interrupts_remembered():
        with pytest.raises(KeyboardInterrupt):  # what Python dropped
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        with pytest.raises(KeyboardInterrupt):
            predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}", f"output={tmp_path / 'p.csv'}"))
    assert not (tmp_path / "p.csv").exists()


def test_an_export_killed_while_writing_leaves_nothing_the_next_export_keeps(exported_run, tmp_path, data_dir,
                                                                              make_cfg):
    """kill -9 between writing the new export and putting it in place left its staging directory beside export/
    for good; the next export of the run removes it."""
    run_dir, _ = exported_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("eval"))
    killed = signalled_at("zoo.export.artifact:os.rename", signal.SIGKILL, "export.py",
                          [f"run_dir={run}", f"hydra.run.dir={tmp_path / 'cmd'}"], data_dir)
    assert killed.returncode == -signal.SIGKILL
    assert len(list(run.glob(".export-*"))) == 1
    export(make_cfg(f"run_dir={run}", config_name="export"))
    assert sorted(p.name for p in run.iterdir() if "export" in p.name) == ["export"]


def test_only_the_staging_directories_of_exports_no_longer_running_here_are_removed(tmp_path):
    """Beside export/: a killed export's staging directory and the previous export it had moved aside (put back
    where export/ is missing); a running export's, another machine's and any other name stay."""
    import socket

    gone = commands.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, host = int(gone.stdout), socket.gethostname()
    run = tmp_path / "run"
    kept = [f".export-{host}-{os.getppid()}-abcd1234", f".export-elsewhere-{dead}-abcd1234", ".export-mine",
            ".export-abcd1234", f".export-{host}-{dead}-notmine"]
    for name in kept + [f".export-{host}-{dead}-a_cd1234", f".export-{host}-{dead}-efgh5678.previous"]:
        (run / name).mkdir(parents=True)
        (run / name / "model.jax").write_bytes(name.encode())
    with pytest.raises(TypeError):  # this export fails: the previous one it finds moved aside is put back
        write_directory(str(run / "export"), {"model.jax": None})
    assert (run / "export" / "model.jax").read_bytes() == f".export-{host}-{dead}-efgh5678.previous".encode()
    assert sorted(p.name for p in run.iterdir()) == sorted(kept + ["export"])
    write_directory(str(run / "export"), {"model.jax": b"new"})
    assert sorted(p.name for p in run.iterdir()) == sorted(kept + ["export"])


@pytest.mark.parametrize("script", ["eval.py", "export.py"])
def test_eval_and_export_take_a_pinned_version_of_the_runs_dataset(exported_run, tmp_path, data_dir, script):
    """dataset.tfds_name=NAME:VERSION, which a catalog copy of another version is read with (the data's own
    refusal says to set it), was refused as a setting eval.py and export.py do not have."""
    run_dir, _ = exported_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("eval", "export"))

    def command(*args):  # each command's own log dir under tmp_path, not the checkout's outputs/
        own = tmp_path / f"command-{len(list(tmp_path.glob('command-*')))}"
        return commands.run([sys.executable, script, f"run_dir={run}", *args, f"hydra.run.dir={own}"], cwd=ROOT,
                            capture_output=True, text=True, env=subprocess_env(data_dir), timeout=120)

    pinned = command("dataset.tfds_name=zoo_digits:1.0.0")  # taken, and read as train.py reads it
    assert pinned.returncode == 2 and pinned.stderr.endswith(
        "error: dataset.tfds_name=zoo_digits:1.0.0 names a version or config of the embedded dataset zoo_digits, which "
        "has none to choose (its dataset.* settings make it); set dataset.tfds_name=zoo_digits.\n"), pinned.stderr
    other = command("dataset.tfds_name=mnist:3.0.0")
    assert other.returncode == 2 and other.stderr.endswith(
        "error: dataset.tfds_name=mnist:3.0.0 is not a version of the run's dataset (dataset.tfds_name=zoo_digits), "
        "which the run is read with; pin one of its versions, dataset.tfds_name=zoo_digits:VERSION, or leave "
        "dataset.tfds_name out.\n"), other.stderr
    plain = command("dataset.tfds_name=zoo_digits")
    assert plain.returncode == 0, plain.stderr
    other_setting = command("dataset.num_classes=3")
    assert other_setting.returncode == 2 and "dataset.num_classes=3 is not a setting of" in other_setting.stderr


def test_a_signal_between_the_jobs_of_an_eval_sweep_ends_the_sweep_in_one_line(exported_run, tmp_path, data_dir):
    """`eval.py -m checkpoint=2,4`: a SIGTERM once a job wrote its result ends the sweep before the next job, saying
    so, and is not taken for the end of a complete command."""
    run_dir, _ = exported_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("eval", "export"))
    done = signalled_at("zoo.evaluate:metric_summary", signal.SIGTERM, "eval.py",
                        ["-m", f"run_dir={run}", "checkpoint=2,4", f"hydra.sweep.dir={tmp_path / 'sweep'}"], data_dir)
    assert done.returncode == 143, done.stderr
    assert done.stderr.endswith("error: stopped by SIGTERM; the jobs that completed wrote their results — rerun the "
                                f"same multirun command (hydra.sweep.dir={tmp_path / 'sweep'}) to run it again.\n")
    assert sorted(p.name for p in (run / "eval").iterdir()) == ["test-2.json"]


@pytest.mark.parametrize("output, says", [
    ("", "output= is empty; name a .csv file to write, or leave output out to print to stdout."),
    ("{tmp}/new/", "output={tmp}/new/ names a directory (it ends with /); name a .csv file to write, or leave output "
                   "out to print to stdout."),
    ("{tmp}/p.npy", "output={tmp}/p.npy names a .npy file, but predict.py writes CSV text, which np.load would "
                    "refuse; name a .csv file to write, or leave output out to print to stdout."),
    ("{tmp}/p.JSON", "output={tmp}/p.JSON names a .json file, but predict.py writes CSV text, which a .json reader "
                     "would refuse; name a .csv file to write, or leave output out to print to stdout."),
], ids=["empty", "a-folder-to-be", "npy", "json"])
def test_predict_refuses_an_output_that_names_no_file_before_predicting(exported_run, tmp_path, output, says,
                                                                        monkeypatch):
    """The first two were refused only once every prediction was computed, as 'No such file or directory'; a .npy
    or .json output was written as CSV under that name, which np.load then took for pickled data."""
    import zoo.export.predict as predicting

    run_dir, cfg = exported_run
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    monkeypatch.setattr(predicting, "run_exported", lambda *args: pytest.fail("predicted before the refusal"))
    with pytest.raises(UserError) as refused:
        predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'x.npy'}",
                            f"output={output.format(tmp=tmp_path)}"))
    assert str(refused.value) == says.format(tmp=tmp_path)
    assert not (tmp_path / "new").exists() and not (tmp_path / "p.npy").exists() and not (tmp_path / "p.JSON").exists()


def test_a_csv_with_pandas_index_column_is_named_so(exported_run, tmp_path, capsys):
    """pandas' to_csv writes its index as a first column, unnamed in the header line: the header's refusal said to
    pass header=False alone, after which the file was refused as of shape (5, 65)."""
    run_dir, cfg = exported_run
    x = raw_inputs(cfg, 5).reshape(5, -1)
    rows = [",".join([str(i)] + [f"{v:g}" for v in row]) for i, row in enumerate(x)]  # df.to_csv(path, header=False)
    (tmp_path / "indexed.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "default.csv").write_text(",".join([""] + [str(j) for j in range(64)]) + "\n" + "\n".join(rows) + "\n")
    for name in ("indexed.csv", "default.csv"):
        with pytest.raises(UserError, match=r"pandas: to_csv\(\.\.\., header=False, index=False\)"):
            predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / name}"))
    with pytest.raises(UserError, match=r"indexed\.csv begins each line with its line number \(0, 1, 2, \.\.\.: "
                                        r"the index pandas' to_csv writes\), one number more than an example; remove "
                                        r"that column \(pandas: to_csv\(\.\.\., header=False, index=False\)\)\.$"):
        predict(predict_cfg(f"run_dir={run_dir}", f"input={tmp_path / 'indexed.csv'}"))
    assert capsys.readouterr().out == ""


def test_a_second_stop_signal_stops_a_write_that_does_not_end(monkeypatch):
    """The first waits for the write (it would be 'no predictions were written' while half of them are); a write
    that hangs (stdout to a pipe nobody reads) is still stopped by the second."""
    import zoo.startup
    from zoo.cli import written_whole

    monkeypatch.setattr(zoo.startup, "_sigterm_as_ctrl_c", True)  # as in eval.py, export.py, predict.py
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    waited = False
    with pytest.raises(KeyboardInterrupt):
        with written_whole():
            signal.raise_signal(signal.SIGINT)
            waited = True
            signal.raise_signal(signal.SIGINT)
    assert waited and {s: signal.getsignal(s) for s in before} == before


def test_exporting_again_refuses_to_delete_a_file_the_user_put_in_export(exported_run, tmp_path, make_cfg):
    """predict.py's output=<run>/export/predictions.csv (or any file put there) went with the previous export/,
    which exporting again deletes; it is refused in one sentence naming the file, the export left as it was."""
    run_dir, _ = exported_run
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("eval"))
    (run / "export" / "predictions.csv").write_text("class\n9\n")
    model = (run / "export" / "model.jax").read_bytes()
    with pytest.raises(UserError, match=rf"^{re.escape(str(run / 'export'))} holds predictions\.csv, which export\.py "
                                        r"did not write and would delete with the export it replaces; move it out of "
                                        r"export/ and run the command again\.$"):
        export(make_cfg(f"run_dir={run}", config_name="export"))
    assert (run / "export" / "predictions.csv").read_text() == "class\n9\n"
    assert (run / "export" / "model.jax").read_bytes() == model
    assert sorted(p.name for p in run.iterdir() if "export" in p.name) == ["export"]


def test_predict_reads_and_writes_relative_paths_where_it_was_run_with_hydra_job_chdir(exported_run, tmp_path,
                                                                                      data_dir):
    """hydra.job.chdir=true moves the task into hydra.run.dir; eval.py and export.py still read a relative run_dir
    from where the command was run, but predict.py read run_dir and input from there ('does not exist')."""
    run_dir, cfg = exported_run
    shutil.copytree(run_dir / "export", tmp_path / "run" / "export")
    np.save(tmp_path / "x.npy", raw_inputs(cfg, 3))
    done = commands.run([sys.executable, str(ROOT / "predict.py"), "run_dir=run", "input=x.npy", "output=p.csv",
                           "hydra.run.dir=new", "hydra.job.chdir=true"], cwd=tmp_path, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 4 and not (tmp_path / "new" / "p.csv").exists()


def test_paths_hydras_grammar_reads_only_quoted_are_read_as_typed(exported_run, tmp_path, data_dir):
    """zsh leaves `run_dir=~/r` as typed, and browsers save a second download as `digits (1).csv`: Hydra's grammar
    refused both unquoted ('LexerNoViableAltException', "mismatched input '.' expecting <EOF>"), exit 1."""
    run_dir, cfg = exported_run
    shutil.copytree(run_dir, tmp_path / "run (1)", ignore=shutil.ignore_patterns("eval", "export"))
    np.save(tmp_path / "données.npy", raw_inputs(cfg, 3))
    home = dict(subprocess_env(data_dir), HOME=str(tmp_path))
    for script, args in [("export.py", ["run_dir=~/run (1)", f"hydra.run.dir={tmp_path / 'x'}"]),
                         ("predict.py", ["run_dir=~/run (1)", "input=~/données.npy", "output=~/p (1).csv"])]:
        done = commands.run([sys.executable, script, *args], cwd=ROOT, env=home, capture_output=True, text=True,
                            timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    assert len((tmp_path / "p (1).csv").read_text().splitlines()) == 4
    assert not (ROOT / "~").exists()


def test_predict_writes_through_an_output_that_is_a_link_or_a_pipe(exported_run, tmp_path, capsys):
    """output=/dev/stdout (a link to a pipe or terminal), a named pipe or a link to a file: the predictions go where
    they lead, as the shell's > sends them. The file written beside them was renamed over the link or the pipe
    itself, which a reader never saw (as root it replaced /dev/stdout, and output=/dev/null /dev/null, with a file)."""
    import stat

    np.save(tmp_path / "x.npy", raw_inputs(exported_run[1], 3))
    run = [f"run_dir={exported_run[0]}", f"input={tmp_path / 'x.npy'}"]
    predict(predict_cfg(*run))
    printed = capsys.readouterr().out
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "p.csv").write_text("earlier predictions\n")
    (tmp_path / "latest.csv").symlink_to(tmp_path / "kept" / "p.csv")
    predict(predict_cfg(*run, f"output={tmp_path / 'latest.csv'}"))
    assert (tmp_path / "latest.csv").is_symlink() and (tmp_path / "kept" / "p.csv").read_text() == printed
    os.mkfifo(tmp_path / "pipe")
    reader = commands.Popen(["cat", str(tmp_path / "pipe")], stdout=subprocess.PIPE, text=True)
    try:
        predict(predict_cfg(*run, f"output={tmp_path / 'pipe'}"))
        received, _ = reader.communicate(timeout=30)
    finally:
        reader.kill()
        reader.wait()
    assert received == printed and stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "latest.csv", "pipe", "x.npy"]


def test_predict_refuses_a_multirun_in_one_sentence(exported_run, tmp_path, data_dir):
    """`-m input=a.npy,b.npy output=p.csv` wrote each job's predictions over the last job's (p.csv held b's alone)
    and left multirun/<date>/<time>/ where predict.py leaves no directory."""
    np.save(tmp_path / "a.npy", raw_inputs(exported_run[1], 2))
    np.save(tmp_path / "b.npy", raw_inputs(exported_run[1], 3))
    done = commands.run([sys.executable, str(ROOT / "predict.py"), "-m", f"run_dir={exported_run[0]}",
                           "input=a.npy,b.npy", "output=p.csv"], cwd=tmp_path, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == (
        "error: predict.py predicts one input with one run's export, and takes no -m (--multirun), under which each "
        "job's predictions would replace the last job's; run it once per input or run_dir, each with its own "
        "output.\n"), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "b.npy"]


def test_predict_warns_that_the_run_trained_on_after_its_export(make_cfg, tmp_path, capsys):
    """The same training command with more steps resumes the run: eval.py then reports its new final weights, while
    predict.py served the export of the earlier ones without a word."""
    run = tmp_path / "run"
    train(make_cfg("debug=smoke", "model.hidden=[8]"))
    export(make_cfg(f"run_dir={run}", config_name="export"))
    np.save(tmp_path / "x.npy", np.zeros((2, 8, 8, 1), np.float32))
    capsys.readouterr()
    predict(predict_cfg(f"run_dir={run}", f"input={tmp_path / 'x.npy'}"))
    before = capsys.readouterr()
    assert "warning" not in before.err
    train(make_cfg("debug=smoke", "model.hidden=[8]", "trainer.max_steps=8"))
    capsys.readouterr()
    predict(predict_cfg(f"run_dir={run}", f"input={tmp_path / 'x.npy'}"))
    after = capsys.readouterr()
    assert after.out == before.out  # still the export's step 6
    assert after.err == (f"warning: {run}/export holds step 6, exported before the run trained on to step 8; "
                         f"python export.py run_dir={run} exports the run's final weights.\n")


def test_predict_warns_when_an_export_of_an_unfinished_run_is_outlived_by_its_end(make_cfg, tmp_path, capsys,
                                                                                   monkeypatch):
    """An export of a run stopped before its end (no results.json yet) recorded run_steps null: once the same
    training command had finished the run, predict.py served the stopped run's weights without a word."""
    import contextlib

    import zoo.train
    from conftest import SignalAtRead
    from zoo.preemption import Preempted

    run = tmp_path / "run"
    overrides = ("debug=smoke", "model.hidden=[8]", "trainer.max_steps=8", "trainer.log_every=1",
                 "trainer.eval_every=0", "trainer.checkpoint_every=1")
    with monkeypatch.context() as patch:  # stopped after its first call: checkpoint step 1 of 8
        patch.setattr(zoo.train, "stop_on_signals", lambda: contextlib.nullcontext(SignalAtRead(2)))
        with pytest.raises(Preempted):
            train(make_cfg(*overrides))
    assert not (run / "results.json").exists()
    export(make_cfg(f"run_dir={run}", config_name="export"))
    step = json.loads((run / "export" / "signature.json").read_text())["checkpoint"]["step"]
    assert step < 8
    train(make_cfg(*overrides))  # the same command finishes it
    np.save(tmp_path / "x.npy", np.zeros((2, 8, 8, 1), np.float32))
    capsys.readouterr()
    predict(predict_cfg(f"run_dir={run}", f"input={tmp_path / 'x.npy'}"))
    assert capsys.readouterr().err == (
        f"warning: {run}/export holds step {step}, exported before the run trained on to step 8; "
        f"python export.py run_dir={run} exports the run's final weights.\n")
    # stopped after its last checkpoint, before results.json: an older step exported, and the run finished by the
    # same command without a further step, has not trained on since
    (run / "results.json").unlink()
    export(make_cfg(f"run_dir={run}", "checkpoint=6", config_name="export"))
    train(make_cfg(*overrides))
    assert json.loads((run / "results.json").read_text())["steps"] == 8
    capsys.readouterr()
    predict(predict_cfg(f"run_dir={run}", f"input={tmp_path / 'x.npy'}"))
    assert capsys.readouterr().err == ""


def test_export_of_an_unfinished_run_says_it_is_not_the_runs_final_state(make_cfg, tmp_path, monkeypatch, caplog):
    """export.py takes eval.py's checkpoint=final, 'what results.json reports'; of a run stopped before its end, eval.py
    said the step was not the run's final state, while export.py exported it without a word."""
    import contextlib

    import zoo.train
    from conftest import SignalAtRead
    from zoo.preemption import Preempted

    run = tmp_path / "run"
    with monkeypatch.context() as patch:  # stopped after its first call: checkpoint step 1 of 8
        patch.setattr(zoo.train, "stop_on_signals", lambda: contextlib.nullcontext(SignalAtRead(2)))
        with pytest.raises(Preempted):
            train(make_cfg("debug=smoke", "model.hidden=[8]", "trainer.max_steps=8", "trainer.log_every=1",
                           "trainer.eval_every=0", "trainer.checkpoint_every=1"))
    with caplog.at_level("WARNING", logger="zoo"):
        step = export(make_cfg(f"run_dir={run}", config_name="export"))["step"]
    assert (f"run_dir={run} has not finished (no results.json): checkpoint=final exports its newest checkpoint, step "
            f"{step} of the 8 it trains, not its final state; train it to its end, or name checkpoint=latest, best or "
            "a step to export that one.") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="zoo"):
        export(make_cfg(f"run_dir={run}", "checkpoint=latest", config_name="export"))  # one named on purpose
    assert "has not finished" not in caplog.text


@pytest.mark.parametrize("setting", ["checkpoint=latest", "+checkpoint=latest", "platforms=[cpu]"])
def test_predict_refuses_a_setting_of_export_in_one_sentence(exported_run, tmp_path, data_dir, setting):
    """predict.py serves the checkpoint export.py exported: `checkpoint=latest`, which eval.py and export.py take,
    ended in Hydra's 'Could not override' and its hint to append it, exit 1, and the appended form in 'checkpoint is
    not a setting; remove it or fix its spelling', as if it were misspelt."""
    np.save(tmp_path / "x.npy", raw_inputs(exported_run[1], 2))
    done = commands.run([sys.executable, str(ROOT / "predict.py"), f"run_dir={exported_run[0]}", "input=x.npy",
                           setting], cwd=tmp_path, env=subprocess_env(data_dir), capture_output=True, text=True,
                        timeout=120)
    plain = setting.lstrip("+")
    assert done.returncode == 2 and done.stderr == (
        f"error: {plain} is not a setting of predict.py, which predicts with the run's export/ as export.py wrote it; "
        f"export that one first: python export.py run_dir={exported_run[0]} {plain}.\n"), done.stderr
    assert done.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
def test_predict_to_a_stdout_that_cannot_take_it_is_one_sentence(exported_run, tmp_path, data_dir):
    """`python predict.py ... > p.csv` on a full disk (or stdout a closed pipe) ended in the traceback of
    OSError: [Errno 28] No space left on device, exit 1, where output=p.csv on that disk is one sentence."""
    np.save(tmp_path / "x.npy", raw_inputs(exported_run[1], 2))
    with open("/dev/full", "w") as full:
        done = commands.run([sys.executable, str(ROOT / "predict.py"), f"run_dir={exported_run[0]}", "input=x.npy"],
                            cwd=tmp_path, env=subprocess_env(data_dir), stdout=full, stderr=subprocess.PIPE,
                            text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == (
        "error: the predictions could not all be written to stdout (No space left on device), so what it received is "
        "incomplete; pass output=FILE.csv to write them to a file, written whole or not at all.\n"), done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
def test_eval_to_a_stdout_that_cannot_take_it_is_one_sentence(exported_run, tmp_path, data_dir):
    """`python eval.py run_dir=R > m.txt` on a full disk ended in the traceback of OSError: [Errno 28], exit 1, which
    did not say that the results were written to the run's eval/ all the same."""
    run_dir = exported_run[0]
    with open("/dev/full", "w") as full:
        done = commands.run([sys.executable, str(ROOT / "eval.py"), f"run_dir={run_dir}",
                               f"hydra.run.dir={tmp_path / 'eval'}"], cwd=tmp_path, env=subprocess_env(data_dir),
                            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    written = sorted((run_dir / "eval").glob("test-*.json"))
    assert done.returncode == 2 and done.stderr.endswith(
        f"error: the metrics could not be printed to stdout (No space left on device); they are written to "
        f"{written[-1]}.\n"), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
def test_export_to_a_stdout_that_cannot_take_its_line_is_one_sentence(make_cfg, tmp_path, data_dir):
    """`python export.py run_dir=R > log.txt` on a full disk ended in the traceback of OSError: [Errno 28], exit 1,
    once the export was in place, which it did not say."""
    train(make_cfg("debug=smoke", "model.hidden=[8]"))
    run = tmp_path / "run"
    with open("/dev/full", "w") as full:
        done = commands.run([sys.executable, str(ROOT / "export.py"), f"run_dir={run}",
                               f"hydra.run.dir={tmp_path / 'export-log'}"], cwd=tmp_path, env=subprocess_env(data_dir),
                            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.endswith(
        f"error: export.py's line could not be printed to stdout (No space left on device); the export of step 6 is "
        f"written to {run / 'export'}.\n"), done.stderr
    assert "Traceback" not in done.stderr and sorted(p.name for p in (run / "export").iterdir()) == list(
        ("model.jax", "signature.json"))


def test_a_results_json_that_holds_no_record_is_read_as_a_damaged_one(exported_run, make_cfg, tmp_path, capsys):
    """results.json holding JSON that is not an object (`[6]`, a hand edit or a damaged write) ended export.py and
    predict.py in the traceback of AttributeError: 'list' object has no attribute 'get'; eval.py went on."""
    run = tmp_path / "run"
    shutil.copytree(exported_run[0], run)
    (run / "results.json").write_text("[6]")
    np.save(tmp_path / "x.npy", raw_inputs(exported_run[1], 2))
    predict(predict_cfg(f"run_dir={run}", f"input={tmp_path / 'x.npy'}"))
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert export(make_cfg(f"run_dir={run}", config_name="export"))["signature"]["checkpoint"]["run_steps"] == 6


def test_an_export_sweep_over_anything_but_run_dir_is_refused(exported_run, tmp_path, data_dir):
    """Each job of `export.py -m run_dir=R checkpoint=best,latest` wrote R's one export/ over the last job's: only
    the last checkpoint's export was left."""
    run_dir, _ = exported_run
    before = (run_dir / "export" / "model.jax").read_bytes()
    done = commands.run([sys.executable, "export.py", "-m", f"run_dir={run_dir}", "checkpoint=best,latest",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT, env=subprocess_env(data_dir),
                        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == (
        "error: export.py -m sweeps run_dir alone: each job writes its run's one export/, so checkpoint=best,latest "
        "would leave only the last job's; export one checkpoint of a run per command.\n"), done.stderr
    assert (run_dir / "export" / "model.jax").read_bytes() == before and not (tmp_path / "sweep").exists()
