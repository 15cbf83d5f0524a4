"""Deletes stay deleted on real processes: an older write that reaches a replica by gossip
after a delete does not bring the key back, and the delete reaches the replica that wrote.

Two memory nodes hold every key; a long gossip period keeps the delete and the concurrent
write apart long enough to interleave them by hand. Every wait polls for a condition with a
deadline; a marker key written after each operation, on the same replica, says when that
replica's gossip (sent in order on one socket) has been applied at the other replica.

The reader must already hold the marker: for `handoff_window_ms` after a node joins, a GET
that misses there reads the key through from the other replica (DESIGN.md "No spurious 'not
found'"), so a fresh marker can be seen before the gossip that carries the earlier write
(tests/test_anna_handoff.py reproduces this on WorkerCores).
"""
import uuid

import pytest

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from waiting import poll_until


@pytest.fixture(scope="module")
def slow_gossip():
    with anna_core.LocalCluster(memory_threads=1, nodes=2, replication=(2, 1, 0, 1),
                                gossip_period_ms=500) as c:
        yield c


def fresh(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def delete(raw, address, key):
    return raw.request(address, anna_pb2.DELETE, [anna_pb2.KeyTuple(key=key)]).tuples[0]


def applied_at(raw, writer, reader):
    """Wait until everything `writer` gossiped so far has been applied at `reader`: a fresh
    marker is first written at `reader` (so a GET there hits its store and never reads
    through), then raised at `writer`; only `writer`'s gossip, sent after what it accepted
    before, can raise it at `reader`."""
    marker = fresh("marker")
    assert raw.put(reader, marker, _core.MaxLattice(1)).error == anna_pb2.NO_ERROR
    assert raw.put(writer, marker, _core.MaxLattice(2)).error == anna_pb2.NO_ERROR
    poll_until(lambda: raw.get(reader, marker) == _core.MaxLattice(2), 10.0,
               f"{reader} receiving {writer}'s gossip")


def test_an_older_concurrent_write_does_not_resurrect_a_delete(slow_gossip, raw):
    raw = raw.as_cluster(slow_gossip.key_dir)
    key = fresh("tomb")
    a, b = slow_gossip.client(timeout=3.0).addresses(key)
    assert raw.put(a, key, _core.SetLattice([b"first"])).error == anna_pb2.NO_ERROR
    applied_at(raw, a, b)
    assert raw.get(b, key).reveal() == {b"first"}
    # b accepts a write, then a accepts a delete, before either has gossiped the other.
    assert raw.put(b, key, _core.SetLattice([b"concurrent"])).error == anna_pb2.NO_ERROR
    assert delete(raw, a, key).error == anna_pb2.NO_ERROR
    applied_at(raw, b, a)   # the older write reached a after its delete: ignored
    applied_at(raw, a, b)   # the delete reached b: applied
    assert raw.get(a, key) is None and raw.get(b, key) is None


def test_a_write_after_the_delete_is_kept_on_every_replica(slow_gossip, raw):
    raw = raw.as_cluster(slow_gossip.key_dir)
    key = fresh("after")
    a, b = slow_gossip.client(timeout=3.0).addresses(key)
    assert raw.put(a, key, _core.SetLattice([b"before"])).error == anna_pb2.NO_ERROR
    applied_at(raw, a, b)
    assert delete(raw, a, key).error == anna_pb2.NO_ERROR
    applied_at(raw, a, b)
    assert raw.get(b, key) is None
    assert raw.put(b, key, _core.SetLattice([b"after"])).error == anna_pb2.NO_ERROR
    applied_at(raw, b, a)
    assert raw.get(a, key).reveal() == {b"after"} and raw.get(b, key).reveal() == {b"after"}
