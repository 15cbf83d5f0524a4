"""A byte-counted least-recently-used order of keys (pure; no sockets, clocks or threads).

Contract: `ByteLru(capacity)` remembers, per key, a size in bytes and the order in which keys
were last used. It never evicts by itself; its owner asks and decides what else goes along
(HydroCache evicts a key with every key depending on it, so the cut stays a cut).
- `put(key, size)`: the key's size becomes `size` (added or replaced) and it becomes the most
  recently used. `touch(keys)`: each known key becomes the most recently used, in the given
  order (unknown keys are ignored: a touch never adds a key).
- `bytes`: the sum of the remembered sizes; `over()`: `bytes > capacity`.
- `pop_oldest()`: removes and returns the least recently used key (None when empty).
- `discard(key)`: forgets a key (its bytes no longer count); unknown keys are ignored.
- `key in lru`, `len(lru)`, `size(key)`, `order()` (least recent first).
Not thread-safe: one owner (the single-threaded HydroCache core) uses it.
"""
from __future__ import annotations

import collections
from typing import Iterable, List, Optional

__all__ = ["ByteLru"]


class ByteLru:
    """Keys with sizes in least-recently-used order; see the module contract."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, not {capacity}")
        self.capacity = capacity
        self.bytes = 0
        self._sizes: "collections.OrderedDict[str, int]" = collections.OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def size(self, key: str) -> int:
        return self._sizes.get(key, 0)

    def order(self) -> List[str]:
        return list(self._sizes)

    def over(self) -> bool:
        return self.bytes > self.capacity

    def put(self, key: str, size: int) -> None:
        if size < 0:
            raise ValueError(f"size of {key!r} must be >= 0 bytes, not {size}")
        self.bytes += size - self._sizes.get(key, 0)
        self._sizes[key] = size
        self._sizes.move_to_end(key)

    def touch(self, keys: Iterable[str]) -> None:
        sizes = self._sizes
        for k in keys:
            if k in sizes:
                sizes.move_to_end(k)

    def pop_oldest(self) -> Optional[str]:
        if not self._sizes:
            return None
        key, size = self._sizes.popitem(last=False)
        self.bytes -= size
        return key

    def discard(self, key: str) -> None:
        size = self._sizes.pop(key, None)
        if size is not None:
            self.bytes -= size
