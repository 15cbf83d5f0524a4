"""The Kubernetes cluster manager against a real kube-apiserver (fast tier: kwok makes pods
Ready, no kubelet). Skipped unless the control plane is built: `scripts/test_k8s.sh` builds it
(cached outside the checkout) and runs this file. The manager runs with the ServiceAccount and
Role of k8s/rbac/cluster-manager.yaml (least privilege); the admin client only sets up."""
import pytest
import yaml

from k8s.errors import ObjectNotFound, PermissionDenied
from k8s.pods import DELETION_COST
from k8s.pool import KubernetesPool
from pools import FAILED, READY, REMOVED, LastNode, PoolBusy
from runtime.process import StartupError

pytest.importorskip("k8s_controlplane")
from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from k8s_helpers import (RBAC, apply_rbac, deployment, pods, poll_until, replicas, role,  # noqa: E402
                         statefulset)

# the Kubernetes fast tier: scripts/test_k8s.sh runs it (a slow tier), scripts/test.sh leaves it out
pytestmark = [pytest.mark.timeout(180), pytest.mark.k8s_tier]


def manager_for(api, ns, name, **kw):
    return KubernetesPool(api, ns, {"memory": name}, request_timeout=10, **kw)


def test_scale_up_makes_ready_pods_reported_as_ready_events(cp, ns):
    deployment(cp, ns, "anna-memory", "memory", 1)
    api = apply_rbac(cp, ns)
    with manager_for(api, ns, "anna-memory") as m:
        poll_until(m, lambda ev: len(m.nodes("memory")) == 1)
        ids = m.add_nodes("memory", 2)
        assert ids == ["memory+1", "memory+2"] and m.pending("memory") == ids
        assert replicas(cp, ns, "anna-memory") == 3
        events = poll_until(m, lambda ev: sum(e.kind == READY for e in ev) == 2)
        ready = sorted(e.node_id for e in events if e.kind == READY)
        assert ready == sorted(m.bound_to("memory", i) for i in ids)
        assert sorted(m.nodes("memory")) == sorted(p.metadata.name
                                                   for p in pods(cp, ns, "anna-memory"))
        assert m.pending("memory") == [] and len(m.nodes("memory")) == 3


def test_remove_node_deletes_exactly_the_named_pod(cp, ns):
    deployment(cp, ns, "anna-memory", "memory", 3)
    api = apply_rbac(cp, ns)
    with manager_for(api, ns, "anna-memory") as m:
        poll_until(m, lambda ev: len(m.nodes("memory")) == 3)
        # The oldest pod: without a deletion cost the ReplicaSet would delete a newer one.
        names = [p.metadata.name for p in pods(cp, ns, "anna-memory")]
        victim = names[0]
        m.remove_node("memory", victim)
        assert m.leaving("memory") == [victim] and victim not in m.nodes("memory")
        try:
            annotations = client.CoreV1Api(cp.api_client()).read_namespaced_pod(
                victim, ns, _request_timeout=10).metadata.annotations or {}
        except ApiException as e:          # kwok may have deleted it already
            assert e.status == 404
        else:
            assert annotations.get(DELETION_COST) == str(-2147483648)
        events = poll_until(m, lambda ev: any(e.kind == REMOVED for e in ev))
        assert [(e.kind, e.node_id) for e in events if e.kind != READY] == [(REMOVED, victim)]
        assert replicas(cp, ns, "anna-memory") == 2
        assert sorted(m.nodes("memory")) == sorted(names[1:])
        assert [p.metadata.name for p in pods(cp, ns, "anna-memory")] == names[1:]
        m.remove_node("memory", names[1])
        poll_until(m, lambda ev: any(e.kind == REMOVED for e in ev))
        with pytest.raises(LastNode, match=names[2]):
            m.remove_node("memory", names[2])


def test_removal_waits_while_a_pod_is_not_ready(cp, ns):
    deployment(cp, ns, "anna-memory", "memory", 2)
    api = apply_rbac(cp, ns)
    with manager_for(api, ns, "anna-memory") as m:
        poll_until(m, lambda ev: len(m.nodes("memory")) == 2)
        first = m.nodes("memory")[0]
        m.add_nodes("memory", 1)
        with pytest.raises(PoolBusy, match="not created yet|not Ready yet"):
            m.remove_node("memory", first)
        assert replicas(cp, ns, "anna-memory") == 3 and m.leaving("memory") == []


def test_rbac_denials_are_typed_and_name_verb_and_resource(cp, ns):
    deployment(cp, ns, "anna-memory", "memory", 2)
    only_get_pods = apply_rbac(cp, ns, role("reader", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]))
    with pytest.raises(PermissionDenied) as info:
        manager_for(only_get_pods, ns, "anna-memory")
    err = info.value
    assert (err.verb, err.resource, err.name, err.status) == (
        "get", "deployments/scale", "anna-memory", 403)
    assert f"get deployments/scale {ns}/anna-memory: forbidden" in str(err)
    # The least-privilege Role without `patch pods`: a removal is refused, and undone.
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    docs[0]["metadata"]["name"] = docs[2]["subjects"][0]["name"] = "no-patch"
    docs[1]["metadata"]["name"] = docs[2]["metadata"]["name"] = docs[2]["roleRef"]["name"] = \
        "no-patch"
    docs[1]["rules"][0]["verbs"] = ["get", "list", "watch"]
    with manager_for(apply_rbac(cp, ns, docs), ns, "anna-memory") as m:
        poll_until(m, lambda ev: len(m.nodes("memory")) == 2)
        pod = m.nodes("memory")[0]
        with pytest.raises(PermissionDenied, match=f"patch pods {ns}/{pod}: forbidden"):
            m.remove_node("memory", pod)
        assert pod in m.nodes("memory") and m.leaving("memory") == []
        assert replicas(cp, ns, "anna-memory") == 2


def test_a_missing_deployment_is_named(cp, ns):
    # anna-memory is one of the Role's Deployments, and this namespace has none
    with pytest.raises(ObjectNotFound) as info:
        manager_for(apply_rbac(cp, ns), ns, "anna-memory")
    assert info.value.status == 404
    assert f"get deployments/scale {ns}/anna-memory: not found" in str(info.value)


def test_the_role_scales_only_the_deployments_it_names(cp, ns):
    deployment(cp, ns, "other-app", "memory", 1)
    with pytest.raises(PermissionDenied) as info:
        manager_for(apply_rbac(cp, ns), ns, "other-app")
    assert (info.value.verb, info.value.name, info.value.status) == ("get", "other-app", 403)
    assert f"get deployments/scale {ns}/other-app: forbidden" in str(info.value)


def test_watches_resume_after_timeouts_and_an_apiserver_restart(cp, ns):
    deployment(cp, ns, "anna-memory", "memory", 1)
    api = apply_rbac(cp, ns)
    with manager_for(api, ns, "anna-memory", watch_timeout=1) as m:
        poll_until(m, lambda ev: len(m.nodes("memory")) == 1)
        poll_until(m, lambda ev: m.stats["resumes"] >= 2, timeout=15)   # server-side ends
        cp.restart_apiserver()
        m.add_nodes("memory", 1)
        poll_until(m, lambda ev: any(e.kind == READY for e in ev))
        assert len(m.nodes("memory")) == 2
        assert m.stats["watches"] >= 3


def test_a_pod_that_cannot_become_ready_fails_at_its_deadline_and_is_withdrawn(cp, ns):
    deployment(cp, ns, "anna-memory", "memory", 0, node_selector={"no-such": "node"})
    with manager_for(apply_rbac(cp, ns), ns, "anna-memory", startup_timeout=3) as m:
        ids = m.add_nodes("memory", 1)
        assert replicas(cp, ns, "anna-memory") == 1
        events = poll_until(m, lambda ev: any(e.kind == FAILED for e in ev), timeout=30)
        pod = m.bound_to("memory", ids[0])
        assert [(e.kind, e.node_id) for e in events] == [(FAILED, pod)]
        assert isinstance(events[0].error, StartupError)
        assert f"pod {pod} was not Ready within 3 s" in events[0].detail
        assert "node" in events[0].detail                    # the scheduler's reason
        assert replicas(cp, ns, "anna-memory") == 0 and m.pending("memory") == []


def test_a_request_without_a_pod_fails_at_its_deadline_and_is_withdrawn(cp, ns):
    client.CoreV1Api(cp.api_client()).create_namespaced_resource_quota(ns, {
        "metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}}, _request_timeout=10)
    deployment(cp, ns, "anna-memory", "memory", 1)
    with manager_for(apply_rbac(cp, ns), ns, "anna-memory", startup_timeout=3) as m:
        poll_until(m, lambda ev: len(m.nodes("memory")) == 1)
        ids = m.add_nodes("memory", 1)
        events = poll_until(m, lambda ev: any(e.kind == FAILED for e in ev), timeout=30)
        assert [(e.kind, e.node_id) for e in events] == [(FAILED, ids[0])]
        assert f"no pod was created for request {ids[0]} within 3 s" in events[0].detail
        assert replicas(cp, ns, "anna-memory") == 1 and m.pending("memory") == []


def test_the_policy_engines_actions_reach_kubernetes_through_apply(cp, ns):
    from anna_core.autoscale.actions import AddNodes, RemoveNode
    from anna_core.autoscale.manager import apply
    deployment(cp, ns, "anna-memory", "memory", 2)
    with manager_for(apply_rbac(cp, ns), ns, "anna-memory") as m:
        poll_until(m, lambda ev: len(m.nodes("memory")) == 2)
        oldest = [p.metadata.name for p in pods(cp, ns, "anna-memory")][0]
        outcomes = apply([AddNodes("memory", 1, "latency over the SLO")], m)
        assert outcomes[0].ok and outcomes[0].result == ["memory+1"]
        poll_until(m, lambda ev: any(e.kind == READY for e in ev))
        outcomes = apply([RemoveNode("memory", oldest, "idle"),
                          RemoveNode("memory", "no-such-pod", "idle")], m)
        assert [o.ok for o in outcomes] == [True, False]
        assert "does not exist" in str(outcomes[1].error)
        events = poll_until(m, lambda ev: any(e.kind == REMOVED for e in ev))
        assert [e.node_id for e in events if e.kind == REMOVED] == [oldest]
        assert replicas(cp, ns, "anna-memory") == 2


def test_a_statefulset_pool_removes_its_highest_ordinal_whichever_node_was_asked(cp, ns):
    statefulset(cp, ns, "anna-disk", "disk", 3)
    api = apply_rbac(cp, ns, role("disk-scaler", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["statefulsets/scale"],
         "resourceNames": ["anna-disk"], "verbs": ["get", "patch"]}]))
    with KubernetesPool(api, ns, {"disk": "statefulset/anna-disk"}, request_timeout=10) as m:
        poll_until(m, lambda ev: len(m.nodes("disk")) == 3)
        assert sorted(m.nodes("disk")) == ["anna-disk-0", "anna-disk-1", "anna-disk-2"]
        m.remove_node("disk", "anna-disk-0")        # the controller deletes anna-disk-2
        assert m.leaving("disk") == ["anna-disk-2"]
        assert replicas(cp, ns, "anna-disk", "StatefulSet") == 2
        events = poll_until(m, lambda ev: any(e.kind == REMOVED for e in ev))
        assert [(e.kind, e.node_id, e.pool) for e in events] == [(REMOVED, "anna-disk-2", "disk")]
        assert sorted(m.nodes("disk")) == ["anna-disk-0", "anna-disk-1"]
        ids = m.add_nodes("disk", 1)
        events = poll_until(m, lambda ev: any(e.kind == READY for e in ev))
        assert [e.node_id for e in events if e.kind == READY] == ["anna-disk-2"]
        assert m.bound_to("disk", ids[0]) == "anna-disk-2"
