"""The pure cores behind functions as users write them: how a function is called
(`executor/calling.py`), the results a worker holds (`executor/held.py`), where a scheduler
says a result is held (`scheduler/results.py`), and named inputs of a pending invocation
(`executor/dagstate.py`)."""
import asyncio
import functools

import pytest
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2 as pb

from executor.calling import Entry, check_registrable, current_library, entry_of
from executor.dagstate import PendingCalls
from executor.held import HeldResults, Outcome
from faas.errors import InvalidArguments, InvalidFunction, NoLibrary
from scheduler.results import ResultHolders


# ---- calling ----
def test_lib_is_given_only_to_a_function_whose_first_parameter_is_lib():
    assert Entry(lambda lib, x: (lib, x), "f").call("LIB", [1], {}) == ("LIB", 1)
    assert Entry(lambda x, y=2: (x, y), "f").call("LIB", [1], {"y": 3}) == (1, 3)
    assert Entry(lambda *a, **k: (a, k), "f").call("LIB", [1], {"z": 2}) == ((1,), {"z": 2})
    assert Entry(abs, "abs").call("LIB", [-3], {}) == 3        # a builtin: no lib

    class Run:
        def run(self, lib, x):
            return lib, x

    assert Entry(Run().run, "r").call("LIB", [1], {}) == ("LIB", 1)


def test_the_library_is_current_only_while_a_function_runs():
    with pytest.raises(NoLibrary):
        current_library()
    assert Entry(lambda: current_library(), "f").call("LIB", [], {}) == "LIB"
    with pytest.raises(NoLibrary):
        current_library()

    async def coro(x):
        await asyncio.sleep(0)
        return current_library(), x

    assert Entry(coro, "c").call("LIB", [5], {}) == ("LIB", 5)
    with pytest.raises(ZeroDivisionError):          # the library is reset on errors too
        Entry(lambda: 1 / 0, "f").call("LIB", [], {})
    with pytest.raises(NoLibrary):
        current_library()


def test_arguments_are_checked_against_the_signature_before_the_call():
    calls = []
    entry = Entry(lambda lib, x, *, y: calls.append((x, y)), "f")
    entry.check([1], {"y": 2})
    for args, kwargs, what in [([], {"y": 2}, "missing"), ([1, 2], {"y": 2}, "too many"),
                               ([1], {}, "missing"), ([1], {"y": 1, "z": 3}, "unexpected")]:
        with pytest.raises(InvalidArguments, match=rf"function 'f'.*{what}.*lib"):
            entry.check(args, kwargs)
    assert calls == []
    Entry(max, "max").check([1, 2, 3], {"k": 1})  # no signature: not checked


def test_what_cannot_run_is_refused():
    def gen():
        yield 1

    async def agen():
        yield 1

    class Gen:
        def __call__(self):
            yield 1

    class NoEntry:
        pass

    class CallOnly:
        def __call__(self, x):
            return x

    for target, stateful, match in [
            (gen, False, "a generator function"), (agen, False, "an async generator"),
            (functools.partial(gen), False, "generator"), (Gen(), False, "generator"),
            (NoEntry, True, "`run` method"), (NoEntry(), False, "not callable"),
            (42, False, "not callable"), (NoEntry, False, "stateful class"),
            (lambda x, lib: x, False, "not its first"),
            (lambda *, lib: 1, False, "not its first")]:
        with pytest.raises(InvalidFunction, match=match):
            check_registrable(target, "name", stateful)
    for ok, stateful in [(lambda: 1, False), (lambda lib: 1, False), (CallOnly, True),
                         (CallOnly(), False), (print, False)]:
        check_registrable(ok, "name", stateful)
    assert entry_of(CallOnly) == "__call__" and entry_of(NoEntry) is None


# ---- held results ----
def test_held_results_answer_now_or_when_produced():
    h = HeldResults(ttl=10.0)
    assert h.ask("c1", "req-a", deadline=5.0, now=0.0) is None        # waits
    ok = Outcome(pb.OK, b"value")
    assert h.keep("c1", ok, now=1.0) == ["req-a"]
    assert h.ask("c1", "req-b", deadline=5.0, now=2.0) == ok
    assert h.keep("c1", Outcome(pb.CANCELLED, message="late abort"), now=2.0) == []
    assert h.ask("c1", "req-c", deadline=5.0, now=3.0) == ok          # the first outcome wins
    assert h.expire(now=11.5) == []
    gone = h.ask("c1", "req-d", deadline=20.0, now=12.0)
    assert gone.status == pb.DEPENDENCY_FAILED and "held 10 s" in gone.message


def test_waiting_requests_are_answered_at_their_deadline():
    h = HeldResults(max_waiting=2)
    assert h.ask("c", "a", deadline=1.0, now=0.0) is None
    assert h.ask("c", "b", deadline=3.0, now=0.0) is None
    full = h.ask("d", "x", deadline=3.0, now=0.0)
    assert full.status == pb.DEPENDENCY_FAILED and "2 requests" in full.message
    expired = h.expire(now=2.0)
    assert [r for r, _ in expired] == ["a"] and expired[0][1].status == pb.DEPENDENCY_FAILED
    assert h.keep("c", Outcome(pb.OK, b"v"), now=2.5) == ["b"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 400)), max_size=60))
def test_held_results_stay_within_their_bounds(puts):
    h = HeldResults(ttl=1e9, max_entries=8, max_bytes=1000)
    for i, (call, size) in enumerate(puts):
        h.keep(f"c{call}-{i}", Outcome(pb.OK, b"x" * size), now=float(i))
        assert len(h) <= 8 and h.held_bytes <= 1000
    # the newest outcome that fits is always held
    if puts:
        call, size = puts[-1]
        got = h.ask(f"c{call}-{len(puts) - 1}", "r", deadline=1.0, now=float(len(puts)))
        assert got is not None and got.status == pb.OK and len(got.value) == size
    too_big = HeldResults(max_bytes=10)
    assert too_big.keep("big", Outcome(pb.OK, b"x" * 11), now=0.0) == []
    assert "larger than" in too_big.ask("big", "r", 1.0, 0.0).message


# ---- result holders at the scheduler ----
def _call_with_refs(*call_ids):
    call = pb.Call(function="f")
    for i, cid in enumerate(call_ids):
        if i % 2:
            call.args["f"].kwargs[f"k{i}"].call.call_id = cid
        else:
            call.args["f"].args.add().call.call_id = cid
    call.args["f"].args.add(value=b"plain")
    return call


def test_result_holders_stamp_known_calls_and_name_unknown_ones():
    r = ResultHolders(ttl=10.0, max_entries=2)
    r.placed("p1", "tcp://w1", now=0.0)
    r.placed("p2", "tcp://w2", now=1.0)
    call = _call_with_refs("p1", "p2", "nope")
    unknown = r.stamp(call, now=2.0)
    assert [u.call_id for u in unknown] == ["nope"]
    assert call.args["f"].args[0].call.holder == "tcp://w1"
    assert call.args["f"].kwargs["k1"].call.holder == "tcp://w2"
    r.placed("p3", "tcp://w3", now=3.0)                  # p1 forgotten: two at most
    assert r.holder("p1", now=3.0) == "" and r.holder("p3", now=3.0) == "tcp://w3"
    assert r.holder("p2", now=11.5) == ""                # past its ttl


# ---- named inputs of a pending invocation ----
def test_an_invocation_waits_for_its_named_inputs():
    p = PendingCalls()
    assert p.add_schedule("c", "g", "S", ["up"], ["own"], deadline=10.0, now=0.0,
                          inputs=["in0"]) is None
    assert sorted(p.missing("c", "g")) == ["in0", "up"]
    assert p.add_trigger("c", "g", "in0", b"fetched", now=1.0) is None
    assert p.add_trigger("c", "g", "stranger", b"x", now=1.0) is None    # not an input
    ready = p.add_trigger("c", "g", "up", b"upstream", now=2.0)
    assert ready.args == ["own", b"upstream"] and ready.inputs == {"in0": b"fetched"}
    assert p.missing("c", "g") == []
    p.add_schedule("d", "g", "S", [], [], deadline=1.0, now=0.0, inputs=["in0"])
    [stalled] = p.expire(now=2.0)
    assert stalled.missing == ["in0"]


# ---- a ready invocation's arguments ----
def test_prepare_substitutes_fetched_results_and_names_missing_ones():
    from executor.dagstate import Ready
    from executor.sharing import DependencyError, Unavailable, call_inputs, prepare
    from faas.values import dumps

    s = pb.Schedule(call_id="c", function="g")
    s.args.args.add(value=dumps(1))
    s.args.args.add().call.CopyFrom(pb.CallRef(call_id="p", what="call of function 'f'"))
    s.args.kwargs["k"].call.CopyFrom(pb.CallRef(call_id="q"))
    names = list(call_inputs(s.args))
    assert names == ["argument 1 (the result of call of function 'f')",
                     "keyword argument 'k' (the result of call q)"]
    ready = Ready("c", "g", s, list(s.args.args) + [dumps("up")],
                  inputs={names[0]: dumps(2), names[1]: dumps(3)})
    assert prepare(ready, "function 'g'") == ([1, 2, "up"], {"k": 3})
    ready.inputs[names[1]] = Unavailable(pb.EXECUTION_ERROR, "f raised ValueError")
    with pytest.raises(DependencyError, match=r"function 'g': its keyword argument 'k'.*"
                                              r"call q.*failed with ExecutionError: f raised"):
        prepare(ready, "function 'g'")
