"""`cloudburst k8s` against a real kube-apiserver (fast tier: kwok makes pods Ready, no
kubelet, so Deployments become Available but no process runs). Skipped unless the control
plane is built: `scripts/test_k8s.sh` builds it and runs this file. The command runs in this
process (`cloudburst.cli.main`), except where its exit status and stderr are the point."""
import base64
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cloudburst.cli import main
from k8s.manifests import render
from k8s.deploy import CREATED_BY, SECRETS
from runtime.auth import KeyPair, write_keys
from waiting import poll_until

k8s_controlplane = pytest.importorskip("k8s_controlplane")
from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "registry.example.com/cloudburst:1.2"

# the Kubernetes fast tier: scripts/test_k8s.sh runs it (a slow tier), scripts/test.sh leaves it out
pytestmark = [pytest.mark.timeout(180), pytest.mark.k8s_tier]


# `cp` (a started control plane, one per module) is tests/conftest.py's.


@pytest.fixture
def kubeconfig(cp, tmp_path):
    return str(cp.write_kubeconfig(tmp_path / "admin.kubeconfig"))


def k8s(capsys, *argv):
    """Run `cloudburst k8s ARGV...`; (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main(["k8s", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def fresh_ns():
    return f"cb-{uuid.uuid4().hex[:8]}"


def deployments(cp, ns):
    return {d.metadata.name: d for d in client.AppsV1Api(cp.api_client())
            .list_namespaced_deployment(ns, _request_timeout=10).items}


def statefulsets(cp, ns):
    return {d.metadata.name: d for d in client.AppsV1Api(cp.api_client())
            .list_namespaced_stateful_set(ns, _request_timeout=10).items}


def test_deploy_status_scale_redeploy_delete(cp, kubeconfig, tmp_path, capsys):
    ns, keys = fresh_ns(), tmp_path / "keys"
    common = ["--kubeconfig", kubeconfig, "--namespace", ns]
    code, out, err = k8s(capsys, "deploy", *common, "--image", IMAGE, "--key-dir", str(keys),
                         "--client", "alice", "--executors", "3", "--wait", "60")
    assert code == 0, err
    assert "every Deployment is Available" in out
    # the key directory was made with the client, and the address carries the cluster's key
    cluster_key = KeyPair.load(str(keys / "cluster.key"))
    assert (keys / "clients" / "alice.key_secret").exists()
    assert f"tcp://cloudburst-scheduler.{ns}.svc:6500#k={cluster_key.public_hex}" in out
    assert "client:alice" in out
    core, api = client.CoreV1Api(cp.api_client()), cp.api_client()
    namespace = core.read_namespace(ns, _request_timeout=10)
    assert CREATED_BY in (namespace.metadata.annotations or {})
    # the Secrets hold the key directory's files
    secret = core.read_namespaced_secret(SECRETS[0], ns, _request_timeout=10)
    assert base64.b64decode(secret.data["cluster.key_secret"]) == \
        (keys / "cluster.key_secret").read_bytes()
    assert base64.b64decode(secret.data["function.key_secret"]) == \
        (keys / "function.key_secret").read_bytes()      # what executor nodes hand workers
    authorized = core.read_namespaced_secret(SECRETS[1], ns, _request_timeout=10)
    assert set(authorized.data) == {"alice.key"}
    # every object of the manifests exists, with the image override and the replica count
    wanted = render(namespace=ns)
    deps = deployments(cp, ns)
    assert set(deps) == {o["metadata"]["name"] for o in wanted if o["kind"] == "Deployment"}
    for d in deps.values():
        assert {c.image for c in d.spec.template.spec.containers} == {IMAGE}, d.metadata.name
        assert (d.status.available_replicas or 0) == d.spec.replicas, d.metadata.name
    assert deps["cloudburst-executor"].spec.replicas == 3
    sets = statefulsets(cp, ns)
    assert set(sets) == {o["metadata"]["name"] for o in wanted if o["kind"] == "StatefulSet"}
    for s in sets.values():
        assert (s.status.ready_replicas or 0) == s.spec.replicas >= 1, s.metadata.name
    assert sets["anna-routing"].spec.replicas == sets["cloudburst-scheduler"].spec.replicas == 2
    # the disk tier's claim is bound to the local volume made for its ordinal, and there is
    # one for every ordinal the Anna policy may scale the tier to (max_nodes)
    claim = core.read_namespaced_persistent_volume_claim("data-anna-disk-0", ns,
                                                         _request_timeout=10)
    assert claim.status.phase == "Bound"
    assert claim.spec.volume_name == f"cloudburst-{ns}-data-anna-disk-0"
    volumes = [v for v in core.list_persistent_volume(_request_timeout=10).items
               if v.spec.claim_ref is not None and v.spec.claim_ref.namespace == ns]
    max_nodes = json.loads(next(o for o in wanted if o["kind"] == "ConfigMap")["data"]
                           ["POLICY_CONFIG"])["max_nodes"]
    assert sorted(v.spec.claim_ref.name for v in volumes) == sorted(
        f"data-anna-disk-{i}" for i in range(max_nodes))
    assert {v.spec.persistent_volume_reclaim_policy for v in volumes} == {"Retain"}
    rbac = client.RbacAuthorizationV1Api(api)
    read = {"Namespace": lambda name, _: core.read_namespace(name, _request_timeout=10),
            "Service": core.read_namespaced_service,
            "ConfigMap": core.read_namespaced_config_map,
            "ServiceAccount": core.read_namespaced_service_account,
            "Role": rbac.read_namespaced_role, "RoleBinding": rbac.read_namespaced_role_binding,
            "Deployment": client.AppsV1Api(api).read_namespaced_deployment,
            "StatefulSet": client.AppsV1Api(api).read_namespaced_stateful_set,
            "PodDisruptionBudget": client.PolicyV1Api(api).read_namespaced_pod_disruption_budget,
            "StorageClass": lambda name, _: client.StorageV1Api(api).read_storage_class(
                name, _request_timeout=10)}
    for o in wanted:                 # every object of the manifests, whatever they list
        live = read[o["kind"]](o["metadata"]["name"], ns)
        assert live.metadata.labels["app.kubernetes.io/managed-by"] == "cloudburst-k8s"
    assert rbac.read_namespaced_role_binding("anna-cluster-manager", ns).subjects[0].namespace \
        == ns

    # status: text and JSON agree with the API
    code, out, err = k8s(capsys, "status", *common)
    assert code == 0, err
    assert f"namespace {ns}: ready" in out and "cloudburst-executor" in out
    code, out, _ = k8s(capsys, "status", *common, "--json")
    status = json.loads(out)
    assert code == 0 and status["ready"] is True
    assert {d["name"]: d["ready"] for d in status["deployments"]} == \
        {n: d.spec.replicas for n, d in {**deps, **sets}.items()}
    live = [p for p in status["pods"] if not p["terminating"]]
    assert len(live) == sum(d.spec.replicas for d in {**deps, **sets}.values())
    assert all(p["ready"] and p["node"] == k8s_controlplane.NODE_NAME and p["deployment"]
               for p in live)

    # scale: the replicas change and the command waits for them
    code, out, err = k8s(capsys, "scale", *common, "memory", "2", "--wait", "60")
    assert code == 0, err
    memory = deployments(cp, ns)["anna-memory"]
    assert memory.spec.replicas == 2 and memory.status.available_replicas == 2
    assert "anna-memory: 2/2 ready" in out
    code, _, err = k8s(capsys, "scale", *common, "memory", "0")
    assert code == 1 and f"refusing to scale memory ({ns}/anna-memory) from 2 to 0" in err
    assert deployments(cp, ns)["anna-memory"].spec.replicas == 2
    code, _, err = k8s(capsys, "scale", *common, "scheduler", "2")
    assert code == 1 and "refusing to scale scheduler" in err and "StatefulSet" in err
    assert statefulsets(cp, ns)["cloudburst-scheduler"].spec.replicas == 2
    # the disk tier's StatefulSet scales through its own scale subresource
    code, out, err = k8s(capsys, "scale", *common, "disk", "2", "--wait", "60")
    assert code == 0, err
    assert statefulsets(cp, ns)["anna-disk"].spec.replicas == 2 and "anna-disk: 2/2 ready" in out

    # objects of ours that the manifests no longer hold are pruned by the next deploy; what
    # is not ours (no label) is left alone
    for name, labels in (("cloudburst-dropped", {"app.kubernetes.io/managed-by":
                                                 "cloudburst-k8s"}), ("users-own", {})):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, labels=labels)), _request_timeout=10)

    # re-deploy: idempotent, keeps the scaled counts, changes nothing it owns
    before = core.read_namespaced_config_map("cloudburst-config", ns, _request_timeout=10)
    code, out, err = k8s(capsys, "deploy", *common, "--image", IMAGE, "--key-dir", str(keys),
                         "--wait", "60")
    assert code == 0, err
    assert "namespace " + ns + ": exists" in out
    after = core.read_namespaced_config_map("cloudburst-config", ns, _request_timeout=10)
    assert after.metadata.resource_version == before.metadata.resource_version
    again = deployments(cp, ns)
    assert again["anna-memory"].spec.replicas == 2
    assert again["cloudburst-executor"].spec.replicas == 3
    assert statefulsets(cp, ns)["anna-disk"].spec.replicas == 2
    assert again["anna-monitor"].metadata.generation == deps["anna-monitor"].metadata.generation
    assert f"pruned ConfigMap {ns}/cloudburst-dropped" in out
    names = {c.metadata.name for c in core.list_namespaced_config_map(
        ns, _request_timeout=10).items}
    assert "cloudburst-dropped" not in names and {"users-own", "cloudburst-config"} <= names

    # a new client: re-deploy updates the Secret and restarts the pods (keys are read at start)
    write_keys(str(keys), ["bob"], add_clients=True)
    code, out, err = k8s(capsys, "deploy", *common, "--image", IMAGE, "--key-dir", str(keys),
                         "--wait", "60")
    assert code == 0, err
    authorized = core.read_namespaced_secret(SECRETS[1], ns, _request_timeout=10)
    assert set(authorized.data) == {"alice.key", "bob.key"}
    rolled = deployments(cp, ns)
    generation = deps["anna-monitor"].metadata.generation
    assert rolled["anna-monitor"].metadata.generation == generation + 1
    assert statefulsets(cp, ns)["anna-routing"].metadata.generation == \
        sets["anna-routing"].metadata.generation + 1
    assert all((d.status.updated_replicas or 0) == d.spec.replicas for d in rolled.values())

    # delete: everything, and the namespace deploy created
    code, out, err = k8s(capsys, "delete", *common, "--wait", "60")
    assert code == 0, err
    with pytest.raises(ApiException) as info:
        core.read_namespace(ns, _request_timeout=10)
    assert info.value.status == 404


def test_delete_keeps_a_namespace_that_existed_and_a_timeout_names_the_condition(
        cp, kubeconfig, tmp_path, capsys):
    ns = fresh_ns()
    cp.create_namespace(ns)
    common = ["--kubeconfig", kubeconfig, "--namespace", ns]
    code, _, err = k8s(capsys, "deploy", *common, "--key-dir", str(tmp_path / "keys"),
                       "--wait", "60")
    assert code == 0, err
    # a disk pod that can never be scheduled: scale waits, then names the Deployment and why
    client.AppsV1Api(cp.api_client()).patch_namespaced_stateful_set(
        "anna-disk", ns, {"spec": {"template": {"spec": {"nodeSelector": {"no-such": "node"}}}}},
        _request_timeout=10)
    code, _, err = k8s(capsys, "scale", *common, "disk", "2", "--wait", "3")
    assert code == 1
    assert err.count("\n") == 1 and "timed out after 3 s" in err
    assert f"{ns}/anna-disk" in err and "PodScheduled" in err
    code, out, _ = k8s(capsys, "status", *common)
    assert code == 3 and "not ready:" in out and "anna-disk" in out.split("not ready:")[1]
    code, out, err = k8s(capsys, "delete", *common, "--wait", "60")
    assert code == 0, err
    assert f"keeping Namespace {ns} (it existed before deploy)" in out
    core = client.CoreV1Api(cp.api_client())
    assert core.read_namespace(ns, _request_timeout=10).status.phase == "Active"
    assert deployments(cp, ns) == {} and statefulsets(cp, ns) == {}
    assert not [s for s in core.list_namespaced_secret(ns, _request_timeout=10).items
                if s.metadata.name in SECRETS]
    assert not core.list_namespaced_pod(ns, _request_timeout=10).items


def allowed(call):
    """True if `call()` is not refused with 403 (RBAC changes take effect asynchronously)."""
    try:
        call()
    except ApiException as e:
        if e.status != 403:
            raise
        return False
    return True


def test_rbac_denials_name_the_object(cp, tmp_path, capsys):
    ns = fresh_ns()
    cp.create_namespace(ns)
    rbac = client.RbacAuthorizationV1Api(cp.api_client())
    rbac.create_namespaced_role(ns, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "viewer"},
        "rules": [{"apiGroups": ["", "apps"], "resources": ["pods", "deployments",
                                                           "deployments/scale", "statefulsets",
                                                           "statefulsets/scale"],
                   "verbs": ["get", "list"]}]}, _request_timeout=10)
    rbac.create_namespaced_role_binding(ns, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}]},
        _request_timeout=10)
    token = cp.service_account_token(ns, "viewer")
    kubeconfig = str(cp.write_kubeconfig(tmp_path / "viewer.kubeconfig", token))
    common = ["--kubeconfig", kubeconfig, "--namespace", ns]
    apps = client.AppsV1Api(cp.api_client(token))
    poll_until(lambda: allowed(lambda: apps.list_namespaced_deployment(ns, _request_timeout=10)),
               timeout=10, what="the RoleBinding to take effect")
    code, out, err = k8s(capsys, "status", *common)          # allowed: reading
    assert code == 3 and f"namespace {ns}: no Deployments" in out, err
    code, _, err = k8s(capsys, "deploy", *common, "--key-dir", str(tmp_path / "keys"))
    assert code == 1 and err.count("\n") == 1
    assert f"get namespaces /{ns}: forbidden (403)" in err
    # allowed to read namespaces, but not to write in this one: the first write is named
    rbac.create_cluster_role({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": f"{ns}-ns-reader"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]},
        _request_timeout=10)
    rbac.create_cluster_role_binding({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{ns}-ns-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"{ns}-ns-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns}]},
        _request_timeout=10)
    viewer = client.CoreV1Api(cp.api_client(token))
    poll_until(lambda: allowed(lambda: viewer.read_namespace(ns, _request_timeout=10)),
               timeout=10, what="the ClusterRoleBinding to take effect")
    code, _, err = k8s(capsys, "deploy", *common, "--key-dir", str(tmp_path / "keys"))
    assert code == 1 and err.count("\n") == 1
    assert f"apply secrets {ns}/cloudburst-cluster-key: forbidden (403)" in err
    client.AppsV1Api(cp.api_client()).create_namespaced_deployment(
        ns, next(o for o in render(namespace=ns, replicas={"cloudburst-executor": 0})
                 if o["metadata"]["name"] == "cloudburst-executor" and o["kind"] == "Deployment"),
        _request_timeout=10)
    code, _, err = k8s(capsys, "scale", *common, "executor", "1")
    assert code == 1
    assert f"patch deployments/scale {ns}/cloudburst-executor: forbidden (403)" in err


def run_cli(*argv, timeout=30):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "cloudburst.cli", "k8s", *argv],
                          capture_output=True, text=True, timeout=timeout, env=env)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_and_bad_kubeconfigs_end_in_one_line(cp, tmp_path, capsys):
    unreachable = tmp_path / "gone.kubeconfig"
    cp.write_kubeconfig(unreachable)
    unreachable.write_text(unreachable.read_text().replace(cp.server,
                                                           f"https://127.0.0.1:{free_port()}"))
    code, _, err = k8s(capsys, "status", "--kubeconfig", str(unreachable), "--namespace", "x")
    assert code == 1 and err.count("\n") == 1
    assert "list deployments in x: the API could not be reached" in err
    good = cp.write_kubeconfig(tmp_path / "good.kubeconfig")
    code, _, err = k8s(capsys, "status", "--kubeconfig", str(good), "--context", "nope")
    assert code == 1 and err.count("\n") == 1 and "context 'nope'" in err
    # as a command: exit status 1, one line, no traceback, nothing done
    garbled = tmp_path / "garbled.kubeconfig"
    garbled.write_text("clusters: [this is not: a kubeconfig\n")
    out = run_cli("deploy", "--kubeconfig", str(garbled), "--key-dir", str(tmp_path / "k"))
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"cloudburst k8s deploy: kubeconfig {garbled}")
    assert not (tmp_path / "k").exists()          # nothing done before the config is read
