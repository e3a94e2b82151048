"""evaluate(cfg): rebuild a finished run from its checkpoint's saved config and run the exact eval loop."""
import json
import logging
import os

from omegaconf import DictConfig, OmegaConf

from zoo.checkpoint import Checkpoints
from zoo.config import TrainConfig
from zoo.errors import UserError
from zoo.loop import evaluate as eval_loop, metric_summary
from zoo.resume import checkpoint_settings
from zoo.targets import check_targets

log = logging.getLogger("zoo")


def _open_checkpoints(run_dir: str) -> Checkpoints:
    if not os.path.isdir(run_dir):
        raise UserError(f"run_dir={run_dir} does not exist; pass the directory of a training run.")
    directory = os.path.join(run_dir, "checkpoints")
    ckpts = Checkpoints(directory, read_only=True) if os.path.isdir(directory) else None
    if ckpts is None or not ckpts.steps():
        raise UserError(f"run_dir={run_dir} has no complete checkpoint in checkpoints/; train it (with "
                        "checkpoint.enabled=true) or pass another run_dir.")
    return ckpts


def _pick_steps(ckpts: Checkpoints, which) -> list:
    """Candidate steps, best first; only `latest` may fall back to an older one."""
    steps = ckpts.steps()
    if which == "latest":
        return list(reversed(steps))
    if which == "best":
        best = Checkpoints(ckpts.directory, read_only=True, **_best_settings(ckpts)).best_step()
        if best is None:
            raise UserError(f"no checkpoint in {ckpts.directory} has eval metrics to pick the best from; "
                            "use checkpoint=latest or a step.")
        return [best]
    if str(which).isdigit() and int(which) in steps:
        return [int(which)]
    raise UserError(f"checkpoint={which} is not in {ckpts.directory}; use latest, best or one of the steps {steps}.")


def _best_settings(ckpts: Checkpoints) -> dict:
    from zoo.tasks import TASKS

    saved = OmegaConf.create(ckpts.meta(ckpts.steps()[-1])["config"])
    settings = checkpoint_settings(saved, TASKS[saved.dataset.task])
    return {"metric": settings["metric"], "mode": settings["mode"]}


def saved_train_config(ckpts: Checkpoints, step: int, cfg: DictConfig) -> DictConfig:
    """The run's own config, checked against the allow-list, with this command's overrides for placement."""
    try:
        saved = ckpts.meta(step)["config"]
    except Exception as e:
        raise UserError(f"checkpoint step {step} in {ckpts.directory} has unreadable metadata ({e}).") from None
    train_cfg = OmegaConf.merge(OmegaConf.structured(TrainConfig), saved)
    check_targets(train_cfg, where=f"the config saved in {ckpts.directory}")  # before anything is instantiated
    train_cfg.parallel = cfg.parallel
    train_cfg.paths.data_dir = cfg.paths.data_dir
    train_cfg.paths.compilation_cache_dir = cfg.paths.compilation_cache_dir
    if cfg.trainer.batch_size:
        train_cfg.trainer.eval_batch_size = cfg.trainer.batch_size
    return train_cfg


def evaluate(cfg: DictConfig) -> dict:
    from zoo.train import build

    ckpts = _open_checkpoints(cfg.run_dir)
    candidates = _pick_steps(ckpts, cfg.checkpoint)
    for i, step in enumerate(candidates):
        run = build(saved_train_config(ckpts, step, cfg))
        if cfg.split not in run.eval_sets:
            raise UserError(f"split={cfg.split} is not in this run; choose one of {sorted(run.eval_sets)}.")
        try:
            tree, _ = ckpts.restore(step, {"state": run.host_state, "sums": run.compiled.zero_sums})
            break
        except UserError as e:
            if i + 1 == len(candidates):
                raise
            log.warning("%s Falling back to the previous checkpoint (checkpoint=latest).", e)
    mode = run.compiled.mode
    batches, count = run.eval_sets[cfg.split]
    metrics = eval_loop(mode.put_state(tree["state"]), run.compiled, batches, count)
    out_dir = os.path.join(cfg.run_dir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{cfg.split}-{step}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"step": step, "split": cfg.split, **metrics}, f, indent=2)
    os.replace(path + ".tmp", path)
    print(f"{cfg.split} @ step {step}: {metric_summary(metrics)}")
    log.info("wrote %s", path)
    return {"split": cfg.split, "step": step, "metrics": metrics, "path": path,
            "objective": metrics.get(run.compiled.task.objective)}
