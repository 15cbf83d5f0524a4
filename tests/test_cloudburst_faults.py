"""Killing executor workers on a real LocalCluster: calls go on on the others; with none
left, calls fail with NoResources; a call in flight on a killed worker fails, typed."""
import time

import cloudburst
import pytest
from cloudburst.errors import ExecutionError, NoResources, ObjectNotFound
from waiting import poll_until


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_killing_workers():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=3, restart_workers=False,
                                 heartbeat_period=0.1, heartbeat_timeout=0.8) as cluster:
        c = cluster.client(timeout=20)
        c.register(lambda lib, x: (lib.getid(), x + 1), "whoami")

        def hang(lib, key):
            lib.put(key, lib.getid())
            import time as t
            t.sleep(30)

        c.register(hang, "hang")
        assert c.call("whoami", 1).get(timeout=10)[1] == 2

        # a call in flight on a worker that dies, told not to run again, fails at the
        # caller naming the worker (tests/test_call_retries.py: one that may runs again)
        future = c.call("hang", "hang-id", max_retries=0)
        def started():
            try:
                return c.get("hang-id")
            except ObjectNotFound:
                return None
        victim = poll_until(started, 10, "the hanging call starting")
        cluster.kill_worker(victim)
        start = time.monotonic()
        with pytest.raises(ExecutionError, match=victim):
            future.get(timeout=10)
        assert time.monotonic() - start < 5
        cluster.wait_for_workers([victim], present=False, timeout=5)

        # calls go on, on the others
        survivors = {w["worker_id"] for w in cluster.workers} - {victim}
        used = set()
        for i in range(30):
            wid, value = c.call("whoami", i).get(timeout=10)
            assert value == i + 1 and wid in survivors
            used.add(wid)
        assert used  # at least one survivor served

        # with every worker gone, calls fail fast with NoResources
        for wid in survivors:
            cluster.kill_worker(wid)
        cluster.wait_for_workers(survivors, present=False, timeout=5)
        start = time.monotonic()
        with pytest.raises(NoResources, match="no live executor"):
            c.call("whoami", 1).get(timeout=10)
        assert time.monotonic() - start < 2
