"""`ExecutorSpawner`: executor nodes as a pool of local processes (a `pools.local.Spawner`).

Contract: over a started `cloudburst.LocalCluster`, the pool is "executor" and a node is an
executor node process. `spawn` is `LocalCluster.spawn_executor_node`, `ready` is
`executor_node_ready` (True once its workers are up), `remove` is
`LocalCluster.remove_executor_node` (SIGTERM: it stops its workers; the caller drains it
first), `discard` forgets a start that failed. Ids are the cluster's (`node<i>`, never
reused). `local_pool(cluster, provisioning_delay)` is the pool manager
`LocalCluster(autoscale=...)` runs its executor autoscaler with.
"""
from __future__ import annotations

from typing import Any, List

from pools.local import LocalPool
from pools.manager import EXECUTORS

__all__ = ["ExecutorSpawner", "local_pool"]


class ExecutorSpawner:
    """The executor nodes of a started cloudburst LocalCluster; see the module contract."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.startup_timeout = float(cluster.startup_timeout)

    def new_id(self, pool: str) -> str:
        return self.cluster.reserve_executor_node_id()

    def spawn(self, pool: str, node_id: str) -> None:
        self.cluster.spawn_executor_node(node_id)

    def ready(self, node_id: str):
        return self.cluster.executor_node_ready(node_id)

    def discard(self, node_id: str, exited: bool) -> None:
        self.cluster.discard_executor_node(node_id)

    def running(self, pool: str) -> List[str]:
        return self.cluster.executor_node_ids()

    def absent(self, pool: str, node_id: str) -> str:
        return "is not running"

    def log_tail(self, node_id: str) -> str:
        return ""

    def remove(self, pool: str, node_id: str) -> None:
        self.cluster.remove_executor_node(node_id)


def local_pool(cluster: Any, provisioning_delay: float = 0.0, **kw: Any) -> LocalPool:
    """The pool manager of a LocalCluster's executor nodes (its initial nodes included)."""
    return LocalPool(ExecutorSpawner(cluster), (EXECUTORS,), provisioning_delay, **kw)
