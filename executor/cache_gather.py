"""A node cache GET on its way: the keys being fetched by several threads, and the form of a
merged lattice's value in an answer.

Contract: `Gather(request, values, stamps, floors)` holds one GET: the values found so far
(None: still missing), the LWW timestamp of each (for the caller's session) and the
request's session floors (`hydrocache.session.Floors`, or None). The fetch threads call
`record(key, value, error, stamp)`; it returns True for the last missing key, whose thread
answers the GET. `Lattice(lattice_type, payload)` is a key's value that is a lattice other
than LWW (merged in the KVS, never cached). Thread-safe (`record` takes a lock).
"""
from __future__ import annotations

import threading
from typing import Dict, NamedTuple, Optional

from hydro_proto import cloudburst_pb2 as pb
from hydrocache.session import Floors

__all__ = ["Gather", "Lattice"]


class Gather:
    """The keys of one GET being fetched by several threads; `record` is True for the last."""

    def __init__(self, request: pb.CacheRequest, values: Dict[str, Optional[bytes]],
                 stamps: Dict[str, int], floors: Optional[Floors]) -> None:
        self.request = request
        self.values = values
        self.stamps = stamps          # key -> the LWW timestamp of the value answered
        self.floors = floors
        self.missing = sorted(k for k, v in values.items() if v is None)
        self.error: Optional[Exception] = None
        self._left = len(self.missing)
        self._lock = threading.Lock()

    def record(self, key: str, value: Optional[bytes], error: Optional[Exception],
               stamp: Optional[int] = None) -> bool:
        with self._lock:
            self.values[key] = value
            if stamp is not None:
                self.stamps[key] = stamp
            if error is not None and self.error is None:
                self.error = error
            self._left -= 1
            return self._left == 0


class Lattice(NamedTuple):
    """A key's value that is a lattice other than LWW: its type and serialized form."""

    lattice_type: int
    payload: bytes
