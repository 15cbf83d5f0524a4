"""Hypothesis strategies shared by the tests of HydroCache's pure modules: clocks, versions,
versionsets."""
from hypothesis import settings, strategies as st

from hydrocache.version import Version
from hydrocache.versionset import Entry

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
    """A clock without its zero entries (a zero entry means nothing)."""
    return {k: v for k, v in vc.items() if v}
