"""The thin layer between Hydra and train()/evaluate(): user mistakes become one sentence and an exit code.

Exit codes: 0 done, 1 Hydra refused the command line (its own message) or an unexpected I/O error, 2 a
setting to change (zoo.errors.UserError) or a file in the way, 128+N stopped by signal N (130: Ctrl-C).
docs/errors.md lists them all.
`HYDRA_FULL_ERROR=1` shows the traceback behind exit 1 and a task's exit 2 (exit 1 then); a refusal before the task
(exit_with) and stops keep their line and code.
"""
import contextlib
import contextvars
import errno
import fcntl
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from zoo import run_record
from zoo.console import discard, unwritable
from zoo.errors import Interrupted, ProcessesNotJoined, RunRefused, UserError, exit_with
from zoo.run_dirs import holds_steps, holds_training_run, refuse_inside_a_runs_folder, run_whose_checkpoints_hold
from zoo.preemption import (STUDY_IN_MEMORY, Preempted, interrupt_of, interrupts_remembered, raise_a_lost_interrupt,
                            study_in_memory)
from zoo.startup import Terminated, stops_on_sigterm_as_on_ctrl_c


def new_run_dir(out_dir: str | None = None) -> str:
    """The setting that gives the command a run directory of its own: a multirun's jobs live in hydra.sweep.dir;
    a run whose outputs go to `out_dir` moves with run_dir_setting(out_dir). A sweep whose earlier job ran in
    `out_dir` gives its jobs one directory (shared_job_dir)."""
    if out_dir and (shared := shared_job_dir(out_dir)):
        return shared
    if out_dir and _apart_from_job_dir(out_dir):
        return "paths.output_dir"
    return "hydra.sweep.dir" if in_multirun() else "hydra.run.dir"


def shared_job_dir(out_dir: str) -> str | None:
    """In a sweep whose earlier job ran in `out_dir` (a hydra.sweep.subdir without the job number, or one
    paths.output_dir for all): the setting that gives each job its own directory, which a new hydra.sweep.dir
    would not. Else None."""
    if not in_multirun() or os.path.realpath(out_dir) not in _sweep_job_dirs:
        return None
    setting = "paths.output_dir" if _apart_from_job_dir(out_dir) else "hydra.sweep.subdir"
    return f"{setting} that holds ${{hydra.job.num}} (this sweep's jobs share one directory)"


def run_dir_setting(out_dir: str) -> str:
    """The setting that put a run's outputs in `out_dir`: hydra.run.dir, or paths.output_dir where a command set it
    apart from its Hydra run directory (a new hydra.run.dir would then find the same run again)."""
    return "paths.output_dir" if _apart_from_job_dir(out_dir) else "hydra.run.dir"


def _apart_from_job_dir(out_dir: str) -> bool:
    """Whether `out_dir` is not the current job's Hydra run directory (a paths.output_dir set apart from it). In a
    multirun: whether it lies outside the sweep's directory, which holds every job's (a population's members are
    not Hydra's current job)."""
    if not HydraConfig.initialized():
        return False
    hydra = HydraConfig.get()
    out_dir = os.path.realpath(out_dir)
    if in_multirun():
        sweep_dir = os.path.realpath(hydra.sweep.dir)
        return os.path.commonpath([out_dir, sweep_dir]) != sweep_dir
    return out_dir != os.path.realpath(hydra.runtime.output_dir)


def named_run_dir(out_dir: str) -> str:
    """'hydra.run.dir=DIR' (or 'paths.output_dir=DIR'), as refusals name the run directory they found."""
    return f"{run_dir_setting(out_dir)}={out_dir}"


_member_job = contextvars.ContextVar("zoo_member_job", default=None)


@contextlib.contextmanager
def as_job(hydra_cfg):
    """Inside, the current job is the one whose Hydra node is `hydra_cfg` (None: as outside): a population works
    on its members' runs while Hydra's current job is none of theirs."""
    token = _member_job.set(hydra_cfg)
    try:
        yield
    finally:
        _member_job.reset(token)


def in_multirun(hydra_cfg=None) -> bool:
    """True inside a job of a Hydra multirun (python train.py -m ...); `hydra_cfg`: that job's Hydra node
    (default: the current job's)."""
    hydra_cfg = hydra_cfg if hydra_cfg is not None else _member_job.get()
    if hydra_cfg is None:
        if not HydraConfig.initialized():
            return False
        hydra_cfg = HydraConfig.get()
    return hydra_cfg.mode == RunMode.MULTIRUN


def _full_errors() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


RECORD_BYTES = 64 * 1024  # more than a run's .hydra/ record and first log lines, written before the task starts


def unwritable_reason(path: str):
    """None if `path` is (made) a directory we can write a file into, else why not ('Not a directory', ...). The
    file takes RECORD_BYTES: an empty one fits on a full disk, where Hydra's record would then fail."""
    if os.path.isfile(path):  # else 'File exists', which reads as if the directory were there
        return "it is a file"
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path) as f:
            f.write(bytes(RECORD_BYTES))
            f.flush()
            return None
    except OSError as e:  # a file in the way, no permission, read-only or full file system
        return e.strerror or str(e)


def launch_dir_path(path: str) -> str:
    """A path setting as the user meant it: `~` as the shell would expand it, and relative to the directory the
    command was run from, which hydra.job.chdir=true leaves for the run directory. Otherwise unchanged."""
    path = os.path.expanduser(path)
    if not HydraConfig.initialized() or os.path.isabs(path):
        return path
    launch_dir = HydraConfig.get().runtime.cwd
    return path if os.path.realpath(launch_dir) == os.path.realpath(os.getcwd()) else os.path.join(launch_dir, path)


def require_dir(path: str, setting: str, holding: str) -> None:
    """One sentence when `path` (the value of `setting`) is not a directory: it is missing, or a file (one of a
    run's, its results.json or export/model.jax, names the run, as a folder inside a run does)."""
    if os.path.isdir(path):
        return
    run = _run_holding_the_file(path)
    if run:
        raise UserError(f"{setting}={path} is a file inside a run; pass the run's directory, {setting}={run}.")
    why = "is a file, not a directory" if os.path.exists(path) else "does not exist"
    raise UserError(f"{setting}={path} {why}; pass the directory of {holding}.")


def _run_holding_the_file(path: str, depth: int = 3):
    """The training run that holds the file `path`, `depth` folders up at most (its checkpoints/ at any depth),
    else None."""
    if not os.path.isfile(path):
        return None
    run = run_whose_checkpoints_hold(path)
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(depth):
        if run or os.path.dirname(folder) == folder:
            break
        run = folder if holds_training_run(folder) else None
        folder = os.path.dirname(folder)
    return run


def check_writable(path: str, setting: str) -> None:
    reason = unwritable_reason(path)
    if reason == os.strerror(errno.ENOSPC):
        raise UserError(f"{setting}={path} has no space left; free space there or set {setting} to another directory.")
    if reason:
        raise UserError(f"{setting}={path} is not writable ({reason}); set {setting} to a directory you can write.")


class RunDirCheck(Callback):
    """Hydra creates the run directory before the task starts and reports a failure as a traceback; this
    callback (conf: hydra.callbacks.run_dir_check) checks it first and exits with one sentence instead. It holds
    the directory for the command (two commands started in the same second get the same default one), refuses a
    training run's directory to a command that only reads runs (`reads_runs`: eval.py, export.py; Hydra would
    replace that run's .hydra/ record with the command's), and keeps the .hydra/ files a run directory already
    holds, for a refused command to put back. It also refuses a directory inside a run's checkpoints/ and one
    where a file or directory is in the way of Hydra's own .hydra/ and log."""

    def __init__(self, reads_runs: bool = False):
        self.reads_runs = reads_runs

    def on_run_start(self, config, **kwargs) -> None:
        # ${now:...} is a cached resolver on this very config object, so Hydra then uses the same directory.
        run_dir = str(config.hydra.run.dir)
        _exit_if_inside_a_runs_folder(run_dir, "hydra.run.dir")
        _exit_if_unwritable(run_dir, "hydra.run.dir")
        _exit_if_in_the_way(run_dir, config, "hydra.run.dir")
        if os.path.isfile(os.path.join(run_dir, "multirun.yaml")):  # the summary stops at the first job dir down
            exit_with(UserError(f"hydra.run.dir={run_dir} is a multirun's directory, whose summary would list this run "
                                "in place of its jobs; choose another hydra.run.dir."))
        if self.reads_runs and holds_training_run(run_dir):
            exit_with(UserError(f"hydra.run.dir={run_dir} holds a training run, whose .hydra/ record this command "
                                "would replace; leave hydra.run.dir unset or choose a directory without a run."))
        elsewhere = _output_dir_elsewhere(config, run_dir)
        if elsewhere and holds_training_run(run_dir):  # the record would describe a run trained elsewhere
            exit_with(UserError(f"hydra.run.dir={run_dir} holds a training run, whose .hydra/ record this command "
                                f"would replace while it trains in paths.output_dir={elsewhere}; choose a "
                                "hydra.run.dir without a run, or leave paths.output_dir unset to train that run."))
        _exit_if_in_use(run_dir, "hydra.run.dir", config)
        run_record.remember(run_dir, config.hydra.output_subdir)

    def on_multirun_start(self, config, **kwargs) -> None:
        from zoo.sweeps.plugin_settings import refusal

        refused = refusal(config)
        if refused is not None:  # before Hydra builds the sweeper and launcher, and the sweep dir is made
            exit_with(refused)
        _exit_if_no_jobs(config)  # before the sweep dir is made: nothing would go into it
        _exit_if_submitit_cannot_run(config)
        _check_each_jobs_dir_as_it_starts()
        _id_folders[:] = _submitit_id_folders(config)
        _exit_if_inside_a_runs_folder(config.hydra.sweep.dir, "hydra.sweep.dir")  # its jobs' dirs lie below it
        _sweep_dirs_made[:] = _missing_dirs(str(config.hydra.sweep.dir))
        _exit_if_unwritable(config.hydra.sweep.dir, "hydra.sweep.dir")
        sweep = str(config.hydra.sweep.dir)
        own_job_at_root = _holds_its_own_job(sweep, config)
        # a job's record, as report.find_job_dirs tells one
        if os.path.isfile(os.path.join(sweep, ".hydra", "overrides.yaml")) and not own_job_at_root:
            exit_with(UserError(f"hydra.sweep.dir={sweep} holds a run, which this sweep's summary would list in place "
                                "of its jobs; choose another hydra.sweep.dir."))
        _exit_if_in_use(sweep, "hydra.sweep.dir", config)
        if own_job_at_root:
            _exit_if_in_the_way(sweep, config, "hydra.sweep.dir")
            run_record.remember(sweep, config.hydra.output_subdir)
        global _sweep_dir, _study_in_memory
        _sweep_dir = os.path.abspath(sweep)
        _study_in_memory = study_in_memory(config.hydra)
        _sweep_job_dirs.clear()
        numbered = numbered_job_dirs(config)
        for job in os.listdir(sweep):  # a rerun in the same sweep dir: its jobs' dirs
            if numbered and job.isdigit() and os.path.islink(os.path.join(sweep, job)):
                exit_with(_linked_job_dir(os.path.join(sweep, job), job, "hydra.sweep.dir"))
            if numbered and job.isdigit() and not os.path.isdir(os.path.join(sweep, job)):
                exit_with(UserError(f"something is in the way at {os.path.join(sweep, job)} (a file where job {job} "
                                    "of a sweep keeps its run); move it, or choose another hydra.sweep.dir."))
            _exit_if_in_the_way(os.path.join(sweep, job), config, "hydra.sweep.dir")
            run_record.remember(os.path.join(sweep, job), config.hydra.output_subdir)

    def on_job_end(self, config, job_return, **kwargs) -> None:
        """A later job of this sweep given the same directory (a hydra.sweep.subdir without the job number) and
        refused puts back this job's record, not the one the directory held before the command."""
        if config.hydra.mode == RunMode.MULTIRUN:
            out_dir = OmegaConf.select(config, "paths.output_dir", throw_on_resolution_failure=False)
            _sweep_job_dirs.add(os.path.realpath(str(out_dir or config.hydra.runtime.output_dir)))
        subdir = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
        if config.hydra.mode == RunMode.MULTIRUN and "hydra.job.num" not in str(subdir):  # else one dir a job
            run_record.remember(config.hydra.runtime.output_dir, config.hydra.output_subdir)


def _output_dir_elsewhere(config, run_dir: str):
    """paths.output_dir where a train config sets it to another directory than hydra.run.dir, else None (the
    default, ${hydra:runtime.output_dir}, is the run dir; Hydra sets it only once the job starts)."""
    paths = config.get("paths")
    raw = OmegaConf.to_container(paths, resolve=False).get("output_dir") if isinstance(paths, DictConfig) else None
    if raw is None or raw == "${hydra:runtime.output_dir}":
        return None
    out_dir = OmegaConf.select(config, "paths.output_dir", throw_on_resolution_failure=False)
    if out_dir is None:
        return None
    same = os.path.realpath(launch_dir_path(str(out_dir))) == os.path.realpath(launch_dir_path(run_dir))
    return None if same else str(out_dir)


def _exit_if_no_jobs(config) -> None:
    """Hydra's basic sweeper runs the product of its sweeps' values: one sweep without any (range(0), a glob that
    matches no option) gives a multirun of no jobs, which ended in exit 0 and an empty summary, and an interval, which
    it cannot enumerate, a HydraException traceback once the sweep dir was made. Other sweepers check their own
    search spaces."""
    if "BasicSweeper" not in str(OmegaConf.select(config, "hydra.sweeper._target_", default="")):
        return
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.to_container(OmegaConf.select(config, "hydra.sweeper.params") or OmegaConf.create())
    # as written: `seed=${hydra:job.num}` resolves only in a job (before, the checks of the sweep's start ended here)
    lines = [f"{key}={value}" for key, value in params.items()] + OmegaConf.to_container(config.hydra.overrides.task)
    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
    by_key = {o.get_key_element(): o for o in OverridesParser.create(config_loader=loader).parse_overrides(lines)}
    from zoo.sweeps.search_space import zero_step

    for override in by_key.values():  # as the sweeper does: a key's last override replaces its earlier ones
        if (refused := zero_step(override)) is not None:
            exit_with(refused)
        if override.is_interval_sweep():
            exit_with(UserError(f"{override.input_line} is an interval, which only an Optuna search draws from "
                                "(hparams_search=...); list the grid's values (key=a,b,c) or give a "
                                "range(start,stop)."))
        if override.is_discrete_sweep() and not any(True for _ in override.sweep_string_iterator()):
            exit_with(UserError(f"{override.input_line} sweeps over no values, so the multirun would run no jobs; "
                                "give it at least one value."))


def _exit_if_submitit_cannot_run(config) -> None:
    """hydra/launcher=submitit_local or submitit_slurm settings under which no trial runs (a submitit_folder it
    cannot make too): submitit reported them after the sweep had begun, in a traceback (or, tasks_per_node=2 under
    submitit_local, ran the trial twice at once and never ended)."""
    launcher = OmegaConf.select(config, "hydra.launcher", default=None)
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
    if launcher is None or "hydra_submitit_launcher" not in target:
        return
    local = target.endswith("LocalLauncher")
    timeout = launcher.get("timeout_min")
    if timeout is not None and timeout < (1 if local else 0):  # SLURM's --time=0 is no limit
        exit_with(UserError(f"hydra.launcher.timeout_min={timeout} gives each trial no time (submitit ends its job "
                            "after that many minutes); set it to 1 or more."))
    for key in ("nodes", "tasks_per_node"):
        value = launcher.get(key)
        if value is not None and value < 1:
            exit_with(UserError(f"hydra.launcher.{key}={value} starts no process for a trial; set it to 1 or more."))
        if local and value is not None and value != 1:
            exit_with(UserError(f"hydra.launcher.{key}={value} cannot be given by hydra/launcher=submitit_local, which "
                                "runs each trial as one process on this machine; set it to 1."))
    if not local and shutil.which("srun") is None:  # submitit's own test, made once the sweep has begun
        exit_with(UserError("hydra/launcher=submitit_slurm needs SLURM (its srun command), which is not on this "
                            "machine's PATH; run the sweep on a node of the cluster, or use "
                            "hydra/launcher=submitit_local to run it here."))
    folder = str(launcher.get("submitit_folder") or "")
    fixed = os.path.abspath(os.path.dirname(folder.split("%")[0]) if "%" in folder else folder)  # %j: the job's id
    sweep = os.path.abspath(str(config.hydra.sweep.dir))
    if not folder or os.path.commonpath([fixed, sweep]) == sweep:
        return  # the default, inside the sweep dir: checked with it, and made as its first job starts
    reason = unwritable_reason(fixed)
    if reason:
        exit_with(UserError(f"hydra.launcher.submitit_folder={folder} is not writable ({reason}); set it to a "
                            "directory you can write."))


_id_folders = []  # this process's sweep's: hydra.launcher.submitit_folder's folders named by an id tag, deepest first


def _submitit_id_folders(config) -> list:
    """The folders of hydra.launcher.submitit_folder whose names hold one of submitit's id tags (%j in the default
    `${hydra.sweep.dir}/.submitit/%j`). submitit makes the folder under the template's own name before it fills in
    each job's id, and leaves that `%j` folder empty beside the jobs' own."""
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default=""))
    folder = str(OmegaConf.select(config, "hydra.launcher.submitit_folder", default="") or "")
    if "hydra_submitit_launcher" not in target or not folder:
        return []
    tagged, path = [], os.path.abspath(folder)
    while any(tag in os.path.basename(path) for tag in ("%j", "%t", "%A", "%a")):
        tagged.append(path)
        path = os.path.dirname(path)
    return tagged


def _remove_empty(folders: list) -> None:
    """Each of `folders` (deepest first) while it is empty; the first that is not, and those above it, stay."""
    for path in folders:
        try:
            os.rmdir(path)  # an empty one only
        except OSError:
            break


def _holds_its_own_job(sweep: str, config) -> bool:
    """A sweep run with hydra.sweep.subdir=. keeps its job's run at its root, beside multirun.yaml: that sweep run
    again there goes on as any sweep's rerun does. (A single run refuses a multirun's directory as its own.)"""
    subdir = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
    return os.path.normpath(str(subdir)) == "." and os.path.isfile(os.path.join(sweep, "multirun.yaml"))


def numbered_job_dirs(config) -> bool:
    """Whether a sweep's job folders are named by job number alone (Hydra's default hydra.sweep.subdir)."""
    return OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir") == "${hydra.job.num}"


def _exit_if_inside_a_runs_folder(path: str, setting: str) -> None:
    try:
        refuse_inside_a_runs_folder(path, setting)
    except UserError as e:
        exit_with(e)


def _exit_if_unwritable(path: str, setting: str) -> None:
    try:
        check_writable(path, setting)
    except UserError as e:
        exit_with(e)


def _exit_if_in_the_way(run_dir: str, config, setting: str) -> None:
    """Hydra writes <run dir>/.hydra/ and <job name>.log before the task starts, and reports a file or directory
    already in their place as a traceback."""
    error = _in_the_way(run_dir, config, setting)
    if error is not None:
        exit_with(error)


def _in_the_way(run_dir: str, config, setting: str) -> UserError | None:
    record = OmegaConf.select(config, "hydra.output_subdir")
    handlers = OmegaConf.select(config, "hydra.job_logging.handlers") or {}
    log_file = os.path.join(run_dir, f"{OmegaConf.select(config, 'hydra.job.name')}.log")
    if record is not None and os.path.lexists(os.path.join(run_dir, record)) \
            and not os.path.isdir(os.path.join(run_dir, record)):
        obstacle, why = os.path.join(run_dir, record), "a file where Hydra keeps the run's record"
    elif any("filename" in h for h in handlers.values()) and os.path.isdir(log_file):
        obstacle, why = log_file, "a directory where Hydra writes the command's log"
    else:
        return None
    return UserError(f"something is in the way at {obstacle} ({why}); move it, or choose another {setting}.")


def _linked_job_dir(job_dir: str, job, setting: str) -> UserError:
    """A sweep's job continues the run its directory holds: through a link, another sweep's run (its records
    rewritten under this sweep's settings)."""
    return UserError(f"{job_dir}, where job {job} of the sweep keeps its run, is a link to "
                     f"{os.path.realpath(job_dir)}; a job writes in a directory of its own: remove the link, or choose "
                     f"another {setting}.")


def jobs_dir_blocked(job) -> UserError | None:
    """Why `job` (a sweep's job config, its number set) cannot start, where something is in the way. Hydra makes
    the job's directory (hydra.sweep.dir / hydra.sweep.subdir) as the job starts and reports a file in its way, or
    in the way of its .hydra/ record and log, as a traceback. The sweep's start checks the default subdirs, the job
    numbers; a subdir of the user's own (`x_${hydra.job.num}`) is known only once its job is composed."""
    job_dir = os.path.join(str(job.hydra.sweep.dir), str(job.hydra.sweep.subdir))
    if os.path.islink(os.path.normpath(job_dir)):
        return _linked_job_dir(job_dir, job.hydra.job.num, "hydra.sweep.subdir")
    obstacle = job_dir
    while not os.path.lexists(obstacle) and os.path.dirname(obstacle) not in ("", obstacle):
        obstacle = os.path.dirname(obstacle)  # mkdir(parents=True) stops at the first file on its way down
    if os.path.lexists(obstacle) and not os.path.isdir(obstacle):
        return UserError(f"something is in the way at {obstacle} (a file where job {job.hydra.job.num} of a sweep "
                         "keeps its run); move it, or choose another hydra.sweep.subdir.")
    return _in_the_way(job_dir, job, "hydra.sweep.subdir")


def _check_each_jobs_dir_as_it_starts() -> None:
    """Hydra's basic launcher composes each job just before its run_job makes the job's directory, and offers no
    hook in between: its module's run_job is wrapped to check that directory first."""
    from hydra._internal.core_plugins import basic_launcher

    run_job = basic_launcher.run_job
    if getattr(run_job, "checks_the_jobs_dir", False):
        return

    def checked_run_job(*args, **kwargs):
        config = kwargs.get("config")
        error = jobs_dir_blocked(config) if config is not None and kwargs.get("job_subdir_key") else None
        if error is not None:
            exit_with(error)
        return run_job(*args, **kwargs)

    checked_run_job.checks_the_jobs_dir = True
    basic_launcher.run_job = checked_run_job


_held = {}  # directory -> the open descriptor whose lock holds it until this process ends


def _exit_if_in_use(path: str, setting: str, config) -> None:
    """Lock the directory for this process, or exit: another command running now writes into it. The processes
    of a multi-process run (distributed != none) share their directory, so they take no lock."""
    path = os.path.abspath(path)
    if OmegaConf.select(config, "distributed.mode", default="none") == "none" and not _hold(path):
        exit_with(UserError(f"{setting}={path} is in use by another command running now (commands started in the "
                            f"same second share the default one); choose another {setting}."))


def _hold(path: str) -> bool:
    """Lock `path` (an existing directory) until this process ends; False if another process holds it."""
    if path in _held:
        return True
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:  # a file system without locks: nothing to hold
        os.close(fd)
        return True
    _held[path] = fd
    return True


def in_use_now(path: str) -> bool:
    """Whether another command running now holds the directory `path` (_hold: a training run holds its own while it
    runs), probed without holding it."""
    if os.path.abspath(path) in _held:  # this process's own
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: nothing known
        return False
    finally:
        os.close(fd)  # and the shared lock with it
    return False


def hold_output_dir(output_dir: str, cfg) -> str | None:
    """RunDirCheck holds hydra.run.dir (a multirun: hydra.sweep.dir, its jobs' dirs below it); a paths.output_dir
    set apart from the job's directory is held here, a multirun's job's too, else two commands with the same one
    would write one run's checkpoints and results.json together. Returns the directory if this call took it."""
    path = os.path.abspath(output_dir)
    if not _apart_from_job_dir(output_dir) or cfg.distributed.mode != "none" or path in _held:
        return None
    if not _hold(path):
        raise UserError(f"paths.output_dir={output_dir} is in use by another command running now; choose another "
                        "paths.output_dir.")
    return path


def release_output_dir(path: str) -> None:
    with contextlib.suppress(KeyError):  # a file system without locks: nothing was held
        os.close(_held.pop(path))


def quiet_libraries() -> None:
    for noisy in ("absl", "jax"):  # library chatter (TPU probing, orbax internals) stays out of run logs
        logging.getLogger(noisy).setLevel(logging.ERROR)


def run_task(fn, cfg):
    """Call fn(cfg); return its objective for sweepers. In a sweep an error fails only this trial."""
    global _task_began
    _task_began = True
    quiet_libraries()
    # train only; eval checks its run_dir itself. None where it does not resolve, refused below
    output_dir = OmegaConf.select(cfg, "paths.output_dir", throw_on_resolution_failure=False)
    held = None
    try:
        check_resolvable(cfg)
        if output_dir is not None:  # an empty one would write checkpoints/ into the working directory
            refuse_inside_a_runs_folder(output_dir, "paths.output_dir")  # hydra.run.dir's is checked by RunDirCheck
            check_writable(output_dir, "paths.output_dir")
            held = hold_output_dir(output_dir, cfg)
        with interrupts_remembered():
            return fn(cfg).get("objective")
    except BaseException as e:
        # ended before the run opened its outputs (refused, stopped, a failed write): the directory keeps the
        # .hydra/ record it had; once opened, the record is the run's own and this puts nothing back
        run_record.restore(output_dir)
        ended = _ended_by_its_time_limit(e)
        if ended is not None:
            raise ended from e
        exit_if_a_process_is_lost(e, output_dir)
        _exit_if_the_users(e, _where_it_resumes(cfg, output_dir))
        raise
    finally:
        if held and in_multirun():  # a sweep of many jobs would hold a descriptor for each until it ends
            release_output_dir(held)


def check_resolvable(cfg) -> None:
    """A setting given as an interpolation that does not resolve (seed=${oc.env:SEED} with SEED unset,
    trainer.epochs=${oc.env:HOME}) ended in OmegaConf's traceback wherever the zoo first read it."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        key = e.full_key or ""
        parent_key, _, name = key.rpartition(".")
        try:
            raw = (OmegaConf.select(cfg, parent_key) if parent_key else cfg)._get_node(name)._value()
        except Exception:  # a key OmegaConf names in another form (a list's item): its interpolation goes unsaid
            raw = None
        reason = str(e.msg or e).splitlines()[0]
        # OmegaConf's wrapping says what was resolved, which the sentence says already
        reason = re.sub(r"^(\w+ raised while resolving interpolation|While dereferencing interpolation '.*?'): ", "",
                        reason).strip('"')
        raise UserError(f"{key}{'=' + str(raw) if raw is not None else ''} cannot be resolved: {reason}; give {key} "
                        "a value that resolves.") from e


def complete_despite_sigterm() -> None:
    """A single run is complete once its task returns, its results written: a SIGTERM while the process exits
    (Hydra's end callbacks, the interpreter's shutdown) ended it with 143, as if it had been stopped. It now ends
    the process at once with 0 (not ignored: an exit that hangs must still yield to it). A multirun's next job must
    still stop on one."""
    if not in_multirun():
        signal.signal(signal.SIGTERM, _exit_complete)


def write_stdout(text: str, refusal) -> None:
    """Write a command's result to stdout. When it cannot be (`>` a full disk, a closed pipe), the command ends in
    one sentence, `refusal(reason)`, which says where the result is (or how to get it whole); stdout is then
    discarded: what it still buffers would fail again as Python exits, a second report after that sentence."""
    lost = unwritable(sys.stdout)  # by the log's console before: the result would now go to os.devnull
    if lost:
        raise UserError(refusal(lost))
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as e:
        discard(sys.stdout)
        raise UserError(refusal(e.strerror or str(e))) from None


@contextlib.contextmanager
def written_whole():
    """Around the write that completes a command that reads runs (eval.py's results, export.py's swap of export/,
    predict.py's predictions): a stop signal Python lost stops it first; one that comes while it writes lets the
    write finish (a second stops it at once), and once it is written the command is complete: a stop signal then
    ends it at once with 0, where it said nothing had been written. A write that fails leaves the signals as they
    were."""
    raise_a_lost_interrupt()
    if not stops_on_sigterm_as_on_ctrl_c() or threading.current_thread() is not threading.main_thread() or \
            in_multirun():  # a sweep's next job still stops on one, as before
        yield  # nor a reading command's own process (a test calling the task), nor handlers to set here
        return
    came = []

    def wait_for_the_write(signum, frame):
        if came:  # a second one stops it at once (a write that hangs: a full pipe, a stalled file system)
            raise interrupt_of(signum)
        came.append(signum)

    previous = {s: signal.signal(s, wait_for_the_write) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BaseException:
        for s, h in previous.items():
            signal.signal(s, h)
        raise
    for s in previous:
        signal.signal(s, _exit_complete)
    if came:
        _exit_complete(came[0], None)


def _exit_complete(signum, frame) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed or broken: nothing left to say there
            stream.flush()
    os._exit(0)


def _ended_by_its_time_limit(e: BaseException) -> UserError | None:
    """The sentence for a job that submitit ended at hydra.launcher.timeout_min, else None. submitit signals the job
    shortly before its time limit and, with no requeue left, raises its UncompletedJobError inside the task: the
    sweep ended in that traceback, which names no setting. Raised in the middle of a checkpoint write, it can be
    followed by another error while the run closes its outputs; the time limit is then that error's context, and
    still what ended the job."""
    utils = sys.modules.get("submitit.core.utils")  # imported by the job's own process only when submitit runs it
    chain = []
    while e is not None and not any(e is seen for seen in chain):
        chain.append(e)
        e = e.__cause__ or e.__context__
    if utils is None or not any(isinstance(c, utils.UncompletedJobError) and "timed-out" in str(c) for c in chain):
        return None
    limit = OmegaConf.select(HydraConfig.get(), "launcher.timeout_min") if HydraConfig.initialized() else None
    return UserError(f"the job ran past hydra.launcher.timeout_min={limit} (minutes) and submitit ended it before it "
                     "finished; raise hydra.launcher.timeout_min.")


def _where_it_resumes(cfg, output_dir) -> str | None:
    """What a single run stopped outside its train loop (before it, or by a second Ctrl-C) keeps and how it is run
    again: 'the same command' alone resumed nothing under the default hydra.run.dir, outputs/<date>/<time>, which it
    makes anew; and a run stopped before its first checkpoint (loading its data, compiling) has none to keep."""
    if output_dir is None or in_multirun():
        return None
    where = f"{run_dir_setting(output_dir)}={os.path.abspath(output_dir)}"
    if not holds_steps(os.path.join(output_dir, "checkpoints")):
        return f"no checkpoint was written yet — train it with the same command and {where}"
    never = OmegaConf.select(cfg, "trainer.resume") == "never"
    return (f"checkpoints already written are kept — resume with the same command"
            f"{', trainer.resume=auto instead of never,' if never else ''} and {where}")


def exit_if_a_process_is_lost(e: BaseException, output_dir: str | None) -> None:
    """A multi-process run one of whose processes died mid-run ends here at once, in one sentence, and without
    finalising Python: closing its checkpoints, or jax.distributed's shutdown at exit, waits for the lost process,
    until JAX's coordination service notices its missing heartbeats (100 s) and aborts from C++ (exit 134)."""
    distributed = sys.modules.get("zoo.parallel.distributed")  # imported where processes may have joined
    lost = distributed.lost_process(e, output_dir) if distributed else None
    if lost is not None:
        exit_at_once(lost)


_last_word = threading.Lock()


def exit_at_once(error: UserError) -> None:
    """End the process now with `error`'s sentence, from any thread, without finalising Python; a second caller
    (another thread that met the same end) waits for the first one's exit: one sentence is printed."""
    _last_word.acquire()
    _exit(str(error), error.exit_code, hard=True)


def _exit_if_the_users(e: BaseException, resume: str | None = None) -> None:
    """One sentence and an exit code for what ended the task, where the user acts on it; otherwise returns, and
    the caller raises it on: a sweep's trial fails alone, HYDRA_FULL_ERROR=1 shows the traceback. `resume`:
    what a single run keeps and how its command is run again, said after a stop (_where_it_resumes)."""
    multirun, full = in_multirun(), _full_errors()
    if isinstance(e, UserError):
        if multirun and isinstance(e, Interrupted):
            raise KeyboardInterrupt from e  # Ctrl-C ends the whole sweep, not one trial
        if multirun and isinstance(e, RunRefused):  # its directory's log was put back as it was: Hydra prints only
            logging.getLogger("zoo").error(f"error: {e}")  # a batch's first failure, so the console says each one
        elif multirun:  # the trial fails alone; its train.log ends in its sentence, as its single run's does
            _into_log_files(f"error: {e}")
        if not multirun and not (full and not isinstance(e, (Interrupted, Preempted))):  # stops keep their codes
            _exit(str(e), e.exit_code, hard=isinstance(e, (Interrupted, ProcessesNotJoined)))
    elif isinstance(e, KeyboardInterrupt):  # outside the train loop (which saves on the first Ctrl-C) or a second
        if not (multirun or full):
            _exit(*_stop_line(e, resume), hard=True)
    elif isinstance(e, OSError) and e.filename and not (multirun or full):  # a write the checks could not foresee
        _exit(os_error_sentence(e), 2 if e.errno in IN_THE_WAY else 1)  # in the way: a file to move, as UserError


IN_THE_WAY = (errno.EEXIST, errno.EISDIR, errno.ENOTDIR)  # a file where a directory goes, or the reverse


def os_error_sentence(e: OSError) -> str:
    """What the user does about a write the file system refused: move what is in the way, or free space."""
    if e.errno in IN_THE_WAY:
        return f"something is in the way at {in_the_way(e)} ({e.strerror}); move it and run the command again."
    if e.errno == errno.ENOSPC:
        return f"{e.strerror}: {e.filename}; free space there or choose another hydra.run.dir / paths.data_dir."
    return f"{e.strerror or e}: {e.filename}; choose another hydra.run.dir / paths.data_dir."


def in_the_way(e: OSError) -> str:
    """The path of what is in the way: a rename's target (filename2: files are written beside it, then renamed
    onto it), and for 'Not a directory' the file above the path, not the path itself."""
    path = os.fspath(e.filename2 or e.filename)
    while e.errno == errno.ENOTDIR and not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


CTRL_C = ("interrupted by Ctrl-C; checkpoints already written are kept and the same command resumes from the newest "
          "one.")


def reader_ctrl_c(unwritten: str) -> str:
    """The Ctrl-C line of a command that reads runs (eval.py, export.py, predict.py): `unwritten`, what it did not
    write. Its SIGTERM's line says 'stopped by SIGTERM' (_stop_line)."""
    return f"interrupted by Ctrl-C; {unwritten} — run the same command again."


_ctrl_c = CTRL_C  # this command's line for a Ctrl-C outside the train loop: train.py's, or a reading command's
_sweep_dir = None  # this process's multirun, once started: a Ctrl-C that ends it names the sweep to rerun
_study_in_memory = False  # its Optuna study lives in memory: no rerun continues it
_task_began = False  # a task (run_task) has begun in this process: before it, Hydra composes and sets the job up
_sweep_dirs_made = []  # the directories its start made for hydra.sweep.dir, deepest first
_sweep_job_dirs = set()  # the run directories of the jobs of this process's multirun that have ended


def _missing_dirs(path: str) -> list:
    """The directories os.makedirs(path) would make, deepest first."""
    missing, path = [], os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def remove_new_sweep_dir() -> None:
    """A multirun refused before any of its jobs ran (the sweeper's or the launcher's settings, a batch
    hydra/launcher=population refuses): the directories its start made for hydra.sweep.dir are removed where nothing
    else was written into them (an Optuna study's database keeps them), so no empty sweep is left behind."""
    if _sweep_dir:
        release_output_dir(_sweep_dir)
    _remove_empty(_sweep_dirs_made)
    _sweep_dirs_made.clear()


def main_with_one_line_ctrl_c(main, interrupted: str = CTRL_C) -> None:
    """Call a script's Hydra `main`. A Ctrl-C that no task turned into its line ends here in one: a multirun's
    launchers pass it on (it ends the sweep, not one job), and Hydra composes the config before any task.
    `interrupted`: the line (CTRL_C for training, reader_ctrl_c(...) for eval.py, export.py, predict.py)."""
    global _ctrl_c
    _ctrl_c = interrupted
    try:
        main()
    except KeyboardInterrupt as e:
        message, code = _stop_line(e)
        if isinstance(e.__cause__, Interrupted):  # e.g. while a dataset was prepared: its own sentence
            message = str(e.__cause__)
        elif _sweep_dir:
            stopped = message.split(";")[0]
            kept = ("checkpoints already written are kept" if _ctrl_c == CTRL_C  # a reading command's sweep:
                    else "the jobs that completed wrote their results")
            message = f"{stopped}; {kept} — rerun the same multirun command (hydra.sweep.dir={_sweep_dir}) to " \
                      f"{'resume the sweep' if _ctrl_c == CTRL_C else 'run it again'}."
            if _study_in_memory:
                message = f"{stopped}; {kept}, but {STUDY_IN_MEMORY}."
        elif _ctrl_c == CTRL_C and not _task_began:  # no run had begun, so there is nothing to resume
            stopped = message.split(";")[0]
            message = f"{stopped} before training began; nothing was trained — run the same command again."
        _exit(message, code, hard=True)  # as a single run's: finalising after a cut compilation can segfault
    except ValueError as e:  # Hydra refuses two of its modes together in a traceback, before reading any override
        if not str(e).startswith(HYDRA_MODES_REFUSED):
            raise
        exit_with(UserError("-m (--multirun), --cfg, --info, --run and --shell-completion each choose what the command "
                            "does, so give one of them; to see a sweep job's config, drop -m and give each swept key "
                            "one of its values."))
    finally:  # not after a hard exit, whose submitit jobs may still be starting
        _remove_empty(_id_folders)  # submitit's empty `%j` folders
        remove_new_sweep_dir()  # nothing was written into it: a sweep refused before any job, whoever refused it


def _stop_line(e: KeyboardInterrupt, resume: str | None = None) -> tuple:
    """(line, exit code) of a Ctrl-C outside the train loop, or of a SIGTERM before it or to a reading command
    (Terminated). `resume`: what a single run keeps and how it resumes (_where_it_resumes), said in train.py's
    line."""
    line = _ctrl_c
    if resume and _ctrl_c == CTRL_C:
        line = f"interrupted by Ctrl-C; {resume}."
    if isinstance(e, Terminated):
        return line.replace("interrupted by Ctrl-C", "stopped by SIGTERM", 1), 143
    return line, 130


HYDRA_MODES_REFUSED = "Only one of --run, --multirun, --cfg, --info and --shell_completion can be specified"


def _exit(message: str, code: int, hard: bool = False):
    print(f"error: {message}", file=sys.stderr)
    _into_log_files(f"error: {message}")
    (_hard_exit if hard else sys.exit)(code)


def _into_log_files(line: str) -> None:
    """The sentence a command ends with, also in its log file (a run's train.log), which eval.py sends the user to
    for why a run ended early; not to the console, which has it already. A log that cannot be written (the full
    disk the sentence may be about) is left as it is."""
    record = logging.LogRecord("zoo", logging.ERROR, __file__, 0, line, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and handler.stream is not None:
            with contextlib.suppress(Exception):  # logging's own emit would print a traceback about it
                handler.stream.write(handler.format(record) + handler.terminator)
                handler.flush()


def _hard_exit(code: int):
    """Exit without finalising Python: after Ctrl-C cut a compilation or a writer thread short, finalising
    can crash (a segfault instead of exit code 130). Tests replace this function."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
