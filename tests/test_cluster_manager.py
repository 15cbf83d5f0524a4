"""The cluster manager on a real (authenticated) LocalCluster, and `apply` on fakes.

Every wait polls the manager with a deadline (tests/waiting.py); nothing sleeps blindly.
Heartbeats are fast so joins and leaves settle quickly.
"""
import logging
import time

import pytest

import anna_core
from anna_core.autoscale import AddNodes, Note, RemoveNode, SetReplication
from anna_core.autoscale.manager import apply
from anna_core.autoscale.spawner import local_pool
from pools import FAILED, READY, REMOVED, LastNode, NodeLeaving, UnknownNode
from anna_core.config import Replication
from waiting import poll_until

FAST = dict(heartbeat_period=0.25, heartbeat_timeout=1.0, gossip_period_ms=50)


@pytest.fixture
def cluster():
    with anna_core.LocalCluster(memory_threads=1, nodes=2, **FAST) as c:
        assert c.client_auth is not None          # authenticated: the default
        yield c


def put_keys(cluster, n=30):
    client = cluster.client()
    keys = {f"k{i}": f"v{i}".encode() for i in range(n)}
    for k, v in keys.items():
        client.put_all(k, v)
    return client, keys


def assert_readable(client, keys):
    for k, v in keys.items():
        assert client.get(k) == v, k


def wait_events(manager, want, timeout=30.0):
    """Poll until events of every (kind, node_id) in `want` arrived; returns them all."""
    seen = []

    def done():
        seen.extend(manager.poll())
        return want <= {(e.kind, e.node_id) for e in seen}
    poll_until(done, timeout, f"events {sorted(want)}")
    return seen


def test_add_with_provisioning_delay_is_pending_then_running(cluster):
    client, keys = put_keys(cluster)
    manager = local_pool(cluster, provisioning_delay=1.0)
    assert manager.nodes("memory") == ["memory-0", "memory-1"]
    start = time.monotonic()
    ids = manager.add_nodes("memory", 1)
    assert ids == ["memory-2"]
    assert manager.pending("memory") == ["memory-2"] and manager.pending("disk") == []
    assert manager.poll() == []                        # booting: nothing spawned yet
    assert "memory-2" not in cluster.node_ids
    events = wait_events(manager, {(READY, "memory-2")})
    assert time.monotonic() - start >= 1.0
    assert [e.kind for e in events] == [READY]
    assert manager.pending("memory") == []
    assert manager.nodes("memory") == ["memory-0", "memory-1", "memory-2"]
    assert_readable(client, keys)


def test_remove_chosen_node_keeps_keys_and_refuses_bad_removals(cluster):
    client, keys = put_keys(cluster)
    assert cluster.replication.memory_global == 2      # both nodes hold every key
    manager = local_pool(cluster)
    with pytest.raises(UnknownNode, match="memory-7"):
        manager.remove_node("memory", "memory-7")
    with pytest.raises(UnknownNode, match="memory-0.*memory node"):
        manager.remove_node("disk", "memory-0")
    manager.remove_node("memory", "memory-1")
    assert manager.leaving("memory") == ["memory-1"] and manager.nodes("memory") == ["memory-0"]
    with pytest.raises(NodeLeaving, match="memory-1"):
        manager.remove_node("memory", "memory-1")
    with pytest.raises(LastNode, match="memory-0") as info:
        manager.remove_node("memory", "memory-0")
    assert info.value.node_id == "memory-0" and info.value.pool == "memory"
    events = wait_events(manager, {(REMOVED, "memory-1")})
    assert [e.kind for e in events] == [REMOVED]
    assert not cluster.is_running("memory-1") and manager.leaving("memory") == []
    assert_readable(client, keys)
    with pytest.raises(UnknownNode, match="memory-1.*not running"):
        manager.remove_node("memory", "memory-1")


def test_apply_carries_out_engine_actions(cluster, caplog):
    client, keys = put_keys(cluster, 10)
    kvs = cluster.client(auth=cluster.cluster_auth)
    manager = local_pool(cluster)
    actions = [SetReplication("k1", Replication(1, 1, 0, 1), "k1 cooled (test)"),
               AddNodes("memory", 1, "latency above the SLO (test)"),
               RemoveNode("memory", "memory-1", "memory-1 idle (test)"),
               Note("held back: grace period (test)")]
    with caplog.at_level(logging.INFO, logger="anna.autoscale.manager"):
        outcomes = apply(actions, manager, kvs)
    assert [o.ok for o in outcomes] == [True, True, True, True], outcomes
    assert len(outcomes[0].result) == 1 and outcomes[1].result == ["memory-2"]
    text = caplog.text
    for reason in ("k1 cooled", "latency above the SLO", "memory-1 idle", "grace period"):
        assert reason in text
    wait_events(manager, {(READY, "memory-2"), (REMOVED, "memory-1")})
    assert manager.nodes("memory") == ["memory-0", "memory-2"]
    assert len(kvs.addresses("k1", refresh=True)) == 1
    assert_readable(client, keys)


# ---- apply's rules, on fakes (no processes) -----------------------------------------------


class FakeManager:
    def __init__(self):
        self.calls = []

    def add_nodes(self, tier, count):
        self.calls.append(("add", tier, count))
        return [f"{tier}-new"]

    def remove_node(self, tier, node_id):
        self.calls.append(("remove", tier, node_id))
        if node_id == "gone":
            raise UnknownNode(f"no node {node_id}", node_id=node_id, pool=tier)


class FailingKVS:
    def set_replication(self, key, **vector):
        raise anna_core.NoNodes(f"set_replication {key!r}: no node", key=key)


def test_apply_skips_removals_after_a_failed_replication_cut():
    manager = FakeManager()
    actions = [SetReplication("a", Replication(1, 1, 0, 1), "cut before removal"),
               RemoveNode("memory", "memory-1", "idle"), AddNodes("disk", 2, "full")]
    outcomes = apply(actions, manager, FailingKVS())
    assert [(o.ok, o.skipped) for o in outcomes] == [(False, False), (False, True), (True, False)]
    assert isinstance(outcomes[0].error, anna_core.NoNodes)
    assert manager.calls == [("add", "disk", 2)]


def test_apply_records_typed_errors_and_needs_kvs_for_replication():
    manager = FakeManager()
    outcomes = apply([RemoveNode("memory", "gone", "x"), AddNodes("memory", 1, "y")], manager)
    assert isinstance(outcomes[0].error, UnknownNode) and outcomes[0].error.node_id == "gone"
    assert outcomes[1].ok
    with pytest.raises(ValueError, match="kvs"):
        apply([SetReplication("a", Replication(), "z")], manager)
    assert manager.calls == [("remove", "memory", "gone"), ("add", "memory", 1)]


def test_failed_start_and_failed_leave_are_reported(cluster, monkeypatch):
    manager = local_pool(cluster)
    manager.add_nodes("disk", 1)

    def no_boot(*args, **kwargs):
        raise OSError("no room to boot")
    monkeypatch.setattr(cluster, "spawn_node", no_boot)
    events = manager.poll()
    assert [(e.kind, e.node_id) for e in events] == [(FAILED, "disk-0")]
    assert "no room to boot" in events[0].detail and manager.pending("disk") == []

    def stuck(node_id, timeout=None):
        raise anna_core.LeaveFailed(f"node {node_id} left with exit status 4", node_id=node_id,
                                    status=4)
    monkeypatch.setattr(cluster, "remove_node", stuck)
    manager.remove_node("memory", "memory-1")
    events = wait_events(manager, {(FAILED, "memory-1")})
    assert isinstance(events[0].error, anna_core.LeaveFailed)
    assert events[0].error.node_id == "memory-1" and "memory-1" in events[0].detail
    assert manager.leaving("memory") == []
