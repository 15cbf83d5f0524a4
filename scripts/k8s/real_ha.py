"""No single point of failure, on real pods (the last steps of `scripts/k8s/test_real.sh
--e2e`, after scripts/k8s/real_e2e.py's and the autoscaling steps, with Anna autoscaling
off again; every step timed). By default (`--ha routing`) only
the load through the routing pod's kill runs; `--ha all` runs every step below (it
passed in every run of the current code, benchmarks/README.md; CI runs the routing step
only: seven clean runs are not yet enough history to make the whole tier its gate). A failed load still goes on to the disk step;
each kill step waits for the load to take 40 more calls after the pod came back:

 2. a disk pod restarted keeps its keys (after the upgrade below): a key placed on the disk tier only (memory=0,
    disk=1, with the cluster key) is put; the anna-disk-0 pod's process gets SIGKILL and the
    pod is force-deleted; its StatefulSet makes anna-disk-0 again, on the same volume claim
    (a local volume made for it before the deploy); routing has node anna-disk-0 again at
    its new address (dropped first, or replaced by its join when the pod is back before
    routing's heartbeat timeout) and the key reads back the same.
 1. a load in a pod (scripts/k8s/ha_load.py, the image's client given every scheduler's
    stable name; calls that write and read new KVS keys, and objects) runs through:
    - killing a routing pod (SIGKILL, force-delete; the StatefulSet remakes it): no call
      fails;
    - killing the scheduler pod the load uses (anna-scheduler-0 likewise): only calls in
      flight on it fail, each with SchedulerUnavailable naming it; the others go on through
      cloudburst-scheduler-1;
    - a rolling upgrade of every tier to a re-tagged image (routing, schedulers, the disk
      tier, the memory tier, executors, the monitor, one after the other, each waited for
      with `kubectl rollout status`): no call fails.
    The pod prints a summary per phase; failures other than the expected ones fail the test.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Dict

from real_network import run, say, wait

NS = "cloudburst"
LOAD = "ha-load"
UPGRADE_TAG = "localhost/cloudburst:upgrade"
ROLLOUT_TIMEOUT = 240
# the tiers a rolling upgrade replaces, in the order an operator would
TIERS = [("statefulset", "anna-routing"), ("statefulset", "cloudburst-scheduler"),
         ("statefulset", "anna-disk"), ("deployment", "anna-memory"),
         ("deployment", "cloudburst-executor"), ("deployment", "anna-monitor")]


def ha(c, h: Dict[str, Any]) -> None:
    """The steps above; `h` holds real_e2e's helpers and state (check, kjson, pods,
    is_ready, members, container_pid, step, timings, facts, admin, admin_client (a new
    cluster-key client of the routing pods' current addresses), key_dir, client)."""
    check, step, timings, facts = h["check"], h["step"], h["timings"], h["facts"]

    def pod(name: str):
        """The live V1Pod `name` of a StatefulSet (`NAME-N`: it keeps its name across
        restarts), through the shared helpers; LookupError while there is none."""
        for p in h["pods"](c, name.rsplit("-", 1)[0]):
            if p.metadata.name == name:
                return p
        raise LookupError(f"no live pod {NS}/{name}")

    def kill_pod(name: str) -> str:
        """SIGKILL the pod's first container's process, force-delete the pod; its old uid."""
        p = pod(name)
        os.kill(h["container_pid"](c, p), signal.SIGKILL)
        c.kubectl("-n", NS, "delete", "pod", name, "--grace-period=0", "--force",
                  "--wait=false")
        return p.metadata.uid

    def remade(name: str, old_uid: str, timeout: float = 180) -> float:
        t = time.monotonic()

        def ready():
            try:
                p = pod(name)
            except Exception:  # noqa: BLE001 - not there yet
                return False
            return p.metadata.uid != old_uid and h["is_ready"](p)
        wait(f"pod {name} made again and Ready", ready, timeout, interval=0.5)
        return time.monotonic() - t

    # ---- 1. the load, through kills and an upgrade ----
    with step("load pod running", timings):
        start_load(c, h["key_dir"], h["client_name"])
        log = wait("the load's READY line (or its failure)",
                   lambda: (lambda t: t if "HA-LOAD READY" in t or "HA-SUMMARY" in t
                            else None)(load_log(c)), 120)
        check("HA-SUMMARY" not in log, f"the load pod failed: {log[-1500:]}")
        wait("the load's first 20 calls", lambda: "HA-PROGRESS" in load_log(c), 60)
        facts["load"] = [ln for ln in load_log(c).splitlines() if "HA-LOAD READY" in ln][0]

    def set_phase(name: str) -> None:
        c.kubectl("-n", NS, "exec", LOAD, "--", "sh", "-c", f"echo {name} > /tmp/phase",
                  timeout=60)
        say(f"load phase: {name}")

    def load_goes_on(after: str) -> None:
        """Wait until the load has taken 40 more calls since now (so that each phase holds
        calls sent after its pod came back, not only those in flight at the kill)."""
        start = load_log(c).count("HA-PROGRESS")
        try:
            wait(f"the load taking 40 more calls {after}",
                 lambda: load_log(c).count("HA-PROGRESS") >= start + 2, 120, interval=1)
        except Exception as e:  # noqa: BLE001 - the summary says what happened to the calls
            say(f"going on: {e}")

    with step("kill a routing pod under load", timings):
        set_phase("routing-kill")
        uid = kill_pod("anna-routing-0")
        facts["routing-kill"] = f"anna-routing-0 remade and Ready in {remade('anna-routing-0', uid):.1f} s"
        load_goes_on("after anna-routing-0 came back")

    full = getattr(c.args, "ha", "routing") == "all"
    if not full:
        _load_summary(c, h, ("warm", "routing-kill"), set_phase)
        return

    with step("kill a scheduler pod under load", timings):
        set_phase("scheduler-kill")
        uid = kill_pod("cloudburst-scheduler-0")
        facts["scheduler-kill"] = (f"cloudburst-scheduler-0 remade and Ready in "
                                   f"{remade('cloudburst-scheduler-0', uid):.1f} s")
        load_goes_on("after cloudburst-scheduler-0 came back")

    with step("rolling upgrade of every tier under load", timings):
        set_phase("upgrade")
        run(c.ctr("images", "tag", "--force", c.args.image, UPGRADE_TAG))
        took = {}
        for kind, name in TIERS:
            t = time.monotonic()
            c.kubectl("-n", NS, "set", "image", f"{kind}/{name}", f"*={UPGRADE_TAG}")
            c.kubectl("-n", NS, "rollout", "status", f"{kind}/{name}",
                      f"--timeout={ROLLOUT_TIMEOUT}s", timeout=ROLLOUT_TIMEOUT + 30)
            took[name] = round(time.monotonic() - t, 1)
            say(f"{kind}/{name} upgraded in {took[name]} s")
        load_goes_on("after the upgrade")
        stale = [p["metadata"]["name"] for p in h["kjson"](c, "-n", NS, "get", "pods")["items"]
                 if p["metadata"]["name"] != LOAD and not p["metadata"].get("deletionTimestamp")
                 and p["status"].get("phase") == "Running"
                 and any(x["image"] != UPGRADE_TAG for x in p["spec"]["containers"])]
        check(not stale, f"pods still on the old image after the upgrade: {stale}")
        facts["upgrade"] = json.dumps(took)

    # a failed load does not stop the run: the disk step still runs, then the failure counts
    load_failure = None
    try:
        _load_summary(c, h, ("warm", "routing-kill", "scheduler-kill", "upgrade"), set_phase)
    except AssertionError as e:
        load_failure = e
        say(f"the load failed; going on to the disk step first: {e}"[:600])
    _scheduler_views(c)

    # ---- 2. the disk tier keeps its keys across a pod restart ----
    # every routing pod now (the upgrade replaced them all): replication changes reach each
    _disk_restart(c, h, h["admin_client"](), kill_pod, remade, pod)
    if load_failure is not None:
        raise load_failure


def _load_summary(c, h, phases, set_phase) -> None:
    """Stop the load and check its summary: a call completed in each of `phases`, and none
    failed but those in flight on the killed scheduler."""
    check, step, timings, facts = h["check"], h["step"], h["timings"], h["facts"]
    with step("load summary", timings):
        set_phase("stop")
        summary = wait("the load's summary", lambda: _summary(c), 120)
        text = load_log(c)
        notes = [ln for ln in text.splitlines()
                 if "HA-RESOLVE" in ln or "HA-DNS" in ln or " WARNING " in ln
                 or " ERROR " in ln]
        if notes:       # the client's failovers, and names resolved when none took a call
            say(f"the load's client said ({len(notes)} lines, the last 60):\n  "
                + "\n  ".join(ln[:300] for ln in notes[-60:]))
        check("error" not in summary, f"the load failed: {summary.get('error')}")
        for phase, s in summary.items():
            say(f"load {phase}: {s['ok']} ok, {s['failed']} failed, p50 {s['p50']} s, "
                f"max {s['max']} s")
            for f in s["failures"][:5]:
                say(f"  failed: {json.dumps(f)[:400]}")
        facts["load-phases"] = json.dumps({k: {"ok": v["ok"], "failed": v["failed"],
                                               "p50": v["p50"], "max": v["max"]}
                                           for k, v in summary.items()})
        for phase in phases:
            check(summary.get(phase, {}).get("ok", 0) > 0, f"no call completed during "
                  f"{phase}: {summary.get(phase)}")
        for phase, s in summary.items():
            bad = s["failures"]
            if phase == "scheduler-kill":      # only calls in flight on the killed one
                bad = [f for f in bad if not (f["type"] == "SchedulerUnavailable" and
                                              "cloudburst-scheduler-0." in f.get("scheduler", ""))]
            check(not bad, f"calls failed during {phase}: {bad[:5]}")
        # passed: the load's client may close (on a failure it stays open for a look)
        set_phase("exit")
        c.kubectl("-n", NS, "delete", "pod", LOAD, "--wait=false", check=False)


# what a scheduler logs when its view of the executors changes (scheduler/executor_events.py,
# scheduler/server.py): read after a failed load to tell which scheduler lost which workers
VIEW_LINES = ("dropped from scheduling", "warm-up over", "drain", "joined", "stopping",
              "stopped after", "no live executor worker left")


def _scheduler_views(c) -> None:
    """Print every scheduler pod's log lines about its view of the executors."""
    pods = json.loads(c.kubectl("-n", NS, "get", "pods", "-l",
                                "app.kubernetes.io/name=cloudburst-scheduler", "-o", "json",
                                check=False).stdout or '{"items": []}')
    for p in pods["items"]:
        name = p["metadata"]["name"]
        text = c.kubectl("-n", NS, "logs", name, "--timestamps", check=False).stdout or ""
        lines = [ln for ln in text.splitlines() if any(k in ln for k in VIEW_LINES)]
        say(f"scheduler {name} (started {p['status'].get('startTime')}): "
            f"{len(lines)} view lines, the last 40:\n  " + "\n  ".join(ln[:300] for ln in lines[-40:]))


def _disk_restart(c, h, admin, kill_pod, remade, pod) -> None:
    check, step, timings, facts = h["check"], h["step"], h["timings"], h["facts"]
    with step("disk pod restarted keeps its keys", timings):
        key, value = "ha/disk-only", b"kept on the volume"
        admin.set_replication(key, memory=0, disk=1)
        admin.put(key, value)
        check(admin.get_all(key) == value, f"{key} not read back before the restart")
        check(h["members"](admin).get("anna-disk-0") == "DISK",
              f"anna-disk-0 is not a DISK member: {h['members'](admin)}")
        from real_e2e import membership

        def addresses():
            """anna-disk-0's worker addresses in routing's membership (none: not a member)."""
            return {a for n in membership(admin).nodes if n.node_id == "anna-disk-0"
                    for a in n.worker_addresses}
        before = addresses()
        t0 = time.monotonic()
        uid = kill_pod("anna-disk-0")
        took = remade("anna-disk-0", uid)
        # the pod may be back before routing's heartbeat timeout: then its join replaces the
        # node (same id, new address) without routing ever dropping it
        wait("anna-disk-0 a member again, at its new address",
             lambda: (lambda now: now and now != before)(addresses()), 90)
        got = wait(f"{key} readable", lambda: _get_all(admin, key), 60)
        check(got == value, f"{key} after anna-disk-0 restarted: {got!r}, not {value!r}")
        claim = [v.persistent_volume_claim.claim_name for v in pod("anna-disk-0").spec.volumes
                 if v.persistent_volume_claim is not None]
        facts["disk-restart"] = (f"anna-disk-0 Ready {took:.1f} s after SIGKILL, its key read "
                                 f"back {time.monotonic() - t0:.1f} s after (claim {claim})")

def _get_all(admin, key):
    """The key's merged value; raises while it is not readable (the wait names the error)."""
    return admin.get_all(key)


def load_log(c) -> str:
    return c.kubectl("-n", NS, "logs", LOAD, check=False).stdout


def _summary(c):
    for ln in load_log(c).splitlines():
        if ln.startswith("HA-SUMMARY "):
            return json.loads(ln[len("HA-SUMMARY "):])
    return None


def start_load(c, key_dir: Path, client_name: str) -> None:
    """The load pod: the image, the client's keys in a Secret, ha_load.py in a ConfigMap."""
    c.kubectl("-n", NS, "create", "secret", "generic", "ha-client-key",
              f"--from-file=cluster.key={key_dir / 'cluster.key'}",
              f"--from-file=function.key={key_dir / 'function.key'}",
              f"--from-file=client.key={key_dir / 'clients' / (client_name + '.key')}",
              f"--from-file=client.key_secret={key_dir / 'clients' / (client_name + '.key_secret')}")
    c.kubectl("-n", NS, "create", "configmap", "ha-load",
              f"--from-file=ha_load.py={Path(__file__).resolve().parent / 'ha_load.py'}")
    spec = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": LOAD, "labels": {"app.kubernetes.io/name": LOAD}},
        "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
            "containers": [{
                "name": "load", "image": c.args.image, "imagePullPolicy": "Never",
                "command": ["python", "/load/ha_load.py"],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "SCHEDULERS", "valueFrom": {"configMapKeyRef": {
                            "name": "cloudburst-config", "key": "SCHEDULERS"}}},
                        {"name": "ANNA_ROUTING", "valueFrom": {"configMapKeyRef": {
                            "name": "cloudburst-config", "key": "ANNA_ROUTING"}}},
                        {"name": "CLIENT_NAME", "value": client_name}],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                "volumeMounts": [{"name": "load", "mountPath": "/load"},
                                 {"name": "keys", "mountPath": "/client-keys"}],
            }],
            "volumes": [
                {"name": "load", "configMap": {"name": "ha-load"}},
                {"name": "keys", "secret": {"secretName": "ha-client-key", "defaultMode": 0o440,
                                            "items": [
                    {"key": "cluster.key", "path": "cluster.key"},
                    {"key": "function.key", "path": "function.key"},
                    {"key": "client.key", "path": f"clients/{client_name}.key"},
                    {"key": "client.key_secret", "path": f"clients/{client_name}.key_secret"}]}},
            ],
        },
    }
    path = c.dir / "ha-load.json"
    path.write_text(json.dumps(spec))
    c.kubectl("-n", NS, "apply", "-f", str(path))
