"""The node caches' causal operations, driven directly over ZeroMQ (real processes on loopback).

Two executor nodes on one Anna; the test plays worker, scheduler and Anna writer itself, so
each protocol step (local cut update, dependency fetching, OPT bind across caches, CON
snapshot pieces and fetches, commits, temporary-version release) is checked on its own.
"""
from __future__ import annotations

import time
import uuid
from typing import Dict, List, Tuple

import pytest
import zmq

import anna_core
import cloudburst
from runtime.auth import Security, credentials_of
from runtime.framing import parse
from runtime.sockets import PushCache, bind_pull
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from hydrocache import versionset as vs
from hydrocache.version import Version


class Driver:
    """Sends CacheRequests to node caches and waits (bounded) for the matching reply."""

    def __init__(self, auth=None) -> None:
        self.ctx = zmq.Context()
        # node caches admit only the cluster's key: the driver plays a worker and a scheduler
        self.security = Security.start(self.ctx, auth)
        creds = credentials_of(self.security)
        self.pull, self.address = bind_pull(self.ctx, auth=creds)
        self.push = PushCache(self.ctx, auth=creds)

    def close(self) -> None:
        self.push.close()
        self.pull.close(0)
        if self.security is not None:
            self.security.stop()
        self.ctx.term()

    def ask(self, cache: str, req: pb.CacheRequest, timeout: float = 10.0
            ) -> Tuple[pb.CacheResponse, List[bytes]]:
        req.request_id = uuid.uuid4().hex
        req.response_address = self.address
        if not req.timeout:
            req.timeout = timeout
        self.push.send(cache, "cache", req)
        deadline = time.monotonic() + timeout + 2
        while time.monotonic() < deadline:
            if not self.pull.poll(100):
                continue
            frames = self.pull.recv_multipart()
            _, payload = parse(frames[0])
            response = pb.CacheResponse.FromString(payload)
            if response.request_id == req.request_id:
                return response, frames[1:]
        raise AssertionError(f"no reply from {cache} to {pb.CacheOp.Name(req.op)}")


@pytest.fixture(scope="module")
def world():
    with cloudburst.LocalCluster(executor_nodes=2, executors_per_node=1) as cluster:
        kvs = cluster.kvs.client()
        driver = Driver(cluster.cluster_auth)
        caches = [p.info["cache_address"] for p in cluster._nodes]
        try:
            yield kvs, driver, caches
        finally:
            driver.close()
            kvs.close()


def put_version(kvs, key: str, vc: Dict[str, int], deps=None, value: bytes = b"v") -> Version:
    v = Version.new(key, vc, deps or {}, [value])
    kvs.put(key, v.lattice)
    return v


def values_of(response: pb.CacheResponse, frames: List[bytes]) -> Dict[str, Tuple[dict, list]]:
    out, i = {}, 0
    for e in response.entries:
        if e.found:
            out[e.key] = (dict(e.version.vc), frames[i:i + e.value_count])
            i += e.value_count
    return out


def test_ct_read_builds_a_snapshot_and_missing_keys_are_not_found(world):
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    put_version(kvs, f"{p}a", {"w1": 1}, value=b"a1")
    put_version(kvs, f"{p}b", {"w2": 1}, {f"{p}a": {"w1": 1}}, value=b"b1")
    req = pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=f"{p}#0",
                          keys=[f"{p}b", f"{p}a", f"{p}none"], dag_keys=[f"{p}a", f"{p}b", f"{p}none"],
                          dag_keys_known=True)
    response, frames = d.ask(caches[0], req)
    assert response.status == pb.OK, response.message
    got = values_of(response, frames)
    assert got[f"{p}a"] == ({"w1": 1}, [b"a1"])
    assert got[f"{p}b"] == ({"w2": 1}, [b"b1"])
    assert f"{p}none" not in got
    # the snapshot is fixed: a newer version of a does not change what the attempt reads
    put_version(kvs, f"{p}a", {"w1": 2}, value=b"a2")
    response, frames = d.ask(caches[0], pb.CacheRequest(
        op=pb.CAUSAL_READ, attempt_id=f"{p}#0", keys=[f"{p}a"], dag_keys=[f"{p}a"],
        dag_keys_known=True))
    assert values_of(response, frames)[f"{p}a"] == ({"w1": 1}, [b"a1"])


def test_a_version_waits_for_its_dependencies_and_the_wait_is_bounded(world):
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    put_version(kvs, f"{p}b", {"w2": 1}, {f"{p}a": {"w1": 5}}, value=b"b")
    req = pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=f"{p}#0", keys=[f"{p}b"],
                          dag_keys=[f"{p}b"], dag_keys_known=True, timeout=0.5)
    response, _ = d.ask(caches[1], req, timeout=0.5)
    assert response.status == pb.TIMEOUT
    assert "local cut update" in response.stage and f"{p}a" in response.stage
    # once the dependency is in Anna the key is exposed (fetched recursively)
    put_version(kvs, f"{p}a", {"w1": 5}, value=b"a")
    req.attempt_id = f"{p}#1"
    req.timeout = 5.0
    response, frames = d.ask(caches[1], req)
    assert response.status == pb.OK, response.message
    assert values_of(response, frames)[f"{p}b"][1] == [b"b"]


def test_opt_bind_repairs_from_the_upstream_cache(world):
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    a, b = f"{p}a", f"{p}b"
    put_version(kvs, a, {"w1": 1}, value=b"a1")
    put_version(kvs, b, {"w2": 1}, value=b"b1")
    attempt = f"{p}#0"
    dag = [a, b]
    # cache 1 caches the old a first
    r1, _ = d.ask(caches[1], pb.CacheRequest(op=pb.CAUSAL_BIND, attempt_id=f"{p}#warm", keys=[a],
                                             dag_keys=dag, dag_keys_known=True))
    assert r1.status == pb.OK and not r1.abort
    # a newer a and a b depending on it; cache 0 binds the new b (and fetches the new a)
    put_version(kvs, a, {"w1": 2}, value=b"a2")
    put_version(kvs, b, {"w2": 2}, {a: {"w1": 2}}, value=b"b2")
    r0, frames0 = d.ask(caches[0], pb.CacheRequest(op=pb.CAUSAL_BIND, attempt_id=attempt,
                                                   keys=[b], dag_keys=dag, dag_keys_known=True))
    assert r0.status == pb.OK and not r0.abort, r0.message
    assert values_of(r0, frames0)[b][1] == [b"b2"]
    s_u = vs.from_proto(r0.context.snapshot)
    assert s_u[a].vc == {"w1": 2} and caches[0] in s_u[a].holders
    # downstream on cache 1, which still has a at {w1: 1} unless a push refreshed it: either
    # way it must bind a version of a that supersedes {w1: 2}
    r1, frames1 = d.ask(caches[1], pb.CacheRequest(
        op=pb.CAUSAL_BIND, attempt_id=attempt, keys=[a], dag_keys=dag, dag_keys_known=True,
        upstreams=[r0.context]))
    assert r1.status == pb.OK and not r1.abort, (r1.message, r1.abort_reason)
    assert values_of(r1, frames1)[a] == ({"w1": 2}, [b"a2"])
    # released temporary versions are gone for remote fetchers
    d.ask(caches[0], pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id=attempt))
    r, _ = d.ask(caches[0], pb.CacheRequest(op=pb.CAUSAL_TEMP_GET, attempt_id=attempt,
                                            versions=vs.to_proto({a: s_u[a]})))
    assert not r.entries


def test_con_snapshot_pieces_fetch_and_read(world):
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    a, b = f"{p}a", f"{p}b"
    put_version(kvs, a, {"w1": 1}, value=b"a1")
    put_version(kvs, b, {"w2": 1}, value=b"b1")
    warm, _ = d.ask(caches[1], pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=f"{p}#w", keys=[a],
                                               dag_keys=[a], dag_keys_known=True))
    put_version(kvs, a, {"w1": 2}, value=b"a2")
    put_version(kvs, b, {"w2": 2}, {a: {"w1": 2}}, value=b"b2")
    attempt = f"{p}#c"
    from hydrocache.protocols import Piece, distributed_snapshot
    pieces = {}
    for fn, cache, keys in (("f", caches[1], [a]), ("g", caches[0], [b])):
        r, _ = d.ask(cache, pb.CacheRequest(op=pb.CAUSAL_SNAPSHOT, attempt_id=attempt, keys=keys,
                                            dag_keys=[a, b], dag_keys_known=True))
        assert r.status == pb.OK, r.message
        pieces[fn] = {pc.local.key: Piece(vs.from_proto([pc.local])[pc.local.key],
                                          vs.from_proto(pc.cut)) for pc in r.pieces}
    snapshot, fetches = distributed_snapshot(pieces)
    assert snapshot[a].vc == {"w1": 2}
    for fn, cache in (("f", caches[1]), ("g", caches[0])):
        if fetches.get(fn):
            r, _ = d.ask(cache, pb.CacheRequest(op=pb.CAUSAL_FETCH, attempt_id=attempt,
                                                versions=vs.to_proto(fetches[fn])))
            assert r.status == pb.OK, r.message
    r, frames = d.ask(caches[1], pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=attempt, keys=[a],
                                                 dag_keys=[a, b], dag_keys_known=True))
    assert values_of(r, frames)[a] == ({"w1": 2}, [b"a2"])


def test_commit_writes_to_anna_and_exposes_mutually_dependent_writes(world):
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    a, b = f"{p}a", f"{p}b"
    va = Version.new(a, {"ex": 1}, {b: {"ex": 1}}, [b"A"])
    vb = Version.new(b, {"ex": 1}, {a: {"ex": 1}}, [b"B"])
    req = pb.CacheRequest(op=pb.CAUSAL_COMMIT, attempt_id=f"{p}#0", keys=[a, b])
    for v in (va, vb):
        req.writes.append(anna_pb2.KeyTuple(key=v.key, lattice_type=anna_pb2.MULTI_CAUSAL,
                                            payload=v.serialize()).SerializeToString())
    r, _ = d.ask(caches[0], req)
    assert r.status == pb.OK, r.message
    assert kvs.get_lattice(a).reveal() == [b"A"]
    # another cache reads them together: the mutual dependency resolves in one cut update
    r, frames = d.ask(caches[1], pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=f"{p}#1",
                                                 keys=[a, b], dag_keys=[a, b], dag_keys_known=True))
    assert r.status == pb.OK, r.message
    assert {k: v[1] for k, v in values_of(r, frames).items()} == {a: [b"A"], b: [b"B"]}


def test_lww_value_read_causally_is_a_clear_error_and_the_cache_keeps_serving(world):
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    kvs.put(f"{p}plain", b"bytes")
    r, _ = d.ask(caches[0], pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=f"{p}#0",
                                            keys=[f"{p}plain"], dag_keys=[f"{p}plain"],
                                            dag_keys_known=True))
    assert r.status == pb.EXECUTION_ERROR and "not a causal value" in r.message
    d.push.socket(caches[0]).send(b"\x10garbage")   # kind "cache", unparsable payload
    put_version(kvs, f"{p}ok", {"w": 1}, value=b"fine")
    r, frames = d.ask(caches[0], pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=f"{p}#1",
                                                 keys=[f"{p}ok"], dag_keys=[f"{p}ok"],
                                                 dag_keys_known=True))
    assert values_of(r, frames)[f"{p}ok"][1] == [b"fine"]


def test_opt_bind_of_a_key_anna_does_not_have_is_not_found(world):
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    put_version(kvs, f"{p}a", {"w": 1}, value=b"a")
    r, frames = d.ask(caches[0], pb.CacheRequest(op=pb.CAUSAL_BIND, attempt_id=f"{p}#0",
                                                 keys=[f"{p}a", f"{p}missing"],
                                                 dag_keys=[f"{p}a", f"{p}missing"],
                                                 dag_keys_known=True))
    assert r.status == pb.OK and not r.abort, r.message
    got = values_of(r, frames)
    assert got[f"{p}a"][1] == [b"a"] and f"{p}missing" not in got


def test_a_pushed_version_waiting_for_an_unread_dependency_is_exposed(world):
    """Refresh: Anna pushes a new `a` that depends on `b`, which this cache never read; the
    cache fetches `b` itself instead of showing the old `a` until someone reads `b`."""
    kvs, d, caches = world
    p = uuid.uuid4().hex[:6]
    a, b = f"{p}a", f"{p}b"
    put_version(kvs, a, {"w": 1}, value=b"a1")
    read = lambda attempt: values_of(*d.ask(caches[0], pb.CacheRequest(
        op=pb.CAUSAL_READ, attempt_id=attempt, keys=[a], dag_keys=[a], dag_keys_known=True)))
    assert read(f"{p}#0")[a][1] == [b"a1"]          # cached and subscribed
    put_version(kvs, b, {"w": 1}, value=b"b1")
    put_version(kvs, a, {"w": 2}, {b: {"w": 1}}, value=b"a2")
    deadline = time.monotonic() + 5                 # Anna pushes once per gossip period
    n = 0
    while read(f"{p}#{n + 1}")[a][1] != [b"a2"]:
        n += 1
        assert time.monotonic() < deadline, "the pushed version stayed pending"
