"""Building the versions an executor commits, with atomic visibility (dissertation 4.2.2).

Contract: ``ExecutorWriter(executor_id).commit(writes, read_set, read_deps=None)`` returns one
``Version`` per written key (sorted by key) such that

- the versions of one commit are mutually dependent: each depends on every *other* written
  key at that key's final clock, and on every read key (other than itself) at the clock read;
- each is based on the version of its key that was read (``read_set[k].vc``, or nothing for
  a blind write), merged (Definition 1: clocks, dependencies and values) with this
  executor's latest write of the key when the base does not supersede it, so an executor
  never overwrites a concurrent version it wrote itself;
- the executor's logical clock advances once per commit and every written version gets
  ``vc[executor_id] = clock``. Hence a later commit's version of a key is strictly after
  (``Order.AFTER``) the executor's earlier one, read or blind.

Commits that may be refused: ``commit(..., record=False)`` builds the versions without
remembering them as the executor's latest writes; ``record(versions)`` does so once the commit
was accepted or its outcome is unknown. A commit refused for sure (fenced, hydrocache/DESIGN.md)
is not recorded, so a later write does not carry its values. The clock advances either way.

Reading: "e inspects its dependency set to see whether this write depends on a_latest" is
Definition 4 on the base: the write depends on ``a_latest`` when the version it read of
that key supersedes ``a_latest``.

Reading: the clock is ``max(previous clock, every base's own entry) + 1``, so an executor id
reused after a restart still produces clocks after the versions it can see.

Reading: dependencies are carried forward along a key's history. Definition 3 checks only
direct dependencies, so a version that supersedes ``k_i`` must depend on at least what
``k_i`` did, or a cut could expose it next to something older than ``k_i``'s dependencies
(a transitive Definition 2 violation). ``read_deps`` (per written key, the dependencies of
the version that was read) is merged into the new version's dependencies; callers that read
the key through HydroCache pass it. The executor's own latest write is merged in anyway.

Memory: the latest write is kept for at most ``capacity`` keys (LRU, default 100 000). A key
evicted from it loses the merge protection for a later blind write by this executor
concurrent with the evicted one; the clock still orders them, so that write wins. Size the
capacity above the executor's working set of written keys.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Mapping, Optional

from . import vclock
from .version import Version
from .versionset import Entry

__all__ = ["ExecutorWriter"]

VC = Mapping[str, int]


def _merge_deps(a: Dict[str, Dict[str, int]], b: Mapping[str, VC]) -> None:
    for d, c in b.items():
        a[d] = vclock.merge(a[d], c) if d in a else dict(c)


class ExecutorWriter:
    def __init__(self, executor_id: str, capacity: int = 100_000) -> None:
        if not executor_id:
            raise ValueError("executor_id must be a non-empty string")
        self.executor_id = executor_id
        self.capacity = capacity
        self.clock = 0
        self._latest: "OrderedDict[str, Version]" = OrderedDict()

    def latest(self, key: str) -> Optional[Version]:
        return self._latest.get(key)

    def commit(self, writes: Mapping[str, bytes], read_set: Mapping[str, Entry],
               read_deps: Optional[Mapping[str, Mapping[str, VC]]] = None,
               record: bool = True) -> List[Version]:
        if not writes:
            return []
        keys = sorted(writes)
        base: Dict[str, Dict[str, int]] = {}
        base_deps: Dict[str, Dict[str, Dict[str, int]]] = {}
        values: Dict[str, List[bytes]] = {}
        for k in keys:
            b = dict(read_set[k].vc) if k in read_set else {}
            deps: Dict[str, Dict[str, int]] = {}
            if read_deps and k in read_deps:
                _merge_deps(deps, read_deps[k])
            vals = [writes[k]]
            latest = self._latest.get(k)
            if latest is not None and not vclock.supersedes(b, latest.vc):
                b = vclock.merge(b, latest.vc)
                _merge_deps(deps, latest.deps)
                vals.extend(latest.values)
            base[k], base_deps[k], values[k] = b, deps, vals
        own = max([self.clock] + [b.get(self.executor_id, 0) for b in base.values()])
        self.clock = own + 1
        final = {k: {**base[k], self.executor_id: self.clock} for k in keys}
        out: List[Version] = []
        for k in keys:
            deps = base_deps[k]
            _merge_deps(deps, {m: e.vc for m, e in read_set.items() if m != k})
            _merge_deps(deps, {j: final[j] for j in keys if j != k})
            out.append(Version.new(k, final[k], deps, values[k]))
        if record:
            self.record(out)
        return out

    def record(self, versions: List[Version]) -> None:
        """Remember `versions` as this executor's latest writes of their keys (a later
        version of a key this executor wrote replaces it; an older one is ignored)."""
        for v in versions:
            old = self._latest.get(v.key)
            if old is not None and not vclock.supersedes(v.vc, old.vc):
                continue
            self._latest[v.key] = v
            self._latest.move_to_end(v.key)
        while len(self._latest) > self.capacity:
            self._latest.popitem(last=False)
