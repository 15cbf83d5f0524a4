"""The registry over a KVS (scheduler.registry), with an in-memory KVS below the unit level:
lookups cache and subscribe, deletions are tombstones, pushed updates refresh the cache."""
import anna_core

from hydro_proto import cloudburst_pb2 as pb
from scheduler.registry import Registry


class MemoryKvs:
    """get/put/subscribe like anna_core.Client, in memory; merges lattices like the KVS."""

    def __init__(self):
        self.data, self.subscriptions = {}, []

    def get(self, key):
        if key not in self.data:
            raise anna_core.KeyNotFound(f"{key} not found", key=key)
        value = self.data[key]
        return value.reveal() if isinstance(value, anna_core.LWWLattice) else value

    def put(self, key, value):
        if isinstance(value, bytes):
            value = anna_core.LWWLattice(len(self.subscriptions) + len(self.data) + 1, value)
        old = self.data.get(key)
        self.data[key] = value if old is None or isinstance(value, anna_core.LWWLattice) else old.merge(value)

    put_all = put          # one replica: every replica has acknowledged

    def subscribe(self, key, address):
        self.subscriptions.append((key, address))


def dag_record(name, functions, connections=()):
    r = pb.DagRecord(name=name, functions=functions, version="v1")
    for s, d in connections:
        r.connections.add(source=s, target=d)
    return r


def test_a_second_registry_sees_registrations_and_subscribes():
    kvs = MemoryKvs()
    a, b = Registry(kvs, "tcp://a"), Registry(kvs, "tcp://b")
    a.put_function(pb.FunctionRecord(name="f", body=b"x", version="1"))
    a.put_dag(dag_record("d", ["f"]))
    assert b.function("f").version == "1"
    assert b.dag("d").functions == ["f"]
    assert ("__cloudburst/dag/d", "tcp://b") in kvs.subscriptions
    assert b.names() == (["f"], ["d"])
    assert b.function("missing") is None and b.dag("missing") is None


def test_delete_is_a_tombstone_that_pushed_updates_carry():
    kvs = MemoryKvs()
    a, b = Registry(kvs, "tcp://a"), Registry(kvs, "tcp://b")
    a.put_function(pb.FunctionRecord(name="f", version="1"))
    a.put_dag(dag_record("d", ["f"]))
    assert b.dag("d") is not None            # b caches it
    assert a.delete_dag("d") and not a.delete_dag("d")
    assert a.dag("d") is None
    assert b.dag("d") is not None            # stale until Anna pushes the change ...
    b.on_update("__cloudburst/dag/d", kvs.get("__cloudburst/dag/d"))
    assert b.dag("d") is None                # ... which the scheduler applies
    assert b.names() == (["f"], [])


def test_pushed_function_update_replaces_the_cached_version():
    kvs = MemoryKvs()
    a, b = Registry(kvs, "tcp://a"), Registry(kvs, "tcp://b")
    a.put_function(pb.FunctionRecord(name="f", version="1"))
    assert b.function("f").version == "1"
    a.put_function(pb.FunctionRecord(name="f", version="2"))
    b.on_update("__cloudburst/fn/f", kvs.get("__cloudburst/fn/f"))
    assert b.function("f").version == "2"
