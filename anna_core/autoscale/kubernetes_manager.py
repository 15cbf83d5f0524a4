"""`KubernetesClusterManager`: the cluster-manager interface over pods of one Deployment per tier.

Usage:

    from kubernetes import config
    from anna_core.autoscale.kubernetes_manager import KubernetesClusterManager

    api = config.new_client_from_config()             # or load_incluster_config()
    manager = KubernetesClusterManager(api, "anna", {"memory": "anna-memory",
                                                     "disk": "anna-disk"})
    ids = manager.add_nodes("memory", 2)             # placeholders: memory+1, memory+2
    for event in manager.poll():                      # each monitor tick
        ...                                           # READY memory anna-memory-7c9-xk2lp

How it maps the interface (`anna_core/autoscale/manager.py`):
- A node is a pod; its id is the pod's name. `add_nodes` scales the tier's Deployment up
  through the `deployments/scale` subresource (a JSON patch that tests the replica count it
  read, so concurrent scalers do not lose updates) and returns placeholder ids, since the
  ReplicaSet names the pods; each placeholder is bound to the next new pod of the tier, which
  `pending()` then lists by name, and READY names the pod (`bound_to(placeholder)`).
- `remove_node(tier, pod)` sets `controller.kubernetes.io/pod-deletion-cost` on that pod to the
  lowest value and scales the Deployment down by one: the ReplicaSet deletes the cheapest
  Ready pod, which receives SIGTERM, and Anna's node handles SIGTERM by leaving gracefully
  (handing its keys off) before it exits. The pod's `terminationGracePeriodSeconds` must cover
  the hand-off, and `leave_timeout` must exceed it. Because the ReplicaSet deletes pods that
  are not Ready before it reads deletion costs, a removal while some pod of the tier is not
  Ready raises `TierBusy` (a `ClusterManagerError`; the monitor retries next period).
- Following pods (one watch per tier, resumed and relisted), scaling, deletion costs and the
  typed errors are `kubernetes_pods.DeploymentPods`' (its contract says how), shared with
  Cloudburst's executor manager; the decisions (which pod is pending, ready, leaving, what
  timed out) are in the pure `pod_state.TierPods`. This module only adapts them to the
  cluster-manager interface (tiers).
- Every API call has `request_timeout`; a failure raises a `KubernetesError` naming the verb,
  the resource, the object and the server's reason: `PermissionDenied` (RBAC), `ObjectNotFound`,
  `ApiTimeout`, `ApiUnavailable`, `ApiConflict`. They are `AnnaError`s, so `apply()` records
  them as the action's failure.

Permissions it needs (k8s/rbac/cluster-manager.yaml): pods get/list/watch/patch,
deployments/scale get/patch on the tiers' Deployments, in its namespace.

In the cluster, `python -m anna_core.monitor --autoscale --kubernetes-namespace NS ...` (the
`anna-monitor` pod, `AUTOSCALE=true` in the ConfigMap) builds one from the pod's
ServiceAccount and runs the policy with it (`anna_core.monitor.kubernetes_manager`).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

from .manager import ClusterManager, _check_tier
from .kubernetes_pods import (DELETION_COST, LOWEST_COST, ApiConflict, ApiTimeout,
                              ApiUnavailable, DeploymentPods, KubernetesError, ObjectNotFound,
                              PermissionDenied, api_error, pod_view)
from .pod_state import TierBusy

__all__ = ["KubernetesClusterManager", "KubernetesError", "PermissionDenied", "ObjectNotFound",
           "ApiTimeout", "ApiUnavailable", "ApiConflict", "TierBusy", "pod_view", "api_error",
           "DELETION_COST", "LOWEST_COST"]


class KubernetesClusterManager(DeploymentPods, ClusterManager):
    """Anna's nodes as the pods of one Deployment per tier; see the module docstring.

    Args and errors: as `DeploymentPods`, with the tiers ("memory", "disk") as its groups:
    `deployments` maps a tier to its Deployment's name, e.g. {"memory": "anna-memory"}; a
    tier left out is not managed.
    """

    def __init__(self, api_client: Any, namespace: str, deployments: Mapping[str, str], *,
                 startup_timeout: float = 120.0, leave_timeout: float = 150.0,
                 request_timeout: float = 10.0, watch_timeout: int = 60,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(api_client, namespace, deployments, startup_timeout=startup_timeout,
                         leave_timeout=leave_timeout, request_timeout=request_timeout,
                         watch_timeout=watch_timeout, clock=clock)

    def _check_group(self, tier: str) -> None:
        _check_tier(tier)

    def __enter__(self) -> "KubernetesClusterManager":
        return self
