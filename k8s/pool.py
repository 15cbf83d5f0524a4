"""The node managers over pods: `KubernetesClusterManager` (Anna's tiers, one Deployment per
tier) and `KubernetesExecutorManager` (the executor Deployment).

Usage:

    from k8s.api import connect
    from k8s.pool import KubernetesClusterManager

    api = connect()                                   # kubeconfig, or in a pod its ServiceAccount
    manager = KubernetesClusterManager(api, "anna", {"memory": "anna-memory",
                                                     "disk": "statefulset/anna-disk"})
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
  typed errors are `k8s.pods.DeploymentPods`' (its contract says how), shared with
  Cloudburst's executor manager; the decisions (which pod is pending, ready, leaving, what
  timed out) are in the pure `pod_state.TierPods`. This module only adapts them to the
  cluster-manager interface (tiers).
- Every API call has `request_timeout`; a failure raises a `KubernetesError` naming the verb,
  the resource, the object and the server's reason: `PermissionDenied` (RBAC), `ObjectNotFound`,
  `ApiTimeout`, `ApiUnavailable`, `ApiConflict` (`k8s.errors`); `apply()` records them as the
  action's failure.

Permissions it needs (k8s/rbac/cluster-manager.yaml): pods get/list/watch/patch,
deployments/scale get/patch on the tiers' Deployments, in its namespace.

In the cluster, `python -m anna_core.monitor --autoscale --kubernetes-namespace NS ...` (the
`anna-monitor` pod, `AUTOSCALE=true` in the ConfigMap) builds one from the pod's
ServiceAccount and runs the policy with it (`anna_core.monitor.kubernetes_manager`).

`KubernetesExecutorManager`, the executor-manager interface over the executor Deployment's
pods (contract: `cloudburst/executor_manager.py`'s `ExecutorManager`, with pods as nodes):
- A node is a pod of the executor Deployment (`cloudburst-executor` in k8s/base); its id is
  the pod's name, which is also the node id the executor reports to the schedulers
  (k8s/entrypoint.py sets `node_id` from POD_NAME), so the ids the autoscaling policy reads
  from the schedulers are the ids this manager removes.
- `add_nodes(n)` scales the Deployment up by n through the `deployments/scale` subresource
  and returns placeholders (`executor+1`, ...); each is bound to the next new pod, which
  `pending()` then lists, and `poll()` reports READY (named by the pod) once the pod is Ready
  (the executor's readiness probe: every worker up). A request with no pod, or a pod not
  Ready, `startup_timeout` seconds after it is FAILED (`StartupError`) and withdrawn (the
  Deployment is scaled back down, that pod first).
- `remove_node(pod)` sets `controller.kubernetes.io/pod-deletion-cost` on that pod to the
  lowest value and scales down by one: the ReplicaSet deletes exactly that pod, the kubelet
  sends SIGTERM, and the executor node stops its workers. The caller drains the node first
  (`cloudburst.autoscaler`). REMOVED once the pod is gone; FAILED (`LeaveFailed`) if it
  exited non-zero or is still there `leave_timeout` seconds later.
- Refusals raise at once, naming the pod: `UnknownNode`, `NodeLeaving`, `LastNode` (the
  interface's), and `NodesNotReady` while some executor pod is not Ready (Kubernetes deletes
  such pods before it reads deletion costs, so the removal could not choose its pod; the
  policy's next decision retries). An API failure raises `ExecutorApiError`, whose `error` is
  the typed `KubernetesError` (`PermissionDenied`, `ObjectNotFound`, `ApiTimeout`,
  `ApiUnavailable`, `ApiConflict`) and whose message names the verb, resource and object.
- `poll()` never waits on the API (watches run on a thread); `wait(timeout)` blocks until
  the watch has news, for callers with nothing else to do.
Permissions (k8s/rbac/cluster-manager.yaml): pods get/list/watch/patch, and get/patch of the
executor Deployment's `deployments/scale`.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, List, Mapping, Optional

from anna_core.autoscale import manager as anna_manager
from anna_core.autoscale.manager import ClusterManager, _check_tier
from cloudburst.executor_manager import (Event, ExecutorManager, ExecutorManagerError, LastNode,
                                         NodeLeaving, UnknownNode)

from .errors import KubernetesError
from .pods import DeploymentPods
from .pod_state import TierBusy

__all__ = ["KubernetesClusterManager", "KubernetesExecutorManager", "ExecutorApiError",
           "NodesNotReady", "GROUP"]

log = logging.getLogger("k8s.pool")


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


GROUP = "executor"      # the placeholders' prefix and the pod watch's name


class NodesNotReady(ExecutorManagerError):
    """A removal cannot choose its pod now: some executor pod is not Ready yet (or a requested
    one was not created yet), and Kubernetes deletes such pods first on a scale-down."""


class ExecutorApiError(ExecutorManagerError):
    """A Kubernetes API call failed. `error` is the typed `KubernetesError`; `verb`,
    `resource`, `namespace`, `status` and `reason` are its; `node_id` is the object's name."""

    def __init__(self, error: KubernetesError) -> None:
        super().__init__(str(error), node_id=error.name or error.namespace)
        self.error = error
        self.verb, self.resource = error.verb, error.resource
        self.namespace, self.status, self.reason = error.namespace, error.status, error.reason


def _translated(e: Exception) -> ExecutorManagerError:
    """The executor interface's error for one of the shared machinery's."""
    node_id = getattr(e, "node_id", "") or ""
    if isinstance(e, KubernetesError):
        return ExecutorApiError(e)
    if isinstance(e, TierBusy):
        return NodesNotReady(str(e), node_id=node_id)
    for theirs, ours in ((anna_manager.NodeLeaving, NodeLeaving),
                         (anna_manager.LastNode, LastNode),
                         (anna_manager.UnknownNode, UnknownNode)):
        if isinstance(e, theirs):
            return ours(str(e), node_id=node_id)
    raise TypeError(f"no executor error for {type(e).__name__}")  # pragma: no cover


_SHARED_ERRORS = (KubernetesError, anna_manager.ClusterManagerError)


class KubernetesExecutorManager(ExecutorManager):
    """Executor nodes as the pods of one Deployment; see the module contract.

    Args:
        api_client: a `kubernetes.client.ApiClient` (`config.new_client_from_config()`, or
            `ApiClient()` after `config.load_incluster_config()`).
        namespace: the Deployment's namespace.
        deployment: the executor Deployment's name.
        startup_timeout: seconds from `add_nodes` to a Ready pod before FAILED (and withdrawn).
        leave_timeout: seconds from `remove_node` until the pod must be gone; longer than the
            executor pods' terminationGracePeriodSeconds.
        request_timeout: seconds for every API request.
        watch_timeout: seconds a watch runs before it is resumed.
        clock: the monotonic clock.

    Raises (constructing): `ExecutorApiError` naming the call (a missing Deployment, RBAC,
    an unreachable API).
    """

    def __init__(self, api_client: Any, namespace: str, deployment: str, *,
                 startup_timeout: float = 120.0, leave_timeout: float = 60.0,
                 request_timeout: float = 10.0, watch_timeout: int = 60,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.namespace = namespace
        self.deployment = deployment
        try:
            self.pods = DeploymentPods(api_client, namespace, {GROUP: deployment},
                                       startup_timeout=startup_timeout,
                                       leave_timeout=leave_timeout,
                                       request_timeout=request_timeout,
                                       watch_timeout=watch_timeout, clock=clock)
        except KubernetesError as e:
            raise ExecutorApiError(e) from e

    # -- queries (as of the last poll) --

    def nodes(self) -> List[str]:
        return self.pods.nodes(GROUP)

    def pending(self) -> List[str]:
        return self.pods.pending(GROUP)

    def leaving(self) -> List[str]:
        return self.pods.leaving(GROUP)

    def bound_to(self, placeholder: str) -> Optional[str]:
        """The pod a placeholder from `add_nodes` became, once created."""
        return self.pods.bound_to(GROUP, placeholder)

    # -- changes --

    def add_nodes(self, count: int) -> List[str]:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"add_nodes: count must be an int >= 1, got {count!r}")
        try:
            return self.pods.add_nodes(GROUP, count)
        except _SHARED_ERRORS as e:
            raise _translated(e) from e

    def remove_node(self, node_id: str) -> None:
        try:
            self.pods.remove_node(GROUP, node_id)
        except _SHARED_ERRORS as e:
            raise _translated(e) from e

    def poll(self, now: Optional[float] = None) -> List[Event]:
        # executor nodes have no tier (runtime/node_events.py)
        return [dataclasses.replace(e, tier="") for e in self.pods.poll(now)]

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds until the watch has news for `poll()`; whether it has."""
        return self.pods.wait(timeout)

    @property
    def last_error(self) -> Optional[KubernetesError]:
        """The watch's latest error (it retries with back-off), or None."""
        return self.pods.last_error

    def close(self) -> None:
        """Stop the watch; pods keep running."""
        self.pods.close()

    def __enter__(self) -> "KubernetesExecutorManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
