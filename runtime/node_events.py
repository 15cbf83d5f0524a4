"""What a node manager reports about the nodes it starts and removes (pure data).

Contract: Anna's cluster managers (`anna_core/autoscale/manager.py`, local processes or
Kubernetes pods) and Cloudburst's executor-node managers (`cloudburst/executor_manager.py`)
never block on a slow start or a long leave; their `poll()` returns `NodeEvent`s instead:
`READY` (a requested node is up and serving), `REMOVED` (a node asked to leave has gone,
its state handed off) or `FAILED` (a start or a removal did not finish; `error` is the typed
exception saying why). `tier` names the KVS tier ("memory"/"disk"); executor nodes have none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["NodeEvent", "READY", "REMOVED", "FAILED"]

READY = "ready"        # a requested node is up
REMOVED = "removed"    # a node being removed has gone
FAILED = "failed"      # a requested node did not start, or a removal did not finish


@dataclass(frozen=True)
class NodeEvent:
    """One thing `poll()` noticed about one node; `detail` is a sentence for people."""

    kind: str
    node_id: str
    detail: str = ""
    error: Optional[BaseException] = None
    tier: str = ""
