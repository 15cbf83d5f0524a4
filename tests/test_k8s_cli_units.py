"""The pure parts of `cloudburst k8s`: rendering the packaged manifests (checked against
`kubectl kustomize` when kubectl is installed) and reading Deployments and pods
(`k8s.status`). No cluster needed."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from cloudburst.cli import main
from k8s.manifests import MANAGED_BY, ManifestError, apply_order, image_name, render
from k8s.errors import RoleRefused
from k8s.deploy import check_scale, replica_counts
from k8s.status import format_status, summarize

K8S = Path(__file__).resolve().parent.parent / "k8s"


def strip_labels(obj):
    labels = obj["metadata"].get("labels", {})
    for k in MANAGED_BY:
        labels.pop(k, None)
    if not labels:
        obj["metadata"].pop("labels", None)
    return obj


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_render_matches_kubectl_kustomize_object_for_object(tmp_path):
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    key = lambda o: (o["kind"], o["metadata"]["name"])   # noqa: E731
    theirs = sorted((o for o in yaml.safe_load_all(out.stdout) if o), key=key)
    ours = sorted((strip_labels(o) for o in render()), key=key)
    assert ours == theirs


def test_render_reads_the_packaged_kustomization_with_overrides():
    objects = render(namespace="elsewhere", image="reg.example:5000/cb:7",
                     replicas={"anna-disk": 4})
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "Deployment", "Service", "ConfigMap", "Role", "RoleBinding"} <= kinds
    for o in objects:
        assert o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "cloudburst-k8s"
        if o["kind"] == "Namespace":
            assert o["metadata"]["name"] == "elsewhere"
        elif o["kind"] == "StorageClass":         # cluster-wide: no namespace
            assert "namespace" not in o["metadata"]
        else:
            assert o["metadata"]["namespace"] == "elsewhere"
        if o["kind"] in ("Deployment", "StatefulSet"):
            spec = o["spec"]["template"]["spec"]
            assert {c["image"] for c in spec["containers"] + spec.get("initContainers", [])} \
                == {"reg.example:5000/cb:7"}  # every container (executor pods have two)
        if o["kind"] == "RoleBinding":
            assert all(s["namespace"] == "elsewhere" for s in o["subjects"])
    disk = [o for o in objects
            if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "anna-disk"]
    assert disk[0]["spec"]["replicas"] == 4
    order = [o["kind"] for o in apply_order(objects)]
    assert order[0] == "Namespace" and order.index("ServiceAccount") < order.index("Deployment")
    # what the workloads use (accounts, configuration, Services, the disk claims' storage
    # class) comes before every workload
    first = min(order.index(k) for k in ("Deployment", "StatefulSet"))
    assert max(i for i, k in enumerate(order)
               if k not in ("Deployment", "StatefulSet", "PodDisruptionBudget")) < first
    with pytest.raises(ValueError, match="no Deployment or StatefulSet 'nope'"):
        render(replicas={"nope": 1})


def test_render_follows_whatever_files_a_kustomization_lists(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "kustomization.yaml").write_text(
        "namespace: ns1\nresources: [sub, extra.yaml]\n"
        "images: [{name: img/a, newName: reg/a, newTag: '2'}]\n")
    (tmp_path / "sub" / "kustomization.yaml").write_text("resources: [d.yaml]\n")
    (tmp_path / "sub" / "d.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n"
        "    spec: {containers: [{name: c, image: 'img/a:1'}, {name: s, image: 'other:1'}]}\n")
    (tmp_path / "extra.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    objects = render(tmp_path)
    assert [(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in objects] == \
        [("Deployment", "d", "ns1"), ("ConfigMap", "c", "ns1"), ("Service", "s", "ns1")]
    images = [c["image"] for c in objects[0]["spec"]["template"]["spec"]["containers"]]
    assert images == ["reg/a:2", "other:1"]
    assert [c["image"] for c in render(tmp_path, image="mine/x@sha256:ab")[0]["spec"]
            ["template"]["spec"]["containers"]] == ["mine/x@sha256:ab", "other:1"]
    (tmp_path / "kustomization.yaml").write_text("resources: [sub]\npatches: [{path: p.yaml}]\n")
    with pytest.raises(ManifestError, match=r"kustomization.yaml: kustomize fields \['patches'\]"):
        render(tmp_path)


def test_image_name_strips_tag_and_digest_but_not_a_registry_port():
    assert image_name("reg:5000/a/b:tag") == "reg:5000/a/b"
    assert image_name("reg:5000/a/b") == "reg:5000/a/b"
    assert image_name("b@sha256:00") == "b"
    assert image_name("localhost/cloudburst:dev") == "localhost/cloudburst"


def deployment(name, replicas, ready, generation=1, observed=1, available_status="True",
               message=None):
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, generation=generation),
        spec=client.V1DeploymentSpec(
            replicas=replicas, selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec()),
        status=client.V1DeploymentStatus(
            replicas=replicas, ready_replicas=ready, available_replicas=ready,
            updated_replicas=replicas, observed_generation=observed,
            conditions=[client.V1DeploymentCondition(
                type="Available", status=available_status, reason="MinimumReplicasUnavailable"
                if available_status != "True" else "MinimumReplicasAvailable", message=message)]))


def pod(name, app, ready, waiting=None, restarts=0, node="n1"):
    state = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason=waiting)) \
        if waiting else client.V1ContainerState(running=client.V1ContainerStateRunning())
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": app}),
        spec=client.V1PodSpec(containers=[], node_name=node),
        status=client.V1PodStatus(
            phase="Running" if ready else "Pending",
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
            container_statuses=[client.V1ContainerStatus(
                name="c", image="i", image_id="", ready=ready, restart_count=restarts,
                state=state)]))


def test_summarize_says_what_is_not_ready_and_why():
    status = summarize("ns", [deployment("b", 2, 1, available_status="False",
                                         message="Deployment does not have minimum availability."),
                              deployment("a", 1, 1)],
                       [pod("a-1", "a", True, restarts=2), pod("b-1", "b", True),
                        pod("b-2", "b", False, waiting="ImagePullBackOff"),
                        pod("stray", "other", True)])
    assert [d.name for d in status.deployments] == ["a", "b"]
    a, b = status.deployments
    assert a.done and a.why == [] and not b.done and not status.ready
    assert b.why == ["Available=False: MinimumReplicasUnavailable: Deployment does not have "
                     "minimum availability.", "pod b-2: container c waiting: ImagePullBackOff"]
    pods = {p.name: p for p in status.pods}
    assert pods["a-1"].restarts == 2 and pods["a-1"].deployment == "a"
    assert pods["stray"].deployment is None and pods["b-2"].reason.endswith("ImagePullBackOff")
    text = format_status(status)
    assert "1 of 2 Deployment(s) not ready" in text and "  b: Available=False" in text
    assert status.to_json()["deployments"][1]["why"] == b.why


def test_a_deployment_is_not_done_until_the_controller_saw_its_spec():
    (d,) = summarize("ns", [deployment("a", 1, 1, generation=2, observed=1)], []).deployments
    assert not d.done and d.why == ["the controller has not seen the latest spec yet"]
    (d,) = summarize("ns", [deployment("a", 0, 0, available_status="True")], []).deployments
    assert d.done


def test_every_k8s_option_has_help(capsys):
    for sub in ("deploy", "status", "scale", "delete"):
        with pytest.raises(SystemExit) as info:
            main(["k8s", sub, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        for option in ("--kubeconfig", "--context", "--namespace", "--request-timeout"):
            assert option in out
        assert "(default: None)" not in out


def test_bad_arguments_are_refused_before_any_cluster_is_contacted(capsys, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["k8s", "scale", "executor", "-1"])
    assert info.value.code == 2
    assert main(["k8s", "status", "--kubeconfig", str(tmp_path / "none")]) == 1
    assert f"kubeconfig {tmp_path / 'none'}: no such file" in capsys.readouterr().err


def test_replica_counts_keep_what_scale_set_unless_asked():
    existing = {"cloudburst-executor": 5, "anna-memory": 2, "cloudburst-scheduler": 1}
    assert replica_counts({"memory": 3}, existing) == {"anna-memory": 3,
                                                       "cloudburst-executor": 5}
    assert replica_counts({}, {}) == {}
    with pytest.raises(RoleRefused, match="cannot set the replicas of role 'scheduler'"):
        replica_counts({"scheduler": 2}, existing)
    with pytest.raises(RoleRefused, match="from 5 to 1 replicas: .* one node at a time"):
        replica_counts({"disk": 1}, {"anna-disk": 5})
    assert replica_counts({"disk": 1}, {}) == {"anna-disk": 1}     # a new deployment


def test_the_manifests_ship_with_the_package(tmp_path):
    """`setup.py build_py` (what a wheel holds) copies every file the kustomizations use, and
    the renderer finds them in the built package, not in the checkout."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                          str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # a wheel also holds the compiled kernel (build_ext), which `cloudburst` imports
    for so in (root / "anna_core").glob("_core*.so"):
        shutil.copy(so, tmp_path / "anna_core" / so.name)
    probe = ("import k8s.manifests as m, json; "
             "print(json.dumps([str(m.package_root())] + "
             "[[o['kind'], o['metadata']['name']] for o in m.render()]))")
    built = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert built.returncode == 0, built.stderr
    where, *objects = json.loads(built.stdout)
    assert where == str(tmp_path / "k8s")
    assert objects == [[o["kind"], o["metadata"]["name"]] for o in render()]


def test_check_scale_lets_anna_tiers_shrink_one_node_at_a_time_and_never_empty():
    assert check_scale("memory", 3, 10) is None and check_scale("disk", 3, 2) is None
    assert "one node at a time" in check_scale("memory", 3, 1)
    assert "never emptied" in check_scale("disk", 1, 0)
    assert check_scale("executor", 5, 0) is None
    assert "at least 0" in check_scale("executor", 1, -1)


def test_pods_waiting_for_the_same_reason_are_named_together():
    pods = [pod(f"e-{i}", "e", False, waiting="ImagePullBackOff") for i in range(5)]
    pods.append(pod("e-x", "e", False, waiting="CrashLoopBackOff"))
    (d,) = summarize("ns", [deployment("e", 6, 0, available_status="False")], pods).deployments
    assert d.why[1:] == ["pods e-0, e-1, e-2 and 2 more: container c waiting: ImagePullBackOff",
                         "pod e-x: container c waiting: CrashLoopBackOff"]
