"""Each member's train.log, as its solo run writes it: the group's shared lines and the member's own ones.

A population trains before Hydra's run_job sets up each job's logging, so while it trains every member that
opened its run directory gets a handler of its own on <run dir>/<job name>.log. What the group logs once (the
model summary, its progress) goes to all of them; what is logged inside `member_lines(run_dir)` (a member's
resume, early stop, final metrics and run directory) goes to that member's file only.
"""
import contextlib
import contextvars
import logging
import os

from omegaconf import OmegaConf

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


class MemberLogs:
    """`hydra_cfg`: a member's Hydra config (None: no files, as when train_population is called directly)."""

    def __init__(self, hydra_cfg) -> None:
        file_logging = hydra_cfg is not None and OmegaConf.select(hydra_cfg, "job_logging.handlers.file")
        self.name = f"{hydra_cfg.job.name}.log" if file_logging else None
        self.format = OmegaConf.select(hydra_cfg, "job_logging.formatters.simple.format", default=FORMAT) \
            if file_logging else FORMAT
        self.handlers = {}

    def open(self, run_dir: str) -> None:
        if self.name is None:
            return
        os.makedirs(run_dir, exist_ok=True)
        handler = logging.FileHandler(os.path.join(run_dir, self.name))  # appended to, as run_job's is later
        handler.setFormatter(logging.Formatter(self.format))
        handler.addFilter(_SharedOrOwn(run_dir))
        logging.getLogger().addHandler(handler)
        self.handlers[run_dir] = handler

    def close(self, run_dir: str) -> None:
        handler = self.handlers.pop(run_dir, None)
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()

    def close_all(self) -> None:
        for run_dir in list(self.handlers):
            self.close(run_dir)
