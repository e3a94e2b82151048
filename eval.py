"""Evaluate a finished run: `python eval.py run_dir=outputs/... [checkpoint=best|latest|STEP] [split=test]`."""
import hydra

from zoo.cli import run_task
from zoo.config import register_configs
from zoo.evaluate import evaluate

register_configs()


@hydra.main(version_base=None, config_path="conf", config_name="eval")
def main(cfg):
    return run_task(evaluate, cfg)


if __name__ == "__main__":
    main()
