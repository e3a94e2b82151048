"""Checks of a command's own command line, made before Hydra reads it: what Hydra would end in a traceback, in its
merge error (exit 1) or in argparse's usage text is one sentence naming the setting, exit 2, instead."""
import dataclasses
import os
import types
import typing

from zoo.errors import UserError, exit_with

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def refuse_null_groups(argv: list, conf_dir: str = CONF_DIR) -> None:
    """`model=null` (a config group set to null) ends in a traceback from Hydra's defaults list, and a multirun's
    `hydra.launcher=null` in one from Hydra's plugins; one sentence and exit 2 instead, before Hydra reads the
    command line."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        group = key.lstrip("+~")
        if key.startswith("~") and not sep and os.path.isdir(os.path.join(conf_dir, group)) and \
                group not in _optional_groups(conf_dir):  # Hydra's error names an interpolation, exit 1
            exit_with(UserError(f"{key}: every run takes one option of the {group} group; choose one of "
                                f"{', '.join(_options(conf_dir, group))} with {group}=<option>."))
        if not (sep and value.strip().lower() == "null" and group):
            continue
        if group in ("hydra.launcher", "hydra.sweeper") and {"-m", "--multirun"} & set(argv):
            plugin = group.removeprefix("hydra.")  # a multirun instantiates it: Hydra's RuntimeError otherwise
            exit_with(UserError(f"{key}=null: a multirun needs a {plugin}; choose one with hydra/{plugin}=<option> "
                                "(--hydra-help lists them under 'Configuration groups')."))
        if group.startswith("hydra/"):  # Hydra's own groups live in its package and its plugins
            exit_with(UserError(f"{key}=null: a config group cannot be set to null; choose one of its options "
                                "(--hydra-help lists them under 'Configuration groups')."))
        if os.path.isdir(os.path.join(conf_dir, group)):
            leave_out = f" (or ~{group} to leave it out)" if group in _optional_groups(conf_dir) else ""
            exit_with(UserError(f"{key}=null: a config group cannot be set to null; choose one of "
                                f"{', '.join(_options(conf_dir, group))}{leave_out}."))


def _options(conf_dir: str, group: str) -> list:
    return sorted(f.removesuffix(".yaml") for f in os.listdir(os.path.join(conf_dir, group)) if f.endswith(".yaml"))


def _optional_groups(conf_dir: str) -> set:
    """The groups train.yaml's defaults list takes only when chosen (`optional recipe: ...`, `experiment: null`):
    the others every run needs, and ~<group> left Hydra unable to compose."""
    import yaml

    try:
        with open(os.path.join(conf_dir, "train.yaml")) as f:
            defaults = yaml.safe_load(f).get("defaults") or []
    except (OSError, yaml.YAMLError, AttributeError):
        return set()
    entries = [entry for entry in defaults if isinstance(entry, dict)]
    return {key.removeprefix("optional ").strip() for entry in entries for key, value in entry.items()
            if key.startswith("optional ") or value is None}


def refuse_settings_of_an_unused_schedule(argv: list, conf_dir: str = CONF_DIR) -> None:
    """`schedule.warmup_steps=100` on schedule=constant (the default) ended in Hydra's 'Could not override', exit 1,
    and its hint, `+schedule.warmup_steps=100`, is then refused by the zoo: its sentence at once instead, exit 2. Only
    for a key of another schedule option, on a schedule decided here (a sweep of schedules, or a preset on the command
    line that chooses one, is left to Hydra)."""
    from omegaconf import OmegaConf

    def settings(option: str):  # empty for an option that builds no schedule (schedule: null)
        path = os.path.join(conf_dir, "schedule", f"{option}.yaml")
        if not os.path.isfile(path):
            return None  # not an option: Hydra's own error names them
        node = OmegaConf.load(path)
        return {k for k in (node.schedule or {} if "schedule" in node else node) if not str(k).startswith("_")}

    chosen = None
    for before, arg in zip([""] + argv, argv):
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "schedule" and before not in FLAGS_WITH_VALUES:
            chosen = value.strip()
    if chosen is None:
        if any(_chooses_a_schedule(arg, conf_dir) for arg in argv):
            return
        chosen = "constant"  # conf/train.yaml's
    if "," in chosen or "(" in chosen or settings(chosen) != set():  # a sweep, a schedule taking settings, a typo
        return
    others = set().union(*(settings(option) for option in _options(conf_dir, "schedule")))
    for before, arg in zip([""] + argv, argv):
        key, sep, _ = arg.partition("=")
        if sep and key.startswith("schedule.") and before not in FLAGS_WITH_VALUES \
                and key.removeprefix("schedule.") in others:
            from zoo.config import unscheduled_setting

            exit_with(UserError(unscheduled_setting(key.removeprefix("schedule."))))


def _chooses_a_schedule(arg: str, conf_dir: str) -> bool:
    """Whether `arg` chooses an option (experiment=digits_cnn_cosine) whose defaults override /schedule."""
    key, sep, value = arg.partition("=")
    path = os.path.join(conf_dir, key.lstrip("+"), f"{value.strip()}.yaml")
    if not sep or not os.path.isfile(path):
        return False
    with open(path) as f:
        return "/schedule:" in f.read()


FLAGS_WITH_VALUES = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir", "-c", "--cfg", "-p",
                     "--package", "-i", "--info", "--experimental-rerun")
TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _overridden_values(argv: list, setting_of, sweeps_only_under_m: bool):
    """(Hydra's override, `setting_of(key)`, [(value, as written)]) of each override on the command line that sets a
    value of a key `setting_of` knows (not None); a discrete sweep gives each of its values (only under -m where
    `sweeps_only_under_m`). Flags' own values, deletions, additions and intervals (a sweeper's search space, which
    checks its own) are left out, and so is an override Hydra cannot parse: its own error says what is wrong."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    multirun = bool({"-m", "--multirun"} & set(argv))
    for before, arg in zip([""] + argv, argv):
        if "=" not in arg or arg.startswith("-") or before in FLAGS_WITH_VALUES:
            continue
        setting = setting_of(arg.partition("=")[0].removeprefix("++"))  # before parsing, which costs
        if setting is None:
            continue
        try:
            override = OverridesParser.create().parse_overrides([arg])[0]
        except Exception:  # noqa: BLE001 — Hydra's own grammar error says what is wrong with it
            continue
        if override.is_delete() or override.is_add() or override.package is not None:
            continue
        if not override.is_sweep_override():
            yield override, setting, [(override.value(), arg.partition("=")[2])]
        elif override.is_discrete_sweep() and (multirun or not sweeps_only_under_m):
            from zoo.sweeps.search_space import zero_step

            if (refused := zero_step(override)) is not None:  # its values cannot be enumerated: a traceback
                exit_with(refused)
            yield override, setting, [(v, str(v)) for v in override.sweep_iterator()]


def refuse_mistyped_values(argv: list, schema) -> None:
    """`trainer.batch_size=abc` (or `trainer.epochs=1.5`, a sweep's `-m trainer.batch_size=16,abc`): a value that a
    typed setting of `schema` does not take ended in Hydra's 'Error merging override' and OmegaConf's node details,
    exit 1; one sentence naming the setting and its type and exit 2 instead, before Hydra reads the command line.
    The value is tried as OmegaConf takes it; settings without a type (model.*, optimizer.*) are left to Hydra."""
    from hydra.conf import HydraConf
    from omegaconf import nodes
    from omegaconf.errors import OmegaConfBaseException

    node_types = {int: nodes.IntegerNode, float: nodes.FloatNode, bool: nodes.BooleanNode, str: nodes.StringNode}

    def setting_of(key: str):
        # Hydra's own settings (hydra.job.chdir) have their schema too, and the sweeper's (the zoo's Optuna one or
        # Hydra's basic one) and the population launcher's where the command line chooses them
        if key.startswith("hydra.sweeper."):
            return _typed_setting(*_sweeper_setting(argv, key.removeprefix("hydra.sweeper.")))
        if key.startswith("hydra.launcher."):
            return _typed_setting(_launcher_schema(_chosen_launcher(argv)), key.removeprefix("hydra.launcher."))
        if key.startswith("hydra."):
            return _typed_setting(HydraConf, key.removeprefix("hydra."))
        return _typed_setting(schema, key)

    for override, setting, values in _overridden_values(argv, setting_of, sweeps_only_under_m=False):
        kind, optional = setting
        takes = TYPE_NAMES[kind] if not optional else "true, false or null" if kind is bool else \
            f"{TYPE_NAMES[kind]} or null"
        for value, typed in values:
            try:
                node_types[kind](value=value, is_optional=optional)
            except OmegaConfBaseException:
                got = "null" if value is None else typed or "an empty value"
                exit_with(UserError(f"{override.key_or_group} must be {takes}, got {got}."))
    sweeper = _sweeper_schema(_chosen_sweeper(argv))  # its lists: hydra.sweeper.directions=maximize
    if sweeper is not None:
        refuse_values_that_are_not_lists(argv, sweeper, prefix="hydra.sweeper.")
    _refuse_params_of_the_basic_sweeper(argv)


def _refuse_params_of_the_basic_sweeper(argv: list) -> None:
    """`-m hydra.sweeper.params={seed:'0,1'}` (or `+hydra.sweeper.params.seed='0,1'`): Hydra's basic sweeper's
    params are a typed dict, null until a config sets them, which OmegaConf cannot merge into (an AttributeError or
    AssertionError traceback, exit 1); one sentence with the same sweep as an override of its own instead."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if _chosen_sweeper(argv) != "basic":
        return
    for before, arg in zip([""] + argv, argv):
        key = arg.partition("=")[0].lstrip("+")
        if "=" not in arg or before in FLAGS_WITH_VALUES or key.split(".")[:3] != ["hydra", "sweeper", "params"]:
            continue
        try:
            override = OverridesParser.create().parse_overrides([arg])[0]
        except Exception:  # noqa: BLE001 — Hydra's own grammar error says what is wrong with it
            continue
        value = override.value()
        if key == "hydra.sweeper.params" and isinstance(value, dict):
            sweeps = [f"{k}={v}" for k, v in value.items()]
        elif key != "hydra.sweeper.params" and not isinstance(value, dict) and not override.is_sweep_override():
            sweeps = [f"{key.removeprefix('hydra.sweeper.params.')}={value}"]
        else:
            continue  # Hydra's own error
        exit_with(UserError("hydra.sweeper.params cannot be set on the command line under Hydra's basic sweeper "
                            "(OmegaConf cannot merge into its params, null until a config sets them); give each sweep "
                            f"as an override of its own: {' '.join(sweeps)}."))


def _sweeper_setting(argv: list, key: str) -> tuple:
    """(the dataclass that has the sweeper's setting `key`, its key there): the zoo's Optuna sweeper's
    `sampler.*` and `pruner.*` are the chosen sampler's (tpe unless hydra/sweeper/sampler= chooses another) and
    pruner's; other keys the sweeper's own."""
    name = _chosen_sweeper(argv)
    group, _, rest = key.partition(".")
    if name == "zoo_optuna" and rest and group in ("sampler", "pruner"):
        from zoo.sweeps.config import PRUNERS, SAMPLERS

        chosen = "tpe" if group == "sampler" else None  # the sweeper's defaults
        for arg in argv:
            option, sep, value = arg.partition("=")
            if sep and option.lstrip("+") == f"hydra/sweeper/{group}":
                chosen = value.strip()
        return (SAMPLERS if group == "sampler" else PRUNERS).get(chosen), rest
    return _sweeper_schema(name), key


def _sweeper_schema(name: str):
    """The settings' dataclass of the sweeper `name` where the zoo knows it (its Optuna sweeper, Hydra's basic one)."""
    if name == "zoo_optuna":
        from zoo.sweeps.config import ZooOptunaSweeperConfig

        return ZooOptunaSweeperConfig
    if name == "basic":
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeperConf

        return BasicSweeperConf
    return None


def _chosen_sweeper(argv: list) -> str:
    """The sweeper's name: hparams_search=<option> chooses zoo_optuna, hydra/sweeper=NAME its own, the last of them
    deciding; basic (Hydra's default, as conf/train.yaml leaves it) where neither is given."""
    chosen = "basic"
    for arg in argv:
        key, _, value = arg.partition("=")
        if key.lstrip("+") == "hparams_search" and value.strip().lower() not in ("", "null"):
            chosen = "zoo_optuna"
        elif key.lstrip("+") == "hydra/sweeper":
            chosen = value.strip()
    return chosen


def _chosen_launcher(argv: list):
    """The launcher's name where the command line chooses it (hydra/launcher=NAME, the last deciding), else None."""
    chosen = None
    for arg in argv:
        key, _, value = arg.partition("=")
        if key.lstrip("+") == "hydra/launcher":
            chosen = value.strip()
    return chosen


def _launcher_schema(name):
    """The settings' dataclass of the launcher `name` where the zoo knows it (its population launcher, submitit's)."""
    if name == "population":
        from hydra_plugins.zoo_population_launcher.population_launcher import PopulationLauncherConf

        return PopulationLauncherConf
    if name in ("submitit_local", "submitit_slurm"):
        from hydra_plugins.hydra_submitit_launcher import config

        return config.LocalQueueConf if name == "submitit_local" else config.SlurmQueueConf
    return None


def _typed_setting(schema, key: str):
    """(type, whether null is allowed) of the setting `key` of the dataclass `schema` where it is one of TYPE_NAMES',
    else None (a config group, a setting without a type, or no setting at all)."""
    *groups, name = key.split(".")
    for group in [*groups, name]:
        if not dataclasses.is_dataclass(schema):
            return None
        schema = typing.get_type_hints(schema).get(group)
    optional = typing.get_origin(schema) in (typing.Union, types.UnionType) and type(None) in typing.get_args(schema)
    if optional:
        schema = next((t for t in typing.get_args(schema) if t is not type(None)), None)
    return (schema, optional) if schema in TYPE_NAMES else None


SWITCHES = {"-h", "--help", "--hydra-help", "--version", "--resolve", "-r", "--run", "-m", "--multirun", "-sc",
            "--shell-completion"}
INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def overrides_then_flags(argv: list) -> list:
    """`argv` with Hydra's overrides first, in their order, and its flags (with their values) after them. argparse
    reads the overrides as one run of words: `python train.py debug=smoke -m seed=0,1` ended in its usage text and
    'unrecognized arguments: seed=0,1', exit 2. After the overrides, --info takes a topic only where one is given
    (`--info seed=1` read seed=1 as its topic: 'invalid choice'). `argv` as it is where its overrides are one run
    already, after no --info without a topic, or where it holds a flag argparse does not know (its own message
    says so)."""
    overrides, flags, at, i = [], [], [], 0
    topicless_info = False  # a bare --info just before an override, which argparse would take for its topic
    while i < len(argv):
        arg, name = argv[i], argv[i].partition("=")[0]
        takes = 1 if name in FLAGS_WITH_VALUES and "=" not in arg and name not in ("-i", "--info") else 0
        if name in ("-i", "--info") and "=" not in arg and i + 1 < len(argv) and argv[i + 1] in INFO_TOPICS:
            takes = 1
        if not arg.startswith("-"):
            overrides.append(arg)
            at.append(i)
        elif name in SWITCHES or name in FLAGS_WITH_VALUES:
            flags += argv[i:i + 1 + takes]
            topicless_info |= arg in ("-i", "--info") and not takes and i + 1 < len(argv) and \
                not argv[i + 1].startswith("-")
        else:
            return argv
        i += 1 + takes
    return argv if not topicless_info and (not at or at[-1] - at[0] + 1 == len(at)) else overrides + flags


# the settings the zoo reads as paths of files or folders (zoo.cli.launch_dir_path: ~ is the home directory)
PATH_SETTINGS = ("run_dir", "input", "output", "paths.data_dir", "trainer.resume")
# Hydra's own, which it makes as given: a leading ~ is expanded here, or it would name a folder `~` in the working
# directory (zsh and bash leave a ~ after `hydra.run.dir=` as it is)
HYDRA_DIRS = ("hydra.run.dir", "hydra.sweep.dir")


def quote_paths(argv: list) -> list:
    """`argv` with the value of a path setting quoted where Hydra's grammar reads it only quoted: `run_dir=~/r` (as
    zsh passes it, expanding ~ only at a word's start), `input=digits (1).csv`, a name with an accent. Hydra ended in
    its grammar error, exit 1 ("mismatched input '.' expecting <EOF>"). A value that parses is left as it is (a sweep
    `run_dir=a,b`, an interpolation), and one holding a double quote, a backslash or a comma, which quoting would
    change."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, quoted = OverridesParser.create(), []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") in HYDRA_DIRS and (value == "~" or value.startswith("~/")):
            value = os.path.expanduser(value)
            arg = f"{key}={value}"
        if sep and not arg.startswith("-") and key.lstrip("+") in PATH_SETTINGS + HYDRA_DIRS and value and \
                not set(value) & set('"\\,'):
            try:
                parser.parse_overrides([arg])
            except Exception:  # noqa: BLE001 — Hydra's grammar error: the same value quoted
                arg = f'{key}="{value}"'
        quoted.append(arg)
    return quoted


def refuse_multirun(argv: list, refusal: str) -> None:
    """`refusal` where the command line asks for a multirun (-m, --multirun or hydra.mode=MULTIRUN)."""
    if {"-m", "--multirun"} & set(argv) or any(arg.lstrip("+") == "hydra.mode=MULTIRUN" for arg in argv):
        exit_with(UserError(refusal))


def refuse_settings_of_export(argv: list) -> None:
    """`python predict.py run_dir=R input=x.npy checkpoint=latest`: predict.py serves the checkpoint export.py
    exported, and took no checkpoint= (nor platforms=) of its own; Hydra refused it with the hint to append it, which
    was then refused as a misspelt setting. One sentence naming the export.py command that does it, and exit 2."""
    run_dir = next((arg.partition("=")[2] for arg in argv if arg.lstrip("+").startswith("run_dir=")), "...")
    for arg in argv:
        key, sep, _ = arg.lstrip("+~").partition("=")
        if sep and key in ("checkpoint", "platforms"):
            setting = arg.lstrip("+~")
            exit_with(UserError(f"{setting} is not a setting of predict.py, which predicts with the run's export/ as "
                                f"export.py wrote it; export that one first: python export.py run_dir={run_dir} "
                                f"{setting}."))


def refuse_sweeps_but_of_run_dir(argv: list) -> None:
    """export.py -m: each job writes its run's one export/, so a sweep over anything but run_dir (checkpoint=best,
    latest) left only its last job's export, each earlier one replaced without a word."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not {"-m", "--multirun"} & set(argv):
        return
    for before, arg in zip([""] + argv, argv):
        if "=" not in arg or arg.startswith("-") or before in FLAGS_WITH_VALUES:
            continue
        try:
            override = OverridesParser.create().parse_overrides([arg])[0]
        except Exception:  # noqa: BLE001 — Hydra's own grammar error says what is wrong with it
            continue
        if override.is_sweep_override() and override.get_key_element().lstrip("+") != "run_dir":
            exit_with(UserError(f"export.py -m sweeps run_dir alone: each job writes its run's one export/, so {arg} "
                                "would leave only the last job's; export one checkpoint of a run per command."))


def refuse_resolve_without_run_dir(argv: list) -> None:
    """`python train.py --cfg job --resolve`: paths.output_dir is ${hydra:runtime.output_dir}, which Hydra sets only
    when the command runs, and OmegaConf's InterpolationValidationError traceback ended the command, exit 1."""
    shown = [value for flag, value in zip(argv, argv[1:] + [""]) if flag in ("-c", "--cfg")]
    shown += [arg.partition("=")[2] for arg in argv if arg.startswith("--cfg=")]
    if "--resolve" not in argv or not {"job", "all"} & set(shown):
        return
    if not any(arg.partition("=")[0].lstrip("+") == "paths.output_dir" for arg in argv):
        exit_with(UserError("--resolve cannot show paths.output_dir, the run directory Hydra makes only when the "
                            "command runs (${hydra:runtime.output_dir}); give paths.output_dir=DIR as well, or leave "
                            "out --resolve."))


NOT_RUNNING = {"-c", "--cfg", "-i", "--info", "-h", "--help", "--hydra-help", "--version", "-sc", "--shell-completion"}


def refuse_search_without_multirun(argv: list) -> None:
    """Without -m Hydra runs no sweeper: `python train.py hparams_search=digits_mlp` trained one run with the
    search's base settings and exited 0, as if the search had run. Flags that only show (--cfg, --info) pass."""
    flags = set(argv)
    if {"-m", "--multirun"} & flags or NOT_RUNNING & flags or any(a.startswith(("--cfg=", "--info=")) for a in argv):
        return
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "hparams_search" and value.strip().lower() not in ("", "null"):
            exit_with(UserError(f"{arg} sets up a search of many trials, which runs under -m (python train.py -m "
                                f"{arg}); add -m, or leave hparams_search out to train once."))


def refuse_bare_paths(argv: list, file_key: str | None = None) -> None:
    """`python eval.py outputs/...` ends in Hydra's grammar error, which does not name the setting: one sentence
    and exit 2 instead, naming run_dir (or `file_key` for a file: predict.py's input). An argument that follows a
    flag is the flag's value, e.g. --config-dir DIR."""
    for before, arg in zip([""] + argv, argv):
        flag_value = before.startswith("-") and "=" not in before
        if "=" not in arg and not arg.startswith("-") and not flag_value and ("/" in arg or os.path.exists(arg)):
            key = file_key if file_key and os.path.isfile(arg) else "run_dir"
            exit_with(UserError(f"{arg} is not an override; pass it as {key}={arg}."))


def refuse_training_settings(argv: list, script: str, schema, conf_dir: str = CONF_DIR, takes=()) -> None:
    """`python eval.py run_dir=R dataset=mnist` (or `+model=cnn`, `model.hidden=[8]`): a config group of training
    that the command reading a run (eval.py, export.py, predict.py; its settings the fields of `schema`) has not.
    Hydra refused it with the hint to append it, `+dataset=mnist`, which it then refused again; one sentence and
    exit 2 instead, before Hydra reads the command line. `takes`: the keys of such a group the command does take
    (eval.py's dataset.tfds_name), the others of their groups refused."""
    own = set(schema.__dataclass_fields__) - {key.split(".")[0] for key in takes}
    chosen = _chosen_groups(script, conf_dir)
    for arg in argv:
        key, sep, _ = arg.partition("=")
        name = key.lstrip("+~")
        if name in takes:
            continue
        group = name.split(".")[0].split("/")[0]
        # `trainer=default`: an option of a group whose keys the command takes in part (trainer.batch_size) but whose
        # options are training's; Hydra said to append it, +trainer=default, which it then refused key by key
        an_option_of_trainings = "." not in name and group not in chosen
        # `trainer.epochs=3`: a key of such a group that the command's own settings lack (Hydra's multi-line refusal)
        a_key_of_trainings = "." in name and group not in chosen and not _a_field(schema, name)
        if sep and group and group != "hydra" and (group not in own or an_option_of_trainings or a_key_of_trainings) \
                and os.path.isdir(os.path.join(conf_dir, group)):
            exit_with(UserError(f"{arg.lstrip('+~')} is not a setting of {script}, which reads the model, dataset and "
                                f"training settings of the run that run_dir names from the run itself; remove {arg}."))


def _a_field(schema, dotted: str) -> bool:
    """Whether `dotted` (trainer.batch_size) names a field of the dataclass `schema` or lies beneath one that is no
    dataclass (a dict or list, whose keys Hydra checks)."""
    node = schema
    for part in dotted.split("."):
        if not dataclasses.is_dataclass(node):
            return True
        if part not in {f.name for f in dataclasses.fields(node)}:
            return False
        node = typing.get_type_hints(node)[part]
    return True


def _chosen_groups(script: str, conf_dir: str) -> set:
    """The config groups whose options the command's own config (conf/eval.yaml for eval.py) chooses: parallel and
    distributed for eval.py and export.py, none for predict.py."""
    from omegaconf import OmegaConf

    defaults = OmegaConf.to_container(OmegaConf.load(os.path.join(conf_dir, script.removesuffix(".py") + ".yaml")))
    return {key for entry in defaults.get("defaults") or [] if isinstance(entry, dict) for key in entry
            if not key.startswith("override ")}


def refuse_values_that_are_not_lists(argv: list, schema, prefix: str = "") -> None:
    """`python export.py run_dir=R platforms=cpu`: a single value (or null) where a setting of `schema` takes a list
    ended in Hydra's 'Error merging override' and OmegaConf's 'str is not a ListConfig, list or tuple', exit 1; one
    sentence naming the setting and how to write it and exit 2 instead, before Hydra reads the command line. Refused,
    not taken as a list of one: Hydra writes a list in brackets wherever it takes one (model.hidden=[32], --cfg job
    shows it so), and under -m `platforms=cpu,cuda` is a sweep of single values, not one list (without -m, Hydra's own
    message says to write key=[a,b] for a list)."""
    from omegaconf import ListConfig
    from omegaconf.errors import ValidationError

    def setting_of(key: str):  # `prefix`: the keys of `schema` on the command line (hydra.sweeper.)
        return _list_setting(schema, key.removeprefix(prefix)) if key.startswith(prefix) else None

    for override, default, values in _overridden_values(argv, setting_of, sweeps_only_under_m=True):
        for value, typed in values:
            if value is None and _takes_null(schema, override.key_or_group.removeprefix(prefix)):
                continue
            if value is not None:
                try:
                    ListConfig(content=value)  # a list, or an interpolation that may make one (${oc.env:...})
                    continue
                except ValidationError:
                    pass
            if value is None or isinstance(value, dict) or not typed:
                got = "null" if value is None else typed or "an empty value"
                example = ",".join(str(v) for v in default)
                exit_with(UserError(f"{override.key_or_group} must be a list, got {got}; give one in brackets, e.g. "
                                    f"{override.key_or_group}=[{example}]."))
            exit_with(UserError(f"{override.key_or_group} must be a list, got {typed}; write it in brackets: "
                                f"{override.key_or_group}=[{typed}]."))


def _takes_null(schema, key: str) -> bool:
    """Whether the setting `key` of the dataclass `schema` is Optional."""
    *groups, name = key.split(".")
    for group in groups:
        schema = typing.get_type_hints(schema).get(group) if dataclasses.is_dataclass(schema) else None
    hint = typing.get_type_hints(schema).get(name) if dataclasses.is_dataclass(schema) else None
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _list_setting(schema, key: str):
    """The default of the setting `key` of the dataclass `schema` where that setting is a list, else None."""
    *groups, name = key.split(".")
    for group in groups:
        if not dataclasses.is_dataclass(schema):
            return None
        schema = typing.get_type_hints(schema).get(group)
    if not dataclasses.is_dataclass(schema):
        return None
    hint = typing.get_type_hints(schema).get(name)
    hints = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if not any(typing.get_origin(h) is list for h in hints):
        return None
    found = next((f for f in dataclasses.fields(schema) if f.name == name), None)
    if found is None or found.default_factory is dataclasses.MISSING:
        return []
    return found.default_factory()
