"""What a causal invocation (`executor.causal.CausalInvocation`) carries downstream, and what
the sink saves with it, against a scripted node cache (unit test: no sockets).

- a function whose downstream functions on another cache read keys asks its cache for its
  versions of S_d of those keys only (`carry_versions`, `carry_keys`) and passes them down
  with the received ones some downstream function reads; its own binds send the cache only
  the carried versions of the keys they bind; with downstream reads not all known, it asks
  for and passes on everything;
- every function passes down the dependencies of each version it read (`read_deps`), and a
  sink writing a key read upstream takes them from there: no second CAUSAL_BIND;
- a context without them (an older worker upstream) still gets the bind, as before.
"""
from __future__ import annotations

from typing import List

from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from hydrocache.version import Version
from hydrocache.writer import ExecutorWriter

from executor.cache_client import CausalRead
from executor.causal import CausalInvocation


class ScriptedCache:
    """Answers CAUSAL_BIND with fixed versions and S/R, and acknowledges commits."""

    def __init__(self, versions=None, carried=()):
        self.requests: List[pb.CacheRequest] = []
        self.versions = versions or {}          # key -> (clock, deps, value)
        self.carried = list(carried)

    def causal(self, req: pb.CacheRequest, timeout: float):
        self.requests.append(req)
        response = pb.CacheResponse()
        found = {}
        if req.op == pb.CAUSAL_BIND:
            for k in req.keys:
                vc, deps, value = self.versions[k]
                e = response.entries.add(key=k, found=True)
                for d, dvc in deps.items():
                    e.deps.add(key=d).vc.update(dvc)
                # as the worker's cache client: the dependencies decoded on first use
                found[k] = CausalRead(dict(vc), [memoryview(value)], deps_pb=e.deps)
                response.context.read_set.add(key=k).vc.update(vc)
                response.context.snapshot.add(key=k).vc.update(vc)
            for key, lattice in self.carried:
                response.context.carried.add(key=key, lattice=lattice)
        return response, found

    def ops(self):
        return [pb.CacheOp.Name(r.op) for r in self.requests]


def schedule(sink: bool, caches=("tcp://c1", "tcp://c2"), down=(("g", 1, "kjm"),)
             ) -> pb.Schedule:
    """Function "f" on caches[0]; unless it is the sink, its targets are `down`: (function,
    index of its cache, the keys its arguments reference)."""
    s = pb.Schedule(call_id="c#0", function="f", sink=sink, scheduler_address="tcp://sched")
    s.causal.protocol = pb.OPT
    s.causal.requested = pb.OPT
    s.causal.call_id = "c"
    s.causal.dag_keys.extend(["k", "j", "m"])
    s.causal.dag_keys_known = True
    s.causal.caches["f"] = caches[0]
    for fn, i, reads in (() if sink else down):
        s.targets.append(fn)
        g = s.forward.add(function=fn, sink=True)
        for k in reads:
            g.args.args.add(reference=k)
        s.causal.caches[fn] = caches[min(i, len(caches) - 1)]
    return s


def upstream(read_deps: bool) -> pb.CausalContext:
    c = pb.CausalContext()
    c.read_set.add(key="k").vc.update({"u": 1})
    c.snapshot.add(key="k").vc.update({"u": 1})
    if read_deps:
        rd = c.read_deps.add(key="k")
        rd.deps.add(key="d").vc.update({"x": 4})
    return c


def committed(cache: ScriptedCache) -> Version:
    (req,) = [r for r in cache.requests if r.op == pb.CAUSAL_COMMIT]
    (raw,) = req.writes
    t = anna_pb2.KeyTuple.FromString(raw)
    return Version.deserialize(t.key, t.payload)


def test_a_sink_writing_a_key_read_upstream_takes_its_dependencies_from_the_context():
    cache = ScriptedCache()
    inv = CausalInvocation(cache, schedule(sink=True), [upstream(read_deps=True)], 5.0)
    inv.bind([])                               # the sink reads nothing itself
    inv.put("k", b"new")
    inv.commit(ExecutorWriter("e"))
    assert cache.ops() == ["CAUSAL_COMMIT"]    # no second bind
    v = committed(cache)
    assert v.deps["d"] == {"x": 4}             # the dependencies of the version read upstream
    assert v.vc["u"] == 1                      # based on the version read upstream


def test_without_carried_dependencies_the_sink_binds_the_key_again():
    cache = ScriptedCache(versions={"k": ({"u": 1}, {"d": {"x": 4}}, b"old")})
    inv = CausalInvocation(cache, schedule(sink=True), [upstream(read_deps=False)], 5.0)
    inv.bind([])
    inv.put("k", b"new")
    inv.commit(ExecutorWriter("e"))
    assert cache.ops() == ["CAUSAL_BIND", "CAUSAL_COMMIT"]
    assert cache.requests[0].keys == ["k"] and committed(cache).deps["d"] == {"x": 4}


def test_a_function_with_downstreams_elsewhere_asks_for_and_passes_down_carried_versions():
    lattice = Version.new("j", {"u": 2}, {}, [b"J"]).serialize()
    cache = ScriptedCache(versions={"j": ({"u": 2}, {"k": {"u": 1}}, b"J"),
                                    "m": ({"u": 1}, {}, b"M")},
                          carried=[("j", lattice)])
    up = upstream(read_deps=True)
    up.carried.add(key="k", lattice=Version.new("k", {"u": 1}, {}, [b"K"]).serialize())
    up.carried.add(key="m", lattice=Version.new("m", {"u": 1}, {}, [b"M"]).serialize())
    inv = CausalInvocation(cache, schedule(sink=False), [up], 5.0)
    inv.bind(["m"])
    (bind,) = cache.requests
    # asked for its versions of S_d; sends only the carried versions of the keys it binds
    assert bind.carry_versions and [cv.key for cv in bind.upstreams[0].carried] == ["m"]
    assert list(bind.carry_keys) == ["j", "k", "m"]    # what "g", on the other cache, reads
    inv.bind(["j"])                                    # a later read: its own context
    assert [cv.key for cv in cache.requests[1].upstreams[0].carried] == ["j"]
    out = inv.context()
    assert sorted(cv.key for cv in out.carried) == ["j", "k", "m"]  # received + its own
    deps = {rd.key: {kv.key: dict(kv.vc) for kv in rd.deps} for rd in out.read_deps}
    assert deps == {"j": {"k": {"u": 1}}, "k": {"d": {"x": 4}}, "m": {}}
    # every function on one cache: nothing to carry, nothing asked
    cache2 = ScriptedCache(versions={"j": ({"u": 2}, {}, b"J")})
    inv2 = CausalInvocation(cache2, schedule(sink=False, caches=("tcp://c1",)),
                            [upstream(read_deps=False)], 5.0)
    inv2.bind(["j"])
    assert not cache2.requests[0].carry_versions and not inv2.context().carried


def test_only_keys_a_downstream_function_reads_are_asked_for_and_passed_on():
    """"g" (other cache) reads j, "h" (this cache) reads m: the cache carries j only (h's
    cache holds its own versions), and of the received k and m only m goes on (nothing
    downstream reads k)."""
    lattice = Version.new("j", {"u": 2}, {}, [b"J"]).serialize()
    cache = ScriptedCache(versions={"m": ({"u": 1}, {}, b"M")}, carried=[("j", lattice)])
    up = upstream(read_deps=False)
    up.carried.add(key="k", lattice=Version.new("k", {"u": 1}, {}, [b"K"]).serialize())
    up.carried.add(key="m", lattice=Version.new("m", {"u": 1}, {}, [b"M"]).serialize())
    inv = CausalInvocation(cache, schedule(sink=False, down=(("g", 1, "j"), ("h", 0, "m"))),
                           [up], 5.0)
    inv.bind(["m"])
    (bind,) = cache.requests
    assert bind.carry_versions and list(bind.carry_keys) == ["j"]
    assert sorted(cv.key for cv in inv.context().carried) == ["j", "m"]
    # nothing downstream on another cache reads anything: the cache is not asked to carry
    cache2 = ScriptedCache(versions={"m": ({"u": 1}, {}, b"M")})
    inv2 = CausalInvocation(cache2, schedule(sink=False, down=(("g", 1, ""), ("h", 0, "m"))),
                            [up], 5.0)
    inv2.bind(["m"])
    assert not cache2.requests[0].carry_versions and not cache2.requests[0].carry_keys
    assert [cv.key for cv in inv2.context().carried] == ["m"]


def test_a_bind_does_not_send_its_cache_carried_versions_the_snapshot_says_it_holds_alone():
    """"m"'s entry is held by this function's cache alone (it rebuilds it from its own
    temporary versions); "k"'s by another cache too: only k's carried version is sent."""
    cache = ScriptedCache(versions={"k": ({"u": 1}, {}, b"K"), "m": ({"u": 1}, {}, b"M")})
    up = upstream(read_deps=False)
    up.snapshot[0].holders.extend(["tcp://c1", "tcp://c2"])            # k
    up.snapshot.add(key="m", holders=["tcp://c1"]).vc.update({"u": 1})
    for k in "km":
        up.carried.add(key=k, lattice=Version.new(k, {"u": 1}, {}, [k.encode()]).serialize())
    inv = CausalInvocation(cache, schedule(sink=False), [up], 5.0)   # "f" runs on c1
    inv.bind(["k", "m"])
    assert [cv.key for cv in cache.requests[0].upstreams[0].carried] == ["k"]
    # on another cache, both are sent
    cache2 = ScriptedCache(versions={"k": ({"u": 1}, {}, b"K"), "m": ({"u": 1}, {}, b"M")})
    inv2 = CausalInvocation(cache2, schedule(sink=False, caches=("tcp://c3", "tcp://c2")),
                            [up], 5.0)
    inv2.bind(["k", "m"])
    assert sorted(cv.key for cv in cache2.requests[0].upstreams[0].carried) == ["k", "m"]


def test_downstream_reads_not_all_known_carry_everything_as_before():
    up = upstream(read_deps=False)
    up.carried.add(key="k", lattice=Version.new("k", {"u": 1}, {}, [b"K"]).serialize())
    for explored in (True, False):
        s = schedule(sink=False, down=(("g", 1, "j"),))
        if explored:
            s.causal.dag_keys_known = False     # keys read at run time: unknown reads
        else:
            s.targets.append("big")             # a schedule that travels apart
            s.causal.caches["big"] = "tcp://c2"
        cache = ScriptedCache(versions={"m": ({"u": 1}, {}, b"M")})
        inv = CausalInvocation(cache, s, [up], 5.0)
        inv.bind(["m"])
        assert cache.requests[0].carry_versions and not cache.requests[0].carry_keys
        assert [cv.key for cv in inv.context().carried] == ["k"]


def test_read_dependencies_of_one_key_from_two_branches_are_merged():
    from hydrocache.carried import ReadDeps
    a, b = pb.ReadDeps(key="k"), pb.ReadDeps(key="k")
    a.deps.add(key="d").vc.update({"x": 4, "y": 1})
    b.deps.add(key="d").vc.update({"x": 2, "y": 3})
    b.deps.add(key="e").vc.update({"z": 1})
    rd = ReadDeps()
    rd.extend([a])
    rd.extend([a])                         # the same again: kept once, as it came
    assert rd.to_proto() == [a]
    rd.extend([b])
    assert rd.get("k") == {"d": {"x": 4, "y": 3}, "e": {"z": 1}}
    assert rd.get("j") is None and "k" in rd


def test_s_and_r_go_downstream_as_the_cache_sent_them_and_decode_when_read():
    from hydrocache import versionset as vs
    cache = ScriptedCache(versions={"j": ({"u": 2}, {}, b"J"), "m": ({"u": 1, "v": 3}, {}, b"M")})
    inv = CausalInvocation(cache, schedule(sink=False), [upstream(read_deps=False)], 5.0)
    inv.bind(["j"])
    first = cache.causal(cache.requests[0], 5.0)[0].context
    out = inv.context()
    assert list(out.snapshot) == list(first.snapshot)       # passed on as received
    assert list(out.read_set) == list(first.read_set)
    assert inv.snapshot == vs.from_proto(first.snapshot)    # and decoded when read here
    inv.bind(["m"])                # a later read: its own S and R go up, the new ones down
    (own,) = cache.requests[-1].upstreams
    assert vs.from_proto(own.read_set) == vs.from_proto(first.read_set)
    assert vs.from_proto(inv.context().read_set) == {"m": vs.Entry({"u": 1, "v": 3})}
    inv.read_set = {"z": vs.Entry({"w": 9})}                # set here: that is what goes down
    assert vs.from_proto(inv.context().read_set) == {"z": vs.Entry({"w": 9})}
    assert vs.from_proto(inv.context().snapshot) == {"m": vs.Entry({"u": 1, "v": 3})}


def test_a_function_reading_nothing_passes_its_one_upstream_context_on():
    from hydrocache import versionset as vs
    up = upstream(read_deps=False)
    up.read_set.add(key="j", holders=["tcp://c1"]).vc.update({"u": 5})
    inv = CausalInvocation(ScriptedCache(), schedule(sink=False), [up], 5.0)
    inv.bind([])
    assert list(inv.context().read_set) == list(up.read_set)
    assert inv.read_set == vs.from_proto(up.read_set)
    assert inv.read_set["j"].holders == frozenset({"tcp://c1"})


def test_a_bound_versions_dependencies_decode_on_first_use():
    """A bound version's dependencies stay as the cache sent them until read, then read as
    the dict they encode (what the sink's writer needs of a key it writes)."""
    e = pb.CacheEntry(key="k", found=True)
    e.deps.add(key="a").vc.update({"w1": 2, "w2": 1})
    e.deps.add(key="b").vc.update({"w3": 5})
    read = CausalRead({"w": 1}, [memoryview(b"v")], deps_pb=e.deps)
    assert read._deps is None
    assert read.deps == {"a": {"w1": 2, "w2": 1}, "b": {"w3": 5}}
    assert read.deps is read.deps
    assert CausalRead({"w": 1}, [], {"x": {"w": 1}}).deps == {"x": {"w": 1}}
    assert CausalRead({"w": 1}, []).deps == {}


# ---- carry_plan (pure) over random DAGs and placements ----
from hypothesis import given, settings, strategies as st  # noqa: E402

from hydrocache.carried import carry_plan  # noqa: E402


@st.composite
def placed_dags(draw):
    """(schedules by function, cache per function, reads per function, edges) for a random
    DAG of up to 6 functions (edges from lower to higher index) on up to 3 caches, built as
    the scheduler builds them: every non-source schedule in each schedule's `forward`."""
    n = draw(st.integers(2, 6))
    edges = sorted(draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                                .filter(lambda e: e[0] < e[1]), min_size=1, max_size=10)))
    caches = [draw(st.sampled_from(["c0", "c1", "c2"])) for _ in range(n)]
    reads = [draw(st.sets(st.sampled_from("abcde"), max_size=3)) for _ in range(n)]
    names = [f"f{i}" for i in range(n)]
    scheds = {}
    for i in range(n):
        s = pb.Schedule(function=names[i], targets=[names[j] for a, j in edges if a == i],
                        upstreams=[names[a] for a, j in edges if j == i])
        for k in sorted(reads[i]):
            s.args.args.add(reference=k)
        s.causal.dag_keys.extend("abcde")
        s.causal.dag_keys_known = True
        for j in range(n):
            s.causal.caches[names[j]] = caches[j]
        scheds[names[i]] = s
    downstream = [s for s in scheds.values() if s.upstreams]
    for s in scheds.values():
        s.forward.extend(downstream)
    return scheds, dict(zip(names, caches)), dict(zip(names, reads)), edges


@settings(max_examples=200, deadline=None)
@given(placed_dags())
def test_carry_plan_brings_every_version_a_downstream_bind_on_another_cache_needs(dag):
    """Along every path f -> ... -> g, a key g reads on a cache other than f's is asked of
    f's cache (`ask`) and passed on by every function in between (`keep`); nothing is asked
    that no downstream function on another cache reads, nor kept that none reads."""
    scheds, cache, reads, edges = dag
    plans = {fn: carry_plan(s) for fn, s in scheds.items()}
    succ = {fn: list(s.targets) for fn, s in scheds.items()}

    def paths(fn):
        yield [fn]
        for t in succ[fn]:
            for p in paths(t):
                yield [fn] + p

    for fn in scheds:
        ask, keep = plans[fn]
        below = {g for p in paths(fn) for g in p[1:]}
        assert keep == frozenset().union(*[reads[g] for g in below])
        assert ask == frozenset().union(*[reads[g] for g in below if cache[g] != cache[fn]])
        for p in paths(fn):
            g = p[-1]
            if len(p) > 1 and cache[g] != cache[fn]:
                assert reads[g] <= plans[fn][0]
                assert all(reads[g] <= plans[m][1] for m in p[1:-1])


def test_a_bind_sends_its_cache_no_writes_or_read_dependencies_of_its_upstreams():
    """The cache reads S, R, the abort flag, the fetch count and carried versions of an
    upstream context; its writes and read dependencies go downstream only."""
    cache = ScriptedCache(versions={"k": ({"u": 1}, {}, b"K")})
    up = upstream(read_deps=True)
    up.writes["w"] = b"written upstream"
    inv = CausalInvocation(cache, schedule(sink=False), [up], 5.0)
    inv.bind(["k"])
    [sent] = cache.requests[0].upstreams
    assert not sent.read_deps and not sent.writes
    assert list(sent.snapshot) == list(up.snapshot) and list(sent.read_set) == list(up.read_set)
    out = inv.context()                 # downstream still gets both
    assert out.writes["w"] == b"written upstream" and [d.key for d in out.read_deps] == ["k"]
