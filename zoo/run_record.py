"""A run directory's .hydra/ record as it was before this command.

Hydra rewrites <run dir>/.hydra/ before the task starts. A command the zoo refuses before the run opens its
outputs (other settings than its checkpoints', a bad value) puts the previous record back, so a finished
run keeps describing itself; once a run has opened its outputs, the new record is its own.
"""
import os

_previous = {}  # run dir -> (.hydra folder, {file name: bytes})


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
    except OSError:  # no record yet, or one that cannot be read: nothing to put back
        _previous.pop(os.path.abspath(run_dir), None)
        return
    _previous[os.path.abspath(run_dir)] = (folder, files)


def accepted(run_dir: str) -> None:
    """The run opened its outputs: the record Hydra wrote for this command is the run's own now."""
    _previous.pop(os.path.abspath(run_dir), None)


def restore(run_dir) -> None:
    folder, files = _previous.pop(os.path.abspath(run_dir), (None, {})) if run_dir else (None, {})
    for name, content in files.items():
        try:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(content)
        except OSError:  # the refusal's own message is what the user needs; this one would hide it
            continue
