"""Reading a plain key from the KVS at least as new as a session's floor (thin I/O).

Contract: `read_at_least(kvs, key, floor, own, every_replica, deleted)` returns the key's
lattice from the KVS (None: no replica has the key, or, with `deleted`, what it has is older
than the session's delete of it at `own`). With a floor (`hydrocache/session.py`) it reads
one replica first; when that replica's value is older than the floor (replicas lag behind a
write by up to a gossip period) it reads every replica and merges them with the kernel's
merge. `every_replica=True` (a merged lattice the session wrote or read) reads every replica
at once. When every replica was read and the value is still older than the key's own floor
(`own`: what the session wrote or read of it; `hydrocache.session.plain_floor`), the
version the floor stands for is gone from the KVS (the write was lost), and `StaleRead`
names the key, its floor and what the KVS holds: a read never silently returns older data
than its session wrote or read.
"""
from __future__ import annotations

from typing import Any, Optional

from anna_core.errors import KeyNotFound
from hydro_proto import anna_pb2
from hydrocache.session import ABSENT, ACCEPT, STALE, plain_after_fetch

__all__ = ["read_at_least", "StaleRead"]


class StaleRead(Exception):
    """Every replica of a key is older than the session's floor for it."""


def _timestamp(lattice: Any) -> Optional[int]:
    if lattice is None or lattice.lattice_type != anna_pb2.LWW:
        return None
    return lattice.timestamp


def read_at_least(kvs: Any, key: str, floor: int, own: int, every_replica: bool = False,
                  deleted: bool = False) -> Any:
    """See the module contract."""
    lattice = None
    if not every_replica:
        try:
            lattice = kvs.get_lattice(key)
        except KeyNotFound:
            lattice = None
        if lattice is not None and lattice.lattice_type != anna_pb2.LWW:
            return lattice if floor == 0 else _all(kvs, key, None)
        decision = plain_after_fetch(_timestamp(lattice), floor, own, False, deleted)
        if decision == ACCEPT:
            return lattice
        if decision == ABSENT:
            return None
    merged = _all(kvs, key, lattice)
    if merged is None or merged.lattice_type != anna_pb2.LWW:
        return merged
    decision = plain_after_fetch(_timestamp(merged), floor, own, True, deleted)
    if decision == ABSENT:
        return None
    if decision == STALE:
        raise StaleRead(f"every replica of key {key!r} holds a value older than this "
                        f"session's (timestamp {merged.timestamp} < {own}): the version "
                        f"it wrote or read is gone from the KVS")
    return merged


def _all(kvs: Any, key: str, merged: Any) -> Any:
    for _, lattice in kvs.get_replicas(key):
        merged = lattice if merged is None else merged.merge(lattice)
    return merged
