"""Each member's train.log, as its solo run writes it: the group's shared lines and the member's own ones.

A population trains before Hydra's run_job sets up each job's logging, so while it trains every member that
opened its run directory gets a handler of its own on each file its hydra.job_logging names: by default
<job dir>/<job name>.log, in its Hydra job directory even where paths.output_dir is set apart, as run_job's
handler writes a solo job's. What the group logs once (the model summary, its progress) goes to all of them;
what is logged inside `member_lines(run_dir)` (a member's resume, early stop, final metrics and run directory)
goes to that member's files only.
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
    def __init__(self) -> None:
        self.handlers = {}

    def open(self, run_dir: str, hydra_cfg) -> None:
        """The files the member's Hydra config `hydra_cfg` logs to (none when it is None, as when train_population
        is called directly), each taking the group's lines and those logged in member_lines(run_dir)."""
        for filename, fmt in _log_files(hydra_cfg):
            os.makedirs(os.path.dirname(os.path.abspath(filename)), exist_ok=True)
            handler = logging.FileHandler(filename)  # appended to, as run_job's is later
            handler.setFormatter(logging.Formatter(fmt))
            handler.addFilter(_SharedOrOwn(run_dir))
            logging.getLogger().addHandler(handler)
            self.handlers.setdefault(run_dir, []).append(handler)

    def close(self, run_dir: str) -> None:
        for handler in self.handlers.pop(run_dir, []):
            logging.getLogger().removeHandler(handler)
            handler.close()

    def close_all(self) -> None:
        for run_dir in list(self.handlers):
            self.close(run_dir)


def _log_files(hydra_cfg) -> list:
    """(file name, format) of each file handler of the job's hydra.job_logging, resolved for that job."""
    logging_cfg = OmegaConf.select(hydra_cfg, "job_logging") if hydra_cfg is not None else None
    conf = OmegaConf.to_container(logging_cfg, resolve=True) if logging_cfg else {}
    formatters = conf.get("formatters") or {}
    return [(str(handler["filename"]), (formatters.get(handler.get("formatter")) or {}).get("format", FORMAT))
            for handler in (conf.get("handlers") or {}).values() if "filename" in (handler or {})]
