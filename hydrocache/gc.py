"""Dependency-metadata garbage collection (dissertation 4.2.3).

Contract:

- ``stable_frontier(replica_clocks)``: ``replica_clocks`` maps a key to the clocks of its
  replicas; the result maps each key to the entry-wise minimum of those clocks (an entry
  absent from any replica is 0), i.e. the greatest clock every replica supersedes. A key
  with no replica clocks is left out (nothing about it is known to be stable).
- ``collect(version, frontier)``: the version without the dependencies ``(d, vc)`` that
  ``frontier[d]`` supersedes ("all replicas of a supersede a_i"). Clock and values are
  unchanged; the lattice is rebuilt with the dependency dropped from each of its concurrent
  versions, so ``collect(v, f).serialize()`` is what to store. Returns ``version`` itself
  when nothing is dropped.

Reading: "all replicas supersede a_i" is checked against the entry-wise minimum: every
replica's clock is >= the minimum entry-wise, so if the minimum supersedes ``a_i`` so does
each replica; conversely the minimum is the greatest clock with that property. The minimum
(a meet) is not a lattice merge, so it is computed here, not in the kernel.

Reading: the frontier is an input. Collecting it (the "background consensus protocol") is
the service's job; a stale frontier only collects less.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

from .version import Version

__all__ = ["stable_frontier", "collect", "frontier_from_reports"]

VC = Mapping[str, int]


def stable_frontier(replica_clocks: Mapping[str, Sequence[VC]]) -> Dict[str, Dict[str, int]]:
    out: Dict[str, Dict[str, int]] = {}
    for key, clocks in replica_clocks.items():
        clocks = list(clocks)
        if not clocks:
            continue
        low = {n: c for n, c in clocks[0].items() if c}
        for vc in clocks[1:]:
            low = {n: min(c, vc.get(n, 0)) for n, c in low.items()}
            low = {n: c for n, c in low.items() if c}
        out[key] = low
    return out


def collect(version: Version, frontier: Mapping[str, VC]) -> Version:
    # the kernel's `collected` walks the lattice's versions in C++ (this runs for every
    # version offered to a cut once a GC round has set a frontier)
    lattice = version.lattice.collected(frontier if type(frontier) is dict else dict(frontier))
    return version if lattice is None else Version.from_lattice(version.key, lattice)


def frontier_from_reports(reports: Sequence[Tuple[Sequence[Tuple[str, VC]], Sequence[str]]],
                          replica_clocks: Mapping[str, Sequence[VC]]) -> Dict[str, Dict[str, int]]:
    """One GC round's frontier: for every key some cache's versions depend on, the meet of
    its Anna replicas' clocks and of every clock any cache holds of it (cut and temporary
    versions, which calls in flight read). A key no replica has is left out.

    Reading: 4.2.3 says "all replicas of a supersede a_i". Caches hold versions too, and a
    call in flight may have read an older one, so the caches' clocks count as replicas here;
    a cache that did not report makes the caller skip the round (no frontier is safe then).
    """
    held: Dict[str, List[VC]] = {}
    keys: set = set()
    for clocks, dep_keys in reports:
        keys.update(dep_keys)
        for key, vc in clocks:
            held.setdefault(key, []).append(vc)
    out: Dict[str, List[VC]] = {}
    for key in keys:
        replicas = list(replica_clocks.get(key, ()))
        if replicas:
            out[key] = replicas + held.get(key, [])
    return stable_frontier(out)
