"""Anna while its membership changes: a node joins, one leaves, one crashes, and nothing
acknowledged is lost.

With `fault_tolerance=1` every key has two replicas. A joining node receives the keys (and the
subscriptions) it now owns; a node that leaves hands everything to the new owners before it
exits; a crashed node is detected by missed heartbeats and the survivors copy its keys to new
replicas. Reads of a key with a live replica succeed throughout.

    python examples/elastic_kvs.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import anna_core  # noqa: E402

KEYS = [f"order-{i}" for i in range(200)]

with anna_core.LocalCluster(nodes=3, fault_tolerance=1) as cluster:
    kvs = cluster.client()
    for key in KEYS:
        kvs.put_all(key, b"paid")                  # returns once both replicas have it
    print(f"wrote {len(KEYS)} keys, {cluster.replication.memory_global} replicas each")

    joined = cluster.add_node()
    print(f"{joined} joined; it now owns part of the keys")
    cluster.remove_node(joined)                    # graceful: hands its keys back first
    print(f"{joined} left")
    cluster.kill_node("memory-0")                  # a crash, like kill -9
    print("memory-0 crashed")

    missing = [key for key in KEYS if kvs.get(key) != b"paid"]
    assert not missing, f"lost {missing}"
    print(f"all {len(KEYS)} keys still read back (served by surviving replicas)")
