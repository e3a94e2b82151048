"""The exception types for user mistakes: reported as one sentence and an exit code, never as a traceback.

Every message the zoo prints is catalogued, with the input that causes it, in docs/errors.md.
"""
import sys

from hydra.errors import CompactHydraException

from zoo.startup import Terminated


class UserError(CompactHydraException):
    """A setting, file or directory the user must change; the message names it. (A Hydra compact exception:
    where Hydra itself reports one, e.g. a multirun's failed job at the end of the sweep, it prints the message
    alone, without a traceback.)"""

    exit_code = 2


class RunRefused(UserError):
    """The command's run directory holds a run this command may not train on (another run's, or its own with
    other settings); the directory is left as it was, and a sweep writes no failure.json into it."""


class Interrupted(UserError):
    """Ctrl-C at a moment where nothing half-done is kept (e.g. while a dataset is being prepared)."""

    exit_code = 130  # 128 + SIGINT, what shells report for Ctrl-C

    def __init__(self, message: str, stop: KeyboardInterrupt | None = None):
        """`stop`: what interrupted it; a SIGTERM (zoo.startup.Terminated) exits 143, 128 + SIGTERM."""
        super().__init__(message)
        if isinstance(stop, Terminated):
            self.exit_code = 143


class ProcessesNotJoined(UserError):
    """The processes of a multi-process run did not all join in time. JAX's client still waits for them in a
    thread, which no Python call ends: the command exits without finalising Python, whose teardown beside that
    thread logs the coordinator's shutdown after the sentence, for seconds."""


def brief(e: BaseException) -> str:
    """'TypeName: the first line of its message' (200 characters at most), for a sentence that names a library's
    error without its traceback."""
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def exit_with(error: UserError):
    """End the command with the error's one sentence on stderr and its exit code. The exit carries the error as its
    cause, so a sweeper that records why a batch never ran records the sentence, not `SystemExit: 2`."""
    print(f"error: {error}", file=sys.stderr)
    raise SystemExit(error.exit_code) from error
