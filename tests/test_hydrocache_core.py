"""HydroCache's pure cores: clocks, versions, versionsets, the writer, the checker and GC.

Properties (hypothesis) over the C++ clock order and merge as HydroCache uses them, plus
hand-checked cases that pin the semantics down. The cut and the protocols have their own
files (test_hydrocache_cut.py, test_hydrocache_protocols.py).
"""
import random

import anna_core
import pytest
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2
from hydrocache import vclock
from hydrocache.checker import Observed, Transaction, check
from hydrocache.gc import collect, stable_frontier
from hydrocache.vclock import Order
from hydrocache.version import Version, merge_versions, version_supersedes
from hydrocache.versionset import (Entry, from_proto, intersect, not_superseding, of_versions,
                                   set_supersedes, to_proto, union)
from hydrocache.writer import ExecutorWriter
from hydrocache_world import World

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


# ------------------------------------------------------------------------------- vclock
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


# ------------------------------------------------------------------------------ versions
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


# --------------------------------------------------------------------------- versionsets
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


# --------------------------------------------------------------------------------- writer
def test_commit_makes_writes_mutually_dependent():
    w = ExecutorWriter("e1")
    a, b = w.commit({"a": b"1", "b": b"2"}, {"r": Entry({"e9": 4})})
    assert a.deps == {"b": b.vc, "r": {"e9": 4}} and b.deps == {"a": a.vc, "r": {"e9": 4}}
    assert a.vc == b.vc == {"e1": 1}


def test_concurrent_blind_writes_of_one_executor_are_merged():
    w = ExecutorWriter("e1")
    (a1,) = w.commit({"a": b"1"}, {})
    (a2,) = w.commit({"a": b"2"}, {})                  # blind: did not read a1
    assert vclock.compare(a2.vc, a1.vc) == Order.AFTER
    assert a2.values == (b"1", b"2")
    (a3,) = w.commit({"a": b"3"}, {"a": Entry(a2.vc)})  # read a2: overwrites
    assert a3.values == (b"3",) and a3.vc == {"e1": 3}


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_one_writer_never_goes_back(seed):
    rng = random.Random(seed)
    w = ExecutorWriter("e1", capacity=1000)
    last = {}
    for _ in range(15):
        reads = {k: Entry(dict(last[k].vc)) for k in rng.sample(sorted(last), len(last) // 2)}
        if rng.random() < 0.3:
            reads["k"] = Entry({"e2": rng.randint(1, 3)})   # someone else's version
        deps = {k: last[k].deps for k in reads if k in last}
        for v in w.commit({k: b"v" for k in rng.sample("abc", rng.randint(1, 3))}, reads,
                          deps):
            if v.key in last:
                assert vclock.compare(v.vc, last[v.key].vc) == Order.AFTER
                assert set(last[v.key].deps) <= set(v.deps) | {v.key}
            last[v.key] = v


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_serial_commits_through_a_cut_are_tcc(seed):
    world = World(random.Random(seed))
    world.random_steps(25)
    assert check(world.history, strict=True) == []


def test_read_deps_are_what_keeps_transitive_causality():
    """Definition 3 checks direct dependencies only, and Anna's lattice drops a dominated
    version's dependencies; a write that supersedes k_i must carry k_i's dependencies
    (ExecutorWriter.commit's read_deps) or a cut may expose it next to something older than
    them. These seeds break TCC without read_deps and not with them."""
    for seed in (30, 59, 83):
        bare = World(random.Random(seed), carry_deps=False)
        bare.random_steps(30)
        assert check(bare.history, strict=True) != []
        world = World(random.Random(seed))
        world.random_steps(30)
        assert check(world.history, strict=True) == []


def test_writer_lru_bound():
    w = ExecutorWriter("e1", capacity=2)
    for k in "abc":
        w.commit({k: b"v"}, {})
    assert w.latest("a") is None and w.latest("c") is not None


# -------------------------------------------------------------------------------- checker
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


# ------------------------------------------------------------------------------------- gc
def test_stable_frontier_is_the_entrywise_minimum():
    f = stable_frontier({"x": [{"a": 2, "b": 1}, {"a": 3}], "y": [{"c": 2}], "z": []})
    assert f == {"x": {"a": 2}, "y": {"c": 2}}


@FAST
@given(versions, st.dictionaries(st.sampled_from(["x", "y", "z"]), clocks, max_size=3))
def test_collect_drops_exactly_the_stable_dependencies(v, frontier):
    out = collect(v, frontier)
    assert (out.vc, out.values) == (v.vc, v.values)
    for d, c in v.deps.items():
        stable = d in frontier and vclock.supersedes(frontier[d], c)
        assert (d in out.deps) == (not stable or
                                   any(d in deps and not vclock.supersedes(frontier[d], dc)
                                       for _, deps, _ in v.lattice.entries
                                       for dd, dc in deps.items() if dd == d))
    for _, deps, _ in out.lattice.entries:
        assert not any(d in frontier and vclock.supersedes(frontier[d], c)
                       for d, c in deps.items())
