"""Vector clocks as HydroCache uses them: the C++ order and merge, by property."""

import anna_core
from hypothesis import given

from hydrocache import vclock
from hydrocache.vclock import Order

from hydrocache_strategies import FAST, clocks, nz


@FAST
@given(clocks, clocks)
def test_compare_is_antisymmetric_and_matches_definition(a, b):
    o, r = vclock.compare(a, b), vclock.compare(b, a)
    flip = {Order.EQUAL: Order.EQUAL, Order.BEFORE: Order.AFTER, Order.AFTER: Order.BEFORE,
            Order.CONCURRENT: Order.CONCURRENT}
    assert r == flip[o]
    le = all(c <= b.get(n, 0) for n, c in a.items())
    ge = all(c <= a.get(n, 0) for n, c in b.items())
    expected = (Order.EQUAL if le and ge else Order.BEFORE if le else
                Order.AFTER if ge else Order.CONCURRENT)
    assert o == expected
    assert vclock.happens_before(a, b) == (o == Order.BEFORE)
    assert vclock.concurrent(a, b) == (o == Order.CONCURRENT)
    assert vclock.supersedes(a, b) == (o in (Order.EQUAL, Order.AFTER))


@FAST
@given(clocks, clocks, clocks)
def test_happens_before_is_transitive(a, b, c):
    if vclock.happens_before(a, b) and vclock.happens_before(b, c):
        assert vclock.happens_before(a, c)
    if vclock.supersedes(a, b) and vclock.supersedes(b, c):
        assert vclock.supersedes(a, c)


@FAST
@given(clocks, clocks, clocks)
def test_merge_is_the_least_upper_bound(a, b, c):
    m = vclock.merge(a, b)
    assert m == vclock.merge(b, a)
    assert vclock.merge(m, c) == vclock.merge(a, vclock.merge(b, c))
    assert vclock.merge(a, a) == nz(a)
    assert vclock.supersedes(m, a) and vclock.supersedes(m, b)
    if vclock.supersedes(c, a) and vclock.supersedes(c, b):
        assert vclock.supersedes(c, m)
    assert all(v for v in m.values())


def test_zero_entries_mean_nothing():
    assert vclock.compare({"e": 0}, {}) == Order.EQUAL
    assert vclock.compare({"a": 1}, {"a": 1, "b": 1}) == Order.BEFORE
    assert vclock.merge({"a": 2, "c": 0}, {"a": 1, "b": 3}) == {"a": 2, "b": 3}
    assert anna_core.compare_clocks({"a": 1}, {"b": 1}) == 3
