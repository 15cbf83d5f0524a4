"""The node cache's state: a plain last-writer-wins cache of KVS values (pure).

Contract: `LwwCache` maps keys to `anna_core.LWWLattice`s; `merge(key, lattice)` keeps the
lattice merge (the kernel's one LWW implementation: the higher timestamp wins), so a pushed
update older than a local write never overwrites it. `get(key)` returns the bytes or None.
`timestamp(key)` is the cached value's LWW timestamp
(None: not cached), which a session's floor is compared with (`hydrocache/session.py`).
`keys()` is the key set reported to schedulers; `keyset_version` changes whenever a key is
added or removed. Not thread-safe: the node service guards it with a lock.
Causal keys are not here: they live in HydroCache's strict causal cut (`hydrocache/`),
behind the same node service.
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, Optional

__all__ = ["LwwCache"]


class LwwCache:
    """Key -> LWW lattice; see the module contract."""

    def __init__(self) -> None:
        self._entries: Dict[str, Any] = {}
        self._values: Dict[str, bytes] = {}   # revealed once per change, handed out uncopied
        self.keyset_version = 0

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Optional[bytes]:
        return self._values.get(key)

    def timestamp(self, key: str) -> Optional[int]:
        entry = self._entries.get(key)
        return None if entry is None else entry.timestamp

    def merge(self, key: str, lattice: Any) -> bool:
        """Merge `lattice` into `key`; True if the cached value changed."""
        old = self._entries.get(key)
        if old is None:
            self._entries[key] = lattice
            self._values[key] = lattice.reveal()
            self.keyset_version += 1
            return True
        merged = old.merge(lattice)
        if merged == old:
            return False
        self._entries[key] = merged
        self._values[key] = merged.reveal()
        return True

    def evict(self, key: str) -> bool:
        self._values.pop(key, None)
        if self._entries.pop(key, None) is None:
            return False
        self.keyset_version += 1
        return True

    def keys(self) -> FrozenSet[str]:
        return frozenset(self._entries)
