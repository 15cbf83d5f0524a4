"""A write a node cache acknowledges is held by every replica of its key: an acknowledged
causal commit (and a function's `lib.put`) survives the crash of every replica but one, and
no surviving version depends on one that was lost. Real processes.

The trigger is deterministic: Anna's gossip period is ten minutes, so a write reaches only
the replicas the writer itself sent it to; right after the acknowledgement every replica but
one is killed (SIGKILL), keeping one that lacks a write if there is such a replica. A node
cache that acknowledged after one replica (write quorum "one") fails this every time.

The write quorum itself (`anna_core.Client.put(quorum=...)`, `NodeConfig.write_quorum`): with
a dead replica still in the placement, "all" fails within the deadline with a Timeout naming
the key and the dead replica, a quorum the live replicas meet succeeds, and "all" succeeds
again once routing has removed the dead node.
"""
import time

import pytest

import anna_core
import cloudburst
from executor.config import NodeConfig
from hydrocache import vclock
from hydrocache.version import Version

CAUSAL_KEYS = ("durable-a", "durable-b")     # written by one commit: mutually dependent
LWW_KEY = "durable-plain"
KVS_NODES = 3
KVS_OPTIONS = {"gossip_period_ms": 600_000,  # no gossip during the test
               "handoff_window_ms": 1,       # a replica missing a key does not read through
               "heartbeat_period": 0.5, "heartbeat_timeout": 2.0}


def write_both(lib, value):
    for key in CAUSAL_KEYS:
        lib.put(key, value)
    return value


def write_plain(lib, value):
    lib.put(LWW_KEY, value)
    return value


def nodes_holding(cluster, anna, key):
    """The KVS node ids whose workers hold `key` (read from each replica, unmerged)."""
    addresses = {address for address, _ in anna.get_replicas(key)}
    return {n for n in cluster.kvs.node_ids
            if addresses & set(cluster.kvs.worker_addresses(n))}


def survivors_version(anna, key):
    """`key`'s version merged over the replicas routing still lists (None: none holds it)."""
    versions = [Version.from_lattice(key, lattice) for _, lattice in anna.get_replicas(key)]
    out = None
    for v in versions:
        out = v if out is None else Version.from_lattice(key, out.lattice.merge(v.lattice))
    return out


@pytest.mark.slow
def test_acknowledged_writes_survive_the_crash_of_every_replica_but_one():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1, kvs_nodes=KVS_NODES,
                                 kvs_replication=(KVS_NODES, 1, 0, 1),
                                 kvs_options=KVS_OPTIONS) as c:
        client = c.client(timeout=20)
        client.register(write_both, "durable_write_both")
        client.register(write_plain, "durable_write_plain")
        fut = client.call("durable_write_both", 7, consistency="causal", protocol="ct")
        assert fut.get(timeout=20) == 7
        committed = fut.causal.writes
        assert set(committed) == set(CAUSAL_KEYS)
        assert client.call("durable_write_plain", 8).get(timeout=20) == 8

        # right after the acknowledgements: who holds what
        anna = c.kvs.client(timeout=1, retries=5, auth=c.cluster_auth)
        checked = CAUSAL_KEYS + (LWW_KEY,)
        holders = {k: nodes_holding(c, anna, k) for k in checked}
        nodes = sorted(c.kvs.node_ids)
        # the adversary keeps the replica that loses the most: one holding one causal write
        # but not the other (a dangling dependency), and lacking the plain write; with one
        # copy of each write on 3 nodes such a replica always exists
        def losses(n):
            held = [n in holders[k] for k in CAUSAL_KEYS]
            return (any(held) and not all(held), n not in holders[LWW_KEY], not all(held))
        survivor = max(nodes, key=losses)
        for n in nodes:
            if n != survivor:
                c.kvs.kill_node(n)

        # every acknowledged write is readable from the survivor, at its committed clock,
        # and whatever a surviving version depends on survived too
        problems = []
        for key in CAUSAL_KEYS:
            v = survivors_version(anna, key)
            if v is None or not vclock.supersedes(v.vc, committed[key]):
                problems.append(f"{key}, acknowledged at {committed[key]}, is lost: the "
                                f"survivor holds {v.vc if v else 'nothing'}")
                continue
            for dep, clock in v.deps.items():
                d = survivors_version(anna, dep)
                if d is None or not vclock.supersedes(d.vc, clock):
                    problems.append(f"{key} survived but depends on {dep} at {clock}, which "
                                    f"the survivor holds at {d.vc if d else 'nothing'}")
        try:
            plain = client.get(LWW_KEY)
        except cloudburst.ObjectNotFound:
            plain = None
        if plain != 8:
            problems.append(f"{LWW_KEY} (lib.put 8, acknowledged) reads {plain!r}")
        assert not problems, (f"after killing every replica but {survivor} (right after the "
                              f"acknowledgements, holders were {holders}): {problems}")
        assert client.get(CAUSAL_KEYS[0], consistency="causal") == 7
        # and the promise itself: each write was on every replica when it was acknowledged
        assert all(holders[k] == set(nodes) for k in checked), holders


@pytest.mark.slow
def test_write_quorum_with_a_dead_replica_fails_fast_naming_it_then_succeeds_once_removed():
    # routing's failure detector is slow here, so the dead node stays in the placement first
    with anna_core.LocalCluster(nodes=2, replication=(2, 1, 0, 1), heartbeat_period=0.25,
                                heartbeat_timeout=4.0) as kvs:
        dead = kvs.node_ids[1]
        dead_address = kvs.worker_addresses(dead)[0]
        kvs.kill_node(dead)
        quick = kvs.client(timeout=0.3, retries=1)
        started = time.monotonic()
        with pytest.raises(anna_core.Timeout) as failed:
            quick.put("quorum-k", b"v1", quorum="all")
        assert time.monotonic() - started < 3.0          # the deadline, not a hang
        assert failed.value.key == "quorum-k" and failed.value.address == dead_address
        assert "quorum-k" in str(failed.value) and dead_address in str(failed.value)
        # a quorum the live replica meets is acknowledged at once
        quick.put("quorum-k", b"v2", quorum=1)
        assert quick.get("quorum-k") == b"v2"
        # once routing has removed the dead node, "all" re-resolves the placement and succeeds
        patient = kvs.client(timeout=1.0, retries=9)
        patient.put("quorum-k", b"v3", quorum="all")
        assert patient.get_all("quorum-k") == b"v3"


@pytest.mark.parametrize("good, expected", [("one", "one"), ("all", "all"), (2, 2), ("3", 3)])
def test_write_quorum_knob_accepts(good, expected):
    assert anna_core.check_write_quorum(good) == expected
    assert NodeConfig(node_id="n", kvs_address="tcp://x:1", write_quorum=good).write_quorum \
        == expected


@pytest.mark.parametrize("bad", ["most", 0, -1, True, 1.5, None])
def test_write_quorum_knob_refuses(bad):
    with pytest.raises(ValueError, match="write quorum"):
        NodeConfig(node_id="n", kvs_address="tcp://x:1", write_quorum=bad)
    with pytest.raises(ValueError, match="write quorum"):
        cloudburst.LocalCluster(write_quorum=bad)


def test_default_is_every_replica_and_kvs_options_cannot_override_the_clusters_own():
    assert NodeConfig(node_id="n", kvs_address="tcp://x:1").write_quorum == "all"
    with pytest.raises(ValueError, match="replication"):
        cloudburst.LocalCluster(kvs_options={"replication": (2, 1, 0, 1)})
