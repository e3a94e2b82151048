"""Multi-process runs: jax.distributed start-up, and helpers that let every process feed only its share."""
import errno
import fcntl
import json
import logging
import os
import re
import socket
import sys
import threading
import time

import jax
import numpy as np
from jax._src import distributed as jax_distributed  # its client: the processes' key-value store
from jax.experimental import multihost_utils

from zoo.config import coordinator_host, dotted_settings
from zoo.errors import ProcessesNotJoined, UserError
from zoo.parallel import heartbeats


# The sentence of a join that timed out in this process: JAX's client is set (is_initialized() says so) but never
# connected, and a multirun's next job that went on with it failed in the CPU backend's RuntimeError
_not_joined = None


def init_distributed(cfg, run_dir=None) -> None:
    """Join the process group; must run after jax_num_cpu_devices is set and before any JAX work. `run_dir`: a
    training run's, where this process holds its distributed.process_id while it runs (claim_process_id)."""
    if _not_joined is not None:
        raise ProcessesNotJoined(_not_joined)
    if cfg.mode == "none" or jax.distributed.is_initialized():  # eval.py joins before building its run
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
    # JAX's preemption service takes SIGTERM over in C++ (it only logs "SIGTERM caught" and waits for a sync point
    # the zoo does not use), so a SIGTERM after joining and before the train loop went unseen: the run trained on
    jax.config.update("jax_enable_preemption_service", False)
    if cfg.mode == "explicit":
        missing = [k for k in ("coordinator_address", "num_processes", "process_id") if cfg.get(k) is None]
        if missing:
            raise UserError(f"distributed=explicit needs {', '.join('distributed.' + k for k in missing)}.")
        kwargs = dict(coordinator_address=cfg.coordinator_address, num_processes=cfg.num_processes,
                      process_id=cfg.process_id)
        _check_resolves(cfg.coordinator_address)
        if run_dir is not None:  # once the settings are checked (nothing made for a refused command), before the
            claim_process_id(cfg, run_dir)  # port's: a second process 0 finds it taken by the first
        if cfg.process_id == 0:
            _check_port_free(cfg.coordinator_address)
    else:  # auto: SLURM, Open MPI, Kubernetes, TPU pods — whatever jax.distributed detects
        kwargs = {}
    _native_stdout_to_stderr()
    try:
        _join_within(cfg, kwargs)
    except ProcessesNotJoined:
        raise
    except Exception as e:  # noqa: BLE001 — surfaces as one sentence naming the settings
        advice = "check distributed.coordinator_address, num_processes and process_id"
        if cfg.mode == "auto":  # which refuses those settings: it reads the processes from the environment
            none = " and found none here" if "coordinator_address" in str(e) else ""  # JAX's words for no cluster
            advice = ("distributed=auto reads the processes from a cluster's environment (SLURM, Open MPI, "
                      f"Kubernetes, TPU pods){none}; run the command inside a cluster job, or use distributed=explicit "
                      "with distributed.coordinator_address, distributed.num_processes and distributed.process_id")
        raise UserError(f"jax.distributed could not start with distributed={cfg.mode} ({e}); {advice}.") from None
    _watch_peers(cfg, run_dir)
    if not is_primary():  # the processes share one run dir: its train.log is process 0's, as its other files
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)
            handler.close()
        for handler in root.handlers:  # process 0's lines again, the same figures: its warnings and errors only
            handler.setLevel(max(handler.level, logging.WARNING))


_claimed = {}  # run dir -> the open descriptor whose lock holds this process's id there until it ends
_holding = None  # (descriptor, distributed.process_id, run dir) where this process last claimed its id
_LINGER_S = 5  # how long a process that saw another count keeps its id, for the others to see it too
_SLOT = 16  # bytes of .processes.lock per id: its first locked while a process holds the id, the slot its count


def claim_process_id(cfg, output_dir: str) -> None:
    """Hold distributed.process_id in the run dir the processes share, or refuse: JAX's coordinator took a second
    process 1 for process 1 restarted and aborted every process from C++ at once (exit 134), and a second process 0
    was told its port was in use. A slot of .processes.lock per id, its first byte locked (POSIX locks, which NFS
    carries across hosts) until the process ends, and in it the distributed.num_processes the process was given,
    which the processes compare while they wait for each other (see _join_within)."""
    global _holding
    if cfg is None or cfg.get("mode") != "explicit" or None in (cfg.get("process_id"), cfg.get("num_processes")):
        return  # refused with the missing settings' names as it joins
    path = os.path.abspath(output_dir)
    if path not in _claimed:
        os.makedirs(path, exist_ok=True)
        _claimed[path] = os.open(os.path.join(path, ".processes.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fd = _claimed[path]
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SLOT * cfg.process_id, os.SEEK_SET)
    except (BlockingIOError, PermissionError):  # EAGAIN or EACCES: held by another process
        raise UserError(f"distributed.process_id={cfg.process_id} is taken by another process running now in {path}; "
                        "give each process of the run its own distributed.process_id, from 0 to "
                        f"{cfg.num_processes - 1}.") from None
    except OSError:  # a file system without locks: nothing to hold
        return
    os.pwrite(fd, f"{cfg.num_processes:>{_SLOT - 1}}\n".encode(), _SLOT * cfg.process_id)
    _holding = (fd, cfg.process_id, path)


def _started_now(ids: int) -> dict:
    """Process id -> the distributed.num_processes it was given (None: not yet written), for the processes that hold
    their ids, below `ids`, in the run dir this process holds its own in, this one included."""
    if _holding is None:
        return {}
    fd, mine, _ = _holding
    found = {}
    for i in range(ids):
        if i != mine:
            try:
                fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, _SLOT * i, os.SEEK_SET)
            except OSError:  # held by another process
                pass
            else:  # free: no process holds that id
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, _SLOT * i, os.SEEK_SET)
                continue
        raw = os.pread(fd, _SLOT, _SLOT * i)
        found[i] = int(raw) if raw.strip().isdigit() else None
    return found


def _join_within(cfg, kwargs: dict) -> None:
    """jax.distributed.initialize, given distributed.timeout_s. Its client waits in C++ for every process to register
    and, once its deadline passes, aborts the process (exit 134, a native stack), which no Python handler sees: it
    waits in a thread instead, given a minute more, and this one gives up first, with a sentence."""
    global _not_joined
    outcome = []

    def join():
        try:
            # JAX takes the seconds as a C int: a longer timeout is as long as it waits
            jax.distributed.initialize(**kwargs, initialization_timeout=min(cfg.timeout_s + 60, 2**31 - 1))
            outcome.append(None)
        except Exception as e:  # noqa: BLE001 — raised again in the calling thread
            outcome.append(e)

    thread = threading.Thread(target=join, name="jax.distributed.initialize", daemon=True)
    thread.start()
    deadline, differ, started = time.monotonic() + cfg.timeout_s, {}, set()
    while thread.is_alive() and time.monotonic() < deadline:  # Ctrl-C and SIGTERM still reach this thread meanwhile
        thread.join(min(0.5, max(deadline - time.monotonic(), 0)))
        if outcome or cfg.mode != "explicit":
            continue
        # JAX's coordinator waits for process 0's count: given another, a process waited out distributed.timeout_s.
        # The same difference twice, half a second apart: a process that just took its id may not have written yet
        now = _started_now(cfg.num_processes + 8)  # a process given a larger count may have a larger id
        started.update(now)  # those that gave up first, too
        seen, differ = differ, {i: n for i, n in now.items() if n is not None and n != cfg.num_processes}
        counts = {**differ, cfg.process_id: cfg.num_processes}
        first = now.get(0) if cfg.process_id else cfg.num_processes  # process 0's, None until it has written it
        # only process 0's count above another's keeps the join from completing; below, every process joins and
        # check_num_processes refuses them together: one refused here might have joined, and left the others
        # waiting in their first collective until the coordinator aborted them (exit 134, ~100 s later)
        if differ and differ == seen and first is not None and first > min(counts.values()):
            _not_joined = _counts_differ(counts)
            time.sleep(_LINGER_S)  # its id held a while longer: the others see the difference too, not its exit
            raise ProcessesNotJoined(_not_joined)
    if not outcome:
        if cfg.mode == "auto":
            _not_joined = (f"not all the processes of this cluster job joined within distributed.timeout_s="
                           f"{cfg.timeout_s} (distributed=auto); check that every task of the job runs this command, "
                           "or raise distributed.timeout_s.")
        else:
            count = (f" ({len(started)} started in {_holding[2]}: distributed.process_id "
                     f"{', '.join(map(str, sorted(started)))})" if started else "")
            _not_joined = (f"not all distributed.num_processes={cfg.num_processes} processes joined within "
                           f"distributed.timeout_s={cfg.timeout_s}{count}; start every one with the same "
                           "distributed.coordinator_address (process 0's host and a port free there) and "
                           "num_processes, each with its own distributed.process_id from 0 to "
                           f"{cfg.num_processes - 1}, or raise distributed.timeout_s.")
        raise ProcessesNotJoined(_not_joined)
    if outcome[0] is not None:
        raise outcome[0]


def _watch_peers(cfg, run_dir) -> None:
    """A peer silent for distributed.lost_after_s ends this process with the sentence of a lost process
    (zoo.parallel.heartbeats): where gloo's collective would wait for it without end."""
    client = getattr(getattr(jax_distributed, "global_state", None), "client", None)
    if client is None or jax.process_count() < 2:
        return

    def lost(peer: int, seconds: float) -> None:
        from zoo.cli import exit_at_once

        exit_at_once(_lost(f"no word from process {peer} for {seconds:.0f} s", run_dir))

    heartbeats.watch_peers(client, jax.process_index(), jax.process_count(), cfg.lost_after_s, lost)


def lost_process(e: BaseException, output_dir: str | None) -> UserError | None:
    """The sentence for a collective whose peer died mid-run (kill -9, the OOM killer): gloo's error reaches this
    process at once, at its next collective; JAX's coordination service only notices the lost heartbeats after
    100 s, and then aborts every process still running from C++, which no Python handler sees. None for any other
    error."""
    if not jax.distributed.is_initialized():
        return None
    # a JaxRuntimeError, or a ValueError from the collective orbax's save runs; wrapped in another, maybe
    found, seen = None, set()
    while e is not None and id(e) not in seen and found is None:
        seen.add(id(e))
        found = re.search(r"Gloo [\w-]+ failed: (?:\[[^]]*\] )?(.*)", str(e))
        e = e.__cause__ or e.__context__
    if found is None:
        return None
    reason = re.sub(r" \[[^]]*\]:\d+:", ":", found.group(1).splitlines()[0])  # the peer's address, gloo's port
    return _lost(f"gloo: {reason}", output_dir)


def _lost(reason: str, output_dir: str | None) -> UserError:
    then = (f"its checkpoints in {os.path.join(os.path.abspath(output_dir), 'checkpoints')} are kept: start every "
            "process again with the same command to resume" if output_dir else
            "start every process again with the same command")
    return UserError(f"another process of this multi-process run stopped mid-run (killed, or out of memory; {reason}), "
                     f"and this one stops with it; {then}.")


def _check_resolves(address: str) -> None:
    """Every process connects to the coordinator by name: JAX's client retries a name that does not resolve until
    distributed.timeout_s is out, then aborts the process from C++ (exit 134, a native stack)."""
    host, port = coordinator_host(address), str(address).rpartition(":")[2]
    if host is None:  # not host:port, which validate_placement refuses first
        return
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        cause = e.strerror if isinstance(e, socket.gaierror) else str(e)
        raise UserError(f"distributed.coordinator_address={address} names a host that cannot be resolved ({cause}); "
                        f"set it to process 0's host:port.") from None


def _check_port_free(address: str) -> None:
    """Process 0 serves the coordinator on the address's port, on every interface ([::]:port): with the port taken,
    gRPC failed to listen and the process segfaulted about one time in two (exit 139)."""
    if os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):  # JAX's own setting of where process 0 listens
        return
    port = int(str(address).rpartition(":")[2])
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):  # IPv4 where there is no IPv6
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC: a closed run's port is free
                s.bind((host, port))
            return
        except OSError as e:
            if e.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL) and family == socket.AF_INET6:
                continue
            raise UserError(f"distributed.coordinator_address={address}: process 0 cannot listen on port {port} "
                            f"({e.strerror}); choose a free port, the same for every process.") from None


def _native_stdout_to_stderr() -> None:
    """Gloo writes a line to C++'s std::cout ("[Gloo] Rank 0 is connected to 1 peer ranks...") for every group of
    devices it connects, at start-up and at a group's first collective: fd 1 becomes stderr, where the logs are,
    and Python's stdout keeps what fd 1 was, so that it carries the results alone (eval.py's line)."""
    sys.stdout.flush()
    results = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = open(results, "w", buffering=1, encoding=sys.stdout.encoding, errors=sys.stdout.errors)


def is_primary() -> bool:
    """Only process 0 writes logs, results and plots."""
    return jax.process_index() == 0


def every_process(value: str) -> list:
    """`value` as each process has it, in process order (one entry in a single process)."""
    if jax.process_count() == 1:
        return [value]
    data = np.frombuffer(value.encode(), np.uint8)
    lengths = np.asarray(multihost_utils.process_allgather(np.int32(len(data)))).ravel()
    padded = np.zeros(int(lengths.max()), np.uint8)  # the gathered arrays must have one shape
    padded[:len(data)] = data
    rows = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(lengths), -1)
    return [bytes(row[:n]).decode() for row, n in zip(rows, lengths)]


def check_num_processes(cfg) -> None:
    """JAX's coordinator waits for process 0's distributed.num_processes alone: another process given more joined
    the group and trained without a word. (Given fewer, it waits with process 0 until distributed.timeout_s, as a
    group that starts fewer processes than process 0's says does: the count seen by then only JAX's C++ knows.)"""
    if cfg is None or cfg.get("mode") != "explicit" or jax.process_count() == 1:
        return
    stated = [int(n) for n in every_process(str(cfg.num_processes))]
    if set(stated) != {jax.process_count()}:
        raise UserError(_counts_differ(dict(enumerate(stated))))


def _counts_differ(counts: dict) -> str:
    """One sentence whether the difference is seen while joining or after: which comes first is a race."""
    have = ", ".join(f"process {i}: {n}" for i, n in sorted(counts.items()))
    return (f"the processes of a multi-process run were given different distributed.num_processes ({have}); give "
            "every process the same distributed.num_processes, the number of processes started.")


def check_same_run(run_dir: str, settings: dict) -> None:
    """Every process reads and writes one run dir (process 0 its files, all of them the checkpoints) and runs one
    program: given several dirs, only process 0's got checkpoints and a rerun resumed process 0 alone; given
    other settings (a batch size, a seed), each fed its share of another run's batches without a word."""
    dirs = every_process(os.path.abspath(run_dir))
    if len(set(dirs)) > 1:
        have = ", ".join(f"process {i}: {d}" for i, d in enumerate(dirs))
        raise UserError(f"the processes of a multi-process run were given different hydra.run.dir ({have}); give "
                        "every process the same one, a directory they all reach.")
    check_same_settings(settings)


def check_same_settings(settings: dict) -> None:
    """The processes of one run, or of one eval.py or export.py, were given one command line (paths aside)."""
    # paths may differ per host (a data dir), and distributed.process_id must
    mine = {k: v for k, v in dotted_settings(settings).items() if not k.startswith(("distributed.", "paths."))}
    each = [json.loads(s) for s in every_process(json.dumps(mine, sort_keys=True, default=str))]
    differ = sorted(k for k in set().union(*each) if len({json.dumps(e.get(k)) for e in each}) > 1)
    if differ:
        have = "; ".join(f"{k} (" + ", ".join(f"process {i}: {e.get(k)}" for i, e in enumerate(each)) + ")"
                         for k in differ[:3])
        raise UserError(f"the processes of a multi-process run were given different settings: {have}; give every "
                        "process the same command line but distributed.process_id.")


def failed_processes(ok: bool) -> list:
    """A barrier that also tells every process which ones reached it without `ok`."""
    if jax.process_count() == 1:
        return [] if ok else [0]
    oks = np.asarray(multihost_utils.process_allgather(np.int32(ok))).ravel()
    return [int(i) for i in np.flatnonzero(oks == 0)]


def agree_on_stop(stop) -> bool:
    """Whether the run stops after this call: read once (a signal landing between the save and the break must
    not skip the save) and, across processes, the same answer in each. A process that did not get the signal
    takes it from one that did: one stopping alone would wait in the save for the others, which wait for it in
    their next step."""
    signum = (stop.signum or 0) if stop else 0
    if jax.process_count() > 1:
        signum = int(np.max(multihost_utils.process_allgather(np.int32(signum))))
        if signum and stop is not None and stop.signum is None:
            stop.signum = signum
    return bool(signum)


def local_rows(x: np.ndarray, axis: int) -> np.ndarray:
    """This process's contiguous share of a global batch along `axis` (processes own contiguous devices)."""
    n, p = jax.process_count(), jax.process_index()
    size = x.shape[axis] // n
    return np.take(x, np.arange(p * size, (p + 1) * size), axis=axis)


def to_host(x) -> np.ndarray:
    """A global array's full value on this host, whichever devices hold its shards."""
    if x.is_fully_addressable:
        return np.asarray(jax.device_get(x))
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
