"""A short call keeps off a worker that another scheduler keeps busy with a long call
(`executor/liveness.py`: a function that has run `LONG_RUN` seconds is told to every
scheduler at once; `scheduler/policy.py` backs off from a fully utilized worker).

Each scheduler counts only the calls it placed, so before, the second scheduler knew of the
first one's long call only from the worker's next periodic status (here every second), and
meanwhile placed its client's short calls on that worker, its warm one, behind the long
call. The long call blocks until the test writes a KVS key.
"""
import uuid

import pytest

import cloudburst
from faas.errors import ObjectNotFound
from waiting import block_until_written, poll_until


def _where(lib):
    return lib.getid()


def test_a_call_keeps_off_a_worker_another_scheduler_keeps_busy_with_a_long_call():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2, schedulers=2,
                                 heartbeat_period=1.0, heartbeat_timeout=10,
                                 supervise=False) as cluster:
        first = cluster.client(0, timeout=20, direct=False)
        second = cluster.client(1, timeout=20, direct=False)
        second.register(_where, "where")
        warm = second.call("where").get(timeout=10)     # the second scheduler's warm worker

        def started(key):
            try:
                return first.get(key + "-started")
            except ObjectNotFound:
                return None
        # the first scheduler's long call, on that worker (a new function each try: the
        # first scheduler chooses among two idle workers)
        for attempt in range(12):
            first.register(block_until_written, f"block{attempt}")
            key = f"release-{uuid.uuid4().hex}"
            held = first.call(f"block{attempt}", key, 0.1)    # works 0.1 s, then blocks
            poll_until(lambda: started(key), 10, "the long call running", interval=0.02)
            if started(key) == warm:
                break
            first.put(key, 1)
            assert held.get(timeout=20) == "released"
        else:
            pytest.fail(f"the first scheduler never placed the long call on {warm}")
        try:
            for _ in range(3):
                # generous: an answer takes milliseconds; the long call blocks for 60 s
                assert second.call("where").get(timeout=5) != warm
            assert not held.done()
        finally:
            first.put(key, 1)
        assert held.get(timeout=20) == "released"
