"""The autoscaling part of the real-cluster end-to-end scenario (`scripts/k8s/test_real.sh
--e2e`, after scripts/k8s/real_e2e.py's steps and before scripts/k8s/real_ha.py's): both autoscalers run in their pods and act
through the Kubernetes API on real pods.

Steps (each timed; a failure raises E2EFailure naming the step and the object):
 1. Anna: the test overlay gives memory nodes an emulated capacity of MEMORY_CAPACITY bytes.
    `AUTOSCALE: "true"` is patched into the ConfigMap and the monitor restarted. Writing
    about 1.4x the capacity's S_upper share makes the monitor add a memory node: the
    anna-memory Deployment grows and the new pod joins routing's membership.
 2. Most of those keys are deleted; with the storage low and the cluster idle (the client
    reports its latency, far under the SLO), the monitor removes one memory node: the
    Deployment shrinks, the chosen pod leaves the ring gracefully, and every key that was
    kept reads back with its value (nothing acknowledged is lost).
 3. Executor nodes: the `cloudburst-autoscaler` Deployment is scaled to 1. A burst of slow
    calls (more than one node's workers can run) makes it add an executor pod; every call
    returns its own argument. Calls follow capacity: the calls still waiting when the new
    pod's workers join run there too (when it was Ready 2 s or more before the burst's end,
    at least one call ran on it). Once idle, it drains and removes one, and a call still
    works.
The monitor's decisions, with their reasons, are printed from its status key.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, List

from real_network import say, wait
from k8s_helpers import replicas  # real_network put tests/ on the path

NS = "cloudburst"
MEMORY_CAPACITY = 100_000       # the test overlay's MEMORY_NODE_CONFIG capacity_bytes
VALUE_BYTES = 1000
KEYS = 90                       # ~94 KB of 100 KB, over S_upper 0.6: two nodes needed
KEPT = 10                       # what stays after the deletes: ~10 KB, one node is enough
SLOW_CALLS = 40                 # 0.5 s each; one node of 2 workers needs 10 s for them
SCALE_TIMEOUT = 180


def _replicas(c, name: str) -> int:
    return replicas(c.cp, NS, name)


def _monitor_actions(admin) -> List[str]:
    """The monitor's recent decisions (its status key), newest last."""
    from anna_core.autoscale.reports import STATUS_KEY
    try:
        status = json.loads(admin.get(STATUS_KEY))
    except Exception:  # noqa: BLE001 - the status is informational here
        return []
    recent = [r.get("action", "") for r in status.get("recent", [])]
    return recent + list(status.get("actions", []))


def _diagnose(c, admin, deployment: str) -> str:
    """What the autoscaler saw and said: its status (Anna's monitor) and its log's tail."""
    from anna_core.autoscale.reports import STATUS_KEY
    parts = []
    if deployment == "anna-monitor":
        try:
            status = json.loads(admin.get(STATUS_KEY))
            parts.append("monitor status: " + json.dumps(
                {k: status.get(k) for k in ("tiers", "latency", "actions", "notes",
                                            "problems", "recent", "autoscaling")})[:3000])
        except Exception as e:  # noqa: BLE001 - diagnostics only
            parts.append(f"monitor status unreadable: {type(e).__name__}: {e}")
    log = c.kubectl("-n", NS, "logs", f"deploy/{deployment}", "--tail=40", check=False)
    parts.append(f"{deployment} log:\n{log.stdout}{log.stderr}")
    return "\n".join(parts)


def anna_autoscaling(c, kvs, admin, helpers: Dict[str, Callable[..., Any]],
                     step, timings: Dict[str, float], facts: Dict[str, str]) -> None:
    """Steps 1 and 2 (see the module contract). `helpers` holds real_e2e's check, pods,
    is_ready and members."""
    check, pods, is_ready, members = (helpers[k] for k in ("check", "pods", "is_ready",
                                                           "members"))
    with step("Anna autoscaling on (monitor restarted)", timings):
        c.kubectl("-n", NS, "patch", "configmap", "cloudburst-config", "--type", "merge",
                  "-p", json.dumps({"data": {"AUTOSCALE": "true"}}))
        c.kubectl("-n", NS, "rollout", "restart", "deployment", "anna-monitor")
        c.kubectl("-n", NS, "rollout", "status", "deployment", "anna-monitor",
                  "--timeout=120s", timeout=130)
        before = {p.metadata.name for p in pods(c, "anna-memory")}
        check(len(before) == 1 and _replicas(c, "anna-memory") == 1,
              f"expected one anna-memory pod before the scale-out, found {sorted(before)}")

    values = {f"e2e/auto/{i:03d}": bytes([i % 251]) * VALUE_BYTES for i in range(KEYS)}
    with step("storage over S_upper adds a memory node", timings):
        t0 = time.monotonic()
        for k, v in values.items():
            kvs.put(k, v)

        def grown():
            kvs.get("e2e/auto/000")   # traffic, so reports keep coming
            new = [p.metadata.name for p in pods(c, "anna-memory")
                   if p.metadata.name not in before and is_ready(p)]
            return new if new and members(admin).get(new[0]) == "MEMORY" else None
        try:
            added = wait("a new anna-memory pod Ready and a MEMORY member", grown,
                         SCALE_TIMEOUT, interval=1)[0]
        except RuntimeError as e:
            raise AssertionError(f"{e}\n{_diagnose(c, admin, 'anna-monitor')}") from None
        check(_replicas(c, "anna-memory") == 2, "anna-memory's replicas are not 2 after "
              "the scale-out")
        facts["memory-added"] = (f"{added} joined {time.monotonic() - t0:.1f} s after the "
                                 f"writes; decisions: "
                                 f"{[a for a in _monitor_actions(admin) if 'added' in a][-1:]}")

    kept = dict(list(values.items())[:KEPT])
    with step("idle, low storage removes a memory node; no data lost", timings):
        for k in list(values)[KEPT:]:
            kvs.delete(k)
        t0 = time.monotonic()
        two = {p.metadata.name for p in pods(c, "anna-memory")}
        unreadable: List[str] = []

        def shrunk():
            # the reads are the check (every kept key, every round) and the client's latency
            # reports the monitor's removal rule needs
            unreadable.extend(k for k, v in kept.items() if kvs.get(k) != v)
            check(not unreadable, f"kept keys read back wrong during the scale-in: "
                  f"{sorted(set(unreadable))[:5]}")
            left = {p.metadata.name for p in pods(c, "anna-memory")}
            gone = two - left
            return gone if (_replicas(c, "anna-memory") == 1 and len(left) == 1 and gone
                            and not gone & set(members(admin))) else None
        try:
            gone = wait("one anna-memory pod removed and out of the membership", shrunk,
                        SCALE_TIMEOUT, interval=1)
        except RuntimeError as e:
            raise AssertionError(f"{e}\n{_diagnose(c, admin, 'anna-monitor')}") from None
        for k, v in kept.items():
            got = kvs.get(k)
            check(got == v, f"{k} after the memory node left: {got!r:.40} instead of its "
                  f"value")
        facts["memory-removed"] = (f"{sorted(gone)} left {time.monotonic() - t0:.1f} s after "
                                   f"the deletes; {len(kept)} kept keys all read back; "
                                   f"decisions: "
                                   f"{[a for a in _monitor_actions(admin) if 'removed' in a][-1:]}")
    with step("Anna autoscaling off", timings):
        c.kubectl("-n", NS, "patch", "configmap", "cloudburst-config", "--type", "merge",
                  "-p", json.dumps({"data": {"AUTOSCALE": "false"}}))
        c.kubectl("-n", NS, "rollout", "restart", "deployment", "anna-monitor")
        c.kubectl("-n", NS, "rollout", "status", "deployment", "anna-monitor",
                  "--timeout=120s", timeout=130)


def executor_autoscaling(c, client, helpers: Dict[str, Callable[..., Any]], step,
                         timings: Dict[str, float], facts: Dict[str, str]) -> None:
    """Step 3 (see the module contract)."""
    check, pods, is_ready = (helpers[k] for k in ("check", "pods", "is_ready"))
    from cloudburst.futures import gather

    def slow(lib, x):
        import time as t
        t.sleep(0.5)    # the workload: a call that keeps a worker busy
        return [x, lib.getid()]     # the worker id starts with its pod's name
    client.register(slow, "slow")
    with step("executor autoscaler on", timings):
        before = {p.metadata.name for p in pods(c, "cloudburst-executor")}
        check(len(before) == 1, f"expected one executor pod, found {sorted(before)}")
        c.kubectl("-n", NS, "scale", "deployment", "cloudburst-autoscaler", "--replicas=1")
        wait("the cloudburst-autoscaler pod Running",
             lambda: [p for p in pods(c, "cloudburst-autoscaler")
                      if p.status.phase == "Running"], 120)
        # a burst before the process watches the load would be over before it looks (its
        # start takes seconds on a loaded machine): wait until it says it is on
        wait("the executor autoscaler on",
             lambda: "executor autoscaling on" in c.kubectl(
                 "-n", NS, "logs", "deploy/cloudburst-autoscaler", check=False).stdout, 120)

    with step("a burst of calls adds an executor node", timings):
        t0 = time.monotonic()
        futures = [client.call("slow", i, timeout=SCALE_TIMEOUT) for i in range(SLOW_CALLS)]
        try:
            added = wait("a second executor pod Ready",
                         lambda: [p.metadata.name for p in pods(c, "cloudburst-executor")
                                  if p.metadata.name not in before and is_ready(p)],
                         SCALE_TIMEOUT, interval=1)
        except RuntimeError as e:
            raise AssertionError(f"{e}\n{_diagnose(c, None, 'cloudburst-autoscaler')}") \
                from None
        t_added = time.monotonic() - t0
        results = gather(futures, SCALE_TIMEOUT)
        took = time.monotonic() - t0
        check([r[0] for r in results] == list(range(SLOW_CALLS)),
              f"the burst's results are wrong: {results[:10]}...")
        first = next(iter(before))
        moved = sum(1 for _, wid in results if not wid.startswith(first + "."))
        if t_added <= took - 2:
            check(moved > 0, f"none of the {SLOW_CALLS} calls ran on the executor pod(s) "
                             f"added {t_added:.1f} s into a burst that took {took:.1f} s: "
                             f"waiting calls did not follow capacity")
        facts["executor-added"] = (f"{added[0]} Ready {t_added:.1f} s into a burst of "
                                   f"{SLOW_CALLS} x 0.5 s calls; all {SLOW_CALLS} returned "
                                   f"after {took:.1f} s (one node alone: "
                                   f"{SLOW_CALLS * 0.5 / 2:g} s), {moved} on added pods")

    with step("idle: one executor node drained and removed", timings):
        t0 = time.monotonic()
        try:
            wait("the executor Deployment back to 1 replica with one pod",
                 lambda: _replicas(c, "cloudburst-executor") == 1
                 and len(pods(c, "cloudburst-executor")) == 1, SCALE_TIMEOUT, interval=1)
        except RuntimeError as e:
            raise AssertionError(f"{e}\n{_diagnose(c, None, 'cloudburst-autoscaler')}") \
                from None
        v = client.call("slow", 7, timeout=60).get(timeout=60)
        check(v[0] == 7, f"a call after the scale-in returned {v!r}")
        facts["executor-removed"] = (f"back to one executor pod "
                                     f"{time.monotonic() - t0:.1f} s after the burst")
        c.kubectl("-n", NS, "scale", "deployment", "cloudburst-autoscaler", "--replicas=0")
    say("autoscaling steps done")
