"""HB's function results kept for the call's CON attempt to reuse (dissertation 4.3.5; pure).

Contract: under HB, a function's OPT attempt keeps its result, so the CON attempt that follows
an abort skips the function when it reads the same versions with the same inputs.
- `Reusable(expires, read_clocks, inputs_digest, value)`: one kept result; `inputs_digest`
  digests the function's own arguments and its upstream results (`inputs_digest`).
- `Reuses(limit, limit_bytes)` holds them by (call id, function):
  - `get(key)` the entry, or None;
  - `put(key, entry)` keeps it as the newest; the oldest entries go while more than `limit`
    are kept, or more than `limit_bytes` of values (a single larger value is not kept);
  - `expire(now)` drops, oldest first, the entries whose `expires` has passed, stopping at the
    first that has not. Entries are kept in the order they were put, which is the order of
    their calls' deadlines when calls share a timeout; an entry behind a later-expiring one
    waits for it (or for the bounds), which costs memory, never a wrong reuse: a reused
    result is the one the same attempt's function returned on the same versions and inputs.
  So `expire` costs what it drops, not every entry kept (the worker calls it twice a second;
  a scan of every entry was a worker's steady cost at tens of DAGs a second).
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

__all__ = ["Reusable", "Reuses", "inputs_digest", "REUSE_LIMIT", "REUSE_BYTES"]

REUSE_LIMIT = 1024          # entries per worker: a CON attempt follows its abort within seconds
REUSE_BYTES = 64 << 20      # their values, in bytes

Key = Tuple[str, str]


class Reusable(NamedTuple):
    """A function result HB may reuse in its CON attempt: valid while the function reads the
    same versions (`read_clocks`) with the same inputs (`inputs_digest`), until `expires`."""

    expires: float
    read_clocks: Dict[str, Dict[str, int]]
    inputs_digest: bytes
    value: bytes


def inputs_digest(raw_args: List[Any], results: List[bytes]) -> bytes:
    """A digest of a function's inputs (its own arguments and its upstreams' results)."""
    h = hashlib.blake2b(digest_size=16)
    for a in raw_args:
        h.update(a if isinstance(a, bytes) else a.SerializeToString())
        h.update(b"\0")
    for r in results:
        h.update(r)
        h.update(b"\1")
    return h.digest()


class Reuses:
    """Kept results, bounded in count and bytes; see the module contract."""

    __slots__ = ("limit", "limit_bytes", "_entries", "_bytes")

    def __init__(self, limit: int = REUSE_LIMIT, limit_bytes: int = REUSE_BYTES) -> None:
        self.limit = limit
        self.limit_bytes = limit_bytes
        self._entries: "OrderedDict[Key, Reusable]" = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: Key) -> Optional[Reusable]:
        return self._entries.get(key)

    def put(self, key: Key, entry: Reusable) -> None:
        self._drop(key)
        if len(entry.value) > self.limit_bytes:
            return
        self._entries[key] = entry
        self._bytes += len(entry.value)
        while len(self._entries) > self.limit or self._bytes > self.limit_bytes:
            self._bytes -= len(self._entries.popitem(last=False)[1].value)

    def expire(self, now: float) -> int:
        """Drop the oldest entries past their `expires`; how many were dropped."""
        dropped = 0
        entries = self._entries
        while entries:
            key = next(iter(entries))
            if now <= entries[key].expires:
                break
            self._bytes -= len(entries.pop(key).value)
            dropped += 1
        return dropped

    def _drop(self, key: Key) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= len(old.value)
