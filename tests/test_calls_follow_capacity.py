"""Calls follow capacity, on real processes: a call waits at the scheduler until a worker is
free, so a node added while calls wait takes them at once (scheduler/dispatch.py)."""
import threading
import time

import pytest

from cloudburst import LocalCluster


def test_an_added_node_takes_queued_calls_at_once():
    """10 calls of a 1 s function on a one-worker cluster, a second node added after 1 s: the
    new node runs at least 3 of them and all finish well before the 10 s one worker needs."""
    with LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        cb = cluster.client()

        def slow(lib, i):
            import time
            time.sleep(1.0)
            return lib.getid()

        cb.register(slow, "slow")
        first = {w["worker_id"] for w in cluster.workers}
        start = time.monotonic()
        futures = [cb.call("slow", i, timeout=30) for i in range(10)]
        time.sleep(1.0)   # the scenario: the node is added one second after the burst
        added = {}
        adder = threading.Thread(target=lambda: added.update(node=cluster.add_executor_node()))
        adder.start()
        ran_on = [f.get(timeout=30) for f in futures]
        took = time.monotonic() - start
        adder.join(30)
        new = [w for w in ran_on if w not in first]
        assert added.get("node"), "the second node did not come up"
        assert len(new) >= 3, f"only {len(new)} of 10 calls ran on the added node: {ran_on}"
        print(f"burst {took:.2f} s, {len(new)} of 10 on the added node")
        assert took < 8.0, f"the burst took {took:.1f} s (one worker alone needs 10 s)"
