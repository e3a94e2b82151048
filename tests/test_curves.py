"""curves.png of a sweep's jobs: drawn by a child process, the same figure as drawn in the run's own process."""
import logging
import os
import time

import matplotlib.image
import numpy as np
import pytest
from omegaconf import OmegaConf

from zoo import curves, run_logger

HISTORY = [{"step": s, "split": "train", "loss": 1.0 / s, "accuracy": 1 - 0.5 / s} for s in (10, 20, 30)] + \
          [{"step": 30, "split": "test", "loss": 0.2, "accuracy": 0.9, "count": 100}]


@pytest.fixture
def drawer():
    child = curves.CurvesProcess()
    yield child
    if child._proc is not None:
        child._proc.kill()
        child._proc.wait()


def test_the_child_draws_the_figure_the_run_would(drawer, tmp_path):
    drawer.draw(HISTORY, "accuracy", str(tmp_path / "child.png"))
    curves.plot_curves(HISTORY, "accuracy", str(tmp_path / "here.png"))
    child, here = (matplotlib.image.imread(tmp_path / f"{n}.png") for n in ("child", "here"))
    assert child.shape[:2] == (400, 1000)
    np.testing.assert_array_equal(child, here)
    assert drawer._proc.poll() is None  # one child serves every request
    assert not list(tmp_path.glob("*.tmp"))


def test_a_redrawn_figure_is_the_one_a_new_figure_draws(tmp_path):
    """plot_curves redraws one figure per thread: nothing of the runs drawn before may show in the next."""
    regression = [{"step": s, "split": "train", "loss": 3e5 / s, "r2": 0.1 * s} for s in (100, 200)] + \
                 [{"step": 200, "split": split, "loss": 2e4, "r2": 0.3} for split in ("validation", "test")]
    only_train = [{"step": s, "split": "train", "loss": s / 7, "accuracy": 0.5} for s in (1, 2, 3, 4)]
    for i, (history, metric) in enumerate([(regression, "r2"), (HISTORY, "accuracy"), (only_train, "accuracy"),
                                           (regression, "r2")]):
        curves.plot_curves(history, metric, str(tmp_path / f"redrawn{i}.png"))
        curves.CurvesFigure().draw(history, metric, str(tmp_path / f"new{i}.png"))
        redrawn, new = (matplotlib.image.imread(tmp_path / f"{n}{i}.png") for n in ("redrawn", "new"))
        np.testing.assert_array_equal(redrawn, new)


def test_a_child_that_exited_is_started_again(drawer, tmp_path):
    drawer.draw(HISTORY, "accuracy", str(tmp_path / "a.png"))
    first = drawer._proc
    first.kill()
    first.wait()
    drawer.draw(HISTORY, "accuracy", str(tmp_path / "b.png"))
    assert drawer._proc is not first and (tmp_path / "b.png").exists()


def test_a_drawing_error_is_reported_by_the_child(drawer, tmp_path):
    with pytest.raises(RuntimeError, match="No such file or directory") as e:
        drawer.draw(HISTORY, "accuracy", str(tmp_path / "missing" / "curves.png"))
    assert not isinstance(e.value, curves.ProcessGone)


def test_background_curves_go_to_the_child(tmp_path, monkeypatch, drawer):
    monkeypatch.setattr(run_logger, "_free", run_logger.DrawerPool([drawer]))
    cfg = OmegaConf.create({"tensorboard": False, "progress": False, "plot": True})
    logger = run_logger.RunLogger(str(tmp_path), cfg, 30, plot_in_background=True)
    for record in HISTORY:
        logger.log(record["step"], record["split"], {k: v for k, v in record.items() if k not in ("step", "split")})
    logger.close("accuracy")
    run_logger.wait_for_plots()
    assert matplotlib.image.imread(tmp_path / "curves.png").shape[:2] == (400, 1000)
    assert drawer._proc is not None and drawer._proc.poll() is None


def test_without_a_child_the_curves_are_drawn_here_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(curves.sys, "executable", str(tmp_path / "no-python"))
    monkeypatch.setattr(run_logger, "_free", run_logger.DrawerPool([curves.CurvesProcess()]))
    with caplog.at_level(logging.WARNING, logger="zoo"):
        run_logger._plot_or_warn(HISTORY, "accuracy", str(tmp_path / "curves.png"))
    assert (tmp_path / "curves.png").exists()
    assert run_logger._free.take() is None  # the rest of the sweep draws here too
    assert "drawing curves in this process from now on" in caplog.text


def test_the_sweep_summary_plot_is_drawn_by_the_child_as_here(tmp_path, monkeypatch, drawer):
    from zoo.sweeps import plots

    rows = [{"job": str(i), "status": "completed", "objective": 0.9 + i / 100, "params": {"lr": 10.0 ** -i}}
            for i in range(1, 4)]
    summary = {"objective": "test/accuracy", "direction": "maximize", "rows": rows, "params": ["lr"]}
    monkeypatch.setattr(run_logger, "_free", run_logger.DrawerPool([drawer]))
    run_logger.draw_summary_plot(summary, str(tmp_path / "child.png"))
    assert drawer._proc is not None  # drawn by the child, not here
    plots.write_plot(summary, str(tmp_path / "here.png"))
    child, here = (matplotlib.image.imread(tmp_path / f"{n}.png") for n in ("child", "here"))
    np.testing.assert_array_equal(child, here)


def test_a_single_run_starts_the_child_early_and_returns_with_its_curves(tmp_path, monkeypatch, drawer):
    monkeypatch.setattr(run_logger, "_free", run_logger.DrawerPool([drawer]))
    cfg = OmegaConf.create({"tensorboard": False, "progress": False, "plot": True})
    logger = run_logger.RunLogger(str(tmp_path), cfg, 30)
    run_logger.wait_for_plots()
    assert drawer._proc is not None and drawer._proc.poll() is None  # started with the run, before any figure
    for record in HISTORY:
        logger.log(record["step"], record["split"], {k: v for k, v in record.items() if k not in ("step", "split")})
    logger.close("accuracy")  # no waiting: the figure is there when close returns
    assert matplotlib.image.imread(tmp_path / "curves.png").shape[:2] == (400, 1000)


class SlowDrawer:
    """Records when each of its figures was drawn."""

    def __init__(self, spans):
        self.spans = spans

    def draw(self, history, metric, path):
        self._span("curves")

    def draw_summary(self, summary, path):
        self._span("summary")

    def _span(self, what):
        start = time.perf_counter()
        time.sleep(0.3)
        self.spans.append((what, start, time.perf_counter()))


def test_figures_finishing_together_are_drawn_at_once_and_the_summary_after_them(monkeypatch):
    spans = []
    monkeypatch.setattr(run_logger, "DRAWERS", 2)  # three cores or more
    monkeypatch.setattr(run_logger, "_plotter", None)  # threads for two at once
    monkeypatch.setattr(run_logger, "_free", run_logger.DrawerPool([SlowDrawer(spans), SlowDrawer(spans)]))
    for i in range(2):  # a population's members finish together
        run_logger._background(run_logger._plot_or_warn, HISTORY, "accuracy", f"curves{i}.png")
    run_logger.draw_summary_plot({}, "summary.png")
    (_, a0, a1), (_, b0, b1), summary = sorted(spans, key=lambda s: s[0] == "summary")
    assert max(a0, b0) < min(a1, b1)  # the two curves overlapped
    assert summary[0] == "summary" and summary[1] >= max(a1, b1)


def test_the_drawing_children_get_the_cores_beside_the_sweeps_process():
    assert [run_logger.drawers_for(cores) for cores in (1, 2, 3, 4, 16)] == [1, 1, 2, 2, 2]


def test_a_lost_child_leaves_the_figures_to_the_one_still_drawing(monkeypatch):
    spans = []
    monkeypatch.setattr(run_logger, "_free", run_logger.DrawerPool([SlowDrawer(spans), None]))  # None: lost
    for i in range(3):
        run_logger._draw("draw", lambda *a: spans.append(("here",)), HISTORY, "accuracy", f"curves{i}.png")
    assert [s[0] for s in spans] == ["curves"] * 3


def test_the_child_ends_quietly_when_its_parent_is_gone(tmp_path):
    """A sweep killed by SIGTERM while its curves child draws: the child's answer meets a closed pipe, and it ends
    without printing a BrokenPipeError traceback into the user's terminal."""
    import json
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "zoo.curves"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=curves.__file__.rsplit("/zoo/", 1)[0])
    proc.stdout.close()  # the parent is gone before the child answers
    request = {"history": HISTORY, "metric": "accuracy", "path": str(tmp_path / "curves.png")}
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == ""


def test_a_plot_that_cannot_be_drawn_costs_the_run_neither_its_final_checkpoint_nor_its_results(make_cfg, caplog):
    from zoo.train import train

    cfg = make_cfg("debug=smoke", "logger.plot=true")
    run_dir = cfg.paths.output_dir
    os.makedirs(os.path.join(run_dir, "curves.png"))  # a directory where the figure goes
    with caplog.at_level(logging.WARNING, logger="zoo"):
        results = train(cfg)
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints")))[-1] == str(results["steps"]) == "6"
    assert os.path.exists(os.path.join(run_dir, "results.json"))
    assert f"could not draw {os.path.join(run_dir, 'curves.png')}" in caplog.text
