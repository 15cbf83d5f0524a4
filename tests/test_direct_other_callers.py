"""A direct call never waits behind another caller's call while the platform could run it
elsewhere (`scheduler/worker_leases.py`, "One caller at a time on a leased worker").

Two clients hold worker leases, one on each of the two workers; a third caller's call,
through the scheduler, is placed on one of those workers and blocks there until the test
writes a KVS key. The client that leased that worker must have its next calls answered
while that call still blocks: the scheduler revoked its lease when it placed the call, so
its calls go through the scheduler to the other worker. Before, the lease stayed and its
calls waited behind the blocked one, as long as it blocked.
"""
import uuid

import cloudburst
from faas.errors import ObjectNotFound
from waiting import block_until_written, poll_until


def _leased(c, n):
    """The client calls `inc` until it holds a lease of it; its leased worker's id."""
    poll_until(lambda: c.call("inc", n).get(timeout=10) == n + 1 and c.worker_leases, 10,
               "a worker lease of inc", interval=0.05)
    return c.worker_leases[0]["worker_id"]


def test_a_call_placed_on_a_leased_worker_revokes_the_lease_so_its_client_goes_elsewhere():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2,
                                 supervise=False) as cluster:
        first = cluster.client(timeout=20, direct=True)
        second = cluster.client(timeout=20, direct=True)
        other = cluster.client(timeout=20, direct=False)      # the scheduler's path
        first.register(lambda lib, x: x + 1, "inc")
        first.register(block_until_written, "block")
        leases = {_leased(first, 1): first, _leased(second, 2): second}
        # the second client's first call went to the worker with no leased slot: one each
        assert len(leases) == 2, f"both clients leased the same worker {sorted(leases)}"

        key = f"release-{uuid.uuid4().hex}"
        held = other.call("block", key)

        def started():
            try:
                return other.get(key + "-started")
            except ObjectNotFound:
                return None
        poll_until(started, 10, "the blocking call running", interval=0.05)
        # wherever it went, a client leased that worker: that client's next calls must not
        # wait behind it (the other worker is idle)
        c = leases[started()]
        try:
            for n in range(3):
                # generous: an answer takes milliseconds; the blocked call blocks for 60 s
                assert c.call("inc", n).get(timeout=5) == n + 1
            assert not held.done(), "the blocking call ended before the others were answered"
            assert started() not in [h["worker_id"] for h in c.worker_leases]
        finally:
            other.put(key, 1)
        assert held.get(timeout=20) == "released"
