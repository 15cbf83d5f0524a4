"""executor/busy.py: a worker's busy time, as its heartbeats and `done`s report it."""
from hypothesis import given, strategies as st

from executor.busy import BusyClock


def test_a_running_function_counts_until_it_stops_and_finished_time_is_taken_once():
    clock = BusyClock()
    assert not clock.running and clock.total(5.0) == 0.0
    clock.start(10.0)
    assert clock.running and clock.total(12.5) == 2.5
    clock.stop(13.0)
    assert not clock.running and clock.total(99.0) == 3.0
    assert clock.take_finished() == 3.0
    assert clock.take_finished() == 0.0
    clock.stop(20.0)                     # a stop without a start adds nothing
    assert clock.total(20.0) == 3.0


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10)), max_size=20))
def test_total_is_the_sum_of_the_runs_and_taken_time_adds_up_to_it(runs):
    clock, now, taken = BusyClock(), 0.0, 0.0
    for gap, length in runs:
        now += gap
        clock.start(now)
        now += length
        clock.stop(now)
        taken += clock.take_finished()
    expected = sum(length for _, length in runs)
    assert abs(clock.total(now) - expected) < 1e-6
    assert abs(taken - expected) < 1e-6
