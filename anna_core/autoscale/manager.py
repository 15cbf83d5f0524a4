"""The cluster manager: the one interface through which autoscaling changes Anna's membership.

Contract:
- `ClusterManager` (abstract) adds nodes of a tier and removes a chosen node. Nothing in it
  blocks on a node starting or leaving; a service loop calls `poll()` every tick and gets
  `Event`s for what finished since the last call.
  - `add_nodes(tier, count) -> [node_id, ...]`: request `count` (>= 1) new nodes; their ids
    are known at once and listed by `pending(tier)` until each is reported by `poll()` as
    `READY` (then listed by `nodes(tier)`) or `FAILED` (then forgotten).
  - `remove_node(tier, node_id)`: ask that running node to leave gracefully (it hands its
    keys off, then exits). It is listed by `leaving(tier)`, no longer by `nodes(tier)`, until
    `poll()` reports it `REMOVED`, or `FAILED` with the `LeaveFailed` as `error`. Raises at
    once, naming the node: `UnknownNode` (not a running node of that tier: never existed,
    still pending, or gone), `NodeLeaving` (already asked to leave), `LastNode` (the tier's
    only running node; a tier is never emptied through the manager).
  - `nodes(tier)`: running nodes, not leaving. `pending(tier)`: requested, not yet up.
  - `poll(now=None) -> [Event, ...]`: advance (start nodes whose provisioning time came,
    notice joins, exits and finished leaves) without blocking. One thread calls a manager.
  - `close()`: stop waiting for what is under way (nodes already up keep running).
- `apply(actions, manager, kvs=None)` carries out the policy engine's actions in order:
  `AddNodes` / `RemoveNode` go to the manager, `SetReplication` (with `Promote` and
  `Demote`) to `kvs`, an `anna_core.Client` holding the cluster's own key
  (`Client(..., auth=cluster.cluster_auth)`; routing refuses placement changes from a client
  key), `Note`s are only logged. Each action is logged at INFO with its reason. A failed action
  is logged at WARNING and recorded in its `Outcome`; the rest still run, except that after a
  failed `SetReplication` the list's `RemoveNode`s are skipped (the engine puts the cuts a
  removal needs before it). A list with a `SetReplication` and no `kvs` raises ValueError
  before anything is done.
- `LocalClusterManager(cluster, provisioning_delay=0.0)` is the default: nodes are local
  processes of an `anna_core.LocalCluster`. A requested node is spawned only
  `provisioning_delay` seconds after `add_nodes` (standing in for a VM or pod boot), and is
  `READY` once it announced it joined; one that exits first or stays silent past the
  cluster's `startup_timeout` is `FAILED` (`StartupError`, killed). Removal is
  `LocalCluster.remove_node` (SIGTERM, hand-off, exit 0) on a worker thread.
  `k8s.pool.KubernetesClusterManager` implements the same interface over pods.
"""
from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from k8s.errors import KubernetesError
from runtime.node_events import FAILED, READY, REMOVED, NodeEvent

from ..config import DISK, MEMORY
from ..errors import AnnaError, LeaveFailed, StartupError
from .actions import AddNodes, Note, RemoveNode, SetReplication

__all__ = ["ClusterManager", "LocalClusterManager", "Event", "READY", "REMOVED", "FAILED",
           "ClusterManagerError", "UnknownNode", "NodeLeaving", "LastNode", "Outcome", "apply"]

log = logging.getLogger("anna.autoscale.manager")

TIERS = (MEMORY, DISK)
# ---- errors -------------------------------------------------------------------------------


class ClusterManagerError(AnnaError):
    """A request the manager refused; `node_id` and `tier` name what it was about."""

    def __init__(self, message: str, *, node_id: str, tier: str) -> None:
        super().__init__(message, address=node_id)
        self.node_id = node_id
        self.tier = tier


class UnknownNode(ClusterManagerError):
    """No running node of that id in that tier (never existed, still pending, or gone)."""


class NodeLeaving(ClusterManagerError):
    """The node was already asked to leave."""


class LastNode(ClusterManagerError):
    """The node is its tier's only running node."""


# What poll() returns: one definition for every node manager (runtime/node_events.py).
Event = NodeEvent


def _check_tier(tier: str) -> None:
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")


# ---- the interface ------------------------------------------------------------------------


class ClusterManager(ABC):
    """Adds nodes of a tier and removes a chosen node; see the module contract."""

    @abstractmethod
    def add_nodes(self, tier: str, count: int) -> List[str]:
        """Request `count` new nodes in `tier`; returns their (pending) ids at once."""

    @abstractmethod
    def remove_node(self, tier: str, node_id: str) -> None:
        """Ask a running node to leave; UnknownNode, NodeLeaving or LastNode if it cannot."""

    @abstractmethod
    def nodes(self, tier: str) -> List[str]:
        """Running nodes of `tier` that are not leaving."""

    @abstractmethod
    def pending(self, tier: str) -> List[str]:
        """Nodes of `tier` requested and not yet up."""

    @abstractmethod
    def leaving(self, tier: str) -> List[str]:
        """Nodes of `tier` asked to leave that have not finished."""

    @abstractmethod
    def poll(self, now: Optional[float] = None) -> List[Event]:
        """Advance without blocking; what became ready, was removed or failed since."""

    def close(self) -> None:
        """Stop waiting for what is under way."""


# ---- the local implementation -------------------------------------------------------------


@dataclass
class _Pending:
    tier: str
    node_id: str
    start_at: float                   # when the "machine" has booted and the node is spawned
    spawned_at: Optional[float] = None


class LocalClusterManager(ClusterManager):
    """Nodes as processes of a started `anna_core.LocalCluster`.

    Args:
        cluster: the started LocalCluster whose nodes this manages (its own initial nodes
            included).
        provisioning_delay: seconds between `add_nodes` and the node's process starting (a VM
            or pod boot).
        clock: the monotonic clock `add_nodes` and `poll()` read (tests may pass another).
    """

    def __init__(self, cluster: Any, provisioning_delay: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if provisioning_delay < 0:
            raise ValueError(f"provisioning_delay must be >= 0, got {provisioning_delay!r}")
        self.cluster = cluster
        self.provisioning_delay = float(provisioning_delay)
        self.clock = clock
        self._pending: Dict[str, _Pending] = {}
        self._leaving: Dict[str, str] = {}                 # node id -> tier
        self._finished: List[Event] = []                   # from removal threads
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._reserved: set = set()                        # every id this manager handed out
        self._removed: set = set()                         # every node it asked to leave

    # -- queries --

    def nodes(self, tier: str) -> List[str]:
        _check_tier(tier)
        return [n for n in self.cluster.node_ids
                if self.cluster.tier_of(n) == tier and n not in self._pending
                and n not in self._leaving and self.cluster.is_running(n)]

    def pending(self, tier: str) -> List[str]:
        _check_tier(tier)
        return [n for n, p in self._pending.items() if p.tier == tier]

    def leaving(self, tier: str) -> List[str]:
        _check_tier(tier)
        return [n for n, t in self._leaving.items() if t == tier]

    def owns(self, node_id: str) -> bool:
        """Whether this manager started `node_id` or asked it to leave: the node's exit is
        then the manager's to report (as an Event), not a crash of the cluster."""
        return node_id in self._reserved or node_id in self._removed

    # -- changes --

    def add_nodes(self, tier: str, count: int) -> List[str]:
        _check_tier(tier)
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"add_nodes: count must be an int >= 1, got {count!r}")
        start_at = self.clock() + self.provisioning_delay
        ids = []
        for _ in range(count):
            node_id = self._free_id(tier)
            self._reserved.add(node_id)
            self._pending[node_id] = _Pending(tier, node_id, start_at)
            ids.append(node_id)
        log.info("requested %d %s node(s) %s; provisioning %.3g s", count, tier,
                 ", ".join(ids), self.provisioning_delay)
        return ids

    def remove_node(self, tier: str, node_id: str) -> None:
        _check_tier(tier)
        if node_id in self._leaving:
            raise NodeLeaving(f"node {node_id} ({tier}) is already leaving", node_id=node_id,
                              tier=tier)
        running = self.nodes(tier)
        if node_id not in running:
            if node_id in self._pending:
                why = "is still starting (pending), not running"
            elif node_id in self.cluster.node_ids and self.cluster.tier_of(node_id) != tier:
                why = f"is a {self.cluster.tier_of(node_id)} node"
            elif node_id in self.cluster.node_ids:
                why = "is not running"
            else:
                why = "does not exist"
            raise UnknownNode(f"cannot remove node {node_id} from the {tier} tier: it {why}; "
                              f"running {tier} nodes: {running}", node_id=node_id, tier=tier)
        if len(running) == 1:
            raise LastNode(f"cannot remove node {node_id}: it is the {tier} tier's last running "
                           f"node", node_id=node_id, tier=tier)
        self._leaving[node_id] = tier
        self._removed.add(node_id)
        thread = threading.Thread(target=self._leave, args=(tier, node_id),
                                  name=f"leave-{node_id}", daemon=True)
        self._threads.append(thread)
        thread.start()
        log.info("asked %s node %s to leave", tier, node_id)

    def poll(self, now: Optional[float] = None) -> List[Event]:
        now = self.clock() if now is None else now
        events: List[Event] = []
        for node_id, p in list(self._pending.items()):
            if p.spawned_at is None:
                if now < p.start_at:
                    continue
                try:
                    self.cluster.spawn_node(p.tier, node_id=node_id)
                except (OSError, ValueError, RuntimeError, StartupError) as e:
                    del self._pending[node_id]
                    events.append(NodeEvent(FAILED, node_id, f"node {node_id} did not "
                                        f"start: {e}", e, tier=p.tier))
                    continue
                p.spawned_at = now
            state = self.cluster.node_ready(node_id)
            timeout = self.cluster.config.startup_timeout
            if state:
                del self._pending[node_id]
                events.append(NodeEvent(READY, node_id, f"node {node_id} joined the "
                                    f"{p.tier} tier", tier=p.tier))
            elif state is False or now - p.spawned_at > timeout:
                del self._pending[node_id]
                how = ("exited before it was ready" if state is False
                       else f"did not report ready within {timeout:g} s (killed)")
                if state is None:
                    self.cluster.kill_node(node_id)
                error = StartupError(f"node {node_id} {how}; its log ends:\n"
                                     f"{self.cluster.log_tail(node_id)}", node_id)
                events.append(NodeEvent(FAILED, node_id, f"node {node_id} {how}", error, tier=p.tier))
        with self._lock:
            events.extend(self._finished)
            self._finished.clear()
        for e in events:
            if e.kind in (REMOVED, FAILED) and e.node_id in self._leaving:
                del self._leaving[e.node_id]
            (log.warning if e.kind == FAILED else log.info)("%s", e.detail)
        self._threads = [t for t in self._threads if t.is_alive()]
        return events

    def close(self, timeout: float = 0.0) -> None:
        """Forget pending starts (nodes already spawned keep running); wait up to `timeout`
        for leaves under way."""
        self._pending.clear()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    # -- internals --

    def _free_id(self, tier: str) -> str:
        taken = set(self.cluster.node_ids) | self._reserved
        index = 0
        while f"{tier}-{index}" in taken:
            index += 1
        return f"{tier}-{index}"

    def _leave(self, tier: str, node_id: str) -> None:
        try:
            self.cluster.remove_node(node_id)
            event = NodeEvent(REMOVED, node_id, f"node {node_id} left the {tier} tier", tier=tier)
        except LeaveFailed as e:
            event = NodeEvent(FAILED, node_id, f"node {node_id} did not leave cleanly: "
                          f"{e.message.splitlines()[0]}", e, tier=tier)
        except Exception as e:  # noqa: BLE001 - reported, never lost on a thread
            error = LeaveFailed(f"removing node {node_id} failed: {e}", node_id=node_id,
                                status=None)
            event = NodeEvent(FAILED, node_id, str(error), error, tier=tier)
        with self._lock:
            self._finished.append(event)


# ---- carrying out the policy engine's actions ---------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What `apply` did with one action: `ok`, and `result` (pending node ids for AddNodes,
    the key's new addresses for SetReplication) or `error`; `skipped` when not attempted."""

    action: Any
    ok: bool
    result: Any = None
    error: Optional[BaseException] = None
    skipped: bool = False


def apply(actions: Sequence[Any], manager: ClusterManager, kvs: Any = None,
          logger: logging.Logger = log) -> List[Outcome]:
    """Carry out `actions` in order; see the module contract."""
    if kvs is None and any(isinstance(a, SetReplication) for a in actions):
        raise ValueError("apply: the actions change replication but no kvs client was given "
                         "(an anna_core.Client with auth=cluster.cluster_auth)")
    outcomes: List[Outcome] = []
    replication_failed = False
    for action in actions:
        name = type(action).__name__
        try:
            if isinstance(action, Note):
                logger.info("Note: %s", action.reason)
                outcomes.append(Outcome(action, True))
            elif isinstance(action, AddNodes):
                logger.info("AddNodes %s x%d: %s", action.tier, action.count, action.reason)
                outcomes.append(Outcome(action, True, manager.add_nodes(action.tier,
                                                                        action.count)))
            elif isinstance(action, RemoveNode):
                if replication_failed:
                    logger.warning("RemoveNode %s %s skipped: a replication change before it "
                                   "failed (%s)", action.tier, action.node_id, action.reason)
                    outcomes.append(Outcome(action, False, skipped=True))
                    continue
                logger.info("RemoveNode %s %s: %s", action.tier, action.node_id, action.reason)
                manager.remove_node(action.tier, action.node_id)
                outcomes.append(Outcome(action, True))
            elif isinstance(action, SetReplication):
                r = action.replication
                logger.info("%s %r -> %s: %s", name, action.key, r.as_tuple(), action.reason)
                addresses = kvs.set_replication(action.key, memory=r.memory_global,
                                                disk=r.disk_global, memory_local=r.memory_local,
                                                disk_local=r.disk_local)
                outcomes.append(Outcome(action, True, addresses))
            else:
                raise TypeError(f"apply: unknown action {action!r}")
        except (AnnaError, KubernetesError, OSError) as e:
            logger.warning("%s failed: %s", name, e)
            outcomes.append(Outcome(action, False, error=e))
            if isinstance(action, SetReplication):
                replication_failed = True
    return outcomes
