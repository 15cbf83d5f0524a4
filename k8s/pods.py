"""`DeploymentPods`: nodes as the pods of Deployments, through the Kubernetes API.

The machinery of `KubernetesPool` (`k8s/pool.py`), the pool manager both autoscalers use on
Kubernetes. A *group* is one Deployment's pods (an Anna tier, or
the executor nodes); every method takes the group's name.

- A node is a pod; its id is the pod's name. `add_nodes(group, n)` scales the group's
  Deployment up through the `deployments/scale` subresource (a JSON patch that tests the
  replica count it read, so concurrent scalers do not lose updates) and returns placeholder
  ids (`<group>+<n>`), since the ReplicaSet names the pods; each placeholder is bound to the
  next new pod of the group, which `pending()` then lists by name, and READY names the pod
  (`bound_to(group, placeholder)`).
- `remove_node(group, pod)` sets `controller.kubernetes.io/pod-deletion-cost` on that pod to
  the lowest value and scales the Deployment down by one: the ReplicaSet deletes the cheapest
  Ready pod, which receives SIGTERM. Because the ReplicaSet deletes pods that are not Ready
  before it reads deletion costs, a removal while some pod of the group is not Ready raises
  `PoolBusy`.
- A group may be a StatefulSet instead (`statefulset/NAME`): it always deletes its highest
  ordinal on a scale-down, so `remove_node(group, pod)` removes that pod
  (`pools.removal.removal`, rule `HIGHEST_ORDINAL`) and sets no deletion cost.
- Pods are followed by one watch per group (the Deployment's selector, read from the scale
  subresource; the groups' selectors must not overlap), each on a thread that feeds a queue;
  `poll()` drains the queue and does not wait for pods (it calls the API only to withdraw a
  start that timed out: two requests, each within `request_timeout`). `wait(timeout)` blocks
  until there is news, for callers with nothing else to do. A watch ends every
  `watch_timeout` seconds and resumes from the last resourceVersion; when that is too old
  (410 Gone) the thread lists the pods again.
- The decisions (which pod is pending, ready, leaving, what timed out) are in the pure
  `pod_state.TierPods`; this module only speaks to the API.
- Every API call has `request_timeout`; a failure raises a `KubernetesError` naming the verb,
  the resource, the object and the server's reason: `PermissionDenied` (RBAC), `ObjectNotFound`,
  `ApiTimeout`, `ApiUnavailable`, `ApiConflict`.

Permissions it needs (k8s/rbac/cluster-manager.yaml): pods get/list/watch/patch,
deployments/scale get/patch on its Deployments (statefulsets/scale on its StatefulSets), in
its namespace.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from pools.manager import FAILED, NodeEvent as Event

from .errors import ApiConflict, KubernetesError, api_error, client_errors
from pools.manager import check_count
from pools.removal import CHOSEN, HIGHEST_ORDINAL, removal

from .pod_state import PodView, TierPods, Withdraw

__all__ = ["DeploymentPods", "pod_view", "workload", "DELETION_COST", "LOWEST_COST"]

log = logging.getLogger("k8s.pods")

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
LOWEST_COST = -2147483648          # the annotation is an int32


# ---- pods as the state core sees them -----------------------------------------------------


def pod_view(pod: Any) -> PodView:
    """A `V1Pod` as a `PodView`."""
    status = pod.status
    conditions = (status.conditions if status is not None else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    reason = ""
    exit_code: Optional[int] = None
    for cs in ((status.container_statuses if status is not None else None) or []):
        state = cs.state
        if state is not None and state.terminated is not None:
            code = state.terminated.exit_code
            if code and not exit_code:
                exit_code = code
                reason = f"container {cs.name} exited with {code} ({state.terminated.reason})"
            elif exit_code is None:
                exit_code = code
        elif state is not None and state.waiting is not None and state.waiting.reason:
            reason = reason or f"container {cs.name} waiting: {state.waiting.reason}"
    if not reason:
        for c in conditions:
            if c.status != "True" and c.message:
                reason = f"{c.type}: {c.message}"
                break
    return PodView(name=pod.metadata.name, ready=ready,
                   terminating=pod.metadata.deletion_timestamp is not None,
                   phase=(status.phase if status is not None else None) or "Pending",
                   exit_code=exit_code, reason=reason)


# ---- the pods of Deployments --------------------------------------------------------------

STATEFULSET = "statefulset/"


def workload(spec: str) -> Tuple[str, str, str]:
    """`NAME` (a Deployment) or `statefulset/NAME`: (kind, name, its scale resource)."""
    if spec.startswith(STATEFULSET):
        return "StatefulSet", spec[len(STATEFULSET):], "statefulsets/scale"
    return "Deployment", spec, "deployments/scale"



class DeploymentPods:
    """Nodes as the pods of one Deployment per group; see the module docstring.

    Args:
        api_client: a `kubernetes.client.ApiClient` (e.g. `config.new_client_from_config()`).
        namespace: where the Deployments are.
        deployments: group -> Deployment name, e.g. {"memory": "anna-memory"}, or
            `statefulset/NAME` for a StatefulSet; groups left out are not managed (their
            `nodes()` are empty, changes raise ValueError).
        startup_timeout: seconds from `add_nodes` to a Ready pod before FAILED (and the
            request withdrawn).
        leave_timeout: seconds from `remove_node` until the pod must be gone; longer than the
            pods' terminationGracePeriodSeconds.
        request_timeout: seconds for every API request. The client's own retries
            (`Configuration.retries`, urllib3's 3 by default) repeat a request that timed out
            or was refused; set `retries = 0` for one attempt per call.
        watch_timeout: seconds a watch runs before it is resumed (server-side timeout).
        clock: the monotonic clock (tests may pass another).

    Raises (constructing): `PermissionDenied`, `ObjectNotFound` (a missing Deployment or
    namespace), `ApiTimeout`, `ApiUnavailable`, naming the call.
    """

    def __init__(self, api_client: Any, namespace: str, deployments: Mapping[str, str], *,
                 startup_timeout: float = 120.0, leave_timeout: float = 150.0,
                 request_timeout: float = 10.0, watch_timeout: int = 60,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for group in deployments:
            self._check_group(group)
        if not deployments:
            raise ValueError("deployments must name at least one Deployment")
        self.namespace = namespace
        self.workloads = {g: workload(spec) for g, spec in deployments.items()}
        self.deployments = {g: w[1] for g, w in self.workloads.items()}
        self.request_timeout = float(request_timeout)
        self.watch_timeout = int(watch_timeout)
        self.clock = clock
        self.apps, self.core = self._apis(api_client)
        self.stats = {"watches": 0, "resumes": 0, "relists": 0, "errors": 0}
        self.last_error: Optional[KubernetesError] = None
        self._states = {t: TierPods(t, startup_timeout, leave_timeout) for t in deployments}
        self._selectors: Dict[str, str] = {}
        self._queue: "queue.Queue[Tuple[Any, ...]]" = queue.Queue()
        self._held: List[Tuple[Any, ...]] = []        # taken off the queue by wait()
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._watches: Dict[str, Any] = {}
        now = self.clock()
        for group, name in self.deployments.items():
            scale = self._read_scale(group)
            selector = getattr(scale.status, "selector", None)
            if not selector:
                resource = self.workloads[group][2]
                raise KubernetesError(f"{resource} {namespace}/{name} has no selector in "
                                      f"its status", verb="get", resource=resource,
                                      name=name, namespace=namespace)
            self._selectors[group] = selector
        try:
            for group in self.deployments:
                views, version = self._list(group)
                self._states[group].sync(views, now)
                thread = threading.Thread(target=self._watch_loop, args=(group, version),
                                          name=f"k8s-watch-{group}", daemon=True)
                self._threads.append(thread)
                thread.start()
        except BaseException:
            self.close()
            raise
        log.info("managing %s in namespace %s", ", ".join(
            f"{t}: deployment {n} ({len(self._states[t].nodes())} Ready pods)"
            for t, n in self.deployments.items()), namespace)

    # -- queries (as of the last poll) --

    def nodes(self, group: str) -> List[str]:
        self._check_group(group)
        state = self._states.get(group)
        return state.nodes() if state else []

    def pending(self, group: str) -> List[str]:
        self._check_group(group)
        state = self._states.get(group)
        return state.pending() if state else []

    def leaving(self, group: str) -> List[str]:
        self._check_group(group)
        state = self._states.get(group)
        return state.leaving() if state else []

    def bound_to(self, group: str, placeholder: str) -> Optional[str]:
        """The pod a placeholder from `add_nodes` became, once created."""
        return self._state(group).bound_to(placeholder)

    # -- changes --

    def add_nodes(self, group: str, count: int) -> List[str]:
        state = self._state(group)
        check_count(count)
        placeholders = state.request(count, self.clock())
        try:
            replicas = self._scale(group, count)
        except KubernetesError:
            state.cancel(placeholders)
            raise
        log.info("requested %d %s pod(s) %s: %s %s/%s scaled to %d", count, group,
                 ", ".join(placeholders), self.workloads[group][0], self.namespace,
                 self.deployments[group], replicas)
        return placeholders

    def remove_node(self, group: str, node_id: str) -> str:
        """Ask `node_id` to leave (for a StatefulSet: its highest ordinal, which the
        controller deletes); the pod that leaves."""
        state = self._state(group)
        kind = self.workloads[group][0]
        state.check_leave(node_id)                  # raises UnknownNode/NodeLeaving/LastNode/...
        target = removal(node_id, state.nodes(),
                         HIGHEST_ORDINAL if kind == "StatefulSet" else CHOSEN, group)
        if target != node_id:
            log.info("%s: removing pod %s instead of %s: a StatefulSet deletes its highest "
                     "ordinal", group, target, node_id)
        node_id = target
        state.leave(node_id, self.clock())
        annotated = False
        try:
            if kind == "Deployment":
                self._set_cost(node_id, LOWEST_COST)
                annotated = True
            replicas = self._scale(group, -1)
        except KubernetesError:
            state.unleave(node_id)
            if annotated:
                try:
                    self._set_cost(node_id, None)
                except KubernetesError as e:
                    log.warning("could not clear the deletion cost of pod %s: %s", node_id, e)
            raise
        log.info("asked %s pod %s to leave: %s %s/%s scaled to %d", group, node_id, kind,
                 self.namespace, self.deployments[group], replicas)
        return node_id

    def poll(self, now: Optional[float] = None) -> List[Event]:
        now = self.clock() if now is None else now
        events: List[Event] = []
        while True:
            if self._held:
                item = self._held.pop(0)
            else:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            kind, group = item[0], item[1]
            if kind == "event":
                events += self._states[group].observe(item[2], item[3], now)
            elif kind == "sync":
                events += self._states[group].sync(item[2], now)
            elif kind == "error":
                self.last_error = item[2]
        for group, state in self._states.items():
            expired, withdrawals = state.tick(now)
            events += expired
            for w in withdrawals:
                self._withdraw(w)
        for e in events:
            (log.warning if e.kind == FAILED else log.info)("%s", e.detail)
        return events

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds until the watches have news for `poll()`; whether
        they have. For callers with nothing else to do between polls (tests, scripts)."""
        if self._held:
            return True
        try:
            self._held.append(self._queue.get(timeout=max(0.0, timeout)))
        except queue.Empty:
            return False
        return True

    def close(self, timeout: float = 2.0) -> None:
        """Stop the watches (waiting up to `timeout` for their threads); pods keep running."""
        self._stop.set()
        for w in list(self._watches.values()):
            w.stop()
            response = getattr(w, "_resp", None)
            if response is not None:
                try:
                    response.shutdown()     # unblocks a read waiting for the next event
                except Exception:  # noqa: BLE001 - best effort; the thread is a daemon
                    pass
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("watch threads still running after %.3g s: %s (daemon threads; they "
                        "end with their watch)", timeout, alive)

    def __enter__(self) -> "DeploymentPods":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the API --

    def _apis(self, api_client: Any) -> Tuple[Any, Any]:
        """The AppsV1Api and CoreV1Api to call (tests substitute fakes)."""
        from kubernetes import client
        return client.AppsV1Api(api_client), client.CoreV1Api(api_client)

    def _new_watch(self) -> Any:
        """A `kubernetes.watch.Watch` (tests substitute fakes)."""
        from kubernetes import watch
        return watch.Watch()

    def _check_group(self, group: str) -> None:
        """Refuse a group name that can never be managed (subclasses narrow it)."""
        if not isinstance(group, str) or not group:
            raise ValueError(f"a group name must be a non-empty string, got {group!r}")

    def _state(self, group: str) -> TierPods:
        self._check_group(group)
        if group not in self._states:
            raise ValueError(f"group {group!r} has no Deployment here (managed: "
                             f"{sorted(self._states)})")
        return self._states[group]

    def _call(self, verb: str, resource: str, name: str, fn: Callable[..., Any], *args: Any,
              **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.request_timeout)
        try:
            return fn(*args, **kwargs)
        except client_errors() as e:
            raise api_error(e, verb, resource, name, self.namespace) from e

    def _list(self, group: str) -> Tuple[List[PodView], str]:
        pods = self._call("list", "pods", "", self.core.list_namespaced_pod, self.namespace,
                          label_selector=self._selectors[group])
        return [pod_view(p) for p in pods.items], pods.metadata.resource_version

    def _scale(self, group: str, delta: int, attempts: int = 5) -> int:
        """Change the group's replicas by `delta` with a read-test-write; the new count.

        The JSON patch tests the count it read; the server answers 422 when that test fails
        (another scaler got there first), and the change is retried from a fresh read. A 422
        with the count unchanged is a genuine refusal and is raised."""
        name = self.deployments[group]
        kind, _, resource = self.workloads[group]
        refused: Optional[Tuple[int, KubernetesError]] = None
        for _ in range(attempts):
            scale = self._read_scale(group)
            current = scale.spec.replicas or 0
            if refused is not None and refused[0] == current:
                raise refused[1]
            target = current + delta
            if target < 0:
                raise ValueError(f"{kind} {self.namespace}/{name} has {current} replicas; "
                                 f"cannot change by {delta}")
            patch = ([{"op": "test", "path": "/spec/replicas", "value": current}] if current
                     else []) + [{"op": "add", "path": "/spec/replicas", "value": target}]
            try:
                patch_scale = (self.apps.patch_namespaced_stateful_set_scale
                               if kind == "StatefulSet"
                               else self.apps.patch_namespaced_deployment_scale)
                self._call("patch", resource, name, patch_scale, name, self.namespace,
                           patch, _content_type="application/json-patch+json")
                return target
            except KubernetesError as e:
                if e.status not in (409, 422):
                    raise
                log.info("%s %s/%s: replicas no longer %d (%s); retrying",
                         kind, self.namespace, name, current, e.reason)
                refused = (current, e)
        raise ApiConflict(f"patch {resource} {self.namespace}/{name}: replicas changed "
                          f"under every one of {attempts} attempts", verb="patch",
                          resource=resource, name=name, namespace=self.namespace)

    def _read_scale(self, group: str) -> Any:
        kind, name, resource = self.workloads[group]
        read = (self.apps.read_namespaced_stateful_set_scale if kind == "StatefulSet"
                else self.apps.read_namespaced_deployment_scale)
        return self._call("get", resource, name, read, name, self.namespace)

    def _set_cost(self, pod: str, cost: Optional[int]) -> None:
        body = {"metadata": {"annotations": {DELETION_COST: None if cost is None
                                             else str(cost)}}}
        self._call("patch", "pods", pod, self.core.patch_namespaced_pod, pod, self.namespace,
                   body, _content_type="application/merge-patch+json")

    def _withdraw(self, w: Withdraw) -> None:
        try:
            if w.pod is not None:
                self._set_cost(w.pod, LOWEST_COST)
            replicas = self._scale(w.tier, -1)
            log.warning("withdrew %s start %s%s: %s; deployment scaled to %d", w.tier,
                        w.placeholder, f" (pod {w.pod})" if w.pod else "", w.reason, replicas)
        except KubernetesError as e:
            log.warning("could not withdraw %s start %s: %s", w.tier, w.placeholder, e)
        except ValueError as e:
            log.warning("could not withdraw %s start %s: %s", w.tier, w.placeholder, e)

    def _watch_loop(self, group: str, version: str) -> None:
        """One group's watch: events into the queue; resume, relist on 410, back off on errors."""
        from kubernetes.client.exceptions import ApiException
        backoff = 0.2
        while not self._stop.is_set():
            w = self._new_watch()
            self._watches[group] = w
            self.stats["watches"] += 1
            try:
                for item in w.stream(self.core.list_namespaced_pod, self.namespace,
                                     label_selector=self._selectors[group],
                                     resource_version=version, allow_watch_bookmarks=True,
                                     timeout_seconds=self.watch_timeout,
                                     _request_timeout=(self.request_timeout,
                                                       self.watch_timeout + self.request_timeout)):
                    if self._stop.is_set():
                        return
                    if item["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._queue.put(("event", group, item["type"], pod_view(item["object"])))
                    version = w.resource_version or version
                backoff = 0.2
                self.stats["resumes"] += 1            # the server ended it: resume from version
            except ApiException as e:
                if self._stop.is_set():
                    return
                if e.status == 410:
                    log.info("%s pod watch: resourceVersion %s is too old (410 Gone); listing "
                             "again", group, version)
                    try:
                        views, version = self._list(group)
                    except KubernetesError as err:
                        self._report(group, err)
                        self._stop.wait(backoff)
                        backoff = min(backoff * 2, 5.0)
                        continue
                    self.stats["relists"] += 1
                    self._queue.put(("sync", group, views))
                    continue
                self._report(group, api_error(e, "watch", "pods", "", self.namespace))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except client_errors() as e:
                if self._stop.is_set():
                    return
                self._report(group, api_error(e, "watch", "pods", "", self.namespace))
                self._stop.wait(backoff)             # back off before trying again
                backoff = min(backoff * 2, 5.0)

    def _report(self, group: str, error: KubernetesError) -> None:
        self.stats["errors"] += 1
        log.warning("%s pod watch failed (retrying): %s", group, error)
        self._queue.put(("error", group, error))
