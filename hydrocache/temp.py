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
- `release(attempt)` drops an attempt when the call ends (4.3.6, "Versioning").
Not thread-safe: the service guards it with its lock.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Mapping, Optional

from .vclock import supersedes
from .version import Version, merge_versions

__all__ = ["TempStore"]


class TempStore:
    """attempt id -> key -> kept versions; see the module contract."""

    def __init__(self) -> None:
        self._attempts: Dict[str, Dict[str, List[Version]]] = {}
        self._expires: Dict[str, float] = {}
        self._requested: Dict[str, set] = {}   # keys this cache was asked to snapshot

    def __contains__(self, attempt: str) -> bool:
        return attempt in self._attempts

    def __len__(self) -> int:
        return len(self._attempts)

    def open(self, attempt: str, expires: float) -> None:
        self._attempts.setdefault(attempt, {})
        self._expires[attempt] = max(expires, self._expires.get(attempt, expires))

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

    def release(self, attempt: str) -> bool:
        self._expires.pop(attempt, None)
        self._requested.pop(attempt, None)
        return self._attempts.pop(attempt, None) is not None

    def expire(self, now: float) -> List[str]:
        gone = [a for a, t in self._expires.items() if now > t]
        for a in gone:
            self.release(a)
        return gone
