"""Versionsets (Definitions 4, 5 and 7): union, supersedes, intersect, the wire form."""

from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2
from hydrocache import vclock
from hydrocache.version import Version
from hydrocache.versionset import (Entry, from_proto, intersect, not_superseding, of_versions,
                                   set_supersedes, to_proto, union)

nodes = st.sampled_from(["e1", "e2", "e3"])
clocks = st.dictionaries(nodes, st.integers(min_value=0, max_value=3), max_size=3)
dep_maps = st.dictionaries(st.sampled_from(["x", "y", "z"]), clocks, max_size=2)
versions = st.builds(lambda vc, deps, vals: Version.new("k", vc, deps, vals),
                     clocks, dep_maps, st.lists(st.binary(max_size=3), max_size=2))
holders = st.frozensets(st.sampled_from(["h1", "h2"]), max_size=2)
vsets = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.builds(Entry, clocks, holders),
                        max_size=3)
FAST = settings(max_examples=60, deadline=None)


def nz(vc):
    return {k: v for k, v in vc.items() if v}



@FAST
@given(vsets, vsets, vsets)
def test_union_is_aci_and_leaves_inputs(a, b, c):
    a0, b0 = dict(a), dict(b)
    assert union(a, b) == union(b, a)
    assert union(union(a, b), c) == union(a, union(b, c))
    assert union(a, a) == {k: Entry(nz(e.vc), e.holders) for k, e in a.items()}
    assert (a, b) == (a0, b0)
    u = union(a, b)
    assert set_supersedes(u, a) and set_supersedes(u, b)
    assert not_superseding(u, a) == []


@FAST
@given(vsets, vsets)
def test_not_superseding_and_intersect(t, s):
    bad = not_superseding(t, s)
    assert bad == sorted(k for k in t if k in s and not vclock.supersedes(t[k].vc, s[k].vc))
    assert set_supersedes(t, s) == (not bad)
    assert intersect(t, None) == t
    assert intersect(t, ["a"]) == {k: e for k, e in t.items() if k == "a"}


@FAST
@given(vsets)
def test_proto_round_trip(v):
    items = to_proto(v)
    assert [i.key for i in items] == sorted(v)
    wire = [cloudburst_pb2.KeyVersion.FromString(i.SerializeToString()) for i in items]
    assert from_proto(wire) == {k: Entry(nz(e.vc), e.holders) for k, e in v.items()}


def test_of_versions_merges_and_sets_holder():
    a = Version.new("a", {"e1": 1})
    a2 = Version.new("a", {"e2": 1})
    got = of_versions([a, a2], holder="h")
    assert got == {"a": Entry({"e1": 1, "e2": 1}, frozenset(["h"]))}
    assert of_versions([a])["a"].holders == frozenset()
