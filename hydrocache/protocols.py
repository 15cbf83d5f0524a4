"""The MTCC protocols' decisions, without their I/O (dissertation 4.3, Algorithms 6-10).

Contract (every function is pure; versionsets are ``versionset.VersionSet``):

- ``retrieve_cut(key, dag_keys, cut)`` (Algorithm 7): the cut's version of ``key`` and the
  transitive closure of its dependencies through the cut's versions, intersected with
  ``dag_keys`` (``None``: the read set is unknown, no restriction). Entries have no holders.
  Empty when ``key`` is not in the cut.
- ``plan_linear(s_u, r_u, rd_keys, dag_keys, cut, abort, reason) -> LinearPlan``
  (Algorithm 6 lines 1-33): the local bindings, what to fetch from upstream holders
  (``remote``, entries of S_u with their holders) and S_d, or an abort with its reason.
- ``finish_linear(plan, s_u, r_u, fetched, holder)`` (lines 34-37): R_d, S_new, R_new.
- ``parallel_flow(contexts)`` (Algorithm 8).
- ``create_snapshot(keys, dag_keys, cut, holder)`` (Algorithm 9 lines 3-6) and
  ``distributed_snapshot(pieces)`` (Algorithm 10 lines 1-12).
- ``simulate_opt(order, upstreams, pieces)``: HB's simulation of OPT (4.3.5).

Reading: Algorithm 7 starts ``C'`` empty and adds only dependencies, but the text says C' is
"a cut from C that includes k_i" and Theorem 2 needs k_i in S_d: the key's own version is
always in the result, even when ``dag_keys`` (which the paper assumes contains it) does not.

Reading: keys that must be brought into the cut (Algorithm 6 line 8, "C.update(k)") are
I/O. ``plan_linear`` returns them in ``need_update`` (and nothing else); the caller updates
the cut and calls again. A key still neither in the cut nor in S_u after that (Anna has no
such key) is not bound: the caller reports it as not found.

Reading: Case I keeps the local version and also fetches S_u's entry; R_d's version is
their merge (line 36, "R_d.merge(fetch(k))"), as in Theorem 2's proof (k_i = k_m ∪ k_j).
A key moved to remote by Case II is read from upstream only.

Reading: the fetched version of a remote key must supersede the entry asked for. Holders
serve their temporary versions, so for an entry held by several caches the caller merges
what each holder returns; the result equals the entry (anything newer would break R ⊆ S).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import (Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple)

from . import vclock
from . import versionset as vs
from .cut import StrictCausalCut
from .version import Version, merge_versions
from .versionset import Entry, VersionSet

__all__ = ["retrieve_cut", "LinearPlan", "plan_linear", "finish_linear", "parallel_flow",
           "parallel_stale",
           "Piece", "create_snapshot", "distributed_snapshot", "SimResult", "simulate_opt"]


def retrieve_cut(key: str, dag_keys: Optional[Iterable[str]],
                 cut: StrictCausalCut) -> VersionSet:
    """Algorithm 7: a keyset-overlapping cut for ``dag_keys`` containing the cut's ``key``
    (``key`` first, then the others in key order)."""
    reach = cut.reach(key)
    if not reach:
        return {}
    reach.discard(key)
    out: VersionSet = {key: Entry(dict(cut.get(key).vc))}
    for k in sorted(reach if dag_keys is None else reach.intersection(dag_keys)):
        v = cut.get(k)
        if v is not None:
            out[k] = Entry(dict(v.vc))
    return out


@dataclass
class LinearPlan:
    abort: bool
    reason: str
    local: Dict[str, Version] = field(default_factory=dict)
    remote: VersionSet = field(default_factory=dict)
    s_d: VersionSet = field(default_factory=dict)
    need_update: List[str] = field(default_factory=list)
    # with an abort: keys an upstream read older than this cache's versions depend on (a
    # retry that refreshes them from the KVS first can succeed where this one could not)
    stale: List[str] = field(default_factory=list)


def _validate(s_u: VersionSet, r_u: VersionSet, local: Mapping[str, Mapping[str, int]],
              remote_only: Iterable[str], cut_of: Callable[[str], VersionSet]
              ) -> Tuple[bool, str, List[str], VersionSet, VersionSet]:
    """Algorithm 6 lines 3-32 on clocks: (abort, reason, local keys kept, remote, S_d)."""
    remote: VersionSet = {k: s_u[k] for k in remote_only}
    # Case I: the local version must supersede S_u's (which supersedes R_u's deps)
    for k in sorted(local):
        if k in s_u and not vclock.supersedes(local[k], s_u[k].vc):
            remote[k] = s_u[k]
    # Case II: R_u must supersede the local version's keyset-overlapping cut
    kept: List[str] = []
    s_d: VersionSet = {}
    for k in sorted(local):
        s_k = cut_of(k)
        bad = next((m for m in sorted(s_k)
                    if m in r_u and not vclock.supersedes(r_u[m].vc, s_k[m].vc)), None)
        if bad is None:
            kept.append(k)
            s_d = vs.union(s_d, s_k)
        elif k in s_u:
            remote[k] = s_u[k]
        else:
            return (True, f"{k!r}: the local version depends on a version of {bad!r} newer "
                          f"than the one read upstream, and {k!r} is not in the upstream "
                          f"snapshot", [bad], {}, {})
    return False, "", kept, remote, s_d


def plan_linear(s_u: VersionSet, r_u: VersionSet, rd_keys: Iterable[str],
                dag_keys: Optional[Iterable[str]], cut: StrictCausalCut,
                abort: bool = False, reason: str = "") -> LinearPlan:
    """Algorithm 6 up to its I/O (see the module docstring)."""
    if abort:
        return LinearPlan(True, reason or "upstream aborted")
    rd = sorted(set(rd_keys))
    need = [k for k in rd if k not in cut and k not in s_u]
    if need:
        return LinearPlan(False, "", need_update=need)
    dag = None if dag_keys is None else set(dag_keys)
    local = {k: cut.get(k).vc for k in rd if k in cut}
    remote_only = [k for k in rd if k not in cut and k in s_u]
    bad, why, kept, remote, s_d = _validate(s_u, r_u, local, remote_only,
                                            lambda k: retrieve_cut(k, dag, cut))
    if bad:
        return LinearPlan(True, why, stale=list(kept))
    return LinearPlan(False, "", {k: cut.get(k) for k in kept}, remote, s_d, [])


def finish_linear(plan: LinearPlan, s_u: VersionSet, r_u: VersionSet,
                  fetched: Mapping[str, Version], holder: str
                  ) -> Tuple[Dict[str, Version], VersionSet, VersionSet]:
    """Algorithm 6 lines 33-37: (R_d versions, S_new = S_u ∪ S_d, R_new = R_u ∪ R_d)."""
    if plan.abort or plan.need_update:
        raise ValueError("finish_linear needs a plan that neither aborts nor needs updates")
    for k, e in plan.remote.items():
        got = fetched.get(k)
        if got is None:
            raise ValueError(f"{k!r}: asked from upstream holders but not fetched")
        if got.key != k:
            raise ValueError(f"{k!r}: fetched a version of {got.key!r}")
        if not vclock.supersedes(got.vc, e.vc):
            raise ValueError(f"{k!r}: the fetched version {got.vc} does not supersede the "
                             f"upstream snapshot's {e.vc}")
    r_d: Dict[str, Version] = dict(plan.local)
    for k in plan.remote:
        r_d[k] = merge_versions(r_d[k], fetched[k]) if k in r_d else fetched[k]
    mine = frozenset([holder])
    s_d = {k: Entry(e.vc, mine) for k, e in plan.s_d.items()}
    return r_d, vs.union(s_u, s_d), vs.union(r_u, vs.of_versions(r_d.values()))


def parallel_stale(contexts: Sequence[Tuple[VersionSet, VersionSet, bool, str]]) -> List[str]:
    """The keys some parallel upstream read older than the union of their snapshots (what a
    retry should refresh when Algorithm 8 aborts)."""
    s: VersionSet = {}
    for s_i, _, _, _ in contexts:
        s = vs.union(s, s_i)
    return sorted({k for _, r_i, _, _ in contexts for k in vs.not_superseding(r_i, s)})


def parallel_flow(contexts: Sequence[Tuple[VersionSet, VersionSet, bool, str]]
                  ) -> Tuple[bool, str, VersionSet, VersionSet]:
    """Algorithm 8: (S_i, R_i, abort_i, reason_i) per upstream -> (abort, reason, S, R)."""
    for _, _, a, why in contexts:
        if a:
            return True, why or "a parallel upstream aborted", {}, {}
    s: VersionSet = {}
    for s_i, _, _, _ in contexts:
        s = vs.union(s, s_i)
    for i, (_, r_i, _, _) in enumerate(contexts):
        bad = vs.not_superseding(r_i, s)
        if bad:
            return (True, f"parallel upstream {i} read {bad[0]!r} older than the union of "
                          f"the upstream snapshots", {}, {})
    r: VersionSet = {}
    for _, r_i, _, _ in contexts:
        r = vs.union(r, r_i)
    return False, "", s, r


@dataclass
class Piece:
    local: Entry
    cut: VersionSet


def create_snapshot(keys: Iterable[str], dag_keys: Optional[Iterable[str]],
                    cut: StrictCausalCut, holder: str) -> Tuple[Dict[str, Piece], VersionSet]:
    """Algorithm 9 lines 3-6: per key in the cut its Entry and RetrieveCut; S_i (holders =
    {holder}). Keys absent from the cut are skipped."""
    dag = None if dag_keys is None else set(dag_keys)
    pieces: Dict[str, Piece] = {}
    s_i: VersionSet = {}
    for k in sorted(set(keys)):
        v = cut.get(k)
        if v is None:
            continue
        c = retrieve_cut(k, dag, cut)
        pieces[k] = Piece(Entry(dict(v.vc)), c)
        s_i = vs.union(s_i, c)
    mine = frozenset([holder])
    return pieces, {k: Entry(e.vc, mine) for k, e in s_i.items()}


def distributed_snapshot(pieces: Mapping[str, Mapping[str, Piece]]
                         ) -> Tuple[VersionSet, Dict[str, VersionSet]]:
    """Algorithm 10 lines 1-12: S = ∪ S_i; per function, the S entries it must fetch (only
    functions that need something appear)."""
    s: VersionSet = {}
    for fn in sorted(pieces):
        for p in pieces[fn].values():
            s = vs.union(s, p.cut)
    plan: Dict[str, VersionSet] = {}
    for fn in sorted(pieces):
        need = {k: s[k] for k, p in pieces[fn].items()
                if not vclock.supersedes(p.local.vc, s[k].vc)}
        if need:
            plan[fn] = need
    return s, plan


@dataclass
class SimResult:
    abort: bool
    reason: str
    fetches: Dict[str, VersionSet] = field(default_factory=dict)


def simulate_opt(order: Sequence[str], upstreams: Mapping[str, Sequence[str]],
                 pieces: Mapping[str, Mapping[str, Piece]]) -> SimResult:
    """HB's simulation of OPT: Algorithms 6 and 8 over the snapshot pieces, in topological
    ``order``. Each function's pieces stand in for its cache's cut (its local versions and
    their RetrieveCuts, holders as given in the pieces). ``fetches``: per function, what it
    would fetch from upstream holders (functions fetching nothing are left out)."""
    out: Dict[str, Tuple[VersionSet, VersionSet]] = {}
    fetches: Dict[str, VersionSet] = {}
    for fn in order:
        ups = list(upstreams.get(fn, ()))
        if not ups:
            s_u, r_u = {}, {}
        elif len(ups) == 1:
            s_u, r_u = out[ups[0]]
        else:
            a, why, s_u, r_u = parallel_flow([(*out[u], False, "") for u in ups])
            if a:
                return SimResult(True, f"{fn}: {why}", fetches)
        mine = pieces.get(fn, {})
        local = {k: p.local.vc for k, p in mine.items()}
        bad, why, kept, remote, s_d = _validate(
            s_u, r_u, local, [], lambda k: mine[k].cut)
        if bad:
            return SimResult(True, f"{fn}: {why}", fetches)
        if remote:
            fetches[fn] = remote
        r_d: VersionSet = {k: Entry(dict(local[k])) for k in kept}
        r_d = vs.union(r_d, {k: Entry(e.vc) for k, e in remote.items()})
        out[fn] = (vs.union(s_u, s_d), vs.union(r_u, r_d))
    return SimResult(False, "", fetches)
