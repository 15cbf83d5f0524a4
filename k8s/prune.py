"""What `cloudburst k8s deploy` prunes: objects of ours the manifests no longer hold.

Contract: `stale(live, rendered, keep)` takes the (apiVersion, kind, name) of the objects
labelled as ours that exist in the namespace, the rendered manifests and names never to
delete (the key Secrets, which deploy makes outside the manifests), and returns the live
ones that the manifests do not hold, in deletion order (workloads first, then what they
use). Pure: no I/O. Only the `PRUNABLE` kinds are ever listed: volumes (they hold data),
Secrets, Namespaces and cluster-wide objects are never pruned.
"""
from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Tuple

__all__ = ["PRUNABLE", "stale"]

# (apiVersion, kind) of what the manifests hold and a later version may drop, workloads first
PRUNABLE: List[Tuple[str, str]] = [
    ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"),
    ("policy/v1", "PodDisruptionBudget"), ("v1", "Service"), ("v1", "ConfigMap"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
]


def stale(live: Iterable[Tuple[str, str, str]], rendered: Iterable[Mapping[str, Any]],
          keep: Iterable[str] = ()) -> List[Tuple[str, str, str]]:
    """The live objects of ours to delete: of a `PRUNABLE` kind, not rendered, not kept."""
    wanted = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    kept = set(keep)
    order = {kind: i for i, (_, kind) in enumerate(PRUNABLE)}
    out = [(v, k, n) for v, k, n in live
           if k in order and (k, n) not in wanted and n not in kept]
    return sorted(set(out), key=lambda o: (order[o[1]], o[2]))
