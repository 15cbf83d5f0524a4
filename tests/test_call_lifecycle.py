"""The pure cores of a call's lifecycle: retries (scheduler.retries), client leases
(scheduler.leases), and the worker's side of exception retries (executor.retrying).
Directly and with hypothesis; no processes."""
import pytest
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2 as pb
from executor.retrying import exception_names, may_retry, retry_request
from scheduler.leases import MAX_TTL, LeaseTable
from scheduler.retries import (Failure, GiveUp, Retry, RetryPolicy, RetryTable, attempt_id,
                               caller_of_attempt, resolve)


def P(max_retries=None, exceptions=None):
    p = pb.RetryPolicy()
    if max_retries is not None:
        p.has_max_retries, p.max_retries = True, max_retries
    if exceptions is not None:
        p.has_exceptions = True
        if exceptions is True:
            p.all_exceptions = True
        elif exceptions is not False:
            p.exception_types.extend(exceptions)
    return p


# ---- policy resolution ----
def test_the_call_overrides_its_functions_which_override_the_cluster():
    default = RetryPolicy(3)
    assert resolve(None, [None], default) == RetryPolicy(3, False)
    assert resolve(None, [P(1)], default).max_retries == 1
    assert resolve(P(5), [P(1)], default).max_retries == 5
    assert resolve(P(exceptions=True), [P(2)], default) == RetryPolicy(2, True)
    assert resolve(P(0, exceptions=False), [P(2, True)], default) == RetryPolicy(0, False)


def test_a_dag_runs_again_only_as_often_as_its_most_careful_function_allows():
    got = resolve(None, [P(4), None, P(0), P(2, ["builtins.KeyError"])], RetryPolicy(3))
    assert got.max_retries == 0 and got.exceptions == frozenset({"builtins.KeyError"})
    assert resolve(None, [P(exceptions=["a.B"]), P(exceptions=True)],
                   RetryPolicy(3)).exceptions is True


# ---- the retry table ----
def test_a_call_whose_worker_dies_runs_again_under_new_attempt_ids_until_the_budget_is_spent():
    t = RetryTable()
    assert t.begin("c1", RetryPolicy(2), "payload", deadline=100.0)
    assert t.current("c1") == "c1"
    r1 = t.on_failure("c1", Failure("worker w1 died"))
    assert r1 == Retry("c1#r1", 2) and t.current("c1") == "c1#r1"
    assert t.on_failure("c1", Failure("late report of the replaced attempt")) is None
    r2 = t.on_failure("c1#r1", Failure("worker w2 died"))
    assert r2 == Retry("c1#r2", 3)
    out = t.on_failure("c1#r2", Failure("worker w3 died"))
    assert isinstance(out, GiveUp) and out.status == pb.WORKER_DIED and out.attempts == 3
    assert "max_retries=2" in out.message and "w1" in out.message and "w2" in out.message
    assert len(t) == 0


def test_no_retries_fails_at_once_naming_one_attempt():
    t = RetryTable()
    t.begin("c", RetryPolicy(0), None, 10.0)
    out = t.on_failure("c", Failure("worker w died"))
    assert isinstance(out, GiveUp) and out.attempts == 1 and out.status == pb.WORKER_DIED


def test_exceptions_are_retried_only_when_the_policy_names_them():
    t = RetryTable()
    t.begin("a", RetryPolicy(3, frozenset({"mod.Flaky"})), None, 10.0)
    boom = Failure("raised Boom", system=False, type_names=frozenset({"mod.Boom",
                                                                      "builtins.Exception"}))
    out = t.on_failure("a", boom)
    assert isinstance(out, GiveUp) and out.status == pb.EXECUTION_ERROR and out.attempts == 1
    t.begin("b", RetryPolicy(1, frozenset({"mod.Flaky"})), None, 10.0)
    flaky = Failure("raised Sub", system=False, type_names=frozenset({"mod.Sub", "mod.Flaky"}))
    assert t.on_failure("b", flaky) == Retry("b#r1", 2)
    out = t.on_failure("b#r1", flaky)
    assert isinstance(out, GiveUp) and out.status == pb.EXECUTION_ERROR and out.attempts == 2


def test_a_causal_call_granted_its_commit_is_never_run_again():
    t = RetryTable()
    t.begin("c", RetryPolicy(5), None, 10.0)
    out = t.on_failure("c", Failure("worker died", committed=True))
    assert isinstance(out, GiveUp) and "may have been applied" in out.message


def test_ids_with_a_hash_are_not_tracked_and_attempt_ids_map_back():
    t = RetryTable()
    assert not t.begin("x#1", RetryPolicy(3), None, 1.0) and len(t) == 0
    assert caller_of_attempt("c#r2") == "c" and caller_of_attempt("c#r1#0") == "c"
    assert attempt_id("c", 1) == "c" and attempt_id("c", 3) == "c#r2"


def test_finish_and_expiry_forget_calls():
    t = RetryTable()
    t.begin("a", RetryPolicy(3), None, 5.0)
    t.begin("b", RetryPolicy(3), None, 50.0)
    t.on_failure("b", Failure("died"))
    assert t.finish("b#r1").caller == "b"
    assert [x.caller for x in t.expire(6.0)] == ["a"] and len(t) == 0


@settings(max_examples=100, deadline=None)
@given(budget=st.integers(0, 6),
       events=st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=12))
def test_a_call_never_runs_more_than_its_budget_allows_and_ends_once(budget, events):
    """Whatever failures come (system or exception, retryable or not, from the current or
    a replaced attempt), attempts never exceed budget + 1, each retry has a fresh id, and
    once given up the call is forgotten."""
    t = RetryTable()
    t.begin("c", RetryPolicy(budget, frozenset({"m.E"})), None, 100.0)
    seen, runs, ended = {"c"}, 1, False
    for system, retryable, stale in events:
        current = t.current("c")
        if ended:
            assert current is None
            break
        target = "c#r99" if stale else current
        names = frozenset({"m.E"}) if retryable else frozenset({"m.Other"})
        out = t.on_failure(target, Failure("x", system=system, type_names=names))
        if stale:
            assert out is None
            continue
        if isinstance(out, Retry):
            runs += 1
            assert out.attempt_id not in seen and out.attempt == runs
            seen.add(out.attempt_id)
        else:
            assert isinstance(out, GiveUp) and out.attempts == runs
            assert system or not retryable or runs == budget + 1
            ended = True
        assert runs <= budget + 1


# ---- leases ----
def test_a_client_that_stops_renewing_has_its_calls_cancelled():
    t = LeaseTable()
    t.add("A", "a1", 5.0, now=0.0)
    t.add("A", "a2", 5.0, now=1.0)
    t.add("B", "b1", 5.0, now=0.0)
    t.renew("B", 5.0, now=4.0)
    assert t.expire(5.5) == []
    assert t.expire(6.5) == [("A", ["a1", "a2"])]
    t.finish("b1")
    assert len(t) == 0 and t.expire(100.0) == []


def test_a_leaving_client_cancels_at_once_and_renewals_never_grow_the_table():
    t = LeaseTable()
    t.renew("ghost", 5.0, 0.0)
    assert len(t) == 0
    t.add("A", "a1", 5.0, 0.0)
    assert t.leave("A") == ["a1"] and t.leave("A") == [] and len(t) == 0


def test_a_stalled_scheduler_does_not_expire_leases_it_could_not_read():
    t = LeaseTable()
    t.add("A", "a1", 2.0, 0.0)
    t.credit(10.0)
    assert t.expire(11.0) == [] and t.expire(12.5) == [("A", ["a1"])]
    t.add("B", "b1", 1e9, 0.0)
    assert t.expire(MAX_TTL + 1) == [("B", ["b1"])]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("add renew finish leave expire".split()),
                          st.sampled_from("AB"), st.integers(0, 3),
                          st.floats(0, 3)), max_size=30))
def test_every_leased_call_is_cancelled_once_or_finishes(ops):
    """A model check: a call is reported for cancelling at most once, never after it
    finished, and only once its client's lease has run out (or the client left)."""
    t = LeaseTable()
    now, expires, live, cancelled = 0.0, {}, {}, set()
    for op, client, n, dt in ops:
        now += dt
        cid = f"{client}{n}"
        if op == "add":
            if cid in cancelled:
                continue
            t.add(client, cid, 2.0, now)
            live[cid] = client
            expires[client] = max(expires.get(client, 0.0), now + 2.0)
        elif op == "renew":
            t.renew(client, 2.0, now)
            if any(c == client for c in live.values()):
                expires[client] = max(expires.get(client, 0.0), now + 2.0)
        elif op == "finish":
            t.finish(cid)
            live.pop(cid, None)
        else:
            out = [(client, t.leave(client))] if op == "leave" else t.expire(now)
            for c, calls in out:
                if op == "expire":
                    assert now > expires[c]
                for call in calls:
                    assert live.pop(call) == c and call not in cancelled
                    cancelled.add(call)
                if not any(x == c for x in live.values()):
                    expires.pop(c, None)
    assert set(live) == {c for cl in "AB" for c in t.calls(cl)}


# ---- the worker's side ----
class Flaky(Exception):
    pass


class Sub(Flaky):
    pass


def test_a_worker_asks_for_a_retry_only_for_the_exceptions_its_call_names():
    names = exception_names(Sub)
    assert names[0] == f"{__name__}.Sub" and f"{__name__}.Flaky" in names
    assert "builtins.Exception" in names
    s = pb.Schedule(call_id="c", response_address="tcp://x:1",
                    retry_exception_types=[f"{__name__}.Flaky"])
    assert may_retry(s, names) and not may_retry(s, exception_names(KeyError))
    assert not may_retry(pb.Schedule(), names)
    assert may_retry(pb.Schedule(retry_all_exceptions=True), ["x.Y"])
    done = retry_request(s, "boom", "tb", "logs", names)
    assert done.retry.request_id == "c" and done.response_address == "tcp://x:1"
    assert list(done.exception_types) == names and done.retry.status == pb.EXECUTION_ERROR
