"""Nothing in the FaaS layer depends on one Anna routing process (real processes, kill -9):
with two routings, the schedulers, the executor nodes (their node caches and workers) and the
clients are given both addresses, and when one routing dies every call, registration and
object read or write keeps working through the other, with no call failing."""
import pytest

import cloudburst


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_calls_and_objects_keep_working_when_a_routing_dies():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2,
                                 kvs_options={"routers": 2}) as cluster:
        routings = cluster.kvs.routing_addresses
        assert len(routings) == 2
        c = cluster.client(timeout=20)
        # every process of the stack knows both routings
        assert set(c.kvs_address.split(",")) == set(routings)

        def store(lib, x):
            # a new key each call: its replica is not cached yet, so the node cache asks
            # routing where it lives
            lib.put(f"stored-{x}", x * 10)
            return lib.get(f"stored-{x}")

        c.register(store, "store")
        assert c.call("store", 0).get(timeout=10) == 0
        c.put("before", 1)
        cluster.kvs.stop_routing(0)          # SIGKILL: a crash, not a graceful stop
        # the registry (the scheduler's KVS client), calls (the executor's node cache) and
        # the client's own objects: each needs routing for a key it has not seen
        c.register(lambda lib, x: x + 1, "inc")
        results = [c.call("store", i).get(timeout=15) for i in range(1, 9)]
        assert results == [i * 10 for i in range(1, 9)]
        assert c.call("inc", 1).get(timeout=15) == 2
        c.put("after", 2)
        assert (c.get("before"), c.get("after")) == (1, 2)
