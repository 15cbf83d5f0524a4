"""The manifests in k8s/ (`kubectl apply -k k8s/`) and the pods' entrypoint (k8s.entrypoint).

Always run: every Deployment starts `k8s.entrypoint` with a real role, has the probes and
resources it should, and the configuration the entrypoint hands each role from the ConfigMap
loads as the role's own configuration object, filled in with the pod's environment. With the local control plane built
(scripts/k8s/build.sh), the rendered objects are created in a real kube-apiserver (which
validates them) and every Deployment becomes Available (kwok makes pods Ready; no process
runs). With kubectl present, `kubectl kustomize k8s` must render the same objects.
"""
import copy
import signal
import functools
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
from waiting import poll_until
from k8s import entrypoint
from runtime.config import to_dict

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
REASON = ("the Kubernetes control plane is not built; run scripts/k8s/build.sh (10-20 min the "
          "first time on 2 cores, cached after) to validate the manifests against it")


@functools.lru_cache(maxsize=None)
def _rendered(directory: Path, namespace):
    return _render(directory, namespace=namespace)


def render(directory: Path = K8S, namespace=None):
    """The objects of `kubectl kustomize directory`, as `cloudburst k8s deploy` renders them
    (k8s.manifests; test_kubectl_kustomize_renders_the_same_objects checks the
    two agree). Rendered once per directory; each caller gets its own copy."""
    return copy.deepcopy(_rendered(directory, namespace))


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
    # the Anna tiers' selectors must not overlap (KubernetesPool)
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


def role_config(role, env, extra=()):
    """The configuration object `role`'s process reads from the command the entrypoint
    builds in a pod with environment `env` (its `${NAME}` references filled in from `env`,
    as the process fills them in from its own)."""
    from anna_core.config import NodeConfig as AnnaNodeConfig, RoutingConfig
    from anna_core.monitor_config import MonitorConfig
    from cloudburst.autoscaler_config import ExecutorAutoscalerConfig
    from executor.config import NodeConfig as ExecutorNodeConfig, WorkerHostConfig
    from runtime.config import from_dict, read_config_text
    from scheduler.config import SchedulerConfig
    classes = {"routing": RoutingConfig, "node": AnnaNodeConfig, "monitor": MonitorConfig,
               "scheduler": SchedulerConfig, "executor": ExecutorNodeConfig,
               "workers": WorkerHostConfig, "executor-autoscaler": ExecutorAutoscalerConfig}
    argv = entrypoint.command(role, env, list(extra))
    assert argv[1:5] == ["-m", entrypoint.ROLES[role].module, "--config",
                         env[entrypoint.ROLES[role].variable]]
    return from_dict(classes[role], read_config_text(argv[4]), environ=env)


@pytest.mark.parametrize("autoscale", ["false", "true"])
def test_the_entrypoint_builds_configurations_the_processes_accept(keys, autoscale):
    from runtime.auth import CLUSTER, KeyPair
    public = KeyPair.load(str(keys / f"{CLUSTER}.key")).public_hex
    containers = [(name, i) for name, d in deployments().items()
                  for i in range(len(d["spec"]["template"]["spec"]["containers"]))]
    modules = set()
    for name, container in containers:
        role, env = pod_env(name, keys, container)
        if role == "workers":
            env["FUNCTION_KEY_DIR"] = str(keys)
        env["AUTOSCALE"] = autoscale
        if autoscale == "false" and role not in ("monitor", "executor-autoscaler"):
            continue              # the same command either way
        config = role_config(role, env)
        modules.add(entrypoint.ROLES[role].module)
        assert config.key_dir == str(keys)
        if role == "executor":        # its workers run in the pod's `workers` container
            assert config.worker_host == "tcp://127.0.0.1:7100"
        if role == "workers":
            assert (config.ip, config.port) == ("127.0.0.1", 7100)
            continue
        assert config.ip == "10.0.0.7", name          # the pod's own address
        text = json.dumps(to_dict(config))
        if role == "executor-autoscaler":
            for i in (0, 1):      # every scheduler by its stable name, each with the key
                assert (f"tcp://cloudburst-scheduler-{i}.cloudburst-scheduler-pods:6500"
                        f"#k={public}" in text), name
        elif role != "routing":
            for i in (0, 1):      # every routing by its stable name, each with the key
                assert f"tcp://anna-routing-{i}.anna-routing-pods:6450#k={public}" in text, name
        if role in ("node", "executor"):
            assert config.node_id == f"{name}-abc12"     # named after its pod
    # the options are real: each process' own parser accepts them
    for module in sorted(modules) if autoscale == "true" else ():
        out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             timeout=60)
        assert "--config" in out.stdout, module
        if module not in ("anna_core.monitor", "cloudburst.autoscaler"):
            assert "--ready-file" in out.stdout, module


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
    from anna_core.monitor import kubernetes_manager, policy_of
    from runtime.config import ConfigError
    env = dict(configmap(), POD_NAMESPACE="cb", POD_IP="10.1.2.3", KEY_DIR="")
    observe = entrypoint.command("monitor", env, [])
    assert observe[3:] == ["--config", configmap()["MONITOR_CONFIG"]]   # the config, no flags
    config = role_config("monitor", env)
    assert not config.autoscale and kubernetes_manager(config) is None   # no API client
    assert config.ip == "10.1.2.3"    # routing and the nodes answer the pod's own address
    config = role_config("monitor", dict(env, AUTOSCALE="true"))
    assert config.autoscale and config.kubernetes_namespace == "cb"
    assert (config.memory_deployment, config.disk_deployment) == ("anna-memory",
                                                                  "statefulset/anna-disk")
    assert (config.pod_startup_timeout, config.pod_leave_timeout) == (120.0, 60.0)
    policy = policy_of(config)
    knobs = json.loads(configmap()["POLICY_CONFIG"])
    assert all(getattr(policy, k) == v for k, v in knobs.items())
    assert policy.monitoring_period == float(configmap()["REPORT_PERIOD"])
    no_disk = role_config("monitor", dict(env, AUTOSCALE="true", DISK_DEPLOYMENT=""))
    assert no_disk.disk_deployment == ""
    for bad, field in ((dict(AUTOSCALE="maybe"), "autoscale"),
                       (dict(AUTOSCALE="true", POD_NAMESPACE=""), "kubernetes_namespace"),
                       (dict(POLICY_CONFIG="[1]"), "policy_config"),
                       (dict(AUTOSCALE="true", POD_LEAVE_TIMEOUT="-3"), "pod_leave_timeout")):
        with pytest.raises(ConfigError) as info:
            role_config("monitor", dict(env, **bad))
        assert (info.value.role, info.value.field) == ("anna monitor", field), str(info.value)
    # knobs the policy does not have, or a second monitoring period, are refused by name
    with pytest.raises(ValueError, match="unknown PolicyConfig knob"):
        role_config("monitor", dict(env, POLICY_CONFIG='{"grace": 1}'))
    with pytest.raises(ValueError, match="monitoring_period"):
        role_config("monitor", dict(env, POLICY_CONFIG='{"monitoring_period": 3}'))


def test_the_monitor_refuses_kubernetes_options_that_cannot_work(capsys):
    from anna_core.monitor import kubernetes_manager, parse_args
    for argv, message in ((["--autoscale"], "kubernetes_namespace is needed with autoscale"),
                          (["--kubeconfig", "k"], "kubeconfig needs autoscale")):
        with pytest.raises(SystemExit) as info:
            parse_args(["--routing", "tcp://r:1"] + argv)
        assert info.value.code == 2 and message in capsys.readouterr().err
    # a pod always gives its namespace: observing with one calls no API either
    observing = parse_args(["--routing", "tcp://r:1", "--kubernetes-namespace", "x"])
    assert not observing.autoscale and kubernetes_manager(observing) is None


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
    from cloudburst.autoscaler import executor_policy_of
    from runtime.config import ConfigError
    env = dict(configmap(), POD_NAMESPACE="cb", POD_IP="10.1.2.4", KEY_DIR="",
               SCHEDULERS="tcp://s0:6500, tcp://s1:6500")
    config = role_config("executor-autoscaler", env)
    assert config.schedulers == ["tcp://s0:6500", "tcp://s1:6500"]
    assert config.ip == "10.1.2.4"    # the schedulers answer the pod's own address
    assert (config.kubernetes_namespace, config.executor_deployment) == ("cb",
                                                                         "cloudburst-executor")
    assert (config.pod_startup_timeout, config.pod_leave_timeout) == (120.0, 60.0)
    policy = config.policy()
    knobs = json.loads(configmap()["EXECUTOR_POLICY_CONFIG"])
    assert all(getattr(policy, k) == v for k, v in knobs.items())
    assert policy.workers_per_node == json.loads(configmap()["EXECUTOR_CONFIG"])["workers"]
    explicit = dict(env, EXECUTOR_POLICY_CONFIG='{"workers_per_node": 7}')
    assert role_config("executor-autoscaler", explicit).policy().workers_per_node == 7
    with pytest.raises(ConfigError, match="schedulers") as info:
        role_config("executor-autoscaler", dict(env, SCHEDULERS=""))
    assert info.value.role == "executor autoscaler"
    with pytest.raises(ValueError, match="unknown ExecutorPolicyConfig knob"):
        executor_policy_of('{"max_executors": 3}')
    with pytest.raises(ValueError, match="min_nodes must be at least 1"):
        executor_policy_of('{"min_nodes": 0}')


def test_the_entrypoint_names_what_is_missing():
    from runtime.config import ConfigError
    with pytest.raises(entrypoint.EntrypointError, match="unknown role"):
        entrypoint.command("nope", {}, [])
    with pytest.raises(entrypoint.EntrypointError, match="ROUTING_CONFIG"):
        entrypoint.command("routing", {"ROUTING_PORT": "1"}, [])
    env = dict(configmap())
    with pytest.raises(ConfigError, match="POD_IP") as info:
        role_config("routing", env)                 # the pod's address is not given
    assert (info.value.role, info.value.field) == ("routing", "ip")
    with pytest.raises(ConfigError, match="WORKER_HOST_PORT"):
        role_config("workers", dict(env, FUNCTION_KEY_DIR="/f"))
    with pytest.raises(ConfigError, match="expected an int") as info:
        role_config("workers", dict(env, FUNCTION_KEY_DIR="/f", WORKER_HOST_PORT="x"))
    assert info.value.field == "port"
    # the worker host gets the function keys, never KEY_DIR's: without them it refuses
    with pytest.raises(ConfigError, match="FUNCTION_KEY_DIR"):
        role_config("workers", dict(env, WORKER_HOST_PORT="7100"))
    with pytest.raises(ConfigError, match="NODE_CONFIG is not valid JSON|not valid JSON"):
        role_config("node", {"POD_NAME": "p", "POD_IP": "1.2.3.4", "NODE_CONFIG": "{"})


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
    from runtime.config import ConfigError
    env = dict(configmap(), POD_NAMESPACE="cb", POD_IP="10.1.2.3", KEY_DIR="")
    assert role_config("monitor", env).backup_to is None                 # off by default
    on = role_config("monitor", dict(env, BACKUP_TO="s3://b/anna", BACKUP_EVERY="3600"))
    assert (on.backup_to, on.backup_every) == ("s3://b/anna", 3600.0)
    with pytest.raises(ConfigError) as info:
        role_config("monitor", dict(env, BACKUP_TO="s3://b/anna", BACKUP_EVERY=""))
    assert info.value.field == "backup_every"
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


def test_the_pods_processes_start_from_the_configmap_through_the_entrypoint(keys, tmp_path):
    """Each role's process, started as its pod starts it (`python -m k8s.entrypoint ROLE`,
    with the ConfigMap and the pod's own settings in its environment), runs from the
    configuration the ConfigMap holds, authenticated with the cluster's keys: routing, a
    memory node that joins it, a scheduler, and an executor node whose workers run in a
    worker host with only the function keys. Free ports stand in for the pods' own (the
    ports are settings, 0 here), on loopback."""
    import socket
    from runtime.auth import CLUSTER, FUNCTION, strip_key
    from runtime.process import ManagedProcess, stop_all, wait_all_ready
    function_keys = tmp_path / "function-keys"
    function_keys.mkdir(mode=0o700)
    for name in (FUNCTION + ".key", FUNCTION + ".key_secret", CLUSTER + ".key"):
        shutil.copy(keys / name, function_keys / name)
    with socket.socket() as s:              # the worker host's port: a setting, so chosen
        s.bind(("127.0.0.1", 0))
        host_port = str(s.getsockname()[1])
    shared = dict(configmap(), KEY_DIR=str(keys), LOG_LEVEL="info", ROUTING_PORT="0",
                  SCHEDULER_PORT="0", METRICS_PORT="0", POD_IP="127.0.0.1",
                  POD_NAMESPACE="cloudburst", WORKER_HOST_PORT=host_port,
                  FUNCTION_KEY_DIR=str(function_keys))
    procs = []

    def pod(name, role, **env):
        env = dict(shared, POD_NAME=name, READY_FILE=str(tmp_path / f"{name}.ready"), **env)
        if role == "node":
            env["NODE_CONFIG"] = env["MEMORY_NODE_CONFIG"]
        p = ManagedProcess(name, ["env"] + [f"{k}={v}" for k, v in env.items()]
                           + [sys.executable, "-m", "k8s.entrypoint", role], str(tmp_path))
        procs.append(p.spawn())
        return p

    try:
        # the host first, and ready, before any other process binds ports of its own: its
        # port was chosen free above, and an ephemeral bind could take it in between
        host = pod("cloudburst-executor-x-workers", "workers")
        wait_all_ready([host], 60)
        routing = pod("anna-routing-0", "routing")
        wait_all_ready([routing], 60)
        anna = strip_key(routing.info["address"])         # the pods name it without its key
        node = pod("anna-memory-abc12", "node", ANNA_ROUTING=anna)
        scheduler = pod("cloudburst-scheduler-0", "scheduler", ANNA_ROUTING=anna)
        wait_all_ready([node, scheduler], 60)
        assert node.info["node_id"] == "anna-memory-abc12"           # named after its pod
        executor = pod("cloudburst-executor-x", "executor", ANNA_ROUTING=anna,
                       SCHEDULERS=strip_key(scheduler.info["address"]))
        wait_all_ready([executor], 60)
        assert executor.info["node_id"] == "cloudburst-executor-x"
        assert len(executor.info["workers"]) == json.loads(configmap()["EXECUTOR_CONFIG"])[
            "workers"]
        # the probe's file: the scheduler writes it once it has heard the executor's
        # workers, which may be a heartbeat after the executor itself is ready
        ready = tmp_path / "cloudburst-scheduler-0.ready"
        poll_until(ready.exists, 30, "the scheduler's ready file after its executor joined")
    finally:
        stop_all(procs, 10, signal.SIGINT)
