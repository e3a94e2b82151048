"""The Optuna sweep on Optuna's ask-and-tell API: ask `n_jobs` trials, hand them to the launcher in one call,
tell Optuna each result (complete, pruned or failed with its reason), until this command's `n_trials` ran.

The study lives in `storage` under `study_name`; running the same command again continues it with
`n_trials` more trials (a grid: the points not yet run).
"""
import functools
import logging
import math
import os

from hydra._internal.grammar.utils import escape_special_characters
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, ListConfig, OmegaConf

from zoo.cli import numbered_job_dirs
from zoo.errors import RunRefused, UserError, brief
from zoo.files import load_json, write_json
from zoo.loop import TrialPruned
from zoo.preemption import Preempted
from zoo.sweeps import trial_link
from zoo.sweeps.jobs import find_job_dirs
from zoo.sweeps.search_space import parse_search_space
from zoo.sweeps.stop_on_signal import IN_PROCESS_LAUNCHERS
from zoo.targets import safe_instantiate

log = logging.getLogger(__name__)
DIRECTIONS = ("minimize", "maximize")


def build_optuna_object(node, module_name: str, base_name: str, setting: str):
    """Instantiate `node` after checking that every `_target_` in it is a class of `module_name`."""
    import importlib

    module = importlib.import_module(module_name)
    base = getattr(module, base_name)
    example = f"{module_name}.{'TPESampler' if base_name == 'BaseSampler' else 'MedianPruner'}"

    def refusal(target):
        prefix, _, name = str(target).rpartition(".")
        cls = getattr(module, name, None) if prefix == module_name and not name.startswith("_") else None
        return None if isinstance(cls, type) and issubclass(cls, base) else (
            f"it is not a class of {module_name}; name one, e.g. {example}")

    return safe_instantiate(node, setting, refusal)


def directions_of(direction, directions) -> list | None:
    """The directions set (None: none set, they follow the objective, see objective_directions)."""
    chosen = directions if directions is not None else direction
    if chosen is None:
        return None
    values = list(chosen) if isinstance(chosen, (list, tuple, ListConfig)) else [chosen]
    names = [str(getattr(d, "name", d)).lower() for d in values]
    if not names or any(n not in DIRECTIONS for n in names):
        raise UserError(f"hydra.sweeper.direction must be minimize, maximize or a list of them, got {chosen}.")
    return names


def objective_directions(config: DictConfig, given: list | None) -> list:
    """The study's directions. For the zoo's training (its config has optimized_metric) they follow the
    objectives it returns (maximize accuracy and r2, minimize losses and wall time); directions set must come one
    per objective and agree with them. Any other task gets what is set, or Optuna's default, minimize."""
    if "optimized_metric" not in config:
        return given or ["minimize"]
    from zoo.config import METRIC_MODES, default_objective, direction_of

    metric = config.optimized_metric
    names = [str(n) for n in metric] if isinstance(metric, ListConfig) else [str(metric or default_objective(config))]
    wanted = [direction_of(n) for n in names]
    if given is None:
        return wanted
    if len(given) != len(names):
        raise UserError(f"hydra.sweeper.direction gives {len(given)} direction(s) for the {len(names)} objective(s) "
                        f"{', '.join(names)}; give one for each, or leave it unset to follow them.")
    for name, set_, right in zip(names, given, wanted):
        if set_ != right and name.rpartition("/")[2] in METRIC_MODES:
            raise UserError(f"hydra.sweeper.direction={set_} would rank the worst {name} best; set {right} or leave "
                            "hydra.sweeper.direction unset (it follows optimized_metric).")
    return given


def _save_multirun_config(config) -> None:
    """multirun.yaml at the sweep's root, as Hydra's basic sweeper writes it: what the sweep searched (its summary
    plots a parameter drawn from a linear interval on a linear axis) and what marks the folder as a multirun's."""
    sweep_dir = str(config.hydra.sweep.dir)
    os.makedirs(sweep_dir, exist_ok=True)
    OmegaConf.save(config, os.path.join(sweep_dir, "multirun.yaml"))


def _check_metrics(config, space) -> None:
    """A metric name every trial would refuse (e.g. optimized_metric=validation/acc) is refused once, before the
    study opens, instead of failing each trial; left to the trials where the search varies what decides it."""
    deciding = ("optimized_metric", "checkpoint", "dataset")
    if "optimized_metric" not in config or any(k.lstrip("+~").startswith(deciding) for k in space.distributions):
        return
    from zoo.config import validate_metrics

    validate_metrics(config)


def _check_searched_keys(config, space, params) -> None:
    """A searched key the chosen config group lacks (hparams_search=digits_mlp with optimizer=sgd, whose optax
    function takes no weight_decay) failed each trial in Hydra's `Could not override`, which advises adding the key
    with `+`, a key the run then refuses as no setting: refused once, before the study opens. Left to the trials
    where the search chooses that group itself, and outside the zoo's training."""
    if "optimized_metric" not in config:
        return
    searched_groups = {k.lstrip("+~") for k in space.distributions if "." not in k}
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}
    for key in space.distributions:
        if key.startswith(("+", "~", "hydra.")) or "." not in key or key.split(".")[0] in searched_groups:
            continue
        parent, _, name = key.rpartition(".")
        node, group = OmegaConf.select(config, parent, default=None), key.split(".")[0]
        if not isinstance(node, DictConfig) or name in node.keys():
            continue  # a setting it has; or no settings node there, of which Hydra's own message says more
        chosen = group in choices and parent == group  # a config group's option: another option may have it
        owner = f"{group}={choices[group]}" if chosen else parent
        settings = _settings_of(node)
        origin = "hydra.sweeper.params" if key in (params or {}) else "the command line"
        raise UserError(f"the sweep searches {key} ({origin}), which {owner} does not have (its settings: {settings}); "
                        f"{f'choose another {group}, or ' if chosen else ''}search settings it has.")


def _check_searched_types(config, space, params, arguments) -> None:
    """Hydra reads interval(0, 100) as 0.0 to 100.0 (int(interval(0, 100)) draws integers): over an integer setting
    every trial drew a fraction and failed in Hydra's `Error merging override`, refused once, before the study
    opens."""
    from optuna.distributions import FloatDistribution
    from omegaconf.nodes import IntegerNode

    for key, distribution in space.distributions.items():
        if not isinstance(distribution, FloatDistribution) or distribution.step is not None:
            continue
        parent, _, name = key.lstrip("+").rpartition(".")
        node = OmegaConf.select(config, parent, default=None) if parent else config
        if not isinstance(node, DictConfig) or name not in node or not isinstance(node._get_node(name), IntegerNode):
            continue
        given = [(f"{k}={v}", "hydra.sweeper.params") for k, v in (params or {}).items()]
        given += [(str(a), "the command line") for a in arguments]  # the last of a key's lines is the one searched
        searched, origin = [(line.partition("=")[2], where) for line, where in given
                            if line.partition("=")[0] == key][-1]
        start = searched.find("interval(")
        end, depth = start + len("interval"), 0
        for end in range(start + len("interval"), len(searched)):
            depth += {"(": 1, ")": -1}.get(searched[end], 0)
            if depth == 0:
                break
        as_int = f"{searched[:start]}int({searched[start:end + 1]}){searched[end + 1:]}"
        raise UserError(f"the sweep searches {key} ({origin}) over {searched}, whose values have fractions, and {key} "
                        f"must be an integer; draw integers with int(interval(...)), e.g. {key}={as_int} (or "
                        "range(...), choice(...)).")


def _eval_every(config, space) -> int:
    """The trials' trainer.eval_every where all share one (the command line's, else the config's); 1 when unknown
    or searched over, which each trial then checks for itself."""
    if "trainer.eval_every" in space.distributions:
        return 1
    line = space.fixed.get("trainer.eval_every")
    try:
        return int(line.partition("=")[2]) if line else int(OmegaConf.select(config, "trainer.eval_every", default=1))
    except (TypeError, ValueError):
        return 1


class OptunaSweep:
    def __init__(self, sampler, direction, directions, storage, study_name, n_trials, n_jobs, max_failure_rate,
                 params, pruner):
        self.directions = directions_of(direction, directions)
        _check_mappings(sampler, pruner, params)
        if not (n_trials > 0 and n_jobs > 0 and 0.0 <= max_failure_rate <= 1.0):
            raise UserError("hydra.sweeper.n_trials and hydra.sweeper.n_jobs must be positive and "
                            f"hydra.sweeper.max_failure_rate in [0, 1], got {n_trials}, {n_jobs}, {max_failure_rate}.")
        self.sampler_cfg, self.pruner_cfg, self.params = sampler, pruner, params
        self.storage, self.study_name = storage, study_name
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, n_jobs, max_failure_rate
        self.config_loader, self.plan_saved = None, False

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config, self.config_loader = config, hydra_context.config_loader
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def _sampler(self, grid: dict, trials_so_far: int = 0):
        cfg = self.sampler_cfg
        if cfg is None:  # sampler=null, as pruner=null: Optuna's create_study picks its default
            return None
        if trials_so_far and cfg.get("seed") is not None:
            # a seeded sampler would repeat the suggestions its study started with; the offset keeps a rerun
            # of the same command on the same study reproducible, modulo the 2**32 seeds Optuna takes (a seed
            # near the largest was refused on a rerun)
            cfg = OmegaConf.merge(cfg, {"seed": (int(cfg.seed) + trials_so_far) % 2**32})
        _check_sampler_packages(cfg)
        sampler = build_optuna_object(cfg, "optuna.samplers", "BaseSampler", "hydra.sweeper.sampler")
        sampler = sampler(grid) if isinstance(sampler, functools.partial) else sampler  # GridSampler: grid = space
        if self.storage is not None and _keeps_pickles(sampler):
            raise UserError(f"hydra.sweeper.sampler={type(sampler).__name__} keeps its state in the study as a pickle, "
                            f"which continuing the study would load from hydra.sweeper.storage={self.storage}, and "
                            "the zoo loads no pickle from disk; set hydra.sweeper.storage=null (the study then lives "
                            "in memory) or choose another hydra/sweeper/sampler.")
        return sampler

    def _another_study(self) -> str:
        """Where a command goes that cannot go on with the stored study: a sweep dir keeps one study's trials (its
        summary ranks them), and the presets keep the study in the sweep dir too."""
        storage, sweep_dir = str(self.storage or ""), os.path.abspath(str(self.config.hydra.sweep.dir))
        if storage.startswith("sqlite:///") and os.path.abspath(storage[len("sqlite:///"):]).startswith(
                os.path.join(sweep_dir, "")):
            return "choose a new hydra.sweep.dir (its storage then holds a new study)"
        return "choose another hydra.sweeper.study_name (or storage) and a new hydra.sweep.dir"

    def _study(self, grid: dict, space):
        import optuna

        pruner = None if self.pruner_cfg is None else build_optuna_object(
            self.pruner_cfg, "optuna.pruners", "BasePruner", "hydra.sweeper.pruner")
        sampler = self._sampler(grid)
        self._refuse_a_lost_study()
        try:
            if self.storage and str(self.storage).startswith("sqlite:///"):
                os.makedirs(os.path.dirname(os.path.abspath(str(self.storage)[len("sqlite:///"):])), exist_ok=True)
            study = optuna.create_study(study_name=self.study_name, storage=self.storage, sampler=sampler,
                                        pruner=pruner, directions=self.directions, load_if_exists=True)
        except Exception as e:  # noqa: BLE001 — a path, a URL or a database SQLAlchemy refuses, in its own types
            raise UserError(f"hydra.sweeper.storage={self.storage} cannot be opened ({brief(e)}); set it to "
                            "sqlite:///<a writable path>.db or null (in memory).") from None
        _check_same_choices(study, space.distributions, self._another_study())
        stored = [d.name.lower() for d in study.directions]
        if stored != self.directions:  # Optuna loads an existing study as it was created, whatever asked for
            metric = OmegaConf.select(self.config, "optimized_metric", default=None)
            asked = ", ".join(self.directions) + (f" (optimized_metric={metric})" if metric is not None else "")
            raise UserError(f"study {study.study_name} in {self.storage} was created to {', '.join(stored)}, and this "
                            f"command would {asked}; {self._another_study()}.")
        trials_so_far = len(study.get_trials(deepcopy=False))
        if trials_so_far and self.sampler_cfg is not None:
            study.sampler = self._sampler(grid, trials_so_far)
        return study

    def sweep(self, arguments: list):
        """Run this command's trials; returns the study."""
        import optuna

        self.directions = objective_directions(self.config, self.directions)
        self.ran, self.failures = 0, []  # this command's trials, and (trial, error) of those that failed
        if self.pruner_cfg is not None and len(self.directions) > 1:
            raise UserError("Optuna cannot prune a multi-objective study; drop hydra/sweeper/pruner or use one "
                            "direction.")
        space = parse_search_space(self.params, arguments)
        if not space.distributions:  # each trial would train the same run
            raise UserError("the Optuna sweep searches nothing (neither hydra.sweeper.params nor the command line has "
                            "an interval(...), choice(...) or range(...)), so each of its "
                            f"{self.n_trials} trials would train the same run; search a setting, e.g. "
                            "'optimizer.learning_rate=tag(log,interval(1e-4,1e-1))', or leave hydra/sweeper out.")
        _check_searched_keys(self.config, space, self.params)
        _check_searched_types(self.config, space, self.params, arguments)
        self._check_searched_groups(space)
        _check_metrics(self.config, space)
        if self.pruner_cfg is not None:  # else every trial fails so
            self._check_prunable(space)
        target = str((self.sampler_cfg or {}).get("_target_", ""))
        is_grid = "GridSampler" in target
        if "BruteForceSampler" in target:  # it walks every value too; an interval failed the trial in its ValueError
            space.grid(f"hydra.sweeper.sampler._target_={target}")
        grid = space.grid() if is_grid else {}
        study = self._study(grid, space)
        self._continue_stopped(study, space, optuna)
        n_trials = self.n_trials
        if is_grid:  # a grid has math.prod(sizes) points; a resumed grid sweep runs the ones not yet run
            done = sum(t.state.is_finished() and all(t.params.get(k) in v for k, v in grid.items())
                       for t in study.trials)  # of this grid: a rerun with another grid runs its new points
            n_trials = min(n_trials, math.prod(len(v) for v in grid.values()) - done)
        if is_grid and n_trials <= 0:
            summary = os.path.join(str(self.config.hydra.sweep.dir), "summary.md")
            log.info("Study %s in %s: every point of its grid (%d) has run already, so this command runs none%s",
                     study.study_name, self.storage or "memory", math.prod(len(v) for v in grid.values()),
                     f"; its summary: {summary}" if os.path.isfile(summary) else "")
        else:
            log.info("Study %s in %s: %d trials to run, %d at a time, directions %s", study.study_name,
                     self.storage or "memory", n_trials, self.n_jobs, self.directions)
        while n_trials > 0:
            asked_from = len(study.get_trials(deepcopy=False))
            try:
                trials = [study.ask(space.distributions) for _ in range(min(self.n_jobs, n_trials))]
            except Exception as e:  # the sampler failed: the trials it was asked for would stay RUNNING
                _fail_unrun(study, [t for t in study.get_trials(deepcopy=False) if t.number >= asked_from], e, optuna)
                raise
            self._run(study, trials, space, optuna)
            n_trials -= len(trials)
        # a grid with no point left to run leaves multirun.yaml as it was: no job ran this command's plan
        self._write_results(study, optuna)
        if self.ran and len(self.failures) == self.ran:  # none completed or was pruned: exit 0 would say it learnt
            trial, error = self.failures[0]
            raise UserError(f"every one of the {self.ran} trials this command ran failed (trial {trial.number}: "
                            f"{_reason(error).rstrip('.')}); the sweep summary lists each one's reason.") from error
        return study

    def _refuse_a_lost_study(self) -> None:
        """A study kept in memory ended with its command; its trials' directories, named by their numbers, would
        refuse a new study's trials of the same numbers, one job after another. (The presets' directories carry
        the time as well: a new study's trials get new ones.)"""
        sweep_dir = str(self.config.hydra.sweep.dir)
        if self.storage is None and numbered_job_dirs(self.config) and find_job_dirs(sweep_dir):
            raise UserError(f"hydra.sweep.dir={sweep_dir} holds the trials of a study kept in memory "
                            "(hydra.sweeper.storage=null), which no command can continue; choose a new "
                            "hydra.sweep.dir (with hydra.sweeper.storage=sqlite:///${hydra.sweep.dir}/optuna.db, "
                            "the same command continues its study).")
        if self.storage is not None and self.study_name is None and find_job_dirs(sweep_dir):
            import optuna  # Optuna names a study created without a name anew each time: a rerun would not continue

            try:
                names = optuna.get_all_study_names(storage=str(self.storage))
            except Exception:  # noqa: BLE001 — a storage that cannot be opened is refused with its own sentence
                return
            if names:
                name = names[-1] if len(names) == 1 else "<one of them>"
                raise UserError(f"hydra.sweep.dir={sweep_dir} holds the trials of an earlier study, and "
                                "hydra.sweeper.study_name=null names each command's study anew, so this one would not "
                                f"continue it; set hydra.sweeper.study_name={name} to continue it (the studies in "
                                f"{self.storage}: {', '.join(names)}), or choose a new hydra.sweep.dir.")

    def _check_searched_groups(self, space) -> None:
        """A config group searched over options one of which lacks a setting the sweep sets inside it
        ('model=choice(mlp,cnn)' with the digits_mlp preset's model.hidden): the first trial that drew that option
        failed in Hydra's `Could not override` and ended the sweep. Each option is composed once, before the study
        opens, with the sweep's fixed overrides (outside the zoo's training, left to the trials)."""
        from optuna.distributions import CategoricalDistribution

        if self.config_loader is None or "optimized_metric" not in self.config:
            return
        keys = list(space.distributions) + list(space.fixed)
        for group, d in space.distributions.items():
            inside = [k for k in keys if k.startswith(f"{group}.")]
            if "." in group or group.startswith(("+", "~", "hydra")) or not inside or \
                    not isinstance(d, CategoricalDistribution):
                continue
            others = [line for key, line in space.fixed.items() if not key.startswith(f"{group}.")]
            for option in d.choices:
                try:
                    cfg = self.config_loader.load_sweep_config(self.config, [*others, f"{group}={option}"])
                except Exception:  # noqa: BLE001 — an option that does not compose: its trials say so themselves
                    continue
                for key in inside:
                    parent, _, name = key.rpartition(".")
                    node = OmegaConf.select(cfg, parent, default=None)
                    if isinstance(node, DictConfig) and name not in node.keys():
                        settings = _settings_of(node)
                        origin = "hydra.sweeper.params" if key in (self.params or {}) else "the command line"
                        verb = "searches" if key in space.distributions else "sets"
                        raise UserError(f"the sweep {verb} {key} ({origin}), which {group}={option}, one of the "
                                        f"{group} options it searches, does not have (its settings: {settings}); "
                                        f"search one {group} at a time, or search settings every option has.")

    def _check_prunable(self, space) -> None:
        """What fails every pruned trial alike, refused once before the study opens (each trial checks again)."""
        if _eval_every(self.config, space) <= 0:
            raise UserError("hydra.sweeper.pruner needs periodic evals to judge a trial by; set trainer.eval_every "
                            "to a number of steps.")
        if self.storage is None and type(self.launcher).__name__ not in IN_PROCESS_LAUNCHERS:
            raise UserError("hydra.sweeper.pruner with a launcher that runs trials in other processes needs a shared "
                            "study; set hydra.sweeper.storage (e.g. sqlite:///${hydra.sweep.dir}/optuna.db).")
        deciding = ("optimized_metric", "dataset")
        if "optimized_metric" in self.config and not any(k.lstrip("+~").startswith(deciding)
                                                         for k in space.distributions):
            from zoo.tasks import TASKS

            trial_link.prunable_metric(self.config, TASKS[self.config.dataset.task])

    def _run(self, study, trials: list, space, optuna, job_dirs=None) -> None:
        """Launch `trials` (consecutive numbers) in one call and tell the study each one's result."""
        job_dirs = job_dirs or {}
        overrides = [self._overrides(t, space, job_dirs.get(t.number)) for t in trials]
        try:
            self._save_plan(overrides)
            with trial_link.running(self.storage, self.study_name, trials):
                # job number = trial number: a rerun with the same storage and sweep dir adds trials, and
                # their jobs must not land in (and resume from) the directories of the study's earlier trials
                returns = self.launcher.launch(overrides, initial_job_idx=trials[0].number)
        except BaseException as e:
            if not _a_stop(e):  # e.g. an override no config takes: rerun, they would fail again
                self._settle_unreturned(study, trials, e, optuna)
            raise
        failed = [(t, e) for t, e in ((t, self._tell(study, t, ret, optuna, continued=t.number in job_dirs))
                                      for t, ret in zip(trials, returns)) if e]
        self.ran += len(returns)
        self.failures += failed
        if len(failed) > self.max_failure_rate * len(returns):
            # the last line names the setting that stopped the sweep, not only the first failed trial's reason
            trial, error = failed[0]
            reason = _reason(error)
            outcome = "stays stopped" if trial.number in job_dirs and isinstance(error, RunRefused) else "failed"
            # the best so far, as a sweep that ran its n_trials writes it (it wrote none, the trials' results only
            # in the study and their run dirs)
            completed = self._write_results(study, optuna)
            best = "" if not completed else (
                f"; the best of the {completed} trial(s) that completed is in {self._results_path()}")
            raise UserError(f"the sweep stopped: {len(failed)} of the {len(returns)} trials of its last batch failed, "
                            f"more than hydra.sweeper.max_failure_rate={self.max_failure_rate} allows (trial "
                            f"{trial.number} {outcome}: {reason.rstrip('.')}){best}; raise "
                            "hydra.sweeper.max_failure_rate (1.0: never stop) to go on past failed trials.") from error

    def _save_plan(self, overrides=()) -> None:
        """Compose each job of a batch (as Hydra's sweepers do before launching one; a launcher in this process then
        takes those compositions, zoo.sweeps.compose_once), then write this command's multirun.yaml once: a batch
        that does not compose ends the sweep in Hydra's own message, not in the traceback of a launcher whose jobs
        compose in their own processes (submitit), and a first one leaves the sweep dir's plan, by which its
        summary lists the swept keys, as it was."""
        for job in overrides if self.config_loader is not None else ():
            self.config_loader.load_sweep_config(self.config, list(job))
        if not self.plan_saved:
            _save_multirun_config(self.config)
            self.plan_saved = True

    def _continue_stopped(self, study, space, optuna) -> None:
        """A signal ends a sweep before the sweeper tells Optuna how its batch went, so the study keeps those
        trials RUNNING. Rerunning the command settles them first: a trial whose job had ended is told what its
        files say; the others run again with their own parameters and numbers, each in its own job directory
        when it has one, so it continues from its checkpoint. One command works on a study at a time, as job
        number = trial number already assumes; with a launcher whose jobs run in other processes (submitit),
        whose jobs a stopped sweep does not stop, only trials whose job saved a stop are run again."""
        stopped = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        if not stopped:
            return
        for trial in stopped:
            _check_stored_params(study, trial, space, self._another_study())
        sweep_dir = str(self.config.hydra.sweep.dir)
        job_dirs = trial_link.job_dirs(sweep_dir, study.study_name, {t.number for t in stopped})
        here = type(self.launcher).__name__ in IN_PROCESS_LAUNCHERS
        never = OmegaConf.select(self.config, "trainer.resume") == "never"
        to_run, left, ended, failed = [], [], [], []
        for trial in (optuna.Trial(study, t._trial_id) for t in stopped):  # the public way to a stored trial
            job_dir = job_dirs.get(trial.number)
            outcome, row = ("unfinished", None) if job_dir is None else trial_link.job_outcome(
                os.path.join(sweep_dir, job_dir), sweep_dir)
            if outcome == "ended":
                ended.append(trial.number)
                self._tell_ended(study, trial, row, optuna)
            elif never:
                failed.append(trial.number)
                self._abandon(study, trial, job_dir, "stopped before it finished; trainer.resume=never does not "
                                                     "continue it", optuna)
            elif outcome == "unfinished" and not here:
                left.append(trial.number)  # it may still be running where the launcher put it
            elif job_dir is not None and _subdir_override(job_dir) is None:
                failed.append(trial.number)
                self._abandon(study, trial, job_dir, f"stopped in {job_dir}, whose name Hydra cannot take back", optuna)
            else:
                to_run.append(trial)
        log.info("Trial(s) %s of study %s were left unfinished by a stopped run: %s%srunning %s again%s",
                 _numbers(t.number for t in stopped), study.study_name,
                 f"{_numbers(ended)} had ended and take what their files say; " if ended else "",
                 f"{_numbers(failed)} fail (see their fail_reason); " if failed else "",
                 _numbers(t.number for t in to_run) or "none",
                 f"; {_numbers(left)} may still be running and stay RUNNING" if left else "")
        for batch in _consecutive_batches(to_run, self.n_jobs):
            self._run(study, batch, space, optuna, job_dirs)

    def _abandon(self, study, trial, job_dir, reason: str, optuna) -> None:
        """A stopped trial the study fails instead of continuing: its job directory's failure.json (a stop's,
        which the summary reads as 'rerun to resume') says so too, so summary and study agree."""
        trial.set_user_attr("fail_reason", reason)
        self._finish(study, trial, state=optuna.trial.TrialState.FAIL)
        path = None if job_dir is None else os.path.join(str(self.config.hydra.sweep.dir), job_dir, "failure.json")
        stop = load_json(path) if path is not None else None
        if isinstance(stop, dict) and stop.get("error") == Preempted.__name__:  # the stop's record is kept in it
            write_json(path, {**stop, "status": "failed", "error": UserError.__name__, "user_error": True,
                              "reason": f"{reason} ({stop.get('reason')})"})

    def _settle_unreturned(self, study, trials: list, error: BaseException, optuna) -> None:
        """A launch that raised returned no job's result: a trial whose job ended before is told what its files say;
        the others failed with `error`."""
        sweep_dir = str(self.config.hydra.sweep.dir)
        dirs = trial_link.job_dirs(sweep_dir, study.study_name, {t.number for t in trials})
        unrun = []
        for trial in trials:
            outcome, row = ("unfinished", None) if trial.number not in dirs else trial_link.job_outcome(
                os.path.join(sweep_dir, dirs[trial.number]), sweep_dir)
            if outcome == "ended":
                self._tell_ended(study, trial, row, optuna)
            else:
                unrun.append(trial)
        _fail_unrun(study, unrun, error, optuna)

    def _tell_ended(self, study, trial, row: dict, optuna) -> None:
        """Tell the study what a stopped trial's job had written (its summary row) before the stop."""
        trial.set_user_attr("run_dir", row["run_dir"])
        values = self._values(row["objective"]) if row["status"] == "completed" else None
        if values is not None:
            self._finish(study, trial, values=values)
        elif row["status"] == "pruned":
            self._finish(study, trial, state=optuna.trial.TrialState.PRUNED)
        else:
            trial.set_user_attr("fail_reason", row["reason"])
            self._finish(study, trial, state=optuna.trial.TrialState.FAIL)

    @staticmethod
    def _overrides(trial, space, job_dir=None) -> list:
        suggested = [f"{key}={value}" for key, value in trial.params.items()]
        continued = [] if job_dir is None else [_subdir_override(job_dir)]
        # The trial's number rides in the job's own config, so train() can report to it (zoo.sweeps.trial_link).
        return [*suggested, *space.fixed.values(), *continued,
                f"++hydra.job.env_set.{trial_link.TRIAL_KEY}={trial.number}"]

    def _tell(self, study, trial, ret: JobReturn, optuna, continued: bool = False):
        """Record one finished job in the study; returns its error if it failed. A stopped trial `continued` in
        its job directory whose run refused this command's settings stays RUNNING, as that directory stays
        stopped: the sweep's own command, which the refusal names, continues it."""
        if ret.hydra_cfg is not None:
            trial.set_user_attr("run_dir", str(ret.hydra_cfg.hydra.runtime.output_dir))
        error = ret._return_value if ret.status == JobStatus.FAILED else None  # .return_value would raise
        if continued and isinstance(error, RunRefused):
            log.warning("Trial %d stays stopped: %s", trial.number, error)
            return error
        if isinstance(error, (TrialPruned, optuna.TrialPruned)):
            self._finish(study, trial, state=optuna.trial.TrialState.PRUNED)
            return None
        if error is None:
            values = self._values(ret._return_value)
            if values is not None:
                self._finish(study, trial, values=values)
                return None
            error = ValueError(f"the task returned {ret._return_value!r}, not {len(self.directions)} finite "
                               "number(s) for the direction(s) set")
        trial.set_user_attr("fail_reason", f"{type(error).__name__}: {error}")
        self._finish(study, trial, state=optuna.trial.TrialState.FAIL)
        log.warning("Trial %d failed: %s: %s", trial.number, type(error).__name__, error)
        return error

    def _values(self, returned):
        values = list(returned) if isinstance(returned, (list, tuple, ListConfig)) else [returned]
        try:
            values = [float(v) for v in values]
        except (TypeError, ValueError):
            return None
        return values if len(values) == len(self.directions) and all(map(math.isfinite, values)) else None

    @staticmethod
    def _finish(study, trial, **result) -> None:
        try:
            study.tell(trial, **result)
        except RuntimeError as e:  # GridSampler asks the study to stop once the grid is done; ask-and-tell has no loop
            if "Study.stop" not in str(e):
                raise

    def _results_path(self) -> str:
        return os.path.join(str(self.config.hydra.sweep.dir), "optimization_results.yaml")

    def _write_results(self, study, optuna) -> int:
        """optimization_results.yaml: the best trial (the Pareto front) of those completed; returns their count."""
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        results = {"name": "optuna", "study_name": study.study_name, "n_trials": len(study.trials)}
        if not done:
            log.warning("No trial of study %s has completed, so there is no best trial.", study.study_name)
        elif len(self.directions) == 1:
            results.update(best_params=study.best_trial.params, best_value=study.best_trial.value)
            log.info("Best value %s with %s", study.best_trial.value, study.best_trial.params)
        else:
            results["solutions"] = [{"params": t.params, "values": t.values} for t in study.best_trials]
            log.info("Pareto front: %d trials", len(study.best_trials))
        OmegaConf.save(OmegaConf.create(results), self._results_path())
        return len(done)


def _settings_of(node) -> str:
    """'channels, dense, ...': the settings a config node has, Hydra's own (_target_) left out; 'none' for
    model=linear's."""
    return ", ".join(k for k in node if not str(k).startswith("_")) or "none"


def _reason(error: BaseException) -> str:
    """A failed trial's reason: a UserError's sentence whole (its last words say what to change), else in brief."""
    return f"{type(error).__name__}: {error}" if isinstance(error, UserError) else brief(error)


def _check_stored_params(study, trial, space, instead: str) -> None:
    """A stopped trial runs again with its stored parameters as overrides: each must be a setting this command
    searches, and a value its choices hold (a number for a range). The storage is a file: a parameter named
    `++hydra.job_logging...`, or a choice of another value, would be any override at all."""
    for name, value in trial.params.items():
        distribution = space.distributions.get(name)
        choices = getattr(distribution, "choices", None)
        fits = distribution is not None and (value in choices if choices is not None else
                                             isinstance(value, (int, float)) and not isinstance(value, bool))
        if not fits:
            searched = "" if distribution is None else f" over {list(choices) if choices is not None else 'numbers'}"
            raise UserError(f"study {study.study_name} holds stopped trial {trial.number} with {name}={value!r}, which "
                            f"this command does not search{searched}; search what the study searched, or {instead}.")


def _check_same_choices(study, distributions: dict, instead: str) -> None:
    """Optuna fixes a parameter's choices within a study ('does not support dynamic value space', at its next ask)."""
    for trial in study.get_trials(deepcopy=False):
        for name, old in trial.distributions.items():
            new = distributions.get(name)
            if hasattr(old, "choices") and new is not None and new != old:
                raise UserError(f"study {study.study_name} searched {name} over {list(old.choices)}, and this command "
                                f"over {list(getattr(new, 'choices', [new]))}; a study keeps a choice's values: keep "
                                f"them, or {instead}.")


def _check_mappings(sampler, pruner, params) -> None:
    """The sampler, the pruner and params take any value in Hydra's merge (`hydra.sweeper.sampler=abc`): a value
    that is no mapping ended in an AttributeError traceback."""
    from zoo.sweeps.config import PRUNERS, SAMPLERS

    for setting, node, options in (("sampler", sampler, SAMPLERS), ("pruner", pruner, PRUNERS)):
        if node is not None and not isinstance(node, (dict, DictConfig)):
            first, *others = options
            raise UserError(f"hydra.sweeper.{setting} must be a {setting}'s settings or null, got {node}; choose one "
                            f"with hydra/sweeper/{setting}={first} (or {', '.join(others)}), or set "
                            f"hydra.sweeper.{setting}._target_ to a class of optuna.{setting}s.")
    if params is not None and not isinstance(params, (dict, DictConfig)):
        shown = list(params) if isinstance(params, ListConfig) else params
        raise UserError("hydra.sweeper.params must map each key to the values searched, e.g. hydra.sweeper.params="
                        f"{{optimizer.learning_rate:'tag(log, interval(1e-4, 1e-1))'}}, got {shown}.")


SAMPLER_PACKAGES = {"CmaEsSampler": ("cmaes",), "GPSampler": ("torch", "scipy")}  # Optuna imports them late


def _numbers(trials) -> str:
    return ", ".join(map(str, trials))


def _keeps_pickles(sampler) -> bool:
    """Optuna's CMA-ES sampler stores its optimizer in the study's trials as a pickle and unpickles it from the
    storage on every later trial: whoever can write that file runs code as the user. Samplers that wrap another
    (PartialFixedSampler) are looked into."""
    import optuna

    wrapped = [v for v in vars(sampler).values() if isinstance(v, optuna.samplers.BaseSampler)]
    return isinstance(sampler, optuna.samplers.CmaEsSampler) or any(_keeps_pickles(w) for w in wrapped)


def _check_sampler_packages(cfg) -> None:
    """A sampler whose package is missing fails only after its startup trials, each later trial with it."""
    import importlib.util

    name = str(cfg.get("_target_", "")).rpartition(".")[2]
    missing = [p for p in SAMPLER_PACKAGES.get(name, ()) if importlib.util.find_spec(p) is None]
    if missing:
        raise UserError(f"hydra.sweeper.sampler={name} needs {' and '.join(missing)}, which requirements.txt does "
                        f"not install; pip install {' '.join(missing)}, or choose another hydra/sweeper/sampler.")


def _a_stop(e: BaseException) -> bool:
    """Ctrl-C or a stop signal's exit (128 + N): its trials stay RUNNING, and the same command continues them."""
    return isinstance(e, KeyboardInterrupt) or (isinstance(e, SystemExit) and isinstance(e.code, int) and
                                                e.code >= 128)


def _fail_unrun(study, trials: list, error: BaseException, optuna) -> None:
    """Tell the study that `trials` (asked, never run) failed, with why: left RUNNING, a rerun would run them."""
    if isinstance(error, SystemExit) and isinstance(error.__cause__, UserError):  # exit_with: its sentence
        error = error.__cause__
    for t in trials:
        trial = optuna.Trial(study, t._trial_id)
        trial.set_user_attr("fail_reason", f"not run: {brief(error)}")
        OptunaSweep._finish(study, trial, state=optuna.trial.TrialState.FAIL)


def _subdir_override(job_dir: str):
    """`hydra.sweep.subdir=<job_dir>` as an override Hydra parses back to job_dir, or None if none does."""
    quoted = "'" + job_dir.replace("\\", "\\\\").replace("'", "\\'") + "'"
    for value in (escape_special_characters(job_dir), quoted):
        override = f"hydra.sweep.subdir={value}"
        try:
            if OverridesParser.create().parse_overrides([override])[0].value() == job_dir:
                return override
        except Exception:  # noqa: BLE001 — Hydra's parse errors
            continue
    return None


def _consecutive_batches(trials: list, size: int) -> list:
    """Trials in runs of consecutive numbers, at most `size` a run: a launch numbers its jobs consecutively."""
    batches = []
    for t in sorted(trials, key=lambda t: t.number):
        if batches and len(batches[-1]) < size and batches[-1][-1].number + 1 == t.number:
            batches[-1].append(t)
        else:
            batches.append([t])
    return batches
