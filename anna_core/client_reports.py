"""A client's latency reports into Anna: the hook `anna_core.Client(report_period=T)` keeps,
and the report schedule every statistics reporter shares.

Contract (the encoding and the keys are `autoscale/reports.py`'s; dissertation 3.2.4):
- `ClientLatencyReports(client_id, period)`: every request's latency goes to a
  `LatencyRecorder`; the first request a quarter into a bucket (or later) publishes the
  recorder's report for the past period into that bucket, on the request path (one extra PUT
  per period, through the client passed to `record`; a client that makes no requests reports
  nothing, as it observed nothing). A failed publication is logged and dropped.
- `next_report_time(wall, period)`: when a reporter writes, `REPORT_PHASE` of the way into a
  wall-clock bucket (the monitor reads three quarters of the way in). The node's reporter
  thread (`node_reporting.py`) uses the same schedule.
This module imports no client: the client imports it.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from ._core import SetLattice
from .autoscale.reports import LatencyRecorder, bucket_of, client_reports_key, encode_client_report

__all__ = ["ClientLatencyReports", "REPORT_PHASE", "WARN_EVERY", "next_report_time"]

log = logging.getLogger("anna.reporting")

REPORT_PHASE = 0.25      # reporters write this far into a bucket; the monitor reads at 0.75
WARN_EVERY = 60.0        # seconds between two warnings of failed reports


def next_report_time(wall: float, period: float, phase: float = REPORT_PHASE) -> float:
    """The first wall-clock time >= `wall` that is `phase` of the way into a bucket."""
    b = bucket_of(wall, period)
    t = (b + phase) * period
    return t if t >= wall else t + period


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
