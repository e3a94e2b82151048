"""The entry scripts import the libraries with the garbage collector off, then freeze what the imports made."""
import gc
import subprocess
import sys

import pytest
from conftest import ROOT

from zoo.startup import loading_libraries


@pytest.fixture
def collector():
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if was_enabled else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_while_loading_then_what_was_loaded_is_frozen(collector, enabled):
    (gc.enable if enabled else gc.disable)()
    gc.unfreeze()
    with loading_libraries():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]  # container objects the collector tracks
    assert gc.get_freeze_count() >= len(made)
    assert gc.isenabled() == enabled  # as it was before


def test_a_failed_import_still_gives_the_collector_back(collector):
    gc.enable()
    with pytest.raises(ImportError):
        with loading_libraries():
            import zoo.no_such_module  # noqa: F401
    assert gc.isenabled()


@pytest.mark.parametrize("script", ["train", "eval", "predict", "export"])
def test_each_entry_script_loads_its_libraries_that_way(script):
    probe = (f"import gc, {script}, jax, flax, orbax.checkpoint, hydra; "
             "print(gc.isenabled(), gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    enabled, frozen = out.stdout.split()
    assert enabled == "True" and int(frozen) > 100_000  # the libraries' objects, not a handful


def test_ctrl_c_while_the_libraries_load_is_one_line():
    """It was Python's KeyboardInterrupt traceback through the half-done imports."""
    script = ("import signal\nfrom zoo.startup import loading_libraries\nwith loading_libraries():\n"
              "    signal.signal(signal.SIGINT, signal.default_int_handler)\n    signal.raise_signal(signal.SIGINT)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 130
    assert done.stderr == "error: interrupted by Ctrl-C while the command started; nothing was written.\n"


@pytest.mark.parametrize("script", ["train", "eval", "predict", "export"])
@pytest.mark.parametrize("where", ["zoo.config.register_configs", "zoo.command_line.refuse_null_groups"])
def test_ctrl_c_after_the_libraries_load_but_before_hydra_starts_is_one_line(script, where):
    """Registering the configs and checking the command line: it was Python's KeyboardInterrupt traceback."""
    module, name = where.rsplit(".", 1)
    probe = (f"import runpy, sys, {module}\n"
             "def interrupted(*args, **kwargs):\n    raise KeyboardInterrupt\n"
             f"{module}.{name} = interrupted\n"
             f"sys.argv = ['{script}.py']\n"
             f"runpy.run_path('{script}.py', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == "error: interrupted by Ctrl-C while the command started; nothing was written.\n"


def test_hydras_info_is_printed_once():
    """A library imported before Hydra logs through the root logger, which gave it a stderr handler of its own
    (logging.basicConfig): each line of `--info` came twice, once on stdout and once on stderr as DEBUG:hydra..."""
    done = subprocess.run([sys.executable, "train.py", "--info"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Installed Hydra Plugins" in done.stdout, done.stderr[-2000:]
    assert "DEBUG:hydra" not in done.stderr and "Installed Hydra Plugins" not in done.stderr, done.stderr[-2000:]
