"""The Kubernetes cluster manager's decisions (k8s/pod_state.py), without
Kubernetes: placeholders bound to pods, Ready, leaves, deadlines, the deletion-cost
precondition; and the typed errors and pod conversion of the API layer."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from k8s.pod_state import PodView, TierPods, Withdraw
from pools import (FAILED, READY, REMOVED, LastNode, LeaveFailed, NodeLeaving, PoolBusy,
                   UnknownNode)
from runtime.process import StartupError


def pod(name, ready=False, terminating=False, phase="Running", exit_code=None, reason=""):
    return PodView(name, ready=ready, terminating=terminating, phase=phase,
                   exit_code=exit_code, reason=reason)


def tier_with_nodes(*names, now=0.0):
    t = TierPods("memory", startup_timeout=30, leave_timeout=60)
    t.sync([pod(n, ready=True) for n in names], now)
    return t


def test_initial_ready_pods_are_nodes_and_not_ready_ones_pending():
    t = TierPods("memory", 30, 60)
    t.sync([pod("a", ready=True), pod("b", phase="Pending")], 0.0)
    assert t.nodes() == ["a"] and t.pending() == ["b"]


def test_a_request_is_bound_to_the_next_pod_and_ready_names_the_pod():
    t = tier_with_nodes("a")
    ids = t.request(2, 1.0)
    assert ids == ["memory+1", "memory+2"] and t.pending() == ids
    assert t.observe("ADDED", pod("p1", phase="Pending"), 2.0) == []
    assert t.bound_to("memory+1") == "p1" and t.pending() == ["memory+2", "p1"]
    events = t.observe("MODIFIED", pod("p1", ready=True), 3.0)
    assert [(e.kind, e.node_id) for e in events] == [(READY, "p1")]
    assert "memory+1" in events[0].detail
    assert t.nodes() == ["a", "p1"] and t.pending() == ["memory+2"]


def test_a_pod_already_ready_when_first_seen_is_ready_at_once():
    t = tier_with_nodes("a")
    t.request(1, 0.0)
    events = t.observe("ADDED", pod("p", ready=True), 1.0)
    assert [(e.kind, e.node_id) for e in events] == [(READY, "p")]


def test_a_pending_pod_that_fails_or_is_deleted_is_a_failed_start():
    t = tier_with_nodes("a")
    t.request(2, 0.0)
    t.observe("ADDED", pod("p1", phase="Pending"), 1.0)
    t.observe("ADDED", pod("p2", phase="Pending"), 1.0)
    failed = t.observe("MODIFIED", pod("p1", phase="Failed", reason="OOMKilled"), 2.0)
    assert [(e.kind, e.node_id) for e in failed] == [(FAILED, "p1")]
    assert isinstance(failed[0].error, StartupError) and "OOMKilled" in str(failed[0].error)
    gone = t.observe("DELETED", pod("p2", phase="Pending"), 2.0)
    assert [(e.kind, e.node_id) for e in gone] == [(FAILED, "p2")]
    assert t.pending() == [] and t.nodes() == ["a"]


def test_deadlines_fail_and_withdraw_requested_starts_only():
    t = TierPods("memory", startup_timeout=10, leave_timeout=60)
    t.sync([pod("a", ready=True), pod("stray", phase="Pending")], 0.0)
    t.request(2, 0.0)
    t.observe("ADDED", pod("p1", phase="Pending", reason="ContainerCreating"), 1.0)
    assert t.tick(9.9) == ([], [])
    events, withdrawals = t.tick(10.0)
    assert sorted(e.node_id for e in events) == ["memory+2", "p1", "stray"]
    assert all(e.kind == FAILED and isinstance(e.error, StartupError) for e in events)
    assert "ContainerCreating" in next(e.detail for e in events if e.node_id == "p1")
    assert sorted((w.placeholder, w.pod) for w in withdrawals) == [
        ("memory+1", "p1"), ("memory+2", None)]
    assert t.pending() == []
    # A pod given up on that turns Ready after all joins; one withdrawn and deleted is quiet.
    assert [e.kind for e in t.observe("MODIFIED", pod("stray", ready=True), 11.0)] == [READY]
    assert t.observe("MODIFIED", pod("p1", terminating=True), 11.0) == []
    assert t.observe("DELETED", pod("p1", terminating=True), 12.0) == []
    assert t.nodes() == ["a", "stray"]


def test_leave_refusals_name_the_pod():
    t = tier_with_nodes("a")
    with pytest.raises(LastNode, match="pod a"):
        t.leave("a", 0.0)
    with pytest.raises(UnknownNode, match="does not exist"):
        t.leave("zz", 0.0)
    t.observe("ADDED", pod("b", ready=True), 0.0)
    t.leave("b", 0.0)
    with pytest.raises(NodeLeaving, match="pod b"):
        t.leave("b", 0.0)
    assert t.leaving() == ["b"] and t.nodes() == ["a"]


def test_leave_refused_while_a_pod_is_not_ready_or_a_request_has_no_pod():
    t = tier_with_nodes("a", "b")
    t.request(1, 0.0)
    with pytest.raises(PoolBusy, match="not created yet"):
        t.leave("a", 0.0)
    t.observe("ADDED", pod("c", phase="Pending"), 0.0)
    with pytest.raises(PoolBusy, match="not Ready yet: c"):
        t.leave("a", 0.0)
    with pytest.raises(UnknownNode, match="still starting"):
        t.leave("c", 0.0)
    t.observe("MODIFIED", pod("c", ready=True), 1.0)
    t.leave("a", 1.0)
    assert t.leaving() == ["a"]


def test_a_leave_ends_removed_or_failed_by_exit_status_or_deadline():
    t = tier_with_nodes("a", "b", "c", "d")
    t.leave("a", 0.0)
    t.leave("b", 0.0)
    t.leave("c", 0.0)
    assert t.observe("MODIFIED", pod("a", terminating=True), 1.0) == []
    removed = t.observe("DELETED", pod("a", terminating=True, exit_code=0), 2.0)
    assert [(e.kind, e.node_id) for e in removed] == [(REMOVED, "a")]
    t.observe("MODIFIED", pod("b", terminating=True, exit_code=4), 1.0)
    failed = t.observe("DELETED", pod("b", terminating=True), 2.0)
    assert failed[0].kind == FAILED and isinstance(failed[0].error, LeaveFailed)
    assert failed[0].error.status == 4
    events, withdrawals = t.tick(60.0)
    assert [(e.kind, e.node_id) for e in events] == [(FAILED, "c")]
    assert events[0].error.status is None and withdrawals == []
    assert t.leaving() == [] and t.nodes() == ["d"]


def test_unleave_restores_a_node():
    t = tier_with_nodes("a", "b")
    t.leave("a", 0.0)
    t.unleave("a")
    assert sorted(t.nodes()) == ["a", "b"] and t.leaving() == []


def test_a_node_deleted_by_someone_else_is_dropped_without_event():
    t = tier_with_nodes("a", "b")
    assert t.observe("MODIFIED", pod("a", ready=True, terminating=True), 1.0) == []
    assert t.observe("DELETED", pod("a", terminating=True), 2.0) == []
    assert t.observe("DELETED", pod("b", ready=True), 2.0) == []
    assert t.nodes() == []


def test_sync_after_a_broken_watch_reports_what_changed_meanwhile():
    t = tier_with_nodes("a", "b")
    t.leave("b", 0.0)
    t.request(1, 0.0)
    events = t.sync([pod("a", ready=True), pod("c", ready=True)], 5.0)
    assert sorted((e.kind, e.node_id) for e in events) == [(READY, "c"), (REMOVED, "b")]
    assert t.nodes() == ["a", "c"] and t.pending() == [] and t.leaving() == []


# ---- property: whatever the API reports, the lists stay consistent ------------------------

NAMES = [f"p{i}" for i in range(5)]
ops = st.one_of(
    st.tuples(st.just("request"), st.integers(1, 2)),
    st.tuples(st.just("add"), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("ready"), st.sampled_from(NAMES)),
    st.tuples(st.just("terminate"), st.sampled_from(NAMES), st.sampled_from([None, 0, 4])),
    st.tuples(st.just("delete"), st.sampled_from(NAMES)),
    st.tuples(st.just("leave"), st.sampled_from(NAMES)),
    st.tuples(st.just("tick"), st.floats(0, 20)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=40))
def test_lists_stay_disjoint_and_events_follow_the_state(script):
    t = TierPods("memory", startup_timeout=10, leave_timeout=15)
    now = 0.0
    api = {}                        # what the API holds: name -> PodView
    asked = set()                   # placeholders handed out
    outcome = {}                    # placeholder or pod -> terminal start outcomes seen
    for op in script:
        events = []
        if op[0] == "request":
            asked.update(t.request(op[1], now))
        elif op[0] == "add" and op[1] not in api:
            api[op[1]] = pod(op[1], ready=op[2])
            events = t.observe("ADDED", api[op[1]], now)
        elif op[0] == "ready" and op[1] in api and not api[op[1]].terminating:
            api[op[1]] = pod(op[1], ready=True)
            events = t.observe("MODIFIED", api[op[1]], now)
        elif op[0] == "terminate" and op[1] in api:
            api[op[1]] = pod(op[1], terminating=True, exit_code=op[2])
            events = t.observe("MODIFIED", api[op[1]], now)
        elif op[0] == "delete" and op[1] in api:
            events = t.observe("DELETED", api.pop(op[1]), now)
        elif op[0] == "leave":
            leaving_before = t.leaving()
            try:
                t.leave(op[1], now)
            except (UnknownNode, NodeLeaving, LastNode, PoolBusy):
                assert t.leaving() == leaving_before
            else:
                assert op[1] in t.leaving() and op[1] in api and api[op[1]].ready
        elif op[0] == "tick":
            now += op[1]
            events, withdrawals = t.tick(now)
            assert all(isinstance(w, Withdraw) for w in withdrawals)
        nodes, pending, leaving = set(t.nodes()), set(t.pending()), set(t.leaving())
        assert not (nodes & pending) and not (nodes & leaving) and not (pending & leaving)
        assert len(t.nodes()) == len(nodes)
        for n in nodes:
            assert n in api and api[n].ready and not api[n].terminating
        for p in pending:
            assert p in asked or p in api
        for e in events:
            if e.kind == READY:
                assert e.node_id in nodes or e.node_id not in api
            if e.kind == REMOVED:
                assert e.node_id not in api
            if e.kind == FAILED and isinstance(e.error, StartupError):
                assert e.node_id not in pending
                outcome[e.node_id] = outcome.get(e.node_id, 0) + 1
                if "+" in e.node_id:                 # a request fails at most once
                    assert outcome[e.node_id] == 1 and e.node_id in asked


# ---- the API layer's pure parts -----------------------------------------------------------

def test_api_errors_are_typed_and_name_the_call():
    from kubernetes.client.exceptions import ApiException
    from k8s.errors import ApiUnavailable, ObjectNotFound, PermissionDenied, api_error
    import urllib3

    e = ApiException(status=403, reason="Forbidden")
    e.body = json.dumps({"message": 'pods is forbidden: User "x" cannot list resource "pods"'})
    err = api_error(e, "list", "pods", "", "anna")
    assert isinstance(err, PermissionDenied) and err.verb == "list" and err.status == 403
    assert "list pods in anna: forbidden (403)" in str(err) and "cannot list" in str(err)
    e = ApiException(status=404, reason="Not Found")
    err = api_error(e, "get", "deployments/scale", "anna-memory", "anna")
    assert isinstance(err, ObjectNotFound) and "anna/anna-memory" in str(err)
    err = api_error(urllib3.exceptions.MaxRetryError(None, "/x", OSError("refused")), "get",
                    "pods", "p", "anna")
    assert isinstance(err, ApiUnavailable) and err.address == "anna/p"
    refused = urllib3.exceptions.NewConnectionError(None, "refused")
    assert isinstance(api_error(urllib3.exceptions.MaxRetryError(None, "/x", refused), "watch",
                                "pods", "", "anna"), ApiUnavailable)


def test_pod_view_reads_ready_terminating_and_exit_codes():
    from kubernetes import client
    from k8s.pods import pod_view
    import datetime
    p = client.V1Pod(
        metadata=client.V1ObjectMeta(name="x", deletion_timestamp=datetime.datetime.now()),
        status=client.V1PodStatus(phase="Running", conditions=[
            client.V1PodCondition(type="Ready", status="True")], container_statuses=[
            client.V1ContainerStatus(name="node", image="i", image_id="", ready=False,
                                     restart_count=0, state=client.V1ContainerState(
                                         terminated=client.V1ContainerStateTerminated(
                                             exit_code=4, reason="Error")))]))
    v = pod_view(p)
    assert v == PodView("x", ready=True, terminating=True, phase="Running", exit_code=4,
                        reason="container node exited with 4 (Error)")
    assert pod_view(client.V1Pod(metadata=client.V1ObjectMeta(name="y"))) == PodView("y")


# ---- the manager's watch loop and deadlines, with fakes instead of an apiserver -----------

class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _FakeApps:
    def __init__(self):
        self.replicas = 1

    def read_namespaced_deployment_scale(self, name, ns, _request_timeout=None):
        return _Obj(spec=_Obj(replicas=self.replicas), status=_Obj(selector="tier=memory"))


class _FakeCore:
    def __init__(self, listings):
        self.listings = listings        # successive (V1Pods, resourceVersion)

    def list_namespaced_pod(self, ns, label_selector=None, _request_timeout=None, **kw):
        items, version = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        return _Obj(items=items, metadata=_Obj(resource_version=version))


def _v1pod(name, ready=True):
    from kubernetes import client
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), status=client.V1PodStatus(
        phase="Running", conditions=[client.V1PodCondition(type="Ready",
                                                           status=str(ready))]))


class _FakeWatch:
    """First stream: 410 Gone. Second: b turns Ready. Later ones: nothing until stopped."""
    calls = []
    stopped = None

    def __init__(self):
        self.resource_version = None

    def stop(self):
        type(self).stopped.set()

    def stream(self, func, *args, **kwargs):
        from kubernetes.client.exceptions import ApiException
        type(self).calls.append(kwargs["resource_version"])
        if len(type(self).calls) == 1:
            raise ApiException(status=410, reason="Gone")
        if len(type(self).calls) == 2:
            self.resource_version = "9"
            yield {"type": "MODIFIED", "object": _v1pod("b")}
            return
        type(self).stopped.wait(5)
        return
        yield


def test_the_watch_lists_again_after_410_gone_and_resumes_from_its_version():
    import threading
    from k8s.pool import KubernetesPool

    _FakeWatch.calls, _FakeWatch.stopped = [], threading.Event()
    core = _FakeCore([([_v1pod("a")], "2"), ([_v1pod("a"), _v1pod("b", ready=False)], "7")])

    class Manager(KubernetesPool):
        def _apis(self, api_client):
            return _FakeApps(), core

        def _new_watch(self):
            return _FakeWatch()

    m = Manager(None, "anna", {"memory": "anna-memory"})
    try:
        assert m.nodes("memory") == ["a"]
        seen = []
        while not any(e.kind == READY for e in seen):
            assert m.wait(5), "no news from the watch thread within 5 s"
            seen += m.poll()
        assert [(e.kind, e.node_id) for e in seen] == [(READY, "b")]
        assert m.stats["relists"] == 1
        assert _FakeWatch.calls[:3] == ["2", "7", "9"]    # listed, relisted, resumed after b
    finally:
        m.close()


def test_an_api_that_does_not_answer_ends_at_the_request_deadline():
    import socket
    import time
    from kubernetes import client
    from k8s.errors import ApiTimeout
    from k8s.pool import KubernetesPool

    with socket.socket() as silent:        # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        cfg.retries = 0
        # the client imports its API classes on first use (seconds on a loaded machine):
        # outside the clock, which measures the request's deadline
        client.AppsV1Api(client.ApiClient(cfg)), client.CoreV1Api(client.ApiClient(cfg))
        start = time.monotonic()
        with pytest.raises(ApiTimeout) as info:
            KubernetesPool(client.ApiClient(cfg), "anna", {"memory": "anna-memory"},
                           request_timeout=0.5)
        assert time.monotonic() - start < 3
    assert "get deployments/scale anna/anna-memory: no answer in time" in str(info.value)


def test_scaling_retries_when_another_scaler_got_there_first():
    from kubernetes.client.exceptions import ApiException
    from k8s.pool import KubernetesPool

    class Apps(_FakeApps):
        patches = []

        def patch_namespaced_deployment_scale(self, name, ns, body, **kw):
            type(self).patches.append(body)
            if len(type(self).patches) == 1:          # someone scaled to 4 meanwhile
                self.replicas = 4
                raise ApiException(status=422, reason="Invalid")
            self.replicas = body[-1]["value"]

    apps = Apps()

    class Manager(KubernetesPool):
        def _apis(self, api_client):
            return apps, _FakeCore([([_v1pod("a")], "1")])

        def _new_watch(self):
            return _FakeWatch()

    _FakeWatch.calls, _FakeWatch.stopped = [None], __import__("threading").Event()
    m = Manager(None, "anna", {"memory": "anna-memory"})
    try:
        m.add_nodes("memory", 2)
        assert apps.replicas == 6
        assert [p[0]["value"] for p in Apps.patches] == [1, 4]      # tested 1, then 4
    finally:
        m.close()
