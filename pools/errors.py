"""The node pools' errors: one tree, rooted at `PoolError`.

Contract: a pool manager refuses a request at once with a `PoolError` naming the node and
the pool (`node_id`, `pool`):
- `UnknownNode`: not a running node of that pool (never existed, still starting, or gone);
- `NodeLeaving`: already asked to leave;
- `LastNode`: the pool's only running node (a pool is never emptied through its manager);
- `PoolBusy`: the removal cannot choose its node now (on Kubernetes: a pod of the pool is
  not Ready, and the controller would delete that one instead); retry later.
A removal that was accepted but did not finish is reported by `poll()` as a FAILED event
whose `error` is a `LeaveFailed` (`status`: the node's exit status, None when it did not
exit in time). A start that did not finish is a FAILED event with `runtime.process`'s
`StartupError`. API failures of the Kubernetes pool are `k8s.errors.KubernetesError`s.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["PoolError", "UnknownNode", "NodeLeaving", "LastNode", "PoolBusy", "LeaveFailed"]


class PoolError(Exception):
    """A request a pool manager refused, or a removal that failed; `node_id` and `pool` name
    what it was about."""

    def __init__(self, message: str, *, node_id: str = "", pool: str = "") -> None:
        super().__init__(message)
        self.node_id = node_id
        self.pool = pool


class UnknownNode(PoolError):
    """No running node of that id in that pool (never existed, still pending, or gone)."""


class NodeLeaving(PoolError):
    """The node was already asked to leave."""


class LastNode(PoolError):
    """The node is its pool's only running node."""


class PoolBusy(PoolError):
    """A removal cannot choose its node now (some node of the pool is not ready yet, or a
    requested one was not created yet); retry once the pool has settled."""


class LeaveFailed(PoolError):
    """A node asked to leave did not finish: it exited with a non-zero status (`status`) or
    did not exit in time (`status` None)."""

    def __init__(self, message: str, *, node_id: str = "", pool: str = "",
                 status: Optional[int] = None) -> None:
        super().__init__(message, node_id=node_id, pool=pool)
        self.status = status
