"""Instantiate `_target_` configs only from modules this project trusts (configs may come from run dirs)."""
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig

from zoo.errors import UserError

ALLOWED_PREFIXES = ("zoo.", "optax.")


def check_targets(node, where: str = "") -> None:
    """Refuse any `_target_` outside ALLOWED_PREFIXES, anywhere in the tree, before anything is built.

    `where` is the dotted path of `node` in the config ('' for the root), used to name the setting."""
    if isinstance(node, DictConfig):
        target = node.get("_target_")
        if target is not None and not str(target).startswith(ALLOWED_PREFIXES):
            raise UserError(f"{where or 'the config'} names _target_={target!r}, which is not allowed; only targets "
                            f"under {', '.join(ALLOWED_PREFIXES)} can be instantiated.")
        for key, value in node.items():
            check_targets(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, ListConfig):
        for i, value in enumerate(node):
            check_targets(value, f"{where}[{i}]")


def safe_instantiate(node: DictConfig, where: str, **kwargs):
    check_targets(node, where)
    try:
        return instantiate(node, **kwargs)
    except Exception as e:  # hydra wraps the constructor's own error; its last line says what went wrong
        cause = e.__cause__ or e
        raise UserError(f"could not build {where} from _target_={node.get('_target_')}: "
                        f"{str(cause).strip().splitlines()[-1]}") from None
