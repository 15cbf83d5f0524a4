"""The node cache's plain side: a bounded last-writer-wins cache of KVS values, and the
decisions about it (pure: no sockets, clocks or threads).

Contract: `LwwCache(max_bytes, max_entries)` maps keys to `anna_core.LWWLattice`s and
remembers which keys the node is subscribed to. Its service (`executor/lww_service.py`) does
the I/O the answers ask for.
- `lookup(keys, floors)`: the cached value and LWW timestamp of each key; a copy older than
  the session's floor (`hydrocache.session.Floors`) is a miss (None). Hits become the most
  recently used.
- `admit(key, lattice)`: a value read from or written to Anna. It is merged with the lattice
  merge (the kernel's one LWW implementation: the higher timestamp wins, so an older pushed
  update never overwrites a local write). Returns an `Admitted`: the key's value and
  timestamp now, whether to `subscribe` (a key newly cached and not yet subscribed: the
  service subscribes, then reads the key once more and admits that too), and the keys
  evicted to stay within the bounds, which the service `unsubscribe`s. A value larger than
  the bound by itself is answered but not cached (and not subscribed).
- `pushed(key, lattice)`: an update Anna pushed. A subscribed key merges it (even when its
  copy was dropped by a delete); a key the node is no longer subscribed to (evicted) is not
  cached again, and the answer says to unsubscribe it (the push raced with the eviction).
  Returns a `Pushed`.
- `deleted(key)`: Anna says the key was deleted: the copy is dropped, a later read misses.
- `subscribe_failed(key)`: the service could not subscribe: the copy is dropped (nothing
  would keep it fresh), so the next read misses, reads Anna and subscribes again.
- `unsubscribed(key)`: the service's unsubscribe of an evicted key was acknowledged by
  Anna. True when the key was cached and subscribed again meanwhile: that subscription may
  have reached Anna before the unsubscribe did, so the service subscribes once more (and
  reads the key once more). So a cached key is always kept fresh by Anna's pushes.
- Bounds: after every change the cache holds at most `max_entries` keys and at most
  `max_bytes` bytes, evicting the least recently used keys first (`hydrocache.lru.ByteLru`).
  A key counts twice its value's length (the value is held as the kernel's lattice, for
  merges, and revealed, to answer without a copy), its own length and `ENTRY_OVERHEAD`.
- `keys()` is the key set reported to schedulers; `keyset_version` changes whenever a key is
  added or removed. `bytes` is what the bound counts.
Not thread-safe: the service guards it with one lock. Causal keys are not here: they live
in HydroCache's strict causal cut (`hydrocache/`), behind the same node service.
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Set, Tuple

from hydrocache.lru import ByteLru

__all__ = ["LwwCache", "Admitted", "Pushed", "ENTRY_OVERHEAD", "DEFAULT_BYTES",
           "DEFAULT_ENTRIES"]

ENTRY_OVERHEAD = 64            # bytes a key costs besides its value and name (dicts, lattice)
DEFAULT_BYTES = 2 << 30
DEFAULT_ENTRIES = 1 << 20


class Admitted(NamedTuple):
    """The answer of `LwwCache.admit`."""

    value: bytes                  # the key's value after the merge
    timestamp: int                # its LWW timestamp
    subscribe: bool               # subscribe to the key now
    evicted: Tuple[str, ...]      # keys dropped for the bounds: unsubscribe them


class Pushed(NamedTuple):
    """The answer of `LwwCache.pushed`."""

    evicted: Tuple[str, ...]      # keys dropped for the bounds: unsubscribe them
    unsubscribe: bool             # the pushed key is not ours any more: unsubscribe it


class LwwCache:
    """Key -> LWW lattice, bounded; see the module contract."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES,
                 max_entries: int = DEFAULT_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, not {max_entries}")
        self.max_entries = max_entries
        self._lru = ByteLru(max_bytes)        # raises for a negative byte bound
        self._entries: Dict[str, Any] = {}
        self._values: Dict[str, bytes] = {}   # revealed once per change, handed out uncopied
        self._subscribed: Set[str] = set()
        self._leaving: Set[str] = set()       # evicted: their unsubscribe is in flight
        self.keyset_version = 0

    @property
    def max_bytes(self) -> int:
        return self._lru.capacity

    @property
    def bytes(self) -> int:
        return self._lru.bytes

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Optional[bytes]:
        return self._values.get(key)

    def timestamp(self, key: str) -> Optional[int]:
        entry = self._entries.get(key)
        return None if entry is None else entry.timestamp

    def keys(self) -> FrozenSet[str]:
        return frozenset(self._entries)

    def subscribed(self, key: str) -> bool:
        return key in self._subscribed

    # ---- reads ----
    def lookup(self, keys: Sequence[str], floors: Any = None
               ) -> Tuple[List[Optional[bytes]], Dict[str, Optional[int]]]:
        """(values, stamps) of `keys`; see the module contract."""
        entries, cached = self._entries, self._values
        stamps: Dict[str, Optional[int]] = {}
        values: List[Optional[bytes]] = []
        hits = []
        for k in keys:
            entry = entries.get(k)
            stamp = stamps[k] = None if entry is None else entry.timestamp
            value = cached.get(k) if floors is None or floors.fresh(k, stamp) else None
            values.append(value)
            if value is not None:
                hits.append(k)
        self._lru.touch(hits)
        return values, stamps

    # ---- changes ----
    def admit(self, key: str, lattice: Any) -> Admitted:
        """A value read from or written to Anna; see the module contract."""
        old = self._entries.get(key)
        merged = lattice if old is None else old.merge(lattice)
        if old is not None and merged == old:
            self._lru.touch((key,))
            return Admitted(self._values[key], old.timestamp, False, ())
        value = merged.reveal()
        if self._cost(key, value) > self._lru.capacity:     # too large to keep at all
            evicted = self._drop(key)
            return Admitted(value, merged.timestamp, False, evicted)
        self._store(key, merged, value)
        subscribe = key not in self._subscribed
        self._subscribed.add(key)
        return Admitted(value, merged.timestamp, subscribe, self._shrink(keep=key))

    def pushed(self, key: str, lattice: Any) -> Pushed:
        """An update Anna pushed; see the module contract."""
        if key not in self._subscribed:      # evicted: unsubscribe (once is enough)
            return Pushed((), key not in self._leaving)
        old = self._entries.get(key)
        merged = lattice if old is None else old.merge(lattice)
        if old is not None and merged == old:
            return Pushed((), False)
        value = merged.reveal()
        if self._cost(key, value) > self._lru.capacity:
            return Pushed(self._drop(key), False)
        self._store(key, merged, value)
        return Pushed(self._shrink(keep=key), False)

    def deleted(self, key: str) -> bool:
        """Anna deleted `key`: drop the copy (the subscription stays). True if one was held."""
        self._lru.discard(key)
        self._values.pop(key, None)
        if self._entries.pop(key, None) is None:
            return False
        self.keyset_version += 1
        return True

    def subscribe_failed(self, key: str) -> None:
        self._subscribed.discard(key)
        self.deleted(key)

    def unsubscribed(self, key: str) -> bool:
        """An unsubscribe of `key` was acknowledged; True: subscribe it again now."""
        self._leaving.discard(key)
        return key in self._subscribed

    # ---- internals ----
    @staticmethod
    def _cost(key: str, value: bytes) -> int:
        return 2 * len(value) + len(key) + ENTRY_OVERHEAD

    def _store(self, key: str, lattice: Any, value: bytes) -> None:
        if key not in self._entries:
            self.keyset_version += 1
        self._entries[key] = lattice
        self._values[key] = value
        self._lru.put(key, self._cost(key, value))

    def _drop(self, key: str) -> Tuple[str, ...]:
        """Forget `key` and its subscription; the keys to unsubscribe."""
        self.deleted(key)
        if key in self._subscribed:
            self._subscribed.discard(key)
            self._leaving.add(key)
            return (key,)
        return ()

    def _shrink(self, keep: str) -> Tuple[str, ...]:
        """Evict the least recently used keys (never `keep`) until within the bounds."""
        evicted: List[str] = []
        while self._lru.over() or len(self._entries) > self.max_entries:
            oldest = self._lru.pop_oldest()
            if oldest is None:
                break
            if oldest == keep:              # the newest is the last to go; it fits alone
                self._lru.put(keep, self._cost(keep, self._values[keep]))
                continue
            evicted.extend(self._drop(oldest))
        return tuple(evicted)
