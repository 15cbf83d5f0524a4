"""Worker-side readiness and argument order (executor.dagstate), including racing arrivals."""
from hypothesis import given, settings, strategies as st

from executor.dagstate import PendingCalls


def test_source_is_ready_on_schedule():
    p = PendingCalls()
    r = p.add_schedule("c", "f", "S", [], [1, 2], deadline=10, now=0)
    assert r.args == [1, 2] and r.schedule == "S"
    assert len(p) == 0


def test_fan_in_waits_for_all_then_orders_by_connection():
    p = PendingCalls()
    assert p.add_schedule("c", "d", "S", ["b", "a"], ["own"], deadline=10, now=0) is None
    assert p.add_trigger("c", "d", "a", "A", now=0) is None
    r = p.add_trigger("c", "d", "b", "B", now=0)
    assert r.args == ["own", "B", "A"]


def test_trigger_before_schedule_is_kept():
    p = PendingCalls(orphan_timeout=5)
    assert p.add_trigger("c", "g", "f", 7, now=0) is None
    assert p.add_schedule("c", "g", "S", ["f"], [], deadline=10, now=1).args == [7]


def test_fires_once_and_ignores_duplicates():
    p = PendingCalls()
    assert p.add_schedule("c", "g", "S", ["f"], [], 10, 0) is None
    assert p.add_trigger("c", "g", "f", 1, 0) is not None
    assert p.add_trigger("c", "g", "f", 1, 0) is None
    assert p.add_schedule("c", "g", "S", ["f"], [], 10, 0) is None
    assert len(p) == 0


def test_expire_reports_missing_upstreams_and_orphans():
    p = PendingCalls(orphan_timeout=2)
    p.add_schedule("c", "d", "S", ["a", "b"], [], deadline=5, now=0)
    p.add_trigger("c", "d", "a", 1, now=0)
    p.add_trigger("x", "g", "f", 1, now=0)
    assert p.expire(now=1) == []
    stalled = {(s.call_id, s.function): s for s in p.expire(now=6)}
    assert stalled[("c", "d")].missing == ["b"]
    assert stalled[("x", "g")].schedule is None
    assert len(p) == 0


def test_abort_forgets_a_call():
    p = PendingCalls()
    p.add_schedule("c", "d", "S", ["a"], [], 10, 0)
    assert p.abort("c") == 1
    assert p.add_trigger("c", "d", "a", 1, 0) is None
    assert len(p) == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.data())
def test_any_arrival_order_gives_call_args_then_upstreams_in_order(n, data):
    upstreams = [f"u{i}" for i in range(n)]
    events = [("schedule", None)] + [("trigger", u) for u in upstreams]
    order = data.draw(st.permutations(events))
    p = PendingCalls()
    fired = []
    for kind, u in order:
        if kind == "schedule":
            r = p.add_schedule("c", "f", "S", upstreams, ["x", "y"], 10, 0)
        else:
            r = p.add_trigger("c", "f", u, f"v-{u}", 0)
        if r is not None:
            fired.append(r)
    assert len(fired) == 1
    assert fired[0].args == ["x", "y"] + [f"v-{u}" for u in upstreams]


def test_late_results_after_expiry_are_ignored():
    p = PendingCalls(orphan_timeout=2)
    p.add_schedule("c", "d", "S", ["a"], [], deadline=1, now=0)
    assert len(p.expire(now=2)) == 1
    assert p.add_trigger("c", "d", "a", 1, now=2.5) is None
    assert len(p) == 0


def test_inputs_after_the_deadline_are_reported_late():
    p = PendingCalls()
    assert p.add_schedule("c", "d", "S", ["a", "b"], [], deadline=1, now=0) is None
    assert p.add_trigger("c", "d", "a", 1, now=0.5) is None
    r = p.add_trigger("c", "d", "b", 2, now=1.5)
    assert r.late == ["b"] and r.deadline == 1
    on_time = p.add_schedule("x", "d", "S", [], [], deadline=1, now=0)
    assert on_time.late == []


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["f", "g"]),
                          st.sampled_from(["schedule", "trigger", "abort"]),
                          st.floats(0, 20), st.lists(st.integers(), max_size=3)),
                max_size=25))
def test_a_source_fires_once_on_its_schedule_as_an_entry_would_have(events):
    """A source's schedule (no upstreams, no inputs) fires without a pending entry: the same
    `Ready` as the entry path gave (its own arguments, late iff past its deadline), once per
    invocation, and never when a trigger or an abort came first."""
    p = PendingCalls(orphan_timeout=5)
    fired, seen = set(), set()          # invocations that fired; those anything came for
    for now, (call, fn, kind, deadline, args) in enumerate(events):
        key = (call, fn)
        if kind == "abort":
            p.abort(call)
            seen.update(k for k in [(call, "f"), (call, "g")])
            continue
        if kind == "trigger":
            p.add_trigger(call, fn, "up", "v", now)
            seen.add(key)
            continue
        r = p.add_schedule(call, fn, "S", [], args, deadline, now)
        if key in seen or key in fired:
            if key in fired:
                assert r is None, "a source fired twice"
            if r is not None:           # a trigger came first: it fires with its schedule
                fired.add(key)
            seen.add(key)
            continue
        assert r is not None and (r.call_id, r.function, r.schedule) == (call, fn, "S")
        assert r.args == args and r.args is not args and r.deadline == deadline
        assert r.late == (["(the schedule)"] if now > deadline else []) and r.inputs == {}
        assert p.known(call, fn)
        fired.add(key)
        seen.add(key)
    assert all(p.known(c, f) for c, f in fired)


def test_a_fired_invocation_is_forgotten_oldest_first_never_early():
    """A fired invocation is ignored at least until `orphan_timeout` past its deadline; the
    memory is dropped oldest first, so one behind a later deadline is kept until that goes."""
    p = PendingCalls(orphan_timeout=5)
    assert p.add_schedule("c1", "f", "S", [], [], deadline=10, now=0) is not None
    assert p.add_schedule("c2", "f", "S", [], [], deadline=3, now=0) is not None
    p.expire(now=9)                      # c2's memory ran out at 8, but it is behind c1's
    assert p.known("c1", "f") and p.known("c2", "f")
    assert p.add_schedule("c2", "f", "S", [], [], deadline=30, now=9) is None
    p.expire(now=15)                     # c1 is remembered up to 15 inclusive
    assert p.known("c1", "f") and p.known("c2", "f")
    p.expire(now=15.5)
    assert not p.known("c1", "f") and not p.known("c2", "f")
    assert p.add_schedule("c1", "f", "S", [], [], deadline=30, now=16) is not None


_EVENT = st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["f", "g"]),
                   st.sampled_from(["schedule", "trigger", "arrived", "abort", "expire"]),
                   st.sampled_from(["up", "other"]), st.floats(0, 20),
                   st.sampled_from([("up",), ("up", "other"), ("other",), ()]))


@settings(max_examples=150, deadline=None)
@given(st.lists(_EVENT, max_size=30))
def test_a_schedule_with_its_upstream_result_is_the_schedule_then_the_trigger(events):
    """`add_arrived` (a local downstream function's schedule with its upstream's result)
    gives what `add_schedule` then `add_trigger` gave, whatever came before: the same
    `Ready` (arguments, deadline, late inputs) or None, and the same state after."""
    fast, slow = PendingCalls(orphan_timeout=5), PendingCalls(orphan_timeout=5)
    for now, (call, fn, kind, source, deadline, upstreams) in enumerate(events):
        if kind == "abort":
            assert fast.abort(call) == slow.abort(call)
        elif kind == "expire":
            assert [(s.call_id, s.function, s.missing) for s in fast.expire(now)] == \
                [(s.call_id, s.function, s.missing) for s in slow.expire(now)]
        elif kind == "trigger":
            a = fast.add_trigger(call, fn, source, "v", now)
            b = slow.add_trigger(call, fn, source, "v", now)
            assert (a is None) == (b is None)
        elif kind == "schedule":
            a = fast.add_schedule(call, fn, "S", upstreams, ["own"], deadline, now)
            b = slow.add_schedule(call, fn, "S", upstreams, ["own"], deadline, now)
            assert (a is None) == (b is None)
        else:
            a = fast.add_arrived(call, fn, "S", upstreams, ["own"], deadline, now, source, "v")
            b = slow.add_schedule(call, fn, "S", upstreams, ["own"], deadline, now)
            if b is None:
                b = slow.add_trigger(call, fn, source, "v", now)
            assert (a is None) == (b is None)
            if a is not None:
                assert (a.call_id, a.function, a.schedule, a.args, a.deadline, a.late,
                        a.inputs) == (b.call_id, b.function, b.schedule, b.args, b.deadline,
                                      b.late, b.inputs)
        for c in ("c1", "c2"):
            for f in ("f", "g"):
                assert fast.known(c, f) == slow.known(c, f)
                assert fast.missing(c, f) == slow.missing(c, f)
        assert len(fast) == len(slow)
