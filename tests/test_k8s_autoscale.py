"""The autoscalers in the cluster, against a real kube-apiserver (fast tier: kwok makes pods
Ready, no kubelet, so no process runs in them): the executor manager over the executor
Deployment, the executor autoscaler's loop driving it, and the Anna monitor built from its
command line (a kubeconfig of the cluster manager's ServiceAccount) driving
KubernetesPool. Everything runs with the Role of k8s/rbac/cluster-manager.yaml; the
admin client only sets up and reads. Skipped unless the control plane is built
(`scripts/test_k8s.sh` builds it and runs this file)."""
import json
import pathlib
import time

import pytest
import yaml

from k8s.errors import PermissionDenied
from k8s.pods import DELETION_COST, LOWEST_COST
from cloudburst.autoscaler import ExecutorAutoscalerService
from k8s.pool import KubernetesPool
from pools import (EXECUTORS as POOL, FAILED, READY, REMOVED, LastNode, NodeLeaving, PoolBusy,
                   UnknownNode)
from runtime.process import StartupError
from cloudburst.status import ClusterStatus, ExecutorNodeStatus
from cloudburst.executor_policy import AddNodes, ExecutorAutoscaler, ExecutorPolicyConfig, Remove

pytest.importorskip("k8s_controlplane")
from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from k8s_helpers import (RBAC, apply_rbac, deployment, pods, poll_until, replicas,  # noqa: E402
                         write_kubeconfig)

# the Kubernetes fast tier: scripts/test_k8s.sh runs it (a slow tier), scripts/test.sh leaves it out
pytestmark = [pytest.mark.timeout(180), pytest.mark.k8s_tier]

EXECUTORS = "cloudburst-executor"


def executors(api, ns, deployment=EXECUTORS, **kw):
    return KubernetesPool(api, ns, {POOL: deployment}, request_timeout=10, **kw)


def names(cp, ns, name):
    return [p.metadata.name for p in pods(cp, ns, name)]


def deletion_cost(cp, ns, pod):
    """The pod's deletion-cost annotation, or 'gone' once it was deleted."""
    try:
        annotations = client.CoreV1Api(cp.api_client()).read_namespaced_pod(
            pod, ns, _request_timeout=10).metadata.annotations or {}
    except ApiException as e:
        assert e.status == 404
        return "gone"
    return annotations.get(DELETION_COST)


# ---- the executor manager -------------------------------------------------------------------

def test_executor_pods_scale_up_and_the_drained_pod_is_the_one_removed(cp, ns):
    deployment(cp, ns, EXECUTORS, "executor", 2)
    with executors(apply_rbac(cp, ns), ns) as m:
        poll_until(m, lambda ev: len(m.nodes(POOL)) == 2)
        assert sorted(m.nodes(POOL)) == sorted(names(cp, ns, EXECUTORS))
        ids = m.add_nodes(POOL, 1)
        assert ids == ["executor+1"] and m.pending(POOL) == ids
        assert replicas(cp, ns, EXECUTORS) == 3
        # while the new pod is not Ready, Kubernetes would delete it first: refused, typed
        with pytest.raises(PoolBusy, match="not created yet|not Ready yet"):
            m.remove_node(POOL, m.nodes(POOL)[0])
        events = poll_until(m, lambda ev: any(e.kind == READY for e in ev))
        new = m.bound_to(POOL, ids[0])
        assert [(e.kind, e.node_id, e.pool) for e in events] == [(READY, new, POOL)]
        # the oldest pod: without its deletion cost the ReplicaSet would delete the newest
        before = names(cp, ns, EXECUTORS)
        victim = before[0]
        m.remove_node(POOL, victim)
        assert m.leaving(POOL) == [victim] and victim not in m.nodes(POOL)
        assert deletion_cost(cp, ns, victim) in (str(LOWEST_COST), "gone")
        with pytest.raises(NodeLeaving, match=victim):
            m.remove_node(POOL, victim)
        events = poll_until(m, lambda ev: any(e.kind == REMOVED for e in ev))
        assert [(e.kind, e.node_id) for e in events] == [(REMOVED, victim)]
        assert replicas(cp, ns, EXECUTORS) == 2
        assert names(cp, ns, EXECUTORS) == before[1:] and sorted(m.nodes(POOL)) == sorted(before[1:])
        # the interface's refusals, naming the pod
        with pytest.raises(UnknownNode, match="no-such-pod"):
            m.remove_node(POOL, "no-such-pod")
        m.remove_node(POOL, before[1])
        poll_until(m, lambda ev: any(e.kind == REMOVED for e in ev))
        with pytest.raises(LastNode, match=before[2]):
            m.remove_node(POOL, before[2])
        assert replicas(cp, ns, EXECUTORS) == 1


def test_an_executor_pod_that_never_becomes_ready_fails_at_its_deadline(cp, ns):
    deployment(cp, ns, EXECUTORS, "executor", 0, node_selector={"no-such": "node"})
    with executors(apply_rbac(cp, ns), ns, startup_timeout=2) as m:
        start = time.monotonic()
        ids = m.add_nodes(POOL, 1)
        events = poll_until(m, lambda ev: any(e.kind == FAILED for e in ev), timeout=20)
        assert time.monotonic() - start >= 2          # not before its deadline
        pod = m.bound_to(POOL, ids[0])
        assert [(e.kind, e.node_id) for e in events] == [(FAILED, pod)]
        assert isinstance(events[0].error, StartupError)
        assert f"pod {pod} was not Ready within 2 s" in events[0].detail
        assert replicas(cp, ns, EXECUTORS) == 0 and m.pending(POOL) == []   # withdrawn


def test_rbac_denials_reach_the_executor_autoscaler_typed_and_naming_the_object(cp, ns):
    deployment(cp, ns, EXECUTORS, "executor", 2)
    deployment(cp, ns, "some-other-app", "other", 1)
    with pytest.raises(PermissionDenied) as info:     # the Role names only its Deployments
        executors(apply_rbac(cp, ns), ns, deployment="some-other-app")
    assert isinstance(info.value, PermissionDenied) and info.value.status == 403
    assert f"get deployments/scale {ns}/some-other-app: forbidden" in str(info.value)
    assert info.value.name == "some-other-app"
    # the Role without `patch pods`: the removal is refused, named, and undone
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    docs[0]["metadata"]["name"] = docs[2]["subjects"][0]["name"] = "no-patch"
    docs[1]["metadata"]["name"] = docs[2]["metadata"]["name"] = docs[2]["roleRef"]["name"] = \
        "no-patch"
    docs[1]["rules"][0]["verbs"] = ["get", "list", "watch"]
    with executors(apply_rbac(cp, ns, docs), ns) as m:
        poll_until(m, lambda ev: len(m.nodes(POOL)) == 2)
        pod = m.nodes(POOL)[0]
        with pytest.raises(PermissionDenied) as info:
            m.remove_node(POOL, pod)
        assert isinstance(info.value, PermissionDenied)
        assert (info.value.verb, info.value.resource, info.value.name) == ("patch", "pods",
                                                                           pod)
        assert f"patch pods {ns}/{pod}: forbidden" in str(info.value)
        assert pod in m.nodes(POOL) and m.leaving(POOL) == [] and replicas(cp, ns, EXECUTORS) == 2


class _Schedulers:
    """Stands in for the schedulers' status (no executor process runs in a kwok pod): every
    pod the test lists as a node, with its load; drains are recorded and acknowledged."""

    def __init__(self):
        self.load, self.drained = {}, set()

    def statuses(self):
        nodes = [ExecutorNodeStatus(n, 2, min(1.0, busy / 2), n in self.drained,
                                    1 if n in self.drained else 0, busy, min(busy, 2),
                                    max(0, busy - 2), n in self.drained)
                 for n, busy in sorted(self.load.items())]
        return [ClusterStatus("s", "kvs", [], [], "", nodes=nodes, backlog=0)]

    def drain(self, node_id, draining):
        (self.drained.add if draining else self.drained.discard)(node_id)
        return 1

    def close(self):
        pass


def test_the_executor_autoscaler_adds_a_pod_under_load_and_removes_a_drained_one(cp, ns):
    deployment(cp, ns, EXECUTORS, "executor", 1)
    manager = executors(apply_rbac(cp, ns), ns)
    link = _Schedulers()
    service = ExecutorAutoscalerService(
        ExecutorAutoscaler(ExecutorPolicyConfig(stable_window=1.0, panic_window=0.25, tick=0.25,
                                                max_nodes=2, workers_per_node=2)),
        manager, link)
    try:
        poll_until(manager, lambda ev: len(manager.nodes(POOL)) == 1)
        first, = manager.nodes(POOL)
        link.load = {first: 8}                                 # a spike on the only node
        service.step()
        assert any(isinstance(a.action, AddNodes) and a.ok for a in service.history)
        assert replicas(cp, ns, EXECUTORS) == 2
        poll_until(manager, lambda ev: len(manager.nodes(POOL)) == 2)
        second = (set(manager.nodes(POOL)) - {first}).pop()
        service.step()                    # the policy sees the new node in the next sample
        # idle: the policy drains a node, then removes it once drained, through its pod
        deadline = time.monotonic() + 30
        while not any(isinstance(a.action, Remove) for a in service.history):
            assert time.monotonic() < deadline, list(service.history)
            link.load = {n: 0 for n in manager.nodes(POOL) + manager.leaving(POOL)}
            service.step()
            manager.wait(0.25)            # the policy's tick: the watch's news, or time
        removed, = [a.action.node_id for a in service.history if isinstance(a.action, Remove)]
        assert removed in (first, second) and removed in link.drained
        assert all(a.ok for a in service.history), list(service.history)
        events = poll_until(manager, lambda ev: any(e.kind == REMOVED for e in ev))
        assert [e.node_id for e in events if e.kind == REMOVED] == [removed]
        assert names(cp, ns, EXECUTORS) == sorted({first, second} - {removed})
        assert replicas(cp, ns, EXECUTORS) == 1
    finally:
        service.stop()


# ---- the Anna monitor, configured as k8s/entrypoint.py configures it --------------------------

class _Reports:
    """The report keys a monitor reads, in memory (kwok pods run no Anna nodes to write
    them); the monitor's own reading, deleting and status writing run unchanged."""

    def __init__(self):
        self.values = {}

    def get(self, key):
        from anna_core.errors import KeyNotFound
        if key not in self.values:
            raise KeyNotFound(key)
        value = self.values[key]
        return value if isinstance(value, bytes) else _Set(value)

    def put(self, key, value):
        self.values[key] = value

    def delete(self, key):
        self.values.pop(key, None)

    def report(self, bucket, seq, wall, nodes, latency):
        """One period: a worker report per memory pod `{pod: (occupancy, stored)}`, one
        client report with mean latency `latency`."""
        from anna_core.autoscale.reports import (client_reports_key, encode_client_report,
                                                 encode_node_report, worker_reports_key)
        from anna_core.autoscale.summaries import ClientReport
        self.values[worker_reports_key(bucket)] = {encode_node_report(
            pod, "memory", seq, wall, [{"thread": 0, "requests": 100, "occupancy": occupancy,
                                        "stored_bytes": stored, "capacity_bytes": 1000}])
            for pod, (occupancy, stored) in nodes.items()}
        self.values[client_reports_key(bucket)] = {encode_client_report(
            ClientReport("c", 100, latency, latency), seq, wall)}


class _Set:
    def __init__(self, elements):
        self.elements = elements

    def reveal(self):
        return set(self.elements)


def test_the_monitor_from_its_command_line_adds_a_memory_pod_and_removes_the_idle_one(
        cp, ns, tmp_path, monkeypatch):
    from anna_core.monitor import Monitor, kubernetes_manager, parse_args, policy_of
    from k8s.entrypoint import command
    from k8s.manifests import render
    deployment(cp, ns, "anna-memory", "memory", 1)
    kubeconfig = write_kubeconfig(cp, apply_rbac(cp, ns), tmp_path / "sa.kubeconfig")
    # the monitor's command line as the entrypoint builds it from the ConfigMap (AUTOSCALE),
    # in a pod whose environment has the ConfigMap's settings and its own namespace
    k8s_dir = pathlib.Path(__file__).resolve().parent.parent / "k8s"
    (configmap,) = [o["data"] for o in render(k8s_dir) if o["kind"] == "ConfigMap"]
    env = dict(configmap, REPORT_PERIOD="1", AUTOSCALE="true", POD_NAMESPACE=ns,
               POD_IP="10.1.2.3", DISK_DEPLOYMENT="", POD_STARTUP_TIMEOUT="30", KEY_DIR="",
               POLICY_CONFIG=json.dumps({"grace_period": 0, "max_nodes": 2}))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = command("monitor", env, [])
    args = parse_args(argv[3:] + ["--kubeconfig", str(kubeconfig)])
    manager = kubernetes_manager(args)
    kvs = _Reports()
    monitor = Monitor(kvs, policy=policy_of(args), manager=manager)
    try:
        assert monitor.autoscaling and monitor.policy.grace_period == 0
        poll_until(manager, lambda ev: len(manager.nodes("memory")) == 1)
        first, = manager.nodes("memory")
        # the memory tier is 90 % full (S_upper 60 %): one more node is needed
        bucket = 1000
        kvs.report(bucket, 1, bucket + 0.5, {first: (0.5, 900)}, 0.001)
        status = monitor.tick(bucket + 0.75, time.monotonic())
        assert any("memory" in a and "add" in a.lower() for a in status["actions"]), status
        assert replicas(cp, ns, "anna-memory") == 2
        poll_until(manager, lambda ev: len(manager.nodes("memory")) == 2)
        second = (set(manager.nodes("memory")) - {first}).pop()
        # quiet, data fits one node, the new pod idle: the monitor removes that pod, by name
        for seq in range(2, 12):
            bucket += 1
            kvs.report(bucket, seq, bucket + 0.5, {first: (0.03, 100), second: (0.0, 0)},
                       0.0001)
            status = monitor.tick(bucket + 0.75, time.monotonic())
            if manager.leaving("memory"):
                break
        assert manager.leaving("memory") == [second], monitor.history[-1]
        assert any(second in a for a in status["actions"]), status
        events = poll_until(manager, lambda ev: any(e.kind == REMOVED for e in ev))
        assert [e.node_id for e in events if e.kind == REMOVED] == [second]
        assert names(cp, ns, "anna-memory") == [first]
        assert replicas(cp, ns, "anna-memory") == 1
    finally:
        manager.close()


# ---- the processes the pods run ---------------------------------------------------------------

def _start(argv):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m"] + argv, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=root)


def _wait_for_line(proc, text, timeout=60):
    lines = []
    deadline = time.monotonic() + timeout
    while not any(text in line for line in lines):
        assert time.monotonic() < deadline, f"{text!r} not logged within {timeout} s: {lines}"
        line = proc.stdout.readline()          # the process logs a line per tick at least
        assert line, f"exited {proc.wait(10)} before logging {text!r}: {lines}"
        lines.append(line)
    return lines


@pytest.mark.slow    # about 25 s: two real autoscaler processes against the API server
def test_the_autoscaler_processes_start_from_a_kubeconfig_and_stop_on_sigterm(cp, ns, tmp_path):
    import signal
    import socket
    deployment(cp, ns, EXECUTORS, "executor", 1)
    deployment(cp, ns, "anna-memory", "memory", 1)
    kubeconfig = str(write_kubeconfig(cp, apply_rbac(cp, ns), tmp_path / "sa.kubeconfig"))
    with socket.socket() as s:                      # an address nothing answers on
        s.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    procs = {
        "executors": _start(["cloudburst.autoscaler", "--schedulers", nobody,
                             "--kubernetes-namespace", ns, "--kubeconfig", kubeconfig,
                             "--log-level", "info"]),
        "monitor": _start(["anna_core.monitor", "--routing", nobody, "--autoscale",
                           "--kubernetes-namespace", ns, "--disk-deployment", "",
                           "--kubeconfig", kubeconfig, "--log-level", "info"]),
        "denied": _start(["cloudburst.autoscaler", "--schedulers", nobody,
                          "--kubernetes-namespace", ns, "--executor-deployment", "other",
                          "--kubeconfig", kubeconfig]),
    }
    try:
        _wait_for_line(procs["executors"], "executor autoscaling on: deployment "
                                           f"{ns}/{EXECUTORS}")
        _wait_for_line(procs["monitor"], "autoscaling on: memory anna-memory")
        out, _ = procs["denied"].communicate(timeout=60)
        assert procs["denied"].returncode == 1
        assert f"get deployments/scale {ns}/other: forbidden" in out
        for name in ("executors", "monitor"):
            procs[name].send_signal(signal.SIGTERM)
            assert procs[name].wait(timeout=30) == 0, name
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
