"""The strict causal cut a HydroCache node exposes to its functions (Definition 3, 4.2).

Contract: ``StrictCausalCut`` holds the *exposed* versions (at most one per key) and the
*pending candidates* (versions offered but not yet exposable). After every operation the
exposed versions form a cut: every dependency ``(d, vc)`` of every exposed version has an
exposed version of ``d`` that supersedes ``vc`` (Definition 4).

- ``offer(version) -> CutUpdate(exposed, missing)``: the version is merged (Definition 1)
  into the candidate of its key (candidate = exposed version ∪ earlier candidate ∪ new one);
  a version the exposed one already supersedes is a no-op. Then every candidate that can be
  exposed is: the greatest set X of candidates such that each dependency of each member is
  superseded by the exposed version of its key, or by that key's candidate when the
  candidate is in X. So mutually dependent writes (a <-> b, 4.2.2) appear together, and a
  candidate never appears before what it depends on. ``exposed`` lists the keys whose
  exposed version changed (sorted); ``missing`` is ``missing()`` afterwards.
- ``missing()``: for the pending candidates, every dependency that neither the exposed
  version nor the candidate of its key supersedes: dependency key -> the clock needed
  (merged over the candidates needing it). The service fetches these from Anna ("fetch
  recursively until superseded") and offers what it gets.
- ``get(key)``, ``key in cut``, ``len(cut)``, ``keys()``: the exposed versions only.
- ``pending_keys()`` / ``pending()``: the candidates waiting.
- ``evict(key) -> set``: removes ``key`` and every exposed key whose version depends on it,
  transitively (so what stays is a cut). Uses a reverse-dependency index: the cost is the
  size of what is evicted (plus its dependency lists), not the size of the cut.
- ``dependents(key)``: the exposed keys whose exposed version depends *directly* on ``key``.
- ``reach(key)``: ``key`` and every key its exposed version depends on, transitively through
  exposed versions (Algorithm 7's walk; ``hydrocache.protocols.retrieve_cut``).
- ``keyset_version``: increases whenever the exposed key set changes (a key appears or is
  evicted; a newer version of an exposed key does not change it).

Reading: exposing a candidate replaces the exposed version, which the candidate supersedes
(it includes it), so every exposed version that depended on the old one still has a
superseding dependency; that is why a candidate is only checked against its own
dependencies.

Reading: eviction and candidates. ``evict`` also drops the pending candidate of every evicted
key (it was merged with the evicted version) and, transitively, every pending candidate
that depends on a dropped key: keeping them would make ``missing()`` ask to fetch back what
was just evicted. A later offer of those versions starts over.

Cost of ``offer``: only candidates that (transitively) depend on the offered key can become
exposable (any other set of candidates was not exposable before and nothing it depends on
changed), so the fixpoint runs over that set only, found through a reverse index of the
candidates' dependencies. ``missing()`` walks all candidates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Mapping, Optional, Set

from . import vclock
from .version import Version, merge_versions, version_supersedes

__all__ = ["CutUpdate", "StrictCausalCut"]


@dataclass
class CutUpdate:
    exposed: List[str] = field(default_factory=list)
    missing: Dict[str, Dict[str, int]] = field(default_factory=dict)


class StrictCausalCut:
    def __init__(self) -> None:
        self._exposed: Dict[str, Version] = {}
        self._pending: Dict[str, Version] = {}
        # dep key -> exposed keys whose exposed version depends on it
        self._rdeps: Dict[str, Set[str]] = {}
        # dep key -> pending keys whose candidate depends on it
        self._prdeps: Dict[str, Set[str]] = {}
        self.keyset_version: int = 0

    # ------------------------------------------------------------------ reading
    def get(self, key: str) -> Optional[Version]:
        return self._exposed.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._exposed

    def __len__(self) -> int:
        return len(self._exposed)

    def __iter__(self) -> Iterator[str]:
        return iter(self._exposed)

    def keys(self) -> FrozenSet[str]:
        return frozenset(self._exposed)

    def pending_keys(self) -> Set[str]:
        return set(self._pending)

    def pending(self) -> Dict[str, Version]:
        return dict(self._pending)

    def dependents(self, key: str) -> Set[str]:
        return set(self._rdeps.get(key, ()))

    def reach(self, key: str) -> Set[str]:
        """`key` and every key reachable from its exposed version through the dependencies
        of exposed versions (empty when `key` is not exposed). A dependency key with no
        exposed version ends its path (in a cut there is none)."""
        exposed = self._exposed
        v = exposed.get(key)
        if v is None:
            return set()
        seen = {key}
        add, get = seen.add, exposed.get
        stack = [v]
        pop, push = stack.pop, stack.append
        while stack:
            for d in pop().deps:
                if d not in seen:
                    add(d)
                    w = get(d)
                    if w is not None:
                        push(w)
        return seen

    def missing(self) -> Dict[str, Dict[str, int]]:
        out: Dict[str, Dict[str, int]] = {}
        for cand in self._pending.values():
            for d, need in cand.deps.items():
                if self._satisfied(d, need) or self._pending_satisfies(d, need):
                    continue
                prev = out.get(d)
                out[d] = dict(need) if prev is None else vclock.merge(prev, need)
        return out

    # ------------------------------------------------------------------ updates
    def offer(self, version: Version) -> CutUpdate:
        key = version.key
        base = self._exposed.get(key)
        if base is not None and version_supersedes(base, version):
            return CutUpdate([], self.missing())
        prev = self._pending.get(key)
        if prev is not None:
            if version_supersedes(prev, version):
                return CutUpdate([], self.missing())
            cand = merge_versions(prev, version)
            self._unindex_pending(key, prev)
        else:
            cand = version if base is None else merge_versions(base, version)
        self._pending[key] = cand
        self._index_pending(key, cand)
        exposed = self._promote(key)
        return CutUpdate(exposed, self.missing())

    def evict(self, key: str) -> Set[str]:
        evicted: Set[str] = set()
        stack = [key]
        while stack:
            k = stack.pop()
            if k in evicted or k not in self._exposed:
                continue
            evicted.add(k)
            stack.extend(self._rdeps.get(k, ()))
        for k in evicted:
            v = self._exposed.pop(k)
            self._unindex_exposed(k, v)
        for k in evicted:
            self._rdeps.pop(k, None)
        # drop candidates of evicted keys and, transitively, candidates depending on them
        drop = [k for k in evicted if k in self._pending]
        drop += [p for k in evicted for p in self._prdeps.get(k, ())]
        if key not in evicted and key in self._pending:
            drop.append(key)
        dropped: Set[str] = set()
        while drop:
            k = drop.pop()
            if k in dropped or k not in self._pending:
                continue
            dropped.add(k)
            cand = self._pending.pop(k)
            self._unindex_pending(k, cand)
            drop.extend(self._prdeps.get(k, ()))
        if evicted:
            self.keyset_version += 1
        return evicted

    def collect(self, frontier: Mapping[str, Mapping[str, int]]) -> int:
        """Dependency GC (4.2.3): drop from every exposed and pending version the
        dependencies `frontier` supersedes (`hydrocache.gc.collect`); returns how many
        versions changed. Clocks and values are unchanged, so the cut stays a cut."""
        from .gc import collect as collect_version
        changed = 0
        for key in [k for k in self._exposed if any(d in frontier for d in self._exposed[k].deps)]:
            old = self._exposed[key]
            new = collect_version(old, frontier)
            if new is not old:
                self._unindex_exposed(key, old)
                self._exposed[key] = new
                for d in new.deps:
                    self._rdeps.setdefault(d, set()).add(key)
                changed += 1
        for key in [k for k in self._pending if any(d in frontier for d in self._pending[k].deps)]:
            old = self._pending[key]
            new = collect_version(old, frontier)
            if new is not old:
                self._unindex_pending(key, old)
                self._pending[key] = new
                self._index_pending(key, new)
                changed += 1
        for key in list(self._pending):     # a pending version may now be exposable
            if key in self._pending:
                self._promote(key)
        return changed

    # ------------------------------------------------------------------ internals
    def _satisfied(self, dep_key: str, need: Dict[str, int]) -> bool:
        have = self._exposed.get(dep_key)
        return have is not None and vclock.supersedes(have.vc, need)

    def _pending_satisfies(self, dep_key: str, need: Dict[str, int]) -> bool:
        cand = self._pending.get(dep_key)
        return cand is not None and vclock.supersedes(cand.vc, need)

    def _index_pending(self, key: str, cand: Version) -> None:
        for d in cand.deps:
            self._prdeps.setdefault(d, set()).add(key)

    def _unindex_pending(self, key: str, cand: Version) -> None:
        for d in cand.deps:
            s = self._prdeps.get(d)
            if s is not None:
                s.discard(key)
                if not s:
                    del self._prdeps[d]

    def _unindex_exposed(self, key: str, v: Version) -> None:
        for d in v.deps:
            s = self._rdeps.get(d)
            if s is not None:
                s.discard(key)
                if not s:
                    del self._rdeps[d]

    def _promote(self, key: str) -> List[str]:
        # candidates that transitively depend on `key` (including its own)
        region: Set[str] = set()
        stack = [key]
        while stack:
            k = stack.pop()
            if k in region or k not in self._pending:
                continue
            region.add(k)
            stack.extend(self._prdeps.get(k, ()))
        # greatest fixpoint: drop members with an unsatisfiable dependency until none left
        alive = set(region)
        changed = True
        while changed and alive:
            changed = False
            for k in sorted(alive):
                cand = self._pending[k]
                for d, need in cand.deps.items():
                    if self._satisfied(d, need):
                        continue
                    if d in alive and vclock.supersedes(self._pending[d].vc, need):
                        continue
                    alive.discard(k)
                    changed = True
                    break
        if not alive:
            return []
        new_keys = False
        for k in alive:
            cand = self._pending.pop(k)
            self._unindex_pending(k, cand)
            old = self._exposed.get(k)
            if old is None:
                new_keys = True
            else:
                self._unindex_exposed(k, old)
            self._exposed[k] = cand
            for d in cand.deps:
                self._rdeps.setdefault(d, set()).add(k)
        if new_keys:
            self.keyset_version += 1
        return sorted(alive)
