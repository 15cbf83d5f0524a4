"""Actors' pure parts: the scheduler's directory and placement, the worker's actor table, the
handle, and what a function key may send. Integration tests are tests/test_actors.py."""
import pickle
import random

import pytest
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2 as pb
from runtime.actors import ActorHandle, binding, public_methods
from runtime.auth import CLUSTER, FUNCTION
from faas.errors import NoResources
from faas.values import dumps, loads
from scheduler.actors import (CREATE, KILL, METHOD, ActorDirectory, ActorEntry,
                              choose_actor_worker, find_wait_cycle, prefer_free)
from scheduler.policy import WorkerView
from executor.actors import ActorGone, ActorTable, ActorTableFull


def _w(wid, outstanding=0):
    return WorkerView(wid, "n0", f"tcp://127.0.0.1:{1000 + len(wid)}", 0.0, outstanding)


class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, by=1):
        self.n += by
        return self.n

    def whoami(self, lib):
        return lib.getid()

    def fail(self):
        raise ValueError("no")

    def _private(self):
        return "hidden"


# ---- scheduler: placement and directory ----

def test_a_new_actor_goes_to_the_worker_with_the_fewest_actors_then_the_least_load():
    rng = random.Random(1)
    workers = [_w("a", 0), _w("b", 3), _w("c", 1)]
    assert choose_actor_worker(workers, {"a": 2, "b": 0, "c": 0}, rng).worker_id == "c"
    assert choose_actor_worker(workers, {}, rng).worker_id == "a"
    with pytest.raises(NoResources):
        choose_actor_worker([], {}, rng)


def test_plain_calls_avoid_workers_hosting_actors_unless_every_worker_does():
    workers = [_w("a"), _w("b")]
    assert [w.worker_id for w in prefer_free(workers, {"a": 1})] == ["b"]
    assert [w.worker_id for w in prefer_free(workers, {"a": 1, "b": 2})] == ["a", "b"]
    assert [w.worker_id for w in prefer_free(workers, {"a": 0})] == ["a", "b"]


def test_routing_follows_the_worker_and_a_lost_or_restarted_worker_kills_the_actor():
    d = ActorDirectory()
    d.placed(ActorEntry("x", "Counter", "w1", restarts=2))
    d.placed(ActorEntry("y", "Counter", "w2", restarts=0))
    live = {"w1": 2, "w2": 0}
    assert d.route("x", live.get) == (d.get("x"), None)
    assert d.route("nobody", live.get) == (None, None)
    assert d.hosting() == {"w1": 1, "w2": 1}
    live["w1"] = 3                       # same id, new process: the instance is gone
    entry, why = d.route("x", live.get)
    assert entry.worker_id == "w1" and "restarted" in why
    del live["w2"]
    assert "w2 is gone" in d.route("y", live.get)[1]
    assert d.hosting() == {}


def test_a_worker_death_ends_its_actors_and_a_failed_creation_ends_its_actor():
    d = ActorDirectory()
    d.placed(ActorEntry("x", "C", "w1"))
    d.placed(ActorEntry("y", "C", "w2"))
    d.placed(ActorEntry("z", "C", "w2"))
    assert sorted(e.actor_id for e in d.worker_lost("w2", "exited with code 1")) == ["y", "z"]
    assert d.get("y").dead == "its worker w2 exited with code 1"
    assert d.worker_lost("w2", "again") == []        # dead once
    d.call_started("c1", "x", CREATE)
    d.call_started("c2", "x", METHOD)
    assert d.actor_of_call("c2").actor_id == "x"
    assert d.call_finished("c2", False) is None       # a method failing leaves the actor
    assert d.get("x").dead is None
    assert d.call_finished("c1", False).dead == "its constructor failed"
    d.placed(ActorEntry("k", "C", "w1"))
    assert d.ended("k", "it was killed").dead == "it was killed"
    assert d.ended("k", "later reason").dead == "it was killed"   # the first reason stays


def test_an_actor_with_restarts_left_is_restartable_by_its_owner_only_after_a_worker_death():
    d = ActorDirectory()
    d.placed(ActorEntry("x", "C", "w1", max_restarts=2, owner="s0", creation=b"c"))
    d.placed(ActorEntry("never", "C", "w1", owner="s0"))            # max_restarts 0
    d.placed(ActorEntry("killed", "C", "w2", max_restarts=-1, owner="s0", creation=b"c"))
    d.ended("killed", "it was killed")
    assert not d.restartable(d.get("killed"), "s0")                  # killed: never again
    assert not d.restartable(d.get("x"), "s0")                       # alive
    d.worker_lost("w1", "exited with code 1")
    assert d.restartable(d.get("x"), "s0") and not d.restartable(d.get("x"), "s1")
    assert not d.restartable(d.get("never"), "s0")
    new = d.restarted(d.get("x"), "w3", 4)
    assert (new.worker_id, new.restarts, new.incarnation, new.dead) == ("w3", 4, 1, None)
    assert d.get("x") is new and d.hosting() == {"w3": 1}
    assert d.route("x", {"w3": 4}.get) == (new, None)
    d.route("x", {}.get)                                             # w3 gone: dead again
    assert d.restartable(d.get("x"), "s0")
    last = d.restarted(d.get("x"), "w4", 0)
    d.worker_lost("w4", "was killed by signal 9")
    assert last.incarnation == 2 and not d.restartable(last, "s0")   # budget spent
    forever = ActorEntry("f", "C", "w1", max_restarts=-1, incarnation=1000, owner="s0",
                         creation=b"c")
    d.placed(forever)
    d.worker_lost("w1", "gone")
    assert d.restartable(forever, "s0")


def test_status_counts_each_actors_calls_in_flight_live_actors_first():
    d = ActorDirectory()
    d.placed(ActorEntry("dead", "C", "w1"))
    d.ended("dead", "it was killed")
    d.placed(ActorEntry("a", "C", "w2"))
    for i in range(3):
        d.call_started(f"c{i}", "a", METHOD)
    d.call_finished("c0", True)
    assert d.calls_of() == {"a": 2}
    assert [e.actor_id for e in d.entries()] == ["a", "dead"]


def test_a_call_closing_a_cycle_of_waiting_workers_is_found():
    d = ActorDirectory()
    d.placed(ActorEntry("A", "C", "w1"))
    d.placed(ActorEntry("B", "C", "w2"))
    d.placed(ActorEntry("D", "C", "w3"))
    d.call_started("c1", "A", METHOD, "", "w1")          # the client calls A (no edge)
    d.call_started("c2", "B", METHOD, "w1", "w2")        # A's method calls B
    d.call_started("c3", "D", METHOD, "w2", "w3")        # B's method calls D
    assert d.wait_cycle("w3", "w1") == ["w1", "w2", "w3"]    # D calling A: a cycle
    assert d.wait_cycle("w3", "w2") == ["w2", "w3"]
    assert d.wait_cycle("w1", "w3") is None                  # A calling D again: no cycle
    d.call_finished("c3", True)
    assert d.wait_cycle("w3", "w1") is None                  # the edge is gone with its call


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from("abcde")), max_size=12),
       st.sampled_from("abcde"), st.sampled_from("abcde"))
def test_find_wait_cycle_is_reachability_and_returns_a_real_chain(edges, caller, target):
    reach, frontier = {target}, [target]
    while frontier:
        w = frontier.pop()
        for a, b in edges:
            if a == w and b not in reach:
                reach.add(b)
                frontier.append(b)
    chain = find_wait_cycle(edges, caller, target)
    assert (chain is not None) == (caller in reach)
    if chain is not None:
        assert chain[0] == target and chain[-1] == caller
        assert all((a, b) in edges for a, b in zip(chain, chain[1:]))
        assert len(set(chain)) == len(chain)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["place", "lose", "end", "start", "finish",
                                           "route"]),
                          st.integers(0, 30), st.sampled_from(["w0", "w1", "w2"]),
                          st.booleans()), max_size=120))
def test_the_directory_stays_bounded_and_a_dead_actor_never_lives_again(ops):
    d = ActorDirectory(max_actors=8, max_calls=5)
    dead = set()
    for op, n, wid, ok in ops:
        aid = f"a{n}"
        if op == "place" and d.get(aid) is None and aid not in dead:
            d.placed(ActorEntry(aid, "C", wid))
        elif op == "lose":
            dead |= {e.actor_id for e in d.worker_lost(wid, "died")}
        elif op == "end" and d.ended(aid, "killed") is not None:
            dead.add(aid)
        elif op == "start":
            d.call_started(f"c{n}", aid, (CREATE, METHOD, KILL)[n % 3])
        elif op == "route":               # worker w2 is gone, w1 was restarted
            entry, why = d.route(aid, {"w0": 0, "w1": 1}.get)
            if why is not None:
                dead.add(aid)
            assert entry is None or (why is None) == (entry.worker_id == "w0") or \
                entry.dead is not None
        elif op == "finish":
            entry = d.call_finished(f"c{n}", ok)
            if entry is not None:
                dead.add(entry.actor_id)
        assert len(d) <= 8 and len(d._calls) <= 5
        for aid in dead:
            entry = d.get(aid)
            assert entry is None or entry.dead is not None
        live = [e for e in d._actors.values() if e.dead is None]
        assert d.hosting() == {w: sum(1 for e in live if e.worker_id == w)
                               for w in {e.worker_id for e in live}}


# ---- worker: the actor table ----

class _Lib:
    def getid(self):
        return "w-test"


def _create(actor_id, cls=Counter, args=(10,), kwargs=None):
    return pb.ActorCall(actor_id=actor_id, op=pb.ACTOR_CREATE, class_name=cls.__name__,
                        body=dumps((cls, args, kwargs or {})))


def _method(actor_id, name, **kwargs):
    return pb.ActorCall(actor_id=actor_id, op=pb.ACTOR_METHOD, method=name,
                        class_name="Counter", kwargs=dumps(kwargs) if kwargs else b"")


def _table(n=2):
    return ActorTable(n, lambda b: loads(b, objects=True))


def test_the_table_constructs_once_and_runs_methods_with_lib_only_when_asked_for():
    t, lib = _table(), _Lib()
    t.target(_create("a"), "w")(lib)
    assert t.target(_method("a", "incr"), "w")(lib, 1) == 11
    assert t.target(_method("a", "incr", by=5), "w")(lib) == 16
    assert t.target(_method("a", "whoami"), "w")(lib) == "w-test"
    t.target(_create("a"), "w")(lib)                 # a repeated creation keeps the instance
    assert t.target(_method("a", "incr"), "w")(lib, 0) == 16


def test_a_method_error_fails_that_call_only_and_private_names_are_refused():
    t, lib = _table(), _Lib()
    t.target(_create("a"), "w")(lib)
    with pytest.raises(ValueError):
        t.target(_method("a", "fail"), "w")(lib)
    for name in ("_private", "nope"):
        with pytest.raises(AttributeError):
            t.target(_method("a", name), "w")(lib)
    assert t.target(_method("a", "incr"), "w")(lib, 1) == 11


def test_a_killed_or_unknown_actor_is_gone_and_the_table_is_bounded():
    t, lib = _table(2), _Lib()
    t.target(_create("a"), "w")(lib)
    t.target(_create("b"), "w")(lib)
    with pytest.raises(ActorTableFull, match="max_actors"):
        t.target(_create("c"), "w")
    t.target(pb.ActorCall(actor_id="a", op=pb.ACTOR_KILL), "w")(lib)
    with pytest.raises(ActorGone, match="was killed"):
        t.target(_method("a", "incr"), "w")
    with pytest.raises(ActorGone, match="not held by worker w"):
        t.target(_method("zzz", "incr"), "w")
    t.target(_create("c"), "w")(lib)                 # room again
    assert len(t) == 2


# ---- the handle ----

class _Recorder:
    def __init__(self):
        self.calls = []

    def call_actor(self, handle, method, args, kwargs, options):
        self.calls.append((handle.actor_id, method, args, kwargs, options))
        return "future"

    def kill_actor(self, handle, timeout):
        self.calls.append((handle.actor_id, "kill", timeout))


def test_a_handle_is_plain_data_and_its_parts_are_checked():
    from faas.errors import MalformedValue
    h = ActorHandle("id1", "Counter", ("incr",), _Recorder())
    got = loads(dumps(h))                   # plain data: no objects=True needed
    assert got == h and got.methods == ("incr",) and got._bound is None
    forged = pickle.dumps(ActorHandle("id1", "C", ())).replace(b"id1", b"id2")
    assert loads(forged).actor_id == "id2"

    class Forged:                           # a handle whose parts are not plain strings
        def __reduce__(self):
            return (ActorHandle, (1, "C", ()))
    with pytest.raises(MalformedValue):
        loads(pickle.dumps(Forged()))


def test_a_handle_pickles_without_its_connection_and_calls_through_the_bound_caller():
    bound = _Recorder()
    h = ActorHandle("id1", "Counter", public_methods(Counter), bound)
    assert public_methods(Counter) == ("fail", "incr", "whoami")
    assert h.incr(1, by=2) == "future"
    assert bound.calls[-1] == ("id1", "incr", (1,), {"by": 2}, {})
    copy = pickle.loads(pickle.dumps(h))
    assert copy == h and copy._bound is None
    with pytest.raises(RuntimeError, match="not bound"):
        copy.incr(1)
    inside = _Recorder()
    with binding(inside):                             # a worker running a function
        copy.incr.options(timeout=3)(4)
        copy.kill()
    assert inside.calls == [("id1", "incr", (4,), {}, {"timeout": 3}), ("id1", "kill", None)]
    with pytest.raises(AttributeError, match="incr"):
        copy.decr
    with pytest.raises(TypeError, match="unknown actor call option"):
        copy.incr.options(retries=3)


# ---- least privilege ----

class _Frame:
    def __init__(self, role):
        self.role = role

    def get(self, prop):
        return self.role


def test_a_function_may_call_or_kill_an_actor_but_not_create_one_or_make_a_plain_call():
    from scheduler.admission import Admission
    admission = Admission("s", security=object())
    fn = _Frame(FUNCTION)

    def call(op=None):
        c = pb.Call(function="f")
        if op is not None:
            c.actor.CopyFrom(pb.ActorCall(actor_id="a", op=op))
        return c.SerializeToString()
    assert admission.admits(fn, "call", call(pb.ACTOR_METHOD))
    assert admission.admits(fn, "call", call(pb.ACTOR_KILL))
    assert not admission.admits(fn, "call", call(pb.ACTOR_CREATE))
    assert not admission.admits(fn, "call", call())
    assert not admission.admits(fn, "call", b"\xff\xff not a call")
    assert admission.admits(_Frame("client:c"), "call", call(pb.ACTOR_CREATE))
    assert admission.admits(_Frame(CLUSTER), "call", call())
