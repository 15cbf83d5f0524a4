"""The TCC history checker: what it must find and what it must allow."""
import random

from hypothesis import given, settings, strategies as st

from hydrocache.checker import Observed, Transaction, check
from hydrocache_world import World


def T(txid, reads=(), writes=()):
    return Transaction(txid, list(reads), list(writes))


def test_checker_finds_a_broken_snapshot():
    a1, a2 = Observed("a", {"e1": 1}), Observed("a", {"e1": 2})
    b1 = Observed("b", {"e2": 1}, {"a": {"e1": 2}})
    hist = [T("w1", writes=[a1]), T("w2", [a1], [a2]), T("w3", [a2], [b1]),
            T("r", [a1, b1])]
    got = check(hist)
    assert [(v.kind, v.txid) for v in got] == [("not_a_snapshot", "r")]
    assert check(hist[:3] + [T("r", [a2, b1])]) == []


def test_checker_follows_dependencies_transitively():
    a1, a2 = Observed("a", {"e1": 1}), Observed("a", {"e1": 2})
    b1 = Observed("b", {"e2": 1}, {"a": {"e1": 2}})
    c1 = Observed("c", {"e3": 1}, {"b": {"e2": 1}})      # a2 -> b1 -> c1
    hist = [T("w1", writes=[a1]), T("w2", writes=[a2]), T("w3", writes=[b1]),
            T("w4", writes=[c1]), T("r", [a1, c1])]
    assert [v.kind for v in check(hist)] == ["not_a_snapshot"]
    # through a later version of b that includes b1 (vc >= b1)
    b2 = Observed("b", {"e2": 2})
    c2 = Observed("c", {"e3": 2}, {"b": {"e2": 2}})
    hist2 = hist[:4] + [T("w5", writes=[b2]), T("w6", writes=[c2]), T("r", [a1, c2])]
    assert [v.kind for v in check(hist2)] == ["not_a_snapshot"]


def test_checker_allows_concurrency_unless_strict():
    a1, a2 = Observed("a", {"e1": 1}), Observed("a", {"e2": 1})
    b1 = Observed("b", {"e3": 1}, {"a": {"e2": 1}})
    hist = [T("w", writes=[a1, ]), T("w2", writes=[a2]), T("w3", writes=[b1]),
            T("r", [a1, b1])]
    assert check(hist) == []
    assert [v.kind for v in check(hist, strict=True)] == ["not_a_snapshot"]


def test_checker_finds_atomic_visibility_and_repeatable_read():
    a1, b1 = Observed("a", {"e1": 1}), Observed("b", {"e1": 1})   # no deps recorded
    b0 = Observed("b", {"e2": 1})
    hist = [T("w0", writes=[b0]), T("w", writes=[a1, b1]), T("r", [a1, b0])]
    assert [(v.kind, v.txid) for v in check(hist)] == [("atomic_visibility", "r")]
    assert check(hist[:2] + [T("r", [a1, b1])]) == []
    rr = check([T("w0", writes=[b0, ]), T("w", writes=[b1]), T("r", [b0, b1])])
    assert [v.kind for v in rr] == ["non_repeatable_read"]


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_lww_like_reads_of_latest_values_get_caught(seed):
    """Reading whatever is latest per key (no cut) breaks TCC in some histories."""
    rng = random.Random(seed)
    found = 0
    for _ in range(5):
        world = World(rng)
        world.random_steps(15)
        # a reader that takes the first-ever version of one key and Anna's latest of others
        first = {}
        for v in world.written:
            first.setdefault(v.key, v)
        keys = sorted(world.anna)
        stale = rng.choice(keys)
        reads = [Observed(k, dict((first[k] if k == stale else world.anna[k]).vc),
                          dict((first[k] if k == stale else world.anna[k]).deps)) for k in keys]
        found += bool(check(world.history + [T("lww", reads)]))
    assert found > 0
