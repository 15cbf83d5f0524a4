"""The worker's batching of direct calls' results (executor/result_batch.py), pure."""
from hypothesis import given, strategies as st

import pytest

from executor.result_batch import ResultBatch
from hydro_proto import cloudburst_pb2 as pb


def _result(i, size=0):
    return pb.CallResult(request_id=f"c{i}", value=b"x" * size)


def test_nothing_is_held_outside_a_batch():
    b = ResultBatch(0.002)
    assert not b.add("a", _result(1), 0.0)
    assert len(b) == 0 and b.take() == [] and not b.due(10.0)


def test_held_results_go_per_client_in_order_and_once():
    b = ResultBatch(0.002)
    b.open()
    for i, address in enumerate(["a", "b", "a", "a"]):
        assert b.add(address, _result(i), 0.0)
    b.close()
    taken = {address: [r.request_id for r in rs] for address, rs in b.take()}
    assert taken == {"a": ["c0", "c2", "c3"], "b": ["c1"]}
    assert b.take() == [] and len(b) == 0


def test_the_oldest_result_is_held_no_longer_than_the_hold():
    b = ResultBatch(0.002)
    b.open()
    b.add("a", _result(1), 1.0)
    assert not b.due(1.001)
    b.add("a", _result(2), 1.0015)
    assert b.due(1.002)               # counted from the first result held, not the last
    b.take()
    assert not b.due(5.0)             # nothing held: nothing due


def test_a_slow_call_sends_what_is_held_at_once():
    """Results are held only across short calls: after one as long as the hold, everything
    held goes, its own result too, rather than waiting for the next call of the batch."""
    b = ResultBatch(0.002)
    b.open()
    b.add("a", _result(1), 1.0)
    assert not b.due(1.0005, last_run=0.0005)
    b.add("a", _result(2), 1.0006)
    assert b.due(1.0006, last_run=0.0021)


def test_results_adding_up_to_the_byte_bound_are_due_at_once():
    b = ResultBatch(10.0, max_bytes=1000)
    b.open()
    b.add("a", _result(1, 600), 0.0)
    assert not b.due(0.0)
    b.add("b", _result(2, 600), 0.0)
    assert b.due(0.0)


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError):
        ResultBatch(-1)
    with pytest.raises(ValueError):
        ResultBatch(0.1, max_bytes=0)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 0.01)), max_size=40),
       st.floats(0.0005, 0.005))
def test_every_result_held_is_taken_exactly_once(adds, hold):
    """Whatever the order and timing, the worker sends each result once: taken when due,
    and what is left at the batch's end."""
    b = ResultBatch(hold)
    b.open()
    sent, now = [], 0.0
    for i, (address, step) in enumerate(adds):
        now += step
        assert b.add(address, _result(i), now)
        if b.due(now):
            sent += [(a, r.request_id) for a, rs in b.take() for r in rs]
    b.close()
    sent += [(a, r.request_id) for a, rs in b.take() for r in rs]
    assert sorted(sent) == sorted((a, f"c{i}") for i, (a, _) in enumerate(adds))


def test_results_go_before_a_call_not_known_to_be_short():
    """Held across the waiting calls only while the next one is expected to be short (its
    lease's previous call was): a long call, or one never run here, does not hold them."""
    b = ResultBatch(0.002)
    assert not b.due_before(None)                 # nothing held: nothing due
    b.open()
    b.add("a", _result(1), 0.0)
    assert b.due_before(None)                     # its lease's first call here
    assert b.due_before(0.5)                      # its lease's last call was long
    assert b.due_before(0.002)
    assert not b.due_before(0.0001)               # short: held across it
    b.take()
    assert not b.due_before(0.5)


@given(st.one_of(st.none(), st.floats(0, 10, allow_nan=False)), st.booleans())
def test_a_held_result_never_waits_for_a_call_that_may_be_long(expected, held):
    b = ResultBatch(0.002)
    b.open()
    if held:
        b.add("a", _result(1), 0.0)
    assert b.due_before(expected) == (held and (expected is None or expected >= 0.002))
