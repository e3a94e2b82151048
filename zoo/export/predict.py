"""predict(cfg): predictions of `<run dir>/export/model.jax` on a .npy or .csv file, as CSV.

Needs only jax and numpy, as a service serving the artifact would. Everything is computed before anything
is written: a refused input or a failed batch leaves no partial output."""
import hashlib
import itertools
import json
import math
import os
import sys
import warnings

import jax
import numpy as np
from omegaconf import DictConfig, OmegaConf

from zoo.cli import launch_dir_path, require_dir, write_stdout, written_whole
from zoo.errors import UserError
from zoo.files import load_json, write_text
from zoo.run_dirs import (a_commands_own_directory, a_folder_of_commands, a_multiruns_directory, export_origin,
                           holds_training_run, run_choices, run_whose_checkpoints_hold, runs_below)


# output= names that promise another format than the CSV predict.py writes, and who would refuse it
OTHER_FORMATS = {".npy": "np.load", ".npz": "np.load", ".json": "a .json reader", ".parquet": "a .parquet reader",
                 ".xlsx": "a spreadsheet", ".xls": "a spreadsheet"}


def _check_command(cfg: DictConfig) -> None:
    from zoo.config import PredictConfig, check_known_keys  # the command's; predicting needs only jax and numpy

    check_known_keys(cfg, PredictConfig)
    if OmegaConf.is_missing(cfg, "run_dir") or OmegaConf.is_missing(cfg, "input"):
        raise UserError("run_dir and input are required: python predict.py run_dir=outputs/<date>/<time> "
                        "input=FILE.npy|FILE.csv (a run exported with export.py).")
    if cfg.output == "-":  # stdout, as most commands that write a file read it: not a file named '-'
        cfg.output = None
    for key in ("run_dir", "input", "output"):  # where the user meant them (~, hydra.job.chdir=true)
        if cfg[key]:  # an empty output is refused below
            cfg[key] = launch_dir_path(cfg[key])
    if cfg.batch_size <= 0:
        raise UserError(f"batch_size must be a positive integer, got {cfg.batch_size}.")
    stdout = "name a .csv file to write, or leave output out to print to stdout."
    if cfg.output == "":  # abspath('') is the working directory, whose parent is writable: refused only at the end
        raise UserError(f"output= is empty; {stdout}")
    if cfg.output is not None and cfg.output.endswith(os.sep) and not os.path.isdir(cfg.output):
        raise UserError(f"output={cfg.output} names a directory (it ends with {os.sep}); {stdout}")
    if cfg.output is not None and os.path.isdir(cfg.output):
        raise UserError(f"output={cfg.output} is a directory; name a .csv file to write, or leave output out to print "
                        "to stdout.")
    if cfg.output is not None and os.path.exists(cfg.output) and _written_through(cfg.output):
        if not os.access(cfg.output, os.W_OK):  # output=/dev/stdout: its folder, /dev, is no matter
            raise UserError(f"output={cfg.output} cannot be written: it is not writable; choose another output or "
                            "leave it out to print to stdout.")
        _refuse_output_over_what_it_reads(cfg)
    elif cfg.output is not None:
        # a link to a file not yet written: the file is made where it leads
        path = os.path.realpath(cfg.output) if os.path.islink(cfg.output) else os.path.abspath(cfg.output)
        parent = os.path.dirname(path)
        if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
            raise UserError(f"output={cfg.output} cannot be written: {parent} is not a writable directory; "
                            "choose another output or leave it out to print to stdout.")
        _refuse_output_over_what_it_reads(cfg)
        _refuse_output_over_another_file(cfg.output)
    kind = os.path.splitext(cfg.output or "")[1].lower()
    if kind in OTHER_FORMATS:  # written as CSV under that name: np.load then took it for pickled data
        raise UserError(f"output={cfg.output} names a {kind} file, but predict.py writes CSV text, which "
                        f"{OTHER_FORMATS[kind]} would refuse; {stdout}")


def _written_through(path: str) -> bool:
    """output= a link, or what is no regular file (/dev/stdout, /dev/null, a named pipe): written through, as the
    shell's > writes it. A file written beside it and renamed over it, as a regular file is replaced, put a file where
    the link or the pipe was, which no reader saw (as root: /dev/stdout or /dev/null itself)."""
    return os.path.islink(path) or (os.path.exists(path) and not os.path.isfile(path))


def _refuse_output_over_what_it_reads(cfg: DictConfig) -> None:
    """The predictions replace whatever file `output` names: the input itself, or the export they come from,
    would be lost for good."""
    export_dir = os.path.join(cfg.run_dir, "export")
    read = {"input": cfg.input, "export's model.jax": os.path.join(export_dir, "model.jax"),
            "export's signature.json": os.path.join(export_dir, "signature.json")}
    for what, path in read.items():
        if os.path.exists(cfg.output) and os.path.exists(path) and os.path.samefile(cfg.output, path):
            raise UserError(f"output={cfg.output} is the {what}, which the predictions would replace; name another "
                            ".csv file to write, or leave output out to print to stdout.")


PREDICTIONS_HEADERS = ("class,probability_0", "prediction")  # the first line of what to_csv writes


def _refuse_output_over_another_file(output: str) -> None:
    """A file `output` names is replaced only where it holds predictions (this command's, run again) or nothing:
    any other (a run's metrics.jsonl, its checkpoints' metadata, a document) would be lost for good."""
    if not os.path.isfile(output) or os.path.getsize(output) == 0:
        return
    with open(output, "rb") as f:
        first = f.readline(200).decode("utf-8", "replace")
    if not first.startswith(PREDICTIONS_HEADERS):
        raise UserError(f"output={output} is a file that holds no predictions (its first line is not the "
                        "'class,probability_0,...' or 'prediction' header predict.py writes), which they would "
                        "replace; name another .csv file, remove that one first, or leave output out to print to "
                        "stdout.")


def load_export(run_dir: str):
    """(exported function, signature) from `<run_dir>/export/`."""
    require_dir(run_dir, "run_dir", "an exported training run")
    directory = os.path.join(run_dir, "export")
    if not os.path.isfile(os.path.join(directory, "signature.json")) and not holds_training_run(run_dir):
        _refuse_a_folder_above_or_inside_a_run(run_dir)  # outputs/ holds an export/ too: export.py's own folders
    try:
        with open(os.path.join(directory, "signature.json")) as f:
            signature = json.load(f)
        _ = signature["input"]["shape"][1:], signature["task"]  # what predicting reads of it
        if os.path.basename(signature["model"]) != signature["model"]:  # read only what export/ holds
            raise ValueError(f"its model {signature['model']!r} is not a file name in export/")
        with open(os.path.join(directory, signature["model"]), "rb") as f:
            model = f.read()
        if "model_sha256" in signature and hashlib.sha256(model).hexdigest() != signature["model_sha256"]:
            raise ValueError("model.jax is not the file signature.json describes: its sha256 differs")
        exported = jax.export.deserialize(bytearray(model))
        exported.mlir_module()  # its StableHLO program, which deserialize leaves to the first call
        _check_signature(exported, signature)
    except Exception as e:  # noqa: BLE001 — a damaged artifact fails in the reader or deserializer in many ways
        raise UserError(f"run_dir={run_dir} has no readable export ({type(e).__name__}: {e}); run "
                        f"`python export.py run_dir={run_dir}` first.") from None
    platform = jax.export.default_export_platform()  # as exports name it: 'cuda', where the backend says 'gpu'
    if platform not in exported.platforms:
        raise UserError(f"the export in {directory} runs on {list(exported.platforms)}, not on this "
                        f"{platform}; export it again with platforms=[{platform}].")
    return exported, signature


def _refuse_a_folder_above_or_inside_a_run(run_dir: str) -> None:
    """The run to pass where run_dir is its export/ or checkpoints/ folder, a multirun's directory, a folder of runs
    or an eval.py command's own: exporting that folder, as the refusal of a run without an export says to, would be
    refused too."""
    if os.path.basename(os.path.abspath(run_dir)) == "export" and \
            os.path.isfile(os.path.join(run_dir, "signature.json")):
        raise UserError(f"run_dir={run_dir} is a run's export/ folder; pass the run's directory, "
                        f"run_dir={os.path.dirname(os.path.abspath(run_dir))}.")
    run = run_whose_checkpoints_hold(run_dir)
    if run:
        raise UserError(f"run_dir={run_dir} is inside a run's checkpoints/; pass the run's directory, run_dir={run}.")
    parent = os.path.dirname(os.path.abspath(run_dir))  # another of the run's own folders: eval/, .hydra/
    if run_whose_checkpoints_hold(os.path.join(parent, "checkpoints")) == parent:
        raise UserError(f"run_dir={run_dir} is a folder inside a run; pass the run's directory, run_dir={parent}.")
    origin = export_origin(run_dir)  # a copy of export/ elsewhere
    if origin is not None:
        raise UserError(f"run_dir={run_dir} is an export's folder (model.jax, signature.json), not a run; predict.py "
                        "reads a run's export/: pass a folder that holds it as export/"
                        f"{f', or the run it was exported from, run_dir={origin}' if origin else ''}.")
    multirun = a_multiruns_directory(run_dir, lambda job: os.path.isfile(os.path.join(job, "export", "signature.json")))
    if multirun:
        raise UserError(multirun)
    own = a_commands_own_directory(run_dir) or a_folder_of_commands(run_dir)  # outputs/eval/<date>/<time>, ...
    if own:
        raise UserError(own)
    runs = runs_below(run_dir)  # outputs/, outputs/<date>/, multirun/
    exported = [run for run in runs if os.path.isfile(os.path.join(run, "export", "signature.json"))]
    if len(exported) == 1:
        raise UserError(f"run_dir={run_dir} is not a run but holds an exported run below it; pass it: "
                        f"run_dir={exported[0]}.")
    if exported:
        raise UserError(f"run_dir={run_dir} is not a run but holds {len(exported)} exported runs below it; pass one of "
                        f"them: {run_choices(exported)}.")
    if runs:
        raise UserError(f"run_dir={run_dir} is not a run but holds {len(runs)} run{'s' if len(runs) > 1 else ''} below "
                        f"it, none exported; export one with python export.py and pass it: {run_choices(runs)}.")


def _warn_if_trained_on(run_dir: str, signature: dict) -> None:
    """The same training command with more steps resumes a run: eval.py then reports its new final weights, while
    its export/ still holds those exported before. An export records the steps the run had trained then (an older
    one does not, and is not checked)."""
    checkpoint = signature.get("checkpoint")
    exported_at = checkpoint.get("run_steps") if isinstance(checkpoint, dict) else None  # a damaged one: no check
    steps = (load_json(os.path.join(run_dir, "results.json")) or {}).get("steps")
    if isinstance(exported_at, int) and isinstance(steps, int) and steps > exported_at:
        print(f"warning: {os.path.join(run_dir, 'export')} holds step {signature['checkpoint'].get('step')}, exported "
              f"before the run trained on to step {steps}; python export.py run_dir={run_dir} exports the run's final "
              "weights.", file=sys.stderr)


def _check_signature(exported, signature: dict) -> None:
    """signature.json describes this program: the shape of its examples and what its task reads of its outputs."""
    shape = [int(d) for d in exported.in_avals[0].shape[1:]]
    if shape != list(signature["input"]["shape"][1:]):
        raise ValueError(f"signature.json gives input shape {signature['input']['shape'][1:]}; the model takes {shape}")
    outputs = sorted(jax.tree.unflatten(exported.out_tree, [None] * exported.out_tree.num_leaves))
    if ("probabilities" if signature["task"] == "classification" else "predictions") not in outputs:
        raise ValueError(f"signature.json gives task {signature['task']}; the model returns {outputs}")


def _expected(shape: tuple) -> str:
    flattened = f", or (N, {math.prod(shape)}) flattened" if len(shape) > 1 else ""
    return (f"(N, {', '.join(map(str, shape))}){flattened}: N >= 1 examples of shape {shape} "
            f"(a .csv: one example per line, {math.prod(shape)} comma-separated numbers)")


def _numbers(line: str):
    """The comma-separated numbers of one line of a .csv, or None where a field is not one. A field may be quoted
    ("1.5"), as spreadsheets and csv.QUOTE_ALL write them: np.loadtxt reads it with quotechar='"'."""
    try:
        return [float(_unquoted(field)) for field in line.split(",")]
    except ValueError:
        return None


def _unquoted(field: str) -> str:
    field = field.strip()
    return field[1:-1] if len(field) >= 2 and field[0] == field[-1] == '"' else field


def _refuse_a_header_line(path: str, shape: tuple) -> None:
    """A header line is not an example: names are refused as such, not as a string that does not convert, and the
    column numbers pandas' to_csv writes by default (0,1,...,width-1), which read as numbers, are not predicted."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:  # the lines np.loadtxt reads: no comment, none blank
        lines = (line.split("#", 1)[0].strip() for line in f)
        first, second = (list(itertools.islice((line for line in lines if line), 2)) + ["", ""])[:2]
    remove = "remove that line (pandas: to_csv(..., header=False))."
    if first.startswith(",") and _numbers(first[1:]) is not None:  # its index column has no name
        remove = ("remove that line and the first column, pandas' index (pandas: to_csv(..., header=False, "
                  "index=False)).")
    preview = first if len(first) <= 40 else first[:40] + "…"
    names = [_unquoted(field) for field in first.split(",")]
    if first and not second and all(any(c.isalpha() for c in n) and _numbers(n) is None for n in names):
        raise UserError(f"input={path} holds a header line ({preview}) and no examples; the model expects "
                        f"{_expected(shape)}.")
    if first and _numbers(first) is None and second and _numbers(second) is not None:
        raise UserError(f"input={path} begins with a header line ({preview}); predict.py reads examples only, one "
                        f"per line: {remove}")
    width = math.prod(shape)
    # only for wide examples: a narrow one (0,1 or 0,1,2) may well be data, while 8 and more consecutive column
    # numbers are not an example anyone means to predict
    if width >= 8 and _numbers(first) == list(range(width)):
        raise UserError(f"input={path} begins with the line 0,1,...,{width - 1}: column numbers (the header pandas' "
                        f"to_csv writes), not an example; {remove}")


def _refuse_another_separator(path: str, shape: tuple) -> None:
    """Semicolons (Excel's CSV where a comma is the decimal mark), tabs or spaces (np.savetxt's default): not
    'cannot convert the whole line'. Spaces beside commas are allowed: np.loadtxt strips them."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        first = next((line for line in (line.split("#", 1)[0].strip() for line in f) if line), "")
    if _numbers(first) is not None:  # comma-separated, spaces or tabs beside the commas or not
        return
    if first.endswith(",") and _numbers(first[:-1]) is not None:  # a writer that puts a comma after each number
        raise UserError(f"input={path} ends its first line with a comma, which reads as one more number, an empty "
                        f"one; remove it: it must hold {_expected(shape)}.")
    savetxt = "spaces (np.savetxt's default: pass it delimiter=',')"
    for separator, name in ((";", "';'"), ("\t", "tabs"), (" ", savetxt)):
        if separator not in first or (separator == " " and "," in first):
            continue
        fields = first.split(separator) if separator == ";" else first.split()
        if len(fields) > 1 and _numbers(",".join(field.replace(",", ".") for field in fields)) is not None:
            decimals = ", and writes decimal commas, not points" if "," in first else ""
            raise UserError(f"input={path} separates its numbers with {name}, not commas{decimals}; it must hold "
                            f"{_expected(shape)}.")


def read_input(path: str, shape: tuple) -> np.ndarray:
    """(N, *shape) float32 from a .npy array, of examples (N, *shape), flattened ones (N, prod(shape)) or one-channel
    images without their channel axis, or a .csv of flattened examples, one a line; anything else is refused."""
    kind = os.path.splitext(path)[1].lower()
    if not os.path.isfile(path):
        what = "is not a file" if os.path.exists(path) else "does not exist"
        raise UserError(f"input={path} {what}; pass a .npy or .csv file of shape {_expected(shape)}.")
    if kind not in (".npy", ".csv"):
        raise UserError(f"input={path} must be a .npy or .csv file of shape {_expected(shape)}.")
    try:
        if kind == ".npy":
            with open(path, "rb") as f:
                magic = f.read(6)
            # np.load takes any other file for a pickle, and its refusal suggests unpickling it
            if magic != b"\x93NUMPY" and not magic.startswith(b"PK\x03\x04") and magic:  # an .npz is refused below
                raise ValueError("it is not an .npy file: np.save writes those, ndarray.tofile and np.savetxt do not")
            # never unpickle: object arrays are refused here; an empty file holds no examples, as an empty .csv
            # does (np.load raises EOFError)
            x = np.load(path, allow_pickle=False) if magic else np.empty((0,), np.float32)
            if not isinstance(x, np.ndarray):  # np.load reads an .npz archive whatever the file is called
                x.close()
                raise ValueError("it is an .npz archive of several arrays; save one array with np.save")
        else:
            _refuse_a_header_line(path, shape)
            _refuse_another_separator(path, shape)
            with warnings.catch_warnings():  # an empty file is reported below, by its shape
                warnings.simplefilter("ignore")
                # utf-8-sig: a byte order mark (Excel's "CSV UTF-8" begins with one) is not part of the first number
                with open(path, encoding="utf-8-sig") as f:
                    # a line of spaces or tabs is as blank as an empty one, which np.loadtxt skips (it read one
                    # number, an empty one, there); each line stays, so np.loadtxt's row numbers are the file's
                    lines = [line if line.strip() else "\n" for line in f]
                x = np.loadtxt(lines, delimiter=",", ndmin=2, quotechar='"')
            if x.ndim == 2 and x.shape[1] == math.prod(shape) + 1 and len(x) > 1 and \
                    np.array_equal(x[:, 0], np.arange(len(x))):
                raise UserError(f"input={path} begins each line with its line number (0, 1, 2, ...: the index pandas' "
                                "to_csv writes), one number more than an example; remove that column (pandas: "
                                "to_csv(..., header=False, index=False)).")
    except (OSError, ValueError) as e:
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        reason = reason.split("; use `usecols`")[0]  # np.loadtxt's advice names its argument, not a setting here
        raise UserError(f"input={path} cannot be read as numbers ({reason}); it must hold {_expected(shape)}.") \
            from None
    if x.dtype.kind not in "iuf":
        raise UserError(f"input={path} has dtype {x.dtype}; the model takes integers or floats of shape "
                        f"{_expected(shape)}.")
    if x.size == 0:
        raise UserError(f"input={path} holds no examples; the model expects {_expected(shape)}.")
    if x.ndim == 2 and len(shape) > 1 and x.shape[1] == math.prod(shape):  # flattened examples, as a .csv holds them
        x = x.reshape(-1, *shape)
    if len(shape) > 1 and shape[-1] == 1 and tuple(x.shape[1:]) == tuple(shape[:-1]):  # (N, H, W) grayscale images
        x = x[..., None]
    if x.ndim != len(shape) + 1 or tuple(x.shape[1:]) != tuple(shape):
        raise UserError(f"input={path} has shape {x.shape}; the model expects {_expected(shape)}.")
    with np.errstate(over="ignore"):  # a value beyond float32's range becomes inf, refused below
        x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise UserError(f"input={path} holds NaN or infinite values, or values beyond float32's range "
                        f"(±{np.finfo(np.float32).max:.3g}); the model expects finite numbers.")
    return x


def run_exported(exported, x: np.ndarray, batch_size: int) -> dict:
    """Outputs (name -> array) for all of x; each distinct batch size compiles once."""
    parts = [jax.device_get(exported.call(x[i:i + batch_size])) for i in range(0, len(x), batch_size)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def to_csv(outputs: dict, task: str) -> str:
    """Classification: the class and its probabilities; regression: the predictions in the targets' units."""
    if task == "classification":
        probabilities = outputs["probabilities"]
        header = ["class"] + [f"probability_{k}" for k in range(probabilities.shape[1])]
        rows = [[str(int(np.argmax(p)))] + [f"{v:.9g}" for v in p] for p in probabilities]
    else:
        predictions = outputs["predictions"]
        width = predictions.shape[1]
        header = ["prediction"] if width == 1 else [f"prediction_{j}" for j in range(width)]
        rows = [[f"{v:.9g}" for v in p] for p in predictions]
    return "\n".join(",".join(r) for r in [header, *rows]) + "\n"


def predict(cfg: DictConfig) -> dict:
    _check_command(cfg)
    exported, signature = load_export(cfg.run_dir)
    _warn_if_trained_on(cfg.run_dir, signature)
    x = read_input(cfg.input, tuple(signature["input"]["shape"][1:]))
    outputs = run_exported(exported, x, cfg.batch_size)
    text = to_csv(outputs, signature["task"])
    if cfg.output is None:
        with written_whole():  # a full disk behind `>` or a closed pipe: as output= on that disk, one sentence
            write_stdout(text, lambda why: f"the predictions could not all be written to stdout ({why}), so what it "
                                           "received is incomplete; pass output=FILE.csv to write them to a file, "
                                           "written whole or not at all.")
    else:
        try:
            with written_whole():
                if _written_through(cfg.output):
                    with open(cfg.output, "w", newline="") as f:
                        f.write(text)
                else:
                    write_text(cfg.output, text)
        except OSError as e:  # a directory os.access called writable refused it (root on /sys, a full disk)
            raise UserError(f"output={cfg.output} cannot be written ({e.strerror or e}); choose another output or "
                            "leave it out to print to stdout.") from None
        print(f"wrote {len(x)} predictions to {cfg.output}", file=sys.stderr)
    return {"outputs": outputs, "count": len(x), "objective": None}
