"""Liveness is not CPU: a worker holding the interpreter in a long C call (a huge argument
being unpickled, a `sum(range(N))`) misses its own heartbeats, but its node vouches for its
process, so it is not declared dead; a node that goes silent takes its workers with it; a
worker silent far too long is dead even though vouched for. The table is pure (tested
directly); the end-to-end cases run real processes with the default 1.5 s timeout."""
import time

import pytest
from hypothesis import given, strategies as st

import cloudburst
from scheduler.membership import CallRecord, ExecutorTable


def _table():
    t = ExecutorTable(heartbeat_timeout=1.0, unresponsive_timeout=10.0)
    t.heartbeat("w1", "n1", "tcp://x:1", 0.0, now=0.0)
    t.heartbeat("w2", "n1", "tcp://x:2", 0.0, now=0.0)
    t.start_call(CallRecord("c", "f", {"f": "w1"}, "tcp://client", deadline=100))
    return t


def test_a_busy_worker_its_node_vouches_for_is_alive_until_unresponsive():
    t = _table()
    for now in (0.5, 1.5, 2.5, 5.0, 9.5):       # w1 silent (busy in C), vouched every time
        assert t.vouch("w1", "n1", now)
        t.heartbeat("w2", "n1", "tcp://x:2", 0.0, now=now)
        t.vouch("w2", "n1", now)
        assert t.expire(now).dead_workers == []
    t.vouch("w1", "n1", 10.5)
    t.heartbeat("w2", "n1", "tcp://x:2", 0.0, now=10.5)
    t.vouch("w2", "n1", 10.5)
    out = t.expire(10.5)
    assert out.dead_workers == ["w1"] and "unresponsive" in out.reasons["w1"]
    assert [(r.call_id, w) for r, w in out.orphaned_calls] == [("c", "w1")]


def test_a_silent_node_takes_its_workers_with_it():
    t = _table()
    t.vouch("w1", "n1", 0.2)
    t.vouch("w2", "n1", 0.2)
    t.heartbeat("w2", "n1", "tcp://x:2", 0.0, now=1.1)   # w2 still beats; its node is gone
    out = t.expire(1.3)
    assert sorted(out.dead_workers) == ["w1", "w2"]
    assert "executor node n1" in out.reasons["w2"]


def test_without_vouching_a_silent_worker_dies_as_before_and_vouches_need_a_known_worker():
    t = _table()
    assert not t.vouch("w9", "n1", 0.5)            # unknown: joins by its own heartbeat only
    assert not t.vouch("w1", "other", 0.5)         # not its node
    t.heartbeat("w2", "n1", "tcp://x:2", 0.0, now=0.9)
    out = t.expire(1.2)
    assert out.dead_workers == ["w1"] and "no heartbeat" in out.reasons["w1"]


def test_credit_forgives_the_scheduler_s_own_stall():
    t = _table()
    t.credit(2.0)                                   # the loop was blind for 2 s
    assert t.expire(2.5).dead_workers == []
    assert sorted(t.expire(3.1).dead_workers) == ["w1", "w2"]


def _seconds_of_sum(n):
    start = time.perf_counter()
    sum(range(n))
    return time.perf_counter() - start


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_real_workers_survive_long_c_calls_and_a_60_mb_argument():
    n = 2 * 10 ** 7
    n = int(n * 3.0 / max(1e-3, _seconds_of_sum(n)))     # sized to about 3 s here
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        assert cluster.heartbeat_timeout == 1.5
        c = cluster.client(timeout=60)
        c.register(lambda lib, n: sum(range(n)) % 7, "spin")
        c.register(lambda lib, data: len(data), "size")
        start = time.monotonic()
        assert c.call("spin", n).get(timeout=60) == sum(range(n)) % 7
        assert time.monotonic() - start > 2.0           # it really held the interpreter
        assert c.call("size", b"x" * (60 << 20)).get(timeout=60) == 60 << 20   # under the 64 MiB limit
        (worker,) = c.status().workers
        assert worker.restarts == 0


# ---- the node's record of running functions (pure) ----
def test_a_silent_worker_past_its_functions_limit_is_reported_once():
    from executor.liveness import RunningCalls
    calls = RunningCalls()
    calls.heard("w1", 10.0)
    calls.started("w1", "c1", deadline=12.0)
    assert calls.overran(12.3, slack=0.4) == []           # within the slack
    assert calls.overran(12.5, slack=0.4) == [("w1", "c1")]
    assert calls.overran(13.0, slack=0.4) == []           # once
    calls.forget("w1")                                     # its process exited
    assert calls.overran(20.0, slack=0.4) == []


def test_a_worker_heard_after_the_limit_or_a_function_that_ended_is_not_reported():
    from executor.liveness import RunningCalls
    calls = RunningCalls()
    calls.started("w1", "c1", deadline=12.0)
    calls.heard("w1", 12.1)             # its heartbeat thread runs: the signal will work
    calls.started("w2", "c2", deadline=12.0)
    calls.ended("w2", "c2")
    calls.started("w3", "c3", deadline=12.0)
    calls.ended("w3", "c-older")        # a stale end of another call changes nothing
    assert calls.overran(13.0, slack=0.4) == [("w3", "c3")]
    calls.started("w3", "c4", deadline=14.0)                # the next call on it
    assert calls.overran(14.5, slack=0.4) == [("w3", "c4")]


def test_an_end_told_by_the_heartbeat_ends_that_run_only_never_a_later_function_of_the_call():
    # a chain's two functions share the call id: the first one's end, reported late by the
    # heartbeat thread (ended_run), must not erase the start of the second
    from executor.liveness import RunningCalls
    calls = RunningCalls()
    calls.started("w1", "c1", deadline=12.0, run=7)       # `increment`
    calls.started("w1", "c1", deadline=12.0, run=8)       # `square`, same call, runs now
    calls.ended_run("w1", 7)                              # increment's end, told late
    assert calls.overran(13.0, slack=0.4) == [("w1", "c1")]
    calls.started("w2", "c2", deadline=12.0, run=3)
    calls.ended_run("w2", 3)                              # its own end: forgotten
    calls.ended("w2", "c2", run=2)                        # a stale end: nothing changes
    calls.started("w3", "c3", deadline=12.0, run=5)
    calls.ended("w3", "c3", run=4)                        # an earlier run of the call
    assert calls.overran(14.0, slack=0.4) == [("w3", "c3")]


def test_a_warm_chain_on_one_worker_tells_its_node_one_start_and_no_end_message():
    from executor.liveness import END_REPORT_MARGIN, RunReports
    r = RunReports()
    far = 100.0 + END_REPORT_MARGIN + 20
    first = r.start("c1", far)
    assert first is not None and first.running == 1 and first.run == 1
    assert r.end("c1", far, 100.0, follows=True) is None        # `square` runs here next
    assert r.start("c1", far + 0.001) is None                    # the node's record covers it
    assert r.end("c1", far + 0.001, 100.1, follows=False) is None
    assert r.ended_run == 1                                      # told with the next heartbeat
    # the next call: a start of its own
    nxt = r.start("c2", far)
    assert nxt is not None and nxt.run == 2 and nxt.call_id == "c2"


def test_a_near_deadline_or_a_later_deadline_is_told_at_once():
    from executor.liveness import RunReports, SAME_DEADLINE
    r = RunReports()
    assert r.start("c1", 105.0) is not None
    end = r.end("c1", 105.0, 100.0, follows=True)                # 5 s left: at once
    assert end is not None and end.running == 0 and end.run == 1 and r.ended_run == 0
    assert r.start("c2", 500.0) is not None
    assert r.end("c2", 500.0, 100.0, follows=True) is None
    later = r.start("c2", 500.0 + 2 * SAME_DEADLINE)              # its own, later deadline
    assert later is not None and later.deadline == 500.0 + 2 * SAME_DEADLINE
    earlier = r.start("c3", 400.0)
    assert earlier is not None
    assert r.end("c3", 400.0, 100.0, follows=True) is None
    assert r.start("c3", 399.0) is not None                       # an earlier one: told too


def test_the_heartbeat_thread_needs_only_its_heartbeat_view_not_a_worker():
    """`heartbeat_loop` runs from a `Heartbeat` built of plain parts (no `Worker`): it
    reports the view's identity, load and run state to every target, reads the control
    socket when something arrives, and stops with the stop event."""
    import threading

    import zmq

    from executor.busy import BusyClock
    from executor.liveness import Heartbeat, RunReports, heartbeat_loop
    from hydro_proto import cloudburst_pb2 as pb
    from runtime.framing import parse
    from runtime.sockets import PushCache, bind_pull
    from waiting import poll_until

    context = zmq.Context()
    scheduler, scheduler_address = bind_pull(context, "127.0.0.1")
    cache, cache_address = bind_pull(context, "127.0.0.1")
    control, control_address = bind_pull(context, "127.0.0.1")
    busy, reports, stopping, controls = BusyClock(), RunReports(), threading.Event(), []
    busy.start(time.monotonic())
    reports.ended_run = 7
    beat = Heartbeat("w9", "n9", "tcp://w9:1", control_address, cache_address,
                     [scheduler_address], 0.05, context, None, busy, reports, lambda: 3,
                     control, lambda: controls.append(control.recv()), stopping)
    thread = threading.Thread(target=heartbeat_loop, args=(beat,), daemon=True)
    thread.start()
    push = PushCache(context)
    try:
        for sock in (scheduler, cache):
            assert sock.poll(5000), "no heartbeat arrived"
            kind, payload = parse(sock.recv())
            status = pb.WorkerStatus.FromString(payload)
            assert (kind, status.worker_id, status.node_id, status.address) == \
                ("heartbeat", "w9", "n9", "tcp://w9:1")
            assert (status.queued, status.running, status.ended_run) == (3, 1, 7)
            assert (status.control_address, status.cache_address) == (control_address,
                                                                      cache_address)
        push.send(control_address, "abort", pb.CallDone(call_id="c1"))
        poll_until(lambda: controls, what="the control socket read by the heartbeat thread")
    finally:
        stopping.set()
        thread.join(5)
        assert not thread.is_alive()
        push.close()
        for sock in (scheduler, cache, control):
            sock.close(0)
        context.term()


# ---- a long function is told at once ----
NEVER = float("-inf")      # the doorbell never rang


def test_a_function_that_runs_long_is_told_once_between_periods_and_so_is_its_end():
    from executor.liveness import LONG_RUN, LOOK_EVERY, next_beat
    period = 0.2
    # nothing runs: wait for the period, the doorbell armed (a start rings it)
    assert next_beat(1.05, 1.0, period, None, None, False, NEVER) == \
        (None, pytest.approx(0.15), True)
    assert next_beat(1.21, 1.0, period, None, None, False, NEVER)[:2] == ("period", period)
    # a function began at 1.06 (it rang): wait until it has run LONG_RUN, then tell it
    kind, wait, arm = next_beat(1.07, 1.0, period, 1.06, None, False, 1.06)
    assert kind is None and not arm and wait == pytest.approx(1.06 + LONG_RUN - 1.07)
    kind, wait, _ = next_beat(1.06 + LONG_RUN, 1.0, period, 1.06, None, False, 1.06)
    assert kind == "long" and wait == pytest.approx(1.0 + period - 1.06 - LONG_RUN)
    # told: nothing more while it runs, but look for its end (an end does not ring)
    assert next_beat(1.1, 1.08, period, 1.06, 1.06, True, 1.06) == \
        (None, pytest.approx(LOOK_EVERY), False)
    # it ended and nothing runs: told at once; then quiet until the period
    assert next_beat(1.12, 1.08, period, None, 1.06, True, 1.06)[0] == "idle"
    assert next_beat(1.13, 1.12, period, None, 1.06, False, 1.06)[::2] == (None, True)
    assert next_beat(1.33, 1.12, period, None, 1.06, False, 1.06)[:2] == ("period", period)
    # a period's status came while it ran (it said so too): its end is told at once too
    assert next_beat(1.3, 1.28, period, None, 1.06, True, 1.06)[0] == "idle"
    # short calls one after another: the doorbell is armed at most once per LOOK_EVERY
    kind, wait, arm = next_beat(1.5, 1.4, period, None, 1.06, False, 1.5 - LOOK_EVERY / 2)
    assert kind is None and not arm and wait == pytest.approx(LOOK_EVERY / 2)


@given(st.floats(0, 100), st.floats(0, 1), st.one_of(st.none(), st.floats(0, 1)),
       st.booleans(), st.booleans(), st.floats(0, 1))
def test_next_beat_never_waits_past_the_period_nor_tells_a_short_function(
        last, elapsed, ran, told_it, told_busy, since_rang):
    from executor.liveness import LONG_RUN, LOOK_EVERY, next_beat
    period, now = 0.2, last + elapsed
    since = None if ran is None else now - ran
    told = since if told_it else None
    kind, wait, arm = next_beat(now, last, period, since, told, told_busy, now - since_rang)
    assert wait >= 0 and (kind is not None or now + wait <= last + period + 1e-9)
    if elapsed >= period:
        assert kind == "period"                       # the regular status, always
    elif kind == "long":                              # a function run long, not yet told
        assert since is not None and since != told and now - since >= LONG_RUN
    elif kind == "idle":                              # the told function ended
        assert since is None and told_busy
    if arm:                                           # only idle, at most once per look
        assert kind is None and since is None and since_rang >= LOOK_EVERY
    elif kind is None:                                # else never waits long unarmed
        assert wait <= LOOK_EVERY + 1e-9 or (since is not None and since != told)


def test_the_doorbell_rings_only_when_armed_and_once():
    from executor.liveness import Doorbell
    import select
    bell = Doorbell()
    try:
        bell.ring()                                   # not armed: nothing
        assert select.select([bell.fileno()], [], [], 0)[0] == []
        bell.armed = True
        bell.ring()
        bell.ring()                                   # once: it disarmed itself
        assert select.select([bell.fileno()], [], [], 0)[0] == [bell.fileno()]
        assert not bell.armed
        bell.clear()
        assert select.select([bell.fileno()], [], [], 0)[0] == []
    finally:
        bell.close()
