"""A call never waits behind a long call on one worker while another worker idles, with
direct calls on (worker leases: `cloudburst/stalls.py`, `scheduler/worker_leases.py`
`leasable` and `reclaim`, `scheduler/policy.py`), on real processes.

The long call runs until the test tells it to stop (a key in the KVS), so the short calls
made meanwhile either complete while it runs, or wait behind it until their deadline."""
import uuid

import pytest

from cloudburst import LocalCluster
from cloudburst.errors import ObjectNotFound
from waiting import poll_until


def work(lib, marker=None):
    """Short without a marker; with one, a long call: it works 0.7 s (longer than a lease may be held up), says it started,
    then runs until the key says stop (at most 30 s)."""
    import time
    if marker is not None:
        time.sleep(0.7)
        lib.put(marker, "started")
        end = time.monotonic() + 30
        while lib.get(marker, default=None) != "stop" and time.monotonic() < end:
            time.sleep(0.02)
    return lib.getid()


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(executor_nodes=1, executors_per_node=2) as c:
        cb = c.client(direct=True)
        cb.register(work, "work")
        cb.register(work, "hold")
        yield c


def _warm(cluster):
    """A client whose lease on `work` has grown to several slots (leases grow at their
    renewals, to what the worker's window, which widens for short calls, leaves)."""
    cb = cluster.client(direct=True)

    def grown():
        cb.call("work").get(10)
        return any(h["slots"] >= 3 for h in cb.worker_leases)
    poll_until(grown, 15.0, "a lease of 3 slots or more on work", interval=0)
    return cb


def _while_long_runs(cb, long_target, kinds):
    """Start a long call of `long_target`, then make short calls of `work` (each kind of
    consistency in turn) until three of each completed while the long call still runs."""
    marker = f"long-{uuid.uuid4().hex[:8]}"
    long = cb.call(long_target, marker, timeout=60)
    def started():
        try:
            return cb.get(marker) == "started"
        except ObjectNotFound:
            return False
    poll_until(started, 20.0, "the long call")
    done = {kind: [] for kind in kinds}
    try:
        while min(len(v) for v in done.values()) < 3:
            for kind in kinds:
                # behind the long call, it would wait until the long call is told to stop
                done[kind].append(cb.call("work", consistency=kind, timeout=8).get(8))
        assert not long.done(), "the long call ended before it was told to stop"
    finally:
        cb.put(marker, "stop")
    long_worker = long.get(30)
    return long_worker, done


def test_short_calls_do_not_wait_behind_another_functions_long_call(cluster):
    cb = _warm(cluster)
    long_worker, done = _while_long_runs(cb, "hold", ("lww", "causal"))
    assert long_worker not in done["lww"] + done["causal"], (long_worker, done)
    cb.close()


def test_a_short_call_does_not_wait_behind_a_long_call_of_its_own_lease(cluster):
    cb = _warm(cluster)
    long_worker, done = _while_long_runs(cb, "work", ("lww",))
    assert long_worker not in done["lww"], (long_worker, done)
    cb.close()
