"""The pool-manager interface: the one way autoscaling changes which nodes exist.

Contract:
- `PoolManager` (abstract) adds nodes to a pool and removes a chosen node. Nothing in it
  blocks on a node starting or leaving; a service loop calls `poll()` every tick and gets
  `NodeEvent`s for what finished since the last call. One thread calls a manager.
  - `add_nodes(pool, count) -> [node_id, ...]`: request `count` (>= 1) new nodes; their ids
    are known at once (on Kubernetes placeholders, bound to pods later) and listed by
    `pending(pool)` until `poll()` reports each `READY` (then listed by `nodes(pool)`) or
    `FAILED` (then forgotten).
  - `remove_node(pool, node_id)`: ask that running node to leave gracefully (an Anna node
    hands its keys off; an executor node stops its workers; the caller drains it first). It
    is listed by `leaving(pool)`, no longer by `nodes(pool)`, until `poll()` reports it
    `REMOVED`, or `FAILED` with a `LeaveFailed`. Refusals raise at once, naming the node
    (`pools.errors`): `UnknownNode`, `NodeLeaving`, `LastNode`, `PoolBusy`.
  - `pools()`: the pools this manager manages; any other pool name raises ValueError.
  - `close()`: stop waiting for what is under way (nodes already up keep running).
- `NodeEvent(kind, node_id, detail, error, pool)`: `READY` (a requested node is up),
  `REMOVED` (a node asked to leave has gone, its state handed off) or `FAILED` (a start or a
  removal did not finish; `error` is the typed exception saying why).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import List, Optional, Tuple

__all__ = ["PoolManager", "NodeEvent", "READY", "REMOVED", "FAILED", "MEMORY", "DISK",
           "EXECUTORS", "check_count"]

READY = "ready"        # a requested node is up
REMOVED = "removed"    # a node being removed has gone
FAILED = "failed"      # a requested node did not start, or a removal did not finish

# The pools of the platform: Anna's two tiers and the executor nodes.
MEMORY = "memory"
DISK = "disk"
EXECUTORS = "executor"


@dataclass(frozen=True)
class NodeEvent:
    """One thing `poll()` noticed about one node of `pool`; `detail` is a sentence for people."""

    kind: str
    node_id: str
    detail: str = ""
    error: Optional[BaseException] = None
    pool: str = ""


def check_count(count: object) -> int:
    """`count` if it is an int >= 1 (a bool is not); ValueError otherwise."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"add_nodes: count must be an int >= 1, got {count!r}")
    return count


class PoolManager(ABC):
    """Adds nodes to a pool and removes a chosen node; see the module contract."""

    @abstractmethod
    def pools(self) -> Tuple[str, ...]:
        """The pools this manager manages."""

    @abstractmethod
    def add_nodes(self, pool: str, count: int) -> List[str]:
        """Request `count` new nodes in `pool`; their (pending) ids at once."""

    @abstractmethod
    def remove_node(self, pool: str, node_id: str) -> None:
        """Ask a running node to leave; UnknownNode, NodeLeaving, LastNode or PoolBusy if it
        cannot."""

    @abstractmethod
    def nodes(self, pool: str) -> List[str]:
        """Running nodes of `pool` that are not leaving."""

    @abstractmethod
    def pending(self, pool: str) -> List[str]:
        """Nodes of `pool` requested and not yet up."""

    @abstractmethod
    def leaving(self, pool: str) -> List[str]:
        """Nodes of `pool` asked to leave that have not finished."""

    @abstractmethod
    def poll(self, now: Optional[float] = None) -> List[NodeEvent]:
        """Advance without blocking; what became ready, was removed or failed since."""

    def close(self) -> None:
        """Stop waiting for what is under way."""

    def check_pool(self, pool: str) -> str:
        """`pool` if this manager manages it; ValueError naming the pools otherwise."""
        if pool not in self.pools():
            raise ValueError(f"pool must be one of {self.pools()}, got {pool!r}")
        return pool
