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


def test_a_call_naming_a_key_by_reference_takes_the_schedulers_path():
    """The scheduler places such a call where its key is cached; a lease would not."""
    from cloudburst import Reference
    from cloudburst.arguments import encode, referenced_keys
    from cloudburst.direct import DirectPath
    from hydro_proto import cloudburst_pb2 as pb

    def call(args, kwargs):
        c = pb.Call(consistency=pb.LWW)
        c.args["f"].CopyFrom(encode(args, kwargs))
        return c
    plain = call([1, "x"], {"y": 2})
    positional = call([Reference("k1"), 1], {})
    keyword = call([1], {"y": Reference("k2")})
    assert referenced_keys(plain) == [] and DirectPath.eligible(plain, (), ())
    assert referenced_keys(positional) == ["k1"] and not DirectPath.eligible(positional, (), ())
    assert referenced_keys(keyword) == ["k2"] and not DirectPath.eligible(keyword, (), ())
