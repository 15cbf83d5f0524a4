"""HB's kept results for a CON attempt (executor/reuse.py): bounded, expired oldest first."""
from hypothesis import settings, given, strategies as st

from executor.reuse import Reusable, Reuses, inputs_digest


def entry(expires, size=1):
    return Reusable(expires, {"k": {"w": 1}}, b"d", b"x" * size)


def test_get_returns_what_was_put_and_a_put_replaces():
    r = Reuses()
    r.put(("c", "f"), entry(5.0, 3))
    r.put(("c", "f"), entry(6.0, 4))
    assert r.get(("c", "f")).expires == 6.0 and len(r) == 1 and r.bytes == 4
    assert r.get(("c", "g")) is None


def test_bounded_in_count_and_bytes_oldest_go_first():
    r = Reuses(limit=3, limit_bytes=10)
    for i in range(5):
        r.put((f"c{i}", "f"), entry(100.0))
    assert [k for k in ("c0", "c1", "c2", "c3", "c4") if r.get((k, "f"))] == ["c2", "c3", "c4"]
    r.put(("big", "f"), entry(100.0, 9))
    assert r.get(("big", "f")) is not None and r.bytes == 10 and r.get(("c3", "f")) is None
    r.put(("huge", "f"), entry(100.0, 11))          # larger than the bound: not kept
    assert r.get(("huge", "f")) is None and r.get(("big", "f")) is not None


def test_expire_drops_the_expired_oldest_and_stops_at_the_first_kept():
    r = Reuses()
    r.put(("a", "f"), entry(1.0))
    r.put(("b", "f"), entry(5.0))
    r.put(("c", "f"), entry(2.0))        # behind a later one: kept until that one goes
    assert r.expire(3.0) == 1
    assert r.get(("a", "f")) is None and r.get(("c", "f")) is not None
    assert r.expire(6.0) == 2 and len(r) == 0 and r.bytes == 0


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 6), st.floats(0, 20), st.integers(0, 12)),
    st.tuples(st.just("expire"), st.just(0), st.floats(0, 25), st.just(0))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 5), st.integers(1, 30))
def test_bounds_hold_and_nothing_unexpired_is_expired(script, limit, limit_bytes):
    """Whatever the order of puts and expiries: never more than the bounds; `expire` never
    drops an entry whose time has not passed; the newest put is kept if it fits alone; the
    byte count is the sum of what is kept."""
    r = Reuses(limit, limit_bytes)
    model = {}                                    # key -> entry, for what may still be kept
    for op, k, t, size in script:
        key = (f"c{k}", "f")
        if op == "put":
            e = entry(t, size)
            r.put(key, e)
            model[key] = e
            assert (r.get(key) is not None) == (size <= limit_bytes)
        else:
            before = {kk: r.get(kk) for kk in model if r.get(kk) is not None}
            r.expire(t)
            for kk, kept_e in before.items():
                if kept_e.expires >= t:
                    assert r.get(kk) is kept_e
        kept = [r.get(kk) for kk in model if r.get(kk) is not None]
        assert len(kept) == len(r) <= limit
        assert r.bytes == sum(len(e.value) for e in kept) <= limit_bytes
        assert all(e is model[kk] for kk, e in ((kk, r.get(kk)) for kk in model) if e)


def test_inputs_digest_tells_inputs_apart():
    assert inputs_digest([b"a"], [b"b"]) != inputs_digest([b"a", b"b"], [])
    assert inputs_digest([b"a"], [b"b"]) == inputs_digest([b"a"], [b"b"])
