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


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.integers(20, 120))
def test_every_acknowledged_write_survives_any_interleaving(rnd, steps):
    world = FencingWorld(lambda n: rnd.randrange(n))
    world.run(steps)
    problems = world.check()
    assert problems == [], problems
    assert all(len(c.commits) <= 1 for c in world.calls.values())
