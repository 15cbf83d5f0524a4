"""The executor-node manager: the one interface through which autoscaling adds and removes nodes.

Contract (the executor analogue of `anna_core.autoscale.manager.ClusterManager`):
- `ExecutorManager` (abstract). Nothing in it blocks on a node starting or stopping; the
  autoscaler's loop calls `poll()` every tick and gets `Event`s for what finished since.
  - `add_nodes(count) -> [node_id, ...]`: request `count` (>= 1) new executor nodes; their
    ids are known at once and listed by `pending()` until `poll()` reports each `READY`
    (then listed by `nodes()`) or `FAILED` (then forgotten).
  - `remove_node(node_id)`: stop that running node gracefully (SIGTERM: it stops its workers
    and exits). The caller drains it first (`cloudburst.autoscaler`): removal itself does
    not wait for calls. Listed by `leaving()` until `poll()` reports it `REMOVED` (or
    `FAILED`). Raises at once, naming the node: `UnknownNode` (not a running node: never
    existed, still pending, or gone), `NodeLeaving` (already being removed), `LastNode` (the
    only running node; the manager never empties the cluster).
  - `nodes()`: running nodes not being removed. `pending()`: requested, not up yet.
    `leaving()`: being removed.
  - `poll(now=None) -> [Event, ...]`: advance without blocking (start nodes whose
    provisioning time came, notice readiness, exits and finished removals). One thread calls
    a manager.
  - `close()`: stop waiting for what is under way (nodes already up keep running).
- `LocalExecutorManager(cluster, provisioning_delay=0.0)`: nodes are processes of a started
  `cloudburst.LocalCluster`. A requested node is spawned `provisioning_delay` seconds after
  `add_nodes` (standing in for a VM or pod boot), and is `READY` once it announced that its
  workers are up; one that exits first or stays silent past the cluster's
  `startup_timeout` is `FAILED` (`StartupError`, killed). Removal is
  `LocalCluster.remove_executor_node` on a worker thread.
- `KubernetesExecutorManager` (`k8s/pool.py`) implements the
  same interface with the pods of the executor Deployment as nodes.
"""
from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from runtime.errors import CloudburstError
from runtime.node_events import FAILED, READY, REMOVED, NodeEvent
from runtime.process import StartupError

__all__ = ["ExecutorManager", "LocalExecutorManager", "Event", "READY", "REMOVED", "FAILED",
           "ExecutorManagerError", "UnknownNode", "NodeLeaving", "LastNode"]

log = logging.getLogger("cloudburst.autoscale.manager")

class ExecutorManagerError(CloudburstError):
    """A request the manager refused; `node_id` names the node it was about."""

    def __init__(self, message: str, *, node_id: str) -> None:
        super().__init__(message)
        self.node_id = node_id


class UnknownNode(ExecutorManagerError):
    """No running executor node of that id (never existed, still pending, or gone)."""


class NodeLeaving(ExecutorManagerError):
    """The node is already being removed."""


class LastNode(ExecutorManagerError):
    """The node is the only running executor node."""


# What poll() returns: one definition for every node manager (runtime/node_events.py).
Event = NodeEvent


class ExecutorManager(ABC):
    """Adds executor nodes and removes a chosen one; see the module contract."""

    @abstractmethod
    def add_nodes(self, count: int) -> List[str]:
        """Request `count` new nodes; returns their (pending) ids at once."""

    @abstractmethod
    def remove_node(self, node_id: str) -> None:
        """Stop a running node gracefully; UnknownNode, NodeLeaving or LastNode if it cannot."""

    @abstractmethod
    def nodes(self) -> List[str]:
        """Running nodes not being removed."""

    @abstractmethod
    def pending(self) -> List[str]:
        """Nodes requested and not yet up."""

    @abstractmethod
    def leaving(self) -> List[str]:
        """Nodes being removed that have not exited yet."""

    @abstractmethod
    def poll(self, now: Optional[float] = None) -> List[Event]:
        """Advance without blocking; what became ready, was removed or failed since."""

    def close(self) -> None:
        """Stop waiting for what is under way."""


@dataclass
class _Pending:
    node_id: str
    start_at: float                    # when the "machine" has booted and the node is spawned
    spawned_at: Optional[float] = None


class LocalExecutorManager(ExecutorManager):
    """Executor nodes as processes of a started `cloudburst.LocalCluster`.

    Args:
        cluster: the started LocalCluster whose executor nodes this manages (its initial
            nodes included).
        provisioning_delay: seconds between `add_nodes` and the node's process starting.
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
        self._leaving: Dict[str, threading.Thread] = {}
        self._finished: List[Event] = []                   # from removal threads
        self._lock = threading.Lock()

    def nodes(self) -> List[str]:
        return [n for n in self.cluster.executor_node_ids()
                if n not in self._pending and n not in self._leaving]

    def pending(self) -> List[str]:
        return list(self._pending)

    def leaving(self) -> List[str]:
        return list(self._leaving)

    def add_nodes(self, count: int) -> List[str]:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"add_nodes: count must be an int >= 1, got {count!r}")
        start_at = self.clock() + self.provisioning_delay
        ids = [self.cluster.reserve_executor_node_id() for _ in range(count)]
        for node_id in ids:
            self._pending[node_id] = _Pending(node_id, start_at)
        log.info("requested %d executor node(s) %s; provisioning %.3g s", count,
                 ", ".join(ids), self.provisioning_delay)
        return ids

    def remove_node(self, node_id: str) -> None:
        if node_id in self._leaving:
            raise NodeLeaving(f"executor node {node_id} is already being removed",
                              node_id=node_id)
        running = self.nodes()
        if node_id not in running:
            why = "is still starting" if node_id in self._pending else "is not running"
            raise UnknownNode(f"cannot remove executor node {node_id}: it {why}; running: "
                              f"{running}", node_id=node_id)
        if len(running) == 1:
            raise LastNode(f"cannot remove executor node {node_id}: it is the last running "
                           f"one", node_id=node_id)
        thread = threading.Thread(target=self._remove, args=(node_id,),
                                  name=f"remove-{node_id}", daemon=True)
        self._leaving[node_id] = thread
        thread.start()
        log.info("asked executor node %s to stop", node_id)

    def _remove(self, node_id: str) -> None:
        try:
            self.cluster.remove_executor_node(node_id)
            event = NodeEvent(REMOVED, node_id, f"executor node {node_id} stopped")
        except Exception as e:        # reported by poll(), never lost
            event = NodeEvent(FAILED, node_id, f"executor node {node_id} did not stop: {e}", e)
        with self._lock:
            self._finished.append(event)

    def poll(self, now: Optional[float] = None) -> List[Event]:
        now = self.clock() if now is None else now
        events: List[Event] = []
        for node_id, p in list(self._pending.items()):
            if p.spawned_at is None:
                if now < p.start_at:
                    continue
                try:
                    self.cluster.spawn_executor_node(node_id)
                except (OSError, ValueError, RuntimeError) as e:
                    del self._pending[node_id]
                    events.append(NodeEvent(FAILED, node_id, f"executor node {node_id} did not "
                                        f"start: {e}", e))
                    continue
                p.spawned_at = now
            state = self.cluster.executor_node_ready(node_id)
            if state:
                del self._pending[node_id]
                events.append(NodeEvent(READY, node_id, f"executor node {node_id} is up "
                                    f"{now - p.spawned_at:.1f} s after its process started"))
            elif state is False or now - p.spawned_at > self.cluster.startup_timeout:
                del self._pending[node_id]
                error = StartupError(f"executor node {node_id} "
                                     f"{'exited' if state is False else 'was not ready'} "
                                     f"within {now - p.spawned_at:.1f} s",
                                     name=node_id)
                self.cluster.discard_executor_node(node_id)
                events.append(NodeEvent(FAILED, node_id, str(error), error))
        with self._lock:
            finished, self._finished = self._finished, []
        for event in finished:
            self._leaving.pop(event.node_id, None)
        return events + finished

    def close(self) -> None:
        for thread in list(self._leaving.values()):
            thread.join(timeout=15.0)
