"""Routing's membership state and decisions: no sockets, no clocks, no sleeps.

Contract (DESIGN.md "Routing and membership", proto/anna.proto, dissertation 3.2.5-3.2.7):
- `ClusterMembership` holds one cluster's membership: the kernel's `_core.ClusterMap` (every
  placement answer comes from it; nothing is placed in Python), the membership version, when
  each node was last heard from, and the replication overrides set through routing.
- Each event method takes a parsed message (and `now`, seconds on the caller's monotonic
  clock, where time matters) and returns `Effects` (anna_core/effects.py). It never raises on
  input: bad input is logged and changes nothing.
  * `join(NodeJoin)`: adds the node, or replaces the node with the same id (its addresses
    that are gone are forgotten); broadcasts; acks `control_address` with the Membership.
  * `leave(NodeLeave)`: removes the node; broadcasts to every remaining worker AND to the
    leaving node's workers (they must learn the new owners to hand their keys off); acks
    `control_address` with the new Membership. An unknown node is logged and acked. The last
    node of its tier (in this routing's view) is refused: its ack still names it, since
    nobody could take the keys that live in that tier only. Later heartbeats of a node that
    left are ignored until it joins again.
  * `heartbeat(NodeHeartbeat, now)`: records that the node is alive. An unknown node (routing
    restarted, or a node declared failed that is alive after all) is admitted like a join.
    A heartbeat of a node routing does not know starts the recovery phase (below) when it
    reports a version above routing's, or when routing never had a node (nodes heartbeat only
    after a join was acknowledged, so routing must have restarted; a new node's join may
    have reached the restarted routing first). A node reporting an older version than routing's is sent the
    current Membership again (at most once per heartbeat period).
  * `tick(now)`: nodes silent for more than `heartbeat_timeout` are removed (a WARNING names
    each and how long it was silent) and the new Membership is broadcast; ends recovery.
  * `address(KeyAddressRequest, now)`: each key's addresses and the version; NO_NODES when
    some key has none. Answered at once; while routing has not `learned` the membership
    (below) the answer is ROUTING_NOT_READY with no addresses: "ask again or elsewhere",
    never a definite "no node" nor a placement on a partial ring.
  * `replicate(SetReplication)`: sets the overrides, sends a `ReplicationUpdate` to every
    worker, persists each override under `replication_metadata_key(key)` and adds the keys
    to the index `REPLICATION_INDEX_KEY`, answers the keys' new addresses.
  * `overrides_loaded(mapping)`: overrides read back from the KVS; keys without an override
    set since this routing started take them, and workers get a `ReplicationUpdate` (during
    recovery they ride on the recovery broadcast instead).
  * `members(MembersRequest)`: the current Membership, for tools that must reach every
    worker (backups); answered at once (cluster key only: routing drops it from clients).
  * `handle(kind, payload, now)` parses a routing message and dispatches it.
- Broadcast: every membership change sends the full `Membership` (kind "membership") to every
  worker of every node, with version = max(own version, highest version any heartbeat
  reported) + 1, so versions strictly increase and a broadcast supersedes whatever the
  workers applied (also when another routing process produced it). Once per change, if a
  heartbeat shows the workers went past this routing's broadcast (another routing's, made
  from a different view), the membership is broadcast once more above it.
- Recovery (a restarted routing must not broadcast a partial ring): nodes heard from during
  `recovery_period` are collected silently, joins and leaves are applied but acked only at
  the end; then one broadcast at max(reported) + 1, and the acks. `Effects.load_overrides`
  asks the service to read the persisted overrides back (also when a fresh routing first
  gets a node).
- `membership()` is the full current `Membership`, exactly what workers receive. `serving` is
  true once routing has a member and no recovery phase runs (what a readiness probe asks).
- `learned(now)`: whether routing's lookup answers are definite. Not while a recovery phase
  runs (its ring is partial), nor before routing first had a member unless `startup_grace`
  has passed since it started (`started_at`, default the first event's time): a routing made
  again in a running cluster knows no node until the nodes' heartbeats reach it, while one
  that has heard no node for that long (a node heartbeats every period, and is dead after
  `heartbeat_timeout`) may say NO_NODES. A routing that had members and lost them all says
  NO_NODES at once: it learned that they are gone.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from google.protobuf.message import DecodeError, Message

from hydro_proto import anna_pb2

from . import _core
from .config import Replication
from .effects import (REPLICATION_INDEX_KEY, REPLICATION_PREFIX, Effects, Outgoing, Persist,
                      PersistIndex, metadata_put, replication_metadata_key)

__all__ = ["ClusterMembership", "Effects", "Outgoing", "Persist", "PersistIndex",
           "REPLICATION_PREFIX", "REPLICATION_INDEX_KEY", "replication_metadata_key",
           "metadata_put"]

MAX_VNODES = 4096


class ClusterMembership:
    """One cluster's membership, key placement, liveness and replication overrides.

    Args:
        default_replication: the replication vector of keys without an override.
        vnodes: virtual nodes per member on every ring (1..4096).
        heartbeat_period: how often nodes heartbeat (s); paces re-sends to lagging nodes.
        heartbeat_timeout: a node silent for longer is removed (s, > 0).
        recovery_period: how long a restarted routing collects heartbeats before its first
            broadcast (s); None = 1.25 heartbeat periods (a quarter period of slack for
            late heartbeats).
        startup_grace: how long after `started_at` a routing that never had a member answers
            lookups ROUTING_NOT_READY rather than NO_NODES (s); None = `heartbeat_timeout`.
        started_at: when the routing started, on the caller's clock (None: the first event's
            `now`).
    """

    def __init__(self, default_replication: Replication = Replication(), vnodes: int = 64, *,
                 heartbeat_period: float = 1.0, heartbeat_timeout: float = 3.0,
                 recovery_period: Optional[float] = None,
                 override_refresh_period: float = 0.0,
                 startup_grace: Optional[float] = None,
                 started_at: Optional[float] = None) -> None:
        if isinstance(vnodes, bool) or not isinstance(vnodes, int) or not 1 <= vnodes <= MAX_VNODES:
            raise ValueError(f"vnodes must be an int in 1..{MAX_VNODES}, got {vnodes!r}")
        if not heartbeat_period > 0 or not heartbeat_timeout > 0:
            raise ValueError("heartbeat_period and heartbeat_timeout must be > 0")
        if not override_refresh_period >= 0:
            raise ValueError("override_refresh_period must be >= 0 (0: never)")
        if startup_grace is not None and not startup_grace >= 0:
            raise ValueError("startup_grace must be >= 0 (None: heartbeat_timeout)")
        self.default_replication = Replication.coerce(default_replication)
        self.vnodes = vnodes
        self.heartbeat_period = float(heartbeat_period)
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.recovery_period = float(1.25 * heartbeat_period if recovery_period is None
                                     else recovery_period)
        self.cluster_map = _core.ClusterMap(
            default_replication=self.default_replication.as_tuple(), vnodes=vnodes)
        self.version = 0
        self.overrides: Dict[str, Replication] = {}
        self._override_set_at: Dict[str, float] = {}   # key -> when this routing set it
        self.override_refresh_period = float(override_refresh_period)
        self._next_refresh: Optional[float] = None     # set once there are nodes
        self.last_seen: Dict[str, float] = {}
        self.departed: Dict[str, float] = {}        # node id -> when it left
        self.reported = 0                           # highest version a heartbeat reported
        self.recovering_until: Optional[float] = None
        self.now = 0.0                              # latest time an event brought
        self._deferred_acks: List[str] = []
        self._deferred_targets: List[str] = []
        self._broadcast_version = 0
        self._owed = False                          # may still re-broadcast above a rival
        self._resent: Dict[str, float] = {}         # node id -> last repair re-send
        self._ever_had_nodes = False
        self.startup_grace = float(heartbeat_timeout if startup_grace is None
                                   else startup_grace)
        self.started_at: Optional[float] = None if started_at is None else float(started_at)

    # ---- queries ----------------------------------------------------------------------

    @property
    def recovering(self) -> bool:
        """Whether routing is collecting heartbeats before its first broadcast."""
        return self.recovering_until is not None

    def membership(self) -> anna_pb2.Membership:
        """The full current membership, as sent to workers."""
        m = anna_pb2.Membership(version=self.version, vnodes=self.vnodes,
                                default_replication=self.default_replication.to_proto())
        for node_id, tier, addresses in self.cluster_map.nodes():
            m.nodes.add(node_id=node_id, tier=int(tier), worker_addresses=list(addresses))
        for key, replication in self.overrides.items():
            m.overrides.add(key=key, replication=replication.to_proto())
        return m

    @property
    def serving(self) -> bool:
        """Whether routing can place keys: it has a member and is not collecting heartbeats
        (a restarted routing's recovery). A readiness probe's answer."""
        return not self.recovering and bool(self.cluster_map.nodes())

    def learned(self, now: Optional[float] = None) -> bool:
        """Whether lookups get definite answers (module contract): no recovery phase runs,
        and routing has had a member or has heard none for `startup_grace` since it started."""
        if self.recovering:
            return False
        if self._ever_had_nodes:
            return True
        at = self.now if now is None else max(self.now, now)
        return self.started_at is not None and at - self.started_at >= self.startup_grace

    def node_ids(self) -> List[str]:
        """The ids of the current members."""
        return [node_id for node_id, _tier, _addresses in self.cluster_map.nodes()]

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

    def handle(self, kind: str, payload: bytes, now: Optional[float] = None) -> Effects:
        """Parse and apply one routing message; bad input is logged, never raised."""
        handlers = {"join": anna_pb2.NodeJoin, "address": anna_pb2.KeyAddressRequest,
                    "replicate": anna_pb2.SetReplication, "heartbeat": anna_pb2.NodeHeartbeat,
                    "leave": anna_pb2.NodeLeave, "members": anna_pb2.MembersRequest}
        if kind not in handlers:
            return Effects().warn(f"dropped message of kind {kind!r}: routing does not handle it")
        try:
            message = handlers[kind].FromString(bytes(payload))
        except DecodeError as e:
            return Effects().warn(f"dropped {kind!r} message: payload does not parse ({e})")
        if kind == "join":
            return self.join(message, now)
        if kind == "leave":
            return self.leave(message, now)
        if kind == "heartbeat":
            return self.heartbeat(message, self.now if now is None else now)
        if kind == "address":
            return self.address(message, now)
        if kind == "members":
            return self.members(message)
        return self.replicate(message, now)

    def join(self, join: anna_pb2.NodeJoin, now: Optional[float] = None) -> Effects:
        """A node joins (or rejoins with new addresses): broadcast the new membership."""
        self._clock(now)
        effects = Effects()
        problem = self._check_node(join.node)
        if problem:
            return effects.warn(f"dropped join: {problem}: {join!r}")
        node = join.node
        self.departed.pop(node.node_id, None)
        self._admit(node, effects)
        self._change(effects, acks=[join.control_address])
        return effects.info(f"node {node.node_id} (tier {node.tier}, "
                            f"{len(node.worker_addresses)} workers) joined; {self._state()}")

    def leave(self, leave: anna_pb2.NodeLeave, now: Optional[float] = None) -> Effects:
        """A node leaves gracefully: broadcast (also to it) and ack with the new membership."""
        self._clock(now)
        effects = Effects()
        if not leave.node_id:
            return effects.warn(f"dropped leave without node_id: {leave!r}")
        tier = self._tier_of(leave.node_id)
        if tier is not None and self._tier_members(tier) == [leave.node_id]:
            # Its keys may live in its tier only (replication 0 elsewhere): with no other node
            # of the tier in this routing's view, a map without it gives them no owner. On
            # Kubernetes this routing may also just not know the tier's new node yet.
            effects.warn(f"leave of {leave.node_id} refused: it is the last node of tier "
                         f"{tier} known here, nobody could take its keys; acknowledged with a "
                         f"membership still naming it")
            return self._ack_only(effects, leave.control_address)
        self.departed[leave.node_id] = self.now
        addresses = self._remove(leave.node_id)
        if addresses is None:
            effects.info(f"leave of {leave.node_id!r}, which is not a member; acknowledged")
            return self._ack_only(effects, leave.control_address)
        self._change(effects, acks=[leave.control_address], targets=addresses)
        return effects.info(f"node {leave.node_id} leaves; its {len(addresses)} workers hand "
                            f"off; {self._state()}")

    def heartbeat(self, heartbeat: anna_pb2.NodeHeartbeat, now: float) -> Effects:
        """A node is alive (and reports the membership version its workers applied)."""
        self._clock(now)
        effects = Effects()
        problem = self._check_node(heartbeat.node)
        if problem:
            return effects.warn(f"dropped heartbeat: {problem}")
        node = heartbeat.node
        if node.node_id in self.departed:
            return effects.debug(f"heartbeat of {node.node_id}, which left, ignored")
        reported = int(heartbeat.membership_version)
        members = {n: (t, list(a)) for n, t, a in self.cluster_map.nodes()}
        if node.node_id not in members and not self.recovering and (
                reported > self.version or (not members and not self._ever_had_nodes)):
            # Nodes only heartbeat after a join was acknowledged: a heartbeat reaching a
            # routing that never had a node, or one from a node it does not know reporting a
            # newer version than it ever made, means this routing restarted while the cluster
            # ran (perhaps a new node's join reached it first: a restarted routing pod). Admitting
            # the nodes one heartbeat at a time would broadcast partial rings above the
            # cluster's version; collect them all first.
            self.recovering_until = self.now + self.recovery_period
            effects.load_overrides = True
            effects.info(f"heartbeat of unknown node {node.node_id} (membership version "
                         f"{reported}) reaches a routing with {len(members)} nodes at version "
                         f"{self.version}: routing restarted; collecting heartbeats for "
                         f"{self.recovery_period:g} s before broadcasting")
        self.reported = max(self.reported, reported)
        self.last_seen[node.node_id] = self.now
        current = members.get(node.node_id)
        if current != (int(node.tier), list(node.worker_addresses)):
            self._admit(node, effects)
            if self.recovering:
                return effects.debug(f"recovery: node {node.node_id} known from its heartbeat")
            self._change(effects, acks=[heartbeat.control_address])
            return effects.info(f"node {node.node_id} admitted from its heartbeat "
                                f"({'new addresses' if current else 'not a member'}; it "
                                f"reports version {reported}); {self._state()}")
        if self.recovering or reported == 0:
            return effects      # 0: the node does not know its workers' version (yet)
        if reported == self._broadcast_version:
            self._owed = False
        elif reported < self.version:
            if self.now - self._resent.get(node.node_id, -1e18) >= self.heartbeat_period:
                self._resent[node.node_id] = self.now
                membership = self.membership()
                effects.send.extend(Outgoing(a, "membership", membership)
                                    for a in node.worker_addresses)
                effects.debug(f"node {node.node_id} reports version {reported} < "
                              f"{self.version}; membership sent again")
        elif reported > self._broadcast_version and self._owed:
            self._owed = False
            effects.info(f"node {node.node_id} applied version {reported}, above this "
                         f"routing's {self._broadcast_version}; broadcasting above it")
            self._broadcast(effects)
            self._owed = False
            effects.info(self._state())
        return effects

    def tick(self, now: float) -> Effects:
        """Time passed: end recovery, remove nodes silent past the timeout."""
        self._clock(now)
        effects = Effects()
        if self.recovering:
            if self.now < self.recovering_until:
                return effects
            self.recovering_until = None
            self._change(effects)
            return effects.info(f"recovery over: {len(self.node_ids())} nodes "
                                f"({', '.join(self.node_ids()) or 'none'}); {self._state()}")
        removed = []
        for node_id in self.node_ids():
            silent = self.now - self.last_seen.get(node_id, self.now)
            if silent > self.heartbeat_timeout:
                effects.forget.extend(self._remove(node_id) or [])
                removed.append(node_id)
                effects.warn(f"node {node_id} silent for {silent:.2f} s (timeout "
                             f"{self.heartbeat_timeout:g} s): removed from the ring")
        for node_id, when in list(self.departed.items()):
            if self.now - when > 10 * self.heartbeat_timeout:
                del self.departed[node_id]
        if removed:
            self._change(effects)
            effects.info(self._state())
        if self.override_refresh_period and self.node_ids():
            if self._next_refresh is None:
                self._next_refresh = self.now + self.override_refresh_period
            elif self.now >= self._next_refresh:
                self._next_refresh = self.now + self.override_refresh_period
                effects.refresh_overrides = True
        return effects

    def address(self, request: anna_pb2.KeyAddressRequest,
                now: Optional[float] = None) -> Effects:
        """Answer where keys live; ROUTING_NOT_READY while routing has not `learned` the
        membership (its answer would be a guess: NO_NODES, or a partial ring's owners)."""
        self._clock(now)
        if not self.learned():
            response = anna_pb2.KeyAddressResponse(request_id=request.request_id,
                                                   membership_version=self.version,
                                                   error=anna_pb2.ROUTING_NOT_READY)
            for key in request.keys:
                response.addresses.add(key=key)
            return self._answer(Effects(), request.response_address, response)
        response = self.address_response(request.keys, request.all_tiers, request.request_id)
        return self._answer(Effects(), request.response_address, response)

    def members(self, request: anna_pb2.MembersRequest) -> Effects:
        """Answer with the current Membership (nodes, workers, default and overrides)."""
        response = anna_pb2.MembersResponse(request_id=request.request_id,
                                            membership=self.membership())
        return self._answer(Effects(), request.response_address, response)

    def replicate(self, request: anna_pb2.SetReplication, now: Optional[float] = None) -> Effects:
        """Set per-key replication: update workers, persist the overrides, answer addresses."""
        self._clock(now)
        effects = Effects()
        update = anna_pb2.ReplicationUpdate()
        for kr in request.replications:
            try:
                replication = Replication.from_proto(kr.replication)
            except ValueError as e:
                effects.warn(f"replication of {kr.key!r} ignored: {e}")
                continue
            self.cluster_map.set_replication(kr.key, replication.as_tuple())
            self.overrides[kr.key] = replication
            self._override_set_at[kr.key] = self.now
            update.overrides.add(key=kr.key, replication=kr.replication)
            effects.info(f"replication of {kr.key!r} set to {replication.as_tuple()}")
        if update.overrides:
            if not self.recovering:
                effects.send.extend(Outgoing(a, "replication", update)
                                    for a in self.worker_addresses())
            self._persist(effects, update.overrides)
        response = self.address_response([kr.key for kr in request.replications], False,
                                         request.request_id)
        return self._answer(effects, request.response_address, response)

    def overrides_loaded(self, loaded: Mapping[str, Replication]) -> Effects:
        """Overrides read back from the KVS; those set since this routing started win."""
        effects = Effects()
        update = anna_pb2.ReplicationUpdate()
        for key, value in loaded.items():
            if key in self.overrides:
                continue
            try:
                replication = Replication.coerce(value)
            except (TypeError, ValueError) as e:
                effects.warn(f"persisted override of {key!r} ignored: {e}")
                continue
            self.cluster_map.set_replication(key, replication.as_tuple())
            self.overrides[key] = replication
            update.overrides.add(key=key, replication=replication.to_proto())
        effects.info(f"{len(update.overrides)} replication overrides loaded from the KVS")
        if update.overrides and not self.recovering:
            effects.send.extend(Outgoing(a, "replication", update)
                                for a in self.worker_addresses())
        return effects

    def overrides_refreshed(self, stored: Mapping[str, Replication], now: float) -> Effects:
        """The overrides stored in the KVS, read again every `override_refresh_period`
        (`Effects.refresh_overrides` from `tick`): the KVS holds the latest override any
        routing persisted (last writer wins), so a routing that missed one (set through
        another routing) adopts it. An override this routing set within the last period is
        kept: its own write may not have reached the KVS yet."""
        self._clock(now)
        grace = self.override_refresh_period
        effects = Effects()
        update = anna_pb2.ReplicationUpdate()
        for key, value in stored.items():
            try:
                replication = Replication.coerce(value)
            except (TypeError, ValueError) as e:
                effects.warn(f"persisted override of {key!r} ignored: {e}")
                continue
            if self.overrides.get(key) == replication:
                continue
            if self.now - self._override_set_at.get(key, float("-inf")) < grace:
                continue
            self.cluster_map.set_replication(key, replication.as_tuple())
            self.overrides[key] = replication
            update.overrides.add(key=key, replication=replication.to_proto())
            effects.info(f"replication of {key!r} is {replication.as_tuple()} in the KVS "
                         f"(set through another routing); adopted")
        if update.overrides and not self.recovering:
            effects.send.extend(Outgoing(a, "replication", update)
                                for a in self.worker_addresses())
        return effects

    # ---- internals --------------------------------------------------------------------

    def _clock(self, now: Optional[float]) -> None:
        if now is not None and self.started_at is None:
            self.started_at = float(now)
        if now is not None and now > self.now:
            self.now = float(now)

    @staticmethod
    def _check_node(node: anna_pb2.NodeInfo) -> str:
        if not node.node_id or not node.worker_addresses:
            return "no node_id or no worker addresses"
        if node.tier not in (anna_pb2.MEMORY, anna_pb2.DISK):
            return f"node {node.node_id!r} has unknown tier {node.tier}"
        return ""

    def _admit(self, node: anna_pb2.NodeInfo, effects: Effects) -> None:
        """Add the node, replacing a member with the same id; forget its vanished addresses."""
        new_addresses = list(node.worker_addresses)
        old = self._remove(node.node_id)
        if old:
            effects.forget.extend(a for a in old if a not in new_addresses)
        self.cluster_map.add_node(node.node_id, int(node.tier), new_addresses)
        self.last_seen[node.node_id] = self.now
        if not self._ever_had_nodes:
            self._ever_had_nodes = True
            effects.load_overrides = True

    def _tier_of(self, node_id: str) -> Optional[int]:
        """The member's tier, or None if it is not a member."""
        for member, tier, _addresses in self.cluster_map.nodes():
            if member == node_id:
                return int(tier)
        return None

    def _tier_members(self, tier: int) -> List[str]:
        """The ids of the members of `tier`."""
        return [n for n, t, _a in self.cluster_map.nodes() if int(t) == tier]

    def _remove(self, node_id: str) -> Optional[List[str]]:
        """Remove a member; its worker addresses, or None if it was not a member."""
        for member, _tier, addresses in self.cluster_map.nodes():
            if member == node_id:
                self.cluster_map.remove_node(node_id)
                self.last_seen.pop(node_id, None)
                self._resent.pop(node_id, None)
                return list(addresses)
        return None

    def _broadcast(self, effects: Effects, targets: Sequence[str] = ()) -> anna_pb2.Membership:
        """Bump the version above everything seen and send the membership to every worker."""
        self.version = max(self.version, self.reported) + 1
        self._broadcast_version = self.version
        self._owed = True
        membership = self.membership()
        addresses = self.worker_addresses()
        addresses += [a for a in dict.fromkeys(targets) if a not in addresses]
        effects.send.extend(Outgoing(a, "membership", membership) for a in addresses)
        return membership

    def _state(self) -> str:
        if self.recovering:
            return "broadcast deferred until recovery ends"
        return f"membership version {self.version}, {len(self.node_ids())} nodes"

    def _change(self, effects: Effects, acks: Sequence[str] = (),
                targets: Sequence[str] = ()) -> Effects:
        """The membership changed: broadcast and ack now, or at the end of recovery."""
        acks = [a for a in acks if a]
        if self.recovering:
            self._deferred_acks.extend(acks)
            self._deferred_targets.extend(targets)
            return effects
        acks = self._deferred_acks + acks
        targets = self._deferred_targets + list(targets)
        self._deferred_acks, self._deferred_targets = [], []
        membership = self._broadcast(effects, targets)
        effects.send.extend(Outgoing(a, None, membership) for a in dict.fromkeys(acks))
        return effects

    def _ack_only(self, effects: Effects, control_address: str) -> Effects:
        if not control_address:
            return effects
        if self.recovering:
            self._deferred_acks.append(control_address)
            return effects
        effects.send.append(Outgoing(control_address, None, self.membership()))
        return effects

    def _persist(self, effects: Effects, overrides: Sequence[anna_pb2.KeyReplication]) -> None:
        index_addresses = tuple(self.cluster_map.addresses(REPLICATION_INDEX_KEY, True))
        for kr in overrides:
            meta_key = replication_metadata_key(kr.key)
            addresses = tuple(self.cluster_map.addresses(meta_key, True))
            if addresses:
                effects.persist.append(Persist(meta_key, kr.replication, addresses))
            else:
                effects.warn(f"no KVS node to store {meta_key}; override kept in routing only")
        if index_addresses:
            effects.persist.append(PersistIndex(
                REPLICATION_INDEX_KEY, tuple(dict.fromkeys(kr.key for kr in overrides)),
                index_addresses))

    @staticmethod
    def _answer(effects: Effects, address: str, response: Message) -> Effects:
        if address:
            effects.send.append(Outgoing(address, None, response))
        else:
            effects.warn("request without response_address; no answer sent")
        return effects


def loaded_overrides(index: Sequence[str],
                     values: Mapping[str, bytes]) -> Tuple[Dict[str, Replication], List[str]]:
    """Parse persisted overrides: `values` maps a metadata key to its serialized
    `anna.Replication`. Returns ({key: Replication}, [problems]); never raises."""
    result: Dict[str, Replication] = {}
    problems: List[str] = []
    for key in index:
        payload = values.get(replication_metadata_key(key))
        if payload is None:
            problems.append(f"override of {key!r} listed in the index but not stored")
            continue
        try:
            result[key] = Replication.from_proto(anna_pb2.Replication.FromString(payload))
        except (DecodeError, ValueError) as e:
            problems.append(f"override of {key!r} does not parse: {e}")
    return result, problems
