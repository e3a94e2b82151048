"""Structured config schema (type and key checks at compose time) and value checks before any JAX work."""
import functools
import math
import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from zoo.errors import UserError
from zoo.privacy.config import PrivacyConfig, validate_privacy
from zoo.targets import check_arguments, check_targets, parameter_defaults

PARALLEL_MODES = ("none", "pmap", "sharded")
MAX_CPU_DEVICES = 512  # simulated devices cost memory and start-up time; beyond this a typo is likelier than intent
TASK_NAMES = ("classification", "regression")
METRICS = {"classification": ("loss", "accuracy", "count"),  # what zoo.tasks reports per split
           "regression": ("loss", "mse", "mae", "r2", "count")}
NORMALIZATIONS = ("per_feature", "global", "none")
RUN_METRICS = ("wall_time_s", "examples_per_s")  # figures of the run itself: a multi-objective sweep's second aim
# Which way is better, per metric: the best checkpoint follows the metric it is chosen by, not the task.
METRIC_MODES = {"accuracy": "max", "r2": "max", "loss": "min", "mse": "min", "mae": "min",
                "wall_time_s": "min", "examples_per_s": "max"}
OBJECTIVES = {"classification": "accuracy", "regression": "loss"}  # what a sweep optimises unless told


def default_objective(cfg) -> str:
    """What a sweep optimises when optimized_metric is null: the task's metric on the validation split when
    dataset.validation_fraction carves one from train, else on test (the only held-out split there is)."""
    split = "validation" if (OmegaConf.select(cfg, "dataset.validation_fraction", default=0.0) or 0.0) > 0 else "test"
    return f"{split}/{OBJECTIVES[OmegaConf.select(cfg, 'dataset.task', default='classification')]}"


def direction_of(metric_name: str) -> str:
    """'maximize' or 'minimize', as a sweeper says it, for a result's name: 'test/accuracy', 'wall_time_s'."""
    return "minimize" if METRIC_MODES.get(metric_name.rpartition("/")[2]) == "min" else "maximize"


@dataclass
class EarlyStoppingConfig:
    patience: Optional[int] = None  # periodic evals without improvement of checkpoint.metric; None = off
    min_delta: float = 0.0  # an improvement smaller than this does not count


@dataclass
class TrainerConfig:
    epochs: int = 30
    max_steps: Optional[int] = None  # stop earlier than `epochs` (smoke runs)
    batch_size: int = 64
    eval_batch_size: int = 512
    log_every: int = 50  # steps; the routine host sync (evals and checkpoints sync at their own boundaries)
    eval_every: int = 200  # steps; 0 = evaluate only at the end
    steps_per_call: Optional[int] = None  # the most train steps per compiled call; None: 200, 1 for convnets on CPU
    clip_norm: Optional[float] = None  # global-norm gradient clipping
    nan_check: str = "log"  # "log": at log cadence; "step": every step (debug)
    checkpoint_every: int = 200  # steps; 0 = only at the end
    resume: str = "auto"  # auto | never | <checkpoint dir of another run>
    profile: bool = False
    accumulate: int = 1  # micro-batches (steps) per optimizer update, optax.MultiSteps
    ema_decay: Optional[float] = None  # exponential moving average of the parameters, used by every eval
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)


@dataclass
class CheckpointConfig:
    enabled: bool = True
    keep: int = 3  # newest checkpoints kept
    keep_best: int = 1  # best checkpoints kept by `metric` on the periodic eval split
    metric: Optional[str] = None  # default: accuracy (classification) or loss (regression)
    mode: Optional[str] = None  # max | min; default follows the metric (METRIC_MODES)
    async_save: bool = True


@dataclass
class DatasetConfig:
    name: str = "digits"
    tfds_name: str = "zoo_digits"
    embedded: bool = True
    task: str = "classification"
    normalize: str = "global"
    normalize_target: bool = False
    test_fraction: float = 0.2  # only for embedded sets, which ship without a split
    validation_fraction: float = 0.0  # carved from train when > 0; periodic evals then use it
    num_classes: Optional[int] = 10  # classification only
    # synthetic_linear's generator (set in conf/dataset/synthetic_linear.yaml); null and refused elsewhere
    num_examples: Optional[int] = None
    num_features: Optional[int] = None
    noise: Optional[float] = None


@dataclass
class ParallelConfig:
    mode: str = "none"
    cpu_devices: Optional[int] = None  # simulate (and use) N CPU devices
    fsdp: bool = False  # sharded only: shard params and optimizer state along `data`
    device_data_mb: float = 1024  # train splits up to this size live on each device; larger ones stream


@dataclass
class DistributedConfig:
    mode: str = "none"  # none | explicit | auto (jax.distributed.initialize() detects SLURM, MPI, ...)
    coordinator_address: Optional[str] = None  # host:port of process 0
    num_processes: Optional[int] = None
    process_id: Optional[int] = None
    timeout_s: int = 300
    lost_after_s: float = 30  # a peer silent this long (no heartbeat) is taken for lost: zoo.parallel.heartbeats


@dataclass
class LoggerConfig:
    progress: bool = True
    tensorboard: bool = True
    plot: bool = True
    summary: bool = True  # parameters per layer and XLA's FLOPs of one step (a lowering, not a compile) at the start


@dataclass
class PathsConfig:
    data_dir: str = "~/tensorflow_datasets"
    output_dir: str = "outputs/manual"
    compilation_cache_dir: Optional[str] = None


@dataclass
class TrainConfig:
    seed: int = 0
    optimized_metric: Any = None  # 'split/metric', or a list for a multi-objective sweep; null: zoo.config.default_objective
    model: Any = field(default_factory=dict)
    optimizer: Any = field(default_factory=dict)
    schedule: Any = None
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)


@dataclass
class EvalTrainerConfig:
    batch_size: Optional[int] = None  # eval batch size; None = the run's own
    eval_batch_size: Optional[int] = None  # the same, by its name in the run's config: set one of the two


@dataclass
class EvalPathsConfig:
    data_dir: str = "~/tensorflow_datasets"
    compilation_cache_dir: Optional[str] = None


@dataclass
class ReaderDatasetConfig:
    tfds_name: Optional[str] = None  # the run's own catalog dataset pinned to a version (NAME:VERSION); None: the run's


@dataclass
class RunReaderConfig:
    """What the commands that read a finished run (eval.py, export.py) share."""

    run_dir: str = MISSING
    checkpoint: str = "final"  # final (what results.json reports) | latest | best | <step>
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # this command's, never the run's
    trainer: EvalTrainerConfig = field(default_factory=EvalTrainerConfig)
    paths: EvalPathsConfig = field(default_factory=EvalPathsConfig)
    dataset: ReaderDatasetConfig = field(default_factory=ReaderDatasetConfig)  # (a copy of another version)


@dataclass
class EvalConfig(RunReaderConfig):
    split: str = "test"


@dataclass
class ExportConfig(RunReaderConfig):
    platforms: List[str] = field(default_factory=lambda: ["cpu"])  # jax.export targets


@dataclass
class PredictConfig:
    run_dir: str = MISSING
    input: str = MISSING  # .npy or .csv
    output: Optional[str] = None  # a .csv file; None = stdout
    batch_size: int = 1024


def register_configs() -> None:
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="eval_schema", node=EvalConfig)
    store.store(name="export_schema", node=ExportConfig)
    store.store(name="predict_schema", node=PredictConfig)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_positive_finite(value) -> bool:
    return is_number(value) and 0 < value < math.inf


def check_known_keys(cfg: DictConfig, schema_class) -> None:
    """Hydra's own hint for a misspelt key is `+key=value`, which adds it unchecked; refuse it here instead."""
    for prefix, known in _known_keys(schema_class).items():
        node = OmegaConf.select(cfg, prefix[:-1]) if prefix else cfg
        extra = sorted(set(node or ()) - set(known))
        _require(not extra, f"{prefix}{extra[0] if extra else ''} is not a setting; remove it or fix its spelling "
                 f"(settings {'of ' + prefix[:-1] if prefix else 'at the top level'}: {', '.join(known)}).")


@functools.cache
def _known_keys(schema_class) -> dict:
    """The settings at the top level ('') and in each typed group ('trainer.', ...) of a schema: built once, as
    building the structured config costs ~10 ms, paid by every job of a sweep."""
    def typed_groups(node: DictConfig, prefix: str) -> dict:
        groups = {prefix: list(node)}
        for k in node:
            if not OmegaConf.is_missing(node, k) and isinstance(node[k], DictConfig) and \
                    OmegaConf.get_type(node[k]) is not dict:  # nested ones too: trainer.early_stopping.
                groups.update(typed_groups(node[k], f"{prefix}{k}."))
        return groups

    return typed_groups(OmegaConf.structured(schema_class), "")


def validate_placement(cfg: DictConfig) -> None:
    """The parallel and distributed settings, which train.py, eval.py and export.py each take."""
    p = cfg.parallel
    _require(p.mode in PARALLEL_MODES, f"parallel.mode must be one of {PARALLEL_MODES}, got {p.mode!r}.")
    _require(cfg.distributed.mode in ("none", "explicit", "auto"),
             f"distributed.mode must be none, explicit or auto, got {cfg.distributed.mode!r}.")
    _refuse_process_settings(cfg.distributed)
    _require(cfg.distributed.mode == "none" or cfg.distributed.timeout_s > 0,  # JAX waits without end at 0 or less
             f"distributed.timeout_s must be a positive number of seconds, got {cfg.distributed.timeout_s}.")
    _require(cfg.distributed.mode == "none" or (math.isfinite(cfg.distributed.lost_after_s)
                                                and cfg.distributed.lost_after_s >= 5),
             f"distributed.lost_after_s must be at least 5 seconds (each process writes its heartbeat once a second), "
             f"got {cfg.distributed.get('lost_after_s')}.")
    n = cfg.distributed.get("num_processes")
    _require(cfg.distributed.mode != "explicit" or n is None or n <= 1 or p.mode == "sharded",  # before joining
             f"parallel.mode={p.mode} runs in one process; distributed.num_processes={n} needs parallel=sharded.")
    if cfg.distributed.mode == "auto" and p.mode != "sharded":  # before joining, where the environment tells
        count, variable = processes_from_environment()
        _require(count is None or count <= 1, f"parallel.mode={p.mode} runs in one process; distributed=auto joins "
                 f"the {count} processes {variable}={count} names, which need parallel=sharded.")
    address = cfg.distributed.get("coordinator_address")
    _require(cfg.distributed.mode != "explicit" or address is None or coordinator_host(address) is not None,
             f"distributed.coordinator_address={address} is not host:port; set it to process 0's host and a free "
             f"port, e.g. distributed.coordinator_address=localhost:12355.")
    _require(p.device_data_mb >= 0, f"parallel.device_data_mb must be >= 0 (0 streams every split from the host), "
             f"got {p.device_data_mb}.")
    _require(p.cpu_devices is None or 0 < p.cpu_devices <= MAX_CPU_DEVICES,
             f"parallel.cpu_devices must be between 1 and {MAX_CPU_DEVICES} (or null), got {p.cpu_devices}.")


def processes_from_environment() -> tuple:
    """(process count, the variable that holds it) that distributed=auto will join with, where the environment
    alone says: Open MPI's, then SLURM's, detected as jax.distributed detects them (jax/_src/clusters, in its order).
    (None, None) elsewhere: on TPU pods and Kubernetes only their metadata services tell, and the count is checked
    once the processes have joined."""
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
    if "OMPI_MCA_orte_hnp_uri" in os.environ:
        variable = "OMPI_COMM_WORLD_SIZE"
    elif all(name in os.environ for name in slurm):
        variable = "SLURM_NTASKS"
    else:
        return None, None
    try:
        return int(os.environ[variable]), variable
    except (KeyError, ValueError):  # JAX's own error says so when it joins
        return None, None


def coordinator_host(address: str) -> Optional[str]:
    """The host of a `host:port` coordinator address (an IPv6 one in brackets, [::1]:12355), or None where it is not
    one: JAX takes the port after the last colon, and without one failed on "list index out of range"."""
    host, _, port = str(address).rpartition(":")
    if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        return None
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _refuse_process_settings(d: DictConfig) -> None:
    """distributed.process_id=1 without distributed=explicit would train alone, as if it were the only process
    (distributed=auto takes the processes from the environment and ignores it as well)."""
    given = [k for k in ("num_processes", "process_id", "coordinator_address") if d.get(k) is not None]
    if d.mode == "explicit" or not given:
        return
    setting = f"distributed.{given[0]}"
    if d.mode == "auto":
        raise UserError(f"{setting} only applies to distributed=explicit; distributed=auto reads the processes from "
                        f"the environment (SLURM, Open MPI, ...) and ignores it: use distributed=explicit, or remove "
                        f"{setting}.")
    raise UserError(f"{setting} only applies to distributed=explicit, and without it this command runs one process "
                    f"alone; add distributed=explicit, or remove {setting}.")


def validate(cfg: DictConfig, new_run: bool = True) -> None:
    """Reject values a schema cannot express, naming the setting to change. `new_run`: `cfg` is about to train,
    rather than a finished run's saved config that eval.py and export.py read."""
    check_known_keys(cfg, TrainConfig)
    t = cfg.trainer
    _require(t.epochs > 0, f"trainer.epochs must be a positive integer, got {t.epochs}.")
    _require(t.max_steps is None or t.max_steps > 0,
             f"trainer.max_steps must be positive or null, got {t.max_steps}.")
    _require(t.batch_size > 0, f"trainer.batch_size must be a positive integer, got {t.batch_size}.")
    _require(t.eval_batch_size > 0,
             f"trainer.eval_batch_size must be a positive integer, got {t.eval_batch_size}.")
    _require(t.log_every > 0, f"trainer.log_every must be a positive number of steps, got {t.log_every}.")
    _require(t.eval_every >= 0, f"trainer.eval_every must be >= 0 steps (0 = only at the end), got {t.eval_every}.")
    _require(t.steps_per_call is None or t.steps_per_call > 0,
             f"trainer.steps_per_call must be >= 1 or null (automatic), got {t.steps_per_call}.")
    _require(t.clip_norm is None or t.clip_norm > 0, f"trainer.clip_norm must be positive or null, got {t.clip_norm}.")
    _require(t.checkpoint_every >= 0, f"trainer.checkpoint_every must be >= 0 steps (0 = only at the end), "
             f"got {t.checkpoint_every}.")
    _validate_trainer_features(cfg)
    c = cfg.checkpoint
    _require(c.keep > 0, f"checkpoint.keep must be a positive integer, got {c.keep}.")
    _require(c.keep_best >= 0, f"checkpoint.keep_best must be >= 0, got {c.keep_best}.")
    _require(c.mode in (None, "max", "min"), f"checkpoint.mode must be max, min or null, got {c.mode!r}.")
    _require(t.nan_check in ("log", "step"), f"trainer.nan_check must be 'log' or 'step', got {t.nan_check!r}.")
    _require(isinstance(cfg.seed, int) and 0 <= cfg.seed < 2**32,  # JAX keys hold 32 bits of it
             f"seed must be an integer in [0, 2**32), got seed={cfg.seed!r}.")
    lr = cfg.optimizer.get("learning_rate")
    _require(is_positive_finite(lr), f"optimizer.learning_rate must be a positive finite number, got {lr!r}.")
    # a schedule without the key has no warmup; one given null would reach optax (and the length check) as None
    has_warmup = cfg.schedule is not None and "warmup_steps" in cfg.schedule
    warmup = cfg.schedule.get("warmup_steps") if has_warmup else None
    _require(not has_warmup or (isinstance(warmup, int) and warmup >= 0),
             f"schedule.warmup_steps must be an integer >= 0, got {warmup!r}.")
    dropout = cfg.model.get("dropout", 0.0)
    _require(isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0,
             f"model.dropout must be in [0, 1), got {dropout!r}.")
    d = cfg.dataset
    _require(d.task in TASK_NAMES, f"dataset.task must be one of {TASK_NAMES}, got {d.task!r}.")
    _require(d.normalize in NORMALIZATIONS, f"dataset.normalize must be one of {NORMALIZATIONS}, got {d.normalize!r}.")
    _require(0.0 < d.test_fraction < 1.0, f"dataset.test_fraction must be in (0, 1), got {d.test_fraction}.")
    _require(0.0 <= d.validation_fraction < 1.0,
             f"dataset.validation_fraction must be in [0, 1), got {d.validation_fraction}.")
    _require(d.task != "classification" or (isinstance(d.num_classes, int) and d.num_classes >= 2),
             f"dataset.num_classes must be an integer >= 2 for classification, got {d.num_classes}.")
    _validate_generator(d)
    _validate_applicable(d)
    validate_placement(cfg)
    for group in ("model", "optimizer", "schedule"):  # before any of them is instantiated
        check_targets(cfg[group], group)
        _require_a_target(cfg[group], group)
        if cfg[group] is not None and cfg[group].get("_target_") is not None:
            check_arguments(cfg[group], group, ZOO_SET_ARGUMENTS[group])
    _validate_optimizer_ranges(cfg.optimizer)
    for key, value in (cfg.schedule or {}).items():
        _require(not key.endswith("_value") or (is_number(value) and 0 <= value < math.inf),
                 f"schedule.{key} must be a finite learning rate >= 0, got {value!r}.")
    exponent = (cfg.schedule or {}).get("exponent", 1.0)  # optax's cosine decay; <= 0 rises instead, to inf at the end
    _require(is_positive_finite(exponent), f"schedule.exponent must be a positive finite number, got {exponent!r}.")
    _validate_model(cfg.model)
    validate_metrics(cfg)
    if new_run:  # a run saved so still reads in eval.py: its checkpoints are what they are
        _validate_checkpoint_mode(cfg)
    validate_privacy(cfg, new_run)


EXAMPLE_CHOICES = {"model": "model=mlp", "optimizer": "optimizer=adamw", "schedule": "schedule=warmup_cosine"}


def _require_a_target(node, group: str) -> None:
    """Settings of a group with no `_target_` to take them: schedule=constant (null) given a setting, as Hydra's
    hint for `schedule.warmup_steps=100` has it (`+schedule.warmup_steps=100`), which would fail when built."""
    if node is None or node.get("_target_") is not None:
        return
    key = next((k for k in node if not str(k).startswith("_")), None)
    choose = f"choose one, e.g. {EXAMPLE_CHOICES[group]}"
    if key is None:
        raise UserError(f"{group} names no _target_ to build; {choose}.")
    if group == "schedule":
        raise UserError(unscheduled_setting(key))
    raise UserError(f"{group}.{key} is set, but {group} has no _target_ to pass it to; {choose}.")


def _validate_checkpoint_mode(cfg: DictConfig) -> None:
    """checkpoint.mode against the direction of a metric that has one kept the worst checkpoint as the best, and
    early stopping waited for the metric to get worse."""
    metric, mode = cfg.checkpoint.metric, cfg.checkpoint.mode
    named = metric or OBJECTIVES.get(cfg.dataset.task)
    right = METRIC_MODES.get(named)
    if mode is None or right is None or mode == right:
        return
    which = f"{named} (checkpoint.metric=null: the task's)" if metric is None else named
    raise UserError(f"checkpoint.mode={mode} would keep the {'highest' if mode == 'max' else 'lowest'} {which} as the "
                    f"best checkpoint, and early stopping would wait for it to {'rise' if mode == 'max' else 'fall'}; "
                    f"set checkpoint.mode={right} or leave it null (it follows the metric).")


def unscheduled_setting(key: str) -> str:
    """The sentence for schedule.<key> set on schedule=constant, from the config or the command line."""
    return (f"schedule.{key} is set, but schedule=constant builds no schedule to take it (the learning rate stays "
            f"optimizer.learning_rate); choose one, e.g. {EXAMPLE_CHOICES['schedule']}, or remove schedule.{key}.")


ZOO_SET_ARGUMENTS = {  # what the zoo passes to each group's _target_ itself
    "model": {"input_shape": "the dataset", "out_features": "the dataset", "rngs": "seed"},
    "optimizer": {},
    "schedule": {"peak_value": "optimizer.learning_rate", "decay_steps": "the run's length (trainer.epochs, "
                 "trainer.max_steps)"},
}
GENERATOR_KEYS = ("num_examples", "num_features", "noise")


def dotted_settings(tree, prefix=""):
    """{'trainer.batch_size': 64, ...}: a nested config's values by their dotted names."""
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(dotted_settings(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def interpolation_in(saved, where: str = "") -> tuple | None:
    """(setting, value) of the first string of a saved config that OmegaConf would read as an interpolation. A run
    saves its config resolved, so one there was written by something else: resolving it would fail with
    omegaconf's traceback, or read the environment of whoever evaluates the run."""
    if isinstance(saved, str):
        return (where, saved) if "${" in saved else None
    items = saved.items() if isinstance(saved, dict) else enumerate(saved) if isinstance(saved, list) else ()
    for key, value in items:
        found = interpolation_in(value, f"{where}[{key}]" if isinstance(key, int) else
                                 f"{where}.{key}" if where else str(key))
        if found:
            return found
    return None


def refuse_interpolations(saved: dict, directory: str, way_out: str) -> None:
    found = interpolation_in(saved)
    if found:
        raise UserError(f"the config saved in {directory} is damaged: {found[0]} holds {found[1]!r}, an "
                        f"interpolation, where a run saves plain values; {way_out}")


def saved_with_defaults(saved: dict) -> DictConfig:
    """A run's saved config on this version's schema: settings added since it was saved take their defaults.
    Raises omegaconf's errors for a setting this version does not have."""
    for group in ("model", "optimizer"):  # typed Any in the schema: a damaged file could hold anything there
        if not isinstance(saved.get(group), dict):
            raise ValueError(f"its {group} is {saved.get(group)!r}, not a mapping of settings")
    saved = {**saved, "dataset": dict(saved.get("dataset", {}))}
    if saved["dataset"].get("tfds_name") != "zoo_synthetic_linear":
        for key in GENERATOR_KEYS:  # runs saved before these keys became synthetic_linear's alone
            saved["dataset"].pop(key, None)
    if saved["dataset"].get("task", "classification") != "classification":
        saved["dataset"]["num_classes"] = None  # runs saved while regression ignored it: read as they trained
    return OmegaConf.merge(OmegaConf.structured(TrainConfig), saved)


def builder_name(tfds_name: str) -> str:
    """dataset.tfds_name without the version or config it may pin: zoo_digits:1.0.0, zoo_digits/config."""
    return tfds_name.split(":")[0].split("/")[0]


def _validate_generator(d: DictConfig) -> None:
    """num_examples/num_features/noise generate synthetic_linear; anywhere else they would be silently ignored."""
    if builder_name(d.tfds_name) != "zoo_synthetic_linear":  # a pinned version is refused by name
        given = [k for k in GENERATOR_KEYS if d[k] is not None]
        _require(not given, f"dataset.{given[0] if given else ''} only applies to dataset=synthetic_linear (it "
                 f"generates that data); remove it for dataset={d.name}.")
        return
    for key, ok, bound in (("num_examples", lambda v: v > 0, "positive"), ("num_features", lambda v: v > 0, "positive"),
                           ("noise", lambda v: v >= 0, ">= 0")):
        _require(d[key] is not None and ok(d[key]), f"dataset.{key} must be {bound} for dataset=synthetic_linear, "
                 f"got {d[key]}.")


# optax accepts any float for these, whatever its optimizer; out of range they diverge or silently train nothing.
_UNIT = (lambda v: 0 <= v < 1, "in [0, 1)")
_NON_NEGATIVE = (lambda v: v >= 0, ">= 0")
OPTIMIZER_RANGES = {"weight_decay": _NON_NEGATIVE, "momentum": _UNIT, "b1": _UNIT, "b2": _UNIT, "eps": _NON_NEGATIVE,
                    "eps_root": _NON_NEGATIVE}


def _validate_optimizer_ranges(o: DictConfig) -> None:
    """The settings of OPTIMIZER_RANGES that the optimizer config holds. Called after check_arguments, which
    names a key its target does not take, or a word where it takes a number."""
    defaults = parameter_defaults(o)
    for key, (ok, bounds) in OPTIMIZER_RANGES.items():
        value = o.get(key)
        # null only where the optax function's own default is (sgd's momentum): elsewhere optax fails on it mid-step
        null_ok = key not in o or (key in defaults and defaults[key] is None)
        _require((value is None and null_ok) or (is_number(value) and ok(value)),
                 f"optimizer.{key} must be {bounds}, got {value!r}.")
    # Adam's family divides by sqrt(nu + eps_root) + eps: both 0 divide a zero gradient (a constant input pixel's
    # weight) by zero, and the loss turns NaN. An optimizer without eps_root (adagrad) may take eps=0.
    eps_root = o.get("eps_root", defaults.get("eps_root"))
    _require(o.get("eps") != 0 or eps_root is None or eps_root > 0,
             f"optimizer.eps=0 with optimizer.eps_root={eps_root or 0} divides a zero gradient by zero; set "
             "optimizer.eps > 0 (e.g. 1e-8) or optimizer.eps_root > 0.")


def _validate_applicable(d: DictConfig) -> None:
    """Keys that the chosen dataset would silently ignore. (test_fraction is refused on a catalog set only when
    changed from its default: the schema's value cannot be told apart from the same value typed.)"""
    _require(not (d.normalize_target and d.task == "classification"),
             f"dataset.normalize_target only applies to regression targets; dataset={d.name} is classification, "
             "so remove it (or set dataset.normalize_target=false).")
    _require(d.embedded or d.test_fraction == DatasetConfig.test_fraction,
             f"dataset.test_fraction only applies to the embedded datasets, which ship without a split; "
             f"dataset={d.name} has its own test split, so remove it.")


def _validate_trainer_features(cfg: DictConfig) -> None:
    t, stopping = cfg.trainer, cfg.trainer.early_stopping
    _require(t.accumulate >= 1, f"trainer.accumulate must be a positive number of micro-batches per update, "
             f"got {t.accumulate}.")
    _require(t.ema_decay is None or 0.0 <= t.ema_decay < 1.0,
             f"trainer.ema_decay must be in [0, 1) or null, got {t.ema_decay}.")
    if stopping.patience is None:
        return
    _require(stopping.patience >= 1, f"trainer.early_stopping.patience must be a positive number of evals or null, "
             f"got {stopping.patience}.")
    _require(stopping.min_delta >= 0, f"trainer.early_stopping.min_delta must be >= 0, got {stopping.min_delta}.")
    _require(t.eval_every > 0, "trainer.early_stopping counts periodic evals; set trainer.eval_every to a positive "
             "number of steps.")
    _require(cfg.checkpoint.enabled and cfg.checkpoint.keep_best >= 1, "trainer.early_stopping reports the best "
             "checkpoint; set checkpoint.enabled=true and checkpoint.keep_best >= 1.")


def _positive_ints(value) -> bool:
    return isinstance(value, (list, tuple, ListConfig)) and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)


def _validate_model(m: DictConfig) -> None:
    """Sizes the model constructors would otherwise reject deep inside JAX, or accept and then fail to train."""
    if "hidden" in m:
        _require(_positive_ints(m.hidden), f"model.hidden must be a list of positive layer widths, got {m.hidden}.")
    if "channels" in m:
        _require(_positive_ints(m.channels) and len(m.channels) > 0,
                 f"model.channels must be a non-empty list of positive channel counts, got {m.channels}.")
    if "dense" in m:
        _require(_positive_ints([m.dense]), f"model.dense must be a positive integer, got {m.dense}.")
    if "activation" in m:
        import jax.nn  # the module only; no backend starts

        names = [name for name in ELEMENTWISE_ACTIVATIONS if callable(getattr(jax.nn, name, None))]
        _require(m.activation in names, f"model.activation must name an elementwise activation of jax.nn "
                 f"({', '.join(names)}), got {m.activation!r}.")


# jax.nn also holds functions of whole rows (softmax, glu, one_hot, logsumexp) that no hidden layer can apply
ELEMENTWISE_ACTIVATIONS = ("relu", "relu6", "gelu", "silu", "swish", "tanh", "sigmoid", "elu", "celu", "selu",
                           "leaky_relu", "softplus", "soft_sign", "log_sigmoid", "mish", "hard_tanh", "hard_sigmoid",
                           "hard_silu", "hard_swish", "squareplus", "sparse_plus", "sparse_sigmoid")


def validate_metrics(cfg: DictConfig) -> None:
    """Metric names are checked now, not after a whole run has trained."""
    task, has_validation = cfg.dataset.task, cfg.dataset.validation_fraction > 0
    names = cfg.optimized_metric if isinstance(cfg.optimized_metric, ListConfig) else [cfg.optimized_metric]
    if isinstance(cfg.optimized_metric, ListConfig):  # a list is a multi-objective sweep's: a Pareto front
        _require(len(names) > 0, "optimized_metric=[] lists no objective; set optimized_metric=null for the default, "
                                 "name one, or list two or more.")
        _require(len(names) > 1, f"optimized_metric=[{names[0]}] lists one objective; write it alone, "
                                 f"optimized_metric={names[0]}, or list two or more.")
        twice = sorted({str(n) for n in names if list(names).count(n) > 1})
        _require(not twice, f"optimized_metric lists {', '.join(twice)} more than once; list each objective once.")
    for name in names if cfg.optimized_metric is not None else []:
        split, _, metric = str(name).partition("/")
        splits = ("test", "train", "validation") if has_validation else ("test", "train")
        choices = [f"{s}/{m}" for s in splits for m in METRICS[task] if m != "count"]  # count ranks nothing
        _require(metric != "count" or split not in splits,
                 f"optimized_metric={name} is the number of examples in the {split} split, the same for every run, so "
                 f"it ranks nothing; use one of {choices}.")
        _require(split != "validation" or has_validation or metric not in METRICS[task],
                 f"optimized_metric={name} needs a validation split, which dataset.validation_fraction="
                 f"{cfg.dataset.validation_fraction} does not carve; set dataset.validation_fraction > 0 (e.g. 0.1) "
                 f"or use one of {choices}.")
        _require((split in splits and metric in METRICS[task]) or name in RUN_METRICS,
                 f"optimized_metric={name} is not a result of a {task} run; use one of {choices} "
                 f"(or a figure of the run itself, {' or '.join(RUN_METRICS)}, usually beside another objective).")
    metric = cfg.checkpoint.metric
    ranked = [m for m in METRICS[task] if m != "count"]  # count ranks nothing: every eval counts the same examples
    _require(metric != "count", "checkpoint.metric=count is the number of examples in the split each eval counts, the "
             f"same at every eval, so it ranks no checkpoint; use one of {ranked} or null.")
    _require(metric is None or metric in METRICS[task],
             f"checkpoint.metric={metric} is not a {task} metric; use one of {ranked} or null.")
    _require(metric is None or metric in METRIC_MODES or cfg.checkpoint.mode is not None,
             f"checkpoint.metric={metric} has no direction of its own; set checkpoint.mode=max or min.")
