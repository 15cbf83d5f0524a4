"""Fencing of causal commits (hydrocache/DESIGN.md, "Fencing"), proved in the pure core.

Over interleavings of CT and HB calls with stalled caches (requests queued for as long as the
test likes), scheduler failures (heartbeat timeouts), releases and late commits, driven by the
scheduler's real coordinator (`tests/hydrocache_fencing_sim.py`): every acknowledged write
survives in the KVS, and no call has more than one accepted commit.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hydro_proto import cloudburst_pb2 as pb

from hydrocache_fencing_sim import FencingWorld


def _run_until(world: FencingWorld, done, limit: int = 200) -> None:
    for _ in range(limit):
        if done():
            return
        if world.net.io:
            world.net.complete(0)
        elif world.net.to_scheduler:
            world.deliver_to_scheduler(0)
        else:
            ready = [a for a in world.attempts if a.ready()]
            assert ready, "nothing can move"
            ready[0].advance()
    raise AssertionError("condition never reached")


def _is_snapshot(action) -> bool:
    return isinstance(action, tuple) and action[0] == "request" and \
        action[1].op == pb.CAUSAL_SNAPSHOT


def _complete_but_snapshots(world: FencingWorld, attempt) -> None:
    """Deliver everything but CAUSAL_SNAPSHOT requests until `attempt` has its answer."""
    while attempt.waiting not in world.net.answers:
        world.net.complete(next(i for i, (_, a) in enumerate(world.net.io)
                                if not _is_snapshot(a)))


def _advance(attempt) -> None:
    """The attempt's next request (a sink first takes its worker, free in these scripts)."""
    attempt.advance()
    if attempt.wants_worker:
        attempt.advance()


def _queued_for(world: FencingWorld, cache: str):
    return [i for i, (address, _) in enumerate(world.net.io) if address == cache]


def test_stalled_ct_commit_after_failure_loses_no_acknowledged_write():
    """The SIGSTOP scenario, scripted: a CT call `rd(k) -> slow_wr` reads k on cache0; its
    node stops; the scheduler fails the call (releases queued at cache0); writers on cache1
    read k and write it, acknowledged; the node resumes (the releases arrive), then slow_wr
    finishes and re-binds k and commits. Every acknowledged write must survive, and the
    failed call must not commit."""
    world = FencingWorld(lambda n: 0)
    slow = world.start(pb.CT, key="k0", cache="cache0")
    slow_attempt = world.attempts[-1]
    slow_attempt.advance()                                    # rd's CAUSAL_READ
    _run_until(world, lambda: slow_attempt.waiting in world.net.answers)
    world.fail(slow)                  # heartbeat timeout: the call fails, releases queued
    assert slow.result is not None and not slow.result[0]
    writers = []
    for _ in range(3):
        w = world.start(pb.CT, key="k0", cache="cache1", writer=1)
        writers.append(w)
        attempt = world.attempts[-1]
        for _ in range(100):          # everything of cache1 runs; cache0 stays stopped
            if w.result is not None:
                break
            on1 = _queued_for(world, "cache1")
            if on1:
                world.net.complete(on1[0])
            elif attempt.ready():
                _advance(attempt)
            else:
                raise AssertionError("writer stuck")
        assert w.result == (True, attempt.aid)
    for i in reversed(_queued_for(world, "cache0")):    # SIGCONT: cache0's queue first
        world.net.complete(i)
    world.net.push("cache0", "k0")    # and Anna's push of the writers' k0
    _advance(slow_attempt)            # slow_wr finishes: re-binds k, then commits
    world.drain()
    assert world.check() == []
    assert slow.commits == []


def test_hb_double_commit_is_refused():
    """HB: the simulation early-aborts the OPT attempt while its sink is about to commit;
    CON runs on the "#s" snapshot. Exactly one of the two attempts commits."""
    world = FencingWorld(lambda n: 0)
    hb = world.start(pb.HB, abort_sim=True, key="k0", cache="cache0")
    opt = world.attempts[-1]
    assert opt.plan.protocol == pb.OPT
    # OPT's rd and its sink's re-bind run; the "#s" snapshot request waits
    _advance(opt)
    _complete_but_snapshots(world, opt)
    _advance(opt)
    _complete_but_snapshots(world, opt)
    _advance(opt)                     # the OPT sink's commit is queued
    # now the snapshot replies reach the scheduler: the simulation aborts OPT, CON starts
    while len(world.attempts) < 2:
        snap = [i for i, (_, a) in enumerate(world.net.io) if _is_snapshot(a)]
        if snap:
            world.net.complete(snap[0])
        else:
            world.deliver_to_scheduler(0)
    con = world.attempts[-1]
    assert con.plan.protocol == pb.CON
    world.drain()
    assert world.check() == []
    assert len(hb.commits) == 1, hb.commits


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.integers(20, 120))
def test_every_acknowledged_write_survives_any_interleaving(rnd, steps):
    world = FencingWorld(lambda n: rnd.randrange(n))
    world.run(steps)
    problems = world.check()
    assert problems == [], problems
    assert all(len(c.commits) <= 1 for c in world.calls.values())


# ---- the rule's parts, directly ----
def _commit_request(net, attempt: str, grant: bool = False) -> pb.CacheRequest:
    from hydro_proto import anna_pb2
    from hydrocache.version import Version
    v = Version.new("k0", {"e9": 1}, {}, [b"x"])
    req = pb.CacheRequest(op=pb.CAUSAL_COMMIT, attempt_id=attempt, keys=["k0"],
                          grant_address="scheduler" if grant else "")
    req.writes.append(anna_pb2.KeyTuple(key="k0", lattice_type=anna_pb2.MULTI_CAUSAL,
                                        payload=v.serialize()).SerializeToString())
    return req


def test_release_fences_reads_and_commits_of_the_attempt():
    from hydrocache_sim import Net
    net = Net(1, auto=True)
    net.put("k0", {"a": 1})
    read = pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id="c#0", keys=["k0"], dag_keys=["k0"],
                           dag_keys_known=True)
    first, _ = net.ask("cache0", read)                 # CT's first read builds the snapshot
    assert first.status == pb.OK and first.entries[0].found
    net.ask("cache0", pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id="c#0", timeout=5))
    net.put("k0", {"a": 2})
    again = pb.CacheRequest()
    again.CopyFrom(read)
    again.request_id = ""
    refused, _ = net.ask("cache0", again)
    assert refused.fenced and "c#0" in refused.message and "n0" in refused.message
    committed, _ = net.ask("cache0", _commit_request(net, "c#0"))
    assert committed.fenced and "c#0" in committed.message
    assert net.anna["k0"].vc == {"a": 2}                # nothing of the fenced attempt
    net.tick(5 + 30 + 1)
    net.sweep()                                         # the fence ends with its time
    assert not net.cores["cache0"].temp.fenced("c#0")


def test_commit_rebind_never_builds_a_new_snapshot():
    from hydrocache_sim import Net
    net = Net(1, auto=True)
    net.put("k0", {"a": 1})
    req = pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id="c#0", keys=["k0"], dag_keys=["k0"],
                          dag_keys_known=True, snapshot_required=True)
    response, _ = net.ask("cache0", req)
    assert response.fenced and "snapshot is gone" in response.message
    assert "c#0" not in net.cores["cache0"].temp


def test_commit_waits_for_the_grant_and_writes_nothing_without_it():
    from hydrocache_sim import Net
    net = Net(1, auto=True)
    answers = []
    net.scheduler = lambda r: (answers.append(r.attempt_id), pb.CacheResponse(
        request_id=r.request_id, status=pb.ABORTED, fenced=True, message="not yours"))[1]
    response, _ = net.ask("cache0", _commit_request(net, "c#1", grant=True))
    assert answers == ["c#1"]
    assert response.fenced and "not yours" in response.message and "k0" not in net.anna
    net.scheduler = None                                # a scheduler that never answers
    rid = net.send("cache0", _commit_request(net, "c#2", grant=True), timeout=1.0)
    net.tick(1.5)
    response, _ = net.answers[rid]
    assert response.status == pb.TIMEOUT and "commit grant of attempt c#2" in response.stage
    assert "k0" not in net.anna


def test_releases_handed_over_with_a_grant_fence_their_attempts_and_the_commit_goes_on():
    from hydrocache_sim import Net
    net = Net(1, auto=True)
    net.put("k0", {"a": 1})
    read = pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id="old#0", keys=["k0"],
                           dag_keys=["k0"], dag_keys_known=True)
    assert net.ask("cache0", read)[0].status == pb.OK and "old#0" in net.cores["cache0"].temp
    asked = []
    net.scheduler = lambda r: (asked.append(r.requester), pb.CacheResponse(
        request_id=r.request_id, release=["c#1", "old#0"], release_timeout=5.0))[1]
    response, _ = net.ask("cache0", _commit_request(net, "c#1", grant=True))
    assert asked == ["cache0"]                      # the cache names itself to the scheduler
    assert response.status == pb.OK and not response.fenced and "k0" in net.anna
    temp = net.cores["cache0"].temp
    assert "old#0" not in temp and temp.fenced("old#0") and temp.fenced("c#1")
    again = pb.CacheRequest()
    again.CopyFrom(read)
    again.request_id = ""
    assert net.ask("cache0", again)[0].fenced       # as after a CAUSAL_RELEASE
    net.tick(5 + 30 + 1)
    net.sweep()
    assert not temp.fenced("old#0")


def test_scheduler_grants_one_commit_per_call():
    from scheduler.causal import CausalCall
    from scheduler.causal_records import AbortAttempt, CacheSend
    from hydrocache_fencing_sim import ScriptedEngine
    call = CausalCall("c", pb.HB, ["rd", "wr"], {"wr": ["rd"]}, {"rd": ["k"], "wr": ["k"]},
                      {"rd": "n0", "wr": "n0"}, "sched", 0.0, 10.0,
                      engine=ScriptedEngine(False))
    call.start(0.0)
    opt = call.current()
    granted, _, actions = call.grant(opt, 0.1)
    assert granted and call.granted == opt
    again, reason, _ = call.grant(opt, 0.2)
    assert not again and "already granted" in reason
    other, reason, _ = call.grant("c#7", 0.2)
    assert not other and opt in reason
    # a failure after the grant says the commit may still be applied
    (fail,) = [a for a in call.fail(pb.EXECUTION_ERROR, "worker died") if hasattr(a, "status")]
    assert "may still be applied" in fail.message
    assert not call.grant(opt, 0.3)[0]


def test_grant_stops_and_fences_the_other_running_attempts():
    from scheduler.causal import CausalCall
    from scheduler.causal_records import AbortAttempt, CacheSend
    call = CausalCall("c", pb.CT, ["f"], {}, {"f": ["k"]}, {"f": "n0"}, "sched", 0.0, 10.0)
    call.start(0.0)
    first = call.current()
    call.attempts["c#9"] = type(call.attempts[first])(pb.CT)     # a second one running
    granted, _, actions = call.grant(first, 0.1)
    assert granted
    assert AbortAttempt("c#9") in actions
    assert any(isinstance(a, CacheSend) and a.request.op == pb.CAUSAL_RELEASE
               and a.request.attempt_id == "c#9" for a in actions)
    assert call.start_attempt("c#10", pb.CT, 0.2) == []            # nothing starts after it
    assert not call.grant("c#9", 0.2)[0]


def test_a_refused_commit_leaves_no_trace_in_the_writer():
    """Versions built for a commit that was refused are not the executor's latest writes: a
    later commit does not carry their values (they were never written)."""
    from hydrocache.writer import ExecutorWriter
    w = ExecutorWriter("e")
    refused = w.commit({"k": b"refused"}, {}, record=False)
    assert w.latest("k") is None
    later = w.commit({"k": b"later"}, {})
    assert list(later[0].values) == [b"later"] and later[0].vc["e"] > refused[0].vc["e"]
    w.record(refused)                       # older than what is recorded: ignored
    assert list(w.latest("k").values) == [b"later"]


def test_one_release_fences_every_attempt_it_names():
    """A call's end releases all its attempts in one message per cache (`also_release`):
    each attempt named is fenced and its snapshot dropped, as if released one by one."""
    from hydrocache_sim import Net
    net = Net(1, auto=True)
    net.put("k0", {"a": 1})
    reads = {}
    for attempt in ("c#0", "c#s", "c#1"):
        reads[attempt] = pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=attempt, keys=["k0"],
                                         dag_keys=["k0"], dag_keys_known=True)
        first, _ = net.ask("cache0", reads[attempt])
        assert first.status == pb.OK and attempt in net.cores["cache0"].temp
    net.ask("cache0", pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id="c#0",
                                      also_release=["c#s"], timeout=5))
    temp = net.cores["cache0"].temp
    assert temp.fenced("c#0") and temp.fenced("c#s") and not temp.fenced("c#1")
    assert "c#0" not in temp and "c#s" not in temp and "c#1" in temp
    for attempt in ("c#0", "c#s"):
        committed, _ = net.ask("cache0", _commit_request(net, attempt))
        assert committed.fenced and attempt in committed.message
