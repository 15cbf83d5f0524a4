"""Dependency GC's `collect` is the kernel's (`MultiKeyCausalLattice.collected`): by property it
equals the reference it replaced, written here in Python from the dissertation's rule (4.2.3:
drop a dependency (d, vc) when every replica of d supersedes vc), on lattices holding several
concurrent versions."""
from __future__ import annotations

import anna_core
import pytest
from hypothesis import given, strategies as st

from hydrocache import vclock
from hydrocache.gc import collect
from hydrocache.version import Version

from hydrocache_strategies import FAST, clocks, dep_maps

entries = st.lists(st.tuples(clocks, dep_maps, st.lists(st.binary(max_size=2), max_size=2)),
                   min_size=1, max_size=3)
frontiers = st.dictionaries(st.sampled_from(["x", "y", "z", "k"]), clocks, max_size=3)


def reference_collect(version: Version, frontier) -> Version:
    """The Python `collect` the kernel's replaced: rebuild the lattice from its concurrent
    versions, each without the dependencies the frontier supersedes."""
    def stable(d, c):
        f = frontier.get(d)
        return f is not None and all(f.get(n, 0) >= v for n, v in c.items())

    entries = version.lattice.entries
    if not any(stable(d, c) for _, deps, _ in entries for d, c in deps.items()):
        return version
    lattice = None
    for vc, deps, values in entries:
        one = anna_core.MultiKeyCausalLattice(
            vc, {d: c for d, c in deps.items() if not stable(d, c)}, values)
        lattice = one if lattice is None else lattice.merge(one)
    return Version.from_lattice(version.key, lattice)


def version_of(parts) -> Version:
    lattice = None
    for vc, deps, values in parts:
        one = anna_core.MultiKeyCausalLattice(vc, deps, values)
        lattice = one if lattice is None else lattice.merge(one)
    return Version.from_lattice("k", lattice)


@FAST
@given(entries, frontiers)
def test_collect_equals_the_reference(parts, frontier):
    v = version_of(parts)
    got, want = collect(v, frontier), reference_collect(v, frontier)
    assert (got is v) == (want is v)                # unchanged: the same object back
    assert got.lattice == want.lattice
    assert got.vc == v.vc and got.values == v.values
    for d, c in got.deps.items():                   # nothing left that the frontier covers
        assert d not in frontier or not vclock.supersedes(frontier[d], c)


def test_collect_rejects_a_malformed_frontier():
    v = Version.new("k", {"e": 1}, {"x": {"e": 1}}, [b"v"])
    with pytest.raises(TypeError):
        collect(v, {"x": [("e", 1)]})
    with pytest.raises(ValueError):
        collect(v, {"x": {"e": -1}})
