"""Versionsets (Definitions 4, 5 and 7): union, supersedes, intersect, the wire form."""

from hypothesis import given
from hypothesis import strategies as st

from hydro_proto import cloudburst_pb2
from hydrocache import vclock
from hydrocache.version import Version
from hydrocache.versionset import (Entry, from_proto, intersect, into, not_superseding,
                                   of_versions, set_supersedes, to_proto, union)

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


def _key_versions_by_definition(v):
    """The definition `to_proto` and `into` encode: one KeyVersion per entry in key order, the
    clock's non-zero entries, the holders sorted (built field by field through protobuf)."""
    out = []
    for k in sorted(v):
        kv = cloudburst_pb2.KeyVersion(key=k)
        for node, c in v[k].vc.items():
            if c:
                kv.vc[node] = c
        kv.holders.extend(sorted(v[k].holders))
        out.append(kv)
    return out


names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
wide_vsets = st.dictionaries(
    names, st.builds(Entry, st.dictionaries(names, st.integers(0, 2**64 - 1), max_size=3),
                     st.frozensets(names, max_size=3)), max_size=5)


@FAST
@given(st.one_of(vsets, wide_vsets), st.one_of(vsets, wide_vsets))
def test_the_kernel_encoding_is_the_key_versions_built_field_by_field(v, before):
    """`to_proto` and `into` (the kernel's `encode_versionset`) give exactly the KeyVersions
    of the definition, in order, for any keys, node ids and holders (non-ASCII included), and
    `into` appends them after what the field already holds, touching nothing else."""
    assert to_proto(v) == _key_versions_by_definition(v)
    msg = cloudburst_pb2.CausalContext(remote_fetches=3, abort_reason="r")
    msg.snapshot.extend(_key_versions_by_definition(before))
    into(msg, "snapshot", v)
    want = cloudburst_pb2.CausalContext(remote_fetches=3, abort_reason="r")
    want.snapshot.extend(_key_versions_by_definition(before) + _key_versions_by_definition(v))
    assert msg == want
    req = cloudburst_pb2.CacheRequest(attempt_id="a")
    into(req, "versions", v)
    assert list(req.versions) == _key_versions_by_definition(v) and req.attempt_id == "a"


def test_the_kernel_encoding_checks_what_it_encodes():
    import pytest
    with pytest.raises(TypeError):
        to_proto({1: Entry({"a": 1})})
    with pytest.raises(TypeError):
        to_proto({"k": Entry({"a": "1"})})
    with pytest.raises(ValueError):
        to_proto({"k": Entry({"a": -1})})
    with pytest.raises(TypeError):
        to_proto({"k": Entry({"a": 1}, frozenset([3]))})
