"""The train loop of a population: zoo.loop.fit's cadence, with each member's outcome decided on its own.

A member whose loss turns non-finite fails, one its sweep's pruner stops is pruned, one early stopping ends
is done: each is frozen (its rows are masked, so the step leaves its state as it is) while the others go on.
Members resumed from different steps wait, masked, until the population reaches their step.
"""
import collections
import functools
import logging
import threading
import time
from dataclasses import dataclass, field

import jax
import numpy as np

from zoo.data.pipeline import PADDING_STEP
from zoo.errors import UserError
from zoo.loop import (DEFAULT_STEPS_PER_CALL, NonFiniteLoss, call_length, check_finite, divergence_advice, log_period,
                      logged_eval, next_boundary, pruned_at)
from zoo.population.logs import member_lines
from zoo.population.program import member

log = logging.getLogger("zoo")


@dataclass
class Member:
    outputs: object  # zoo.outputs.RunOutputs: this member's run directory
    stream: object  # its TrainStream (its own seed, its own data order)
    on_eval: object = None  # its sweep trial's pruner hook, or None
    hydra_cfg: object = None  # its job's Hydra node (None outside a sweep)
    error: Exception | None = None  # why it stopped for good (failed or pruned)
    end: int = 0  # the step it runs to: the run's last, or where early stopping ended it
    train_metrics: dict = field(default_factory=dict)
    results: dict | None = None  # what its run reports once finished
    last_finite: float | None = None

    @functools.cached_property
    def advice(self) -> str:
        """What a non-finite loss of this member tells to change: its own settings, as its solo run's says."""
        return divergence_advice(self.outputs.cfg)

    def running_at(self, step: int) -> bool:
        return self.error is None and self.outputs.start_step <= step < self.end


def fit_population(program, states, accs, members: list, hyper, cfg, total_steps: int, task, eval_set, stop, writer,
                   steps_per_call: int = DEFAULT_STEPS_PER_CALL):
    """Train every member to its end; returns (stacked device states, the last step run).

    `accs` holds each member's partial metric sums (restored ones after a resume). `eval_set` is the periodic
    split's (name, device batches, example count). `steps_per_call` is K when trainer.steps_per_call is
    null (as zoo.train chooses it). Members that fail or are pruned get `error` set. The checkpoints due go to
    `writer` (a CheckpointWriter), which may still be writing them on return."""
    log_every = log_period(cfg)
    saving = _saving(members)
    checkpoint_every = cfg.checkpoint_every if saving else 0
    eval_every, each_step = cfg.eval_every, cfg.nan_check == "step"
    for m in members:
        m.end = m.outputs.end_step
    step, length = first_call(members, cfg, total_steps, steps_per_call)
    interval_start, t_log = step, time.perf_counter()
    writes = []  # (member, write): the checkpoints due at the last boundary, checked and described already
    if eval_every and step % eval_every == 0 and step < total_steps:  # members lengthened from a run ending here
        writes = _evals_at_start(program, states, accs, members, step, eval_set, task)
    while step < total_steps and any(m.error is None and step < m.end for m in members):
        k = min(length, next_boundary(step, total_steps, log_every, eval_every, checkpoint_every) - step)
        idx, mask = _member_rows(members, step, k, length, program.size)
        states, accs = program.train_chunk(states, accs, idx, mask, hyper)
        writer.submit(writes)  # while the chunk runs
        writes = []
        step += k
        saved_states = None
        if step % log_every == 0 or step == total_steps:
            accs, t_log = _log_train(program, accs, members, step, interval_start, t_log, task, each_step=each_step)
            interval_start = step
        evals = {}
        if eval_every and step % eval_every == 0 and step < total_steps:
            evals, metrics = _periodic_eval(program, states, members, step, eval_set, task)
            writes += _evals_at_start(program, states, accs, members, step, eval_set, task, metrics)
        checkpoint_due = checkpoint_every and step % checkpoint_every == 0
        stopping = bool(stop)  # read once: a signal during the loop below must reach every member or none
        for i, m in enumerate(members):
            if m.error is not None or step > m.end or m.outputs.start_step >= step:
                continue  # done before, or not yet started: nothing new to save
            ended = step == m.end and step < total_steps  # early stopping ended it at this eval
            pruned = i in evals and m.on_eval is not None and m.on_eval(step, evals[i])
            scored = checkpoint_due or pruned or ended or (m.outputs.early is not None and i in evals)
            if saving and step < total_steps and (scored or stopping):
                if saved_states is None:
                    saved_states = jax.device_get((states, accs))
                # a checkpoint taken only because of a stop carries no eval metrics (see zoo.loop.fit)
                writes.append(_prepare_write(m, step, member(saved_states[0], i), member(saved_states[1], i),
                                             evals.get(i) if scored else None))
            if pruned and m.error is None:
                m.error = pruned_at(step, eval_set[0], evals[i])
        if stopping:
            break
    writer.submit(writes)  # at the end or a stop: train_population waits for them before deciding outcomes
    return states, step


def _saving(members: list) -> bool:
    return any(m.outputs.ckpts is not None for m in members)  # as zoo.train: no split nor copy without them


def first_call(members: list, cfg, total_steps: int, steps_per_call: int = DEFAULT_STEPS_PER_CALL) -> tuple:
    """(the step fit_population starts at, the steps of each of its train calls) for these members."""
    step = min([m.outputs.start_step for m in members if m.error is None] + [total_steps])
    return step, call_length(cfg, steps_per_call, total_steps - step, saving=_saving(members))


def _member_rows(members, step: int, k: int, chunk_size: int, padded: int):
    """Indices (N, K, B) and masks: a member's steps outside its running ones are padding steps, which the call
    skips for it, as are all of the frozen copies'."""
    idx, mask = [], []
    for m in members:
        i, w = m.stream.indices(step, k, pad_to=chunk_size)
        running = np.array([m.running_at(s) for s in range(step, step + chunk_size)])
        idx.append(i)
        mask.append(np.where(running[:, None], w, PADDING_STEP))  # its steps outside its run are skipped
    for _ in range(padded - len(members)):  # frozen copies that only even out the shards
        idx.append(idx[0])
        mask.append(np.full_like(mask[0], PADDING_STEP))
    return np.stack(idx).astype(np.int32), np.stack(mask)


def _log_train(program, accs, members, step, interval_start, t_log, task, each_step: bool = False):
    """Each member that ran in this interval logs its train metrics; a non-finite one fails and freezes.
    `each_step` (trainer.nan_check=step): a non-finite loss is reported with its batch, as in a solo run.
    Returns the sums put back and the time of the fetch: an interval runs from `t_log` until its steps are fetched,
    as in zoo.loop.fit (timed before the fetch, it was the dispatch's time alone, its rates ~14x a solo run's)."""
    host = jax.device_get(accs)
    now = time.perf_counter()
    seconds = now - t_log
    logged = []
    for i, m in enumerate(members):
        ran = sum(m.running_at(s) for s in range(interval_start, step))
        if m.error is not None or not ran or step > m.end:
            continue  # a member not started yet keeps its restored partial sums; an ended one logs no more
        metrics = task.metrics(member(host, i))
        try:
            check_finite(metrics, step, m.last_finite, m.stream.position(step - 1) if each_step else None,
                         m.advice)
        except NonFiniteLoss as e:
            m.error = e
            continue
        m.last_finite = metrics["loss"]
        m.train_metrics = metrics
        examples_per_s = ran * m.stream.batch_size / max(seconds, 1e-9)
        m.outputs.logger.log(step, "train", {**metrics, "examples_per_s": examples_per_s})
        logged.append(i)
    host = jax.tree.map(lambda a: _zero_rows(a, logged), host)
    losses = [m.train_metrics["loss"] for m in members if m.error is None and m.train_metrics]
    log.info("population step %d: %d of %d members training, best train loss %s", step,
             sum(m.error is None and step < m.end for m in members), len(members),
             f"{min(losses):.4f}" if losses else "n/a")
    return program.put_members(host), now


def _zero_rows(a, rows: list):
    a = np.array(a)
    a[rows] = 0
    return a


def _periodic_eval(program, states, members, step, eval_set, task) -> tuple:
    """(member index -> metrics of the periodic split, for the members running up to this step; every member's
    metrics, for those starting at this step)."""
    split, batches, count = eval_set
    metrics = evaluate_members(program, states, batches, count, task, len(members))
    evals = {}
    for i, m in enumerate(members):
        if m.error is None and m.outputs.start_step < step <= m.end:
            evals[i] = metrics[i]
            m.outputs.logger.log(step, split, metrics[i])
            if m.outputs.early is not None:
                with member_lines(m.outputs.cfg.paths.output_dir):  # its "early stopping at" line is its own
                    if m.outputs.early.update(step, metrics[i]):
                        m.end = step
    return evals, metrics


def _evals_at_start(program, states, accs, members, step, eval_set, task, metrics=None) -> list:
    """The periodic eval at `step` of the members starting there lengthened (zoo.loop.fit's eval_at_start): the
    run each continues ended at that step with final evals, which it drops. Returns the writes of those early
    stopping ends there: their checkpoint at the step holds the counters from before this eval. `metrics`: every
    member's at this step where the periodic eval has just made them (else they are made here, if needed)."""
    starting = [i for i, m in enumerate(members) if m.error is None and m.outputs.eval_at_start
                and m.outputs.start_step == step < m.end]
    if not starting:
        return []
    split, batches, count = eval_set
    if metrics is None:
        metrics = evaluate_members(program, states, batches, count, task, len(members))
    saved, writes = None, []
    for i in starting:
        m = members[i]
        if not logged_eval(m.outputs.logger, step, split):  # a rerun after a kill past it has its row already
            m.outputs.logger.log(step, split, metrics[i])
        if m.outputs.early is not None:
            with member_lines(m.outputs.cfg.paths.output_dir):
                if m.outputs.early.update(step, metrics[i]):
                    m.end = step
                    saved = saved or jax.device_get((states, accs))
                    try:
                        writes.append((m, m.outputs.save.later(step, member(saved[0], i), member(saved[1], i),
                                                               metrics[i], replace=True)))
                    except UserError as e:
                        m.error = e
    return writes


def evaluate_members(program, states, batches, count: int, task, n: int) -> list:
    """Every member's metrics on one split, in one vmapped pass over its batches (exact, like zoo.loop.evaluate)."""
    acc = program.zero_accs()
    for batch in batches:
        acc = program.eval_step(states, acc, batch)
    host = jax.device_get(acc)
    metrics = [task.metrics(member(host, i)) for i in range(n)]
    for m in metrics:
        if m["count"] != count:  # padding must never be counted, no example dropped
            raise AssertionError(f"eval counted {m['count']} examples, split has {count}")
    return metrics


def _prepare_write(m: Member, step: int, host_state, host_acc, eval_metrics):
    """(member, the call writing its checkpoint at `step`), checked now: non-finite parameters fail the member
    here, before its next chunk."""
    try:
        return m, m.outputs.save.later(step, host_state, host_acc, eval_metrics)
    except UserError as e:  # non-finite params: it alone fails (no checkpoint is written)
        m.error = e
        return m, None


class CheckpointWriter:
    """The members' checkpoints, written behind the loop on a thread of their own, in the order they fall due.

    An orbax save costs the host ~25 ms whatever the model, so a population of small models trains faster than
    its members' checkpoints are written. A boundary's checkpoints wait until AHEAD boundaries are due or the
    oldest has waited LATE_S seconds; then every boundary due is written at once, in order, except a save that a
    newer one of the same member among them would make orbax delete (its policy keeps the newest and the best).
    Each member's checkpoints end as its solo run's, and its newest is on disk at most LATE_S seconds (or AHEAD
    boundaries) after it falls due, plus the time to write them: a save is skipped only for one written with it,
    never for one still waiting. A member whose write is refused (a full disk) fails alone: the chunks already
    running train it on, but nothing more of it is saved, and once the failure is seen its rows are masked."""

    AHEAD = 8
    LATE_S = 5.0

    def __init__(self):
        self._ready = threading.Condition()
        self._queue = collections.deque()  # (time due, [(member, write), ...]) per boundary, oldest first
        self._refused = set()  # id(member) of those whose write was refused: nothing more of them is written
        self._writing = False
        self._hurry = 0  # callers of wait(): write without waiting for more boundaries
        self._closed = False
        self._error = None  # an unexpected error of a write, raised on the loop's thread
        self._thread = threading.Thread(target=self._run, name="zoo-population-saves", daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.wait()
        finally:
            with self._ready:
                if exc[0] is not None:  # e.g. a second Ctrl-C: only the boundary being written is finished
                    self._queue.clear()
                self._closed = True
                self._ready.notify_all()
            self._thread.join()

    def submit(self, writes: list) -> None:
        """Queue one boundary's (member, write) pairs (write None: nothing to write); waits while AHEAD are due."""
        writes = [(m, w) for m, w in writes if w is not None]
        with self._ready:
            self._ready.wait_for(lambda: len(self._queue) < self.AHEAD or self._error is not None)
            self._raise()
            if writes:
                self._queue.append((time.monotonic(), writes))
                self._ready.notify_all()

    def wait(self) -> None:
        """Every write submitted is done."""
        with self._ready:
            self._hurry += 1
            self._ready.notify_all()
            try:
                self._ready.wait_for(lambda: not (self._queue or self._writing) or self._error is not None)
            finally:
                self._hurry -= 1
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _next(self):
        """The writes of every boundary due, oldest first, once it is time to write them; None once closed with
        nothing left."""
        with self._ready:
            while True:
                if self._queue:
                    late = self._queue[0][0] + self.LATE_S - time.monotonic()
                    if self._hurry or self._closed or len(self._queue) >= self.AHEAD or late <= 0:
                        self._writing = True
                        writes = [pair for _, boundary in self._queue for pair in boundary]
                        self._queue.clear()
                        return writes
                elif self._closed:
                    return None
                self._ready.wait(late if self._queue else None)

    def _run(self) -> None:
        while (writes := self._next()) is not None:
            error = None
            try:
                self._write(writes)
            except BaseException as e:  # noqa: BLE001 — handed to the loop's thread
                error = e
            with self._ready:
                self._error = self._error or error
                self._writing = False
                self._ready.notify_all()

    def _write(self, writes: list) -> None:
        """`writes`: (member, write) in the order they fell due. A write is skipped only where the member's later
        ones among `writes` outlive it: boundaries due after these may not be written before the process ends."""
        mine = collections.defaultdict(list)  # id(member) -> its writes here, in order
        for m, write in writes:
            mine[id(m)].append(write)
        for m, write in writes:
            later = mine[id(m)][1:]
            mine[id(m)] = later
            try:
                if id(m) not in self._refused and not write.outlived(later):
                    write()
            except UserError as e:
                m.error = e
                self._refused.add(id(m))  # its later writes, already due, are not made either
