"""Carrying out Anna's policy engine's actions: `apply(actions, manager, kvs)`.

Contract:
- The node actions go to a `pools.PoolManager` (the one interface both autoscalers change
  membership through; its pools here are the tiers "memory" and "disk"): `AddNodes` to
  `add_nodes(pool, count)`, `RemoveNode` to `remove_node(tier, node_id)`. Local processes:
  `spawner.local_pool(cluster)`; Kubernetes pods: `k8s.pool.KubernetesPool`.
- `SetReplication` (with `Promote` and `Demote`) goes to `kvs`, an `anna_core.Client` holding
  the cluster's own key (`Client(..., auth=cluster.cluster_auth)`; routing refuses placement
  changes from a client key); `Note`s are only logged.
- Each action is logged at INFO with its reason. A failed action (an `AnnaError`, a
  `PoolError`, a `KubernetesError`, an `OSError`) is logged at WARNING and recorded in its
  `Outcome`; the rest still run, except that after a failed `SetReplication` the list's
  `RemoveNode`s are skipped (the engine puts the cuts a removal needs before it). A list with
  a `SetReplication` and no `kvs` raises ValueError before anything is done.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from k8s.errors import KubernetesError
from pools.errors import PoolError
from pools.manager import PoolManager

from ..errors import AnnaError
from .actions import AddNodes, Note, RemoveNode, SetReplication

__all__ = ["Outcome", "apply"]

log = logging.getLogger("anna.autoscale.manager")


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


def apply(actions: Sequence[Any], manager: PoolManager, kvs: Any = None,
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
                logger.info("AddNodes %s x%d: %s", action.pool, action.count, action.reason)
                outcomes.append(Outcome(action, True, manager.add_nodes(action.pool,
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
        except (AnnaError, PoolError, KubernetesError, OSError) as e:
            logger.warning("%s failed: %s", name, e)
            outcomes.append(Outcome(action, False, error=e))
            if isinstance(action, SetReplication):
                replication_failed = True
    return outcomes
