"""export(cfg): a finished run's checkpoint as `<run dir>/export/`: model.jax and signature.json.

The directory is written next to the run under a temporary name and renamed into place when complete,
so a failed or interrupted export leaves the previous export (or none), never a partial one."""
import contextlib
import copy
import errno
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import socket
import tempfile
from importlib import metadata

import numpy as np
from flax import nnx
from omegaconf import DictConfig, OmegaConf

from zoo.cli import launch_dir_path, write_stdout, written_whole
from zoo.errors import UserError
from zoo.ema import with_averaged_params
from zoo.evaluate import restore_run, warn_if_unfinished
from zoo.export.inference import INPUT_DTYPE, export_function, inference_function, output_names
from zoo.files import load_json, process_runs
from zoo.loop import evaluate as eval_loop, metric_summary
from zoo.parallel.distributed import is_primary
from zoo.run_dirs import newest_step
from zoo.train import build_model

log = logging.getLogger("zoo")
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # what jax.export lowers for
VERSIONED = ("jax", "jaxlib", "flax", "optax", "numpy", "orbax-checkpoint", "flatbuffers")


def _check_platforms(platforms) -> None:
    unknown = [p for p in platforms if p not in PLATFORMS]
    if not platforms or unknown or len(set(platforms)) < len(platforms):  # jax.export keeps a repeated one
        raise UserError(f"platforms={list(platforms)} must be a non-empty list of {', '.join(PLATFORMS)}, each "
                        "named once; e.g. platforms=[cpu,cuda].")


def _versions() -> dict:
    versions = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _restored_model(config: dict, run, state) -> nnx.Module:
    """A plain model (no device-axis BatchNorm, whatever mode the run was trained in) holding `state`."""
    graphdef, _, _ = nnx.split(nnx.eval_shape(lambda: build_model(OmegaConf.create(config), run.data)), nnx.Param, ...)
    return nnx.merge(graphdef, state.params, state.model_state)


def signature_of(exported, data, step: int, test_metrics: dict, config: dict, model: bytes) -> dict:
    outputs = [{"name": name, "shape": [None, data.out_features], "dtype": "float32"}
               for name in output_names(data.task)]
    return {
        "format": "jax.export",
        "model": "model.jax",
        "model_sha256": hashlib.sha256(model).hexdigest(),  # damaged constants still deserialize and run
        "input": {"name": "x", "shape": [None, *data.input_shape], "dtype": INPUT_DTYPE,
                  "units": "raw, as the dataset stores them: normalisation is part of the model"},
        "outputs": outputs,
        "task": data.task,
        "num_classes": data.out_features if data.task == "classification" else None,
        "platforms": list(exported.platforms),
        "checkpoint": {"step": step, "test": test_metrics, **_metric_units(data)},
        "config": config,
        "versions": _versions(),
    }


def _metric_units(data) -> dict:
    """A regression's test metrics are those of training, on the targets it trained on: standardised when
    dataset.normalize_target is on, while the model's predictions are in the dataset's units."""
    if data.task != "regression":
        return {}
    std = np.atleast_1d(np.asarray(data.y_scaler.std, np.float64)) if data.y_scaler is not None else np.ones(1)
    if np.all(std == 1.0):
        return {"test_units": "the dataset's, as the predictions"}
    return {"test_units": "loss, mse and mae on targets standardised by the train split (each output divided by "
                          "target_std; multiply mae by it, mse by its square, for the predictions' units); r2 has "
                          "none", "target_std": std.tolist()}


def _privacy_at(cfg: DictConfig, run, step: int, meta: dict, trained: int) -> dict:
    """A DP run's guarantee for the exported step: its results.json's record (the noise it solved, the sampling
    rate, the accountant), with epsilon computed for that step. A run without a readable record (not finished, or
    the file damaged) has it made from its saved settings as its training made it, for the `trained` steps so far.
    A step that is the best by its eval metrics (checkpoint=best, final with early stopping, or that step named by
    its number) was compared with every later one, which the later steps' batches shaped: its release is a function
    of the whole run, so it carries the whole run's epsilon."""
    from zoo.evaluate import best_step_of
    from zoo.privacy import accountant
    from zoo.privacy.plan import plan_privacy

    path = os.path.join(cfg.run_dir, "results.json")
    results = load_json(path)
    record, made = (results or {}).get("privacy"), {}
    if record is None:
        why = ("the run has no results.json (it has not finished)" if not os.path.exists(path) else
               f"{path} cannot be read" if results is None else f"{path} holds no privacy record")
        plan = plan_privacy(OmegaConf.create(meta["config"]), run.data.splits["train"], run.total_steps, 1,
                            warn=False)
        record = {k: v for k, v in plan.record(trained).items() if k != "stopped_by_budget"}
        made = {"note": f"{why}: this record is made from the run's saved settings, for the {trained} steps it had "
                        "trained"}
    if step < record["steps"] and step == best_step_of(cfg.run_dir, meta["config"]):
        note = (f"step {step} is the best of the run's checkpoints by their eval metrics, which the steps after it "
                f"shaped: epsilon is that of the run's {record['steps']} steps")
        return {**record, "exported_step": step, "note": f"{made['note']}; {note}" if made else note}
    eps = accountant.epsilon(record["q"], record["noise_multiplier"], step, record["accountant_delta"],
                             record["accountant"])
    return {**record, "steps": step, "epsilon": eps if np.isfinite(eps) else None, **made}


# what write_directory names its staging directory (and the previous export it moves aside): the machine and
# process writing it, for a later export to tell one that a killed process left (tempfile adds 8 characters)
STAGING = re.compile(r"\.export-(?P<host>.+)-(?P<pid>\d+)-[a-z0-9_]{8}(?P<previous>\.previous)?")


def _running(pid: int) -> bool:
    """Whether another process `pid` runs on this machine (this one's is no other export: it writes none yet)."""
    return pid != os.getpid() and process_runs(pid)


def _remove_stale_staging(final: str) -> None:
    """What an export killed on this machine (kill -9, a crash, a power cut) left beside `final`: its staging
    directory goes, and the previous export it had moved aside is put back where `final` is missing, else goes.
    Only names write_directory gives, of processes of this machine that no longer run: a running export's,
    another machine's on a shared file system and anything else stay."""
    parent = os.path.dirname(os.path.abspath(final))
    try:
        names = os.listdir(parent)
    except OSError:
        return
    host = socket.gethostname()
    stale = [m for m in map(STAGING.fullmatch, names) if m and m["host"] == host and not _running(int(m["pid"]))]
    for match in sorted(stale, key=lambda m: not m["previous"]):  # a moved-aside export first: it may go back
        path = os.path.join(parent, match.group())
        with contextlib.suppress(OSError):  # another export removing it too, or a folder it cannot remove
            if match["previous"] and not os.path.lexists(final):
                os.rename(path, final)
            elif os.path.islink(path):
                os.unlink(path)
            else:
                shutil.rmtree(path)


def write_directory(final: str, files: dict) -> None:
    """Write `files` (name -> bytes) as the directory `final`, replacing an earlier one only when complete."""
    parent = os.path.dirname(os.path.abspath(final))
    _remove_stale_staging(final)
    staging = tempfile.mkdtemp(prefix=f".export-{socket.gethostname()}-{os.getpid()}-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it private; the export is as shareable as the run
    previous = staging + ".previous"
    try:
        for name, data in files.items():
            with open(os.path.join(staging, name), "wb") as f:
                f.write(data)
        with written_whole():  # a stop signal from here on waits for the swap and the previous export's removal
            _swap(staging, final, previous)
            _discard(previous)
    except BaseException:
        if os.path.lexists(previous) and not os.path.lexists(final):
            os.rename(previous, final)
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap(staging: str, final: str, previous: str, tries: int = 10) -> None:
    """`staging` in place as `final`, the one there moved to `previous`. Another export of the run may swap its own
    in between the two renames (moving `final` aside, or putting its own there): this one then takes the place
    again, as the later of the two, where it failed with advice to free space and left `previous` beside it."""
    for attempt in range(tries):
        if os.path.lexists(final):
            if attempt:  # the export the first try moved aside is older than the one there now
                _discard(previous)
            with contextlib.suppress(FileNotFoundError):  # another export moved it aside since
                os.rename(final, previous)
        try:
            os.rename(staging, final)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or attempt == tries - 1:
                raise  # not another export's in the way


def _discard(previous: str) -> None:
    if os.path.islink(previous):  # export/ was a link: it goes, the folder it named stays (rmtree refuses it)
        os.unlink(previous)
    else:
        shutil.rmtree(previous, ignore_errors=True)


EXPORTED = ("model.jax", "signature.json")  # what export/ holds, as write_directory writes it


def _refuse_to_delete_what_the_user_put_there(out_dir: str) -> None:
    """The export replaced goes whole (a link to a folder: the link alone): a file put beside model.jax, such as
    predict.py's output=<run>/export/predictions.csv, would go with it."""
    if os.path.islink(out_dir) or not os.path.isdir(out_dir):
        return
    theirs = sorted(set(os.listdir(out_dir)) - set(EXPORTED))
    if theirs:
        raise UserError(f"{out_dir} holds {', '.join(theirs)}, which export.py did not write and would delete with the "
                        "export it replaces; move it out of export/ and run the command again.")


def export(cfg: DictConfig) -> dict:
    _check_platforms(cfg.platforms)
    if OmegaConf.is_missing(cfg, "run_dir"):
        return _export(cfg, None)  # refused there, as eval.py's
    # with hydra.job.chdir=true, export/ still goes into the user's run
    cfg.run_dir = launch_dir_path(cfg.run_dir)
    out_dir = os.path.join(cfg.run_dir, "export")
    _refuse_to_delete_what_the_user_put_there(out_dir)
    exported_before = os.path.lexists(out_dir)  # restore_run makes export/ to check that it can be written
    try:
        return _export(cfg, out_dir)
    except BaseException:
        if not exported_before and os.path.isdir(out_dir) and not os.listdir(out_dir):
            os.rmdir(out_dir)  # complete or not at all: not an empty export/ predict.py would take for one
        raise


def _export(cfg: DictConfig, out_dir: str) -> dict:
    run, step, state, meta = restore_run(cfg, "export.py", "export", "exported files")
    warn_if_unfinished(cfg, step, meta, "export")  # checkpoint=final, as eval.py reads it
    averaged = meta["config"]["trainer"].get("ema_decay") is not None  # export what evals score
    served = with_averaged_params(state) if averaged else state
    predict = inference_function(_restored_model(meta["config"], run, served), run.data)
    exported = export_function(predict, run.data.input_shape, cfg.platforms)
    test_metrics = eval_loop(run.compiled.mode.put_state(state), run.compiled, *run.eval_sets["test"])
    model = bytes(exported.serialize())
    config = copy.deepcopy(meta["config"])
    config["paths"]["output_dir"] = os.path.abspath(cfg.run_dir)  # the run read, where a copied run's names another
    signature = signature_of(exported, run.data, step, test_metrics, config, model)
    # how far the run had trained: predict.py warns once it has trained on (zoo.export.predict._warn_if_trained_on);
    # a run not finished yet (no results.json) had trained to its newest checkpoint, and may still finish
    finished = (load_json(os.path.join(cfg.run_dir, "results.json")) or {}).get("steps")
    newest = newest_step(os.path.join(cfg.run_dir, "checkpoints"))
    signature["checkpoint"]["run_steps"] = finished if finished is not None else max(step, newest or step)
    if meta["config"].get("privacy", {}).get("mode") == "dpsgd":
        signature["privacy"] = _privacy_at(cfg, run, step, meta, signature["checkpoint"]["run_steps"])
        # the noise and the sampling are drawn from the seed: who knows it can subtract the noise (README)
        signature["privacy"]["seed"] = ("withheld from this file, as anyone who knows it can subtract the noise; "
                                        "the run's own .hydra/config.yaml holds it")
        del signature["config"]["seed"]
    if is_primary():  # with distributed=explicit|auto every process computes the metrics; one writes
        try:
            write_directory(out_dir, {"model.jax": model,
                                       "signature.json": json.dumps(signature, indent=2).encode()})
        except OSError as e:  # a full disk or quota, an I/O error: write_directory has undone its part
            raise UserError(f"the export cannot be written to {out_dir} ({e.strerror or e}); nothing there was "
                            "changed: free space on its file system, or copy the run somewhere with room and pass "
                            "that run_dir.") from None
        write_stdout(f"exported step {step} to {out_dir} (model.jax, signature.json); test: "
                     f"{metric_summary(test_metrics)}\n",
                     lambda why: f"export.py's line could not be printed to stdout ({why}); the export of step {step} "
                                 f"is written to {out_dir}.")
    return {"step": step, "path": out_dir, "signature": signature, "objective": None}
