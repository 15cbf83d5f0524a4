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

Run standalone: `python -m anna_core.monitor --config PATH|JSON` (a `MonitorConfig`,
anna_core/monitor_config.py; every field is also a flag that overrides it, e.g. `--routing
ADDR --period T --backup-to s3://bucket/prefix --backup-every S`) observes. With
`autoscale`, `kubernetes_namespace` (and optionally `memory_deployment`, `disk_deployment`,
`policy_config`, `kubeconfig`) it autoscales a cluster on Kubernetes: it builds a
`KubernetesPool` (k8s/pool.py) from the pod's ServiceAccount
(or the kubeconfig) and carries the policy out through it; the `anna-monitor` pod runs it so
when the ConfigMap turns autoscaling on. Node ids are pod names (each node is named after
its pod), so a RemoveNode names the pod to delete. `anna local --autoscale` runs one
in-process with a local cluster manager.
"""
from __future__ import annotations

import collections
import json
import logging
import signal
import sys
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

from k8s.errors import KubernetesError
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.config import parse_config, role_parser

from .autoscale.actions import Note
from pools.manager import PoolManager

from .autoscale.manager import apply
from .autoscale.policy import PolicyEngine
from .autoscale.policy_config import PolicyConfig
from .autoscale.reports import (STATUS_KEY, bucket_of, client_reports_key,
                                decode_client_reports, decode_node_reports, expired_buckets,
                                worker_reports_key)
from .autoscale.status import build_status
from .autoscale.summaries import ClientReport, WorkerReport, summarize
from .config import DISK, MEMORY, Replication
from .errors import AnnaError, KeyNotFound
from .monitor_config import MonitorConfig
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
                 manager: Optional[PoolManager] = None, autoscale: bool = True,
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
        return {t: self._of(t, "nodes") + self._of(t, "leaving") for t in (MEMORY, DISK)}

    def _listing(self, which: str) -> Dict[str, List[str]]:
        if self.manager is None:
            return {}
        return {t: self._of(t, which) for t in (MEMORY, DISK)}

    def _of(self, tier: str, which: str) -> List[str]:
        """The manager's `which` (nodes, pending, leaving) of `tier`; [] for a tier it does
        not manage (e.g. a cluster on Kubernetes without a disk tier)."""
        assert self.manager is not None
        if tier not in self.manager.pools():
            return []
        return list(getattr(self.manager, which)(tier))

    def _act(self, summary: Any, now: float, problems: List[str]) -> List[str]:
        assert self.manager is not None
        for event in self.manager.poll(now):
            if event.error is not None:
                self.log.warning("%s node %s: %s: %s", event.pool, event.node_id, event.kind,
                                 event.error)
                problems.append(f"{event.pool} node {event.node_id}: {event.kind}: "
                                f"{event.error}")
            else:
                self.log.info("%s node %s: %s", event.pool, event.node_id, event.kind)
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


def parse_args(argv: Optional[Sequence[str]] = None) -> MonitorConfig:
    """The configuration of `python -m anna_core.monitor` (`--config PATH|JSON`, every
    MonitorConfig field a flag over it; see `--help`); a bad field exits 2 naming it."""
    p = role_parser(MonitorConfig, "python -m anna_core.monitor",
                    "Anna monitor: summarises the cluster's reports every period and publishes "
                    "them for `anna status` (nodes must run with report_period). With "
                    "autoscale and kubernetes_namespace it also acts: nodes are the pods of "
                    "one Deployment per tier, added and removed through the Kubernetes API "
                    "(KubernetesPool).")
    config, _ = parse_config(p, MonitorConfig, argv)
    return config


def policy_of(config: MonitorConfig) -> PolicyConfig:
    """PolicyConfig from the configuration's period and policy knobs (ValueError naming a
    bad knob)."""
    return config.policy()


def kubernetes_manager(config: MonitorConfig) -> Optional[PoolManager]:
    """The KubernetesPool `autoscale` asks for (None without it): the API client from
    `kubeconfig` or the pod's ServiceAccount, one workload per tier. Node ids are pod
    names, and each Anna node is named after its pod (its node_id is POD_NAME), so the ids in
    the nodes' reports are the ids the manager lists and removes. Raises `KubernetesError`
    naming the call that failed (RBAC, a missing Deployment, an unreachable API)."""
    if not config.autoscale:
        return None
    from k8s.api import connect
    from k8s.pool import KubernetesPool
    deployments = {MEMORY: config.memory_deployment}
    if config.disk_deployment:
        deployments[DISK] = config.disk_deployment
    return KubernetesPool(connect(config.kubeconfig), config.kubernetes_namespace, deployments,
                          startup_timeout=config.pod_startup_timeout,
                          leave_timeout=config.pod_leave_timeout,
                          request_timeout=config.request_timeout)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m anna_core.monitor`: a monitor for any Anna cluster; with --autoscale and
    --kubernetes-namespace, the autoscaler of a cluster on Kubernetes."""
    from runtime.auth import AuthConfig
    from .client import Client
    config = parse_args(argv)
    configure_logging(config.log_level, "monitor", family="anna")
    raise_descriptor_limit()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    policy = policy_of(config)          # checked with the configuration
    auth = AuthConfig(config.key_dir) if config.key_dir else None
    backups = None
    if config.backup_to:
        from .backup_schedule import BackupSchedule
        try:
            backups = BackupSchedule(config.backup_to, config.backup_every, config.routing, auth,
                                     ip=config.ip)
        except (AnnaError, ValueError) as e:
            print(f"monitor: {e}", file=sys.stderr)
            return 2
    try:
        manager = kubernetes_manager(config)
    except (AnnaError, KubernetesError) as e:
        print(f"monitor: cannot manage the cluster's nodes: {e}", file=sys.stderr)
        return 1
    if manager is not None:
        log.info("autoscaling on: %s", ", ".join(
            f"{t} {manager.deployments[t]}" for t in manager.deployments))   # type: ignore
    try:
        with Client(config.routing, auth=auth, timeout=2.0, retries=1, ip=config.ip) as kvs:
            monitor = Monitor(kvs, policy=policy, manager=manager, autoscale=config.autoscale,
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
