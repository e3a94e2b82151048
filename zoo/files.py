"""Files that readers never see half-written: each is written beside its path, then renamed over it."""
import contextlib
import json
import os
import socket
import threading

_HOST = socket.gethostname()


@contextlib.contextmanager
def replacing(path: str):
    """Yields a path to write instead of `path`; on success it replaces `path`, on failure it is removed. The name
    is the host's, process's and thread's own: several processes may update one file (a sweep's summary under a
    parallel launcher, on several machines under SLURM). What a killed process (kill -9) left beside `path` is
    removed first."""
    _remove_abandoned_staging(path)
    staging = f"{path}.{_HOST}-{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        yield staging
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def _remove_abandoned_staging(path: str) -> None:
    """Remove the staging files of `path` written on this host by processes that no longer run. Another host's are
    left alone: its process ids mean nothing here."""
    folder, name = os.path.split(os.path.abspath(path))
    prefix = f"{name}.{_HOST}-"
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for n in names:
        pid = n[len(prefix):-len(".tmp")].split("-")[0]
        if pid.isdigit() and not process_runs(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, n))


def process_runs(pid: int) -> bool:
    """Whether process `pid` runs on this machine (this one's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's process
        return True
    return True


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
