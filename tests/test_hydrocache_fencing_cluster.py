"""Fencing of causal commits on real processes (hydrocache/DESIGN.md, "Fencing").

A CT call `rd(k) -> slow_wr` runs on one executor node; the node and its workers are stopped
(SIGSTOP) while slow_wr runs, past the heartbeat timeout, so the scheduler fails the call and
releases its snapshot. Writer calls on the other node read k and append to it, acknowledged.
Then the node resumes (the other one stops, so that a probe read runs on the resumed node and
shows when its cache holds the writers' k), and slow_wr finishes: its commit must be refused,
and every acknowledged write must still be in k. Before fencing, k ended as the slow call's
value alone: its commit re-bound k on a new snapshot whose clock covered all five writes.
"""
from __future__ import annotations

import os
import signal
import tempfile

import pytest

import cloudburst
from cloudburst import Reference
from cloudburst.errors import CloudburstError
from waiting import poll_until

KEY = "fence_k"
LOCAL = "fence_x"       # read by the slow call only: CT places a read of it on the same node


def _tags(values):
    """Every tag in k's concurrent values (each value is a list of tags)."""
    return {t for v in values for t in v}


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_stalled_node_commit_after_failure_loses_no_acknowledged_write():
    with cloudburst.LocalCluster(executor_nodes=2, executors_per_node=2,
                                 heartbeat_period=0.1, heartbeat_timeout=1.0) as cluster, \
            tempfile.TemporaryDirectory() as tmp:
        c = cluster.client(timeout=20)
        c.put(KEY, ["init"], consistency="causal")
        c.put(LOCAL, ["x"], consistency="causal")

        def rd(lib, value, local):
            return sorted({t for v in lib.get(KEY, concurrent=True) for t in v})

        def slow_wr(lib, marker, go, up):
            import os
            import time
            with open(marker, "w") as f:       # tell the test where this runs
                f.write(lib.getid())
            deadline = time.monotonic() + 30   # the node is stopped meanwhile
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.01)
            lib.put(KEY, sorted(set(up) | {"slow"}))
            return "slow"

        def append(lib, value, tag):
            seen = {t for v in lib.get(KEY, concurrent=True) for t in v}
            lib.put(KEY, sorted(seen | {tag}))
            return tag

        c.register(rd, "fence_rd")
        c.register(slow_wr, "fence_slow_wr")
        c.register(append, "fence_append")
        def whoami(lib):
            import time
            time.sleep(0.2)    # the function's own work: a burst then fills every worker
            return lib.getid()
        c.register(whoami, "fence_whoami")

        def probe(lib, value, local):
            return lib.getid(), sorted({t for v in lib.get(KEY, concurrent=True) for t in v})
        c.register(probe, "fence_probe")
        c.register_dag("fence_slow", ["fence_rd", "fence_slow_wr"],
                       [("fence_rd", "fence_slow_wr")])

        marker, go = os.path.join(tmp, "slow_wr"), os.path.join(tmp, "go")
        slow = c.call_dag("fence_slow", {"fence_rd": [Reference(KEY), Reference(LOCAL)],
                                         "fence_slow_wr": [marker, go]},
                          consistency="causal", protocol="ct", timeout=30,
                          max_retries=0)   # this attempt must fail and be fenced, not rerun
        poll_until(lambda: os.path.exists(marker) and os.path.getsize(marker) > 0, 20,
                   "slow_wr starting")
        with open(marker) as f:
            slow_worker = f.read()
        node = next(w["node_id"] for w in cluster.workers if w["worker_id"] == slow_worker)
        other = next(w["node_id"] for w in cluster.workers if w["node_id"] != node)
        cluster.signal_node(node, signal.SIGSTOP)
        try:
            # past the heartbeat timeout the scheduler fails the call and releases it
            with pytest.raises(CloudburstError):
                slow.get(timeout=20)
            acknowledged = []
            for i in range(5):
                tag = f"w{i}"
                assert c.call("fence_append", Reference(KEY), tag, consistency="causal",
                              protocol="ct").get(timeout=20) == tag
                acknowledged.append(tag)
            # the other node stops in turn, so that reads run on the resumed one
            cluster.signal_node(other, signal.SIGSTOP)
        finally:
            cluster.signal_node(node, signal.SIGCONT)
        try:
            # slow_wr goes on once the resumed node's cache holds the writers' k (Anna's
            # push): a read on that node (its other worker) sees every acknowledged tag
            node_workers = {w["worker_id"] for w in cluster.workers if w["node_id"] == node}

            def node_sees_writes():
                try:
                    wid, tags = c.call("fence_probe", Reference(KEY), Reference(LOCAL),
                                       consistency="causal", protocol="ct").get(timeout=5)
                except CloudburstError:      # placed on the stopped node: failed there
                    return False
                return wid in node_workers and set(acknowledged) <= set(tags)
            poll_until(node_sees_writes, 30, "the resumed node's cache taking in the writes")
            open(go, "w").close()
        finally:
            cluster.signal_node(other, signal.SIGCONT)
        # slow_wr wakes up and tries to commit; its worker runs one function at a time, so
        # once it answers another call, that commit attempt is over
        # (calls go back to the worker that ran the function last while it is free: a burst
        # that fills every worker's slots is what reaches a given one)
        poll_until(lambda: slow_worker in {f.get(timeout=20) for f in
                                           [c.call("fence_whoami")
                                            for _ in range(4 * len(cluster.workers))]},
                   30, "the resumed worker serving a call")
        final = _tags(c.get(KEY, consistency="causal", concurrent=True))
        assert set(acknowledged) <= final, f"acknowledged writes lost: k holds {sorted(final)}"
        assert "slow" not in final, "the failed call's commit was accepted"
