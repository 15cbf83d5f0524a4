"""The scheduler's MTCC coordinator (scheduler/causal.py), its protocol flows and their
continuations (scheduler/mtcc.py), the per-call records that carry its actions out
(scheduler/causal_calls.py) and CT placement, without sockets."""
import dataclasses
import random

import pytest
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2 as pb
from scheduler.causal import (AbortAttempt, CacheSend, CausalCall, Fail, Finished, SimResult,
                              StartAttempt, caller_of, topological_order)
from scheduler.causal_calls import CausalCalls
from scheduler.causal_records import AttemptState, Waiting
from scheduler.dag import Dag
from scheduler.membership import ExecutorTable
from scheduler.mtcc import (ConFetched, ConFlow, ConSnapshotTaken, CtFlow, HbFlow,
                            HbSnapshotTaken, OptFlow, flow_for)
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
         upstreams=None, keys=None, caches=None, hb_eager=True):
    return CausalCall("c1", protocol, list(functions),
                      upstreams if upstreams is not None else {"g": ["f"]},
                      keys if keys is not None else {"f": ["a"], "g": ["b"]},
                      caches or {"f": C1, "g": C2}, "tcp://sched", now=0.0, timeout=timeout,
                      max_retries=max_retries, engine=engine or FakeEngine(), name="dag",
                      hb_eager=hb_eager)


def of(actions, cls):
    return [a for a in actions if isinstance(a, cls)]


def requests(actions, op):
    return [a for a in of(actions, CacheSend) if a.request.op == op]


def released(actions):
    """(cache, attempt) of every attempt the CAUSAL_RELEASE messages among `actions` name."""
    return [(a.address, aid) for a in requests(actions, pb.CAUSAL_RELEASE)
            for aid in (a.request.attempt_id, *a.request.also_release)]


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
    assert set(released(out)) == {(C1, "c1#0"), (C2, "c1#0")}


def test_opt_retries_with_new_keys_then_succeeds():
    c = make(pb.OPT)
    (s0,) = of(c.start(0.0), StartAttempt)
    assert s0.plan.protocol == pb.OPT and s0.plan.snapshot_attempt == ""
    out = c.on_abort(pb.CausalAbort(attempt_id="c1#0", call_id="c1", reason="stale", function="g",
                                    new_keys=["z"]), 1.0)
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert {aid for _, aid in released(out)} == {"c1#0"}
    (s1,) = of(out, StartAttempt)
    assert s1.attempt_id == "c1#1" and s1.plan.attempt == 1
    assert list(s1.plan.dag_keys) == ["a", "b", "z"] and c.keys["g"] == ["b", "z"]
    # a duplicate abort of the old attempt (a parallel branch) is ignored
    assert c.on_abort(pb.CausalAbort(attempt_id="c1#0", reason="again"), 1.1) == []
    out = c.on_done("c1#1", 2.0)
    assert of(out, Finished) and not of(out, Fail)
    assert {aid for _, aid in released(out)} == {"c1#1"}


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
    assert {aid for _, aid in released(out)} == {"c1#0", "c1#s"}
    # both attempts in one message per cache (a call's end costs a message per cache)
    assert sorted(a.address for a in requests(out, pb.CAUSAL_RELEASE)) == [C1, C2]
    assert sorted(released(out)) == sorted((c, a) for c in (C1, C2) for a in ("c1#0", "c1#s"))


def test_hb_simulation_abort_early_aborts_and_runs_con_reusing_opt():
    eng = FakeEngine(fetches={"f": [kv("b", y=3)]}, sim=SimResult(True, reason="g stale"))
    c, snaps = _hb_start(eng)
    c.on_cache_reply(reply(snaps[1]), 0.1)
    out = c.on_cache_reply(reply(snaps[0]), 0.1)
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert {aid for _, aid in released(out)} == {"c1#0"}
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
    assert {aid for _, aid in released(out)} == {"c1#1", "c1#s"}


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


def test_lazy_hb_starts_opt_alone_with_no_snapshot_round():
    eng = FakeEngine()
    c = make(pb.HB, engine=eng, hb_eager=False)
    out = c.start(0.0)
    (s,) = of(out, StartAttempt)
    assert s.plan.protocol == pb.OPT and s.plan.requested == pb.HB
    assert s.plan.snapshot_attempt == ""          # no "#s": nothing was prefetched for it
    assert of(out, CacheSend) == []               # no snapshot, no simulation, no prefetch
    out = c.on_done("c1#0", 1.0)
    assert of(out, Finished) and eng.simulate_calls == []
    assert sorted(released(out)) == [(C1, "c1#0"), (C2, "c1#0")]   # no "#s" to release
    assert not c.flow.opt_aborted


def test_lazy_hb_opt_abort_runs_con_on_a_fresh_snapshot_reusing_opt():
    eng = FakeEngine(fetches={"g": [kv("a", x=1)]})
    c = make(pb.HB, engine=eng, hb_eager=False)
    c.start(0.0)
    out = c.on_abort(pb.CausalAbort(attempt_id="c1#0", reason="stale"), 0.1)
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert not of(out, StartAttempt)              # CON waits for its complete snapshot
    snaps = requests(out, pb.CAUSAL_SNAPSHOT)
    assert {r.request.attempt_id for r in snaps} == {"c1#1"}
    # the sink's cache snapshots every key of the DAG, as CON's does
    assert [list(r.request.keys) for r in snaps] == [["a"], ["a", "b"]]
    c.on_cache_reply(reply(snaps[0], pieces=["a"]), 0.2)
    out = c.on_cache_reply(reply(snaps[1], pieces=["b"]), 0.2)
    assert not of(out, StartAttempt)              # Algorithm 10's fetches come first
    (fetch,) = requests(out, pb.CAUSAL_FETCH)
    assert fetch.request.attempt_id == "c1#1" and fetch.request.response_address
    (s,) = of(c.on_cache_reply(reply(fetch), 0.3), StartAttempt)
    assert s.plan.protocol == pb.CON and s.plan.requested == pb.HB
    assert s.plan.snapshot_attempt == "c1#1" and s.plan.reuse_attempt == "c1#0"
    assert c.flow.opt_aborted and c.aborts == 1 and eng.simulate_calls == []
    out = c.on_done("c1#1", 1.0)
    assert {aid for _, aid in released(out)} == {"c1#1"}   # c1#0 was released at its abort


def test_hb_records_whether_its_opt_attempt_aborted():
    c, snaps = _hb_start(FakeEngine(sim=SimResult(True, reason="stale")))
    c.on_cache_reply(reply(snaps[0]), 0.1)
    c.on_cache_reply(reply(snaps[1]), 0.1)
    assert c.flow.opt_aborted                    # the simulation's early abort counts
    c, _ = _hb_start(FakeEngine())
    c.on_abort(pb.CausalAbort(attempt_id="c1#0", reason="stale"), 0.1)
    assert c.flow.opt_aborted


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


# ---- the flows and their continuations, step by step ----
def test_flow_for_each_protocol():
    assert [type(flow_for(p, "c")) for p in (pb.CT, pb.OPT, pb.CON, pb.HB, 99)] == \
        [CtFlow, OptFlow, ConFlow, HbFlow, HbFlow]
    assert flow_for(pb.HB, "c").snapshot_id == "c#s"


def test_continuations_are_immutable_records():
    k = ConFetched("c1#1", "c1#s", reuse="c1#0")
    assert (k.attempt_id, k.snapshot_attempt, k.reuse) == ("c1#1", "c1#s", "c1#0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.reuse = ""
    assert ConSnapshotTaken("c1#0") == ConSnapshotTaken("c1#0", "")
    assert HbSnapshotTaken() == HbSnapshotTaken()


def test_con_snapshot_taken_unions_then_fetches_under_the_attempt():
    eng = FakeEngine(fetches={"g": [kv("a", x=2)]})
    c = make(pb.CON, engine=eng)
    pieces = {"f": [pb.SnapshotPiece()]}
    out = c.flow.resume(c, ConSnapshotTaken("c1#0", reuse="c1#7"), pieces, 0.1)
    assert eng.distributed_calls == [pieces]
    (fetch,) = requests(out, pb.CAUSAL_FETCH)
    assert fetch.address == C2 and fetch.request.attempt_id == "c1#0"
    assert fetch.request.response_address == "tcp://sched"
    assert c.waiting_on() == [Waiting("CON snapshot fetch", C2, "CAUSAL_FETCH")]
    (s,) = of(c.on_cache_reply(reply(fetch), 0.2), StartAttempt)
    assert (s.attempt_id, s.plan.protocol, s.plan.snapshot_attempt, s.plan.reuse_attempt) == \
        ("c1#0", pb.CON, "c1#0", "c1#7")


def test_con_snapshot_taken_with_nothing_to_fetch_starts_at_once():
    c = make(pb.CON)
    (s,) = c.flow.resume(c, ConSnapshotTaken("c1#0"), {}, 0.1)
    assert isinstance(s, StartAttempt) and s.plan.protocol == pb.CON
    assert c.waiting_on() == []


def test_con_fetched_starts_the_attempt_on_the_named_snapshot():
    c = make(pb.HB)
    (s,) = c.flow.resume(c, ConFetched("c1#3", "c1#s", "c1#0"), {}, 1.0)
    assert s.attempt_id == "c1#3" and s.plan.attempt == 3 and s.timeout == pytest.approx(9.0)
    assert (s.plan.protocol, s.plan.requested) == (pb.CON, pb.HB)
    assert (s.plan.snapshot_attempt, s.plan.reuse_attempt) == ("c1#s", "c1#0")
    assert c.running() == ["c1#3"]


def test_hb_snapshot_taken_prefetches_what_opt_will_fetch():
    eng = FakeEngine(sim=SimResult(False, fetches={"f": [kv("a", x=4)]}))
    c = make(pb.HB, engine=eng, keys={"f": ["a"], "g": ["b"]})
    c.start(0.0)
    c.cancel_rounds()                          # drive the continuation by hand
    a, b = pb.SnapshotPiece(), pb.SnapshotPiece()
    a.local.key, b.local.key = "a", "b"
    out = c.flow.resume(c, HbSnapshotTaken(), {"f": [a, b], "g": [a, b]}, 0.1)
    # the simulation sees only each function's own keys (what OPT binds)
    order, own = eng.simulate_calls[0]
    assert order == ["f", "g"] and {fn: [p.local.key for p in ps] for fn, ps in own.items()} \
        == {"f": ["a"], "g": ["b"]}
    (pre,) = requests(out, pb.CAUSAL_FETCH)
    assert (pre.address, pre.request.attempt_id, pre.request.response_address) == (C1, "c1#s", "")
    assert c.running() == ["c1#0"] and c.waiting_on() == [] and c.flow.pieces is not None


def test_hb_snapshot_taken_with_a_simulated_abort_runs_con_on_it():
    eng = FakeEngine(fetches={"g": [kv("a", x=5)]}, sim=SimResult(True, reason="a too old"))
    c = make(pb.HB, engine=eng)
    c.start(0.0)
    c.cancel_rounds()
    out = c.flow.resume(c, HbSnapshotTaken(), {"f": []}, 0.1)
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert c.aborts == 1 and c.last_reason == "HB simulation: a too old"
    assert c.waiting_on() == [Waiting("HB CON snapshot fetch", C2, "CAUSAL_FETCH")]
    (fetch,) = requests(out, pb.CAUSAL_FETCH)
    assert fetch.request.attempt_id == "c1#s"
    (s,) = of(c.on_cache_reply(reply(fetch), 0.2), StartAttempt)
    assert (s.attempt_id, s.plan.snapshot_attempt, s.plan.reuse_attempt) == \
        ("c1#1", "c1#s", "c1#0")


def test_a_flow_refuses_a_continuation_that_is_not_its_own():
    for protocol, then in [(pb.CT, ConFetched("c1#0", "c1#0")),
                           (pb.OPT, ConSnapshotTaken("c1#0")),
                           (pb.CON, HbSnapshotTaken())]:
        c = make(protocol)
        with pytest.raises(AssertionError, match="no step"):
            c.flow.resume(c, then, {}, 0.0)


def test_the_coordinator_takes_no_attributes_from_outside():
    c = make(pb.OPT)
    with pytest.raises(AttributeError):
        c.placement = {"f": "w1"}


# ---- ids: every id a call mints leads back to it ----
@pytest.mark.parametrize("call_id", ["c1", "a#b", "x/y#3", "#"])
def test_minted_ids_lead_back_to_their_call(call_id):
    c = CausalCall(call_id, pb.HB, ["f", "g"], {"g": ["f"]}, {"f": ["a"], "g": ["b"]},
                   {"f": C1, "g": C2}, "tcp://sched", now=0.0, timeout=10.0,
                   engine=FakeEngine(fetches={"f": [kv("a", x=1)]}, sim=SimResult(True)))
    out = c.start(0.0)
    for send in requests(out, pb.CAUSAL_SNAPSHOT):
        out += c.on_cache_reply(reply(send), 0.1)
    out += c.on_done(c.current(), 1.0)
    ids = [a.attempt_id for a in of(out, StartAttempt)] + \
        [a.request.request_id for a in of(out, CacheSend) if a.request.request_id] + \
        [a.request.attempt_id for a in of(out, CacheSend)]
    assert len(ids) > 5 and {caller_of(i) for i in ids} == {call_id}


# ---- retry budgets under random event sequences ----
@settings(max_examples=200, deadline=None)
@given(max_retries=st.integers(0, 5),
       events=st.lists(st.tuples(st.sampled_from(["abort", "dup", "stranger", "tick"]),
                                 st.booleans(), st.booleans()), max_size=12))
def test_opt_never_exceeds_its_retry_budget(max_retries, events):
    c = make(pb.OPT, max_retries=max_retries)
    batches = [c.start(0.0)]
    counted = 0
    for n, (kind, new_key, stale_key) in enumerate(events):
        now = 0.1 * (n + 1)
        running = c.running()
        if kind == "abort" and running:
            counted += not c.finished
            abort = pb.CausalAbort(attempt_id=running[0], reason=f"r{n}", function="g",
                                   new_keys=[f"k{n}"] if new_key else [],
                                   stale_keys=["b"] if stale_key else [])
            batches.append(c.on_abort(abort, now))
        elif kind == "dup" and c.aborts:      # c1#0 aborted already: a parallel branch's
            batches.append(c.on_abort(pb.CausalAbort(attempt_id="c1#0", reason="dup"), now))
        elif kind == "stranger":
            batches.append(c.on_abort(pb.CausalAbort(attempt_id="other#0", reason="?"), now))
        else:
            batches.append(c.tick(now))
    actions = [a for b in batches for a in b]
    starts = of(actions, StartAttempt)
    assert len(starts) <= max_retries + 1 and c.aborts == counted <= max_retries + 1
    # attempt n follows n aborts; never two running at once
    assert [s.attempt_id for s in starts] == [f"c1#{n}" for n in range(len(starts))]
    assert [s.plan.attempt for s in starts] == list(range(len(starts)))
    assert len(c.running()) <= 1
    # every counted abort stopped and released its attempt, once per cache
    assert [a.attempt_id for a in of(actions, AbortAttempt)] == \
        [f"c1#{n}" for n in range(counted)]
    releases = released(actions)
    assert len(releases) == len(set(releases)) == 2 * counted
    fails = of(actions, Fail)
    if counted > max_retries:
        (f,) = fails
        assert f.status == pb.ABORTED and f"{counted} times" in f.message and c.finished
        ending = next(b for b in batches if of(b, Fail))
        assert isinstance(ending[-1], Finished) and not of(ending, StartAttempt)
    else:
        assert fails == [] and not c.finished and len(starts) == counted + 1


@settings(max_examples=200, deadline=None)
@given(protocol=st.sampled_from([pb.CT, pb.OPT, pb.CON, pb.HB]),
       max_retries=st.integers(0, 3), sim_abort=st.booleans(),
       events=st.lists(st.tuples(st.sampled_from(["abort"] * 3 + ["reply"] * 4 + ["done", "tick"]),
                                 st.integers(0, 7), st.booleans()), min_size=4, max_size=30))
def test_every_protocol_keeps_its_budget_and_ends_once(protocol, max_retries, sim_abort,
                                                       events):
    eng = FakeEngine(fetches={"g": [kv("a", x=1)]}, sim=SimResult(sim_abort, reason="sim"))
    # HB's snapshot round eager or lazy (sim_abort picks one: both are drawn)
    c = make(protocol, engine=eng, max_retries=max_retries,
             hb_eager=sim_abort or protocol != pb.HB or max_retries % 2 == 0)
    batches = [c.start(0.0)]
    awaited = []
    for n, (kind, pick, new_key) in enumerate(events):
        awaited += [a for a in batches[-1] if isinstance(a, CacheSend)
                    and a.request.response_address]
        now = 0.1 * (n + 1)
        running = c.running()
        if kind == "abort" and running:
            aid = running[pick % len(running)]
            batches.append(c.on_abort(pb.CausalAbort(attempt_id=aid, reason="r", function="f",
                                                     new_keys=["z"] if new_key else []), now))
        elif kind == "reply" and awaited:
            batches.append(c.on_cache_reply(reply(awaited.pop(pick % len(awaited))), now))
        elif kind == "done" and running:
            batches.append(c.on_done(running[pick % len(running)], now))
        else:
            batches.append(c.tick(now))
    actions = [a for b in batches for a in b]
    starts = of(actions, StartAttempt)
    # at most one start per abort the budget allows, and each attempt id started once
    assert len(starts) <= min(c.aborts, max_retries) + 1
    assert len({s.attempt_id for s in starts}) == len(starts)
    assert c.aborts <= max_retries + 1
    # ABORTED exactly when the budget is spent; Finished once, last of its batch
    aborted = [f for f in of(actions, Fail) if f.status == pb.ABORTED]
    assert len(aborted) == (c.aborts > max_retries)
    finished = [b for b in batches if of(b, Finished)]
    assert len(finished) == c.finished and all(isinstance(b[-1], Finished) for b in finished)
    if c.finished:
        assert not any(batches[batches.index(finished[0]) + 1:])
    releases = released(actions)
    assert len(releases) == len(set(releases))


# ---- the per-call records and their actions carried out (scheduler/causal_calls.py) ----
class FakePush:
    def __init__(self):
        self.sent = []

    def send(self, address, kind, message):
        self.sent.append((address, kind, message))

    def take(self, kind=None):
        out = [(a, m) for a, k, m in self.sent if kind is None or k == kind]
        self.sent = [s for s in self.sent if kind is not None and s[1] != kind]
        return out


def _calls(protocol, call_id="req1", max_retries=3, hb_snapshot="adaptive"):
    table = ExecutorTable(heartbeat_timeout=5.0)
    table.heartbeat("w1", "n1", "tcp://w1", 0.0, 0.0, cache_address=C1)
    table.heartbeat("w2", "n2", "tcp://w2", 0.0, 0.0, cache_address=C2)
    push = FakePush()
    calls = CausalCalls(push, table, "tcp://sched", max_retries=max_retries,
                        hb_snapshot=hb_snapshot)
    _begin(calls, protocol, call_id)
    return calls, table, push


def _begin(calls, protocol, call_id):
    dag = Dag.create("dag", ["f", "g"], [("f", "g")])
    call = pb.Call(request_id=call_id, response_address="tcp://caller", dag="dag",
                   consistency=pb.CAUSAL, protocol=protocol)
    call.args["f"].args.add().reference = "a"
    calls.begin(call, dag, {"f": "v1", "g": "v2"}, {"f": "w1", "g": "w2"},
                {"f": C1, "g": C2}, 10.0, 0.0)


def _load(table):
    return {w.worker_id: w.outstanding for w in table.live()}


def test_causal_calls_start_schedules_and_route_by_id():
    calls, table, push = _calls(pb.OPT, call_id="r#1")
    (rec,) = calls.records.values()
    assert rec.call.request_id == "r#1" and rec.placement == {"f": "w1", "g": "w2"}
    (address, schedule), = push.take("schedule")
    assert address == "tcp://w1" and schedule.call_id == "r#1#0"
    assert schedule.causal.protocol == pb.OPT and schedule.forward[0].causal.call_id == "r#1"
    assert _load(table) == {"w1": 1, "w2": 1}          # the attempt, not the reservation too
    assert calls.owner("r#1") is rec and calls.owner("r#1#0") is rec
    assert calls.owner("r#1#5") is None and calls.owner("r") is None
    assert calls.owner("lww-call") is None


def test_causal_calls_abort_retry_and_done_forget_everything():
    calls, table, push = _calls(pb.OPT)
    push.take()
    calls.abort(pb.CausalAbort(attempt_id="req1#0", call_id="req1", reason="stale"), 0.5)
    sent = push.take()
    assert {(a, m.call_id) for a, m in sent if isinstance(m, pb.CallDone)} == \
        {("tcp://w1", "req1#0"), ("tcp://w2", "req1#0")}
    assert {(a, m.attempt_id) for a, m in sent if isinstance(m, pb.CacheRequest)} == \
        {(C1, "req1#0"), (C2, "req1#0")}
    assert [m.call_id for _, m in sent if isinstance(m, pb.Schedule)] == ["req1#1"]
    assert _load(table) == {"w1": 1, "w2": 1}
    assert calls.done("req1#1", 1.0) and calls.records == {}
    assert table.calls_in_flight() == 0 and _load(table) == {"w1": 0, "w2": 0}
    assert not calls.done("req1#1", 1.1)                 # forgotten: no longer owned


def test_causal_calls_reserve_load_while_con_coordinates_and_route_cache_replies():
    calls, table, push = _calls(pb.CON)
    assert _load(table) == {"w1": 1, "w2": 1}            # the reservation
    snaps = push.take("cache")
    assert len(snaps) == 2 and not push.take("schedule")
    for address, request in snaps:
        calls.cache_reply(pb.CacheResponse(request_id=request.request_id, status=pb.OK,
                                           responder=address), 0.1)
    (_, schedule), = push.take("schedule")
    assert schedule.call_id == "req1#0" and schedule.causal.protocol == pb.CON
    assert _load(table) == {"w1": 1, "w2": 1}            # carried by the attempt now
    calls.cache_reply(pb.CacheResponse(request_id="gone#snap-9"), 0.2)   # ignored
    assert push.take() == []


def test_causal_calls_fail_the_caller_with_causal_stats():
    calls, table, push = _calls(pb.OPT, max_retries=0)
    push.take()
    calls.abort(pb.CausalAbort(attempt_id="req1#0", reason="stale read"), 0.5)
    (address, result), = push.take("result")
    assert address == "tcp://caller" and result.request_id == "req1"
    assert result.status == pb.ABORTED and "stale read" in result.message
    assert result.causal.protocol == pb.OPT and result.causal.aborts == 1
    assert calls.records == {} and table.calls_in_flight() == 0


def test_causal_calls_worker_death_fails_the_call():
    calls, table, push = _calls(pb.HB)
    push.take()
    (rec,) = calls.records.values()
    calls.worker_died(rec, "worker w2 died", 0.5)
    (_, result), = push.take("result")
    assert result.status == pb.EXECUTION_ERROR and result.message == "worker w2 died"
    assert {a for _, m in push.take("cache") for a in (m.attempt_id, *m.also_release)} == \
        {"req1#0", "req1#s"}
    assert calls.records == {} and table.calls_in_flight() == 0


def test_causal_calls_an_attempt_on_a_dead_worker_fails_at_start():
    calls, table, push = _calls(pb.CON)
    snaps = push.take("cache")
    table.expire(100.0)                                   # every worker gone silent
    for address, request in snaps:
        calls.cache_reply(pb.CacheResponse(request_id=request.request_id, status=pb.OK), 0.1)
    (_, result), = push.take("result")
    assert result.status == pb.EXECUTION_ERROR and "no longer live" in result.message
    assert push.take("schedule") == [] and calls.records == {}


def _snapshots_sent(push):
    return [m for _, m in push.take("cache") if m.op == pb.CAUSAL_SNAPSHOT]


def test_hb_takes_its_snapshot_round_only_while_opt_aborts_often():
    """Adaptive HB: eager for a new DAG, lazy once its OPT attempts seldom abort, eager again
    when they abort often; every HB call that ends teaches the policy."""
    calls, table, push = _calls(pb.HB, call_id="h0")
    assert _snapshots_sent(push)                         # a new DAG: HB as written
    policy = calls.hb_policy
    calls.done("h0#0", 0.5)                              # OPT finished: no abort
    n = 1
    while policy.eager("dag"):
        assert n <= policy.min_outcomes, "never went lazy on a DAG whose OPT never aborts"
        _begin(calls, pb.HB, f"h{n}")
        assert _snapshots_sent(push)
        calls.done(f"h{n}#0", 0.5)
        n += 1
    _begin(calls, pb.HB, "lazy1")
    assert _snapshots_sent(push) == []                   # OPT alone
    calls.abort(pb.CausalAbort(attempt_id="lazy1#0", reason="stale"), 0.5)
    assert {m.attempt_id for m in _snapshots_sent(push)} == {"lazy1#1"}   # CON's own round
    assert "lazy1" in calls.records
    calls.done("lazy1", 0.7)                             # the caller reported its result
    assert calls.records == {}
    m = 0
    while not policy.eager("dag"):                       # OPT now aborts every time
        assert policy.rate("dag") < policy.eager_above
        assert m <= policy.window, "stayed lazy on a DAG whose OPT always aborts"
        _begin(calls, pb.HB, f"a{m}")
        assert _snapshots_sent(push) == []
        calls.abort(pb.CausalAbort(attempt_id=f"a{m}#0", reason="stale"), 0.5)
        assert {m.attempt_id for m in _snapshots_sent(push)} == {f"a{m}#1"}
        calls.stop(calls.records[f"a{m}"], 0.6)           # ended: the policy learns
        m += 1
    _begin(calls, pb.HB, "eager-again")
    assert _snapshots_sent(push)


@pytest.mark.parametrize("mode, first, later", [("always", True, True),
                                                ("on_abort", False, False)])
def test_hb_snapshot_modes_always_and_on_abort_ignore_the_history(mode, first, later):
    calls, table, push = _calls(pb.HB, call_id="h0", hb_snapshot=mode)
    assert bool(_snapshots_sent(push)) is first
    for n in range(1, 40):
        calls.done(f"h{n - 1}#0", 0.5)
        _begin(calls, pb.HB, f"h{n}")
        assert bool(_snapshots_sent(push)) is later
    with pytest.raises(ValueError, match="hb_snapshot"):
        CausalCalls(FakePush(), table, "tcp://sched", max_retries=3, hb_snapshot="sometimes")


def test_one_snapshot_and_one_fetch_request_per_cache_for_the_functions_on_it():
    """f and h share cache C1: CON asks C1 once for both functions' keys, splits the reply
    between them by key, and fetches both functions' versions from C1 in one request."""
    eng = FakeEngine(fetches={"f": [kv("a", x=2)], "g": [kv("b", y=1)],
                              "h": [kv("a", x=2), kv("c", z=1)]})
    c = make(pb.CON, engine=eng, functions=("f", "g", "h"),
             upstreams={"g": ["f"], "h": ["g"]}, keys={"f": ["a"], "g": ["b"], "h": ["c"]},
             caches={"f": C1, "g": C2, "h": C1})
    snaps = requests(c.start(0.0), pb.CAUSAL_SNAPSHOT)
    assert [(s.address, list(s.request.keys)) for s in snaps] == \
        [(C1, ["a", "b", "c"]), (C2, ["b"])]          # the sink h's keys are every DAG key
    c.on_cache_reply(reply(snaps[1], pieces=["b"]), 0.1)
    out = c.on_cache_reply(reply(snaps[0], pieces=["a", "b", "c"]), 0.1)
    (pieces,) = eng.distributed_calls
    assert {fn: sorted(p.local.key for p in ps) for fn, ps in pieces.items()} == \
        {"f": ["a"], "g": ["b"], "h": ["a", "b", "c"]}
    fetches = requests(out, pb.CAUSAL_FETCH)
    assert sorted((f.address, sorted(v.key for v in f.request.versions)) for f in fetches) == \
        [(C1, ["a", "c"]), (C2, ["b"])]
    out = []
    for f in fetches:
        out += c.on_cache_reply(reply(f), 0.2)
    (s,) = of(out, StartAttempt)
    assert s.plan.protocol == pb.CON and s.plan.snapshot_attempt == "c1#0"


def test_fetch_sets_that_disagree_on_a_key_stay_separate_requests():
    c = make(pb.CON, functions=("f", "g"), caches={"f": C1, "g": C1})
    out = c.fetch_round("c1#0", "stage", {"f": [kv("a", x=1)], "g": [kv("a", x=2)]}, 0.0,
                        then=ConFetched("c1#0", "c1#0"))
    fetches = requests(out, pb.CAUSAL_FETCH)
    assert [[dict(v.vc) for v in f.request.versions] for f in fetches] == [[{"x": 1}], [{"x": 2}]]


# ---- releases at the grant, held to ride on the next grant to each cache ----
def test_a_granted_call_releases_every_attempt_at_the_grant_as_held_releases():
    from scheduler.causal_records import HeldRelease
    c = make(pb.HB, engine=FakeEngine(sim=SimResult(False)))
    c.start(0.0)
    granted, _, out = c.grant("c1#0", 1.0)
    assert granted and not requests(out, pb.CAUSAL_RELEASE)      # nothing sent at once
    held = of(out, HeldRelease)
    assert sorted(h.address for h in held) == [C1, C2]
    assert all(sorted(h.attempt_ids) == ["c1#0", "c1#s"] and h.timeout == 9.0 for h in held)
    done = c.on_done("c1#0", 1.5)
    assert not requests(done, pb.CAUSAL_RELEASE) and of(done, Finished)   # none twice
    # a call that fails before any grant still releases at once, as before
    c2 = make(pb.OPT)
    c2.start(0.0)
    out = c2.fail(pb.TIMEOUT, "x")
    assert set(released(out)) == {(C1, "c1#0"), (C2, "c1#0")} and not of(out, HeldRelease)


def test_causal_calls_hand_held_releases_to_the_next_grant_of_that_cache_or_send_them_later():
    from scheduler.release_batch import MAX_DELAY
    calls, table, push = _calls(pb.OPT, call_id="r1")
    _begin(calls, pb.OPT, "r2")
    push.take()
    calls.grant(pb.CacheRequest(request_id="g1", op=pb.CAUSAL_GRANT, attempt_id="r1#0",
                                response_address="tcp://c2-replies", requester=C2), 1.0)
    (address, reply1), = push.take("cache_reply")
    assert address == "tcp://c2-replies" and reply1.status == pb.OK
    # r1's own attempt at C2 rides on its grant; C1's waits
    assert list(reply1.release) == ["r1#0"] and 8.9 < reply1.release_timeout <= 9.0
    assert not push.take("cache") and calls.holding()
    calls.done("r1#0", 1.01)
    calls.grant(pb.CacheRequest(request_id="g2", op=pb.CAUSAL_GRANT, attempt_id="r2#0",
                                response_address="tcp://c1-replies", requester=C1), 1.02)
    (_, reply2), = push.take("cache_reply")
    assert list(reply2.release) == ["r1#0", "r2#0"]         # C1's held ones, both calls
    calls.done("r2#0", 1.03)
    calls.tick(1.03 + MAX_DELAY / 2)
    assert not push.take("cache")
    calls.tick(1.03 + MAX_DELAY)                            # C2's for r2: sent on its own
    (address, release), = push.take("cache")
    assert address == C2 and release.op == pb.CAUSAL_RELEASE and release.attempt_id == "r2#0"
    assert not calls.holding()
    # a refused grant hands nothing over and holds nothing
    calls.grant(pb.CacheRequest(request_id="g3", op=pb.CAUSAL_GRANT, attempt_id="r9#0",
                                response_address="tcp://c1-replies", requester=C1), 2.0)
    (_, refused), = push.take("cache_reply")
    assert refused.fenced and not refused.release and not calls.holding()


# ---- the caller's report of a granted call stops nothing ----
@pytest.mark.parametrize("protocol,eager", [(pb.OPT, True), (pb.HB, True), (pb.HB, False),
                                            (pb.CON, True), (pb.CT, True)])
def test_the_callers_report_after_the_grant_aborts_no_worker(protocol, eager):
    # the caller reports a result with its next call, by the call's own id, often before the
    # sink's `done`: the granted attempt has finished (its sink ran last), so no `abort` goes
    # to its workers, and the call ends releasing nothing twice
    eng = FakeEngine(sim=SimResult(False))
    c = make(protocol, engine=eng, hb_eager=eager)
    out = c.start(0.0)
    if protocol == pb.CON:                          # CON starts after its snapshot round
        for send in requests(out, pb.CAUSAL_SNAPSHOT):
            out = c.on_cache_reply(reply(send), 0.1)
    (aid,) = c.running()
    granted, _, out = c.grant(aid, 0.5)
    assert granted and not of(out, AbortAttempt)
    out = c.on_done("c1", 0.6)
    assert not of(out, AbortAttempt) and of(out, Finished)
    assert not requests(out, pb.CAUSAL_RELEASE)     # released at the grant, held
    assert c.attempts[aid].state is AttemptState.DONE
    assert c.on_done(aid, 0.7) == []                # the sink's own `done` after it: nothing


def test_the_callers_report_before_any_grant_still_stops_the_running_attempt():
    # no grant: the caller's result was an error (or the call is over some other way), and
    # whatever still runs is stopped at its workers and released
    c = make(pb.OPT)
    c.start(0.0)
    out = c.on_done("c1", 0.5)
    assert [a.attempt_id for a in of(out, AbortAttempt)] == ["c1#0"]
    assert set(released(out)) == {(C1, "c1#0"), (C2, "c1#0")} and of(out, Finished)


def test_causal_calls_caller_report_after_the_grant_sends_no_abort_and_frees_the_workers():
    calls, table, push = _calls(pb.OPT)
    push.take()
    calls.grant(pb.CacheRequest(request_id="g1", op=pb.CAUSAL_GRANT, attempt_id="req1#0",
                                response_address="tcp://c2-replies", requester=C2), 1.0)
    push.take("cache_reply")
    assert calls.done("req1", 1.1) and calls.records == {}     # the caller's report
    assert push.take("abort") == []
    assert table.calls_in_flight() == 0 and _load(table) == {"w1": 0, "w2": 0}
    assert not calls.done("req1#0", 1.2)                       # the sink's `done`, later


@settings(max_examples=150, deadline=None)
@given(protocol=st.sampled_from([pb.OPT, pb.HB]), eager=st.booleans(),
       events=st.lists(st.tuples(st.sampled_from(["abort", "grant", "report", "done", "tick"]),
                                 st.integers(0, 7)), max_size=20))
def test_no_attempt_is_stopped_after_it_was_granted(protocol, eager, events):
    # whatever order aborts, grants, the caller's reports and the sinks' `done`s come in, an
    # attempt granted the call's commit is never sent an `abort` after its grant, and the
    # call ends once
    eng = FakeEngine(sim=SimResult(False))
    c = make(protocol, engine=eng, hb_eager=eager, max_retries=3)
    c.start(0.0)
    after_grant = []
    for n, (kind, pick) in enumerate(events):
        now = 0.1 * (n + 1)
        running = c.running()
        if kind == "abort" and running and not c.granted:   # a bind fails before any grant
            out = c.on_abort(pb.CausalAbort(attempt_id=running[pick % len(running)],
                                            reason="r", function="f"), now)
        elif kind == "grant" and running:
            out = c.grant(running[pick % len(running)], now)[2]
        elif kind == "report":
            out = c.on_done("c1", now)
        elif kind == "done" and c.granted:
            out = c.on_done(c.granted, now)
        else:
            out = c.tick(now)
        if c.granted:
            after_grant += out
    assert c.granted not in [a.attempt_id for a in of(after_grant, AbortAttempt)]
    assert len(of(after_grant, Finished)) <= 1
