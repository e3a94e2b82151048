"""Each process of a multi-process run tells the others that it is alive; one that stops telling is taken for lost.

A process killed mid-run (kill -9, the OOM killer) is met by the others' next collective, which gloo fails at
once with one CPU device a process (zoo.cli.exit_if_a_process_is_lost). With several devices a process, gloo's
collective can wait for it without end, and a process waiting in orbax's barrier for a checkpoint waits out JAX's
heartbeat timeout (100 s) before JAX's client aborts it from C++ (exit 134, no sentence). So a thread of each
process counts up a key of its own in JAX's key-value store (process 0's coordinator holds it) every HEARTBEAT_S; a
peer whose count has not moved for `distributed.lost_after_s` ends this process with the sentence of a lost
process. The waits of a live process (collectives, barriers, compilation) release the GIL, so its thread keeps
counting. A process that ends its command says so first (DONE): its silence from then on is no loss.
"""
import atexit
import functools
import threading
import time

HEARTBEAT_S = 1.0
PREFIX = "zoo/heartbeat/"
DONE = "done"


def watch_peers(client, process_id: int, num_processes: int, lost_after_s: float, on_lost):
    """Start this process's heartbeat thread. `on_lost(process_id, seconds)` is called from it once, for the first
    peer silent for `lost_after_s`; it is expected to end the process. Returns what tells the others this process
    is done, also called at exit."""
    stop = threading.Event()
    thread = threading.Thread(target=_beat, args=(client, process_id, num_processes, lost_after_s, on_lost, stop),
                              name="zoo-heartbeats", daemon=True)
    thread.start()
    done = functools.partial(_say_done, client, process_id, stop, thread)
    atexit.register(done)  # before jax.distributed's own shutdown, registered earlier (LIFO)
    return done


def _beat(client, me: int, n: int, lost_after_s: float, on_lost, stop: threading.Event) -> None:
    count, heard = 0, {}  # peer -> (its last count, when it last moved)
    while not stop.is_set():
        count += 1
        try:
            client.key_value_set(f"{PREFIX}{me}", str(count), allow_overwrite=True)
            counts = dict(client.key_value_dir_get(PREFIX))
        except Exception:  # noqa: BLE001 — the coordinator is gone: JAX's client ends this process itself
            return
        now = time.monotonic()
        for peer in range(n):
            if peer == me:
                continue
            value = counts.get(f"{PREFIX}{peer}")
            if peer not in heard or heard[peer][0] != value:
                heard[peer] = (value, now)  # a peer not heard yet is given lost_after_s from this thread's start
            elif value != DONE and now - heard[peer][1] > lost_after_s and not stop.is_set():
                on_lost(peer, now - heard[peer][1])
                return
        stop.wait(HEARTBEAT_S)


def _say_done(client, me: int, stop: threading.Event, thread: threading.Thread) -> None:
    stop.set()
    thread.join(HEARTBEAT_S + 5)  # its last write done, so that DONE is the last word
    try:
        client.key_value_set(f"{PREFIX}{me}", DONE, allow_overwrite=True)
    except Exception:  # noqa: BLE001 — the coordinator is gone already: nobody is left to tell
        pass
