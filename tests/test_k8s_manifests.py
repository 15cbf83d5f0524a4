"""The manifests in k8s/ (`kubectl apply -k k8s/`) and the pods' entrypoint (k8s.entrypoint).

Always run: every Deployment starts `k8s.entrypoint` with a real role, has the probes and
resources it should, and the command the entrypoint builds from the ConfigMap parses with the
processes' own configuration classes. With the local control plane built
(scripts/k8s/build.sh), the rendered objects are created in a real kube-apiserver (which
validates them) and every Deployment becomes Available (kwok makes pods Ready; no process
runs). With kubectl present, `kubectl kustomize k8s` must render the same objects.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from k8s.manifests import render as _render
from k8s import entrypoint

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
REASON = ("the Kubernetes control plane is not built; run scripts/k8s/build.sh (10-20 min the "
          "first time on 2 cores, cached after) to validate the manifests against it")


def render(directory: Path = K8S, namespace=None):
    """The objects of `kubectl kustomize directory`, as `cloudburst k8s deploy` renders them
    (k8s.manifests; test_kubectl_kustomize_renders_the_same_objects checks the
    two agree)."""
    return _render(directory, namespace=namespace)


def deployments():
    """Every workload: the Deployments and the StatefulSets (routing, schedulers, disk)."""
    return {o["metadata"]["name"]: o for o in render()
            if o["kind"] in ("Deployment", "StatefulSet")}


def configmap():
    (cm,) = [o for o in render() if o["kind"] == "ConfigMap"]
    return cm["data"]


def test_every_role_has_a_deployment_with_probes_resources_and_keys():
    roles = {}
    for name, d in deployments().items():
        spec = d["spec"]["template"]["spec"]
        for c in spec["containers"]:
            assert c["command"][:3] == ["python", "-m", "k8s.entrypoint"], name
            role = roles[(name, c["name"])] = c["command"][3]
            assert role in entrypoint.ROLES
            assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
            if role not in ("monitor", "executor-autoscaler"):    # nothing connects to them
                assert "readinessProbe" in c and "livenessProbe" in c, name
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            if role != "workers":         # the one container without the cluster's keys
                assert {"/keys", "/keys/authorized"} <= mounts, name
        assert spec["securityContext"]["runAsNonRoot"] is True
    assert sorted(roles.values()) == sorted(["routing", "node", "node", "monitor", "scheduler",
                                             "executor", "workers", "executor-autoscaler"])
    # the Anna tiers' selectors must not overlap (KubernetesClusterManager)
    sel = [deployments()[n]["spec"]["selector"]["matchLabels"] for n in ("anna-memory", "anna-disk")]
    assert sel[0] != sel[1]


def test_function_code_runs_in_a_container_without_the_cluster_secret(keys):
    """The executor pod's `workers` container (where functions run) mounts no volume that
    holds the cluster's secret key, nothing at /keys, runs as another uid than the node,
    without capabilities or privilege escalation; the Secret it mounts, as `cloudburst k8s
    deploy` writes it, holds only the function pair and the cluster's public key."""
    from k8s.deploy import SECRETS, secret_files
    spec = deployments()["cloudburst-executor"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    node, workers = containers["executor"], containers["workers"]
    assert workers["command"][3] == "workers"
    volumes = {v["name"]: v for v in spec["volumes"]}
    secret_of = {n: v["secret"]["secretName"] for n, v in volumes.items() if "secret" in v}
    mounted = [m["name"] for m in workers["volumeMounts"]]
    assert not any(m["mountPath"] == "/keys" or m["mountPath"].startswith("/keys/")
                   for m in workers["volumeMounts"])
    assert {secret_of[n] for n in mounted if n in secret_of} == {"cloudburst-function-key"}
    assert "cloudburst-cluster-key" in {secret_of[m["name"]] for m in node["volumeMounts"]
                                        if m["name"] in secret_of}
    files = secret_files(str(keys))
    assert set(files[SECRETS[2]]) == {"function.key", "function.key_secret", "cluster.key"}
    assert "cluster.key_secret" in files[SECRETS[0]]
    uid = lambda c: c.get("securityContext", {}).get("runAsUser",   # noqa: E731
                                                     spec["securityContext"]["runAsUser"])
    assert uid(workers) != uid(node) and uid(workers) != 0
    ctx = workers["securityContext"]
    assert ctx["runAsNonRoot"] and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"]["drop"] == ["ALL"] and ctx["readOnlyRootFilesystem"]
    # both containers agree on the worker host's port
    port = lambda c: {e["name"]: e.get("value") for e in c["env"]}["WORKER_HOST_PORT"]  # noqa
    assert port(node) == port(workers)


def test_anna_grace_period_covers_the_leave_timeout():
    leave = float(configmap()["LEAVE_TIMEOUT"])
    for name in ("anna-memory", "anna-disk"):
        grace = deployments()[name]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > leave + 5, name


def test_monitor_runs_as_the_cluster_manager_service_account():
    spec = deployments()["anna-monitor"]["spec"]["template"]["spec"]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render()}
    assert spec["serviceAccountName"] == "anna-cluster-manager"
    assert {("ServiceAccount", "anna-cluster-manager"), ("Role", "anna-cluster-manager"),
            ("RoleBinding", "anna-cluster-manager")} <= kinds


def pod_env(deployment, tmp_keys, container=0):
    """The environment k8s.entrypoint sees in one of `deployment`'s pods."""
    c = deployments()[deployment]["spec"]["template"]["spec"]["containers"][container]
    env = dict(configmap())
    env.update(POD_NAME=f"{deployment}-abc12", POD_IP="10.0.0.7", POD_NAMESPACE="cloudburst",
               KEY_DIR=str(tmp_keys))
    for item in c.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "configMapKeyRef" in item.get("valueFrom", {}):
            env[item["name"]] = configmap()[item["valueFrom"]["configMapKeyRef"]["key"]]
    return c["command"][3], env


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    subprocess.run([sys.executable, "-m", "cloudburst.cli", "keys", str(directory), "--client",
                    "alice"], check=True, capture_output=True, cwd=ROOT)
    return directory


@pytest.mark.parametrize("autoscale", ["false", "true"])
def test_the_entrypoint_builds_configurations_the_processes_accept(keys, autoscale):
    from anna_core.config import NodeConfig as AnnaNodeConfig
    from executor.config import NodeConfig as ExecutorNodeConfig
    from scheduler.config import SchedulerConfig
    from executor.config import WorkerHostConfig
    parsers = {"anna_core.node": AnnaNodeConfig.from_json, "scheduler": SchedulerConfig.from_json,
               "executor": ExecutorNodeConfig.from_json,
               "executor.workerhost": WorkerHostConfig.from_json}
    containers = [(name, i) for name, d in deployments().items()
                  for i in range(len(d["spec"]["template"]["spec"]["containers"]))]
    for name, container in containers:
        role, env = pod_env(name, keys, container)
        if role == "workers":
            env["FUNCTION_KEY_DIR"] = str(keys)
        env["AUTOSCALE"] = autoscale
        if autoscale == "false" and role not in ("monitor", "executor-autoscaler"):
            continue              # the same command either way
        argv = entrypoint.command(role, env, [])
        module = argv[argv.index("-m") + 1]
        if "--config" in argv:
            config = parsers[module](argv[argv.index("--config") + 1])
            assert config.key_dir == str(keys)
            if role == "executor":        # its workers run in the pod's `workers` container
                assert config.worker_host == "tcp://127.0.0.1:7100"
            if role == "workers":
                assert (config.ip, config.port) == ("127.0.0.1", 7100)
                continue
        text = " ".join(argv)
        if role == "executor-autoscaler":
            for i in (0, 1):      # every scheduler by its stable name, each with the key
                assert (f"tcp://cloudburst-scheduler-{i}.cloudburst-scheduler-pods:6500#k="
                        in text), name
        elif role != "routing":
            for i in (0, 1):      # every routing by its stable name, each with the key
                assert f"tcp://anna-routing-{i}.anna-routing-pods:6450#k=" in text, name
        # the flags are real: the process' own parser accepts them
        out = subprocess.run(argv[:3] + ["--help"], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
        for flag in (a for a in argv[3:] if a.startswith("--")):
            assert flag in out.stdout, (name, flag)


def test_the_autoscalers_run_as_the_cluster_manager_one_at_a_time():
    for name in ("anna-monitor", "cloudburst-autoscaler"):
        d = deployments()[name]
        spec = d["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == "anna-cluster-manager", name
        assert d["spec"]["replicas"] in (0, 1), name
        assert d["spec"]["strategy"] == {"type": "Recreate"}, name   # never two acting
        (c,) = spec["containers"]
        env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
               for e in c["env"]}
        assert env["POD_NAMESPACE"] == "metadata.namespace", name
    # executor autoscaling is off until the Deployment is scaled to 1; Anna's until AUTOSCALE
    assert deployments()["cloudburst-autoscaler"]["spec"]["replicas"] == 0
    assert configmap()["AUTOSCALE"] == "false"
    # the pods that scale nothing get no API credentials
    for name, d in deployments().items():
        if name not in ("anna-monitor", "cloudburst-autoscaler"):
            assert d["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, name


def test_the_role_allows_scaling_exactly_the_configured_deployments():
    (role,) = [o for o in render() if o["kind"] == "Role"]
    rules = {tuple(r["resources"]): r for r in role["rules"]}
    assert set(rules) == {("pods",), ("deployments/scale",), ("statefulsets/scale",)}
    assert sorted(rules[("pods",)]["verbs"]) == ["get", "list", "patch", "watch"]
    assert "resourceNames" not in rules[("pods",)]      # the ReplicaSet names pods
    cm = configmap()
    # the disk tier is a StatefulSet, named with its kind ("statefulset/anna-disk")
    wanted = {cm["MEMORY_DEPLOYMENT"], cm["DISK_DEPLOYMENT"], cm["EXECUTOR_DEPLOYMENT"]}
    kind_of = {"deployments/scale": "Deployment", "statefulsets/scale": "StatefulSet"}
    allowed = set()
    for resource, kind in kind_of.items():
        scale = rules[(resource,)]
        assert sorted(scale["verbs"]) == ["get", "patch"]
        for name in scale["resourceNames"]:
            assert deployments()[name]["kind"] == kind, name
            allowed.add(name if kind == "Deployment" else f"statefulset/{name}")
    assert allowed == wanted


def test_pods_are_given_up_on_only_after_their_grace_period():
    leave = float(configmap()["POD_LEAVE_TIMEOUT"])
    for name in ("anna-memory", "anna-disk", "cloudburst-executor"):
        grace = deployments()[name]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert leave > grace, name


def test_the_entrypoint_maps_autoscale_settings_onto_the_monitor():
    from anna_core.monitor import kubernetes_manager, parse_args, policy_of
    env = dict(configmap(), POD_NAMESPACE="cb", POD_IP="10.1.2.3", KEY_DIR="")
    observe = entrypoint.command("monitor", env, [])
    assert "--autoscale" not in observe and "--kubernetes-namespace" not in observe
    args = parse_args(observe[3:])
    assert kubernetes_manager(args) is None            # observing: no API client at all
    assert args.ip == "10.1.2.3"      # routing and the nodes answer the pod's own address
    on = entrypoint.command("monitor", dict(env, AUTOSCALE="True"), [])
    args = parse_args(on[3:])
    assert args.autoscale and args.kubernetes_namespace == "cb"
    assert (args.memory_deployment, args.disk_deployment) == ("anna-memory",
                                                              "statefulset/anna-disk")
    assert (args.pod_startup_timeout, args.pod_leave_timeout) == (120.0, 60.0)
    policy = policy_of(args)
    knobs = json.loads(configmap()["POLICY_CONFIG"])
    assert all(getattr(policy, k) == v for k, v in knobs.items())
    assert policy.monitoring_period == float(configmap()["REPORT_PERIOD"])
    no_disk = parse_args(entrypoint.command("monitor", dict(env, AUTOSCALE="1",
                                                            DISK_DEPLOYMENT=""), [])[3:])
    assert no_disk.disk_deployment == ""
    for bad, message in ((dict(AUTOSCALE="maybe"), "AUTOSCALE must be true or false"),
                         (dict(AUTOSCALE="true", POD_NAMESPACE=""), "POD_NAMESPACE"),
                         (dict(POLICY_CONFIG="[1]"), "POLICY_CONFIG must be a JSON object"),
                         (dict(AUTOSCALE="true", POD_LEAVE_TIMEOUT="-3"),
                          "POD_LEAVE_TIMEOUT must be a positive number")):
        with pytest.raises(entrypoint.EntrypointError, match=message):
            entrypoint.command("monitor", dict(env, **bad), [])
    # knobs the policy does not have, or a second monitoring period, are refused by name
    with pytest.raises(ValueError, match="unknown PolicyConfig knob"):
        policy_of(parse_args(entrypoint.command(
            "monitor", dict(env, POLICY_CONFIG='{"grace": 1}'), [])[3:]))
    with pytest.raises(ValueError, match="monitoring_period"):
        policy_of(parse_args(entrypoint.command(
            "monitor", dict(env, POLICY_CONFIG='{"monitoring_period": 3}'), [])[3:]))


def test_the_monitor_refuses_kubernetes_options_that_cannot_work(capsys):
    from anna_core.monitor import parse_args
    for argv, message in ((["--autoscale"], "--autoscale needs a cluster manager"),
                          (["--kubernetes-namespace", "x"], "is for --autoscale"),
                          (["--kubeconfig", "k"], "--kubeconfig needs --autoscale")):
        with pytest.raises(SystemExit) as info:
            parse_args(["--routing", "tcp://r:1"] + argv)
        assert info.value.code == 2 and message in capsys.readouterr().err


def test_the_monitor_without_a_cluster_says_where_it_looked(tmp_path, monkeypatch):
    from k8s.api import connect
    from k8s.errors import KubernetesConfigError
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))   # no kubeconfig file either
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubernetesConfigError, match="in-cluster configuration"):
        connect(None)                            # not in a pod: no ServiceAccount token
    with pytest.raises(KubernetesConfigError, match=str(tmp_path / "missing")):
        connect(str(tmp_path / "missing"))


def test_the_entrypoint_maps_settings_onto_the_executor_autoscaler():
    from cloudburst.autoscaler import executor_policy_of, parse_args
    env = dict(configmap(), POD_NAMESPACE="cb", POD_IP="10.1.2.4", KEY_DIR="",
               SCHEDULERS="tcp://s0:6500, tcp://s1:6500")
    args = parse_args(entrypoint.command("executor-autoscaler", env, [])[3:])
    assert args.scheduler == ["tcp://s0:6500", "tcp://s1:6500"]
    assert args.ip == "10.1.2.4"      # the schedulers answer the pod's own address
    assert (args.kubernetes_namespace, args.executor_deployment) == ("cb", "cloudburst-executor")
    assert (args.pod_startup_timeout, args.pod_leave_timeout) == (120.0, 60.0)
    config = executor_policy_of(args.policy_config)
    knobs = json.loads(configmap()["EXECUTOR_POLICY_CONFIG"])
    assert all(getattr(config, k) == v for k, v in knobs.items())
    assert config.workers_per_node == json.loads(configmap()["EXECUTOR_CONFIG"])["workers"]
    explicit = dict(env, EXECUTOR_POLICY_CONFIG='{"workers_per_node": 7}')
    args = parse_args(entrypoint.command("executor-autoscaler", explicit, [])[3:])
    assert executor_policy_of(args.policy_config).workers_per_node == 7
    with pytest.raises(entrypoint.EntrypointError, match="SCHEDULERS"):
        entrypoint.command("executor-autoscaler", dict(env, SCHEDULERS=""), [])
    with pytest.raises(ValueError, match="unknown ExecutorPolicyConfig knob"):
        executor_policy_of('{"max_executors": 3}')
    with pytest.raises(ValueError, match="min_nodes must be at least 1"):
        executor_policy_of('{"min_nodes": 0}')


def test_the_entrypoint_names_what_is_missing():
    with pytest.raises(entrypoint.EntrypointError, match="POD_IP"):
        entrypoint.command("routing", {"ROUTING_PORT": "1"}, [])
    with pytest.raises(entrypoint.EntrypointError, match="unknown role"):
        entrypoint.command("nope", {}, [])
    with pytest.raises(entrypoint.EntrypointError, match="WORKER_HOST_PORT"):
        entrypoint.command("workers", {}, [])
    with pytest.raises(entrypoint.EntrypointError, match="WORKER_HOST_PORT must be a port"):
        entrypoint.command("workers", {"WORKER_HOST_PORT": "x"}, [])
    # with authentication on, the worker host needs the function keys, never KEY_DIR's
    with pytest.raises(entrypoint.EntrypointError, match="FUNCTION_KEY_DIR"):
        entrypoint.command("workers", {"WORKER_HOST_PORT": "7100", "KEY_DIR": "/keys"}, [])
    with pytest.raises(entrypoint.EntrypointError, match="NODE_CONFIG is not valid JSON"):
        entrypoint.command("node", {"ANNA_TIER": "memory", "POD_NAME": "p", "POD_IP": "1.2.3.4",
                                    "ANNA_ROUTING": "tcp://r:1", "NODE_CONFIG": "{"}, [])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_kustomize_renders_the_same_objects():
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
              for o in yaml.safe_load_all(out.stdout) if o}
    ours = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in render()}
    assert theirs == ours


@pytest.mark.timeout(180)
def test_the_manifests_apply_to_a_real_apiserver_and_become_available(keys):
    k8s_controlplane = pytest.importorskip("k8s_controlplane")
    bin_dir = k8s_controlplane.find_binaries()
    if bin_dir is None:
        if os.environ.get("CLOUDBURST_K8S_REQUIRED"):
            pytest.fail(REASON)
        pytest.skip(REASON)
    from kubernetes import client, utils
    with k8s_controlplane.ControlPlane(bin_dir) as cp:
        api = cp.api_client()
        objects = render()
        ns = [o for o in objects if o["kind"] == "Namespace"]
        for obj in ns + [o for o in objects if o["kind"] != "Namespace"]:
            utils.create_from_dict(api, obj)   # the apiserver validates every object
        # the Secrets, as k8s/README.md tells users to create them
        core = client.CoreV1Api(api)
        namespace = ns[0]["metadata"]["name"]

        def secret(name, files):
            import base64
            data = {f.name: base64.b64encode(f.read_bytes()).decode() for f in files}
            core.create_namespaced_secret(namespace, client.V1Secret(
                metadata=client.V1ObjectMeta(name=name), data=data), _request_timeout=10)
        secret("cloudburst-cluster-key", [keys / "cluster.key", keys / "cluster.key_secret",
                                          keys / "function.key", keys / "function.key_secret"])
        secret("cloudburst-authorized-keys", sorted((keys / "authorized").iterdir()))
        secret("cloudburst-function-key", [keys / "function.key", keys / "function.key_secret",
                                           keys / "cluster.key"])
        apps = client.AppsV1Api(api)
        wanted = {n: d["spec"]["replicas"] for n, d in deployments().items()
                  if d["kind"] == "Deployment"}
        deadline = time.monotonic() + 90
        while True:
            have = {d.metadata.name: d.status.available_replicas or 0
                    for d in apps.list_namespaced_deployment(namespace, _request_timeout=10).items}
            if have == wanted:
                break
            assert time.monotonic() < deadline, f"Deployments not Available: {have} != {wanted}"
            time.sleep(0.5)   # polling the API, with the deadline above
        # each Service selects Ready pods (the control plane runs no endpoint controllers)
        for service in ("anna-routing", "cloudburst-scheduler"):
            selector = core.read_namespaced_service(service, namespace,
                                                    _request_timeout=10).spec.selector
            pods = core.list_namespaced_pod(namespace, label_selector=",".join(
                f"{k}={v}" for k, v in selector.items()), _request_timeout=10).items
            assert pods and all(any(c.type == "Ready" and c.status == "True"
                                    for c in p.status.conditions) for p in pods), service


def test_the_entrypoint_maps_scheduled_backups_onto_the_monitor():
    from anna_core.monitor import parse_args
    env = dict(configmap(), POD_NAMESPACE="cb", POD_IP="10.1.2.3", KEY_DIR="")
    assert "--backup-to" not in entrypoint.command("monitor", env, [])   # off by default
    on = entrypoint.command("monitor", dict(env, BACKUP_TO="s3://b/anna", BACKUP_EVERY="3600"),
                            [])
    args = parse_args(on[3:])
    assert (args.backup_to, args.backup_every) == ("s3://b/anna", 3600.0)
    with pytest.raises(entrypoint.EntrypointError, match="BACKUP_EVERY"):
        entrypoint.command("monitor", dict(env, BACKUP_TO="s3://b/anna", BACKUP_EVERY=""), [])
    monitor = deployments()["anna-monitor"]["spec"]["template"]["spec"]["containers"][0]
    assert {"secretRef": {"name": "cloudburst-aws", "optional": True}} in monitor["envFrom"]


def test_the_workload_names_name_objects_of_the_manifests():
    from k8s import names
    objects = {(o["kind"], o["metadata"]["name"]) for o in render()}
    workloads = [names.ROUTING, names.MEMORY, names.DISK, names.MONITOR, names.SCHEDULER,
                 names.EXECUTOR, names.AUTOSCALER]
    for name in workloads:
        assert any(n == name and kind in ("Deployment", "StatefulSet") for kind, n in objects), name
    assert ("Service", names.SCHEDULER_SERVICE) in objects
    assert names.TIER_WORKLOADS == {"memory": names.MEMORY, "disk": names.DISK}
    # the disk tier is a StatefulSet, which the node pools scale as "statefulset/NAME"
    assert ("StatefulSet", names.DISK) in objects
    assert configmap()["DISK_DEPLOYMENT"] == names.DISK_SCALED == f"statefulset/{names.DISK}"
    assert {o["metadata"].get("namespace") for o in render()} - {None} == {names.NAMESPACE}
