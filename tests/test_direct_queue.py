"""A burst keeps hundreds of calls queued at the client for its leases' slots
(`cloudburst/direct.py`); the queue is looked at again only when something may have freed a
slot (an answer, lease news, a call queued while a slot was free) or the leases are due to be
judged again (`READ_EVERY` after the last look). These tests pin what that must not change:
a freed slot takes the next queued call at the next flush, new slots from a renewal take them
too, and calls queued behind a lease whose worker stopped answering go around it once it is
held up, though nothing arrived meanwhile.

Unit tests with the fake owner and loopback worker of `tests/test_direct_burst.py`; the clock
is shifted instead of waited for."""
import pytest

from cloudburst import direct
from cloudburst.stalls import FLOOR
from hydro_proto import cloudburst_pb2 as pb

from test_direct_burst import _call, _received, leased_path


@pytest.fixture
def setup(monkeypatch):
    with leased_path(monkeypatch, slots=2) as parts:
        yield parts


def _fill(path, worker, n_queued: int):
    """Both slots in use (c0, c1 out), then `n_queued` calls queued behind them."""
    assert path.send(_call("c0")) == "sched"
    assert _received(worker) == ["c0"]
    assert path.send(_call("c1")) == "sched"
    path.flush(force=True)
    assert _received(worker) == ["c1"]
    queued = [f"q{i}" for i in range(n_queued)]
    for rid in queued:
        assert path.send(_call(rid)) == "sched"
    path.flush(force=True)
    assert not worker.poll(50), "a call went while every slot was in use"
    return queued


def test_a_freed_slot_takes_the_next_queued_call_at_once(setup):
    path, owner, worker, shift = setup
    queued = _fill(path, worker, 5)
    for _ in range(3):                       # looked at again and again: nothing to take
        path.flush(force=True)
    assert not worker.poll(50)
    path.on_result(pb.CallResult(request_id="c0", status=pb.OK))
    path.flush(force=True)                   # within READ_EVERY of the last look
    assert _received(worker) == queued[:1]
    path.on_result(pb.CallResult(request_id="c1", status=pb.OK))
    path.on_result(pb.CallResult(request_id="q0", status=pb.OK))
    path.flush(force=True)
    # two slots freed: two calls, in order (one a message: a batch takes at most half a
    # lease's slots, `cloudburst/pacing.py`)
    assert _received(worker) + _received(worker) == queued[1:3]


def test_a_renewal_that_grows_the_lease_takes_queued_calls_at_once(setup):
    path, owner, worker, shift = setup
    queued = _fill(path, worker, 3)
    path.on_lease(pb.WorkerLease(target="f", lease_id="L1", worker_id="w1", slots=5, ttl=60,
                                 status=pb.OK))
    path.flush(force=True)
    assert _received(worker) == queued


def test_calls_queued_behind_a_worker_that_stopped_answering_go_around_it(setup):
    path, owner, worker, shift = setup
    queued = _fill(path, worker, 4)
    assert owner.resent == []
    shift[0] = 3 * FLOOR                     # no answer came, nothing changed meanwhile
    path.flush(force=True)
    assert [c.request_id for c in owner.resent] == queued   # the scheduler's path
    assert not worker.poll(50)


def test_a_lease_judged_usable_is_judged_again_as_time_passes(setup):
    path, owner, worker, shift = setup
    assert path.send(_call("c0")) == "sched"
    assert _received(worker) == ["c0"]
    shift[0] = FLOOR / 2                     # not held up yet: c1 queues behind c0
    assert path.send(_call("c1")) == "sched"
    shift[0] = FLOOR + direct.READ_EVERY     # c0 out past its patience, the verdict old
    assert path.send(_call("c2")) is None    # held up: the scheduler's path
