"""Dependency-metadata GC's pure part: the stable frontier and what it collects."""

from hypothesis import given, strategies as st

from hydrocache import vclock
from hydrocache.gc import collect, stable_frontier

from hydrocache_strategies import FAST, clocks, versions


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
