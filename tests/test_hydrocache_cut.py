"""StrictCausalCut (Definition 3): what it exposes is always a cut.

Histories come from tests/hydrocache_world.py (executors committing through their caches);
their versions are then delivered to a fresh cut in arbitrary order, duplicated, with
evictions in between.
"""
import random

from hypothesis import given, settings, strategies as st

from hydrocache import vclock
from hydrocache.cut import StrictCausalCut
from hydrocache.version import Version
from hydrocache_world import World, is_cut

SEEDS = st.integers(min_value=0, max_value=2**32)


def test_mutually_dependent_writes_appear_together():
    a = Version.new("a", {"e1": 1}, {"b": {"e1": 1}}, [b"a"])
    b = Version.new("b", {"e1": 1}, {"a": {"e1": 1}}, [b"b"])
    cut = StrictCausalCut()
    up = cut.offer(a)
    assert up.exposed == [] and up.missing == {"b": {"e1": 1}} and "a" not in cut
    assert cut.pending_keys() == {"a"}
    k0 = cut.keyset_version
    up = cut.offer(b)
    assert up.exposed == ["a", "b"] and up.missing == {} and len(cut) == 2
    assert cut.keyset_version > k0 and cut.pending_keys() == set()
    assert cut.dependents("a") == {"b"}
    assert cut.evict("a") == {"a", "b"} and len(cut) == 0


def test_candidate_waits_for_a_newer_dependency_and_merges():
    a1 = Version.new("a", {"e1": 1}, {}, [b"1"])
    a2 = Version.new("a", {"e1": 2}, {}, [b"2"])
    b = Version.new("b", {"e2": 1}, {"a": {"e1": 2}}, [b"b"])
    cut = StrictCausalCut()
    assert cut.offer(a1).exposed == ["a"]
    up = cut.offer(b)
    assert up.exposed == [] and up.missing == {"a": {"e1": 2}}
    assert cut.get("a").vc == {"e1": 1}
    kv = cut.keyset_version
    assert cut.offer(a2).exposed == ["a", "b"]
    assert cut.keyset_version == kv + 1                  # b is new; a only got newer
    assert cut.offer(a1).exposed == []                    # superseded: no-op
    c = Version.new("a", {"e3": 1}, {}, [b"3"])          # concurrent: merged
    assert cut.offer(c).exposed == ["a"]
    assert cut.get("a").vc == {"e1": 2, "e3": 1} and cut.get("a").values == (b"2", b"3")


def test_evict_drops_dependents_transitively_and_pending_on_them():
    a = Version.new("a", {"e1": 1})
    b = Version.new("b", {"e1": 1}, {"a": {"e1": 1}})
    c = Version.new("c", {"e1": 1}, {"b": {"e1": 1}})
    d = Version.new("d", {"e1": 1})
    x = Version.new("x", {"e1": 1}, {"c": {"e1": 1}, "y": {"e1": 1}})   # waits for y
    cut = StrictCausalCut()
    for v in (a, b, c, d, x):
        cut.offer(v)
    assert cut.keys() == {"a", "b", "c", "d"} and cut.pending_keys() == {"x"}
    assert cut.evict("b") == {"b", "c"}
    assert cut.keys() == {"a", "d"} and cut.pending_keys() == set()
    assert cut.missing() == {} and is_cut(cut) is None
    assert cut.evict("zzz") == set()


def _versions_of(seed, steps=20):
    world = World(random.Random(seed))
    world.random_steps(steps)
    return world


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(min_value=0, max_value=2**32))
def test_any_delivery_order_keeps_a_cut_and_ends_complete(seed, order_seed):
    world = _versions_of(seed)
    rng = random.Random(order_seed)
    deliveries = list(world.written) + rng.sample(world.written, len(world.written) // 3)
    deliveries += list(world.anna.values())[: rng.randint(0, len(world.anna))]
    rng.shuffle(deliveries)
    cut = StrictCausalCut()
    for v in deliveries:
        before = {k: cut.get(k) for k in cut.keys()}
        up = cut.offer(v)
        assert is_cut(cut) is None
        for k, old in before.items():              # exposed versions only move forward
            assert vclock.supersedes(cut.get(k).vc, old.vc)
        assert set(up.exposed) <= cut.keys()
        assert up.missing == cut.missing()
        for d, need in up.missing.items():
            have = cut.get(d)
            assert have is None or not vclock.supersedes(have.vc, need)
    # every written version delivered: everything is exposed, at Anna's version
    assert cut.pending_keys() == set() and cut.missing() == {}
    assert cut.keys() == set(world.anna)
    for k, v in world.anna.items():
        assert cut.get(k).vc == v.vc


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(min_value=0, max_value=2**32))
def test_evictions_interleaved_keep_a_cut(seed, order_seed):
    world = _versions_of(seed)
    rng = random.Random(order_seed)
    cut = StrictCausalCut()
    for v in rng.sample(world.written, len(world.written)):
        cut.offer(v)
        if rng.random() < 0.3 and len(cut):
            victim = rng.choice(sorted(cut.keys()))
            kv = cut.keyset_version
            depends = cut.dependents(victim)
            gone = cut.evict(victim)
            assert victim in gone and depends <= gone
            assert not (gone & cut.keys()) and cut.keyset_version > kv
            assert not (gone & cut.pending_keys())
        assert is_cut(cut) is None
        for k in cut.keys():
            for d in cut.get(k).deps:
                assert k in cut.dependents(d)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.lists(st.integers(0, 12), max_size=4)),
                min_size=1, max_size=30), st.integers(0, 12))
def test_reach_is_every_key_a_version_depends_on_through_exposed_versions(writes, start):
    """`reach` against the plain transitive walk it replaces (cycles and missing keys too)."""
    cut = StrictCausalCut()
    for i, (k, deps) in enumerate(writes):
        cut.offer(Version.new(f"k{k}", {"e": i + 1},
                              {f"k{d}": {"e": 1} for d in deps if d != k}, [b"v"]))
    key = f"k{start}"
    want = set()
    if key in cut:
        want, stack = {key}, [key]
        while stack:
            v = cut.get(stack.pop())
            for d in (v.deps if v is not None else ()):
                if d not in want:
                    want.add(d)
                    stack.append(d)
    assert cut.reach(key) == want
