"""Every lattice's merge is associative, commutative and idempotent, through the bindings.

The merges live once, in C++ (anna_core/csrc/lattices.hpp); these properties exercise them
through pybind11 exactly as clients and services use them. Each lattice also round-trips
through its wire payload, and a few hand-checked merges pin down the semantics.
"""
from hypothesis import given, settings, strategies as st

from anna_core import _core

small_bytes = st.binary(max_size=6)
byte_sets = st.lists(small_bytes, max_size=5)
int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
node_ids = st.sampled_from(["a", "b", "c", "d"])
vector_clocks = st.dictionaries(node_ids, st.integers(min_value=0, max_value=4), max_size=4)


def lww():
    return st.builds(_core.LWWLattice, st.integers(min_value=0, max_value=5), small_bytes)


def priority():
    return st.builds(_core.PriorityLattice,
                     st.sampled_from([0.0, 0.5, 1.0, 2.5]), small_bytes)


def single_causal():
    return st.builds(_core.SingleKeyCausalLattice, vector_clocks, byte_sets)


def multi_causal():
    deps = st.dictionaries(st.sampled_from(["x", "y", "z"]), vector_clocks, max_size=3)
    return st.builds(_core.MultiKeyCausalLattice, vector_clocks, deps, byte_sets)


LATTICES = {
    "lww": lww(),
    "set": st.builds(_core.SetLattice, byte_sets),
    "ordered_set": st.builds(_core.OrderedSetLattice, byte_sets),
    "max": st.builds(_core.MaxLattice, int64s),
    "map": st.builds(_core.MapLattice, st.dictionaries(small_bytes, int64s, max_size=4)),
    "priority": priority(),
    "single_causal": single_causal(),
    "multi_causal": multi_causal(),
}


def triples(name):
    s = LATTICES[name]
    return st.tuples(s, s, s)


def check_aci(a, b, c):
    assert a.merge(b) == b.merge(a), "merge is not commutative"
    assert a.merge(b).merge(c) == a.merge(b.merge(c)), "merge is not associative"
    assert a.merge(a) == a, "merge is not idempotent"
    # Serialization round trip of a merged value.
    merged = a.merge(b)
    assert _core.deserialize(merged.lattice_type, merged.serialize()) == merged


def make_property_test(name):
    @settings(max_examples=150, deadline=None)
    @given(triples(name))
    def test(abc):
        check_aci(*abc)
    test.__name__ = f"test_{name}_merge_is_aci"
    return test


for _name in LATTICES:
    globals()[f"test_{_name}_merge_is_aci"] = make_property_test(_name)


def test_lww_keeps_latest_timestamp():
    old, new = _core.LWWLattice(1, b"old"), _core.LWWLattice(2, b"new")
    assert old.merge(new).reveal() == b"new"
    assert new.merge(old).reveal() == b"new"


def test_set_merge_is_union():
    assert _core.SetLattice([b"a"]).merge(_core.SetLattice([b"b"])).reveal() == {b"a", b"b"}


def test_ordered_set_reveals_sorted():
    merged = _core.OrderedSetLattice([b"c", b"a"]).merge(_core.OrderedSetLattice([b"b"]))
    assert merged.reveal() == [b"a", b"b", b"c"]


def test_max_and_map():
    assert _core.MaxLattice(3).merge(_core.MaxLattice(7)).reveal() == 7
    m = _core.MapLattice({b"x": 1, b"y": 5}).merge(_core.MapLattice({b"x": 4}))
    assert m.reveal() == {b"x": 4, b"y": 5}


def test_priority_keeps_lowest():
    merged = _core.PriorityLattice(2.0, b"slow").merge(_core.PriorityLattice(1.0, b"fast"))
    assert merged.reveal() == (1.0, b"fast")


def test_causal_dominating_clock_wins():
    older = _core.SingleKeyCausalLattice({"a": 1}, [b"v1"])
    newer = _core.SingleKeyCausalLattice({"a": 2}, [b"v2"])
    assert older.merge(newer).reveal() == [b"v2"]


def test_causal_concurrent_values_are_kept():
    left = _core.SingleKeyCausalLattice({"a": 1}, [b"left"])
    right = _core.SingleKeyCausalLattice({"b": 1}, [b"right"])
    merged = left.merge(right)
    assert merged.reveal() == [b"left", b"right"]
    assert merged.vector_clock == {"a": 1, "b": 1}


def test_multi_causal_concurrent_merges_dependencies():
    left = _core.MultiKeyCausalLattice({"a": 1}, {"x": {"a": 1}}, [b"l"])
    right = _core.MultiKeyCausalLattice({"b": 1}, {"x": {"b": 2}, "y": {"b": 1}}, [b"r"])
    merged = left.merge(right)
    assert merged.dependencies == {"x": {"a": 1, "b": 2}, "y": {"b": 1}}
    assert merged.reveal() == [b"l", b"r"]


def test_merge_of_different_types_is_a_type_error():
    import pytest
    with pytest.raises(TypeError):
        _core.SetLattice([b"a"]).merge(_core.MaxLattice(1))


def test_deserialize_rejects_garbage():
    import pytest
    with pytest.raises(ValueError):
        _core.deserialize(1, b"\xff\xff\xff")
    with pytest.raises(ValueError):
        _core.deserialize(99, b"")
