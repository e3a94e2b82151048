"""Each job of a sweep composed once, not twice, and mostly from the job before it.

Hydra's sweepers compose every job of a batch before launching it (Sweeper.validate_batch_is_legal) and then
discard the result, because a launcher may run elsewhere; a launcher in the sweeper's process (the basic one, the
population one) then composes the same job again, with the same loader, master config and overrides.
`remember_compositions` makes the loader keep what it composed until the same job is asked for again.

Composing one job costs ~0.09 s here: about half builds the defaults tree, a third loads and merges the config
files it lists. Both depend only on the config groups chosen, which a sweep over values (learning rates,
seeds) shares across its jobs, so they are built once per choice of groups and reused (`reuse_defaults`);
Hydra then applies each job's value overrides to a copy, as it always does. Hydra also copies its config
repository for every composition, and with it the whole ConfigStore (~7 ms a job); the copies share the store
instead (`share_config_store`), which hands out only copies of what it holds. And Hydra reads the primary config
file (train.yaml) of every job only to look for `hydra.searchpath` in it (~8 ms a job); a job whose config files
are those read before, and had none, skips that read (`_searchpath_once`).
"""
import contextvars
import copy
import dataclasses
import os

from hydra._internal import config_loader_impl
from hydra._internal.defaults_list import Overrides
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

KEPT = 256  # compositions remembered at most: a larger batch composes its overflow again, as before


TREES = 8  # choices of config groups whose defaults tree and merged files a loader keeps
_kept = contextvars.ContextVar("zoo_kept_defaults", default=None)  # the loader's, while it composes a job


def share_config_store(config_loader) -> None:
    """Copies of the loader's structured config source share the ConfigStore singleton instead of copying it.
    Each composition copies the repository (CachingConfigRepository, so that setting its search path leaves the
    loader's own alone); the store needs no copy: ConfigStore.load deep-copies every node it returns. The class
    is taken from the loader's source: Hydra's plugin scan may import its module again."""
    repository = getattr(config_loader, "repository", None)
    for source in repository.get_sources() if repository is not None else []:
        if source.scheme() == "structured" and "__deepcopy__" not in vars(type(source)):
            type(source).__deepcopy__ = _copy_sharing_store


def _copy_sharing_store(self, memo):
    clone = type(self).__new__(type(self))
    memo[id(self)] = clone
    for name, value in vars(self).items():
        setattr(clone, name, value if value is ConfigStore.instance() else copy.deepcopy(value, memo))
    return clone


def reuse_defaults(config_loader) -> None:
    """While `config_loader.load_sweep_config` composes a job, keep the defaults lists Hydra builds (by config
    name, search path, the overrides that choose config groups, and the config files' sizes and modification
    times) and the config each composes before the job's value overrides; later jobs with the same key get
    copies. Any other composition in the process is Hydra's own, with the store shared (share_config_store)."""
    share_config_store(config_loader)
    if not getattr(config_loader_impl.create_defaults_list, "zoo_reuse", False):
        config_loader_impl.create_defaults_list = _reusing_defaults_lists(config_loader_impl.create_defaults_list)
    merge = getattr(config_loader, "_compose_config_from_defaults_list", None)
    if merge is None or getattr(config_loader, "kept_defaults", None) is not None:
        return  # not Hydra's loader, or wrapped already
    load, trees, merged = config_loader.load_sweep_config, {}, {}

    def load_sweep_config(master_config, sweep_overrides):
        return _keeping(trees, load, master_config, sweep_overrides)

    def compose_from_defaults(defaults, repo):
        kept = merged.get(id(defaults))
        if kept is None or kept[0] is not defaults:  # not a kept defaults list (or its id was reused)
            cfg = merge(defaults=defaults, repo=repo)
            if isinstance(defaults, _KeptDefaults):
                if len(merged) >= TREES:
                    merged.clear()
                merged[id(defaults)] = (defaults, copy.deepcopy(cfg))
            return cfg
        return copy.deepcopy(kept[1])

    config_loader.load_sweep_config, config_loader.kept_defaults = load_sweep_config, trees
    config_loader._compose_config_from_defaults_list, config_loader.merged = compose_from_defaults, merged
    process = getattr(config_loader, "_process_config_searchpath", None)
    if process is not None:
        config_loader._process_config_searchpath = _searchpath_once(process, {})


def _keeping(trees: dict, load, master_config, sweep_overrides):
    """load(...) with `trees` as the kept defaults lists. A module function, so that a launcher that pickles the
    loader (submitit) does not have to pickle the context variable."""
    token = _kept.set(trees)
    try:
        return load(master_config, sweep_overrides)
    finally:
        _kept.reset(token)


def _composing_a_sweeps_job() -> bool:
    """A module function, like _keeping: a launcher that pickles the loader (submitit) then pickles no ContextVar."""
    return _kept.get() is not None


def _searchpath_once(process, plain: dict):
    """Hydra's `_process_config_searchpath`, which loads the primary config to read its hydra.searchpath, skipped
    for a sweep's job when the same config files were read before and set none (`plain` keeps those keys): the
    job's defaults tree then comes from the kept ones, which need no primary config. Anything else, a
    hydra.searchpath override among them, is Hydra's own."""
    def process_config_searchpath(config_name, parsed_overrides, repo):
        if not _composing_a_sweeps_job() or any(o.get_key_element() == "hydra.searchpath" for o in parsed_overrides):
            return process(config_name, parsed_overrides, repo)
        key = (config_name, _sources_key(repo))
        if key in plain:
            return None
        process(config_name, parsed_overrides, repo)
        primary = repo.load_config(config_path=config_name) if config_name is not None else None  # the repo's copy
        if primary is None or OmegaConf.select(primary.config, "hydra.searchpath") is None:
            if len(plain) >= TREES:
                plain.clear()
            plain[key] = True
        return None

    return process_config_searchpath


class _KeptDefaults(list):
    """A defaults list kept for reuse: the config merged from it is kept too."""


def _reusing_defaults_lists(create):
    def create_defaults_list(repo, config_name, overrides_list, prepend_hydra, skip_missing):
        trees = _kept.get()
        if trees is None:  # not a sweep's job being composed by a loader that keeps them
            return create(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        try:  # Hydra's own split of the overrides: values (applied after composition) and the rest
            values = {id(o) for o in Overrides(repo=repo, overrides_list=overrides_list).config_overrides}
        except Exception:  # noqa: BLE001 — the real call below raises what the user must see
            return create(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        key = (config_name, prepend_hydra, skip_missing, _sources_key(repo),
               tuple(o.input_line for o in overrides_list if id(o) not in values or o.key_or_group.startswith("hydra.")))
        kept = trees.get(key)
        if kept is None:
            kept = create(repo, config_name, overrides_list, prepend_hydra, skip_missing)
            kept.defaults = _KeptDefaults(kept.defaults)
            if len(trees) >= TREES:
                trees.clear()
            trees[key] = kept
        return dataclasses.replace(kept, config_overrides=[o for o in overrides_list if id(o) in values])

    create_defaults_list.zoo_reuse = True
    return create_defaults_list


def _sources_key(repo) -> tuple:
    """The repository's config sources, and the size and modification time of every file in its directories."""
    sources = repo.get_sources()
    return tuple((s.provider, s.path) for s in sources), _files(s.path for s in sources if s.scheme() == "file")


def _files(roots) -> tuple:
    """(path, size, mtime) of every file under the config directories: an edited file is a new key."""
    found = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                found.append((path, st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))


def remember_compositions(config_loader) -> None:
    """Wrap `config_loader.load_sweep_config`: the first call for a job composes it, keeps the composition and
    returns a copy; the next call for that job returns the kept one (then forgotten)."""
    reuse_defaults(config_loader)
    if getattr(config_loader, "composed", None) is not None:
        return  # wrapped already (a second launcher setup in this process)
    compose, composed = config_loader.load_sweep_config, {}

    def load_sweep_config(master_config, sweep_overrides):
        key = (id(master_config), tuple(sweep_overrides))
        kept = composed.pop(key, None)
        if kept is not None:
            return kept
        sweep_config = compose(master_config, sweep_overrides)
        if len(composed) >= KEPT:  # full: keep what the launcher is yet to ask for, compose the overflow again
            return sweep_config
        composed[key] = sweep_config
        return copy.deepcopy(sweep_config)  # 5 ms: what the caller does with its copy cannot reach the kept one

    config_loader.load_sweep_config, config_loader.composed = load_sweep_config, composed


class ComposeOnce(Callback):
    """conf: hydra.callbacks.compose_once. Wraps the running Hydra's config loader before the sweeper starts."""

    def on_multirun_start(self, config, **kwargs) -> None:
        hydra = GlobalHydra.instance().hydra
        if hydra is not None:
            remember_compositions(hydra.config_loader)
