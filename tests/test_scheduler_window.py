"""How many calls may wait at one worker (scheduler.window), and the call queue using it."""
import math

import pytest
from hypothesis import given, strategies as st

from scheduler.dispatch import CallQueue, Place, Queued, Waiting
from scheduler.policy import WorkerView
from scheduler.window import Windows


def test_a_worker_never_heard_of_or_with_long_calls_holds_the_configured_slots():
    w = Windows(slots=2, most=16, queued_work=0.005)
    assert w.slots("a") == 2
    w.observe("a", 1, 0.5)                 # a half-second call
    assert w.slots("a") == 2
    w.observe("b", 4, 4 * 0.004)           # 4 ms calls: two already cover 5 ms
    assert w.slots("b") == 2


def test_a_worker_with_calls_shorter_than_a_round_trip_may_hold_more_up_to_most():
    w = Windows(slots=2, most=16, queued_work=0.005)
    w.observe("a", 10, 10 * 0.0001)        # 100 us calls: 50 would fit in 5 ms
    assert w.slots("a") == 16
    w.observe("m", 1, 0.001)               # 1 ms calls: 5 fit
    assert w.slots("m") == 5
    w.forget("a")
    assert w.slots("a") == 2


def test_the_mean_follows_a_worker_whose_calls_get_longer():
    w = Windows(slots=2, most=16, queued_work=0.005)
    w.observe("a", 1, 0.0001)
    assert w.slots("a") == 16
    for _ in range(30):
        w.observe("a", 1, 0.5)
    assert w.slots("a") == 2


def test_a_report_of_many_calls_weighs_as_many_reports():
    # one slow first call (a cold start), then a heartbeat counting 2,000 direct calls of
    # 50 us: the window is the short calls' at once, not after many more heartbeats
    w = Windows(slots=2, most=16, queued_work=0.005)
    w.observe("a", 1, 0.003)
    assert w.slots("a") == 2
    w.observe("a", 2000, 2000 * 0.00005)
    assert w.slots("a") == 16
    one_by_one = Windows(slots=2, most=16, queued_work=0.005)
    one_by_one.observe("a", 1, 0.003)
    for _ in range(7):
        one_by_one.observe("a", 1, 0.00005)
    batched = Windows(slots=2, most=16, queued_work=0.005)
    batched.observe("a", 1, 0.003)
    batched.observe("a", 7, 7 * 0.00005)
    assert batched.slots("a") == one_by_one.slots("a")
    assert math.isclose(batched._mean["a"], one_by_one._mean["a"])


@given(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0), st.integers(1, 60))
def test_a_batched_report_moves_the_mean_as_its_calls_one_by_one(first, each, calls):
    one_by_one = Windows(slots=2, most=16, queued_work=0.005)
    batched = Windows(slots=2, most=16, queued_work=0.005)
    one_by_one.observe("a", 1, first)
    batched.observe("a", 1, first)
    for _ in range(calls):
        one_by_one.observe("a", 1, each)
    batched.observe("a", calls, calls * each)
    assert math.isclose(batched._mean["a"], one_by_one._mean["a"], rel_tol=1e-9)


def test_nonsense_reports_are_ignored_and_bad_bounds_refused():
    w = Windows(slots=2, most=16, queued_work=0.005)
    for calls, busy in ((0, 0.0), (3, -1.0), (1, math.nan), (1, math.inf)):
        w.observe("a", calls, busy)
    assert len(w) == 0 and w.slots("a") == 2
    with pytest.raises(ValueError):
        Windows(slots=3, most=2, queued_work=0.005)
    with pytest.raises(ValueError):
        Windows(slots=0, most=2, queued_work=0.005)


@given(st.lists(st.tuples(st.integers(0, 50), st.floats(-1.0, 10.0) | st.just(math.nan) | st.just(math.inf))),
       st.integers(1, 4), st.integers(0, 12), st.floats(0.0, 0.1) | st.just(1e-300))
def test_slots_always_stay_within_bounds(reports, base, extra, queued_work):
    w = Windows(slots=base, most=base + extra, queued_work=queued_work)
    for calls, busy in reports:
        w.observe("a", calls, busy)
        assert base <= w.slots("a") <= base + extra


def test_the_queue_places_on_a_worker_below_its_own_window():
    windows = Windows(slots=2, most=16, queued_work=0.005)
    windows.observe("a", 10, 10 * 0.0001)                        # short calls: 16
    q = CallQueue(capacity=10, slots=2, scheduler="s", window=windows.slots)
    short = WorkerView("a", "n1", "tcp://a", 0.0, 5)             # 5 held, may hold 16
    plain = WorkerView("b", "n1", "tcp://b", 0.0, 2)             # 2 held: the queue's 2
    c = Waiting("c1", "f", 0.0, 10.0)
    assert q.offer(c, [plain], 0.0) == Queued(c, 1)
    assert q.next([plain, short], 0.1) == Place(c)
    full = WorkerView("a", "n1", "tcp://a", 0.0, 16)
    c2 = Waiting("c2", "f", 0.0, 10.0)
    assert q.offer(c2, [plain, full], 0.2) == Queued(c2, 1)


def test_clients_latencies_widen_a_window_the_worker_has_not_reported_yet():
    """Leases granted before a worker's heartbeat told its calls' run times held 2 slots
    for a whole burst of short calls: the clients' measured latencies (each at least the
    call's run) widen the window meanwhile; the worker's own report replaces them."""
    w = Windows(slots=2, most=16, queued_work=0.005)
    w.observe("a", 1, 0.004)               # a slow first call (a cold start)
    assert w.slots("a") == 2
    w.bound("a", 64, 64 * 0.0005)          # its clients saw 0.5 ms per call
    assert w.slots("a") == 10
    w.observe("a", 1000, 1000 * 0.003)     # the worker says its calls take 3 ms
    assert w.slots("a") == 2               # its word wins over the clients'
    w.bound("b", 0, 0.0)                   # nonsense is ignored
    w.bound("b", 3, float("nan"))
    assert w.slots("b") == 2
    w.bound("c", 1, 0.0001)
    w.forget("c")
    assert w.slots("c") == 2


@given(st.integers(1, 500), st.floats(1e-6, 0.1), st.floats(0.0, 0.1))
def test_a_window_from_latencies_is_never_wider_than_from_the_run_times(calls, run, extra):
    """Latencies at least the run times never give a worker more slots than its run times
    would: the clients' bound cannot overfill a worker."""
    true, bounded = Windows(2, 16, 0.005), Windows(2, 16, 0.005)
    true.observe("a", calls, calls * run)
    bounded.bound("a", calls, calls * (run + extra))
    assert bounded.slots("a") <= true.slots("a")
    both = Windows(2, 16, 0.005)
    both.bound("a", calls, calls * (run + extra))
    both.observe("a", calls, calls * run)
    assert both.slots("a") == true.slots("a")


def test_a_worker_never_heard_of_takes_a_window_judged_elsewhere_when_given():
    w = Windows(slots=2, most=16, queued_work=0.005)
    assert w.slots("a", unknown=10) == 10 and not w.known("a")
    assert w.slots("a", unknown=100) == 16 and w.slots("a", unknown=0) == 2    # clamped
    w.observe("a", 1, 0.5)                 # its own word: long calls
    assert w.known("a") and w.slots("a", unknown=16) == 2
    w.bound("b", 10, 10 * 0.001)           # a clients' bound is a word on it too
    assert w.slots("b", unknown=16) == 5
