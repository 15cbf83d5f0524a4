"""What routing's membership core asks its service to do: plain data, no I/O.

Contract (anna_core/membership.py produces these, anna_core/routing.py carries them out):
- `Effects` collects, for one event: `send` (messages in order: `Outgoing` with a kind for
  `[kind][payload]` messages to workers, kind None for single-frame answers), `forget`
  (worker addresses that are gone: close their sockets), `persist` (metadata to store in the
  KVS: `Persist` for one replication override, `PersistIndex` for keys to add to the override
  index), `load_overrides` (read the persisted overrides back from the KVS and hand them to
  `ClusterMembership.overrides_loaded`), `refresh_overrides` (the same, periodically, handed
  to `ClusterMembership.overrides_refreshed`) and `log` (level, text).
- `metadata_put` turns a `Persist`/`PersistIndex` into the KVS PUT that stores it: an LWW
  lattice holding the serialized `anna.Replication`, or a SetLattice of override keys.
- The metadata keys: `replication_metadata_key(key)` = `__anna__/replication/<key>` and
  `REPLICATION_INDEX_KEY` = `__anna__/replication-index` (a SetLattice of every key that has
  an override; sets only grow, so concurrent routings' index PUTs merge without loss).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

from google.protobuf.message import Message

from hydro_proto import anna_pb2

from . import _core

__all__ = ["Effects", "Outgoing", "Persist", "PersistIndex", "REPLICATION_PREFIX",
           "REPLICATION_INDEX_KEY", "replication_metadata_key", "metadata_put"]

REPLICATION_PREFIX = "__anna__/replication/"
REPLICATION_INDEX_KEY = "__anna__/replication-index"


def replication_metadata_key(key: str) -> str:
    """The KVS key under which routing stores `key`'s replication override."""
    return REPLICATION_PREFIX + key


@dataclass(frozen=True)
class Outgoing:
    """One message to send: `[kind][payload]` to a worker, or a single frame when kind is None."""

    address: str
    kind: Optional[str]
    message: Message


@dataclass(frozen=True)
class Persist:
    """Store `replication` (an `anna.Replication`) as LWW metadata under `key` at `addresses`."""

    key: str
    replication: anna_pb2.Replication
    addresses: Tuple[str, ...]


@dataclass(frozen=True)
class PersistIndex:
    """Add `members` (keys with an override) to the SetLattice index under `key` at `addresses`."""

    key: str
    members: Tuple[str, ...]
    addresses: Tuple[str, ...]


@dataclass
class Effects:
    """What routing must do after one event."""

    send: List[Outgoing] = field(default_factory=list)
    forget: List[str] = field(default_factory=list)
    persist: List[Union[Persist, PersistIndex]] = field(default_factory=list)
    load_overrides: bool = False
    refresh_overrides: bool = False
    log: List[Tuple[int, str]] = field(default_factory=list)

    def warn(self, text: str) -> "Effects":
        """Record a warning; returns self."""
        self.log.append((logging.WARNING, text))
        return self

    def info(self, text: str) -> "Effects":
        """Record an informational note; returns self."""
        self.log.append((logging.INFO, text))
        return self

    def debug(self, text: str) -> "Effects":
        """Record a debugging note; returns self."""
        self.log.append((logging.DEBUG, text))
        return self

    def extend(self, other: "Effects") -> "Effects":
        """Append another event's effects to these; returns self."""
        self.send.extend(other.send)
        self.forget.extend(other.forget)
        self.persist.extend(other.persist)
        self.load_overrides = self.load_overrides or other.load_overrides
        self.refresh_overrides = self.refresh_overrides or other.refresh_overrides
        self.log.extend(other.log)
        return self


def metadata_put(persist: Union[Persist, PersistIndex], timestamp: int, request_id: str,
                 response_address: str) -> anna_pb2.KeyRequest:
    """The KVS PUT storing one piece of routing metadata, answered at `response_address`:
    an LWW lattice at `timestamp` holding the serialized `anna.Replication` (`Persist`), or a
    SetLattice of the override keys (`PersistIndex`; `timestamp` is unused)."""
    if isinstance(persist, PersistIndex):
        value = _core.SetLattice([k.encode() for k in persist.members])
    else:
        value = _core.LWWLattice(timestamp, persist.replication.SerializeToString())
    request = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address=response_address,
                                  request_id=request_id)
    request.tuples.add(key=persist.key, lattice_type=value.lattice_type,
                       payload=value.serialize())
    return request
