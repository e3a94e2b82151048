"""Train a model: `python train.py model=cnn dataset=digits parallel=none` (see conf/)."""
import sys

from zoo.startup import loading_libraries, starting, stop_on_sigterm_as_on_ctrl_c

if __name__ == "__main__" and not {"-m", "--multirun"} & set(sys.argv[1:]):  # before the imports
    # a single run: SIGTERM before its train loop (which saves and stops on one) ended it without a word, leaving a
    # run directory with .hydra/ and train.log but no checkpoint; it now ends it in one line, exit 143. A sweep's
    # jobs keep SIGTERM's default while they are set up (zoo.preemption.job_starts)
    stop_on_sigterm_as_on_ctrl_c()

with loading_libraries():  # imports first, without the garbage collector (see zoo/startup.py)
    import hydra

    from zoo.cli import complete_despite_sigterm, main_with_one_line_ctrl_c, run_task
    from zoo.command_line import (overrides_then_flags, quote_paths, refuse_mistyped_values, refuse_null_groups,
                                  refuse_resolve_without_run_dir, refuse_search_without_multirun,
                                  refuse_settings_of_an_unused_schedule)
    from zoo.config import TrainConfig, register_configs
    from zoo.population.launch import trains_populations
    from zoo.population.train import train_population, trains_alone
    from zoo.train import train

with starting():
    register_configs()


@hydra.main(version_base=None, config_path="conf", config_name="train")
@trains_populations(train_population, trains_alone)  # hydra/launcher=population may train its jobs together
def main(cfg):
    objective = run_task(train, cfg)
    complete_despite_sigterm()
    return objective


if __name__ == "__main__":
    with starting():  # a Ctrl-C meanwhile: one line, as while the libraries load
        sys.argv[1:] = quote_paths(overrides_then_flags(sys.argv[1:]))
        refuse_null_groups(sys.argv[1:])
        refuse_mistyped_values(sys.argv[1:], TrainConfig)
        refuse_settings_of_an_unused_schedule(sys.argv[1:])
        refuse_search_without_multirun(sys.argv[1:])
        refuse_resolve_without_run_dir(sys.argv[1:])
    main_with_one_line_ctrl_c(main)
