"""Run artifacts: metrics.jsonl, TensorBoard scalars, a progress bar, results.json and curves.png."""
import json
import logging
import os
import sys
import time
import threading
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor

from tqdm import tqdm

from zoo.cli import new_run_dir
from zoo.cores import cpu_cores
from zoo.curves import CurvesProcess, ProcessGone, plot_curves
from zoo.errors import UserError
from zoo.files import write_json, write_text

log = logging.getLogger("zoo")


def drawers_for(cores: int) -> int:
    """Figures drawn at once: a population's members all finish together (~0.1 s of a drawing child's CPU a
    figure). The sweep's process keeps a core busy meanwhile with their checkpoints, so the children get the
    cores beside it, two at most. On two cores a second child (its matplotlib import and figures) took CPU from
    those saves: 16 linear members' command took 8.3-8.9 s with one child against 9.1-10.2 s with two on a busy
    machine, alike (5.9-7.8 s against 6.1-6.6 s) on a quiet one."""
    return max(1, min(2, cores - 1))


DRAWERS = drawers_for(cpu_cores())
_plotter = None  # threads handing a sweep's finished jobs' curves to the drawing processes
_pending = set()  # what they are yet to draw


class DrawerPool:
    """Drawing children not drawing now. `take` blocks until one is free and prefers the one given back last (a
    single run's child, started when the run started) among those still usable; None, a child that could not
    be started or was lost, is taken only when no usable one is left: then figures are drawn in this process."""

    def __init__(self, drawers: list):
        self._free, self._changed = list(drawers), threading.Condition()

    def take(self):
        with self._changed:
            self._changed.wait_for(lambda: self._free)
            usable = [d for d in self._free if d is not None]
            drawer = usable[-1] if usable else None
            self._free.remove(drawer)
            return drawer

    def give_back(self, drawer) -> None:
        with self._changed:
            self._free.append(drawer)
            self._changed.notify()


_free = DrawerPool([CurvesProcess() for _ in range(DRAWERS)])


def _event_writer():
    """tensorboardX's event writer and protos. Its package imports PyTorch wherever PyTorch is installed (for a
    type alias of its SummaryWriter, which the zoo does not use): seconds at every run's start on such a
    machine. Unless PyTorch is loaded already, tensorboardX is imported with `torch` marked absent, which
    tensorboardX's own fallback handles; the mark is removed at once, so a later `import torch` works."""
    hide = "tensorboardX" not in sys.modules and "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # `import torch` raises ImportError without looking for it
    try:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto import event_pb2, summary_pb2
    finally:
        if hide and sys.modules.get("torch", False) is None:
            del sys.modules["torch"]
    return EventsWriter, event_pb2, summary_pb2


class TensorBoardWriter:
    """TensorBoard scalars, written by tensorboardX's event writer in the calling thread.

    tensorboardX's FileWriter hands every event to a writer thread through a multiprocessing.Queue (pickled
    through a pipe by a third thread): ~200 us of GIL-holding work per event, measured as 3-4 us a step of a
    linear model's train loop logging every 50 steps. Written here an event costs ~30 us."""

    FLUSH_SECONDS = 10  # how stale `tensorboard --logdir` may see a running job (it reloads every 5 s or more)

    def __init__(self, directory: str, purge_from: int | None = None):
        """`purge_from`: the step a run resumes from. TensorBoard drops the earlier files' events from that step
        on when it reads a SessionLog START there; RunLogger writes again what metrics.jsonl keeps at that step."""
        EventsWriter, event_pb2, summary_pb2 = _event_writer()
        os.makedirs(directory, exist_ok=True)
        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        # tensorboardX names the file by the second and opens it "wb": a resume within the same second would
        # overwrite the earlier attempt's file. The nanoseconds keep each file apart, in the order written.
        self._writer = EventsWriter(os.path.join(directory, "events"), filename_suffix=f".{time.time_ns()}")
        self._flushed = time.time()
        if purge_from is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self._writer.write_event(self._event(wall_time=self._flushed, step=purge_from, session_log=start))

    def add_scalars(self, step: int, scalars: dict) -> None:
        values = [self._summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
        now = time.time()
        self._writer.write_event(self._event(wall_time=now, step=step, summary=self._summary(value=values)))
        if now - self._flushed >= self.FLUSH_SECONDS:  # its flush fsyncs: ~150 us, too much for every event
            self._writer.flush()
            self._flushed = now

    def close(self) -> None:
        self._writer.close()


def _of_the_end(record: dict) -> bool:
    """A record a run's end wrote (its final evals, or early stopping's eval of its final state): redone by a
    rerun that finishes again, dropped by a run lengthened from there."""
    return bool(record.get("final") or record.get("end"))


class RunLogger:
    def __init__(self, out_dir: str, cfg, total_steps: int, start_step: int = 0, enabled: bool = True,
                 learning_rate=None, plot_in_background: bool = False):
        self.out_dir, self.enabled, self.history = out_dir, enabled, []
        self.plot_in_background = plot_in_background  # close() returns before curves.png is drawn
        self.learning_rate = learning_rate  # step -> the schedule's rate, recorded with each train log
        self.train_flops_per_example = None  # set once the model summary knows it: train logs then carry GFLOP/s
        self._jsonl = self._tb = self._bar = None
        if not enabled:  # only process 0 writes in multi-process runs
            return
        os.makedirs(out_dir, exist_ok=True)
        redone = self._open_jsonl(os.path.join(out_dir, "metrics.jsonl"), start_step, self.history)
        if cfg.tensorboard:
            # from start_step itself: the final evals of a run now lengthened (or stopped before results.json)
            # lie there, and the redone evals would join them; what metrics.jsonl keeps from there is written
            # again. Early stopping logged its final evals at its best step, which may come before start_step.
            purge_from = min(redone, start_step) if start_step else None
            self._tb = TensorBoardWriter(os.path.join(out_dir, "tensorboard"), purge_from)
            for record in (r for r in self.history if purge_from is not None and r["step"] >= purge_from):
                self._tb.add_scalars(record["step"], _scalars(record))
        if cfg.progress:
            self._bar = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True)
        self._plot = cfg.plot
        if self._plot:
            _background(_draw, "start", lambda: None)  # matplotlib loads in the child meanwhile

    def _open_jsonl(self, path: str, start_step: int, history: list) -> int:
        """Keep the records up to the step a run resumes from; later ones, and the final evals of a command that
        stopped after them (before results.json) or of a shorter run now lengthened, are about to be redone. The
        kept ones replace the file in one rename, so a process killed from here on leaves them on disk. Returns
        the first step of a record dropped (start_step if none was)."""
        redone = start_step
        if os.path.exists(path):
            records, torn = _read_records(path)
            history.extend(r for r in records if r["step"] <= start_step and not _of_the_end(r))
            if len(history) < len(records) or torn:  # a torn line goes too: the next record would continue it
                write_text(path, "".join(json.dumps(r) + "\n" for r in history))
                redone = min([start_step] + [r["step"] for r in records if _of_the_end(r)])
        self._jsonl = open(path, "a" if history else "w")
        return redone

    def last(self, split: str) -> dict:
        """The newest record of `split`, its metrics alone, as the loop returned them (e.g. train metrics of a run
        resumed at its end): without step, split and what logging added (speed, learning rate, epsilon)."""
        added = ("step", "split", "final", "examples_per_s", "learning_rate", "gflop_s", "epsilon")
        for record in reversed(self.history):
            if record["split"] == split:
                return {k: v for k, v in record.items() if k not in added}
        return {}

    def _train_extras(self, step: int, metrics: dict) -> dict:
        extras = {}
        if self.learning_rate is not None:
            extras["learning_rate"] = self.learning_rate(step)
        if self.train_flops_per_example and "examples_per_s" in metrics:
            extras["gflop_s"] = metrics["examples_per_s"] * self.train_flops_per_example / 1e9
        return extras

    def log(self, step: int, split: str, metrics: dict, final: bool = False, end: bool = False) -> None:
        """`final`: an eval of the finished run (marked in metrics.jsonl), not a periodic one. `end`: the periodic
        split's eval of the final state of a run early stopping did not stop (marked: like the final ones, a run
        lengthened from there drops it, as a run trained that long at once makes none there)."""
        if split == "train":
            metrics = {**metrics, **self._train_extras(step, metrics)}
        record = {"step": step, "split": split, **metrics, **({"final": True} if final else {}),
                  **({"end": True} if end else {})}
        self.history.append(record)
        if not self.enabled:
            return
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        if self._tb is not None:  # one event per record
            scalars = _scalars(record)
            if final:  # early stopping logs the final evals at the best step, whose periodic eval (of the same
                # state) the event files hold already: a viewer would show each of its scalars there twice
                written = {tag for r in self.history[:-1] if r["step"] == step and not r.get("final")
                           for tag in _scalars(r)}
                scalars = {tag: v for tag, v in scalars.items() if tag not in written}
            if scalars:
                self._tb.add_scalars(step, scalars)

    def progress(self, step: int, loss: float, examples_per_s: float) -> None:
        if self._bar is not None:
            self._bar.n = step
            extra = {}
            if self.train_flops_per_example:
                extra["gflop_s"] = f"{examples_per_s * self.train_flops_per_example / 1e9:.3g}"
            self._bar.set_postfix(loss=f"{loss:.4f}", ex_s=f"{examples_per_s:,.0f}", **extra, refresh=True)

    def end_progress(self) -> None:
        """End the progress bar's line, so that what is printed next (an error) starts a line of its own."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def write_results(self, results: dict) -> None:
        if not self.enabled:
            return
        write_json(os.path.join(self.out_dir, "results.json"), results)

    def close(self, main_metric: str) -> None:
        if not self.enabled:
            return
        for handle in (self._bar, self._tb, self._jsonl):
            if handle is not None:
                handle.close()
        if not (self._plot and self.history):
            return
        drawn = _background(_plot_or_warn, list(self.history), main_metric, os.path.join(self.out_dir, "curves.png"))
        if not self.plot_in_background:  # a single run returns with its curves drawn
            drawn.result()


def _read_records(path: str) -> tuple:
    """(metrics.jsonl's records, whether its last line was cut short). Such a line (a full disk, a kill while it was
    written) is left out: it was the run's last write, past its latest checkpoint, so the resumed run redoes it."""
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is damaged like one that is not JSON
        lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    records = []
    for n, line in lines:
        try:
            record = json.loads(line)
            if not (isinstance(record, dict) and isinstance(record.get("step"), int)
                    and isinstance(record.get("split"), str)):
                raise ValueError("not a metrics record")
            records.append(record)
        except ValueError:  # UnicodeDecodeError too
            if n == lines[-1][0]:
                return records, True
            raise UserError(f"line {n} of {os.path.abspath(path)} is damaged (not a JSON record); delete that line "
                            f"or start in a new {new_run_dir(os.path.dirname(path))}.") from None
    return records, False


def _scalars(record: dict) -> dict:
    """A metrics.jsonl record's TensorBoard scalars: `split/metric`, without the count of examples."""
    return {f"{record['split']}/{name}": value for name, value in record.items()
            if name not in ("step", "split", "final", "count")}


def _background(fn, *args) -> Future:
    """Run fn(*args) on one of the drawing threads; each waits on a child process while it draws."""
    global _plotter
    _plotter = _plotter or ThreadPoolExecutor(max_workers=DRAWERS, thread_name_prefix="zoo-curves")
    future = _plotter.submit(fn, *args)
    _pending.add(future)
    future.add_done_callback(_pending.discard)
    return future


def wait_for_plots() -> None:
    """Until the curves handed to the background threads are drawn (also done at interpreter exit). The threads
    only wait on the child processes (zoo.curves) that draw them, so they hold no GIL the next job needs."""
    futures.wait(list(_pending))


def draw_summary_plot(summary: dict, path: str) -> None:
    """A sweep's summary.png, drawn after every curves.png handed over before it, by a drawing child."""
    from zoo.sweeps.plots import write_plot

    wait_for_plots()
    _background(_draw, "draw_summary", write_plot, summary, path).result()


def _plot_or_warn(history: list, main_metric: str, path: str) -> None:
    try:
        _draw("draw", plot_curves, history, main_metric, path)
    except Exception as e:  # noqa: BLE001 — a missing plot must not cost its run the final checkpoint and results
        log.warning("could not draw %s: %s", path, e)


def _draw(method: str, here, *args) -> None:
    """A free child's `method`, or `here` (the same drawing in this process) once that child is gone."""
    pool = _free  # the pool it came from gets it back, even if a test swaps the pool meanwhile
    drawer = pool.take()
    try:
        if drawer is not None:
            try:
                return getattr(drawer, method)(*args)
            except ProcessGone as e:  # no child process: draw in this one, for the rest of the sweep
                log.warning("drawing curves in this process from now on: %s", e)
                drawer = None
        here(*args)
    finally:
        pool.give_back(drawer)
