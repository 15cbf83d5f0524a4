"""Routing's membership state and decisions: no sockets, no clocks, no sleeps.

Contract (DESIGN.md "Processes", proto/anna.proto, dissertation 3.2):
- `ClusterMembership` holds one cluster's membership: the kernel's `_core.ClusterMap` (every
  placement answer comes from it; nothing is placed in Python), the membership version and
  the replication overrides set through routing.
- Each event method takes a parsed message and returns `Effects`, what routing must do:
  `send` (messages in order: a kind for `[kind][payload]` messages to workers, `None` for
  single-frame answers), `forget` (worker addresses that left: close their sockets),
  `persist` (overrides to store in the KVS, see `metadata_put`) and `log` (level, text).
  * `join(NodeJoin)`: adds the node, or replaces the node with the same id (its addresses
    that are gone are forgotten); bumps the version; sends the full `Membership` as kind
    "membership" to every worker of every node and the same message as the join's ack to
    `control_address` (when set). A join without node id or worker addresses, or with an
    unknown tier, changes nothing and is logged.
  * `address(KeyAddressRequest)`: answers a `KeyAddressResponse` with each key's addresses
    (`ClusterMap.addresses(key, all_tiers)`) and the membership version; error NO_NODES when
    some key has none.
  * `replicate(SetReplication)`: sets each key's replication in the map and the overrides,
    sends a `ReplicationUpdate` (kind "replication") to every worker, asks to persist each
    override under `replication_metadata_key(key)` at that key's replicas in all tiers, and
    answers a `KeyAddressResponse` with the keys' new addresses.
  * `handle(kind, payload)` parses a routing message ("join", "address", "replicate") and
    calls the matching method; an unknown kind or an unparsable payload is logged and
    changes nothing. It never raises on input.
- A request without a response address gets no answer (logged).
- `membership()` is the full current `Membership` (version, nodes as the map lists them,
  default replication, vnodes, overrides), exactly what workers receive.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from google.protobuf.message import DecodeError, Message

from hydro_proto import anna_pb2

from . import _core
from .config import Replication

__all__ = ["ClusterMembership", "Effects", "Outgoing", "Persist", "REPLICATION_PREFIX",
           "replication_metadata_key", "metadata_put"]

REPLICATION_PREFIX = "__anna__/replication/"


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


@dataclass
class Effects:
    """What routing must do after one event."""

    send: List[Outgoing] = field(default_factory=list)
    forget: List[str] = field(default_factory=list)
    persist: List[Persist] = field(default_factory=list)
    log: List[Tuple[int, str]] = field(default_factory=list)

    def warn(self, text: str) -> "Effects":
        """Record a warning; returns self."""
        self.log.append((logging.WARNING, text))
        return self

    def info(self, text: str) -> "Effects":
        """Record an informational note; returns self."""
        self.log.append((logging.INFO, text))
        return self


def metadata_put(persist: Persist, timestamp: int, request_id: str,
                 response_address: str) -> anna_pb2.KeyRequest:
    """The KVS PUT storing one override: an LWW lattice at `timestamp` holding the serialized
    `anna.Replication`, answered at `response_address`."""
    value = _core.LWWLattice(timestamp, persist.replication.SerializeToString())
    request = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address=response_address,
                                  request_id=request_id)
    request.tuples.add(key=persist.key, lattice_type=value.lattice_type,
                       payload=value.serialize())
    return request


class ClusterMembership:
    """One cluster's membership, key placement and replication overrides, as a state machine."""

    def __init__(self, default_replication: Replication = Replication(), vnodes: int = 64) -> None:
        self.default_replication = Replication.coerce(default_replication)
        self.vnodes = vnodes
        self.cluster_map = _core.ClusterMap(
            default_replication=self.default_replication.as_tuple(), vnodes=vnodes)
        self.version = 0
        self.overrides: Dict[str, Replication] = {}

    # ---- queries ----------------------------------------------------------------------

    def membership(self) -> anna_pb2.Membership:
        """The full current membership, as sent to workers."""
        m = anna_pb2.Membership(version=self.version, vnodes=self.vnodes,
                                default_replication=self.default_replication.to_proto())
        for node_id, tier, addresses in self.cluster_map.nodes():
            m.nodes.add(node_id=node_id, tier=int(tier), worker_addresses=list(addresses))
        for key, replication in self.overrides.items():
            m.overrides.add(key=key, replication=replication.to_proto())
        return m

    def worker_addresses(self) -> List[str]:
        """Every worker's request address in every tier."""
        return [a for _node, _tier, addresses in self.cluster_map.nodes() for a in addresses]

    def address_response(self, keys: Sequence[str], all_tiers: bool = False,
                         request_id: str = "") -> anna_pb2.KeyAddressResponse:
        """Each key's worker addresses; error NO_NODES when some key has none."""
        response = anna_pb2.KeyAddressResponse(request_id=request_id,
                                               membership_version=self.version)
        for key in keys:
            addresses = list(self.cluster_map.addresses(key, all_tiers))
            if not addresses:
                response.error = anna_pb2.NO_NODES
            response.addresses.add(key=key, addresses=addresses)
        return response

    # ---- events -----------------------------------------------------------------------

    def handle(self, kind: str, payload: bytes) -> Effects:
        """Parse and apply one routing message; bad input is logged, never raised."""
        handlers = {"join": (anna_pb2.NodeJoin, self.join),
                    "address": (anna_pb2.KeyAddressRequest, self.address),
                    "replicate": (anna_pb2.SetReplication, self.replicate)}
        if kind not in handlers:
            return Effects().warn(f"dropped message of kind {kind!r}: routing does not handle it")
        message_type, handler = handlers[kind]
        try:
            message = message_type.FromString(bytes(payload))
        except DecodeError as e:
            return Effects().warn(f"dropped {kind!r} message: payload does not parse ({e})")
        return handler(message)

    def join(self, join: anna_pb2.NodeJoin) -> Effects:
        """A node joins (or rejoins with new addresses): broadcast the new membership."""
        node = join.node
        effects = Effects()
        if not node.node_id or not node.worker_addresses:
            return effects.warn(f"dropped join without node_id or worker addresses: {join!r}")
        if node.tier not in (anna_pb2.MEMORY, anna_pb2.DISK):
            return effects.warn(f"dropped join of {node.node_id!r}: unknown tier {node.tier}")
        new_addresses = list(node.worker_addresses)
        for node_id, _tier, addresses in self.cluster_map.nodes():
            if node_id == node.node_id:
                self.cluster_map.remove_node(node_id)
                effects.forget.extend(a for a in addresses if a not in new_addresses)
        self.cluster_map.add_node(node.node_id, int(node.tier), new_addresses)
        self.version += 1
        effects.info(f"node {node.node_id} (tier {node.tier}, {len(new_addresses)} workers) "
                     f"joined; membership version {self.version}")
        membership = self.membership()
        effects.send.extend(Outgoing(a, "membership", membership) for a in self.worker_addresses())
        if join.control_address:
            effects.send.append(Outgoing(join.control_address, None, membership))
        return effects

    def address(self, request: anna_pb2.KeyAddressRequest) -> Effects:
        """Answer where keys live."""
        response = self.address_response(request.keys, request.all_tiers, request.request_id)
        return self._answer(Effects(), request.response_address, response)

    def replicate(self, request: anna_pb2.SetReplication) -> Effects:
        """Set per-key replication: update workers, persist the overrides, answer addresses."""
        effects = Effects()
        update = anna_pb2.ReplicationUpdate()
        for kr in request.replications:
            replication = Replication.from_proto(kr.replication)
            self.cluster_map.set_replication(kr.key, replication.as_tuple())
            self.overrides[kr.key] = replication
            update.overrides.add(key=kr.key, replication=kr.replication)
            effects.info(f"replication of {kr.key!r} set to {replication.as_tuple()}")
        if update.overrides:
            effects.send.extend(Outgoing(a, "replication", update) for a in self.worker_addresses())
            for kr in update.overrides:
                meta_key = replication_metadata_key(kr.key)
                addresses = tuple(self.cluster_map.addresses(meta_key, True))
                if addresses:
                    effects.persist.append(Persist(meta_key, kr.replication, addresses))
                else:
                    effects.warn(f"no KVS node to store {meta_key}; override kept in routing only")
        response = self.address_response([kr.key for kr in request.replications], False,
                                         request.request_id)
        return self._answer(effects, request.response_address, response)

    @staticmethod
    def _answer(effects: Effects, address: str, response: Message) -> Effects:
        if address:
            effects.send.append(Outgoing(address, None, response))
        else:
            effects.warn("request without response_address; no answer sent")
        return effects
