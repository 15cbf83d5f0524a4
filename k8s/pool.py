"""`KubernetesPool`: the pool-manager interface (`pools.PoolManager`) over pods, one workload
per pool.

Usage:

    from k8s.api import connect
    from k8s.pool import KubernetesPool

    api = connect()                                   # kubeconfig, or in a pod its ServiceAccount
    pool = KubernetesPool(api, "cloudburst", {"memory": "anna-memory",
                                              "disk": "statefulset/anna-disk",
                                              "executor": "cloudburst-executor"})
    ids = pool.add_nodes("memory", 2)                 # placeholders: memory+1, memory+2
    for event in pool.poll():                         # each tick
        ...                                           # READY memory anna-memory-7c9-xk2lp

How it maps the interface:
- A node is a pod; its id is the pod's name, which is also the node id the process reports
  (k8s/entrypoint.py sets `node_id` from POD_NAME): the ids the policies read from Anna's
  reports and the schedulers' status are the ids this pool lists and removes.
- `add_nodes(pool, n)` scales the pool's workload up through its scale subresource (a JSON
  patch that tests the replica count it read, so concurrent scalers do not lose updates) and
  returns placeholders, since the controller names the pods; each is bound to the next new
  pod of the pool, which `pending(pool)` then lists by name, and READY names the pod
  (`bound_to(pool, placeholder)`). A request with no pod, or a pod not Ready,
  `startup_timeout` seconds after it is FAILED (`StartupError`) and withdrawn.
- `remove_node(pool, pod)`, for a Deployment, sets `controller.kubernetes.io/pod-deletion-cost`
  on that pod to the lowest value and scales down by one: the ReplicaSet deletes that pod,
  which receives SIGTERM (an Anna node hands its keys off; an executor node stops its
  workers, drained first by `cloudburst.autoscaler`). A StatefulSet deletes its highest
  ordinal, so that is the pod that leaves (`pools.removal`). The pods'
  `terminationGracePeriodSeconds` must cover the leave, and `leave_timeout` must exceed it.
  REMOVED once the pod is gone; FAILED (`LeaveFailed`) if it exited non-zero or is still
  there `leave_timeout` seconds later.
- Refusals are the pools' errors (`UnknownNode`, `NodeLeaving`, `LastNode`, and `PoolBusy`
  while some pod of the pool is not Ready: Kubernetes deletes such pods before it reads
  deletion costs, so the removal could not choose its pod; the policy retries). Every API
  call has `request_timeout`; a failure raises a `k8s.errors.KubernetesError` naming the
  verb, the resource, the object and the server's reason.
- Following pods (one watch per pool, resumed and relisted), scaling and deletion costs are
  `k8s.pods.DeploymentPods`' (its contract says how); the decisions (which pod is pending,
  ready, leaving, what timed out) are in the pure `k8s.pod_state.TierPods`. `poll()` never
  waits on the API; `wait(timeout)` blocks until a watch has news.

Permissions it needs (k8s/rbac/cluster-manager.yaml): pods get/list/watch/patch, and get/patch
of its workloads' scale subresource, in its namespace.

In the cluster, `python -m anna_core.monitor --autoscale --kubernetes-namespace NS` (the
`anna-monitor` pod) runs one over Anna's tiers, and `python -m cloudburst.autoscaler` (the
`cloudburst-autoscaler` pod) one over the executor nodes.
"""
from __future__ import annotations

from typing import Any, Tuple

from pools.manager import PoolManager

from .pods import DeploymentPods

__all__ = ["KubernetesPool"]


class KubernetesPool(DeploymentPods, PoolManager):
    """Nodes as the pods of one workload per pool; see the module docstring.

    Args and errors: as `DeploymentPods`, with the pools ("memory", "disk", "executor") as
    its groups: `deployments` maps a pool to its workload (`NAME` for a Deployment,
    `statefulset/NAME`); a pool left out is not managed (its queries are empty).
    """

    def pools(self) -> Tuple[str, ...]:
        return tuple(self.deployments)

    def __enter__(self) -> "KubernetesPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
