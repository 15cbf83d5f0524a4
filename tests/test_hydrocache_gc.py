"""Dependency-metadata GC (4.2.3): the pure frontier and cut collection, and a GC round run by
the scheduler's coordinator against real node caches and Anna."""
from __future__ import annotations

import time
import uuid

import zmq

import anna_core
import cloudburst
from runtime.auth import credentials_of
from runtime.sockets import PushCache, bind_pull
from hydro_proto import cloudburst_pb2 as pb
from hydrocache.cut import StrictCausalCut
from hydrocache.gc import frontier_from_reports
from hydrocache.version import Version
from scheduler.gc import GcCoordinator

from test_hydrocache_service import Driver, put_version


def test_frontier_is_the_meet_of_replicas_and_every_cache_clock():
    reports = [([("a", {"x": 3})], ["a", "b"]), ([("a", {"x": 1, "y": 2})], ["a"])]
    replicas = {"a": [{"x": 5, "y": 5}, {"x": 4, "y": 2}], "c": [{"z": 1}]}
    # a: min over replicas and caches; b: no replica has it -> left out; c: nobody depends on it
    assert frontier_from_reports(reports, replicas) == {"a": {"x": 1}}


def test_cut_collect_drops_superseded_dependencies_and_stays_a_cut():
    cut = StrictCausalCut()
    cut.offer(Version.new("a", {"w": 2}, {}, [b"a"]))
    cut.offer(Version.new("b", {"w": 3}, {"a": {"w": 2}, "c": {"w": 9}}, [b"b"]))
    assert "b" not in cut                          # waits for c
    assert cut.collect({"a": {"w": 2}, "c": {"w": 9}}) == 1
    assert "b" in cut and cut.get("b").deps == {}  # c's dependency was collected: exposable
    assert cut.get("b").vc == {"w": 3} and cut.get("b").values == (b"b",)
    assert cut.evict("a") == {"a"}                 # b no longer depends on a


def test_a_gc_round_over_real_caches_shrinks_their_metadata():
    with cloudburst.LocalCluster(executor_nodes=2, executors_per_node=1) as cluster:
        kvs = cluster.kvs.client()
        d = Driver(cluster.cluster_auth)
        caches = [p.info["cache_address"] for p in cluster._nodes]
        p = uuid.uuid4().hex[:6]
        a, b = f"{p}a", f"{p}b"

        def deps_of_b(cache: str, attempt: str):
            r, _ = d.ask(cache, pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=attempt, keys=[a, b],
                                                dag_keys=[a, b], dag_keys_known=True))
            assert r.status == pb.OK, r.message
            entry = {e.key: e for e in r.entries}[b]
            return {dep.key: dict(dep.vc) for dep in entry.deps}

        put_version(kvs, a, {"w1": 1}, value=b"a1")
        put_version(kvs, b, {"w2": 1}, {a: {"w1": 1}}, value=b"b1")
        assert deps_of_b(caches[0], f"{p}#old") == {a: {"w1": 1}}   # this call holds a1
        put_version(kvs, a, {"w1": 2}, value=b"a2")
        put_version(kvs, b, {"w2": 2}, {a: {"w1": 2}}, value=b"b2")
        assert deps_of_b(caches[1], f"{p}#new") == {a: {"w1": 2}}
        ctx = d.ctx                       # the driver's: it holds the cluster's keys
        creds = credentials_of(d.security)
        pull, address = bind_pull(ctx, auth=creds)
        push = PushCache(ctx, auth=creds)
        gc = GcCoordinator(ctx, cluster.kvs.routing_address, lambda: caches, period=60,
                           auth=creds)
        try:
            # cache 0's call in flight read a1: the frontier of a stays at a1, so b2 keeps
            # its dependency on a2 (dropping it would let a reader pair b2 with a1)
            gc.round(pull, address, push, kvs)
            assert deps_of_b(caches[1], f"{p}#new2") == {a: {"w1": 2}}
            d.ask(caches[0], pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id=f"{p}#old"))
            # once nothing older than a2 is held anywhere (cache 0's cut is refreshed by
            # Anna's push), a round drops the dependency everywhere
            deadline = time.monotonic() + 10
            while deps_of_b(caches[1], f"{p}#{time.monotonic()}") != {}:
                assert time.monotonic() < deadline, "the GC frontier never reached a2"
                gc.round(pull, address, push, kvs)
            assert deps_of_b(caches[0], f"{p}#after") == {}
            # a cache that does not answer makes the round give up (consensus needs everyone)
            gc.caches = lambda: caches + ["tcp://127.0.0.1:1"]
            gc.timeout = 0.3
            assert gc.round(pull, address, push, kvs) == 0 and "did not answer" in gc.last_error
        finally:
            push.close()
            pull.close(0)
            d.close()
            kvs.close()
