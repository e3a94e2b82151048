"""A multirun's sweeper and launcher settings checked before Hydra builds them: a key their options lack
(`+hydra.sweeper.foo=1`) ended in Hydra's `Error in call to target` with the plugin's TypeError, exit 1, or, under
submitit, in a NameError traceback once the sweep had started; a value Hydra's basic sweeper asserts on, in an
AssertionError traceback."""
from omegaconf import DictConfig, OmegaConf

from zoo.errors import UserError

HYDRAS_OWN = ("_target_", "_recursive_", "_partial_", "_convert_", "_args_", "defaults")
NOT_SUPPORTED = {  # settings of Hydra's own plugins the zoo's do not take, and what to use instead
    ("sweeper", "custom_search_space"): "Hydra's Optuna sweeper's Python function of suggestions is not supported: "
                                        "search with hydra.sweeper.params",
}


def unknown_setting(config: DictConfig, plugin: str) -> UserError | None:
    """The sentence for the keys of hydra.<plugin> (sweeper, launcher) that the option chosen for it does not have,
    or None. Only an option the ConfigStore holds, whose _target_ it keeps, is checked (a YAML option of the user's
    own, or another _target_, is left to its class)."""
    from hydra.core.config_store import ConfigStore

    node = OmegaConf.select(config, f"hydra.{plugin}", default=None)
    choice = OmegaConf.select(config, f"hydra.runtime.choices.hydra/{plugin}", default=None)
    if not isinstance(node, DictConfig) or choice is None:
        return None
    try:
        schema = ConfigStore.instance().load(f"hydra/{plugin}/{choice}.yaml").node
    except Exception:  # noqa: BLE001 — not in the ConfigStore (a YAML option): its own class checks its keys
        return None
    if node.get("_target_") != schema.get("_target_"):
        return None
    settings = [str(k) for k in schema.keys() if k not in HYDRAS_OWN]
    settings += [k for k in _submitit_settings(choice) if k not in settings]
    unknown = [str(k) for k in node.keys() if k not in settings and k not in HYDRAS_OWN]
    if not unknown:
        return None
    keys = ", ".join(f"hydra.{plugin}.{k}" for k in unknown)
    why = "".join(f" ({NOT_SUPPORTED[(plugin, k)]})" for k in unknown if (plugin, k) in NOT_SUPPORTED)
    one = len(unknown) == 1
    where = f"hydra/{plugin}={choice}{why}"
    if not settings:
        return UserError(f"{keys} {'is not a setting' if one else 'are not settings'} of {where}, which takes none; "
                         f"remove {'it' if one else 'them'}.")
    return UserError(f"{keys} {'is not a setting' if one else 'are not settings'} of {where}, whose settings are "
                     f"{', '.join(settings)}; remove {'it or set one of those' if one else 'them or set those'}.")


def _submitit_settings(choice: str) -> list:
    """The settings submitit's launchers take beyond their dataclass's: its executor's own (`setup`; SLURM's many)
    and max_num_timeout, which hydra-submitit-launcher hands to submitit as they are."""
    if choice == "submitit_local":
        from submitit.local.local import LocalExecutor as executor
    elif choice == "submitit_slurm":
        from submitit.slurm.slurm import SlurmExecutor as executor
    else:
        return []
    return ["max_num_timeout", *sorted(executor._valid_parameters())]


def refusal(config: DictConfig) -> UserError | None:
    """The first sentence for the multirun's sweeper and launcher settings, or None."""
    for plugin in ("sweeper", "launcher"):
        refused = unknown_setting(config, plugin)
        if refused is not None:
            return refused
    batch = OmegaConf.select(config, "hydra.sweeper.max_batch_size", default=None)
    basic = "BasicSweeper" in str(OmegaConf.select(config, "hydra.sweeper._target_", default=""))
    if basic and isinstance(batch, int) and batch <= 0:  # Hydra's basic sweeper asserts it is positive
        return UserError(f"hydra.sweeper.max_batch_size={batch} launches no job at a time; set it to 1 or more, or "
                         "null (every job in one batch).")
    return None
