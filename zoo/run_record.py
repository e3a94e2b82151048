"""A run directory's record as it was before this command: its .hydra/ files and the length of its logs.

Hydra rewrites <run dir>/.hydra/ before the task starts, and appends the task's log lines to <run dir>/<job>.log.
A command the zoo refuses before the run opens its outputs (other settings than its checkpoints', a bad value),
or one that finds the run finished and only reports its results again, puts the previous record back, so a
finished run keeps describing itself; once a run has opened its outputs, the new record is its own.
"""
import logging
import os

_previous = {}  # run dir -> (.hydra folder, {file name: bytes}, {log path: size})


def remember(run_dir: str, subdir) -> None:
    if subdir is None:
        return
    folder = os.path.join(run_dir, str(subdir))
    try:
        files = {}
        for name in os.listdir(folder):
            if name.endswith(".yaml"):
                with open(os.path.join(folder, name), "rb") as f:
                    files[name] = f.read()
        logs = {os.path.abspath(os.path.join(run_dir, name)): os.path.getsize(os.path.join(run_dir, name))
                for name in os.listdir(run_dir) if name.endswith(".log")}
    except OSError:  # no record yet, or one that cannot be read: nothing to put back
        _previous.pop(os.path.abspath(run_dir), None)
        return
    _previous[os.path.abspath(run_dir)] = (folder, files, logs)


def accepted(run_dir: str) -> None:
    """The run opened its outputs: the record Hydra wrote for this command is the run's own now."""
    _previous.pop(os.path.abspath(run_dir), None)


def restore(run_dir) -> None:
    """Put the record back; this command's later log lines reach the console only."""
    folder, files, logs = _previous.pop(os.path.abspath(run_dir), (None, {}, {})) if run_dir else (None, {}, {})
    for name, content in files.items():
        try:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(content)
        except OSError:  # the refusal's own message is what the user needs; this one would hide it
            continue
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        if os.path.abspath(handler.baseFilename) in logs:
            root.removeHandler(handler)
            handler.close()
    for path, size in logs.items():
        try:
            if os.path.getsize(path) > size:
                os.truncate(path, size)
        except OSError:
            continue
