"""Anna's autoscaling policy as pure code: statistics in, decisions out (dissertation 3.3).

A monitor service (built separately) collects the workers' and clients' reports each
monitoring period, calls `summarize`, hands the `Summary` to `PolicyEngine.decide(summary,
now)` and carries out the returned actions through routing (replication vectors) and a
cluster manager (nodes). Nothing in this package opens a socket, reads a clock or sleeps.

- `policy_config.PolicyConfig`: every knob, with the paper's values (`PolicyConfig.paper()`)
  and time-compressed local defaults (`PolicyConfig()`).
- `summaries`: `WorkerReport`, `ClientReport`, `KeyCount` -> `summarize` -> `Summary`.
- `policy.PolicyEngine`: Algorithm 5 over `tiering` (Alg. 1), `replication` (Alg. 2) and
  `elasticity` (Alg. 3, 4 and the budget).
- `actions`: `AddNodes`, `RemoveNode`, `SetReplication` (`Promote`, `Demote`), `Note`.
- `manager` (not imported here: it is not pure): `apply(actions, manager, kvs)`, which
  carries the actions out through a `pools.PoolManager` (the node-pool layer below this
  package: local processes through `spawner.AnnaSpawner`, or `k8s.pool.KubernetesPool`).
See DESIGN.md in this folder.
"""
from .actions import (NODE_ACTIONS, Action, AddNodes, Demote, Note, Promote, RemoveNode,
                      SetReplication)
from .policy import PolicyEngine
from .policy_config import TIERS, PolicyConfig
from .summaries import (ClientReport, KeyCount, KeySummary, LatencySummary, NodeStats, Summary,
                        TierSummary, WorkerReport, summarize)

__all__ = ["PolicyConfig", "TIERS", "PolicyEngine", "Action", "AddNodes", "RemoveNode",
           "SetReplication", "Promote", "Demote", "Note", "NODE_ACTIONS", "WorkerReport",
           "ClientReport", "KeyCount", "Summary", "TierSummary", "NodeStats", "KeySummary",
           "LatencySummary", "summarize"]
