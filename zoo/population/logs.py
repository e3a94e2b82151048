"""Each member's train.log, as its solo run writes it: the group's shared lines and the member's own ones.

A population trains before Hydra's run_job sets up each job's logging, so while it trains every member's
<run dir>/train.log gets a handler of its own. What the group logs once (the model summary, its progress) goes
to all of them; what is logged inside `member_lines(run_dir)` (a member's resume, final metrics and run
directory) goes to that member's file only.
"""
import contextlib
import contextvars
import logging
import os

FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's default job_logging format
_member = contextvars.ContextVar("zoo_population_member", default=None)


@contextlib.contextmanager
def member_lines(run_dir: str):
    token = _member.set(os.path.abspath(run_dir))
    try:
        yield
    finally:
        _member.reset(token)


class _SharedOrOwn(logging.Filter):
    def __init__(self, run_dir: str):
        super().__init__()
        self.run_dir = os.path.abspath(run_dir)

    def filter(self, record) -> bool:
        return _member.get() in (None, self.run_dir)


@contextlib.contextmanager
def member_log_files(run_dirs: list, log_format: str = FORMAT, name: str = "train.log"):
    root, handlers = logging.getLogger(), []
    try:
        for run_dir in run_dirs:
            os.makedirs(run_dir, exist_ok=True)
            handler = logging.FileHandler(os.path.join(run_dir, name))
            handler.setFormatter(logging.Formatter(log_format))
            handler.addFilter(_SharedOrOwn(run_dir))
            root.addHandler(handler)
            handlers.append(handler)
        yield
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
