"""Predict with an exported model: `python predict.py run_dir=outputs/... input=FILE.npy|FILE.csv [output=FILE.csv]`."""
import sys

from zoo.startup import loading_libraries, starting, stop_on_sigterm_as_on_ctrl_c

if __name__ == "__main__":  # before the imports, which take a second or two
    stop_on_sigterm_as_on_ctrl_c()

with loading_libraries():  # imports first, without the garbage collector (see zoo/startup.py)
    import hydra

    from zoo.cli import main_with_one_line_ctrl_c, reader_ctrl_c, run_task
    from zoo.command_line import (overrides_then_flags, quote_paths, refuse_bare_paths, refuse_mistyped_values,
                                  refuse_multirun, refuse_null_groups, refuse_settings_of_export,
                                  refuse_training_settings)
    from zoo.config import PredictConfig, register_configs
    from zoo.export.predict import predict

with starting():
    register_configs()


@hydra.main(version_base=None, config_path="conf", config_name="predict")
def main(cfg):
    return run_task(predict, cfg)


if __name__ == "__main__":
    with starting():  # a Ctrl-C meanwhile: one line, as while the libraries load
        refuse_settings_of_export(sys.argv[1:])  # before Hydra's 'Could not override' (zoo.command_line)
        sys.argv[1:] = quote_paths(overrides_then_flags(sys.argv[1:]))
        refuse_multirun(sys.argv[1:], "predict.py predicts one input with one run's export, and takes no -m "
                        "(--multirun), under which each job's predictions would replace the last job's; run it once "
                        "per input or run_dir, each with its own output.")
        refuse_null_groups(sys.argv[1:])
        refuse_training_settings(sys.argv[1:], "predict.py", PredictConfig)
        refuse_mistyped_values(sys.argv[1:], PredictConfig)
        refuse_bare_paths(sys.argv[1:], file_key="input")
    main_with_one_line_ctrl_c(main, reader_ctrl_c("no predictions were written"))
