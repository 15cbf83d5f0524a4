"""Helpers for the Kubernetes fast tier (tests/test_k8s_*.py): the repository's least-privilege
Role applied in a test namespace, Deployments whose pods kwok makes Ready, and reads through
the admin client. The control plane and namespace fixtures (`cp`, `ns`) are in conftest.py."""
import time
from pathlib import Path

import yaml
from kubernetes import client

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


def replicas(cp, ns, name):
    return client.AppsV1Api(cp.api_client()).read_namespaced_deployment_scale(
        name, ns, _request_timeout=10).spec.replicas or 0


def pods(cp, ns, name):
    items = client.CoreV1Api(cp.api_client()).list_namespaced_pod(
        ns, label_selector=f"deployment={name}", _request_timeout=10).items
    return sorted((p for p in items if p.metadata.deletion_timestamp is None),
                  key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))


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
