"""Instantiate `_target_` configs only when they resolve to the zoo's models or optax's public objects.

Configs may come from run dirs written by someone else, and a dotted path is resolved attribute by attribute:
`zoo.cli.os.system` starts with `zoo.` yet is `os.system`. So the check looks at what the path resolves to.
"""
import functools
import inspect
import sys

from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig

from zoo.errors import UserError
from zoo.preemption import raise_a_lost_interrupt

SEARCHED_PACKAGES = ("zoo.", "optax.")


@functools.cache
def _optax_public_objects() -> frozenset:
    """ids of the classes and functions optax exports at its top level and in its public submodules."""
    import optax

    modules = [optax] + [m for name, m in vars(optax).items() if inspect.ismodule(m) and not name.startswith("_")
                         and m.__name__.startswith("optax.")]
    return frozenset(id(obj) for module in modules for name, obj in vars(module).items()
                     if not name.startswith("_") and _defined_in(obj, "optax"))


def _defined_in(obj, package: str) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return (inspect.isclass(obj) or inspect.isfunction(obj)) and (module == package or
                                                                  module.startswith(package + "."))


def _is_zoo_model(obj) -> bool:
    import zoo.models

    return any(obj is getattr(zoo.models, name) for name in zoo.models.__all__)


def _resolve_loaded(target: str):
    """What the dotted path names, looked up in modules already imported. Resolving runs no code: each step
    reads a module's own namespace, so neither an import (a `__main__`, say) nor a lazy module's `__getattr__`
    (tensorflow_datasets loads its submodules that way) runs because a config named it. Every allowed object
    lives in zoo.models or in optax's public modules, which are imported here."""
    import optax  # noqa: F401
    import zoo.models  # noqa: F401

    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is not None:
            for name in parts[i:]:
                if not inspect.ismodule(obj) or name not in vars(obj):
                    raise LookupError(target)  # a class's attributes are never a model or optax's public object
                obj = vars(obj)[name]
            return obj
    raise LookupError(target)


def _refusal(target) -> str | None:
    """Why `target` may not be instantiated, or None when it resolves to an allowed class or function."""
    if not isinstance(target, str) or not target.startswith(SEARCHED_PACKAGES):
        return f"only targets under {', '.join(SEARCHED_PACKAGES)} can be instantiated"
    try:
        obj = _resolve_loaded(target)
    except LookupError:
        return "it names nothing in the zoo's models or optax"
    # Of the zoo's own objects only its models: any other zoo function (one that writes or deletes files, say)
    # would run with whatever arguments a tampered config gives it.
    if _is_zoo_model(obj):
        return None
    if id(obj) in _optax_public_objects():
        return None
    where = getattr(obj, "__module__", None) or type(obj).__name__
    return (f"it resolves to {where}.{getattr(obj, '__name__', '?')}, not a model of the zoo or a public "
            "class or function of optax")


def check_targets(node, where: str = "", refusal=_refusal) -> None:
    """Refuse any disallowed `_target_` anywhere in the tree (`_args_` included), before anything is built.

    `where` is the dotted path of `node` in the config ('' for the root), used to name the setting.
    `refusal(target)` says why a target is not allowed, or None (default: the zoo's models and optax)."""
    if isinstance(node, DictConfig):
        target = node.get("_target_")
        reason = None if target is None else refusal(target)
        if reason:
            raise UserError(f"{where or 'the config'} names _target_={target!r}, which is not allowed; {reason}.")
        for key, value in node.items():
            check_targets(value, f"{where}.{key}" if where else str(key), refusal)
    elif isinstance(node, ListConfig):
        for i, value in enumerate(node):
            check_targets(value, f"{where}[{i}]", refusal)


def check_arguments(node: DictConfig, where: str, set_by_zoo: dict) -> None:
    """Each setting of a `_target_` group must be a parameter of what it builds, and true/false or a number where
    that parameter is one: Hydra types only the zoo's own groups, so `batch_norm=flase` would arrive as a truthy
    string. `set_by_zoo` maps the parameters the zoo fills to what decides them. Call after `check_targets`."""
    target = node.get("_target_")
    parameters = _parameters(_resolve_loaded(target))
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for key, value in node.items():
        if key.startswith("_"):  # Hydra's own: _target_, _partial_, _args_, ...
            continue
        if key in set_by_zoo:
            raise UserError(f"{where}.{key} is set from {set_by_zoo[key]}; remove {where}.{key}.")
        if key not in parameters:
            if open_ended:
                continue
            names = ", ".join(k for k, p in parameters.items() if k not in set_by_zoo and p.kind is not
                              inspect.Parameter.VAR_POSITIONAL)
            raise UserError(f"{where}.{key} is not a parameter of {target}; remove it or fix its spelling "
                            f"({f'its parameters: {names}' if names else 'it takes none'}).")
        kind, ok = _kind(parameters[key]), True
        if kind == "bool":  # null too: a flag is on or off (batch_norm=null trained without BatchNorm, unsaid)
            ok = isinstance(value, bool)
        elif value is not None and kind == "number":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise UserError(f"{where}.{key} must be {'true or false' if kind == 'bool' else 'a number'}, "
                            f"got {value!r}.")


def _parameters(obj) -> dict:
    # An nnx.Module class's own signature is its metaclass's (*args, **kwargs); its __init__ says what it takes.
    parameters = dict(inspect.signature(obj.__init__ if inspect.isclass(obj) else obj).parameters)
    parameters.pop("self", None)
    return parameters


def target_parameters(node) -> dict:
    """{name: inspect.Parameter} of what `node`'s `_target_` builds, read without building it; {} for no target or
    one that is not allowed."""
    target = node.get("_target_") if isinstance(node, (dict, DictConfig)) else None
    if _refusal(target) is not None:
        return {}
    return _parameters(_resolve_loaded(target))


def parameter_defaults(node) -> dict:
    """{name: default} of the plain (number, bool, string, None) defaults of what `node`'s `_target_` builds: the
    values a run used for the settings its config leaves out."""
    return {name: p.default for name, p in target_parameters(node).items()
            if p.default is None or isinstance(p.default, (bool, int, float, str))}


def _kind(parameter: inspect.Parameter) -> str | None:
    annotation, default = parameter.annotation, parameter.default
    if annotation in (bool, "bool") or isinstance(default, bool):
        return "bool"
    if annotation in (int, float, "int", "float") or (isinstance(default, (int, float)) and default is not None):
        return "number"
    return None


def safe_instantiate(node: DictConfig, where: str, refusal=_refusal, **kwargs):
    check_targets(node, where, refusal)
    try:
        return instantiate(node, **kwargs)
    except Exception as e:  # hydra wraps the constructor's own error; its last line says what went wrong
        raise_a_stop_it_hid(e)
        cause = e.__cause__ or e
        raise UserError(f"could not build {where} from _target_={node.get('_target_')}: "
                        f"{str(cause).strip().splitlines()[-1]}") from None


def raise_a_stop_it_hid(error: Exception) -> None:
    """A Ctrl-C (or a reading command's SIGTERM) that came while a target was built stops the command, also where it
    reached the build as another error: wrapped by a library, or lost (Python drops one raised inside a
    garbage-collection callback, C code may clear one) and the build then failing, half done (OmegaConf's '...
    object_type=None'). Reported as the target's error, it ended with exit 2 instead of the command's stop line."""
    seen, cause = set(), error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            raise cause from None
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    raise_a_lost_interrupt()
