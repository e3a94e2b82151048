"""Export a finished run: `python export.py run_dir=outputs/... [checkpoint=best|latest|STEP]` -> <run_dir>/export/."""
import sys

from zoo.startup import loading_libraries, starting, stop_on_sigterm_as_on_ctrl_c

if __name__ == "__main__":  # before the imports, which take a second or two
    stop_on_sigterm_as_on_ctrl_c()

with loading_libraries():  # imports first, without the garbage collector (see zoo/startup.py)
    import hydra

    from zoo.cli import main_with_one_line_ctrl_c, reader_ctrl_c, run_task
    from zoo.command_line import (overrides_then_flags, quote_paths, refuse_bare_paths, refuse_mistyped_values,
                                  refuse_null_groups, refuse_sweeps_but_of_run_dir, refuse_training_settings,
                                  refuse_values_that_are_not_lists)
    from zoo.config import ExportConfig, register_configs
    from zoo.export.artifact import export

with starting():
    register_configs()


@hydra.main(version_base=None, config_path="conf", config_name="export")
def main(cfg):
    return run_task(export, cfg)


if __name__ == "__main__":
    with starting():  # a Ctrl-C meanwhile: one line, as while the libraries load
        sys.argv[1:] = quote_paths(overrides_then_flags(sys.argv[1:]))
        refuse_null_groups(sys.argv[1:])
        refuse_training_settings(sys.argv[1:], "export.py", ExportConfig, takes=["dataset.tfds_name"])
        refuse_mistyped_values(sys.argv[1:], ExportConfig)
        refuse_values_that_are_not_lists(sys.argv[1:], ExportConfig)
        refuse_sweeps_but_of_run_dir(sys.argv[1:])
        refuse_bare_paths(sys.argv[1:])
    main_with_one_line_ctrl_c(main, reader_ctrl_c("no export was written (export/ is as it was)"))
