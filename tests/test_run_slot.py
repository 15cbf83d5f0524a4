"""The shared run slot a worker tells its node what it runs through (executor/run_slot.py):
written by one process and read by another, applied to the node's `RunningCalls`, so a
function stuck in C code is still reported at its limit without a message per call."""
import multiprocessing as mp
import os
import time

from hypothesis import given, settings, strategies as st

from executor.liveness import SAME_DEADLINE, RunningCalls
from executor.run_slot import (IDLE, MAX_CALL_ID, MESSAGED, RUNNING, RunSlots, SlotReports,
                               sync)


def test_a_start_and_an_end_reach_the_node_through_the_slot_without_a_message():
    slots = RunSlots()
    try:
        path = slots.create("w1")
        assert slots.read("w1") is None                     # never written
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        assert oct(os.stat(slots.directory).st_mode & 0o777) == "0o700"
        reports = SlotReports(path)
        assert reports.start("call-1", 12.0) is None        # nothing to send
        state = slots.read("w1")
        assert (state.pid, state.state, state.call_id, state.deadline, state.run) == \
            (os.getpid(), RUNNING, "call-1", 12.0, 1)
        calls = RunningCalls()
        sync(calls, "w1", os.getpid(), state)
        assert calls.overran(12.5, slack=0.4) == [("w1", "call-1")]   # silent past its limit
        assert reports.end("call-1", 12.0, 11.0, follows=False) is None
        calls = RunningCalls()
        sync(calls, "w1", os.getpid(), state)
        sync(calls, "w1", os.getpid(), slots.read("w1"))     # ended: nothing to report
        assert slots.read("w1").state == IDLE
        assert calls.overran(20.0, slack=0.4) == []
        reports.close()
    finally:
        slots.close()
    assert not os.path.exists(slots.directory)


def test_a_slot_written_by_an_exited_process_is_ignored():
    slots = RunSlots()
    try:
        reports = SlotReports(slots.create("w1"))
        reports.start("call-1", 1.0)
        calls = RunningCalls()
        sync(calls, "w1", os.getpid() + 1, slots.read("w1"))   # the worker's pid now differs
        sync(calls, "w1", None, slots.read("w1"))              # its process is not running
        assert calls.overran(100.0, slack=0.4) == []
        reports.close()
    finally:
        slots.close()


def test_a_call_id_too_long_for_the_slot_is_told_by_message():
    slots = RunSlots()
    try:
        reports = SlotReports(slots.create("w1"))
        long_id = "c" * (MAX_CALL_ID + 1)
        start = reports.start(long_id, 5.0)
        assert start is not None and start.running == 1 and start.call_id == long_id
        assert slots.read("w1").state == MESSAGED
        calls = RunningCalls()
        calls.started("w1", long_id, 5.0, start.run)            # the message's record
        sync(calls, "w1", os.getpid(), slots.read("w1"))        # left to the messages
        assert calls.overran(6.0, slack=0.4) == [("w1", long_id)]
        end = reports.end(long_id, 5.0, 4.0, follows=False)
        assert end is not None and end.running == 0 and end.call_id == long_id
        reports.close()
    finally:
        slots.close()


def _writer(path, n):
    reports = SlotReports(path)
    for i in range(n):
        reports.start(f"call-{i}-" + "x" * (i % 50), float(i))
        reports.end(f"call-{i}", float(i), 0.0, follows=False)
    # it ends running, so a reader the machine kept from every window above still sees one
    reports.start(f"call-{n}-" + "x" * (n % 50), float(n))
    reports.close()


def test_a_reader_never_sees_a_torn_record_while_another_process_writes():
    slots = RunSlots()
    try:
        path = slots.create("w1")
        writer = mp.get_context("fork").Process(target=_writer, args=(path, 20000))
        writer.start()
        seen = 0
        deadline = time.monotonic() + 60
        while writer.is_alive() or seen == 0:
            assert time.monotonic() < deadline, f"the writer's records: {seen} seen in 60 s"
            state = slots.read("w1")
            if state is None or state.state != RUNNING:
                continue
            seen += 1
            i = int(state.call_id.split("-")[1])              # id and deadline belong together
            assert state.call_id == f"call-{i}-" + "x" * (i % 50) and state.deadline == i
            if not writer.is_alive():
                break
        writer.join(10)
        assert writer.exitcode == 0
    finally:
        slots.close()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c" * 400]),
                          st.sampled_from([1.0, 1.02, 1.05, 1.2, 0.99, 50.0])), max_size=30)
       | st.lists(st.tuples(st.booleans(), st.text(min_size=1, max_size=40),
                            st.floats(0, 1e6, allow_nan=False)), max_size=30))
def test_the_slot_always_holds_the_last_start_or_end(ops):
    slots = RunSlots()
    try:
        reports = SlotReports(slots.create("w"))
        for starting, call_id, deadline in ops:
            if starting:
                reports.start(call_id, deadline)
            else:
                reports.end(call_id, deadline, 0.0, follows=False)
        state = slots.read("w")
        # the runs: a start continues the run held (same call, deadline at most
        # SAME_DEADLINE later: a chain's next function) or begins a new one; an end ends it
        held, runs = None, 0
        for starting, call_id, deadline in ops:
            if not starting:
                held = None
            elif not (held is not None and held[0] == call_id
                      and 0.0 <= deadline - held[1] <= SAME_DEADLINE):
                runs += 1
                held = (call_id, deadline)
        last = ops[-1] if ops else None
        if last is None or not last[0]:
            assert state.state == IDLE
        elif len(held[0].encode()) <= MAX_CALL_ID:
            assert (state.state, state.call_id, state.deadline) == (RUNNING, *held)
        assert state.run == runs
        reports.close()
    finally:
        slots.close()


def test_a_chains_next_function_continues_the_run_the_slot_holds_without_a_write():
    """A DAG run whole on one worker starts each function with the call's deadline: the
    slot already says the call runs until then, so the next function writes nothing (as
    `RunReports` sends nothing); another deadline, another call or an end writes again."""
    slots = RunSlots()
    try:
        reports = SlotReports(slots.create("w"))
        reports.start("call-1", 12.0)
        written = reports._seq
        assert reports.start("call-1", 12.0 + SAME_DEADLINE / 2) is None
        assert reports._seq == written                       # nothing written
        state = slots.read("w")
        assert (state.state, state.call_id, state.deadline, state.run) == \
            (RUNNING, "call-1", 12.0, 1)
        reports.start("call-1", 30.0)                        # its own, later limit: told
        assert (slots.read("w").deadline, slots.read("w").run) == (30.0, 2)
        reports.start("call-2", 30.0)                        # another call: told
        assert (slots.read("w").call_id, slots.read("w").run) == ("call-2", 3)
        reports.end("call-2", 30.0, 1.0, follows=False)
        reports.start("call-2", 30.0)                        # after an end: a new run
        assert (slots.read("w").state, slots.read("w").run) == (RUNNING, 4)
        long_id = "x" * (MAX_CALL_ID + 1)                    # told by message, once
        assert reports.start(long_id, 40.0) is not None
        assert reports.start(long_id, 40.0) is None
        reports.close()
    finally:
        slots.close()
