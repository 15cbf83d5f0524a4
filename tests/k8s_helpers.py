"""Kubernetes helpers shared by the fast tier (tests/test_k8s_*.py, against the control plane of
tests/k8s_controlplane.py) and the real-cluster tier (scripts/k8s/real_*.py, which put tests/
on their path): the pods of a workload, whether a pod is Ready, a workload's replica count,
and waiting with a deadline; plus the repository's least-privilege Role applied in a test
namespace and Deployments whose pods kwok makes Ready. The control plane and namespace
fixtures (`cp`, `ns`) are in conftest.py.

`target` is anything with `api_client()` (a `ControlPlane`: its admin client) or an ApiClient.
"""
import subprocess
import time
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

RBAC = Path(__file__).resolve().parent.parent / "k8s" / "rbac" / "cluster-manager.yaml"


def apply_rbac(cp, ns, docs=None):
    """Create the ServiceAccount, Role and RoleBinding of `docs` (default: the repository's
    least-privilege YAML) in `ns`; the ServiceAccount's ApiClient."""
    docs = docs if docs is not None else list(yaml.safe_load_all(RBAC.read_text()))
    rbac = client.RbacAuthorizationV1Api(cp.api_client())
    account = None
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            account = doc["metadata"]["name"]
        elif doc["kind"] == "Role":
            rbac.create_namespaced_role(ns, doc, _request_timeout=10)
        elif doc["kind"] == "RoleBinding":
            doc = dict(doc, subjects=[dict(s, namespace=ns) for s in doc["subjects"]])
            rbac.create_namespaced_role_binding(ns, doc, _request_timeout=10)
    return cp.api_client(cp.service_account_token(ns, account))


def role(name, rules):
    return [{"kind": "ServiceAccount", "metadata": {"name": name}},
            {"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1",
             "metadata": {"name": name}, "rules": rules},
            {"kind": "RoleBinding", "apiVersion": "rbac.authorization.k8s.io/v1",
             "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": name}]}]


def deployment(cp, ns, name, tier, replicas, node_selector=None):
    labels = {"app": "anna", "tier": tier, "deployment": name}
    body = client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas, selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    termination_grace_period_seconds=30, node_selector=node_selector,
                    automount_service_account_token=False,
                    containers=[client.V1Container(name="node", image="anna:test",
                                                   image_pull_policy="Never")]))))
    client.AppsV1Api(cp.api_client()).create_namespaced_deployment(ns, body, _request_timeout=10)


# The label that names a pod's workload: `deployment(...)` below sets `deployment=NAME`; the
# manifests in k8s/base set `app.kubernetes.io/name=NAME`.
TEST_LABEL = "deployment"
APP_LABEL = "app.kubernetes.io/name"


def _api(target):
    return target.api_client() if hasattr(target, "api_client") else target


def statefulset(cp, ns, name, tier, replicas):
    """A StatefulSet `name` (pods `name-0`, `name-1`, ...; kwok makes them Ready), labelled
    like `deployment(...)`'s pods."""
    labels = {"app": "anna", "tier": tier, "deployment": name}
    body = client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1StatefulSetSpec(
            replicas=replicas, service_name=name, pod_management_policy="Parallel",
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    termination_grace_period_seconds=30,
                    automount_service_account_token=False,
                    containers=[client.V1Container(name="node", image="anna:test",
                                                   image_pull_policy="Never")]))))
    client.AppsV1Api(cp.api_client()).create_namespaced_stateful_set(ns, body,
                                                                      _request_timeout=10)


def replicas(target, ns, name, kind="Deployment"):
    """The replica count Deployment (or `kind` StatefulSet) `name` asks for (its scale
    subresource)."""
    apps = client.AppsV1Api(_api(target))
    read = (apps.read_namespaced_stateful_set_scale if kind == "StatefulSet"
            else apps.read_namespaced_deployment_scale)
    return read(name, ns, _request_timeout=10).spec.replicas or 0


def pods(target, ns, name, label=TEST_LABEL):
    """The live (not terminating) pods of workload `name` (`label=name`), oldest first."""
    items = client.CoreV1Api(_api(target)).list_namespaced_pod(
        ns, label_selector=f"{label}={name}", _request_timeout=10).items
    return sorted((p for p in items if p.metadata.deletion_timestamp is None),
                  key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))


def is_ready(pod):
    """Whether a V1Pod's Ready condition is True."""
    return any(c.type == "Ready" and c.status == "True"
               for c in ((pod.status.conditions if pod.status else None) or []))


def wait_for(what, check, timeout, interval=0.5, say=None):
    """Call `check()` until it returns something true and return that; RuntimeError naming
    `what` and the last error once `timeout` seconds have passed. A probe that raises (an API
    or kubectl error, a check of the scripts) counts as "not yet". `say`, when given, gets one progress line."""
    deadline = time.monotonic() + timeout
    start = time.monotonic()
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                if say is not None:
                    say(f"{what}: ok after {time.monotonic() - start:.1f} s")
                return value
        except subprocess.CalledProcessError as e:
            last = f"{e.cmd[-4:]}: {(e.stderr or '').strip()[-300:]}"
        except ApiException as e:
            last = f"HTTP {e.status}: {e.reason}"
        except Exception as e:  # noqa: BLE001 - a failed probe is "not yet" (named at the end)
            last = e
        time.sleep(interval)
    raise RuntimeError(f"{what}: not done within {timeout} s (last error: {last})")


def poll_until(manager, done, timeout=60.0):
    """Poll until `done(events so far)`; every event seen. Fails at the deadline."""
    deadline = time.monotonic() + timeout
    events = []
    while True:
        events += manager.poll()
        if done(events):
            return events
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"not done within {timeout} s; events: {events}"
        manager.wait(min(remaining, 0.5))


def write_kubeconfig(cp, api_client, path):
    """A kubeconfig file for the control plane with `api_client`'s bearer token (a
    ServiceAccount's, from `apply_rbac`)."""
    token = api_client.configuration.api_key["BearerToken"]
    return cp.write_kubeconfig(path, token)
