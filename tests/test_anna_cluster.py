"""Multi-node behaviour on real processes: gossip convergence, key spread, placement agreeing
with an independent `_core.ClusterMap`, GET_ALL/PUT_ALL, the disk tier across a restart, and
clients following a node that restarted on new ports.

Every wait polls for a condition with a deadline.
"""
import time
import uuid

import pytest

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from waiting import poll_until



def fresh(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def replicated():
    """Two memory nodes, every key on both (memory_global=2)."""
    with anna_core.LocalCluster(memory_threads=1, nodes=2, replication=(2, 1, 0, 1),
                                gossip_period_ms=50) as c:
        yield c


def test_concurrent_puts_on_different_replicas_converge(replicated, raw):
    raw = raw.as_cluster(replicated.key_dir)
    kvs = replicated.client(timeout=3.0)
    key = fresh("converge")
    replicas = kvs.addresses(key)
    assert len(replicas) == 2 and set(replicas) == set(replicated.worker_addresses())
    a, b = replicas
    assert raw.put(a, key, _core.SetLattice([b"from-a"])).error == anna_pb2.NO_ERROR
    assert raw.put(b, key, _core.SetLattice([b"from-b"])).error == anna_pb2.NO_ERROR
    union = {b"from-a", b"from-b"}
    for address in replicas:
        poll_until(lambda: (v := raw.get(address, key)) is not None and v.reveal() == union,
                   5.0, f"replica {address} holding the union")


def test_get_all_merges_and_put_all_reaches_every_replica(replicated, raw):
    raw = raw.as_cluster(replicated.key_dir)
    kvs = replicated.client(timeout=3.0)
    key = fresh("all")
    a, b = kvs.addresses(key, all_tiers=True)
    raw.put(a, key, _core.MaxLattice(5))
    raw.put(b, key, _core.MaxLattice(9))
    assert kvs.get_all(key).reveal() == 9  # merged across replicas (possibly before gossip)
    key2 = fresh("putall")
    kvs.put_all(key2, _core.SetLattice([b"x"]))
    # put_all returned: every replica has it now, without waiting for gossip.
    for address in kvs.addresses(key2, all_tiers=True):
        assert raw.get(address, key2).reveal() == {b"x"}
    with pytest.raises(anna_core.KeyNotFound):
        kvs.get_all(fresh("nothing"))


def test_two_nodes_form_one_cluster_and_routing_agrees_with_cluster_map():
    with anna_core.LocalCluster(memory_threads=2, nodes=2, fault_tolerance=0) as cluster:
        kvs = cluster.client(timeout=3.0)
        assert cluster.node_ids == ["memory-0", "memory-1"]
        cm = _core.ClusterMap(default_replication=(1, 1, 0, 1), vnodes=64)
        for node_id in cluster.node_ids:
            cm.add_node(node_id, 0, cluster.worker_addresses(node_id))
        keys = [f"spread-{i}" for i in range(64)]
        for key in keys:
            assert kvs.addresses(key) == cm.addresses(key), key
        owners = {cm.addresses(k)[0] for k in keys}
        # Keys land on workers of both nodes.
        for node_id in cluster.node_ids:
            assert owners & set(cluster.worker_addresses(node_id)), node_id
        for key in keys:
            kvs.put(key, key.encode())
        other = cluster.client(timeout=3.0)
        assert [other.get(k) for k in keys] == [k.encode() for k in keys]


def test_disk_tier_keeps_data_across_a_cluster_restart(tmp_path):
    keys = {f"durable-{i}": f"value-{i}".encode() for i in range(20)}
    with anna_core.LocalCluster(memory_threads=0, disk_threads=2, data_dir=str(tmp_path)) as c:
        assert c.node_ids == ["disk-0"]
        kvs = c.client(timeout=3.0)
        for k, v in keys.items():
            kvs.put(k, v)
        kvs.put("durable-set", _core.SetLattice([b"a", b"b"]))
    with anna_core.LocalCluster(memory_threads=0, disk_threads=2, data_dir=str(tmp_path)) as c:
        kvs = c.client(timeout=3.0)
        assert {k: kvs.get(k) for k in keys} == keys
        assert kvs.get("durable-set").reveal() == {b"a", b"b"}


def test_disk_node_restart_and_client_follows_new_ports(tmp_path):
    with anna_core.LocalCluster(memory_threads=0, disk_threads=1, data_dir=str(tmp_path)) as c:
        kvs = c.client(timeout=1.0, retries=2)
        kvs.put("k", b"before")
        old = c.worker_addresses("disk-0")
        new = c.restart_node("disk-0")
        assert new != old
        assert kvs.get("k") == b"before"  # old address times out; routing gives the new one
        kvs.put("k", b"after")
        assert c.client().get("k") == b"after"


def test_startup_failures_are_typed_errors(tmp_path):
    with pytest.raises(anna_core.StartupError) as info:
        with anna_core.LocalCluster(startup_timeout=0.001):
            pass
    assert "routing did not report ready" in str(info.value)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data directory should be")
    with pytest.raises(anna_core.StartupError) as info:
        with anna_core.LocalCluster(memory_threads=0, disk_threads=1, data_dir=str(blocker)):
            pass
    assert "disk-0" in str(info.value)
    # The node process itself fails (its RocksDB directory is a file): stderr is quoted.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "disk-0").write_text("in the way")
    with pytest.raises(anna_core.StartupError) as info:
        with anna_core.LocalCluster(memory_threads=0, disk_threads=1,
                                    data_dir=str(tmp_path / "data")):
            pass
    assert "disk-0 exited with code 2" in str(info.value)
    assert "cannot start" in str(info.value) and "Not a directory" in str(info.value)


def test_reads_fail_over_to_a_live_replica_and_put_all_names_the_dead_one():
    with anna_core.LocalCluster(memory_threads=1, nodes=2, replication=(2, 1, 0, 1),
                                gossip_period_ms=50) as cluster:
        kvs = cluster.client(timeout=0.5, retries=1)
        keys = [f"failover-{i}" for i in range(10)]
        for key in keys:
            kvs.put_all(key, key.encode())
        dead = cluster.worker_addresses("memory-1")[0]
        cluster.stop_node("memory-1", kill=True)
        started = time.monotonic()
        assert [kvs.get(k) for k in keys] == [k.encode() for k in keys]
        # At most one timeout is paid: the silent worker is avoided afterwards.
        assert time.monotonic() - started < 0.5 * 3
        with pytest.raises(anna_core.Timeout) as info:
            kvs.put_all(keys[0], b"new")
        assert dead in str(info.value) and "PUT_ALL" in info.value.stage


def test_a_node_joining_later_takes_over_its_keys():
    with anna_core.LocalCluster(memory_threads=1, nodes=1, gossip_period_ms=50) as cluster:
        kvs = cluster.client(timeout=2.0)
        keys = [f"elastic-{i}" for i in range(40)]
        for key in keys:
            kvs.put(key, _core.SetLattice([key.encode()]))
        new_node = cluster.add_node("memory")
        assert new_node == "memory-1"
        moved = [k for k in keys
                 if kvs.addresses(k, refresh=True)[0] in cluster.worker_addresses(new_node)]
        assert moved, "no key moved to the new node"

        def all_readable():
            try:
                return all(kvs.get(k).reveal() == {k.encode()} for k in keys)
            except anna_core.KeyNotFound:
                return False  # handoff of a moved key still in flight

        poll_until(all_readable, 10.0, "every key readable after the join")


def test_set_replication_moves_a_key_between_tiers():
    with anna_core.LocalCluster(memory_threads=1, disk_threads=1, replication=(1, 1, 0, 1),
                                gossip_period_ms=50) as cluster:
        kvs = cluster.client(timeout=2.0, auth=cluster.cluster_auth)   # placement: cluster key
        memory, disk = cluster.worker_addresses("memory-0"), cluster.worker_addresses("disk-0")
        kvs.put("tiered", b"v")
        assert kvs.addresses("tiered") == memory

        def readable():
            try:
                return kvs.get("tiered") == b"v"
            except anna_core.KeyNotFound:
                return False  # still moving

        assert kvs.set_replication("tiered", memory=0, disk=1) == disk  # demote
        poll_until(readable, 5.0, "the key readable from the disk tier")
        assert kvs.set_replication("tiered", memory=1, disk=0) == memory  # promote
        poll_until(readable, 5.0, "the key readable from the memory tier again")
