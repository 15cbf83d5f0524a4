"""Vector clocks as HydroCache uses them: the C++ order and merge, by property."""

import anna_core
import pytest
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


@FAST
@given(clocks, clocks)
def test_the_dict_order_and_merge_are_the_causal_lattices(a, b):
    # the lattice merges through the kernel's std::map clocks (`strictly_dominated`,
    # `merge_clock`); the dict functions must agree with it
    la = anna_core.MultiKeyCausalLattice(dict(a), {}, [b"a"])
    lb = anna_core.MultiKeyCausalLattice(dict(b), {}, [b"b"])
    m = la.merge(lb)
    assert vclock.merge(a, b) == m.vector_clock
    o = vclock.compare(a, b)
    # a version strictly dominated by the other is dropped; equal clocks or concurrent keep both
    kept = set(m.reveal())
    assert kept == {Order.EQUAL: {b"a", b"b"}, Order.BEFORE: {b"b"}, Order.AFTER: {b"a"},
                    Order.CONCURRENT: {b"a", b"b"}}[o]


def test_clock_functions_check_their_inputs_and_take_any_mapping():
    import types
    for bad, err in [({1: 1}, TypeError), ({"a": "1"}, TypeError), ({"a": -1}, ValueError),
                     ({"a": 1 << 70}, ValueError)]:
        for f in (vclock.compare, vclock.merge, vclock.supersedes):
            with pytest.raises(err):
                f(bad, {"a": 1})
            with pytest.raises(err):
                f({"a": 1}, bad)
    proxy = types.MappingProxyType({"a": 2})
    assert vclock.supersedes(proxy, {"a": 1}) and vclock.merge(proxy, {"b": 1}) == {"a": 2, "b": 1}
    assert vclock.compare(proxy, {"a": 2}) == Order.EQUAL


@FAST
@given(clocks, clocks)
def test_protobuf_maps_are_read_as_the_dicts_they_hold(a, b):
    """A node cache compares session floors as received (protobuf maps): every clock function
    gives on them what it gives on the same clocks as dicts, on either side."""
    from hydro_proto import cloudburst_pb2 as pb
    pa, pbm = pb.SessionKey(), pb.SessionKey()
    pa.vc.update(a)
    pbm.vc.update(b)
    for x, y, dx, dy in ((pa.vc, pbm.vc, a, b), (pa.vc, b, a, b), (a, pbm.vc, a, b)):
        assert vclock.compare(x, y) == vclock.compare(dx, dy)
        assert vclock.supersedes(x, y) == vclock.supersedes(dx, dy)
        assert vclock.merge(x, y) == vclock.merge(dx, dy)
    bad = pb.SessionKey()
    bad.vc["a"] = 1
    with pytest.raises(TypeError):
        vclock.supersedes({1: 1}, bad.vc)
