"""A scheduler that lost its last executor worker to silence does not know yet whether the
executors are gone or their reports only stalled (an executor pod's connections all wait
while it resolves a replaced scheduler's name again): for `heartbeat_timeout` it holds the
calls that find no worker, as a warming scheduler does, instead of answering NO_RESOURCES.
An exit its node reported is definite, and so is a scheduler that has waited the hold out.

Pure: `scheduler.membership.ExecutorTable` and `scheduler.dispatch.CallQueue` driven with
explicit `now`.
"""
from hypothesis import given, settings, strategies as st

from scheduler.dispatch import CallQueue, Place, Queued, Waiting
from scheduler.membership import ExecutorTable


def table_with_workers(*workers, now=0.0, timeout=5.0) -> ExecutorTable:
    t = ExecutorTable(heartbeat_timeout=timeout)
    for wid in workers:
        t.heartbeat(wid, "node-a", f"tcp://{wid}:1", 0.0, now)
        t.vouch(wid, "node-a", now)
    return t


def call(i: int, now: float, timeout: float = 60.0) -> Waiting:
    return Waiting(f"c{i}", "ha_work", now, now + timeout, item=i)


def test_losing_the_last_worker_to_silence_holds_for_a_heartbeat_timeout():
    t = table_with_workers("w0", "w1", now=10.0)
    assert t.hold_until() is None
    t.vouch("w0", "node-a", 12.0)
    assert t.expire(16.0).dead_workers == ["w1"]   # one left: nothing to hold for
    assert t.hold_until() is None
    assert t.expire(17.5).dead_workers == ["w0"]    # the last one: silent, not known dead
    assert t.hold_until() == 22.5
    # its reports come back: the hold ends with the first worker heard
    t.heartbeat("w0", "node-a", "tcp://w0:1", 0.0, 18.0)
    assert t.hold_until() is None


def test_an_exit_the_node_reported_is_definite():
    t = table_with_workers("w0", now=0.0)
    t.drop_worker("w0")
    assert t.live() == [] and t.hold_until() is None


def test_a_call_with_no_worker_waits_during_the_hold_and_is_placed_when_one_is_back():
    t = table_with_workers("w0", now=0.0)
    t.expire(6.0)
    q = CallQueue(capacity=10, slots=2, scheduler="s")
    action = q.offer(call(1, 6.1), t.placeable(), 6.1, t.hold_until())
    assert isinstance(action, Queued)              # before: Place, then NO_RESOURCES
    assert q.next(t.placeable(), 7.0) is None       # still nobody
    t.heartbeat("w0", "node-a", "tcp://w0:1", 0.0, 7.2)
    placed = q.next(t.placeable(), 7.2)
    assert isinstance(placed, Place) and placed.waiting.call_id == "c1"


def test_after_the_hold_no_worker_is_no_resources_at_once_again():
    t = table_with_workers("w0", now=0.0)
    t.expire(6.0)
    q = CallQueue(capacity=10, slots=2, scheduler="s")
    assert isinstance(q.offer(call(1, 11.0), t.placeable(), 11.0, t.hold_until()), Place)
    # a scheduler that never had a worker holds nothing here (its warm-up does that)
    fresh = ExecutorTable(heartbeat_timeout=5.0)
    assert fresh.hold_until() is None
    assert isinstance(q.offer(call(2, 0.0), fresh.placeable(), 0.0, fresh.hold_until()), Place)


def test_calls_held_for_a_worker_that_never_came_back_are_placed_when_the_hold_ends():
    # Placed with no worker, each gets NO_RESOURCES from the policy, as a call received
    # after the hold does, rather than waiting out its own (longer) deadline.
    t = table_with_workers("w0", now=0.0)
    t.expire(6.0)
    hold = t.hold_until()
    q = CallQueue(capacity=10, slots=2, scheduler="s")
    for i in range(3):
        assert isinstance(q.offer(call(i, 6.5 + i * 0.1), [], 6.5 + i * 0.1, hold), Queued)
    assert q.next([], hold - 0.01, hold) is None          # still holding
    placed = [q.next([], hold, hold) for _ in range(3)]
    assert [p.waiting.call_id for p in placed] == ["c0", "c1", "c2"]
    assert all(isinstance(p, Place) for p in placed) and q.next([], hold, hold) is None


def test_a_held_call_that_no_worker_takes_expires_at_its_deadline():
    t = table_with_workers("w0", now=0.0)
    t.expire(6.0)
    q = CallQueue(capacity=10, slots=2, scheduler="s")
    q.offer(call(1, 6.5, timeout=3.0), [], 6.5, t.hold_until())
    expired = q.next([], 9.6)
    assert expired is not None and "no executor worker it may use was live" in expired.message


@settings(max_examples=200, deadline=None)
@given(lost=st.floats(0, 100), timeout=st.floats(0.1, 30), dt=st.floats(0, 60),
       capacity=st.integers(1, 5))
def test_a_call_finding_no_worker_waits_exactly_within_the_hold(lost, timeout, dt, capacity):
    t = table_with_workers("w0", now=lost - timeout - 1, timeout=timeout)
    t.expire(lost)
    assert t.hold_until() == lost + timeout
    q = CallQueue(capacity=capacity, slots=1, scheduler="s")
    now = lost + dt
    action = q.offer(call(1, now), t.placeable(), now, t.hold_until())
    assert isinstance(action, Queued if now < lost + timeout else Place)
    if isinstance(action, Queued):    # a held call leaves the queue when the hold ends
        assert q.next([], lost + timeout, t.hold_until()).waiting.call_id == "c1"
