"""When a client passes over a worker lease whose worker is held up by a long call
(`cloudburst/stalls.py`), tested directly and with hypothesis."""
import math

from hypothesis import given, strategies as st

from cloudburst.stalls import FACTOR, FLOOR, CallTimes, held_up


def test_a_target_never_heard_of_waits_the_floor():
    times = CallTimes()
    assert times.patience("f") == FLOOR
    assert not held_up(None, FLOOR, 1e9)                 # nothing in flight: never held up
    assert not held_up(10.0, FLOOR, 10.0 + FLOOR)
    assert held_up(10.0, FLOOR, 10.0 + FLOOR + 1e-6)


def test_a_slow_target_is_given_more_patience_and_nonsense_is_ignored():
    times = CallTimes()
    times.observe("slow", 2.0)
    for bad in (-1.0, math.nan, math.inf):
        times.observe("slow", bad)
    assert times.patience("slow") == FACTOR * 2.0
    times.observe("fast", 0.0001)
    assert times.patience("fast") == FLOOR


@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=50))
def test_patience_follows_the_targets_usual_time_within_its_range(samples):
    times = CallTimes()
    for s in samples:
        times.observe("f", s)
    p = times.patience("f")
    assert max(FLOOR, FACTOR * min(samples)) - 1e-9 <= p <= max(FLOOR, FACTOR * max(samples)) + 1e-9


@given(st.lists(st.integers(0, 50), max_size=200), st.integers(1, 8))
def test_the_targets_remembered_are_bounded_and_the_latest_kept(targets, bound):
    times = CallTimes(max_targets=bound)
    for t in targets:
        times.observe(t, 1.0)
        assert times.patience(t) == max(FLOOR, FACTOR)     # the one just heard is kept
    assert len(times) <= bound
