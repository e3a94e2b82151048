"""Files that readers never see half-written: each is written beside its path, then renamed over it."""
import contextlib
import json
import os
import threading


@contextlib.contextmanager
def replacing(path: str):
    """Yields a path to write instead of `path`; on success it replaces `path`, on failure it is removed. The name
    is the process's and thread's own: several processes may update one file (a sweep's summary under a parallel
    launcher)."""
    staging = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        yield staging
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def write_text(path: str, text: str) -> None:
    with replacing(path) as staging, open(staging, "w", newline="") as f:
        f.write(text)


def load_json(path: str):
    """The JSON record (an object) at `path`, or None when it is missing or unreadable (e.g. cut short), or holds
    something else (`[6]`), which every reader's `.get` would fail on."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_json(path: str, record) -> None:
    write_text(path, json.dumps(record, indent=2))
