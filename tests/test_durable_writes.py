"""A write a node cache acknowledges is held by every replica of its key: an acknowledged
causal commit (and a function's `lib.put`) survives the crash of every replica but one, and
no surviving version depends on one that was lost. Real processes.

The trigger is deterministic: Anna's gossip period is ten minutes, so a write reaches only
the replicas the writer itself sent it to; right after the acknowledgement every replica but
one is killed (SIGKILL), keeping one that lacks a write if there is such a replica. A node
cache that acknowledged after one replica (write quorum "one") fails this every time.
"""
import cloudburst
from hydrocache import vclock
from hydrocache.version import Version

CAUSAL_KEYS = ("durable-a", "durable-b")     # written by one commit: mutually dependent
LWW_KEY = "durable-plain"
KVS_NODES = 3
KVS_OPTIONS = {"gossip_period_ms": 600_000,  # no gossip during the test
               "handoff_window_ms": 1,       # a replica missing a key does not read through
               "heartbeat_period": 0.25, "heartbeat_timeout": 1.0}


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
