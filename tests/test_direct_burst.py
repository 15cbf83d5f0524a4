"""A client that keeps sending calls under a worker lease reads the answers that arrived
before it judges the lease (`cloudburst/direct.py`, `send`): a burst's calls go to the
slots its answers freed, and a lease whose worker keeps answering is never taken for one
held up by a long call only because its client was busy sending. A lease whose worker
gave no answer stays held up, as `cloudburst/stalls.py` says. A client with no call out
reads them before every direct call: a lease revoked meanwhile is not used.

A unit test: the owner (the client's side) is a fake that holds the answers "arrived" on
its socket; the worker is a plain ZeroMQ socket on loopback; the clock is shifted past the
lease's patience instead of waiting for it."""
import contextlib
from typing import List, Optional

import pytest
import zmq
from hypothesis import given, settings, strategies as st

from cloudburst import direct, held_lease
from cloudburst.stalls import FLOOR
from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import parse


class _Owner:
    """The client's side of the direct path: answers arrive in `arrived` until read."""

    response_address = "tcp://127.0.0.1:1"

    def __init__(self) -> None:
        self.path: Optional[direct.DirectPath] = None
        self.arrived: List[pb.CallResult] = []
        self.resent: List[pb.Call] = []
        self.delivered: List[pb.CallResult] = []
        self.flush_at: List[float] = []
        self.asked: List[pb.LeaseRequest] = []

    def resend_call(self, call: pb.Call) -> str:
        self.resent.append(call)
        return "sched"

    def ask_lease(self, request: pb.LeaseRequest, to: Optional[str] = None) -> str:
        self.asked.append(request)
        return "sched"

    def deliver(self, result: pb.CallResult) -> None:
        self.delivered.append(result)

    def flush_by(self, deadline: float) -> None:
        self.flush_at.append(deadline)

    def read_arrived(self) -> None:
        arrived, self.arrived = self.arrived, []
        for message in arrived:
            if isinstance(message, pb.WorkerLease):
                self.path.on_lease(message)
            elif self.path.on_result(message) is not None:
                self.delivered.append(message)
        self.path.flush()


@contextlib.contextmanager
def leased_path(monkeypatch, slots: int):
    """A direct path (fake owner) holding lease L1 of target "f" with `slots` slots on a
    worker that is a plain PULL socket; yields (path, owner, worker, shift of the clock)."""
    context = zmq.Context()
    worker = context.socket(zmq.PULL)
    port = worker.bind_to_random_port("tcp://127.0.0.1")
    owner = _Owner()
    path = owner.path = direct.DirectPath(owner, context, None)
    path.on_lease(pb.WorkerLease(target="f", lease_id="L1", worker_id="w1",
                                 worker_address=f"tcp://127.0.0.1:{port}",
                                 scheduler_address="sched", slots=slots, ttl=60,
                                 status=pb.OK))
    shift = [0.0]
    real = direct.time.monotonic
    monkeypatch.setattr(direct.time, "monotonic", lambda: real() + shift[0])
    try:
        yield path, owner, worker, shift
    finally:
        path.close()
        worker.close(0)
        context.term()


@pytest.fixture
def setup(monkeypatch):
    with leased_path(monkeypatch, slots=1) as parts:
        yield parts


def _call(rid: str, function: str = "f") -> pb.Call:
    return pb.Call(function=function, request_id=rid, consistency=pb.LWW, timeout=30)


def _address(worker: zmq.Socket) -> str:
    """The address of the fixture's worker socket (where its lease points)."""
    return worker.getsockopt_string(zmq.LAST_ENDPOINT)


def _received(worker: zmq.Socket) -> List[str]:
    """The request ids the worker received (direct calls), within 5 s."""
    assert worker.poll(5000), "the worker received nothing"
    kind, payload = parse(worker.recv())
    assert kind in ("direct", "direct_batch")
    calls = [pb.Call.FromString(payload)] if kind == "direct" else \
        list(pb.DirectBatch.FromString(payload).calls)
    return [c.request_id for c in calls]


def test_a_lease_whose_answer_arrived_while_the_client_sent_is_not_held_up(setup):
    path, owner, worker, shift = setup
    assert path.send(_call("c1")) == "sched"
    assert _received(worker) == ["c1"]
    # the client keeps sending for longer than the lease's patience; the worker answered
    # c1 long ago, but nothing has read that answer yet
    shift[0] = 3 * FLOOR
    owner.arrived.append(pb.CallResult(request_id="c1", status=pb.OK))
    assert path.send(_call("c2")) == "sched", "the lease was passed over"
    assert _received(worker) == ["c2"]          # straight to the worker: the slot c1 freed
    assert [r.request_id for r in owner.delivered] == ["c1"]
    assert owner.resent == []                   # nothing went the scheduler's way


def test_queued_calls_go_to_the_slot_an_arrived_answer_freed_while_the_client_sends(setup):
    path, owner, worker, shift = setup
    assert path.send(_call("c1")) == "sched"    # the one slot
    assert path.send(_call("c2")) == "sched"    # queued here
    assert _received(worker) == ["c1"]
    owner.arrived.append(pb.CallResult(request_id="c1", status=pb.OK))
    shift[0] = direct.READ_EVERY               # the answers are read at most this often
    assert path.send(_call("c3")) == "sched"    # reads c1's answer first: c2 goes out
    assert _received(worker) == ["c2"]
    assert not worker.poll(100)                 # c3 waits for c2's slot, in order


def test_a_lease_whose_worker_gave_no_answer_is_still_held_up(setup):
    path, owner, worker, shift = setup
    assert path.send(_call("c1")) == "sched"
    assert _received(worker) == ["c1"]
    shift[0] = 3 * FLOOR                        # no answer: its worker runs a long call
    assert path.send(_call("c2")) is None       # around it: the scheduler's path
    assert not worker.poll(100)


def test_a_client_with_no_call_out_reads_a_revocation_that_arrived_before_it_sends(setup):
    path, owner, worker, shift = setup
    assert path.send(_call("c1")) == "sched"
    assert _received(worker) == ["c1"]
    path.on_result(pb.CallResult(request_id="c1", status=pb.OK))     # read as it waited
    # another caller's call was placed on the worker: the scheduler revoked the lease, and
    # the revocation arrived after c1's answer was read; the client sends again later
    shift[0] = direct.READ_EVERY
    owner.arrived.append(pb.WorkerLease(target="f", lease_id="L1", revoked=True,
                                        status=pb.OK, reason="another caller's call"))
    assert path.send(_call("c2")) is None       # the scheduler's path
    assert not worker.poll(100)                 # nothing went to that worker
    assert path.held() == []


def _renewed_on_a_call(path, worker, shift):
    """Lease L2 of target "g" (ttl 2 s), renewed by a call made with less than half its
    ttl left (c1, answered); the renewal is not answered."""
    path.on_lease(pb.WorkerLease(target="g", lease_id="L2", worker_id="w1",
                                 worker_address=_address(worker),
                                 scheduler_address="sched", slots=1, ttl=2, status=pb.OK))
    shift[0] = 1.5                              # less than half its ttl left: renewed
    assert path.send(_call("c1", "g")) == "sched"
    assert _received(worker) == ["c1"]
    path.on_result(pb.CallResult(request_id="c1", status=pb.OK))


def test_a_lease_whose_renewal_is_unanswered_at_its_end_is_used_one_ttl_more(setup):
    path, owner, worker, shift = setup
    _renewed_on_a_call(path, worker, shift)
    # past its end (less the margin), the renewal still unanswered: a busy scheduler
    # reads it late and keeps the lease meanwhile
    shift[0] = 2.1
    assert path.send(_call("c2", "g")) == "sched"
    assert _received(worker) == ["c2"]
    path.on_result(pb.CallResult(request_id="c2", status=pb.OK))
    shift[0] = 2 * 2 + 0.1                      # one more ttl and no answer: lapsed
    assert path.send(_call("c3", "g")) is None
    assert not worker.poll(100)


def test_a_lease_whose_renewal_is_on_its_way_is_not_swept_at_every_flush(setup):
    """A serial caller's lease past half its ttl, its renewal asked: the flushes after each
    call skip the sweep until the lease could lapse (or lease news comes), and the lease
    still lapses then."""
    path, owner, worker, shift = setup
    _renewed_on_a_call(path, worker, shift)
    path.flush()
    assert [list(r.renew) for r in owner.asked if r.renew] == [["L2"]]
    now = direct.time.monotonic()
    # nothing is due before the lease's end plus the one ttl its renewal buys
    assert path._quiet_until > now + 2.0
    shift[0] = 2 * 2 + 0.1                      # one more ttl and no answer: lapsed
    assert path.send(_call("c2", "g")) is None
    assert not worker.poll(100)


def _held(expires: float, ttl: float, renewing: bool) -> held_lease.Held:
    return held_lease.Held("L", "w", "tcp://w:1", "sched", 1, ttl, expires, 3,
                        renewing=renewing)


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1e6), st.floats(0.5, 600), st.booleans())
def test_the_next_sweep_comes_before_anything_falls_due(expires, ttl, renewing):
    held = _held(expires, ttl, renewing)
    when = held_lease.next_sweep(held)
    assert when <= held_lease.until(held)                       # a lapse is never missed
    if not renewing:                                         # nor a renewal falling due
        assert when <= held.expires - held.ttl / 2
    else:                                                    # the renewal's answer is news
        assert when == held_lease.until(held)
