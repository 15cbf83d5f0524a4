"""Temporary versions' lifetimes (`hydrocache.temp.TempStore`): expiry and fences.

`expire(now)` keeps its times in heaps so that a sweep costs what it drops; these tests hold
it to the plain rule it replaced (every attempt whose time passed is dropped and fenced for
`FENCE_AFTER_EXPIRY`, every fence whose time passed is lifted), for any sequence of opens,
adds, releases and sweeps.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hydrocache.actions import Fenced
from hydrocache.temp import FENCE_AFTER_EXPIRY, TempStore
from hydrocache.version import Version

ATTEMPTS = ["a", "b", "c", "d"]
times = st.integers(0, 40).map(float)
ops = st.lists(st.one_of(
    st.tuples(st.just("open"), st.sampled_from(ATTEMPTS), times),
    st.tuples(st.just("add"), st.sampled_from(ATTEMPTS), times),
    st.tuples(st.just("release"), st.sampled_from(ATTEMPTS), st.one_of(st.none(), times)),
    st.tuples(st.just("expire"), st.just(""), times)), max_size=40)


class Reference:
    """The rule as a full scan of every attempt and fence."""

    def __init__(self) -> None:
        self.expires, self.fenced = {}, {}

    def open(self, a, t):
        if a in self.fenced:
            raise Fenced(a, "", "released")
        self.expires[a] = max(t, self.expires.get(a, t))

    def release(self, a, until):
        e = self.expires.pop(a, None)
        if until is not None:
            until = max(until, e if e is not None else until)
            self.fenced[a] = max(until, self.fenced.get(a, until))

    def expire(self, now):
        gone = [a for a, t in self.expires.items() if now > t]
        for a in gone:
            self.release(a, now + FENCE_AFTER_EXPIRY)
        for a in [a for a, t in self.fenced.items() if now > t]:
            del self.fenced[a]
        return gone


@settings(max_examples=120, deadline=None)
@given(ops)
def test_expiry_drops_and_fences_exactly_what_a_full_scan_would(sequence):
    store, ref = TempStore(), Reference()
    now = 0.0
    for op, attempt, t in sequence:
        if op == "expire":
            now = max(now, t)              # sweeps come with a clock that does not go back
            assert sorted(store.expire(now)) == sorted(ref.expire(now))
        elif op == "release":
            store.release(attempt, t)
            ref.release(attempt, t)
        else:
            refused = []
            for target in (store, ref):
                try:
                    if op == "open" or target is ref:
                        target.open(attempt, t)
                    else:
                        target.add(attempt, Version.new("k", {"e": int(t) + 1}, {}, [b"v"]), t)
                except Fenced:
                    refused.append(target)
            assert refused in ([], [store, ref])
        for a in ATTEMPTS:
            assert store.fenced(a) == (a in ref.fenced)
            assert (a in store) == (a in ref.expires)
    assert store.fences() == len(ref.fenced)


def test_an_attempt_whose_time_was_moved_later_is_kept_until_then():
    store = TempStore()
    store.open("a", 5.0)
    store.open("a", 9.0)                  # a later bind of the attempt: kept longer
    assert store.expire(6.0) == [] and "a" in store
    assert store.expire(9.5) == ["a"] and store.fenced("a")
    assert store.expire(9.5 + FENCE_AFTER_EXPIRY + 1) == [] and not store.fenced("a")
