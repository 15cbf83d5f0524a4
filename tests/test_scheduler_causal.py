"""The scheduler's MTCC coordinator (scheduler/causal.py) and CT placement, without sockets."""
import random

import pytest

from hydro_proto import cloudburst_pb2 as pb
from scheduler.causal import (AbortAttempt, CacheSend, CausalCall, Fail, Finished, SimResult,
                              StartAttempt, topological_order)
from scheduler.policy import WorkerView, choose_one_node

C1, C2 = "tcp://cache1", "tcp://cache2"


class FakeEngine:
    """Algorithm 10 / simulation stand-ins: fetch sets and the simulation are given."""

    def __init__(self, fetches=None, sim=None):
        self.fetches = fetches or {}
        self.sim = sim or SimResult(False)
        self.distributed_calls = []
        self.simulate_calls = []

    def distributed(self, pieces):
        self.distributed_calls.append(pieces)
        return self.fetches

    def simulate(self, order, upstreams, pieces):
        self.simulate_calls.append((list(order), pieces))
        return self.sim


def make(protocol, engine=None, max_retries=10, timeout=10.0, functions=("f", "g"),
         upstreams=None, keys=None, caches=None):
    return CausalCall("c1", protocol, list(functions),
                      upstreams if upstreams is not None else {"g": ["f"]},
                      keys if keys is not None else {"f": ["a"], "g": ["b"]},
                      caches or {"f": C1, "g": C2}, "tcp://sched", now=0.0, timeout=timeout,
                      max_retries=max_retries, engine=engine or FakeEngine(), name="dag")


def of(actions, cls):
    return [a for a in actions if isinstance(a, cls)]


def requests(actions, op):
    return [a for a in of(actions, CacheSend) if a.request.op == op]


def reply(send, status=pb.OK, pieces=(), stage=""):
    r = pb.CacheResponse(request_id=send.request.request_id, status=status, stage=stage,
                         responder=send.address)
    for key in pieces:
        r.pieces.add().local.key = key
    return r


def kv(key, **vc):
    return pb.KeyVersion(key=key, vc=vc)


def test_topological_order_is_stable():
    assert topological_order(["g", "f", "h"], {"g": ["f"], "h": ["g"]}) == ["f", "g", "h"]
    assert topological_order(["a", "b"], {}) == ["a", "b"]


def test_ct_starts_at_once_with_its_own_snapshot():
    c = make(pb.CT)
    out = c.start(0.0)
    (s,) = of(out, StartAttempt)
    assert s.attempt_id == "c1#0"
    assert s.plan.protocol == pb.CT and s.plan.requested == pb.CT
    assert s.plan.snapshot_attempt == "c1#0" and s.plan.call_id == "c1" and s.plan.attempt == 0
    assert list(s.plan.dag_keys) == ["a", "b"] and s.plan.dag_keys_known
    assert dict(s.plan.caches) == {"f": C1, "g": C2}
    assert not of(out, CacheSend)
    out = c.on_done("c1#0", 1.0)
    assert of(out, Finished)
    released = {(a.address, a.request.attempt_id) for a in requests(out, pb.CAUSAL_RELEASE)}
    assert released == {(C1, "c1#0"), (C2, "c1#0")}


def test_opt_retries_with_new_keys_then_succeeds():
    c = make(pb.OPT)
    (s0,) = of(c.start(0.0), StartAttempt)
    assert s0.plan.protocol == pb.OPT and s0.plan.snapshot_attempt == ""
    out = c.on_abort(pb.CausalAbort(attempt_id="c1#0", call_id="c1", reason="stale", function="g",
                                    new_keys=["z"]), 1.0)
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert {a.request.attempt_id for a in requests(out, pb.CAUSAL_RELEASE)} == {"c1#0"}
    (s1,) = of(out, StartAttempt)
    assert s1.attempt_id == "c1#1" and s1.plan.attempt == 1
    assert list(s1.plan.dag_keys) == ["a", "b", "z"] and c.keys["g"] == ["b", "z"]
    # a duplicate abort of the old attempt (a parallel branch) is ignored
    assert c.on_abort(pb.CausalAbort(attempt_id="c1#0", reason="again"), 1.1) == []
    out = c.on_done("c1#1", 2.0)
    assert of(out, Finished) and not of(out, Fail)
    assert {a.request.attempt_id for a in requests(out, pb.CAUSAL_RELEASE)} == {"c1#1"}


def test_opt_retry_budget_fails_with_aborted():
    c = make(pb.OPT, max_retries=2)
    c.start(0.0)
    for n in range(2):
        out = c.on_abort(pb.CausalAbort(attempt_id=f"c1#{n}", reason=f"r{n}"), 1.0)
        assert of(out, StartAttempt)
    out = c.on_abort(pb.CausalAbort(attempt_id="c1#2", reason="stale read of k", function="g"), 1.0)
    (f,) = of(out, Fail)
    assert f.status == pb.ABORTED and "stale read of k" in f.message and "3 times" in f.message
    assert of(out, Finished) and not of(out, StartAttempt)
    assert c.finished and c.on_done("c1#2", 2.0) == []


def test_con_snapshot_fetch_then_start():
    eng = FakeEngine(fetches={"g": [kv("a", x=2)]})
    c = make(pb.CON, engine=eng)
    out = c.start(0.0)
    assert not of(out, StartAttempt)
    snaps = requests(out, pb.CAUSAL_SNAPSHOT)
    # the sink's cache snapshots every key of the DAG (its writes inherit read versions' deps)
    assert [(s.address, list(s.request.keys)) for s in snaps] == [(C1, ["a"]), (C2, ["a", "b"])]
    assert all(s.request.attempt_id == "c1#0" and s.request.response_address == "tcp://sched"
               and list(s.request.dag_keys) == ["a", "b"] and 0 < s.request.timeout <= 9
               for s in snaps)
    # replies in any order; an unknown reply is ignored
    assert c.on_cache_reply(pb.CacheResponse(request_id="nope"), 0.1) == []
    assert c.on_cache_reply(reply(snaps[1], pieces=["b"]), 0.2) == []
    out = c.on_cache_reply(reply(snaps[0], pieces=["a"]), 0.3)
    assert [p.local.key for p in eng.distributed_calls[0]["f"]] == ["a"]
    (fetch,) = requests(out, pb.CAUSAL_FETCH)
    assert fetch.address == C2 and fetch.request.versions[0].key == "a"
    assert not of(out, StartAttempt)
    out = c.on_cache_reply(reply(fetch), 0.4)
    (s,) = of(out, StartAttempt)
    assert s.plan.protocol == pb.CON and s.plan.snapshot_attempt == "c1#0"


def test_con_without_fetches_starts_after_snapshots():
    c = make(pb.CON)
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    c.on_cache_reply(reply(snaps[0]), 0.1)
    out = c.on_cache_reply(reply(snaps[1]), 0.1)
    assert len(of(out, StartAttempt)) == 1


def test_con_deadline_names_stage_and_cache():
    c = make(pb.CON, timeout=1.0)
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    c.on_cache_reply(reply(snaps[0]), 0.1)
    assert c.tick(0.5) == []
    out = c.tick(0.95)
    (f,) = of(out, Fail)
    assert f.status == pb.TIMEOUT
    assert f.stage == f"CON snapshot construction: cache {C2} did not answer CAUSAL_SNAPSHOT"
    assert of(out, Finished)
    assert {a.address for a in requests(out, pb.CAUSAL_RELEASE)} == set()  # nothing started


def test_con_late_reply_past_deadline_is_a_timeout():
    c = make(pb.CON, timeout=1.0)
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    (f,) = of(c.on_cache_reply(reply(snaps[0]), 5.0), Fail)
    assert f.status == pb.TIMEOUT and "CAUSAL_SNAPSHOT" in f.stage


def test_con_cache_error_fails_with_its_status():
    c = make(pb.CON)
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    (f,) = of(c.on_cache_reply(reply(snaps[0], status=pb.TIMEOUT, stage="fetching deps of a"),
                               0.1), Fail)
    assert f.status == pb.TIMEOUT and C1 in f.stage and "fetching deps of a" in f.stage
    c = make(pb.CON)
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    (f,) = of(c.on_cache_reply(reply(snaps[1], status=pb.INTERNAL), 0.1), Fail)
    assert f.status == pb.INTERNAL and C2 in f.message


def test_con_unknown_key_abort_reruns_con_with_the_key():
    c = make(pb.CON)
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    c.on_cache_reply(reply(snaps[0]), 0.1)
    c.on_cache_reply(reply(snaps[1]), 0.1)
    out = c.on_abort(pb.CausalAbort(attempt_id="c1#0", function="f", reason="unknown key",
                                    new_keys=["q"]), 0.2)
    snaps = requests(out, pb.CAUSAL_SNAPSHOT)
    assert [list(s.request.keys) for s in snaps] == [["a", "q"], ["a", "b", "q"]]
    assert all(s.request.attempt_id == "c1#1" for s in snaps)


def _hb_start(eng):
    c = make(pb.HB, engine=eng)
    out = c.start(0.0)
    (s,) = of(out, StartAttempt)
    assert s.plan.protocol == pb.OPT and s.plan.requested == pb.HB
    assert s.plan.snapshot_attempt == "c1#s"
    snaps = requests(out, pb.CAUSAL_SNAPSHOT)
    assert {r.request.attempt_id for r in snaps} == {"c1#s"}
    return c, snaps


def test_hb_simulation_ok_prefetches_and_opt_finishes():
    eng = FakeEngine(sim=SimResult(False, fetches={"g": [kv("a", x=1)]}))
    c, snaps = _hb_start(eng)
    c.on_cache_reply(reply(snaps[0], pieces=["a"]), 0.1)
    out = c.on_cache_reply(reply(snaps[1], pieces=["b"]), 0.1)
    assert eng.simulate_calls[0][0] == ["f", "g"]
    (pre,) = requests(out, pb.CAUSAL_FETCH)
    assert pre.request.attempt_id == "c1#s" and pre.address == C2
    assert not pre.request.response_address       # nothing waits for a prefetch
    assert not of(out, StartAttempt) and not of(out, AbortAttempt)
    out = c.on_done("c1#0", 1.0)
    assert of(out, Finished)
    assert {a.request.attempt_id for a in requests(out, pb.CAUSAL_RELEASE)} == {"c1#0", "c1#s"}


def test_hb_simulation_abort_early_aborts_and_runs_con_reusing_opt():
    eng = FakeEngine(fetches={"f": [kv("b", y=3)]}, sim=SimResult(True, reason="g stale"))
    c, snaps = _hb_start(eng)
    c.on_cache_reply(reply(snaps[1]), 0.1)
    out = c.on_cache_reply(reply(snaps[0]), 0.1)
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert {a.request.attempt_id for a in requests(out, pb.CAUSAL_RELEASE)} == {"c1#0"}
    (fetch,) = requests(out, pb.CAUSAL_FETCH)
    assert fetch.request.attempt_id == "c1#s" and fetch.request.response_address
    assert not of(out, StartAttempt)
    # the OPT attempt's own abort arriving later changes nothing
    assert c.on_abort(pb.CausalAbort(attempt_id="c1#0", reason="late"), 0.2) == []
    out = c.on_cache_reply(reply(fetch), 0.3)
    (s,) = of(out, StartAttempt)
    assert s.attempt_id == "c1#1" and s.plan.protocol == pb.CON and s.plan.requested == pb.HB
    assert s.plan.snapshot_attempt == "c1#s" and s.plan.reuse_attempt == "c1#0"
    assert s.plan.attempt == 1 and c.aborts == 1
    out = c.on_done("c1#1", 1.0)
    assert {a.request.attempt_id for a in requests(out, pb.CAUSAL_RELEASE)} == {"c1#1", "c1#s"}


def test_hb_opt_abort_before_snapshot_waits_then_runs_con():
    eng = FakeEngine()
    c, snaps = _hb_start(eng)
    out = c.on_abort(pb.CausalAbort(attempt_id="c1#0", reason="stale"), 0.1)
    assert of(out, AbortAttempt) and not of(out, StartAttempt)
    c.on_cache_reply(reply(snaps[0]), 0.2)
    out = c.on_cache_reply(reply(snaps[1]), 0.2)
    assert eng.simulate_calls == []           # no simulation: OPT already aborted
    (s,) = of(out, StartAttempt)              # no fetches needed: CON starts at once
    assert s.plan.protocol == pb.CON and s.plan.reuse_attempt == "c1#0"


def test_hb_opt_done_before_snapshot_finishes_and_ignores_late_replies():
    c, snaps = _hb_start(FakeEngine(sim=SimResult(True)))
    out = c.on_done("c1#0", 0.1)
    assert of(out, Finished)
    assert c.on_cache_reply(reply(snaps[0]), 0.2) == []


def test_hb_new_keys_abort_builds_a_fresh_snapshot():
    c, snaps = _hb_start(FakeEngine())
    out = c.on_abort(pb.CausalAbort(attempt_id="c1#0", function="g", reason="unknown",
                                    new_keys=["n"]), 0.1)
    fresh = requests(out, pb.CAUSAL_SNAPSHOT)
    assert {r.request.attempt_id for r in fresh} == {"c1#1"}
    assert [list(r.request.keys) for r in fresh] == [["a"], ["a", "b", "n"]]
    assert c.on_cache_reply(reply(snaps[0]), 0.2) == []   # the cancelled "#s" round
    c.on_cache_reply(reply(fresh[0]), 0.2)
    (s,) = of(c.on_cache_reply(reply(fresh[1]), 0.2), StartAttempt)
    assert s.plan.protocol == pb.CON and s.plan.snapshot_attempt == "c1#1"
    assert s.plan.reuse_attempt == "c1#0"


def test_hb_budget_zero_fails_on_simulated_abort():
    c = make(pb.HB, engine=FakeEngine(sim=SimResult(True, reason="x stale")), max_retries=0)
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    c.on_cache_reply(reply(snaps[0]), 0.1)
    (f,) = of(c.on_cache_reply(reply(snaps[1]), 0.1), Fail)
    assert f.status == pb.ABORTED and "x stale" in f.message


def test_fail_aborts_running_attempts_and_releases():
    c = make(pb.OPT)
    c.start(0.0)
    out = c.fail(pb.EXECUTION_ERROR, "worker died")
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert of(out, Fail)[0].status == pb.EXECUTION_ERROR and of(out, Finished)
    assert c.fail(pb.EXECUTION_ERROR, "again") == []


def W(wid, node, util=0.0, out=0):
    return WorkerView(wid, node, f"tcp://{wid}", util, out, f"tcp://cache-{node}")


def test_ct_places_every_function_on_one_node():
    workers = [W("a1", "n1"), W("a2", "n1"), W("b1", "n2"), W("b2", "n2")]
    for seed in range(20):
        got = choose_one_node(["f", "g", "h"], {}, workers, {}, random.Random(seed))
        assert len({w[0] for w in got.values()}) == 1


def test_ct_node_choice_locality_then_load():
    workers = [W("a1", "n1"), W("b1", "n2"), W("b2", "n2")]
    keys = {"n2": {"k1"}, "n1": {"k1", "k2"}}
    refs = {"f": ["k1"], "g": ["k2"]}
    assert set(choose_one_node(["f", "g"], refs, workers, keys, random.Random(0)).values()) == {"a1"}
    # every worker of the local node busy: the idle node wins
    busy = [W("a1", "n1", out=1), W("b1", "n2"), W("b2", "n2")]
    got = choose_one_node(["f", "g"], refs, busy, keys, random.Random(0))
    assert {w[0] for w in got.values()} == {"b"}
    # no locality: the less loaded node
    loaded = [W("a1", "n1", out=1), W("a2", "n1"), W("b1", "n2"), W("b2", "n2")]
    got = choose_one_node(["f"], {}, loaded, {}, random.Random(0))
    assert got["f"].startswith("b")


def test_ct_no_workers_is_no_resources():
    from cloudburst.errors import NoResources
    with pytest.raises(NoResources):
        choose_one_node(["f"], {}, [], {}, random.Random(0))


def _piece(key, local_vc, cut, holder=""):
    p = pb.SnapshotPiece()
    p.local.key = key
    p.local.vc.update(local_vc)
    if holder:
        p.local.holders.append(holder)
    for k, vc in cut.items():
        e = p.cut.add(key=k)
        e.vc.update(vc)
        if holder:
            e.holders.append(holder)
    return p


def test_hydro_engine_over_the_real_cores():
    from scheduler.causal import HydroEngine
    eng = HydroEngine()
    # f's cache has a@{x:1}; g's cache has b@{x:2} which depends on a@{x:2}
    pieces = {"f": [_piece("a", {"x": 1}, {"a": {"x": 1}}, C1)],
              "g": [_piece("b", {"x": 2}, {"b": {"x": 2}, "a": {"x": 2}}, C2)]}
    fetches = eng.distributed(pieces)
    assert list(fetches) == ["f"]
    (v,) = fetches["f"]
    assert v.key == "a" and dict(v.vc) == {"x": 2} and C2 in v.holders
    sim = eng.simulate(["f", "g"], {"g": ["f"]}, pieces)
    assert sim.abort and sim.reason        # g's b needs a newer a than f read
    consistent = {"f": [_piece("a", {"x": 2}, {"a": {"x": 2}}, C1)],
                  "g": [_piece("b", {"x": 2}, {"b": {"x": 2}, "a": {"x": 2}}, C2)]}
    assert eng.distributed(consistent) == {}
    assert not eng.simulate(["f", "g"], {"g": ["f"]}, consistent).abort
