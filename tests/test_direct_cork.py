"""Calls for a worker that still runs a client's earlier calls wait in the client for company
(`cloudburst/direct.py`, `pacing.CORK_SECONDS`, `CORK_CALLS`) and go in one `direct_batch`: a burst
costs one message per batch, not one per call. A lone call on an idle lease still goes at
once; held calls go when `CORK_CALLS` wait, when their deadline passes, when a caller is
about to wait (`flush(force=True)`), and, when the caller does neither, when the client's
lease thread flushes them at the deadline it was given (`ClientLeases.flush_by`).

Unit tests: the owner is the fake of `tests/test_direct_burst.py`, the worker a plain
ZeroMQ socket on loopback, and the clock is shifted instead of waited for."""
import threading
import time
from typing import List

import pytest
import zmq

from cloudburst import direct, pacing
from cloudburst.leases import ClientLeases
from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import parse

from test_direct_burst import _call, leased_path


@pytest.fixture
def setup(monkeypatch):
    with leased_path(monkeypatch, slots=64) as parts:
        yield parts


def _message(worker: zmq.Socket) -> List[str]:
    """The request ids of the next message the worker receives (within 5 s)."""
    assert worker.poll(5000), "the worker received nothing"
    kind, payload = parse(worker.recv())
    if kind == "direct":
        return [pb.Call.FromString(payload).request_id]
    assert kind == "direct_batch"
    return [c.request_id for c in pb.DirectBatch.FromString(payload).calls]


def test_a_lone_call_on_an_idle_lease_goes_at_once(setup):
    path, owner, worker, _ = setup
    assert path.send(_call("c1")) == "sched"
    assert _message(worker) == ["c1"]
    assert owner.flush_at == []                  # nothing held


def test_calls_made_while_the_worker_runs_ours_go_together(setup):
    path, owner, worker, _ = setup
    assert path.send(_call("c1")) == "sched"
    assert _message(worker) == ["c1"]
    for rid in ("c2", "c3", "c4"):
        assert path.send(_call(rid)) == "sched"
        path.flush()                             # what `Client` does after each call
    assert not worker.poll(100), "a call went on its own while c1 still ran"
    assert len(owner.flush_at) == 1              # one deadline for the held calls
    assert path.flush(force=True) is None        # their caller waits: they go now
    assert _message(worker) == ["c2", "c3", "c4"]
    assert path.lease_of("c3") == ("L1", "w1")   # in flight under the lease


def test_held_calls_go_at_their_deadline(setup):
    path, owner, worker, shift = setup
    path.send(_call("c1"))
    assert _message(worker) == ["c1"]
    path.send(_call("c2"))
    deadline = owner.flush_at[0]
    assert path.flush() == deadline              # not due yet: said when
    assert not worker.poll(50)
    shift[0] = pacing.CORK_SECONDS
    assert path.flush() is None
    assert _message(worker) == ["c2"]


def test_held_calls_go_when_enough_wait(setup):
    path, owner, worker, _ = setup
    path.send(_call("c0"))
    assert _message(worker) == ["c0"]
    rids = [f"c{i}" for i in range(1, pacing.CORK_CALLS + 1)]
    for rid in rids:
        path.send(_call(rid))
        path.flush()
    assert _message(worker) == rids              # one message, without waiting for the deadline


def test_a_full_lease_is_renewed_early_and_grows(setup):
    path, owner, worker, shift = setup
    address = worker.getsockopt(zmq.LAST_ENDPOINT).decode()
    path.on_lease(pb.WorkerLease(target="g", lease_id="G1", worker_id="w1",
                                 worker_address=address, scheduler_address="sched",
                                 slots=1, ttl=60, status=pb.OK))

    def call(rid: str) -> pb.Call:
        return pb.Call(function="g", request_id=rid, consistency=pb.LWW, timeout=30)

    path.send(call("g1"))
    assert _message(worker) == ["g1"]
    path.send(call("g2"))                        # its one slot is taken: g2 waits
    path.send(call("g3"))
    path.flush()
    renewals = [r for r in owner.asked if list(r.renew) == ["G1"]]
    assert len(renewals) == 1, "a lease whose slots were all in use was not renewed early"
    # the scheduler's answer: the worker's window now
    path.on_lease(pb.WorkerLease(target="g", lease_id="G1", worker_id="w1", slots=4, ttl=60,
                                 status=pb.OK))
    path.flush(force=True)
    assert _message(worker) == ["g2", "g3"]      # the new slots take the queued calls
    path.send(call("g4"))
    path.flush(force=True)
    assert _message(worker) == ["g4"]            # 4 of 4 slots in use
    path.send(call("g5"))
    path.flush()
    # full again, but renewed less than GROW_EVERY ago: not asked again
    assert len([r for r in owner.asked if list(r.renew) == ["G1"]]) == 1


class _Direct:
    """The direct path as the lease thread sees it: counts flushes; the first says more
    calls are held until `later`."""

    def advance_links(self):
        return None        # no call link opening (nothing for the thread to read)

    def __init__(self, later: float) -> None:
        self.flushed = threading.Event()
        self.times = 0
        self.later = later

    def flush(self):
        self.times += 1
        if self.times == 2:
            self.flushed.set()
        return self.later if self.times == 1 else None


class _Client:
    closed = False

    def __init__(self, later: float) -> None:
        self._direct = _Direct(later)


def test_the_lease_thread_flushes_held_calls_by_their_deadline():
    # renewals every 250 s: only `flush_by` can make the thread flush within the test
    client = _Client(time.monotonic() + 0.05)
    leases = ClientLeases(client, ttl=1000.0)
    try:
        leases.flush_by(time.monotonic() + 0.01)
        # the first flush returned a later deadline (calls held since): flushed again then
        assert client._direct.flushed.wait(10), "the held calls were never flushed"
        assert client._direct.times == 2
    finally:
        leases.leave()                           # stops the thread (no calls to cancel)
    assert not leases._thread.is_alive()
