"""The node actions both autoscaling policies decide: plain immutable records, no behaviour.

- `AddNodes(pool, count, reason)`: ask the pool manager for `count` (>= 1) more nodes in
  `pool` (an Anna tier, or the executor nodes).
- `Note(reason)`: nothing to do; the policy wanted to act and a rule held it back, or it
  forgot a pending action. Log it.
Every `reason` is a sentence for an operator, with the numbers that led to the decision.
Each policy adds its own removal record (Anna's `RemoveNode`, the executors' `Drain` and
`Remove`), since how a node leaves differs.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AddNodes", "Note"]


@dataclass(frozen=True)
class AddNodes:
    """Start `count` (>= 1) new nodes in `pool`."""

    pool: str
    count: int
    reason: str


@dataclass(frozen=True)
class Note:
    """No action: why the policy held back (or what it forgot)."""

    reason: str
