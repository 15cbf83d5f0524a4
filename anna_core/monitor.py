"""The monitor: reads the reports every period, summarises, decides, acts, publishes its status.

Contract (dissertation 3.2.4 and 3.3; the decisions are `autoscale/`'s pure cores):
- `Monitor(kvs, policy=PolicyConfig(...), manager=None, default_replication=...)`. `kvs`
  is an `anna_core.Client` holding the cluster's key (`auth=cluster.cluster_auth`): it reads
  every report, deletes read buckets and (when autoscaling) changes replication.
- `tick(wall, now)` is one period: read the nodes' and clients' reports of the current and
  the previous bucket (`autoscale/reports.py`; each report counts once), `summarize` them
  with the members the cluster manager lists (running plus leaving nodes; without a manager,
  the nodes that reported), and, with a manager, hand the manager's events to the log, run
  `PolicyEngine.decide(summary, now)` and carry the actions out with `autoscale.apply` (each
  logged at INFO with its reason; failures at WARNING). Then delete buckets older than the
  previous one, and PUT the status (`autoscale/status.py`) under `STATUS_KEY` for `anna
  status`. It returns the status. A period whose reads fail still publishes a status
  naming the failure; nothing here raises on the cluster's contents.
- `start()` runs `tick` on a thread three quarters of the way into every wall-clock bucket
  (reporters write a quarter of the way in); `stop()` ends it within a tick. `history` keeps
  the last `history_limit` statuses (benchmarks plot them); `latest` is the newest.
- Replication overrides: read once at start from routing's persisted index, then kept up to
  date with the ones this monitor sets (the engine also remembers them).
- Without a manager (or with `autoscale=False`) the monitor only observes: summaries and
  status, no actions.
- Scheduled backups (optional, `backups=BackupSchedule(...)`, `backup_schedule.py`): each
  period calls `maybe_start`, so a due backup starts on its own thread (never holding the
  period up), and the status carries `"backups"`: the schedule and the last backup's result.
  `stop()` waits for a running backup.

Run standalone: `python -m anna_core.monitor --routing ADDR [--key-dir D] [--period T]
[--backup-to s3://bucket/prefix --backup-every S]` observes. With `--autoscale
--kubernetes-namespace NS [--memory-deployment D] [--disk-deployment D] [--policy-config
JSON] [--kubeconfig PATH]` it autoscales a cluster on Kubernetes: it builds a
`KubernetesClusterManager` (k8s/pool.py) from the pod's ServiceAccount
(or the kubeconfig) and carries the policy out through it; the `anna-monitor` pod runs it so
when the ConfigMap says `AUTOSCALE: "true"` (k8s/entrypoint.py). Node ids are pod names (each
node is named after its pod), so a RemoveNode names the pod to delete. `anna local
--autoscale` runs one in-process with a local cluster manager.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import signal
import sys
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

from k8s.api import add_api_arguments
from k8s.errors import KubernetesError
from k8s.names import DISK_SCALED as DISK_WORKLOAD, MEMORY as MEMORY_WORKLOAD
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.cli import knobs_from_json, positive_float

from .autoscale.actions import Note
from .autoscale.manager import ClusterManager, apply
from .autoscale.policy import PolicyEngine
from .autoscale.policy_config import PolicyConfig
from .autoscale.reports import (STATUS_KEY, bucket_of, client_reports_key,
                                decode_client_reports, decode_node_reports, expired_buckets,
                                worker_reports_key)
from .autoscale.status import build_status
from .autoscale.summaries import ClientReport, WorkerReport, summarize
from .config import DISK, MEMORY, Replication
from .errors import AnnaError, KeyNotFound
from .membership import REPLICATION_INDEX_KEY, loaded_overrides, replication_metadata_key

__all__ = ["Monitor", "MONITOR_PHASE", "main", "parse_args", "policy_of", "kubernetes_manager"]

log = logging.getLogger("anna.monitor")

MONITOR_PHASE = 0.75          # how far into a bucket the monitor reads (reporters write at 0.25)
MAX_LOADED_OVERRIDES = 1000   # persisted overrides read at start


def _elements(kvs: Any, key: str) -> List[bytes]:
    try:
        return sorted(kvs.get(key).reveal())
    except KeyNotFound:
        return []


class Monitor:
    """The autoscaling monitor service (see the module contract)."""

    def __init__(self, kvs: Any, *, policy: Optional[PolicyConfig] = None,
                 manager: Optional[ClusterManager] = None, autoscale: bool = True,
                 default_replication: Replication = Replication(),
                 history_limit: int = 10_000, logger: logging.Logger = log,
                 backups: Optional[Any] = None) -> None:
        self.kvs = kvs
        self.backups = backups
        self.policy = policy if policy is not None else PolicyConfig()
        self.period = self.policy.monitoring_period
        self.manager = manager
        self.autoscaling = autoscale and manager is not None
        self.engine = PolicyEngine(self.policy)
        self.default_replication = default_replication
        self.overrides: Dict[str, Replication] = {}
        self.history: Deque[Dict[str, Any]] = collections.deque(maxlen=history_limit)
        self.latest: Optional[Dict[str, Any]] = None
        self.ticks = 0
        self.log = logger
        self._recent: Deque[Dict[str, Any]] = collections.deque(maxlen=20)
        self._seen: Dict[int, Set[Tuple[str, str, int]]] = {}
        self._last_deleted: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._overrides_loaded = False
        self._notes: List[str] = []
        self._note_kinds: Set[str] = set()

    # ---- one period ---------------------------------------------------------------------

    def tick(self, wall: float, now: float) -> Dict[str, Any]:
        """Run one monitoring period (see the module contract) and return its status."""
        self.ticks += 1
        bucket = bucket_of(wall, self.period)
        problems: List[str] = []
        if not self._overrides_loaded:
            self._load_overrides(problems)
        workers, clients, raw = self._read_reports(bucket, problems)
        members = self._members()
        summary = summarize(workers, clients, period=self.period, members=members,
                            overrides=self.overrides,
                            default_replication=self.default_replication)
        reasons: List[str] = []
        self._notes = []
        if self.autoscaling:
            reasons = self._act(summary, now, problems)
        self._expire(bucket, problems)
        earlier = list(self._recent)
        self._recent.extend({"time": wall, "action": reason} for reason in reasons)
        grace = self.engine.grace_until()
        status = build_status(
            summary, wall=wall, bucket=bucket, slo=self.policy.latency_slo,
            statistic=self.policy.latency_statistic, raw_workers=raw, actions=reasons,
            recent=earlier,
            pending=self._listing("pending"), leaving=self._listing("leaving"),
            grace_until=max(0.0, grace - now) if grace is not None else None,
            autoscaling=self.autoscaling, problems=problems, notes=self._notes)
        if self.backups is not None:
            self.backups.maybe_start(now)
            status["backups"] = self.backups.status()
        try:
            self.kvs.put(STATUS_KEY, json.dumps(status).encode())
        except AnnaError as e:
            self.log.warning("publishing the monitor status failed: %s", e)
        self.latest = status
        self.history.append(status)
        return status

    def _read_reports(self, bucket: int, problems: List[str]
                      ) -> Tuple[List[WorkerReport], List[ClientReport], List[Dict[str, Any]]]:
        for old in [b for b in self._seen if b < bucket - 2]:
            del self._seen[old]
        workers: List[WorkerReport] = []
        clients: List[ClientReport] = []
        raw: List[Dict[str, Any]] = []
        for b in (bucket - 1, bucket):
            seen = self._seen.setdefault(b, set())
            try:
                w, r, p = decode_node_reports(_elements(self.kvs, worker_reports_key(b)), seen)
                c, q = decode_client_reports(_elements(self.kvs, client_reports_key(b)), seen)
            except AnnaError as e:
                problems.append(f"reading the reports of bucket {b} failed: {e}")
                continue
            workers += w
            raw += r
            clients += c
            problems += p + q
        return workers, clients, raw

    def _members(self) -> Optional[Dict[str, List[str]]]:
        if self.manager is None:
            return None
        return {t: self.manager.nodes(t) + self.manager.leaving(t) for t in (MEMORY, DISK)}

    def _listing(self, which: str) -> Dict[str, List[str]]:
        if self.manager is None:
            return {}
        return {t: list(getattr(self.manager, which)(t)) for t in (MEMORY, DISK)}

    def _act(self, summary: Any, now: float, problems: List[str]) -> List[str]:
        assert self.manager is not None
        for event in self.manager.poll(now):
            if event.error is not None:
                self.log.warning("%s node %s: %s: %s", event.tier, event.node_id, event.kind,
                                 event.error)
                problems.append(f"{event.tier} node {event.node_id}: {event.kind}: "
                                f"{event.error}")
            else:
                self.log.info("%s node %s: %s", event.tier, event.node_id, event.kind)
        actions = self.engine.decide(summary, now)
        notes = [a for a in actions if isinstance(a, Note)]
        self._log_notes(notes)
        outcomes = apply([a for a in actions if not isinstance(a, Note)], self.manager,
                         self.kvs, self.log)
        reasons = []
        for outcome in outcomes:
            action = outcome.action
            what = _describe(action)
            if outcome.ok:
                replication = getattr(action, "replication", None)
                if replication is not None:
                    self.overrides[action.key] = replication
            else:
                what += f" (failed: {outcome.error})" if outcome.error else " (skipped)"
            reasons.append(what)
        self._notes = [n.reason for n in notes]
        return reasons

    def _log_notes(self, notes: Sequence[Note]) -> None:
        """Why the engine held back: at INFO when the kind of note is new this period (the
        same hold repeats every period of a grace period), else at DEBUG."""
        kinds = set()
        for note in notes:
            kind = note.reason.split(":")[0]
            kinds.add(kind)
            level = logging.DEBUG if kind in self._note_kinds else logging.INFO
            self.log.log(level, "held back: %s", note.reason)
        self._note_kinds = kinds

    def _expire(self, bucket: int, problems: List[str]) -> None:
        for b in expired_buckets(bucket, self._last_deleted):
            try:
                self.kvs.delete(worker_reports_key(b))
                self.kvs.delete(client_reports_key(b))
            except AnnaError as e:
                problems.append(f"deleting the reports of bucket {b} failed: {e}")
                return
            self._last_deleted = b

    def _load_overrides(self, problems: List[str]) -> None:
        try:
            index = sorted(k.decode(errors="replace")
                           for k in _elements(self.kvs, REPLICATION_INDEX_KEY))
            values: Dict[str, bytes] = {}
            for key in index[:MAX_LOADED_OVERRIDES]:
                try:
                    values[replication_metadata_key(key)] = self.kvs.get(
                        replication_metadata_key(key))
                except KeyNotFound:
                    pass
        except AnnaError as e:
            problems.append(f"reading the replication overrides failed (next period): {e}")
            return
        overrides, bad = loaded_overrides(index[:MAX_LOADED_OVERRIDES], values)
        self.overrides.update(overrides)
        problems.extend(bad)
        self._overrides_loaded = True

    # ---- the thread ---------------------------------------------------------------------

    def start(self) -> "Monitor":
        """Run `tick` every period on a thread (see the module contract)."""
        self._thread = threading.Thread(target=self._run, name="anna-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread (waits for the current tick, at most `timeout` seconds)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self.backups is not None and not self.backups.stop(timeout):
            self.log.warning("a scheduled backup was still running after %.0f s", timeout)

    def _run(self) -> None:
        while True:
            wall = time.time()
            due = (bucket_of(wall, self.period) + MONITOR_PHASE) * self.period
            if due < wall:
                due += self.period
            if self._stop.wait(due - wall):
                return
            try:
                self.tick(time.time(), time.monotonic())
            except Exception:   # noqa: BLE001 - the monitor keeps monitoring
                self.log.exception("monitor period failed; next period continues")


def _describe(action: Any) -> str:
    """An action as one line: the engine's reason (it names what was done and why), and the
    new vector of a replication change."""
    reason = getattr(action, "reason", repr(action))
    replication = getattr(action, "replication", None)
    if replication is not None:
        return f"{reason} [replication {action.key!r} -> {list(replication.as_tuple())}]"
    return reason


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line of `python -m anna_core.monitor` (see `--help`)."""
    p = argparse.ArgumentParser(prog="python -m anna_core.monitor",
                                description="Anna monitor: summarises the cluster's reports "
                                            "every period and publishes them for `anna status` "
                                            "(nodes must run with --report-period). With "
                                            "--autoscale and --kubernetes-namespace it also "
                                            "acts: nodes are the pods of one Deployment per "
                                            "tier, added and removed through the Kubernetes "
                                            "API (KubernetesClusterManager).")
    p.add_argument("--routing", required=True, action="append", help="routing address(es)")
    p.add_argument("--key-dir", help="the cluster's key directory (the monitor uses the "
                                     "cluster key)")
    p.add_argument("--period", type=positive_float, default=PolicyConfig().monitoring_period,
                   help="monitoring period T in seconds (the nodes' --report-period)")
    p.add_argument("--backup-to", metavar="s3://BUCKET/PREFIX", default=None,
                   help="back the cluster up under this prefix (a dated prefix per backup; "
                        "AWS settings from the standard AWS configuration)")
    p.add_argument("--backup-every", type=positive_float, default=24 * 3600.0, metavar="S",
                   help="seconds between scheduled backups (with --backup-to)")
    k = p.add_argument_group("autoscaling on Kubernetes")
    k.add_argument("--autoscale", action="store_true",
                   help="carry the policy's decisions out (replication through routing, nodes "
                        "through Kubernetes); needs --kubernetes-namespace. Without it the "
                        "monitor only observes")
    k.add_argument("--kubernetes-namespace", metavar="NS", default=None,
                   help="the namespace of the Anna Deployments (with --autoscale)")
    k.add_argument("--memory-deployment", default=MEMORY_WORKLOAD, metavar="NAME",
                   help="the memory tier's Deployment")
    k.add_argument("--disk-deployment", default=DISK_WORKLOAD, metavar="NAME",
                   help="the disk tier's workload: a Deployment's name or statefulset/NAME "
                        "(default: the disk StatefulSet; '': no disk tier is managed)")
    k.add_argument("--policy-config", metavar="JSON", default="",
                   help="a JSON object of PolicyConfig knobs (anna_core/autoscale/"
                        "policy_config.py), e.g. '{\"grace_period\": 60, \"max_nodes\": 6}'; "
                        "the monitoring period is --period (an observing monitor uses the "
                        "latency SLO for its status)")
    add_api_arguments(k, pods="Anna", leave_default=150.0)
    p.add_argument("--ip", default="127.0.0.1",
                   help="the address this process' reply sockets bind and give to routing and "
                        "the nodes; they must reach it (a pod's own address in Kubernetes)")
    p.add_argument("--log-level", default="info", help="debug, info, warning or error")
    args = p.parse_args(argv)
    if args.autoscale and not args.kubernetes_namespace:
        p.error("--autoscale needs a cluster manager: pass --kubernetes-namespace (the monitor "
                "process manages Kubernetes Deployments; `anna local --autoscale` runs a "
                "local cluster's monitor)")
    if args.kubernetes_namespace and not args.autoscale:
        p.error("--kubernetes-namespace is for --autoscale (an observing monitor does not "
                "call the Kubernetes API)")
    if args.kubeconfig and not args.autoscale:
        p.error("--kubeconfig needs --autoscale")
    if args.autoscale and not args.memory_deployment:
        p.error("--memory-deployment must name the memory tier's Deployment")
    return args


def policy_of(args: argparse.Namespace) -> PolicyConfig:
    """PolicyConfig from --period and --policy-config (ValueError naming a bad knob)."""
    knobs = knobs_from_json(getattr(args, "policy_config", "") or "", PolicyConfig,
                            "--policy-config")
    if "monitoring_period" in knobs and knobs["monitoring_period"] != args.period:
        raise ValueError("--policy-config may not set monitoring_period: it is --period, "
                         "which must equal the nodes' --report-period")
    for name in ("memory_storage_bounds", "disk_storage_bounds", "latency_bounds",
                 "compute_bounds"):
        if isinstance(knobs.get(name), list):
            knobs[name] = tuple(knobs[name])
    return PolicyConfig(**{**knobs, "monitoring_period": args.period})


def kubernetes_manager(args: argparse.Namespace) -> Optional[ClusterManager]:
    """The KubernetesClusterManager --autoscale asks for (None without it): the API client
    from --kubeconfig or the pod's ServiceAccount, one Deployment per tier. Node ids are pod
    names, and k8s/entrypoint.py names each Anna node after its pod (POD_NAME), so the ids in
    the nodes' reports are the ids the manager lists and removes. Raises `KubernetesError`
    naming the call that failed (RBAC, a missing Deployment, an unreachable API)."""
    if not args.autoscale:
        return None
    from k8s.api import connect
    from k8s.pool import KubernetesClusterManager
    deployments = {MEMORY: args.memory_deployment}
    if args.disk_deployment:
        deployments[DISK] = args.disk_deployment
    return KubernetesClusterManager(connect(args.kubeconfig), args.kubernetes_namespace,
                                    deployments, startup_timeout=args.pod_startup_timeout,
                                    leave_timeout=args.pod_leave_timeout,
                                    request_timeout=args.request_timeout)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m anna_core.monitor`: a monitor for any Anna cluster; with --autoscale and
    --kubernetes-namespace, the autoscaler of a cluster on Kubernetes."""
    from runtime.auth import AuthConfig
    from .client import Client
    args = parse_args(argv)
    configure_logging(args.log_level, "monitor", family="anna")
    raise_descriptor_limit()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        policy = policy_of(args)
    except ValueError as e:
        print(f"monitor: {e}", file=sys.stderr)
        return 2
    auth = AuthConfig(args.key_dir) if args.key_dir else None
    backups = None
    if args.backup_to:
        from .backup_schedule import BackupSchedule
        try:
            backups = BackupSchedule(args.backup_to, args.backup_every, args.routing, auth,
                                     ip=args.ip)
        except (AnnaError, ValueError) as e:
            print(f"monitor: {e}", file=sys.stderr)
            return 2
    try:
        manager = kubernetes_manager(args)
    except (AnnaError, KubernetesError) as e:
        print(f"monitor: cannot manage the cluster's nodes: {e}", file=sys.stderr)
        return 1
    if manager is not None:
        log.info("autoscaling on: %s", ", ".join(
            f"{t} {manager.deployments[t]}" for t in manager.deployments))   # type: ignore
    try:
        with Client(args.routing, auth=auth, timeout=2.0, retries=1, ip=args.ip) as kvs:
            monitor = Monitor(kvs, policy=policy, manager=manager, autoscale=args.autoscale,
                              backups=backups).start()
            while not stop.wait(1.0):
                pass
            monitor.stop()
    finally:
        if manager is not None:
            manager.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
