"""Nothing stops with one process (real processes, kill -9): a killed executor node is
restarted with new workers and calls work again; a client fails over to the other
scheduler, and a call in flight on the killed one fails typed, naming it; a killed
scheduler comes back on its address; registered functions and stored objects survive the
loss of one of three Anna nodes."""
import time

import pytest

import cloudburst
from cloudburst.futures import SchedulerUnavailable
from waiting import poll_until


def _serves(c, name="inc", timeout=5):
    def attempt():
        try:
            return c.call(name, 1).get(timeout=timeout) == 2
        except cloudburst.CloudburstError:
            return False
    return attempt


def test_a_killed_executor_node_is_restarted_and_calls_work_again():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as cluster:
        c = cluster.client(timeout=20)
        c.register(lambda lib, x: x + 1, "inc")
        assert c.call("inc", 1).get(timeout=10) == 2
        old = {w["worker_id"]: w["pid"] for w in cluster.workers}
        start = time.monotonic()
        cluster.kill_node(0)
        poll_until(_serves(c), 20, "calls working again after the node was killed")
        assert time.monotonic() - start < 15
        # new workers replaced the old (the new ones may serve a call a moment before the
        # supervisor has read their node's readiness line)
        poll_until(lambda: not {w["worker_id"] for w in cluster.workers} & set(old), 5,
                   "the cluster listing the new workers")
        new = {w["worker_id"] for w in cluster.workers}
        assert len(new) == 2
        # the old workers died with their node: no orphans
        poll_until(lambda: all(not _alive(pid) for pid in old.values()), 5,
                   "the old workers exiting")
        poll_until(lambda: set(c.executors()) == new, 5, "the scheduler dropping the old")
        assert [c.call("inc", i).get(timeout=10) for i in range(10)] == list(range(1, 11))


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_clients_fail_over_to_the_other_scheduler():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2, schedulers=2,
                                 supervise=False) as cluster:
        dead = cluster.scheduler_addresses[0]
        c = cluster.client(timeout=20, failover_timeout=1.0)
        assert c.address == dead
        c.register(lambda lib, x: x + 1, "inc")

        def slow(lib):
            import time as t
            t.sleep(4)
            return "late"

        c.register(slow, "slow")
        assert c.call("inc", 1).get(timeout=10) == 2
        future = c.call("slow")
        assert future.scheduler == dead
        cluster.kill_scheduler(0)
        start = time.monotonic()
        with pytest.raises(SchedulerUnavailable, match=dead.replace(".", r"\.")):
            future.get(timeout=10)
        assert time.monotonic() - start < 3.5      # before its result could have come
        # new registrations and calls go to the other scheduler
        c.register(lambda lib, x: x * 3, "triple")
        assert [c.call("triple", i).get(timeout=10) for i in range(5)] == [0, 3, 6, 9, 12]
        assert c.call("inc", 41).get(timeout=10) == 42
        assert c.address == cluster.scheduler_addresses[1]
        # a new client that prefers the dead scheduler starts on the other one
        c2 = cluster.client(timeout=10, failover_timeout=1.0)
        assert c2.call("triple", 2).get(timeout=10) == 6 and "triple" in c2.list().functions


def test_a_killed_scheduler_comes_back_on_its_address():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        # the scheduler's path: calls working again means the scheduler is back (a direct
        # client's warm calls go on without it while its worker lease lasts)
        c = cluster.client(timeout=20, failover_timeout=1.0, direct=False)
        c.register(lambda lib, x: x + 1, "inc")
        assert c.call("inc", 1).get(timeout=10) == 2
        start = time.monotonic()
        cluster.kill_scheduler(0)
        poll_until(_serves(c), 20, "calls working again after the scheduler was killed")
        assert time.monotonic() - start < 10
        assert c.address == cluster.address and "inc" in c.list().functions


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_the_registry_and_objects_survive_an_anna_node():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1,
                                 kvs_nodes=3) as cluster:
        c = cluster.client(timeout=20)
        c.register(lambda lib, x: x + 1, "inc")           # not called yet: read after the kill
        c.register(lambda lib, key: lib.get(key) * 2, "double_stored")
        c.register(lambda lib, x: x * x, "square")
        c.register_dag("pipeline", ["inc", "square"], [("inc", "square")])
        values = {f"obj-{i}": i for i in range(40)}
        for k, v in values.items():
            c.put(k, v)
        victim = cluster.kvs.node_ids[0]
        cluster.kvs.kill_node(victim)
        start = time.monotonic()

        def everything_readable():
            try:
                return (all(c.get(k) == v for k, v in values.items())
                        and c.call("inc", 1).get(timeout=5) == 2
                        and c.call("double_stored", "obj-7").get(timeout=5) == 14
                        and c.call_dag("pipeline", {"inc": [2]}).get(timeout=5) == 9)
            except cloudburst.CloudburstError:
                return False

        poll_until(everything_readable, 30, f"functions and objects after {victim} died")
        assert time.monotonic() - start < 25
        listing = c.list()
        assert {"inc", "double_stored"} <= set(listing.functions) and "pipeline" in listing.dags
