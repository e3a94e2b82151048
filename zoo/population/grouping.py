"""Which of a sweep's trials can train together: those whose configs are equal but for values a population
batches — `seed` (initialisation, data order, dropout keys), the optimizer's numeric settings but for its
integer ones (learning rate, weight decay, momentum, betas...) and the dropout rate. Anything else (model,
widths, batch size, dataset, schedule, parallel mode) changes the program, so trials differing there train in
separate groups.
"""
import json

from omegaconf import DictConfig, OmegaConf

from zoo.config import dotted_settings
from zoo.errors import UserError
from zoo.optim import hyperparameters

MEMBER_VALUE = "<per member>"


def _shared_part(cfg: DictConfig) -> dict:
    """The resolved config with every value a member may set on its own replaced by a placeholder."""
    shared = OmegaConf.to_container(cfg, resolve=True)
    shared["seed"] = MEMBER_VALUE
    shared.get("paths", {})["output_dir"] = MEMBER_VALUE
    per_member = hyperparameters(cfg)
    for key in per_member["optimizer"]:
        shared["optimizer"][key] = MEMBER_VALUE
    if "dropout" in per_member:
        shared["model"]["dropout"] = MEMBER_VALUE
    return shared


def group_key(cfg: DictConfig) -> str:
    return json.dumps(_shared_part(cfg), sort_keys=True, default=str)


def group_indices(cfgs: list, max_size: int) -> list:
    """Job indices grouped by group_key in order of first appearance, each group split into chunks of max_size."""
    groups = {}
    for i, cfg in enumerate(cfgs):
        groups.setdefault(group_key(cfg), []).append(i)
    return [members[s:s + max_size] for members in groups.values() for s in range(0, len(members), max_size)]


def check_one_group(cfgs: list) -> None:
    """Members of one population may differ only in batched values; anything else would change shapes."""
    first = dotted_settings(_shared_part(cfgs[0]))
    for cfg in cfgs[1:]:
        other = dotted_settings(_shared_part(cfg))
        changed = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
        if changed:
            raise UserError("a population's members may differ only in seed, numeric optimizer settings (not "
                            f"integer ones) and model.dropout, but they differ in {', '.join(changed)}; train those "
                            "as separate groups (the population launcher groups them itself).")
