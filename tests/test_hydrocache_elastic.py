"""HydroCache keeps receiving Anna's pushes across placement changes: a join, a graceful leave,
a node failure and a replication change. Real processes.

A causal call reads its keys from the node cache, which holds them and is kept fresh only by
the updates Anna pushes to its subscription. Keys move between KVS nodes when membership or
replication changes; if a subscription did not move with its key, the cache would keep
serving the old version and the polls below would run out of time.
"""
import pytest

import cloudburst
from cloudburst import Reference
from waiting import poll_until

KEYS = [f"elastic-causal-{i}" for i in range(12)]


def causal_cluster(replicas):
    c = cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1, kvs_nodes=3,
                                kvs_replication=(replicas, 1, 0, 1))
    c.start()
    client = c.client(timeout=20)
    client.register(lambda lib, *values: list(values), "read_all")
    return c, client


def write_all(client, generation):
    for key in KEYS:
        client.put(key, generation, consistency="causal")


def read_all(client):
    refs = [Reference(k) for k in KEYS]
    return client.call("read_all", *refs, consistency="causal").get(timeout=20)


def assert_cache_catches_up(client, generation, what):
    write_all(client, generation)
    poll_until(lambda: read_all(client) == [generation] * len(KEYS), 20,
               f"the node cache receiving generation {generation} after {what}")


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_subscriptions_follow_their_keys_on_join_leave_and_replication_change():
    # one replica per key: a key that moves has no other replica left to push its updates
    c, client = causal_cluster(replicas=1)
    with c:
        kvs = c.kvs
        assert_cache_catches_up(client, 1, "the first reads (the cache subscribes)")

        added = kvs.add_node()
        assert_cache_catches_up(client, 2, f"{added} joined")

        kvs.remove_node(added)
        assert_cache_catches_up(client, 3, f"{added} left")

        anna = kvs.client(timeout=2, auth=c.cluster_auth)   # placement: the cluster's key
        for key in KEYS:
            anna.set_replication(key, memory=2, disk=0)
        assert_cache_catches_up(client, 4, "a replication change")


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_subscriptions_survive_a_node_failure():
    c, client = causal_cluster(replicas=2)
    with c:
        kvs = c.kvs
        assert_cache_catches_up(client, 1, "the first reads (the cache subscribes)")
        victim = kvs.node_ids[0]
        kvs.kill_node(victim)
        assert_cache_catches_up(client, 2, f"{victim} was killed")
        added = kvs.add_node()
        assert_cache_catches_up(client, 3, f"{added} replaced it")
