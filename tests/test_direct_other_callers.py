"""A direct call never waits behind another caller's call while the platform could run it
elsewhere (`scheduler/worker_leases.py`, "One caller at a time on a leased worker").

Two clients hold worker leases, one on each of the two workers; a third caller's call,
through the scheduler, is placed on one of those workers and blocks there until the test
writes a KVS key. Each leasing client's next call must be answered while that call still
blocks: the scheduler revoked the lease on its worker when it placed the call, so that
client's call goes through the scheduler to the other worker. Before, the lease stayed
and the call waited behind the blocked one, as long as it blocked.
"""
import time
import uuid

import cloudburst
from faas.errors import ObjectNotFound
from waiting import poll_until


def _block(lib, key):
    """Writes its worker's id under `key`-started, then runs until the KVS key `key` is
    written (at most 60 s)."""
    import time as t
    lib.put(key + "-started", lib.getid())
    deadline = t.monotonic() + 60
    while lib.get(key, default=None) is None:
        if t.monotonic() > deadline:
            raise TimeoutError(f"{key} was never written")
        t.sleep(0.02)
    return "released"


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
        first.register(_block, "block")
        leased = {_leased(first, 1), _leased(second, 2)}
        # the second client's first call went to the worker with no leased slot: one each
        assert len(leased) == 2, f"both clients leased the same worker {leased}"

        key = f"release-{uuid.uuid4().hex}"
        held = other.call("block", key)

        def started():
            try:
                return other.get(key + "-started")
            except ObjectNotFound:
                return None
        poll_until(started, 10, "the blocking call running", interval=0.05)
        assert started() in leased           # wherever it went, a client leased that worker
        try:
            for c, n in ((first, 10), (second, 20)):
                start = time.monotonic()
                f = c.call("inc", n)
                assert f.get(timeout=5) == n + 1
                # generous: an answer takes milliseconds; the blocked call blocks for 60 s
                assert time.monotonic() - start < 5
            assert not held.done(), "the blocking call ended before the others were answered"
        finally:
            other.put(key, 1)
        assert held.get(timeout=20) == "released"
