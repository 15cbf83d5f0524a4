"""Supervision of a `LocalCluster`'s processes: the thread that restarts them, and the
last-resort stop of a cluster that was never stopped.

Contract: `Watchdog(policy, on_ready)` runs `runtime.process.Supervisor.check` every
`SUPERVISE_PERIOD` seconds on a daemon thread (started by the first `watch`), restarting the
schedulers and executor nodes it watches that exit, with `policy`'s back-off; `on_ready` is
called with each restarted process once it announced itself. It holds no reference to the
cluster. `forget(name)` stops restarting one process (removed on purpose); `stop()` returns
once no restart can begin any more (idempotent). `emergency_stop` is what a collected
`LocalCluster` that was not stopped runs (a `weakref.finalize`): it stops the watchdog and
the processes, removes the private log directory and releases the data directory.
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
from typing import Callable, List, Optional

from runtime.process import ManagedProcess, RestartPolicy, Supervisor, stop_all

from .data_dir import DataDir

__all__ = ["Watchdog", "emergency_stop", "SUPERVISE_PERIOD"]

log = logging.getLogger("cloudburst.local")    # LocalCluster's logger: same records as before

SUPERVISE_PERIOD = 0.1    # seconds between two looks at the cluster's processes


class Watchdog:
    """A thread that restarts the cluster's schedulers and executor nodes when they exit
    (`Supervisor.check` every `SUPERVISE_PERIOD`). It holds no reference to the cluster:
    `on_ready` is called with each restarted process once it announced itself."""

    def __init__(self, policy: RestartPolicy,
                 on_ready: Callable[[ManagedProcess], None]) -> None:
        self.supervisor = Supervisor(policy, on_ready=on_ready)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-supervisor",
                                        daemon=True)

    def watch(self, processes: List[ManagedProcess]) -> None:
        now = time.monotonic()
        with self._lock:
            for p in processes:
                self.supervisor.watch(p, now)
        if not self._thread.is_alive():
            self._thread.start()

    def forget(self, name: str) -> None:
        """Stop restarting process `name` (it is being removed on purpose)."""
        with self._lock:
            self.supervisor.forget(name)

    def _run(self) -> None:
        while not self._stop.wait(SUPERVISE_PERIOD):
            with self._lock:
                if self._stop.is_set():
                    return
                try:
                    self.supervisor.check(time.monotonic())
                except Exception:
                    log.exception("supervising the cluster's processes failed")

    def stop(self) -> None:
        """Stop restarting (idempotent); returns once no restart can begin any more."""
        self._stop.set()
        with self._lock:
            pass
        if self._thread.is_alive():
            self._thread.join(5.0)


def emergency_stop(watchdog: Watchdog, nodes: List[ManagedProcess],
                    schedulers: List[ManagedProcess], log_dir: str,
                    data_dir: Optional[DataDir]) -> None:
    watchdog.stop()
    stop_all(nodes, timeout=2.0)
    stop_all(schedulers, timeout=2.0)
    shutil.rmtree(log_dir, ignore_errors=True)
    if data_dir is not None:
        data_dir.close()
