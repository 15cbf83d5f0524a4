"""A client's objects: `put`, `get` and `delete` through the KVS the cluster names now,
under the client's session.

Contract (the `put` / `get` and session parts of `cloudburst/client.py`'s contract are
implemented here, over `cloudburst/objects.py`'s `ObjectStore`): `ClientObjects` is a mixin
of `Client`, which sets up the state it works on (`_objects`, the store; `_session`, its
`ClientSession` or None; `kvs_address`, `_kvs_given` (the caller named it), `_kvs_learnt`
(when the schedulers last named it); `addresses`, `timeout`, `failover_timeout`) and
whose channel (`cloudburst/channel.py`) gives `_ask` and `_dropped_since`.
- `put` / `delete` write through the store and note the write (a delete's timestamp) in the
  session; `get` reads a version at least as new as the session's floor for the key (a
  causal read older than the session's clock is read again from every replica, merged) and
  notes what it read.
- `_objects_now(what)`: the store, on the KVS the cluster names now: when a scheduler's
  connection dropped since the address was learnt (a restart, or a stop), the schedulers
  are asked again and a moved KVS is followed, unless the caller named the address;
  `SchedulerUnavailable` naming the schedulers and `what` when none answers.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from hydro_proto import cloudburst_pb2 as pb

from hydrocache.vclock import supersedes
from .futures import SchedulerUnavailable
from .objects import ObjectStore

__all__ = ["ClientObjects"]

log = logging.getLogger("cloudburst.client")    # the client's logger: same records as before


class ClientObjects:
    """`Client`'s objects; see the module contract."""

    def put(self, key: str, value: Any, consistency: str = "lww") -> None:
        """Store `value` under `key`; see `ObjectStore.put` (LWW, a merged lattice, or a
        causal version). Returns once every replica of the key has it; every call this client
        makes afterwards reads it (or a newer value)."""
        written = self._objects_now(f"put {key!r}").put(key, value, consistency)
        if self._session is not None:
            self._session.note(key, written)

    def get(self, key: str, consistency: str = "lww", concurrent: bool = False, *,
            objects: bool = False) -> Any:
        """The value stored under `key` (`ObjectNotFound` if none); see `ObjectStore.get`.
        Values are data: one that is more than plain data raises `UnsafeValue` unless
        `objects=True` (docs/SECURITY.md). With the session on, the value is at least as new
        as what this client wrote, read, or saw its calls read before."""
        floor, own, merged, deleted, vc = 0, 0, False, False, None
        if self._session is not None:
            floor, own, merged, deleted, vc = self._session.read_floor(key)
        value, version = self._objects_now(f"get {key!r}").read(
            key, consistency, concurrent, objects=objects, floor=floor, own=own, merged=merged,
            deleted=deleted)
        if vc is not None and not (version.vc and supersedes(version.vc, vc)):
            # one replica lags behind the causal version this session knows: merge them all
            value, version = self._objects.read(key, consistency, concurrent,
                                                objects=objects, merged=True)
        if self._session is not None:
            self._session.note(key, version)
        return value

    def delete(self, key: str) -> None:
        """Delete the object stored under `key` (a missing key is not an error). With the
        session on, this client's later calls and gets no longer read the deleted value of a
        plain key. Deleting a causal key does not undo its causal history (see
        `ObjectStore.delete`): write a fresh key rather than delete one and write it again."""
        timestamp = self._objects_now(f"delete {key!r}").delete(key)
        if self._session is not None:
            self._session.note_deleted(key, timestamp)

    def _objects_now(self, what: str) -> ObjectStore:
        """The object store, on the KVS the cluster names now. A scheduler connection that
        dropped since the KVS address was learnt means a restart or a stop: ask again (the
        new address is followed; `SchedulerUnavailable` naming the schedulers when none
        takes the question), rather than wait on an address that may be gone."""
        if any(self._dropped_since(a, self._kvs_learnt) for a in self.addresses):
            asked_at = time.monotonic()
            try:
                info = self._ask("info", pb.NameRequest(), f"name the KVS, to {what}",
                                 min(self.timeout, self.failover_timeout * len(self.addresses)))
            except SchedulerUnavailable as e:
                raise SchedulerUnavailable(f"cannot {what}: the cluster at "
                                           f"{', '.join(self.addresses)} is not reachable (is it "
                                           f"running?): {e}") from None
            self._kvs_learnt = asked_at
            if not self._kvs_given and info.kvs_address != self.kvs_address:
                log.warning("the cluster's KVS moved from %s to %s (a restart); following it",
                            self.kvs_address, info.kvs_address)
                self.kvs_address = info.kvs_address
                self._objects.follow(info.kvs_address)
        return self._objects
