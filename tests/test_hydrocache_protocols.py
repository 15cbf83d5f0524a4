"""MTCC protocols (Algorithms 6-10) against the independent checker.

A random history is written through several caches (tests/hydrocache_world.py); each cache's
cut then holds a random part of it. DAGs (chains and a V: two sources into one sink) place
their functions on random caches and read random keys. OPT (plan_linear / finish_linear /
parallel_flow, fetches served from the holders' temporary versions) must, whenever it does
not abort, bind a strict snapshot (checker.check(strict=True)), with R ⊆ S (Theorem 2) and
repeatable reads. CON (create_snapshot / distributed_snapshot) never aborts and binds a
snapshot. HB's simulate_opt decides exactly what the real OPT run decides.
"""
import random
from typing import Dict, List, Tuple

from hypothesis import given, settings, strategies as st

from hydrocache import vclock
from hydrocache import versionset as vs
from hydrocache.checker import Transaction, check
from hydrocache.cut import StrictCausalCut
from hydrocache.protocols import (Piece, create_snapshot, distributed_snapshot, finish_linear,
                                  parallel_flow, plan_linear, retrieve_cut, simulate_opt)
from hydrocache.version import Version, merge_versions
from hydrocache.versionset import Entry
from hydrocache_world import World, is_cut, observed

SEEDS = st.integers(min_value=0, max_value=2**32)
PROPS = settings(max_examples=40, deadline=None)


def setup_world(seed: int) -> Tuple[World, random.Random]:
    rng = random.Random(seed)
    world = World(rng, caches=3, keys="abcdefg")
    world.random_steps(rng.randint(5, 25))
    # each cache also learns a random part of the history, in a random order
    for cut in world.caches:
        for v in rng.sample(world.written, rng.randint(0, len(world.written))):
            cut.offer(v)
        assert is_cut(cut) is None
    return world, rng


def random_dag(rng: random.Random, world: World):
    """(order, upstreams, cache of each function, read keys of each function)."""
    if rng.random() < 0.5:
        n = rng.randint(2, 4)
        order = [f"f{i}" for i in range(n)]
        ups = {f"f{i}": [f"f{i - 1}"] for i in range(1, n)}
    else:
        order = ["f0", "f1", "f2"]
        ups = {"f2": ["f0", "f1"]}
    where = {f: rng.randrange(len(world.caches)) for f in order}
    reads = {f: sorted(rng.sample(world.keys, rng.randint(1, 3))) for f in order}
    return order, ups, where, reads


class Temps:
    """Temporary versions per holder (S_d.version() / S_i.version())."""

    def __init__(self) -> None:
        self.store: Dict[Tuple[str, str], List[Version]] = {}

    def keep(self, holder: str, cut: StrictCausalCut, keys) -> None:
        for k in keys:
            self.store.setdefault((holder, k), []).append(cut.get(k))

    def fetch(self, key: str, entry: Entry) -> Version:
        got = None
        for h in sorted(entry.holders):
            for v in self.store.get((h, key), ()):
                if vclock.supersedes(entry.vc, v.vc):
                    got = v if got is None else merge_versions(got, v)
        assert got is not None and got.vc == entry.vc, (key, entry, got)
        return got


def run_opt(world, order, ups, where, reads, dag_keys, update=True):
    """OPT along the DAG. Returns (aborted, reason, read versions, (S, R) at the sink,
    fetched keys per function)."""
    temps, out, bound, fetches = Temps(), {}, [], {}
    for fn in order:
        u = ups.get(fn, [])
        if not u:
            s_u, r_u, abort, why = {}, {}, False, ""
        elif len(u) == 1:
            (s_u, r_u), abort, why = out[u[0]], False, ""
        else:
            abort, why, s_u, r_u = parallel_flow([(*out[x], False, "") for x in u])
        cut = world.caches[where[fn]]
        rd = reads[fn]
        plan = plan_linear(s_u, r_u, rd, dag_keys, cut, abort, why)
        if plan.need_update:
            assert update, "no cache update expected"
            world.bring(cut, plan.need_update)
            rd = [k for k in rd if k in cut or k in s_u]      # the rest: not found
            plan = plan_linear(s_u, r_u, rd, dag_keys, cut, abort, why)
        assert not plan.need_update
        if plan.abort:
            assert plan.reason
            return True, plan.reason, bound, None, fetches
        holder = f"h{where[fn]}"
        temps.keep(holder, cut, plan.s_d)
        fetched = {k: temps.fetch(k, e) for k, e in plan.remote.items()}
        if plan.remote:
            fetches[fn] = plan.remote
        r_d, s_new, r_new = finish_linear(plan, s_u, r_u, fetched, holder)
        assert set(r_d) == set(rd)
        bound.extend(r_d.values())
        out[fn] = (s_new, r_new)
    return False, "", bound, out[order[-1]], fetches


def assert_snapshot(world, bound):
    txn = Transaction("dag", [observed(v) for v in bound])
    assert check(world.history + [txn], strict=True) == []


@PROPS
@given(SEEDS)
def test_opt_binds_a_snapshot_or_aborts(seed):
    world, rng = setup_world(seed)
    order, ups, where, reads = random_dag(rng, world)
    dag_keys = None if rng.random() < 0.3 else sorted({k for r in reads.values() for k in r})
    aborted, why, bound, sink, _ = run_opt(world, order, ups, where, reads, dag_keys)
    if aborted:
        return
    assert_snapshot(world, bound)
    s, r = sink
    for k, e in r.items():                         # Theorem 2: R ⊆ S
        assert k in s and s[k].vc == e.vc
    seen = {}
    for v in bound:                                # repeatable read
        assert seen.setdefault(v.key, v.vc) == v.vc


@PROPS
@given(SEEDS)
def test_con_never_aborts_and_binds_a_snapshot(seed):
    world, rng = setup_world(seed)
    order, _, where, reads = random_dag(rng, world)
    dag_keys = None if rng.random() < 0.3 else sorted({k for r in reads.values() for k in r})
    temps, pieces, local = Temps(), {}, {}
    for fn in order:
        cut, holder = world.caches[where[fn]], f"h{where[fn]}"
        world.bring(cut, [k for k in reads[fn] if k not in cut])
        p, s_i = create_snapshot(reads[fn], dag_keys, cut, holder)
        assert set(p) == {k for k in reads[fn] if k in world.anna}
        assert all(e.holders == {holder} for e in s_i.values())
        temps.keep(holder, cut, s_i)
        local[fn] = {k: cut.get(k) for k in p}
        pieces[fn] = {k: Piece(x.local, {kk: Entry(e.vc, frozenset([holder]))
                                         for kk, e in x.cut.items()}) for k, x in p.items()}
    s, plan = distributed_snapshot(pieces)
    bound = []
    for fn in order:
        for k, v in local[fn].items():
            if k in plan.get(fn, {}):
                v = merge_versions(v, temps.fetch(k, plan[fn][k]))
            assert v.vc == s[k].vc                     # each function reads S's partition
            bound.append(v)
    assert_snapshot(world, bound)


@PROPS
@given(SEEDS)
def test_simulated_opt_decides_like_opt(seed):
    world, rng = setup_world(seed)
    order, ups, where, reads = random_dag(rng, world)
    dag_keys = None if rng.random() < 0.3 else sorted({k for r in reads.values() for k in r})
    pieces = {}
    for fn in order:   # bring every key in first: a later update would change earlier pieces
        cut = world.caches[where[fn]]
        world.bring(cut, [k for k in reads[fn] if k not in cut])
    for fn in order:                               # HB: snapshot pieces of the same cuts
        cut, holder = world.caches[where[fn]], f"h{where[fn]}"
        p, _ = create_snapshot(reads[fn], dag_keys, cut, holder)
        pieces[fn] = {k: Piece(x.local, {kk: Entry(e.vc, frozenset([holder]))
                                         for kk, e in x.cut.items()}) for k, x in p.items()}
    sim = simulate_opt(order, ups, pieces)
    known = {fn: [k for k in reads[fn] if k in world.anna] for fn in order}
    aborted, why, _, _, fetches = run_opt(world, order, ups, where, known, dag_keys,
                                          update=False)
    assert sim.abort == aborted, (sim, why)
    if not aborted:
        assert sim.fetches == fetches


# ---------------------------------------------------------------- Theorem 1 and Lemma 2
@PROPS
@given(SEEDS)
def test_union_of_keyset_overlapping_cuts_is_one_and_a_snapshot(seed):
    world, rng = setup_world(seed)
    keyset = set(rng.sample(world.keys, rng.randint(1, len(world.keys))))
    parts = []
    for cut in world.caches:
        whole = {k: Entry(dict(cut.get(k).vc)) for k in cut.keys()}
        parts.append((vs.intersect(whole, keyset), cut))      # Lemma 1: C ∩ K
    s3, version = {}, {}
    for s_i, cut in parts:
        s3 = vs.union(s3, s_i)
        for k in s_i:
            version[k] = cut.get(k) if k not in version else merge_versions(version[k],
                                                                           cut.get(k))
    for k, e in s3.items():                                   # Definition 6
        assert k in keyset and version[k].vc == e.vc
        for d, need in version[k].deps.items():
            if d in keyset:
                assert d in s3 and vclock.supersedes(s3[d].vc, need)
    txn = Transaction("union", [observed(v) for v in version.values()])
    assert check(world.history + [txn], strict=True) == []   # Lemma 2


@PROPS
@given(SEEDS)
def test_retrieve_cut_is_a_keyset_overlapping_cut_containing_the_key(seed):
    world, rng = setup_world(seed)
    cut = rng.choice(world.caches)
    if not len(cut):
        return
    key = rng.choice(sorted(cut.keys()))
    dag = set(rng.sample(world.keys, rng.randint(0, 3)))
    got = retrieve_cut(key, dag, cut)
    assert key in got and set(got) <= dag | {key}
    full = retrieve_cut(key, None, cut)
    assert vs.intersect(full, dag | {key}) == got
    for k, e in full.items():
        assert e.vc == cut.get(k).vc and not e.holders
        for d in cut.get(k).deps:
            assert d in full


# ---------------------------------------------------------------- hand-checked cases
def _cut(*versions):
    c = StrictCausalCut()
    for v in versions:
        c.offer(v)
    assert c.pending_keys() == set()
    return c


def test_linear_flow_cases():
    a1 = Version.new("a", {"e1": 1}, {}, [b"a1"])
    a2 = Version.new("a", {"e1": 2}, {}, [b"a2"])
    b1 = Version.new("b", {"e2": 1}, {"a": {"e1": 2}}, [b"b1"])   # a2 -> b1
    up = _cut(a1)                                  # upstream read a1
    p = plan_linear({}, {}, ["a"], ["a", "b"], up)
    _, s_u, r_u = finish_linear(p, {}, {}, {}, "up")
    assert s_u == {"a": Entry({"e1": 1}, frozenset(["up"]))} and r_u["a"].vc == {"e1": 1}
    down = _cut(a2, b1)
    # b's local version depends on a2, newer than the a1 read upstream; b not upstream: abort
    p = plan_linear(s_u, r_u, ["b"], ["a", "b"], down)
    assert p.abort and "'b'" in p.reason and "'a'" in p.reason
    # reading a downstream: Case II moves a to remote (repeatable read of a1)
    p = plan_linear(s_u, r_u, ["a"], ["a", "b"], down)
    assert not p.abort and p.local == {} and p.remote == {"a": s_u["a"]}
    r_d, s_new, r_new = finish_linear(p, s_u, r_u, {"a": a1}, "down")
    assert r_d["a"].vc == {"e1": 1} and s_new == s_u
    # upstream abort propagates
    assert plan_linear(s_u, r_u, ["a"], None, down, True, "boom").reason == "boom"
    # a key neither local nor upstream must be brought into the cut first
    assert plan_linear({}, {}, ["zz"], None, down).need_update == ["zz"]


def test_finish_linear_rejects_an_older_fetch():
    a1 = Version.new("a", {"e1": 1})
    s_u = {"a": Entry({"e1": 2}, frozenset(["h"]))}
    p = plan_linear(s_u, {"a": Entry({"e1": 2})}, ["a"], None, _cut(a1))
    assert p.remote == {"a": s_u["a"]}
    try:
        finish_linear(p, s_u, {}, {"a": a1}, "me")
    except ValueError as e:
        assert "'a'" in str(e)
    else:
        raise AssertionError("accepted an older version")


def test_parallel_flow_aborts_on_diverging_reads():
    s1 = {"a": Entry({"e1": 1}, frozenset(["h1"]))}
    s2 = {"a": Entry({"e1": 2}, frozenset(["h2"]))}
    r1, r2 = {"a": Entry({"e1": 1})}, {"a": Entry({"e1": 2})}
    abort, why, _, _ = parallel_flow([(s1, r1, False, ""), (s2, r2, False, "")])
    assert abort and "'a'" in why
    abort, why, s, r = parallel_flow([(s2, r2, False, ""), ({}, {}, False, "")])
    assert not abort and s == s2 and r == r2
    assert parallel_flow([(s1, r1, True, "x"), (s2, r2, False, "")])[:2] == (True, "x")


def test_without_validation_the_same_dags_break_tcc():
    """The tests above have teeth: reading each function's own cut, unvalidated, is caught."""
    found = set()
    for seed in range(60):
        world, rng = setup_world(seed)
        order, _, where, reads = random_dag(rng, world)
        bound = []
        for fn in order:
            cut = world.caches[where[fn]]
            world.bring(cut, [k for k in reads[fn] if k not in cut])
            bound += [cut.get(k) for k in reads[fn] if k in cut]
        txn = Transaction("naive", [observed(v) for v in bound])
        found |= {v.kind for v in check(world.history + [txn], strict=True)}
    assert found == {"not_a_snapshot", "atomic_visibility", "non_repeatable_read"}
