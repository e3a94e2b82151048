"""curves.png: a run's loss and main metric against steps, and the child process that draws a sweep's figures.

matplotlib holds the GIL while it draws (~0.1 s a figure). A thread of the sweep's own process drawing the last
job's curves therefore slows the next job's host work by that much; a child interpreter (`python -m
zoo.curves`, reading one JSON request per line, answering one line each) draws them on another core instead,
and the sweep's summary.png at the end (matplotlib is loaded there already). Only JSON crosses the pipe.
"""
import json
import os
import subprocess
import sys
import threading

from zoo.console import discard
from zoo.files import replacing


def plot_curves(history: list, main_metric: str, path: str) -> None:
    figure = getattr(_figures, "figure", None)
    if figure is None:
        figure = _figures.figure = CurvesFigure()
    figure.draw(history, main_metric, path)


class CurvesFigure:
    """One figure redrawn for each run: creating a figure's axes and their ticks is about half of what drawing
    it costs (130-150 ms a figure from scratch here, 70-80 ms redrawn), and a sweep draws one per job. Each draw
    clears what the previous one plotted (lines, data limits, colour cycle; the legend is replaced), so the
    image is the one a new figure gives, pixel for pixel (tests/test_curves.py)."""

    def __init__(self):
        # A bare Figure (no pyplot state to keep) with fixed margins: tight_layout would draw the figure an extra
        # time to measure its labels, a third of this plot's cost, paid by every job of a sweep.
        from matplotlib.figure import Figure

        self.fig = Figure(figsize=(10, 4))
        self.axes = self.fig.subplots(1, 2)
        for ax in self.axes:
            ax.set_xlabel("step")
            ax.ticklabel_format(axis="y", scilimits=(-3, 4))  # short tick labels (1e5 offset) fit the fixed margin
        self.fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.92, wspace=0.22)

    def draw(self, history: list, main_metric: str, path: str) -> None:
        for ax, metric in zip(self.axes, ("loss", main_metric)):
            for line in list(ax.lines):
                line.remove()
            ax.relim()  # the data limits of no lines: the new lines alone set them
            ax.set_prop_cycle(None)  # the first line blue again
            for split in sorted({r["split"] for r in history}):
                points = [(r["step"], r[metric]) for r in history if r["split"] == split and metric in r]
                if points:
                    ax.plot(*zip(*points), marker="o" if split != "train" else None, label=split)
            ax.set_ylabel(metric)
            ax.legend()  # replaces the previous run's
        with replacing(path) as staging:  # a plot cut short by the process ending leaves no broken curves.png
            self.fig.savefig(staging, dpi=100, format="png")


_figures = threading.local()  # a figure per drawing thread: a matplotlib figure is not for two threads at once


class ProcessGone(RuntimeError):
    """The drawing child could not be started or has exited."""


class CurvesProcess:
    """The drawing child, started at the first request. `draw` blocks the calling thread (not the GIL) until
    the figure is written; it raises ProcessGone without a child, RuntimeError if the child could not draw."""

    def __init__(self):
        self._proc = None

    def start(self) -> None:
        """Start the child now, without waiting: it loads matplotlib while the run trains."""
        try:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
        except OSError as e:
            raise ProcessGone(f"the curves process cannot start ({e})") from None

    def draw(self, history: list, main_metric: str, path: str) -> None:
        self._request({"history": history, "metric": main_metric, "path": os.path.abspath(path)})

    def draw_summary(self, summary: dict, path: str) -> None:
        """summary.png of zoo.sweeps.report.collect's `summary` (zoo.sweeps.plots.write_plot)."""
        self._request({"summary": summary, "path": os.path.abspath(path)})

    def _request(self, request: dict) -> None:
        self.start()
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            reply = self._proc.stdout.readline()
        except OSError as e:  # could not start it, or a broken pipe
            raise ProcessGone(f"the curves process is gone ({e})") from None
        if not reply:
            raise ProcessGone(f"the curves process exited (code {self._proc.wait()})")
        error = json.loads(reply).get("error")
        if error:
            raise RuntimeError(error)

    @staticmethod
    def _start() -> subprocess.Popen:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `zoo` is importable from
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        return subprocess.Popen([sys.executable, "-m", "zoo.curves"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)


def main() -> None:
    """The child: draw each request; stop when the parent closes the pipe (or exits)."""
    import matplotlib.figure  # noqa: F401 — loaded before the first request arrives, while the run trains

    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "summary" in request:
                from zoo.sweeps.plots import write_plot

                write_plot(request["summary"], request["path"])
            else:
                plot_curves(request["history"], request["metric"], request["path"])
            reply = {}
        except Exception as e:  # noqa: BLE001 — reported to the parent, which warns; the next request may work
            reply = {"error": f"{type(e).__name__}: {e}"}
        try:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # the parent is gone (e.g. killed by a signal): nobody to answer, nothing to report
            discard(sys.stdout)
            return


if __name__ == "__main__":
    main()
