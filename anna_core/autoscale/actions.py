"""What Anna's policy engine decides: plain immutable records, no behaviour, no I/O.

Contract (anna_core/autoscale/policy.py returns these, in the order to carry them out; a
monitor service wraps the engine and carries them out):
- `AddNodes(pool, count, reason)` (`pools.actions`, shared with executor autoscaling): ask
  the pool manager for `count` more nodes in tier `pool`.
- `RemoveNode(tier, node_id, reason)`: make that node leave gracefully (it hands its keys
  off, then exits). Any `SetReplication` the removal needs comes earlier in the same list.
- `SetReplication(key, replication, reason)`: set the key's replication vector through
  routing (which persists it and tells every worker; gossip then moves the data).
  `Promote` and `Demote` are SetReplication for cross-tier movement (Algorithm 1): a service
  may treat every SetReplication alike; logs and tests tell them apart.
- `Note(reason)` (`pools.actions`): nothing to do; the engine wanted to act and a rule held it back (grace
  period, budget, minimum nodes, a pending action), or forgot a pending action. Log it.
Every `reason` is a sentence for an operator, with the numbers that led to the decision.
`NODE_ACTIONS` are the types that change membership (what the grace period spaces out).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple, Type, Union

from pools.actions import AddNodes, Note

from ..config import Replication

__all__ = ["AddNodes", "RemoveNode", "SetReplication", "Promote", "Demote", "Note", "Action",
           "NODE_ACTIONS"]


@dataclass(frozen=True)
class RemoveNode:
    """Remove node `node_id` of `tier` (a graceful leave)."""

    tier: str
    node_id: str
    reason: str


@dataclass(frozen=True)
class SetReplication:
    """Set `key`'s replication vector to `replication`."""

    key: str
    replication: Replication
    reason: str


@dataclass(frozen=True)
class Promote(SetReplication):
    """Move one replica of a disk-only key into the memory tier (Algorithm 1 line 2)."""


@dataclass(frozen=True)
class Demote(SetReplication):
    """Move every replica of a key to the disk tier (Algorithm 1 line 4)."""


Action = Union[AddNodes, RemoveNode, SetReplication, Note]
NODE_ACTIONS: Tuple[Type, ...] = (AddNodes, RemoveNode)
