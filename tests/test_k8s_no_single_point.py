"""What `kubectl kustomize k8s` renders leaves no single point of failure: routing and the
schedulers are StatefulSets of at least 2 replicas whose stable names (through headless
Services) are exactly the addresses every process is given; the disk tier is a StatefulSet
with a volume claim per pod, of a storage class that exists; every tier has a
PodDisruptionBudget that lets at most one of its pods go at a time; rolling upgrades of the
Deployments bring a new pod up before an old one goes; the autoscalers may scale the disk
StatefulSet. The test cluster's overlay (scripts/k8s/e2e) renders too, with every container
on the imported image."""
import copy
import functools
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def kustomize(directory):
    return copy.deepcopy(_kustomize(str(directory)))


@functools.lru_cache(maxsize=None)
def _kustomize(directory):
    out = subprocess.run(["kubectl", "kustomize", directory], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [o for o in yaml.safe_load_all(out.stdout) if o]


@pytest.fixture(scope="module")
def objects():
    return kustomize(ROOT / "k8s")


def of_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def stable_names(sts, port):
    """The addresses of a StatefulSet's pods through its governing (headless) Service."""
    service = sts["spec"]["serviceName"]
    return [f"tcp://{sts['metadata']['name']}-{i}.{service}:{port}"
            for i in range(sts["spec"]["replicas"])]


def test_routing_and_schedulers_are_statefulsets_every_process_knows_by_name(objects):
    sets, services = of_kind(objects, "StatefulSet"), of_kind(objects, "Service")
    (config,) = of_kind(objects, "ConfigMap").values()
    data = config["data"]
    for name, key, port in (("anna-routing", "ANNA_ROUTING", data["ROUTING_PORT"]),
                            ("cloudburst-scheduler", "SCHEDULERS", data["SCHEDULER_PORT"])):
        sts = sets[name]
        assert sts["spec"]["replicas"] >= 2, name
        headless = services[sts["spec"]["serviceName"]]
        assert headless["spec"]["clusterIP"] == "None", name
        # published before Ready: a starting routing must be reachable for nodes to join it
        assert headless["spec"]["publishNotReadyAddresses"] is True, name
        assert selects({"matchLabels": headless["spec"]["selector"]},
                       sts["spec"]["template"]["metadata"]["labels"]), name
        # the processes are given every replica's stable name, and nothing else
        given = [a.strip() for a in data[key].split(",")]
        assert given == stable_names(sts, port), key
        # a rolling upgrade replaces one pod at a time
        assert sts["spec"]["updateStrategy"]["type"] == "RollingUpdate", name
    # nothing that must not run twice became a Deployment with several replicas
    deployments = of_kind(objects, "Deployment")
    assert "anna-routing" not in deployments and "cloudburst-scheduler" not in deployments


def test_the_disk_tier_keeps_a_volume_per_pod(objects):
    disk = of_kind(objects, "StatefulSet")["anna-disk"]
    assert "anna-disk" not in of_kind(objects, "Deployment")
    (claim,) = disk["spec"]["volumeClaimTemplates"]
    pod = disk["spec"]["template"]["spec"]
    (node,) = pod["containers"]
    data = [m for m in node["volumeMounts"] if m["mountPath"] == "/data"]
    assert [m["name"] for m in data] == [claim["metadata"]["name"]]
    # the RocksDB files are on the claim, not on a volume that dies with the pod
    assert claim["metadata"]["name"] not in {v["name"] for v in pod["volumes"]}
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"]
    # the class the claims ask for exists, and no provisioner is assumed for it
    storage = of_kind(objects, "StorageClass")[claim["spec"]["storageClassName"]]
    assert storage["provisioner"] == "kubernetes.io/no-provisioner"
    assert storage["volumeBindingMode"] == "WaitForFirstConsumer"
    # scaled-in or deleted pods keep their data for when they come back
    assert disk["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain",
                                                                   "whenScaled": "Retain"}
    assert of_kind(objects, "Service")[disk["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"
    # the one container that runs as root only changes the volume's owner
    (init,) = pod["initContainers"]
    assert init["volumeMounts"] == [{"name": claim["metadata"]["name"], "mountPath": "/data"}]
    caps = init["securityContext"]["capabilities"]
    assert caps == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False


def test_every_tier_has_a_disruption_budget_of_one_pod(objects):
    budgets = list(of_kind(objects, "PodDisruptionBudget").values())
    tiers = {**of_kind(objects, "StatefulSet"), **of_kind(objects, "Deployment")}
    singletons = {"anna-monitor", "cloudburst-autoscaler"}      # never more than one replica
    for name, workload in tiers.items():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        mine = [b for b in budgets if selects(b["spec"]["selector"], labels)]
        if name in singletons:
            assert workload["spec"]["replicas"] <= 1 and not mine, name
            continue
        assert len(mine) == 1, name
        assert mine[0]["spec"] == {"maxUnavailable": 1, "selector": mine[0]["spec"]["selector"]}
    for b in budgets:          # and no budget selects pods of two tiers
        assert sum(selects(b["spec"]["selector"],
                           w["spec"]["template"]["metadata"]["labels"])
                   for w in tiers.values()) == 1, b["metadata"]["name"]


def test_rolling_upgrades_bring_a_new_pod_up_before_an_old_one_goes(objects):
    deployments = of_kind(objects, "Deployment")
    for name in ("anna-memory", "cloudburst-executor"):
        strategy = deployments[name]["spec"]["strategy"]
        assert strategy == {"type": "RollingUpdate",
                            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}, name


def test_a_routing_or_scheduler_made_again_is_found_before_the_next_one_goes(objects):
    """A pod made again keeps its name at a new address. Its peers find it once the name
    resolves there (the cluster DNS's TTL, 5 s) and their attempt at the old address is given
    up (runtime.sockets.CONNECT_TIMEOUT_MS); a routing then collects heartbeats for 1.25
    periods. A rolling update must not replace the other replica before: else both routings
    know no node, or clients and executors reach no scheduler, at once."""
    from runtime.sockets import CONNECT_TIMEOUT_MS
    needed = 5 + CONNECT_TIMEOUT_MS / 1000 + 1.25 * 1.0
    sets = of_kind(objects, "StatefulSet")
    for name in ("anna-routing", "cloudburst-scheduler"):
        assert sets[name]["spec"].get("minReadySeconds", 0) >= needed, name


def test_the_autoscalers_may_scale_the_disk_statefulset_and_nothing_else(objects):
    (role,) = of_kind(objects, "Role").values()
    scale = {r["resources"][0]: set(r["resourceNames"]) for r in role["rules"]
             if r["resources"][0].endswith("/scale")}
    sets, deployments = of_kind(objects, "StatefulSet"), of_kind(objects, "Deployment")
    assert scale["statefulsets/scale"] == {"anna-disk"} and "anna-disk" in sets
    assert scale["deployments/scale"] == {"anna-memory", "cloudburst-executor"}
    assert scale["deployments/scale"] <= set(deployments)


def test_the_test_overlay_runs_every_container_on_the_imported_image():
    objects = kustomize(ROOT / "scripts" / "k8s" / "e2e")
    pods = [o["spec"]["template"]["spec"] for o in objects
            if o["kind"] in ("Deployment", "StatefulSet")]
    containers = [c for p in pods for c in p["containers"] + p.get("initContainers", [])]
    assert len(containers) >= 9
    assert {c["imagePullPolicy"] for c in containers} == {"Never"}


@pytest.mark.parametrize("directory", ["k8s", "scripts/k8s/e2e"])
def test_a_stopping_scheduler_is_done_before_its_pod_is_killed(directory):
    import json
    objects = kustomize(ROOT / directory)
    (config,) = of_kind(objects, "ConfigMap").values()
    stop_grace = json.loads(config["data"]["SCHEDULER_CONFIG"])["stop_grace"]
    pod = of_kind(objects, "StatefulSet")["cloudburst-scheduler"]["spec"]["template"]["spec"]
    assert 0 < stop_grace < pod["terminationGracePeriodSeconds"]


def test_local_volumes_are_made_for_exactly_the_disk_tiers_claims(objects):
    from k8s.volumes import LOCAL_CLASS, local_volumes
    disk = of_kind(objects, "StatefulSet")["anna-disk"]
    (template,) = disk["spec"]["volumeClaimTemplates"]
    pvs = local_volumes("cb", disk, range(3), "/var/lib/cb-volumes")
    # the claims the StatefulSet makes for pods 0..2, one volume each, reserved for it
    assert [pv["spec"]["claimRef"]["name"] for pv in pvs] == [
        f"{template['metadata']['name']}-anna-disk-{i}" for i in range(3)]
    assert {pv["spec"]["claimRef"]["namespace"] for pv in pvs} == {"cb"}
    assert len({pv["metadata"]["name"] for pv in pvs}) == 3
    assert len({pv["spec"]["hostPath"]["path"] for pv in pvs}) == 3
    for pv in pvs:
        spec = pv["spec"]
        assert spec["storageClassName"] == LOCAL_CLASS == template["spec"]["storageClassName"]
        assert spec["capacity"]["storage"] == template["spec"]["resources"]["requests"]["storage"]
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"   # data outlives claims
        assert spec["hostPath"]["path"].startswith("/var/lib/cb-volumes/cb/")
        assert pv["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "cloudburst-k8s"
    # a cluster with a provisioner: another class, no local volume
    other = copy.deepcopy(disk)
    other["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = "fast-ssd"
    assert local_volumes("cb", other, range(3), "/v") == []
    with pytest.raises(ValueError, match="absolute"):
        local_volumes("cb", disk, range(1), "relative/dir")


def test_deploy_prunes_only_what_is_ours_and_no_longer_in_the_manifests(objects):
    from k8s.deploy import SECRETS
    from k8s.prune import stale
    live = [("apps/v1", "Deployment", "anna-routing"),        # before it became a StatefulSet
            ("apps/v1", "StatefulSet", "anna-routing"),
            ("v1", "ConfigMap", "cloudburst-config"), ("v1", "ConfigMap", "dropped-config"),
            ("v1", "Secret", SECRETS[0]),                      # made by deploy, not listed
            ("v1", "PersistentVolume", "cloudburst-cb-data-anna-disk-0"),   # data: never
            ("policy/v1", "PodDisruptionBudget", "anna-routing")]
    assert stale(live, objects, keep=SECRETS) == [("apps/v1", "Deployment", "anna-routing"),
                                                  ("v1", "ConfigMap", "dropped-config")]
    assert stale([], objects) == []
