"""A spare executor node started ahead, so that a node added to a running `LocalCluster`
serves within a fraction of a second instead of after its interpreter start and imports.

Contract:
- `StandbyNode(log_dir, workers)`: `replenish()` starts a spare node process, unless one
  waits already: `python -m executor --standby --workers N`, which imports the node's and
  the workers' code and forks its N workers (`executor/prefork.py`), then waits for its
  `NodeConfig` on stdin. Until then it reads no key, binds no socket and runs no thread;
  it costs one idle process and its forked children (memory shared copy-on-write).
- `take(node_id, config_json, argv)` gives the spare its configuration and returns it as
  the node's `ManagedProcess`, named `node_id`, its log moved to `<node_id>.log`, its
  `argv` the usual command line (so a restart after an exit starts a fresh node the usual
  way). None when no spare waits or it exited; the caller then starts the node the usual
  way. A spare taken before it finished importing simply starts once it has.
- `stop()` stops the spare (it also exits by itself when its stdin closes: its launcher
  exited).
"""
from __future__ import annotations

import logging
import os
import sys
import weakref
from typing import List, Optional

from runtime.process import ManagedProcess, stop_all

__all__ = ["StandbyNode"]

log = logging.getLogger("cloudburst.local")


class StandbyNode:
    """At most one spare executor node process (module contract)."""

    def __init__(self, log_dir: str, workers: int) -> None:
        self.log_dir = log_dir
        self.workers = workers
        self._spare: Optional[ManagedProcess] = None
        self._count = 0
        self._spares: List[ManagedProcess] = []     # for the finalizer: every one started
        self._finalizer = weakref.finalize(self, stop_all, self._spares, 2.0)

    def replenish(self) -> None:
        """Start a spare unless one waits."""
        if self._spare is not None and self._spare.running():
            return
        self._count += 1
        p = ManagedProcess(f"standby-{self._count}",
                           [sys.executable, "-m", "executor", "--standby",
                            "--workers", str(self.workers)], self.log_dir, stdin_later=True)
        try:
            p.spawn()
        except OSError as e:
            log.warning("could not start a standby executor node: %s", e)
            return
        self._spare = p
        self._spares[:] = [q for q in self._spares if q.running()] + [p]

    def spare_pid(self) -> Optional[int]:
        """The waiting spare's process id, or None if none waits."""
        p = self._spare
        return p.pid if p is not None and p.running() else None

    def take(self, node_id: str, config_json: str, argv: List[str]) -> Optional[ManagedProcess]:
        """The spare, become node `node_id` (module contract), or None."""
        p, self._spare = self._spare, None
        if p is None or not p.running():
            return None
        try:
            p.send_stdin(config_json.encode() + b"\n")
        except OSError as e:                       # it exited meanwhile
            log.warning("the standby executor node could not take its config: %s", e)
            stop_all([p], 2.0)
            return None
        path = os.path.join(self.log_dir, f"{node_id}.log")
        try:
            os.replace(p.log_path, path)           # it keeps writing to the same file
            p.log_path = path
        except OSError as e:
            log.warning("the log of executor node %s stays %s: %s", node_id, p.log_path, e)
        p.name = node_id
        p.argv = list(argv)
        p.stdin_later = False
        self._spares[:] = [q for q in self._spares if q is not p]
        return p

    def stop(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            stop_all([spare], 5.0)
        self._spares.clear()
