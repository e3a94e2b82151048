"""Finding runs on disk, read without opening them: which folders hold training runs, exports, or the directories
of eval.py and export.py commands, and how a refusal names the runs to choose from."""
import json
import os
import re

from omegaconf import DictConfig, OmegaConf

from zoo.errors import UserError


def holds_training_run(path: str) -> bool:
    return any(os.path.exists(os.path.join(path, name)) for name in ("checkpoints", "results.json"))


def holds_steps(checkpoints: str) -> bool:
    """Whether a run's checkpoints/ holds a step's folder (named by its number), read without opening it: a run
    refused before its first step leaves it empty."""
    return newest_step(checkpoints) is not None


def newest_step(checkpoints: str):
    """The largest step a run's checkpoints/ holds a folder of (read without opening it), else None."""
    try:
        return max((int(name) for name in os.listdir(checkpoints) if name.isdigit()), default=None)
    except OSError:  # none (checkpoint.enabled=false) or unreadable
        return None


def command_read(path: str):
    """(the run_dir it read, its script) where `path` is the directory an eval.py or export.py command kept its
    .hydra/ and log in (outputs/eval/<date>/<time>), else None. Their configs hold run_dir; a training run's not."""
    try:
        cfg = OmegaConf.load(os.path.join(path, ".hydra", "config.yaml"))
        if not isinstance(cfg, DictConfig) or "run_dir" not in cfg or "model" in cfg:
            return None
        read = "" if OmegaConf.is_missing(cfg, "run_dir") else str(cfg.run_dir or "")
    except Exception:  # noqa: BLE001 — no record, or one that does not read: not known to be a command's
        return None
    try:
        name = str(OmegaConf.load(os.path.join(path, ".hydra", "hydra.yaml")).hydra.job.name)
    except Exception:  # noqa: BLE001 — its script is then not named
        name = ""
    return read, f"{name}.py" if name in ("eval", "export") else ""


def a_commands_own_directory(run_dir: str):
    """The sentence for a run_dir that is an eval.py or export.py command's own directory, else None."""
    read = command_read(run_dir)
    if read is None:
        return None
    name, log = (read[1], f"{read[1][:-3]}.log") if read[1] else ("eval.py or export.py", "log")
    run = f"the run it read, run_dir={read[0]}" if read[0] and holds_training_run(read[0]) else "a training run"
    return (f"run_dir={run_dir} is the directory of an {name} command (its .hydra/ and {log}), not a training run; "
            f"pass {run}.")


def a_folder_of_commands(run_dir: str):
    """The sentence for a run_dir that holds the directories of eval.py or export.py commands and no run
    (outputs/eval/, outputs/eval/<date>/, the multirun of eval.py -m), else None."""
    commands = [path for path in folders_below(run_dir, 2) if command_read(path) is not None]
    if not commands or runs_below(run_dir):
        return None
    # not a refused command's run_dir; by name, not the newest by modification time (zoo.run_dirs.run_choices)
    read = {path for path in (command_read(path)[0] for path in commands) if path and holds_training_run(path)}
    example = ""
    if read:
        example = (f", e.g. the one they read, {run_choices(read)}" if len(read) == 1 else
                   f", e.g. one of those they read: {run_choices(read)}")
    return (f"run_dir={run_dir} holds the directories of eval.py or export.py commands, not training runs; pass "
            f"a training run's directory{example}.")


def a_multiruns_directory(run_dir: str, usable) -> str | None:
    """The sentence for a run_dir that is a multirun's directory, else None: one of its jobs to pass, the first for
    which usable(job) holds (one with a checkpoint, or an export), not a trial pruned or failed before its first
    checkpoint, refused in turn. Not eval.py -m's jobs, the directories of commands (a_folder_of_commands)."""
    if not os.path.isfile(os.path.join(run_dir, "multirun.yaml")):
        return None
    from zoo.sweeps.jobs import find_job_dirs  # only here: predict.py needs only jax and numpy

    jobs = [job for job in find_job_dirs(run_dir) if command_read(job) is None]
    if not jobs:
        return None
    job = next((job for job in jobs if usable(job)), jobs[0])
    ranks = " (its summary.md ranks them)" if os.path.isfile(os.path.join(run_dir, "summary.md")) else ""  # at its end
    return f"run_dir={run_dir} is a multirun's directory; pass one of its jobs, e.g. run_dir={job}{ranks}."


def _subfolders(folder: str) -> list:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [path for path in (os.path.join(folder, name) for name in names) if os.path.isdir(path)]


def folders_below(folder: str, depth: int) -> list:
    """The folders `depth` levels below `folder` at most."""
    folders = _subfolders(folder)
    return folders + [deeper for path in folders if depth > 1 for deeper in folders_below(path, depth - 1)]


def runs_below(folder: str, depth: int = 3) -> list:
    """Training runs in the folders `depth` levels below `folder` at most (outputs/<date>/<time>, and a sweep's
    jobs, multirun/<date>/<time>/<job>)."""
    runs = []
    for path in _subfolders(folder):
        if holds_training_run(path):
            runs.append(path)
        elif depth > 1:
            runs += runs_below(path, depth - 1)
    return runs


def run_choices(runs: list, shown: int = 5, setting: str = "run_dir") -> str:
    """The runs to choose from as values of `setting`, by name (outputs/<date>/<time> sort by time, a sweep's jobs by
    number), the last `shown` of them where there are more. Not the newest by modification time: copying a run
    (cp -r) or touching it makes an older one the newest, and the command would read a run other than the one meant
    (eval.py, export.py, predict.py, trainer.resume)."""
    runs = sorted(runs, key=lambda path: [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)])
    named = [f"{setting}={run}" for run in runs[-shown:]]
    before = len(runs) - len(named)
    if before:
        return f"{', '.join(named)} or one of the {before} before them"
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"


def export_origin(path: str):
    """None unless `path` is an export's folder (model.jax and signature.json, as export.py writes them): then the
    run its signature.json's config was trained in, or '' where that is no longer a training run."""
    if not all(os.path.isfile(os.path.join(path, name)) for name in ("model.jax", "signature.json")):
        return None
    try:
        with open(os.path.join(path, "signature.json")) as f:
            origin = json.load(f)["config"]["paths"]["output_dir"]
    except (OSError, ValueError, KeyError, TypeError):  # a damaged signature names no run
        return ""
    return origin if isinstance(origin, str) and holds_training_run(origin) else ""


def run_whose_checkpoints_hold(path: str):
    """The run directory whose checkpoints/ is `path` or holds it, at any depth, else None. A folder named
    checkpoints counts beside a run's results.json, .hydra/ or metrics.jsonl: an unrelated one may be any name."""
    path = os.path.abspath(path)
    while os.path.dirname(path) != path:
        run = os.path.dirname(path)
        if os.path.basename(path) == "checkpoints" and \
                any(os.path.exists(os.path.join(run, name)) for name in ("results.json", ".hydra", "metrics.jsonl")):
            return run
        path = run
    return None


def refuse_inside_a_runs_folder(path: str, setting: str) -> None:
    """A UserError where `path` (the value of `setting`) lies inside a run's checkpoints/ or export/. Orbax owns a
    run's checkpoints/: it would take a command's files there for a step of its own, and delete them with the run's
    old checkpoints. export.py replaces a run's export/ whole (zoo.export.artifact.write_directory): a run trained
    inside it was deleted, checkpoints and all, by the next export of the run around it."""
    run = run_whose_checkpoints_hold(path)
    if run:
        raise UserError(f"{setting}={path} is inside a run's checkpoints/ ({run}), whose old steps are deleted as it "
                        f"trains; choose another {setting} outside it.")
    folder = os.path.abspath(path)
    while os.path.dirname(folder) != folder:
        run = os.path.dirname(folder)
        if os.path.basename(folder) == "export" and holds_training_run(run):
            raise UserError(f"{setting}={path} is inside a run's export/ ({run}), which export.py replaces whole; "
                            f"choose another {setting} outside it.")
        folder = run
