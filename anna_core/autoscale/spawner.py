"""`AnnaSpawner`: Anna's tiers as pools of local processes (a `pools.local.Spawner`).

Contract: over a started `anna_core.LocalCluster`, a pool is a tier ("memory", "disk") and a
node is a KVS node process. `spawn` is `LocalCluster.spawn_node` (the non-blocking half of
`add_node`), `ready` is `node_ready` (True once the node announced it joined), `remove` is
`LocalCluster.remove_node` (SIGTERM, hand-off, exit 0; `LeaveFailed` otherwise), `discard`
kills a start that timed out. New ids are `<tier>-<i>`, the lowest index never used.
`local_pool(cluster, provisioning_delay)` is the pool manager `LocalCluster(autoscale=...)`
runs its monitor with.
"""
from __future__ import annotations

from typing import Any, List

from pools.local import LocalPool

from ..config import DISK, MEMORY

__all__ = ["AnnaSpawner", "local_pool"]


class AnnaSpawner:
    """Anna's tiers of a started LocalCluster as pools; see the module contract."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.startup_timeout = float(cluster.config.startup_timeout)
        self._reserved: set = set()

    def new_id(self, pool: str) -> str:
        taken = set(self.cluster.node_ids) | self._reserved
        index = 0
        while f"{pool}-{index}" in taken:
            index += 1
        self._reserved.add(f"{pool}-{index}")
        return f"{pool}-{index}"

    def spawn(self, pool: str, node_id: str) -> None:
        self.cluster.spawn_node(pool, node_id=node_id)

    def ready(self, node_id: str):
        return self.cluster.node_ready(node_id)

    def discard(self, node_id: str, exited: bool) -> None:
        if not exited:
            self.cluster.kill_node(node_id)

    def running(self, pool: str) -> List[str]:
        return [n for n in self.cluster.node_ids
                if self.cluster.tier_of(n) == pool and self.cluster.is_running(n)]

    def absent(self, pool: str, node_id: str) -> str:
        if node_id in self.cluster.node_ids:
            tier = self.cluster.tier_of(node_id)
            return f"is a {tier} node" if tier != pool else "is not running"
        return "does not exist"

    def log_tail(self, node_id: str) -> str:
        return self.cluster.log_tail(node_id)

    def remove(self, pool: str, node_id: str) -> None:
        self.cluster.remove_node(node_id)


def local_pool(cluster: Any, provisioning_delay: float = 0.0, **kw: Any) -> LocalPool:
    """The pool manager of a LocalCluster's tiers (its initial nodes included)."""
    return LocalPool(AnnaSpawner(cluster), (MEMORY, DISK), provisioning_delay, **kw)
