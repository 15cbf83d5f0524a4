"""Large values cross from the node cache to a worker once (pure; no sockets).

A worker that reads the same large value repeatedly would otherwise receive it from its node
cache every time (megabytes through a socket per read). Instead the cache names every large
value it serves with a tag, the worker keeps the value with its tag, and later requests say
which tags the worker holds (`CacheRequest.have`); an entry whose value still has that tag
comes back `unchanged`, without frames. This is a conditional read, like an HTTP ETag.

Contract:
- `ValueTags(min_bytes)` (node cache side): `tag(obj, size)` returns a tag for a value object
  of `size` bytes, or "" below `min_bytes` (small values are cheaper to resend). A tag names
  one immutable value object: the same object always gets the same tag, a different object a
  different one (tags never repeat within a process: an epoch plus a counter). Remembering
  an object keeps it alive (so its id cannot be reused), so at most `capacity` objects and
  `max_bytes` of them are remembered, least recently tagged first out; a forgotten object
  gets a new tag (the worker then receives it once more, which is only slower). With
  `identity`, objects are named by it instead of by object: the node cache passes a causal
  version's (key, vector clock), which names its values whatever object holds them (a
  version re-read from Anna or stripped by GC is a new object with the same values).
- `LocalCopies(max_bytes)` (worker side): `have(keys)` -> {key: tag} to send;
  `use(key, tag, unchanged, values)` returns the values to hand out: the kept copy when
  `unchanged`, else `values`, which are kept when tagged. Least recently used copies are
  dropped above `max_bytes`. Not thread-safe (one worker thread uses it).
"""
from __future__ import annotations

import collections
import uuid
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ["ValueTags", "LocalCopies"]


class ValueTags:
    """Tags for large value objects served by a node cache; see the module contract."""

    def __init__(self, min_bytes: int = 64 * 1024, capacity: int = 4096,
                 max_bytes: int = 512 << 20) -> None:
        self.min_bytes = min_bytes
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._bytes = 0
        self._epoch = uuid.uuid4().hex[:8]
        self._seq = 0
        # id(obj) or identity -> (tag, obj, size): holding obj keeps its id from being reused
        self._tags: "collections.OrderedDict[Any, Tuple[str, Any, int]]" = \
            collections.OrderedDict()

    def tag(self, obj: Any, size: int, identity: Any = None) -> str:
        if size < self.min_bytes:
            return ""
        slot = id(obj) if identity is None else identity
        known = self._tags.get(slot)
        if known is not None and (identity is not None or known[1] is obj):
            self._tags.move_to_end(slot)
            return known[0]
        self._seq += 1
        tag = f"{self._epoch}-{self._seq}"
        self._tags[slot] = (tag, obj, size)
        self._bytes += size
        while len(self._tags) > self.capacity or (self._bytes > self.max_bytes
                                                   and len(self._tags) > 1):
            _, (_, _, dropped) = self._tags.popitem(last=False)
            self._bytes -= dropped
        return tag


class LocalCopies:
    """A worker's copies of large values, by tag; see the module contract."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._bytes = 0
        self._copies: "collections.OrderedDict[str, Tuple[str, List[Any], int]]" = \
            collections.OrderedDict()
        self.hits = 0

    def have(self, keys: Iterable[str]) -> Dict[str, str]:
        return {k: self._copies[k][0] for k in keys if k in self._copies}

    def use(self, key: str, tag: str, unchanged: bool, values: Sequence[Any]) -> Optional[List[Any]]:
        """The values for `key`; None if the cache said `unchanged` for a copy we dropped."""
        if unchanged:
            copy = self._copies.get(key)
            if copy is None or copy[0] != tag:
                return None
            self._copies.move_to_end(key)
            self.hits += 1
            return copy[1]
        values = list(values)
        old = self._copies.pop(key, None)
        if old is not None:
            self._bytes -= old[2]
        if tag and self.max_bytes > 0:
            size = sum(len(v) for v in values)
            if size <= self.max_bytes:
                self._copies[key] = (tag, values, size)
                self._bytes += size
                while self._bytes > self.max_bytes:
                    _, (_, _, dropped) = self._copies.popitem(last=False)
                    self._bytes -= dropped
        return values
