"""The executor writer: commits, merges of one executor's writes, and transitive causality."""
import random

from hypothesis import given, settings, strategies as st

from hydrocache import vclock
from hydrocache.checker import check
from hydrocache.vclock import Order
from hydrocache.versionset import Entry
from hydrocache.writer import ExecutorWriter
from hydrocache_world import World


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
