"""Versionsets (Definitions 4, 5 and 7): union, supersedes, intersect, the wire form."""

from hypothesis import given

from hydro_proto import cloudburst_pb2
from hydrocache import vclock
from hydrocache.version import Version
from hydrocache.versionset import (Entry, from_proto, intersect, not_superseding, of_versions,
                                   set_supersedes, to_proto, union)

from hydrocache_strategies import FAST, nz, vsets


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
