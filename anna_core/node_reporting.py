"""The KVS node's statistics reporter thread.

Contract (the encoding and the keys are `autoscale/reports.py`'s; dissertation 3.2.4):
`NodeReporter(node, node_id, tier, routing, period, auth)` is a thread in the KVS node
process. Once per period, a quarter of the way into each wall-clock bucket (so the monitor,
which reads three quarters of the way in, finds it; `client_reports.next_report_time`), it
closes the workers' report period (`_core.Node.take_report()`) and adds the node's report to
the bucket's SetLattice through an `anna_core.Client` of the cluster (the node's own
credentials). A failed report (a worker slow to answer, the KVS unreachable) is logged at
WARNING, at most once a minute, and the next period tries again: reporting never stops a
node. `stop()` ends it within one client timeout. The client's own latency reports are
`client_reports.py`, which the client imports; this module imports the client, not the
other way round.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Sequence

from ._core import SetLattice
from .autoscale.reports import bucket_of, encode_node_report, worker_reports_key
from .client import Client
from .client_reports import WARN_EVERY, next_report_time

__all__ = ["NodeReporter"]

log = logging.getLogger("anna.reporting")


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
