"""A scheduler's graceful stop (scheduler/stopping.py, the rule; the service and the client
around it): a stopping scheduler refuses new calls, which their clients send to another
scheduler, and exits once the calls it accepted are over, so that stopping one scheduler of
several (a rolling upgrade) loses no call."""
import signal
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cloudburst
from scheduler.stopping import GracefulStop
from waiting import poll_until


def test_nothing_changes_before_the_stop():
    stop = GracefulStop(10)
    assert not stop.stopping and not stop.refuses() and not stop.finished(100.0, 0)


def test_it_waits_for_the_calls_in_flight_and_for_the_clients_to_move_on():
    stop = GracefulStop(10, quiet=0.5)
    stop.begin(100.0)
    assert stop.refuses()
    assert not stop.finished(100.1, 0)            # a client may still be sending
    assert not stop.finished(101.0, 2)            # calls accepted here still run
    stop.refused(101.0)
    assert not stop.finished(101.2, 0)            # a refusal restarts the quiet time
    assert stop.finished(101.5, 0)
    assert stop.finished(110.0, 5)                # the grace is a bound, whatever runs
    stop.begin(105.0)                             # asked again: the first time counts
    assert stop.since == 100.0


def test_no_grace_means_at_once():
    stop = GracefulStop(0)
    stop.begin(1.0)
    assert not stop.refuses() and stop.finished(1.0, 3)
    with pytest.raises(ValueError, match="grace"):
        GracefulStop(-1)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grace=st.floats(0, 100), quiet=st.floats(0, 5),
       events=st.lists(st.tuples(st.floats(0, 200), st.booleans(), st.integers(0, 3)),
                       max_size=30))
def test_it_never_outlives_its_grace_nor_leaves_calls_behind_early(grace, quiet, events):
    stop = GracefulStop(grace, quiet)
    stop.begin(0.0)
    last_refusal = None
    for now, refuse, in_flight in sorted(events):
        if refuse and stop.refuses():
            stop.refused(now)
            last_refusal = now
        done = stop.finished(now, in_flight)
        if now >= grace:
            assert done
        elif done:
            assert in_flight == 0 and now - (last_refusal or 0.0) >= quiet


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_stopping_scheduler_ends_its_calls_and_sends_new_ones_elsewhere():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2, schedulers=2,
                                 supervise=False, scheduler_stop_grace=10) as cluster:
        stopping = cluster.scheduler_addresses[0]
        # the scheduler's path (a direct client's calls skip the scheduler: the test below)
        c = cluster.client(timeout=20, failover_timeout=1.0, direct=False)
        assert c.address == stopping

        def slow(lib, x):
            import time as t
            t.sleep(1.5)      # longer than the client's failover_timeout
            return x

        c.register(slow, "slow")
        c.register(lambda lib, x: x + 1, "inc")
        assert c.call("inc", 1).get(timeout=10) == 2
        in_flight = [c.call("slow", i) for i in range(3)]
        assert {f.scheduler for f in in_flight} == {stopping}
        pid = cluster.signal_scheduler(0, signal.SIGTERM)
        start = time.monotonic()
        # new calls meet a stopping scheduler: refused there, sent to the other one
        later = [c.call("inc", i) for i in range(10)]
        assert [f.get(timeout=15) for f in later] == list(range(1, 11))
        assert {f.scheduler for f in later} == {cluster.scheduler_addresses[1]}
        # the calls it had accepted ran to their end: none lost
        assert [f.get(timeout=15) for f in in_flight] == [0, 1, 2]
        # then it exited by itself, well within its grace
        process = cluster._schedulers[0]
        poll_until(lambda: not process.running(), 10, f"scheduler {pid} exiting")
        assert process.returncode == 0 and time.monotonic() - start < 9
        assert c.address == cluster.scheduler_addresses[1]
        assert c.call("inc", 41).get(timeout=10) == 42


@pytest.mark.slow     # about 15 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_stopping_scheduler_revokes_its_worker_leases_so_direct_calls_go_elsewhere():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2, schedulers=2,
                                 supervise=False, scheduler_stop_grace=20) as cluster:
        stopping, other = cluster.scheduler_addresses
        c = cluster.client(timeout=20, failover_timeout=1.0, direct=True)
        assert c.address == stopping

        def slow(lib, x):
            import time as t
            t.sleep(x)
            return x

        c.register(slow, "slow")
        c.register(lambda lib, x: x + 1, "inc")
        poll_until(lambda: c.call("inc", 1).get(timeout=10) == 2 and c.worker_leases, 10,
                   "a worker lease from the first scheduler")
        keeper = cluster.client(timeout=20, failover_timeout=1.0, direct=False)  # scheduler path
        held = keeper.call("slow", 5)          # keeps the stopping scheduler alive meanwhile
        cluster.signal_scheduler(0, signal.SIGTERM)
        start = time.monotonic()

        def elsewhere():
            f = c.call("inc", 5)
            return f.get(timeout=10) == 6 and f.scheduler == other
        # its lease is revoked at once: calls meet the stopping scheduler, are refused and
        # go to the other one, long before the stopping one exits
        poll_until(elsewhere, 4, "direct calls going to the other scheduler", interval=0.05)
        assert time.monotonic() - start < 4
        assert all(c.call("inc", i).scheduler == other for i in range(5))
        assert held.get(timeout=20) == 5
