"""Temporary versions: the full versions a node cache keeps for one call attempt (pure).

Contract: `TempStore` maps an attempt id to the versions this cache contributed to, or fetched
for, that attempt's snapshot (`S_d.version()` in Algorithm 6 line 33, `S_i.version()` in
Algorithm 9 line 6, and what CAUSAL_FETCH brought in).
- `add(attempt, version, expires)` keeps the version (several versions of one key may be kept:
  two functions of an attempt bound on this cache at different moments contribute different
  ones); `expires` is a time on the caller's clock after which `expire(now)` drops the attempt.
- `matching(attempt, key, vc)` returns the kept versions of `key` that `vc` supersedes: a
  requester merging what every holder returns for `vc` rebuilds exactly the version named in
  a versionset, because that entry is the merge of the holders' contributions.
- `view(attempt, key)` is the merge of every kept version of `key` (what a CT/CON function
  reads: every kept version lies below the snapshot's entry and one of them equals it).
- `release(attempt, now, until)` drops an attempt when the call ends (4.3.6, "Versioning")
  and fences it until `until`: `fenced(attempt)` is then true, and the node cache refuses
  the attempt's reads, binds and commits (a released snapshot is never rebuilt from a newer
  cut). An attempt dropped by `expire(now)` is fenced for `FENCE_AFTER_EXPIRY` seconds more.
  Fences are dropped by `expire` once their time passed, so the store stays bounded by the
  calls of the last deadline-plus-slack period. `open` of a fenced attempt is refused.
  `expire` costs the attempts and fences it drops, not all those held: both times are kept in
  heaps (an entry whose time was moved later since is skipped when it comes up).
Not thread-safe: the service guards it with its lock.
"""
from __future__ import annotations

import heapq
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from .actions import Fenced
from .vclock import supersedes
from .version import Version, merge_versions

__all__ = ["TempStore", "FENCE_AFTER_EXPIRY"]

FENCE_AFTER_EXPIRY = 30.0   # seconds an expired attempt stays fenced (its worker gave up long ago)


class TempStore:
    """attempt id -> key -> kept versions; see the module contract."""

    def __init__(self) -> None:
        self._attempts: Dict[str, Dict[str, List[Version]]] = {}
        self._expires: Dict[str, float] = {}
        self._requested: Dict[str, set] = {}   # keys this cache was asked to snapshot
        self._fenced: Dict[str, float] = {}    # released attempt -> fenced until
        # (time, attempt) for every expiry and fence time set; the dicts hold the current ones
        self._expiry_heap: List[Tuple[float, str]] = []
        self._fence_heap: List[Tuple[float, str]] = []

    def __contains__(self, attempt: str) -> bool:
        return attempt in self._attempts

    def __len__(self) -> int:
        return len(self._attempts)

    def fenced(self, attempt: str) -> bool:
        return attempt in self._fenced

    def fences(self) -> int:
        return len(self._fenced)

    def open(self, attempt: str, expires: float) -> None:
        if attempt in self._fenced:
            raise Fenced(attempt, "", "it was released (the call ended or the attempt aborted)")
        self._attempts.setdefault(attempt, {})
        old = self._expires.get(attempt)
        if old is None or expires > old:
            self._expires[attempt] = expires
            heapq.heappush(self._expiry_heap, (expires, attempt))

    def add(self, attempt: str, version: Version, expires: float) -> None:
        self.open(attempt, expires)
        kept = self._attempts[attempt].setdefault(version.key, [])
        if all(v.vc != version.vc for v in kept):
            kept.append(version)

    def note_requested(self, attempt: str, keys: "Iterable[str]") -> None:
        """Keys this cache was asked to include in the attempt's snapshot (one absent from
        the snapshot then is a key the KVS does not have, not a key nobody asked for)."""
        self._requested.setdefault(attempt, set()).update(keys)

    def was_requested(self, attempt: str, key: str) -> bool:
        return key in self._requested.get(attempt, ())

    def keys(self, attempt: str) -> List[str]:
        return sorted(self._attempts.get(attempt, {}))

    def matching(self, attempt: str, key: str, vc: Mapping[str, int]) -> List[Version]:
        return [v for v in self._attempts.get(attempt, {}).get(key, ()) if supersedes(vc, v.vc)]

    def view(self, attempt: str, key: str) -> Optional[Version]:
        kept = self._attempts.get(attempt, {}).get(key)
        if not kept:
            return None
        out = kept[0]
        for v in kept[1:]:
            out = merge_versions(out, v)
        return out

    def all_versions(self) -> List[Version]:
        return [v for keys in self._attempts.values() for kept in keys.values() for v in kept]

    def release(self, attempt: str, until: Optional[float] = None) -> bool:
        """Drop the attempt's versions; with `until`, fence it until then (or until its own
        expiry, whichever is later)."""
        expires = self._expires.pop(attempt, None)
        if until is not None:
            until = max(until, expires if expires is not None else until)
            old = self._fenced.get(attempt)
            if old is None or until > old:
                self._fenced[attempt] = until
                heapq.heappush(self._fence_heap, (until, attempt))
        self._requested.pop(attempt, None)
        return self._attempts.pop(attempt, None) is not None

    def expire(self, now: float) -> List[str]:
        gone: Dict[str, None] = {}
        heap = self._expiry_heap
        while heap and now > heap[0][0]:
            t, a = heapq.heappop(heap)
            if self._expires.get(a) == t:          # else released, or moved later since
                gone[a] = None
        for a in gone:
            self.release(a, now + FENCE_AFTER_EXPIRY)
        heap = self._fence_heap
        while heap and now > heap[0][0]:
            t, a = heapq.heappop(heap)
            if self._fenced.get(a) == t:
                del self._fenced[a]
        return list(gone)
