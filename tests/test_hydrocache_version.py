"""Versions (Definition 1): merge, supersedes, and the wire round trip."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hydrocache import vclock
from hydrocache.version import Version, merge_versions, version_supersedes

from hydrocache_strategies import FAST, versions


@FAST
@given(versions, versions, versions)
def test_merge_versions_is_aci(a, b, c):
    def same(x, y):
        return x.lattice == y.lattice and (x.vc, x.deps, x.values) == (y.vc, y.deps, y.values)
    assert same(merge_versions(a, b), merge_versions(b, a))
    assert same(merge_versions(merge_versions(a, b), c), merge_versions(a, merge_versions(b, c)))
    assert same(merge_versions(a, a), a)
    m = merge_versions(a, b)
    assert version_supersedes(m, a) and version_supersedes(m, b)
    assert m.vc == vclock.merge(a.vc, b.vc)
    assert list(m.values) == sorted(m.values)


@FAST
@given(versions, versions, versions)
def test_version_supersedes_is_reflexive_and_transitive(a, b, c):
    assert version_supersedes(a, a) and version_supersedes(a, a.vc)
    if version_supersedes(a, b) and version_supersedes(b, c):
        assert version_supersedes(a, c)


def test_version_definition_1_and_wire_round_trip():
    a = Version.new("k", {"e1": 1}, {"x": {"e2": 1}}, [b"1"])
    b = Version.new("k", {"e2": 1}, {"x": {"e2": 2}, "y": {"e1": 1}}, [b"2"])
    m = merge_versions(a, b)
    assert m.vc == {"e1": 1, "e2": 1}
    assert m.deps == {"x": {"e2": 2}, "y": {"e1": 1}}
    assert m.values == (b"1", b"2") and m.first == b"1"
    newer = Version.new("k", {"e1": 2, "e2": 1}, {}, [b"3"])
    assert merge_versions(m, newer).values == (b"3",)       # a_j overwrites a_i
    back = Version.deserialize("k", m.serialize())
    assert (back.vc, back.deps, back.values) == (m.vc, m.deps, m.values)
    with pytest.raises(ValueError):
        merge_versions(a, Version.new("other", {"e1": 1}))
    empty = Version.new("k", {}, {"k": {"e1": 1}, "z": {}}, [])
    assert empty.deps == {} and empty.first is None


def test_a_version_serializes_once_and_equal_versions_stay_equal():
    a = Version.new("k", {"e1": 1}, {"x": {"e2": 1}}, [b"1"])
    wire = a.serialize()
    assert wire == a.lattice.serialize() and a.serialize() is wire     # kept, not redone
    b = Version.deserialize("k", wire)
    assert b == a                     # the kept payload takes no part in equality
    m = merge_versions(a, Version.new("k", {"e2": 1}, {}, [b"2"]))
    assert m.serialize() == m.lattice.serialize() != wire


def test_memo_is_made_once_per_version_and_takes_no_part_in_equality():
    v = Version.new("k", {"w": 1}, {"d": {"x": 2}}, [b"a"])
    made = []
    assert v.memo("m", lambda ver: made.append(ver) or ver.key + "!") == "k!"
    assert v.memo("m", lambda ver: made.append(ver) or "other") == "k!"
    assert made == [v]
    twin = Version.new("k", {"w": 1}, {"d": {"x": 2}}, [b"a"])
    assert twin == v and twin.memo("m", lambda ver: "twin's") == "twin's"


def test_a_cache_answers_entry_carries_the_clock_and_dependencies():
    """The node cache merges an encoding made once per version into each answer's entry: it
    reads back as the version's key, clock and dependencies, next to the entry's own fields."""
    from hydro_proto import cloudburst_pb2 as pb
    from hydrocache.node_cache import _entry_meta
    v = Version.new("k", {"w": 3, "u": 1}, {"d": {"x": 2}, "e": {"y": 1, "z": 4}}, [b"a"])
    e = pb.CacheResponse().entries.add(key="k", found=True, tag="t7")
    e.MergeFromString(v.memo("cache_entry", _entry_meta))
    assert (e.key, e.found, e.tag, e.version.key) == ("k", True, "t7", "k")
    assert dict(e.version.vc) == {"w": 3, "u": 1}
    assert {d.key: dict(d.vc) for d in e.deps} == {"d": {"x": 2}, "e": {"y": 1, "z": 4}}


@FAST
@given(versions, versions, st.sampled_from(["e1", "e2", "e3"]))
def test_merge_versions_is_the_lattice_merge_even_when_one_side_is_newer(a, b, bump):
    """Definition 1 is the lattice merge; when one side is a single version after the other's
    whole clock, `merge_versions` hands back that side itself, which must be that merge."""
    later_vc = vclock.merge(a.vc, b.vc)
    later_vc[bump] = later_vc.get(bump, 0) + 1
    later = Version.new("k", later_vc, {"y": {"e1": 1}}, [b"later"])
    merged_ab = merge_versions(a, merge_versions(a, b))
    for x, y in ((a, b), (b, a), (a, later), (later, a), (merged_ab, later), (later, merged_ab)):
        m = merge_versions(x, y)
        want = x.lattice.merge(y.lattice)
        assert m.lattice == want
        ref = Version.from_lattice("k", want)
        assert (m.vc, m.deps, m.values) == (ref.vc, ref.deps, ref.values)
    assert merge_versions(a, later) is later and merge_versions(later, a) is later


def test_a_decoded_version_keeps_the_payload_it_came_from():
    wire = Version.new("k", {"e1": 2}, {"x": {"e2": 1}}, [b"1"]).serialize()
    v = Version.deserialize("k", wire)
    assert v.serialize() is wire
    assert Version.deserialize("k", v.serialize()) == v
