"""Node pools: the one layer through which both autoscalers add and remove nodes.

A *pool* is a set of interchangeable nodes an autoscaler sizes: an Anna tier ("memory",
"disk") or the executor nodes ("executor"). Both the Anna monitor (`anna_core.monitor`) and
the executor autoscaler (`cloudburst.autoscaler`) carry their decisions out through one
`PoolManager`, keyed by pool:

- `manager`: `PoolManager` (the interface), `NodeEvent` and its kinds (`READY`, `REMOVED`,
  `FAILED`), the pool names.
- `errors`: one error tree under `PoolError`: `UnknownNode`, `NodeLeaving`, `LastNode`,
  `PoolBusy` (refusals, raised at once) and `LeaveFailed` (a removal that did not finish).
- `actions`: `AddNodes(pool, count, reason)` and `Note(reason)`, shared by both policies.
- `book` (pure): the pending/leaving record and every decision a local pool makes.
- `removal` (pure): which node a scale-in removes (the requested one, or the highest
  ordinal, as StatefulSets require).
- `local`: `LocalPool`, nodes as local processes behind a small `Spawner`.
The Kubernetes implementation is `k8s.pool.KubernetesPool` (pods of one workload per pool).
This package imports only `runtime`. See docs/ARCHITECTURE.md ("The control plane").
"""
from .actions import AddNodes, Note
from .errors import LastNode, LeaveFailed, NodeLeaving, PoolBusy, PoolError, UnknownNode
from .manager import (DISK, EXECUTORS, FAILED, MEMORY, READY, REMOVED, NodeEvent, PoolManager,
                      check_count)

__all__ = ["AddNodes", "Note", "PoolError", "UnknownNode", "NodeLeaving", "LastNode",
           "PoolBusy", "LeaveFailed", "PoolManager", "NodeEvent", "READY", "REMOVED",
           "FAILED", "MEMORY", "DISK", "EXECUTORS", "check_count"]
