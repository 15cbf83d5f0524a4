"""Deploy, scale, inspect and remove the platform on a Kubernetes cluster (the I/O behind
`cloudburst k8s`), with the official `kubernetes` client; no kubectl.

Contract:
- `Platform(api, namespace)` (`api` from `k8s.api.connect`) works in one namespace. Every API
  call has `request_timeout` and a failure raises the typed `KubernetesError` (`k8s.errors`) (verb, resource, object,
  reason: 403 from RBAC is `PermissionDenied`, an unreachable server `ApiUnavailable`, ...).
  Every wait has a deadline and raises `WaitTimeout` naming what is still not done, with its
  last condition. Progress lines go to `say` (default: nothing).
- `deploy(...)`: creates the namespace if missing (annotated as created by deploy), the key
  directory if missing (`runtime.auth.write_keys`, what `cloudburst keys` runs), the Secrets
  `cloudburst-cluster-key`, `cloudburst-authorized-keys` and `cloudburst-function-key` (the
  executor pods' `workers` containers: no cluster secret) from it, and applies the rendered
  manifests (`manifests.render`) with server-side apply (field manager `cloudburst-k8s`,
  conflicts forced, like `kubectl apply --server-side --force-conflicts`). Re-running is
  idempotent. A scalable Deployment that already exists keeps its current replica count
  unless a count is given (so a re-deploy does not undo `scale` or an autoscaler). The pod
  templates carry the keys' hash, so a re-deploy after adding a client restarts the pods
  (they read keys at start). Before the workloads it makes the disk tier's local volumes
  (`volumes`: one per ordinal the tier may reach, for clusters without a storage
  provisioner); after them it prunes: objects of ours (labelled `MANAGED_BY`) of the
  `prune.PRUNABLE` kinds that the manifests no longer hold are deleted (never the key
  Secrets, never volumes). Then it waits until every Deployment and StatefulSet is done
  (`state`).
- `scale(role, n)`: the scale subresource of a scalable role's Deployment (`SCALABLE`; the
  disk tier's StatefulSet, `STATEFUL`, whose new ordinals get their local volumes first);
  other roles, and unsafe changes of Anna's tiers (`check_scale`: one node less at a time,
  never empty), raise `RoleRefused` saying why.
- `delete()`: deletes the manifests' namespaced objects and the key Secrets (foreground, so
  a Deployment is gone only once its pods are), and the namespace only if deploy created it
  (the annotation) unless `keep_namespace`; a namespace that existed before is never deleted.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from runtime.auth import CLUSTER, FUNCTION, AuthConfig, KeyPair, format_address, write_keys

from .errors import (ApiConflict, KubernetesError, ObjectNotFound, RoleRefused, WaitTimeout,
                     api_error, client_errors)
from .names import DISK, EXECUTOR, MEMORY, SCHEDULER_SERVICE as _SCHEDULER_SERVICE
from .manifests import MANAGED_BY, apply_order, render
from .prune import PRUNABLE, stale
from .volumes import local_volumes
from .status import PlatformStatus, summarize

__all__ = ["Platform", "SCALABLE", "REFUSED", "CREATED_BY", "SECRETS", "secret_files",
           "ConnectInfo", "replica_counts", "check_scale"]

log = logging.getLogger("k8s.deploy")

FIELD_MANAGER = "cloudburst-k8s"
# Annotation on a namespace deploy created (delete removes only such namespaces).
CREATED_BY = "cloudburst.io/created-by"
# Annotation on pod templates: the hash of the key Secrets (a change restarts the pods).
KEYS_HASH = "cloudburst.io/keys-sha256"
# the cluster's keys, the authorized clients' public keys, and what the executor pods'
# `workers` containers get: the function role's pair and the cluster's public key only
SECRETS = ("cloudburst-cluster-key", "cloudburst-authorized-keys", "cloudburst-function-key")
# Roles `scale` changes, and their workloads (Deployments, but the disk tier's StatefulSet).
SCALABLE = {"executor": EXECUTOR, "memory": MEMORY, "disk": DISK}
STATEFUL = {"disk"}
# Roles `scale` refuses, and why.
REFUSED = {
    "scheduler": "every process is given every scheduler's stable name (SCHEDULERS in the "
                 "ConfigMap): change the StatefulSet's replicas and SCHEDULERS together in "
                 "the manifests and deploy",
    "routing": "every process is given every routing's stable name (ANNA_ROUTING in the "
               "ConfigMap): change the StatefulSet's replicas and ANNA_ROUTING together in "
               "the manifests and deploy",
    "monitor": "one monitor summarises the nodes' reports; a second would double-count them",
}
SCHEDULER_SERVICE = _SCHEDULER_SERVICE
# Where the disk tier's local volumes are made on the nodes (claims of LOCAL_CLASS).
DEFAULT_VOLUME_ROOT = "/var/lib/cloudburst/volumes"


def secret_files(key_dir: str) -> Dict[str, Dict[str, bytes]]:
    """The key Secrets' contents (Secret name -> file name -> bytes) from a key directory;
    KeyFileError naming a missing or malformed file. `cloudburst-function-key`, what function
    code's container mounts, never holds the cluster's secret key."""
    AuthConfig(key_dir).load()      # KeyFileError naming a missing or malformed file
    AuthConfig(key_dir).function_keypair()   # the pair executor workers run with

    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()
    authorized = os.path.join(key_dir, "authorized")
    names = sorted(n for n in (os.listdir(authorized) if os.path.isdir(authorized) else [])
                   if n.endswith(".key"))
    return {SECRETS[0]: {n: read(os.path.join(key_dir, n))
                         for n in (CLUSTER + ".key", CLUSTER + ".key_secret",
                                   FUNCTION + ".key", FUNCTION + ".key_secret")},
            SECRETS[1]: {n: read(os.path.join(authorized, n)) for n in names},
            SECRETS[2]: {n: read(os.path.join(key_dir, n))
                         for n in (FUNCTION + ".key", FUNCTION + ".key_secret",
                                   CLUSTER + ".key")}}


def replica_counts(requested: Mapping[str, int],
                   existing: Mapping[str, Optional[int]]) -> Dict[str, int]:
    """Deployment name -> replicas for a deploy: the roles `requested` (role -> count), and
    for the other scalable roles whose Deployment exists, its current count (what `scale` or
    an autoscaler set); the rest keep the manifests'. RoleRefused for a role not in
    SCALABLE, or a change `check_scale` refuses."""
    for role, n in requested.items():
        if role not in SCALABLE:
            raise RoleRefused(f"cannot set the replicas of role {role!r}: "
                              + REFUSED.get(role, f"roles are {', '.join(sorted(SCALABLE))}"))
        current = existing.get(SCALABLE[role])
        refusal = check_scale(role, current if current is not None else n, n)
        if refusal:
            raise RoleRefused(f"refusing to change {role} from {current} to {n} replicas: "
                              f"{refusal}")
    counts = {SCALABLE[r]: int(n) for r, n in requested.items()}
    for name in SCALABLE.values():
        if name not in counts and existing.get(name) is not None:
            counts[name] = int(existing[name])      # type: ignore[arg-type]
    return counts


def check_scale(role: str, current: int, target: int) -> Optional[str]:
    """Why changing `role` from `current` to `target` replicas is unsafe, or None.

    Anna's tiers lose nodes by graceful leaves (each hands its keys off on SIGTERM): they go
    down one node per command, so that no two leaves overlap, and a tier holding data is
    never emptied. Executor nodes hold no data and may take any count."""
    if target < 0:
        return f"replicas must be at least 0, got {target}"
    if role in ("memory", "disk") and target < current:
        if target == 0:
            return ("a tier holding data is never emptied (its keys would have nowhere to "
                    "go)")
        if current - target > 1:
            return (f"an Anna tier shrinks one node at a time (each leaving node hands its "
                    f"keys off first): scale to {current - 1}, let it finish, and repeat")
    return None


class ConnectInfo:
    """How a client reaches the deployed platform: the scheduler's in-cluster address with
    the cluster's public key, the key directory and its client identities."""

    def __init__(self, address: str, key_dir: str, clients: List[str]) -> None:
        self.address = address
        self.key_dir = key_dir
        self.clients = clients

    def text(self) -> str:
        """What deploy prints: the address and the `cloudburst.Client` call for it."""
        name = self.clients[0] if self.clients else "NAME"
        return (f"scheduler address (inside the cluster): {self.address}\n"
                f"connect from a pod of the cluster (executors connect back to the client, "
                f"so it binds an address they reach: its pod IP):\n"
                f"  cloudburst.Client({self.address!r}, ip=POD_IP,\n"
                f"                    auth=cloudburst.AuthConfig(KEY_DIR, 'client:{name}'))\n"
                f"  with KEY_DIR holding cluster.key, function.key and "
                f"clients/{name}.key_secret from "
                f"{self.key_dir} (clients there: {', '.join(self.clients) or 'none'})")


class Platform:
    """The platform in one namespace of a cluster; see the module contract.

    Args:
        api: a `kubernetes.client.ApiClient` (`connect`).
        namespace: where the platform lives.
        request_timeout: seconds for each API call.
        say: receives one line of progress at a time.
        poll_interval: seconds between reads while waiting (the API offers watches, but a
            wait here reads a handful of objects, and a poll is simpler to bound).
    """

    def __init__(self, api: Any, namespace: str = "cloudburst", *,
                 request_timeout: float = 10.0, say: Callable[[str], None] = lambda _: None,
                 poll_interval: float = 0.5) -> None:
        from kubernetes import client
        self.api = api
        self.namespace = namespace
        self.request_timeout = float(request_timeout)
        self.say = say
        self.poll_interval = float(poll_interval)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self._kinds: Dict[str, Dict[str, Tuple[str, bool]]] = {}

    # -- API plumbing --

    def _call(self, verb: str, resource: str, name: str, fn: Callable[..., Any], *args: Any,
              namespace: Optional[str] = None, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.request_timeout)
        try:
            return fn(*args, **kwargs)
        except client_errors() as e:
            raise api_error(e, verb, resource, name,
                            self.namespace if namespace is None else namespace) from e

    def _raw(self, method: str, path: str, query: List[Tuple[str, Any]],
             body: Optional[Any] = None, content_type: str = "application/json",
             _request_timeout: Optional[float] = None) -> Any:
        """One request outside the typed APIs (discovery, server-side apply); the JSON answer."""
        log.debug("%s %s %s", method, path, query)
        params = self.api.param_serialize(
            method, path, query_params=query,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body, auth_settings=["BearerToken"])
        response = self.api.call_api(*params, _request_timeout=_request_timeout
                                     or self.request_timeout)
        response.read()
        if not 200 <= response.status <= 299:
            self.api.response_deserialize(response, {})     # raises ApiException
        return json.loads(response.data or b"{}")

    def _resource(self, api_version: str, kind: str) -> Tuple[str, bool]:
        """(plural, namespaced) of a kind, from the API's discovery document."""
        if api_version not in self._kinds:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            doc = self._call("discover", "apiresources", api_version, self._raw, "GET", path, [],
                             namespace="")
            self._kinds[api_version] = {r["kind"]: (r["name"], r["namespaced"])
                                        for r in doc.get("resources", []) if "/" not in r["name"]}
        try:
            return self._kinds[api_version][kind]
        except KeyError:
            raise KubernetesError(f"the API server has no kind {kind} in {api_version}",
                                  verb="discover", resource=kind, name="",
                                  namespace=self.namespace) from None

    def _path(self, obj: Mapping[str, Any]) -> Tuple[str, str, str, str]:
        """(path, plural, name, namespace) of an object."""
        plural, namespaced = self._resource(obj["apiVersion"], obj["kind"])
        name = obj["metadata"]["name"]
        base = f"/api/{obj['apiVersion']}" if "/" not in obj["apiVersion"] \
            else f"/apis/{obj['apiVersion']}"
        ns = obj["metadata"].get("namespace", self.namespace) if namespaced else ""
        return (f"{base}/namespaces/{ns}/{plural}/{name}" if namespaced
                else f"{base}/{plural}/{name}"), plural, name, ns

    def apply(self, obj: Mapping[str, Any]) -> Dict[str, Any]:
        """Server-side apply of one object (the live object comes back)."""
        path, plural, name, ns = self._path(obj)
        return self._call("apply", plural, name, self._raw, "PATCH", path,
                          [("fieldManager", FIELD_MANAGER), ("force", "true")], dict(obj),
                          "application/apply-patch+yaml", namespace=ns)

    def _delete(self, obj: Mapping[str, Any]) -> bool:
        """Delete one object (foreground); False if it was not there."""
        path, plural, name, ns = self._path(obj)
        try:
            self._call("delete", plural, name, self._raw, "DELETE", path,
                       [("propagationPolicy", "Foreground")], namespace=ns)
        except ObjectNotFound:
            return False
        return True

    def _exists(self, obj: Mapping[str, Any]) -> bool:
        path, plural, name, ns = self._path(obj)
        try:
            self._call("get", plural, name, self._raw, "GET", path, [], namespace=ns)
        except ObjectNotFound:
            return False
        return True

    def read_namespace(self) -> Optional[Any]:
        """The V1Namespace, or None if it does not exist."""
        try:
            return self._call("get", "namespaces", self.namespace, self.core.read_namespace,
                              self.namespace, namespace="")
        except ObjectNotFound:
            return None

    # -- status and waits --

    def status(self) -> PlatformStatus:
        """Every Deployment and pod of the namespace (`state.summarize`)."""
        deps = self._call("list", "deployments", "", self.apps.list_namespaced_deployment,
                          self.namespace).items
        sets = self._call("list", "statefulsets", "", self.apps.list_namespaced_stateful_set,
                          self.namespace).items
        pods = self._call("list", "pods", "", self.core.list_namespaced_pod,
                          self.namespace).items
        return summarize(self.namespace, list(deps) + list(sets), pods)

    def _replicas(self) -> Dict[str, Optional[int]]:
        """Workload name -> its replicas, for the Deployments and StatefulSets that exist."""
        deps = self._call("list", "deployments", "", self.apps.list_namespaced_deployment,
                          self.namespace).items
        sets = self._call("list", "statefulsets", "", self.apps.list_namespaced_stateful_set,
                          self.namespace).items
        return {d.metadata.name: d.spec.replicas for d in list(deps) + list(sets)}

    def wait_ready(self, timeout: float, names: Optional[Iterable[str]] = None) -> PlatformStatus:
        """Wait until the Deployments `names` (default: all in the namespace) are done,
        saying each change of their state; WaitTimeout at the deadline."""
        wanted = set(names) if names is not None else None
        deadline = time.monotonic() + timeout
        said: Dict[str, str] = {}
        while True:
            status = self.status()
            deps = [d for d in status.deployments if wanted is None or d.name in wanted]
            missing = sorted((wanted or set()) - {d.name for d in deps})
            for d in deps:
                line = d.line()
                if said.get(d.name) != line:
                    self.say(("  ready     " if d.done else "  waiting   ") + line)
                    said[d.name] = line
            if deps and not missing and all(d.done for d in deps):
                return status
            if time.monotonic() >= deadline:
                pending = [d.line() for d in deps if not d.done] + \
                          [f"Deployment {self.namespace}/{n} does not exist" for n in missing]
                what = ("Deployment(s) " + ", ".join(f"{self.namespace}/{d.name}" for d in deps
                                                       if not d.done) + " to be Available"
                        if deps else f"Deployments in namespace {self.namespace}")
                raise WaitTimeout(what, timeout, pending or ["no Deployments"])
            time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))

    # -- deploy --

    def deploy(self, key_dir: str, *, image: Optional[str] = None,
               replicas: Optional[Mapping[str, int]] = None, client_name: str = "admin",
               wait: float = 300.0, manifests: Any = None,
               volume_root: str = DEFAULT_VOLUME_ROOT) -> ConnectInfo:
        """Create or update the platform (see the module contract); how to connect.

        Args:
            key_dir: the key directory; created with one client `client_name` if it has no
                cluster key pair yet.
            image: the platform's image (default: the manifests').
            replicas: role (`SCALABLE`) -> count; roles left out keep their current count
                (a new Deployment gets the manifests').
            wait: seconds to wait for every Deployment to be Available (0: do not wait).
            manifests: another kustomization directory (tests); default the package's.
            volume_root: the node directory under which the disk tier's local volumes
                live (`volumes.local_volumes`)."""
        replica_counts(replicas or {}, {})           # bad input fails before any I/O
        render(manifests, namespace=self.namespace, image=image)
        keys = self._keys(key_dir, client_name)
        namespace = self.read_namespace()
        if namespace is not None and namespace.status is not None and \
                namespace.status.phase == "Terminating":
            raise KubernetesError(f"namespace {self.namespace} is being deleted; wait until it "
                                  f"is gone (`cloudburst k8s delete --wait`) and deploy again",
                                  verb="apply", resource="namespaces", name=self.namespace,
                                  namespace="")
        existing = self._replicas() if namespace is not None else {}
        counts = replica_counts(replicas or {}, existing)
        objects = render(manifests, namespace=self.namespace, image=image, replicas=counts)
        self._namespace(objects, exists=namespace is not None)
        digest = self._secrets(keys)
        self._volumes(objects, volume_root)
        for obj in apply_order(o for o in objects if o["kind"] != "Namespace"):
            if obj["kind"] in ("Deployment", "StatefulSet"):
                template = obj["spec"]["template"].setdefault("metadata", {})
                template.setdefault("annotations", {})[KEYS_HASH] = digest
            self.apply(obj)
            self.say(f"applied {obj['kind']} {self.namespace}/{obj['metadata']['name']}")
        self.prune(objects)
        names = [o["metadata"]["name"] for o in objects
                 if o["kind"] in ("Deployment", "StatefulSet")]
        if wait > 0:
            self.say(f"waiting up to {wait:g} s for {len(names)} workload(s) to be ready")
            self.wait_ready(wait, names)
            self.say("every Deployment is Available and every StatefulSet ready")
        return self.connect_info(objects, key_dir)

    def _volumes(self, objects: List[Dict[str, Any]], root: str,
                 at_least: int = 0) -> None:
        """A local volume for each claim of `LOCAL_CLASS` of each StatefulSet, for every
        ordinal up to the most it may have: its replicas, the Anna policy's `max_nodes`
        (POLICY_CONFIG in the ConfigMap: what the monitor may scale to) and `at_least`.
        Volumes that exist are left as they are (they hold data)."""
        config = next((o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"), {})
        try:
            most = int(json.loads(config.get("POLICY_CONFIG") or "{}").get("max_nodes", 0))
        except (ValueError, TypeError, AttributeError):
            most = 0
        for sts in (o for o in objects if o["kind"] == "StatefulSet"):
            count = max(sts["spec"].get("replicas", 1), most, at_least)
            for pv in local_volumes(self.namespace, sts, range(count), root):
                if self._exists(pv):
                    continue
                self.apply(pv)
                self.say(f"made local volume {pv['metadata']['name']} "
                         f"({pv['spec']['hostPath']['path']})")

    def prune(self, objects: Iterable[Mapping[str, Any]]) -> List[str]:
        """Delete the objects of ours (labelled `MANAGED_BY`) in the namespace that the
        manifests no longer hold (`prune.stale`); their names."""
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        live = []
        for api_version, kind in PRUNABLE:
            plural, _ = self._resource(api_version, kind)
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            items = self._call("list", plural, "", self._raw, "GET",
                               f"{base}/namespaces/{self.namespace}/{plural}",
                               [("labelSelector", selector)]).get("items", [])
            live += [(api_version, kind, i["metadata"]["name"]) for i in items]
        pruned = []
        for api_version, kind, name in stale(live, objects, keep=SECRETS):
            obj = {"apiVersion": api_version, "kind": kind,
                   "metadata": {"name": name, "namespace": self.namespace}}
            if self._delete(obj):
                pruned.append(f"{kind} {self.namespace}/{name}")
                self.say(f"pruned {kind} {self.namespace}/{name} (no longer in the manifests)")
        return pruned

    def _keys(self, key_dir: str, client_name: str) -> Dict[str, Dict[str, bytes]]:
        """The Secrets' contents (name -> file -> bytes), making the keys if missing."""
        if not os.path.exists(os.path.join(key_dir, CLUSTER + ".key_secret")):
            written = write_keys(key_dir, [client_name])
            self.say(f"made keys in {key_dir} ({len(written)} files; client {client_name!r})")
        return secret_files(key_dir)

    def _namespace(self, objects: List[Dict[str, Any]], exists: bool) -> None:
        if exists:
            self.say(f"namespace {self.namespace}: exists")
            return
        ns = next((o for o in objects if o["kind"] == "Namespace"),
                  {"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": self.namespace, "labels": dict(MANAGED_BY)}})
        ns["metadata"].setdefault("annotations", {})[CREATED_BY] = "cloudburst k8s deploy"
        self.apply(ns)
        self.say(f"namespace {self.namespace}: created")

    def _secrets(self, keys: Mapping[str, Mapping[str, bytes]]) -> str:
        """Apply the key Secrets; the hash of their contents."""
        digest = hashlib.sha256()
        for name, files in keys.items():
            data = {f: base64.b64encode(b).decode("ascii") for f, b in sorted(files.items())}
            for f, b in sorted(files.items()):
                digest.update(f"{name}/{f}\0".encode() + b + b"\0")
            self.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": name, "namespace": self.namespace,
                                     "labels": dict(MANAGED_BY)},
                        "data": data})
            self.say(f"applied Secret {self.namespace}/{name} ({len(files)} file(s))")
        return digest.hexdigest()

    def connect_info(self, objects: Iterable[Mapping[str, Any]], key_dir: str) -> ConnectInfo:
        """The scheduler's address (its Service's `requests` port) with the cluster's key."""
        port = next((p["port"] for o in objects
                     if o["kind"] == "Service" and o["metadata"]["name"] == SCHEDULER_SERVICE
                     for p in o["spec"]["ports"] if p.get("name") == "requests"), 6500)
        public = KeyPair.load(os.path.join(key_dir, CLUSTER + ".key")).public
        address = format_address(f"tcp://{SCHEDULER_SERVICE}.{self.namespace}.svc:{port}",
                                 public)
        clients_dir = os.path.join(key_dir, "clients")
        clients = sorted(n[:-len(".key_secret")] for n in (os.listdir(clients_dir)
                         if os.path.isdir(clients_dir) else []) if n.endswith(".key_secret"))
        return ConnectInfo(address, key_dir, clients)

    # -- scale --

    def scale(self, role: str, replicas: int, wait: float = 120.0) -> PlatformStatus:
        """Set a scalable role's replicas through the scale subresource and wait (if `wait`)
        until its Deployment is done; RoleRefused for other roles and unsafe changes
        (`check_scale`). The patch tests the count it read, so a concurrent change (an
        autoscaler) makes it fail with ApiConflict rather than be overwritten unseen."""
        if role not in SCALABLE:
            if role in REFUSED:
                raise RoleRefused(f"refusing to scale {role}: {REFUSED[role]}")
            raise RoleRefused(f"unknown role {role!r}; scalable roles are "
                              f"{', '.join(sorted(SCALABLE))}")
        name = SCALABLE[role]
        if role in STATEFUL:
            resource, read, patch_scale = ("statefulsets/scale",
                                           self.apps.read_namespaced_stateful_set_scale,
                                           self.apps.patch_namespaced_stateful_set_scale)
        else:
            resource, read, patch_scale = ("deployments/scale",
                                           self.apps.read_namespaced_deployment_scale,
                                           self.apps.patch_namespaced_deployment_scale)
        before = self._call("get", resource, name, read, name,
                            self.namespace).spec.replicas or 0
        refusal = check_scale(role, before, replicas)
        if refusal:
            raise RoleRefused(f"refusing to scale {role} ({self.namespace}/{name}) from {before} "
                              f"to {replicas}: {refusal}")
        patch = [{"op": "test", "path": "/spec/replicas", "value": before},
                 {"op": "replace", "path": "/spec/replicas", "value": replicas}]
        if role in STATEFUL and replicas > before:      # its new pods' local volumes
            self._volumes(render(None, namespace=self.namespace), DEFAULT_VOLUME_ROOT,
                          at_least=replicas)
        try:
            self._call("patch", resource, name, patch_scale, name, self.namespace,
                       patch if before else patch[1:],
                       _content_type="application/json-patch+json")
        except KubernetesError as e:
            if e.status != 422:
                raise
            raise ApiConflict(f"patch {resource} {self.namespace}/{name}: its replicas "
                              f"changed from {before} while scaling (an autoscaler?); run the "
                              f"command again", verb="patch", resource=resource,
                              name=name, namespace=self.namespace, status=422,
                              reason=e.reason) from e
        self.say(f"{'StatefulSet' if role in STATEFUL else 'Deployment'} "
                 f"{self.namespace}/{name}: replicas {before} -> {replicas}")
        if wait > 0:
            return self.wait_ready(wait, [name])
        return self.status()

    # -- delete --

    def delete(self, *, keep_namespace: bool = False, wait: float = 120.0,
               manifests: Any = None) -> List[str]:
        """Remove what deploy created (see the module contract); the objects deleted."""
        namespace = self.read_namespace()
        if namespace is None:
            self.say(f"namespace {self.namespace} does not exist; nothing to delete")
            return []
        objects = [o for o in render(manifests, namespace=self.namespace)
                   if o["kind"] != "Namespace"]
        objects += [{"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": n, "namespace": self.namespace}} for n in SECRETS]
        gone: List[Dict[str, Any]] = []
        deleted: List[str] = []
        for obj in reversed(apply_order(objects)):
            label = f"{obj['kind']} {self.namespace}/{obj['metadata']['name']}"
            if self._delete(obj):
                deleted.append(label)
                self.say(f"deleting {label}")
            gone.append(obj)
        created = (namespace.metadata.annotations or {}).get(CREATED_BY)
        ns_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        if created and not keep_namespace:
            if self._delete(ns_obj):
                deleted.append(f"Namespace {self.namespace}")
                self.say(f"deleting Namespace {self.namespace} (deploy created it)")
            gone.append(ns_obj)
        elif created:
            self.say(f"keeping Namespace {self.namespace} (--keep-namespace)")
        else:
            self.say(f"keeping Namespace {self.namespace} (it existed before deploy)")
        if wait > 0:
            self._wait_gone(gone, wait)
            self.say("deleted")
        return deleted

    def _wait_gone(self, objects: List[Dict[str, Any]], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        left = list(objects)
        while True:
            left = [o for o in left if self._exists(o)]
            if not left:
                return
            if time.monotonic() >= deadline:
                names = [f"{o['kind']} {o['metadata'].get('namespace', '')}/"
                         f"{o['metadata']['name']}".replace(" /", " ") for o in left]
                pods = [p for p in self.status().pods] if self.read_namespace() else []
                raise WaitTimeout("the platform's objects to be deleted", timeout,
                                  names + [f"pod {p.name} still exists ({p.phase}"
                                           f"{', terminating' if p.terminating else ''})"
                                           for p in pods])
            time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))
