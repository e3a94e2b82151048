"""A multirun's job directories: which are jobs, and what each one's files say (results, failure, last eval)."""
import functools
import json
import math
import os

import yaml
from omegaconf import OmegaConf

from zoo.errors import UserError, brief
from zoo.files import load_json
from zoo.preemption import Preempted
from zoo.sweeps.plots import natural

REPORTED_SPLITS = ("validation", "test")  # a search selects on validation; the test figures stand beside it


class DamagedJob(UserError):
    """A job's .hydra/ record does not read (edited or cut short by hand): no summary can place that job."""


def job_record(job_dir: str, name: str, only: tuple = ()):
    """The job's .hydra/<name> (config.yaml, hydra.yaml, overrides.yaml); DamagedJob if it does not read. `only`
    (dotted keys): a config of just those keys, when none is an interpolation (which could name any other key;
    making the whole of a job's config takes ~4 ms here, and a summary reads every job's), their values read
    here as OmegaConf reads them, except that an interpolation calling a resolver (`${oc.env:HOME}`) is refused:
    in a sweep's files it would have the report show what it reads on the machine making the report."""
    path = os.path.join(job_dir, ".hydra", name)
    try:
        record = load_config(path, only, neutral=bool(only))  # overrides.yaml is shown as written, never resolved
        for key in only:
            _refuse_resolvers(key, OmegaConf.select(record, key, default=None))
        return record
    except Exception as e:  # noqa: BLE001 — YAML and OmegaConf raise many types for a damaged file
        raise DamagedJob(f"{path} cannot be read ({brief(e)}); repair it, or move that job's directory out of the "
                         "sweep.") from None


def load_config(path: str, only: tuple = (), neutral: bool = False):
    """OmegaConf.load(path), parsed by libyaml (OmegaConf's pure-Python parse of a job's config.yaml takes ~4.5 ms
    here, libyaml's 0.4 ms); `only` as in job_record. `neutral`: each string that calls a resolver is replaced by
    a marker of itself, which no resolver reads (_refuse_resolvers names it where a value needed holds one)."""
    with open(path, encoding="utf-8") as f:
        obj = yaml.load(f, Loader=_omegaconf_rules_in_c())
    if only and isinstance(obj, dict):
        subset = _keys_of(obj, only)
        obj = obj if subset is None else subset
    if neutral:
        obj = _neutralised(obj)
    return OmegaConf.create() if obj is None else OmegaConf.create(obj)


def _keys_of(obj: dict, keys: tuple):
    """{the given dotted keys that `obj` holds, nested as in obj}, or None where one of them is, holds or lies
    under an interpolation (the other keys beside them may hold any)."""
    subset = {}
    for key in keys:
        *parents, leaf = key.split(".")
        node, into = obj, subset
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, str) and "${" in node:
                return None
            into = into.setdefault(part, {})
        if isinstance(node, dict) and leaf in node:
            if "${" in str(node[leaf]):
                return None
            into[leaf] = node[leaf]
    return subset


_MARK = "\x00resolver\x00"  # no YAML file holds it: a value the report reads holds it only through a resolver


def _neutralised(obj):
    if isinstance(obj, dict):
        return {k: _neutralised(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_neutralised(v) for v in obj]
    if isinstance(obj, str) and "${" in obj and _calls_a_resolver(obj):
        return _MARK + obj.replace("$", "\\$")  # escaped: OmegaConf reads the text as written
    return obj


def _calls_a_resolver(text: str) -> bool:
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser
    from omegaconf.grammar_parser import parse

    def walk(node) -> bool:
        return isinstance(node, OmegaConfGrammarParser.InterpolationResolverContext) or any(
            walk(child) for child in getattr(node, "children", None) or ())

    try:
        return walk(parse(text))
    except Exception:  # noqa: BLE001 — not valid grammar: OmegaConf refuses it when read, calling nothing
        return False


def _refuse_resolvers(key: str, value) -> None:
    """ValueError when `value` (resolved, as OmegaConf reads it) took a string that calls a resolver."""
    value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    for text in (value if isinstance(value, list) else [value]):
        if isinstance(text, str) and _MARK in text:
            written = text.split(_MARK, 1)[1].replace("\\$", "$")
            raise ValueError(f"{key} reads {written!r}, an interpolation that calls a resolver, which the report "
                             "does not run")


@functools.cache
def _omegaconf_rules_in_c():
    """A loader with OmegaConf's rules (its float forms, no timestamps, a duplicate key refused, pathlib paths) on
    libyaml's parser where PyYAML has it: the rules are the resolver and constructor tables, which the C loader
    consults as the pure-Python one does (tests/test_sweep_report.py compares the two)."""
    from omegaconf._utils import get_yaml_loader

    rules = get_yaml_loader()
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return type("OmegaConfCLoader", (base,), {"yaml_implicit_resolvers": rules.yaml_implicit_resolvers,
                                               "yaml_constructors": rules.yaml_constructors,
                                               "construct_mapping": _refusing_duplicate_keys})


def _refusing_duplicate_keys(loader, node, deep=False):
    seen = set()
    for key, _ in node.value:
        if key.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
            if key.value in seen:
                raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                        f"found duplicate key {key.value}", key.start_mark)
            seen.add(key.value)
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


def jobs_text(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def find_job_dirs(root: str) -> list:
    jobs = []
    for dirpath, dirnames, _ in os.walk(root):
        if os.path.isfile(os.path.join(dirpath, ".hydra", "overrides.yaml")):
            jobs.append(dirpath)
            dirnames.clear()  # a run's own subfolders (tensorboard, checkpoints) hold no jobs
    return sorted(jobs, key=natural)


def read_job(job_dir: str, root: str) -> dict:
    # as written: resolving an interpolation there would show what it reads on this machine, not what the job ran
    overrides = [str(o) for o in OmegaConf.to_container(job_record(job_dir, "overrides.yaml"))]
    row = {"job": os.path.relpath(job_dir, root), "run_dir": os.path.abspath(job_dir), "status": "unfinished",
           "objective": None, "metrics": {}, "steps": None, "wall_time_s": None, "reason": "",
           "overrides": overrides, "params": dict(o.split("=", 1) for o in overrides if "=" in o)}
    results = load_json(os.path.join(job_dir, "results.json"))
    failure = load_json(os.path.join(job_dir, "failure.json"))
    if results is not None:  # a field of another type (a file edited by hand) is read as missing
        row.update(status="completed", objective=results.get("objective"), steps=_number(results.get("steps")),
                   wall_time_s=_number(results.get("wall_time_s")),
                   metrics={f"{split}/{k}": v for split in REPORTED_SPLITS
                            for k, v in _mapping(results.get(split)).items()
                            if k != "count" and _number(v) is not None})
        epsilon = _number(_mapping(results.get("privacy")).get("epsilon"))  # a DP-SGD run's; None where infinite
        if epsilon is not None:
            row["metrics"]["epsilon"] = epsilon
        if not finite(row["objective"]):
            row.update(status="failed", reason=f"objective is {row['objective']}")
    elif failure is not None:
        status = ("pruned" if failure.get("status") == "pruned" else
                  "stopped" if failure.get("error") == Preempted.__name__ else "failed")  # stopped: rerun resumes it
        row.update(status=status, reason=f"{failure.get('error', 'Error')}: {failure.get('reason', '')}")
        row["steps"] = _number(failure.get("step"))  # the step a stop reached (a stopped trial the study failed too)
        if row["status"] == "pruned":  # its last eval, the one the pruner judged, stands in its metric columns
            row.update(_last_eval(os.path.join(job_dir, "metrics.jsonl")))
    return row


def _last_eval(path: str) -> dict:
    try:
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return {}
    evals = [r for r in records if isinstance(r, dict) and r.get("split") in REPORTED_SPLITS and "step" in r]
    if not evals:
        return {}
    last = evals[-1]
    return {"steps": last["step"], "metrics": {f"{last['split']}/{k}": v for k, v in last.items()
                                               if k not in ("step", "split", "count", "final")}}


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def finite(x) -> bool:
    if isinstance(x, list):  # a multi-objective sweep's values
        return bool(x) and all(map(finite, x))
    return isinstance(x, (int, float)) and math.isfinite(x)
