"""The scheduler's call queue (scheduler.dispatch): when a call is placed, directly and with
hypothesis."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.dispatch import CallQueue, Expire, Place, Queued, Refuse, Waiting
from scheduler.membership import CallRecord, ExecutorTable
from scheduler.policy import WorkerView, choose_executors


def W(wid, node="n1", out=0, util=0.0):
    return WorkerView(wid, node, f"tcp://{wid}", util, out)


def call(cid, since=0.0, timeout=10.0):
    return Waiting(cid, f"f{cid}", since, since + timeout)


def test_a_call_is_placed_at_once_when_a_worker_is_free():
    q = CallQueue(capacity=10, slots=1, scheduler="s")
    assert q.offer(call("c1"), [W("a", out=1), W("b")], 0.0) == Place(call("c1"))
    assert len(q) == 0


def test_a_call_waits_while_every_worker_is_busy_and_goes_to_the_first_free_one():
    q = CallQueue(capacity=10, slots=1, scheduler="s")
    busy = [W("a", out=1)]
    assert q.offer(call("c1"), busy, 0.0) == Queued(call("c1"), 1)
    assert q.offer(call("c2"), busy, 0.1) == Queued(call("c2"), 2)
    assert q.next(busy, 0.5) is None
    # a node joins: its worker is free, the oldest call goes first
    grown = busy + [W("b", "n2")]
    assert q.next(grown, 1.0) == Place(call("c1"))
    assert q.next([W("a", out=1), W("b", "n2", out=1)], 1.0) is None
    assert q.position("c2", 1.5) == (1, 1.5)


def test_utilization_alone_does_not_make_a_worker_busy():
    """A worker that just finished reports itself busy for a heartbeat period: a call must
    not wait for that report."""
    q = CallQueue(capacity=10, slots=1)
    assert isinstance(q.offer(call("c1"), [W("a", util=1.0)], 0.0), Place)


def test_no_worker_at_all_is_left_to_the_policy():
    """With no worker the call is placed, and the policy answers NO_RESOURCES as before."""
    q = CallQueue(capacity=10, slots=1)
    assert isinstance(q.offer(call("c1"), [], 0.0), Place)


def test_a_full_queue_refuses_with_the_limit_named():
    q = CallQueue(capacity=2, slots=1, scheduler="tcp://sched")
    busy = [W("a", out=1)]
    q.offer(call("c1"), busy, 0.0)
    q.offer(call("c2"), busy, 0.0)
    refused = q.offer(call("c3"), busy, 0.0)
    assert isinstance(refused, Refuse)
    assert "max_queued_calls" in refused.message and "tcp://sched" in refused.message
    assert len(q) == 2


def test_a_call_waiting_past_its_deadline_expires_naming_the_stage():
    q = CallQueue(capacity=10, slots=1, scheduler="tcp://sched")
    busy = [W("a", out=1)]
    q.offer(call("c1", 0.0, timeout=2.0), busy, 0.0)
    q.offer(call("c2", 0.5, timeout=10.0), busy, 0.5)
    assert q.next(busy, 1.9) is None
    expired = q.next(busy, 2.1)
    assert isinstance(expired, Expire) and expired.waiting.call_id == "c1"
    assert "queue of scheduler tcp://sched" in expired.message
    assert "timeout of 2 s" in expired.message and "busy" in expired.message
    assert q.next(busy, 2.1) is None and len(q) == 1


def test_an_expired_call_is_never_placed_even_if_a_worker_is_free():
    q = CallQueue(capacity=10, slots=1)
    q.offer(call("c1", 0.0, timeout=1.0), [W("a", out=1)], 0.0)
    assert isinstance(q.next([W("a")], 5.0), Expire)
    assert q.next([W("a")], 5.0) is None


def test_a_removed_call_is_forgotten():
    q = CallQueue(capacity=10, slots=1)
    busy = [W("a", out=1)]
    q.offer(call("c1", timeout=1.0), busy, 0.0)
    assert q.remove("c1") == call("c1", timeout=1.0)
    assert q.remove("c1") is None and q.position("c1", 0.0) is None
    assert q.next([W("a")], 5.0) is None     # neither placed nor expired


def test_a_duplicate_is_not_queued_twice():
    q = CallQueue(capacity=10, slots=1)
    busy = [W("a", out=1)]
    q.offer(call("c1"), busy, 0.0)
    assert isinstance(q.offer(call("c1"), [W("a")], 0.1), Queued)
    assert len(q) == 1


def test_new_calls_do_not_overtake_waiting_ones():
    q = CallQueue(capacity=10, slots=1)
    q.offer(call("c1"), [W("a", out=1)], 0.0)
    # a worker just freed but the queue was not pumped yet: the new call queues behind
    assert isinstance(q.offer(call("c2"), [W("a")], 0.1), Queued)
    assert q.next([W("a")], 0.1).waiting.call_id == "c1"


def test_slots_let_a_worker_take_more_than_one_call():
    q = CallQueue(capacity=10, slots=2)
    assert isinstance(q.offer(call("c1"), [W("a", out=1)], 0.0), Place)
    assert isinstance(q.offer(call("c2"), [W("a", out=2)], 0.0), Queued)


def test_disabled_places_every_call_at_once():
    q = CallQueue(capacity=0, slots=1, enabled=False)
    assert isinstance(q.offer(call("c1"), [W("a", out=5)], 0.0), Place)
    assert len(q) == 0


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError):
        CallQueue(capacity=-1, slots=1)
    with pytest.raises(ValueError):
        CallQueue(capacity=1, slots=0)


def test_locality_is_a_preference_among_free_workers_not_a_prison():
    """The queue places a call once any worker is free; the policy then picks the free one
    even though the busy one's node caches the call's key."""
    workers = [W("local", "n1", out=1), W("remote", "n2")]
    q = CallQueue(capacity=10, slots=1)
    assert isinstance(q.offer(call("c1"), workers, 0.0), Place)
    got = choose_executors(["f"], {"f": ["k"]}, workers, {"n1": {"k"}}, random.Random(0))
    assert got == {"f": "remote"}
    both = [W("local", "n1"), W("remote", "n2")]
    got = choose_executors(["f"], {"f": ["k"]}, both, {"n1": {"k"}}, random.Random(0))
    assert got == {"f": "local"}


def test_a_waiting_call_never_goes_to_a_draining_node():
    """The queue is given the placeable workers: a free worker of a draining node is not
    free for it, and a lifted drain frees it."""
    t = ExecutorTable(heartbeat_timeout=10.0)
    t.heartbeat("a", "n1", "tcp://a", 0.0, now=0.0)
    t.heartbeat("b", "n2", "tcp://b", 0.0, now=0.0)
    t.start_call(CallRecord("busy", "f", {"f": "a"}, "tcp://client", deadline=100))
    t.set_drain("n2", True, epoch=1)
    q = CallQueue(capacity=10, slots=1)
    assert isinstance(q.offer(call("c1"), t.placeable(), 0.0), Queued)
    assert q.next(t.placeable(), 1.0) is None
    t.set_drain("n2", False, epoch=2)
    assert q.next(t.placeable(), 1.0) == Place(call("c1"))


# ---- properties: a simulated scheduler around the queue ----

@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4), st.integers(1, 2), st.integers(0, 6),
       st.lists(st.tuples(st.sampled_from(["call", "done", "join", "tick"]),
                          st.floats(0.0, 1.0), st.floats(0.5, 5.0)),
                min_size=1, max_size=60))
def test_no_call_is_lost_none_runs_late_and_no_worker_is_overfilled(workers0, slots, capacity,
                                                                    events):
    """Whatever the events: every call is placed, refused or expired exactly once (or still
    waits); a call is placed only within its deadline, in arrival order, and on a worker
    with a free slot; no call waits while a worker is free after a pump."""
    q = CallQueue(capacity=capacity, slots=slots, scheduler="s")
    outstanding = {f"w{i}": 0 for i in range(workers0)}
    running = []                    # (worker, call) in placement order
    outcome = {}
    placed_order = []
    now = 0.0
    n = 0

    def views():
        return [W(w, out=o) for w, o in sorted(outstanding.items())]

    def carry(action):
        cid = action.waiting.call_id
        assert cid not in outcome, f"{cid} decided twice"
        outcome[cid] = type(action).__name__
        if isinstance(action, Place):
            assert now <= action.waiting.deadline
            free = [w for w, o in sorted(outstanding.items()) if o < slots]
            if free:
                w = min(free, key=lambda x: outstanding[x])
                outstanding[w] += 1
                running.append((w, cid))
            placed_order.append(cid)
        elif isinstance(action, Expire):
            assert now >= action.waiting.deadline

    def pump():
        while True:
            a = q.next(views(), now)
            if a is None:
                break
            carry(a)
        if len(q):
            assert all(o >= slots for o in outstanding.values())

    for kind, dt, timeout in events:
        now += dt
        if kind == "call":
            cid = f"c{n}"
            n += 1
            a = q.offer(Waiting(cid, cid, now, now + timeout), views(), now)
            if not isinstance(a, Queued):
                carry(a)
            else:
                assert len(q) <= capacity
        elif kind == "done" and running:
            w, _ = running.pop(0)
            outstanding[w] -= 1
        elif kind == "join":
            outstanding[f"w{len(outstanding)}"] = 0
        pump()
        assert all(o <= slots for o in outstanding.values())
    waiting = {f"c{i}" for i in range(n)} - set(outcome)
    assert len(waiting) == len(q)
    assert placed_order == sorted(placed_order, key=lambda c: int(c[1:]))
