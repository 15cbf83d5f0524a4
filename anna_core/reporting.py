"""Reporting statistics into Anna: the node's reporter thread and the client's latency hook.

Contract (the encoding and the keys are `autoscale/reports.py`'s; dissertation 3.2.4):
- `NodeReporter(node, node_id, tier, routing, period, auth)` is a thread in the KVS node
  process. Once per period, a quarter of the way into each wall-clock bucket (so the
  monitor, which reads three quarters of the way in, finds it), it closes the workers'
  report period (`_core.Node.take_report()`) and adds the node's report to the bucket's
  SetLattice through an `anna_core.Client` of the cluster (the node's own credentials).
  A failed report (a worker slow to answer, the KVS unreachable) is logged at WARNING, at
  most once a minute, and the next period tries again: reporting never stops a node.
  `stop()` ends it within one client timeout.
- `ClientLatencyReports(client_id, period)` is what `anna_core.Client(report_period=T)`
  keeps: every request's latency goes to a `LatencyRecorder`; the first request a quarter
  into a bucket (or later) publishes the recorder's report for the past period into that
  bucket, on the request path (one extra PUT per period; a client that makes no requests
  reports nothing, as it observed nothing). A failed publication is logged and dropped.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, List, Optional, Sequence

from ._core import SetLattice
from .autoscale.reports import (LatencyRecorder, bucket_of, client_reports_key,
                                encode_client_report, encode_node_report, worker_reports_key)

__all__ = ["NodeReporter", "ClientLatencyReports", "REPORT_PHASE"]

log = logging.getLogger("anna.reporting")

REPORT_PHASE = 0.25      # reporters write this far into a bucket; the monitor reads at 0.75
WARN_EVERY = 60.0        # seconds between two warnings of failed reports


def next_report_time(wall: float, period: float, phase: float = REPORT_PHASE) -> float:
    """The first wall-clock time >= `wall` that is `phase` of the way into a bucket."""
    b = bucket_of(wall, period)
    t = (b + phase) * period
    return t if t >= wall else t + period


class NodeReporter:
    """The KVS node's statistics reporter thread (see the module contract)."""

    def __init__(self, node: Any, node_id: str, tier: str, routing: Sequence[str],
                 period: float, auth: Any = None, ip: str = "127.0.0.1",
                 timeout: float = 2.0) -> None:
        if not period > 0:
            raise ValueError(f"report period must be > 0, got {period!r}")
        self.node, self.node_id, self.tier = node, node_id, tier
        self.routing, self.period, self.auth, self.ip = list(routing), period, auth, ip
        self.timeout = timeout
        self.reports_sent = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reporter-{node_id}",
                                         daemon=True)
        self._last_warning = -WARN_EVERY

    def start(self) -> "NodeReporter":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.timeout * 3 + 5)

    def _run(self) -> None:
        from .client import Client   # the client imports this module
        kvs = Client(self.routing, auth=self.auth, ip=self.ip, timeout=self.timeout, retries=0)
        seq = 0
        try:
            while True:
                wall = time.time()
                if self._stop.wait(max(0.0, next_report_time(wall, self.period) - wall)):
                    return
                seq += 1
                try:
                    workers = self.node.take_report(int(self.timeout * 1000))
                    wall = time.time()
                    blob = encode_node_report(self.node_id, self.tier, seq, wall, workers)
                    kvs.put(worker_reports_key(bucket_of(wall, self.period)),
                            SetLattice([blob]))
                    self.reports_sent += 1
                except Exception as e:   # noqa: BLE001 - reporting must never stop the node
                    self.failures += 1
                    now = time.monotonic()
                    if now - self._last_warning >= WARN_EVERY:
                        self._last_warning = now
                        log.warning("node %s: statistics report %d failed (%d so far): %s",
                                    self.node_id, seq, self.failures, e)
        finally:
            kvs.close()


class ClientLatencyReports:
    """A client's latency record and its publication schedule (see the module contract)."""

    def __init__(self, client_id: str, period: float) -> None:
        if not period > 0:
            raise ValueError(f"report_period must be > 0, got {period!r}")
        self.client_id = client_id
        self.period = period
        self.recorder = LatencyRecorder()
        self.seq = 0
        self.published = 0
        self._next = next_report_time(time.time(), period)
        self._publishing = False
        self._last_warning = -WARN_EVERY

    def record(self, kvs: Any, key: str, seconds: float) -> None:
        """Record one request's latency; publish the period's report when it is due."""
        if self._publishing:
            return   # the report's own PUT is not a workload request
        self.recorder.record(seconds, key)
        wall = time.time()
        if wall < self._next:
            return
        self._next = (bucket_of(wall, self.period) + 1 + REPORT_PHASE) * self.period
        report = self.recorder.take(self.client_id)
        if report is None:
            return
        self.seq += 1
        self._publishing = True
        try:
            kvs.put(client_reports_key(bucket_of(wall, self.period)),
                    SetLattice([encode_client_report(report, self.seq, wall)]))
            self.published += 1
        except Exception as e:   # noqa: BLE001 - a lost report must not fail the request
            now = time.monotonic()
            if now - self._last_warning >= WARN_EVERY:
                self._last_warning = now
                log.warning("client %s: latency report failed: %s", self.client_id, e)
        finally:
            self._publishing = False
