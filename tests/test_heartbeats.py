"""zoo.parallel.heartbeats against an in-memory key-value store: a peer that stops writing is reported once, after
distributed.lost_after_s; one that said it is done is not."""
import threading
import time

import pytest

from zoo.parallel import heartbeats


class Store:
    """The coordinator's key-value store as JAX's client offers it: set (with overwrite) and a prefix's pairs."""

    def __init__(self):
        self.values = {}


class Client:
    def __init__(self, store: Store):
        self.store = store
        self.running = threading.Event()  # cleared: this process is stopped (SIGSTOP), its calls never return
        self.running.set()

    def key_value_set(self, key, value, allow_overwrite=False):
        self.running.wait()
        assert allow_overwrite or key not in self.store.values
        self.store.values[key] = value

    def key_value_dir_get(self, prefix):
        self.running.wait()
        return [(k, v) for k, v in list(self.store.values.items()) if k.startswith(prefix)]


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(heartbeats, "HEARTBEAT_S", 0.02)


def _processes(n: int, lost_after_s: float):
    store, reports = Store(), []
    clients = [Client(store) for _ in range(n)]
    dones = [heartbeats.watch_peers(clients[i], i, n, lost_after_s, lambda peer, s, i=i: reports.append((i, peer, s)))
             for i in range(n)]
    return clients, dones, reports


def test_a_peer_that_stops_writing_is_reported_once_by_each_other_process(fast):
    clients, dones, reports = _processes(3, lost_after_s=1.0)
    time.sleep(1.5)
    assert reports == []  # all alive: no word of loss
    stopped = time.monotonic()
    clients[2].running.clear()
    while len(reports) < 2 and time.monotonic() < stopped + 10:
        time.sleep(0.01)
    assert sorted(r[:2] for r in reports) == [(0, 2), (1, 2)]
    assert all(1.0 < r[2] < 5 for r in reports)  # silent since its last write, seen before it stopped
    time.sleep(0.2)
    assert len(reports) == 2  # once each: the reporting thread ends with its report
    clients[2].running.set()
    for d in dones:
        d()


def test_a_peer_that_said_it_is_done_is_not_taken_for_lost(fast):
    clients, dones, reports = _processes(2, lost_after_s=0.3)
    time.sleep(0.1)
    dones[1]()  # process 1 ended its command; it writes no more
    assert clients[1].store.values[heartbeats.PREFIX + "1"] == heartbeats.DONE
    time.sleep(1.0)
    assert reports == []
    dones[0]()


def test_a_peer_never_heard_from_is_lost_after_the_same_wait(fast):
    store, reports = Store(), []
    done = heartbeats.watch_peers(Client(store), 0, 2, 0.2, lambda peer, s: reports.append(peer))
    time.sleep(0.6)
    assert reports == [1]
    done()
