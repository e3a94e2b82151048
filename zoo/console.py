"""The commands' console log handler (conf/hydra/*_logging): Hydra's own, less a traceback per line when the console
cannot be written."""
import contextlib
import logging
import os
import sys


class Console(logging.StreamHandler):
    """logging.StreamHandler, except when its stream cannot be written (`> /dev/full`, a closed pipe): logging would
    print a traceback for that line and every one after it. Instead this says so once on stderr and writes no more
    there (nor does any handler of the same stream that Hydra configures for a sweep's later jobs); the command goes
    on, and the log file Hydra keeps in the run directory (when configured) has every line."""

    lost = {}  # id of each stream found unwritable in this process -> why

    def emit(self, record):
        if id(self.stream) not in self.lost:
            super().emit(record)

    def handleError(self, record):
        error = sys.exc_info()[1]
        if id(self.stream) in self.lost or not isinstance(error, OSError):
            return super().handleError(record)
        why = self.lost[id(self.stream)] = error.strerror or str(error)
        discard(self.stream)
        if self.stream is sys.stderr:
            return  # nowhere left to say it
        name = getattr(self.stream, "name", "the console")
        name = {"<stdout>": "stdout", "<stderr>": "stderr"}.get(name, name)
        files = [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
        rest = f"; the whole log is in {files[0]}" if files else ""
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"warning: the log cannot be written to {name} ({why}), so it is no longer written "
                             f"there{rest}.\n")


def unwritable(stream):
    """Why a Console found `stream` unwritable in this process, else None: its file descriptor then leads to
    os.devnull, where a command's result would vanish without a word (zoo.cli.write_stdout asks first)."""
    return Console.lost.get(id(stream))


def discard(stream) -> None:
    """Lead `stream`'s file descriptor to os.devnull once it cannot be written: what it still buffers would fail
    again as Python exits (`Exception ignored ... OSError`, exit 120). Nothing for a stream without a descriptor."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
