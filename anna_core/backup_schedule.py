"""Scheduled backups, run by the monitor (`python -m anna_core.monitor --backup-to URL
--backup-every S`).

Contract:
- `BackupSchedule(url, every, routing, auth)`: `maybe_start(now)` (the monitor calls it once
  per period, `now` from `time.monotonic()`) starts a backup to `url/<UTC time>` (e.g.
  `s3://bucket/anna/20261124T041200Z`) on a thread of its own when none has run yet or
  `every` seconds have passed since the last one started. One runs at a time: a backup still
  running when the next is due makes that one wait (logged once per backup at WARNING).
- `status()` is what the monitor publishes: the schedule, whether one is running, and the
  last finished backup (its location, keys, objects, seconds, or its typed error). A failed
  backup is logged at WARNING and retried at the next due time; it never stops the monitor.
- `join(timeout)` waits for the running backup (tests, shutdown); `stop(timeout)` stops
  scheduling and waits for it.
"""
from __future__ import annotations

import datetime
import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence, Union

from runtime.auth import AuthConfig

from .backup_format import parse_location
from .errors import AnnaError

__all__ = ["BackupSchedule", "MIN_BACKUP_INTERVAL"]

log = logging.getLogger("anna.backup")

MIN_BACKUP_INTERVAL = 1.0   # dated prefixes are per second


def dated(url: str, when: Optional[datetime.datetime] = None) -> str:
    """`url` with a UTC time stamp appended as the last path segment."""
    stamp = (when or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{url.rstrip('/')}/{stamp}"


class BackupSchedule:
    """Periodic backups to dated prefixes under `url` (see the module contract)."""

    def __init__(self, url: str, every: float, routing: Union[str, Sequence[str]],
                 auth: Optional[AuthConfig] = None, *,
                 run: Optional[Callable[..., Any]] = None, **backup_options: Any) -> None:
        parse_location(url)   # BadBackupURL now rather than at the first due time
        if every < MIN_BACKUP_INTERVAL:
            raise ValueError(f"backups every {every:g} s: at least {MIN_BACKUP_INTERVAL:g} s")
        if run is None:
            from .backup import backup as run
        self.url, self.every, self.routing, self.auth = url, float(every), routing, auth
        self._run, self._options = run, backup_options
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._started_at: Optional[float] = None
        self._warned_overlap = False
        self._stopped = False
        self.current: Optional[str] = None
        self.last: Optional[Dict[str, Any]] = None
        self.completed = 0
        self.failed = 0

    def maybe_start(self, now: Optional[float] = None) -> Optional[str]:
        """Start a backup if one is due and none is running; its location, else None."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._stopped:
                return None
            if self._started_at is not None and now - self._started_at < self.every:
                return None
            if self._thread is not None and self._thread.is_alive():
                if not self._warned_overlap:
                    self._warned_overlap = True
                    log.warning("scheduled backup to %s is still running after %.0f s; the "
                                "next one waits for it", self.current, now - self._started_at)
                return None
            self._started_at = now
            self._warned_overlap = False
            self.current = dated(self.url)
            self._thread = threading.Thread(target=self._backup, args=(self.current,),
                                            name="anna-backup", daemon=True)
            self._thread.start()
            return self.current

    def _backup(self, url: str) -> None:
        started = time.monotonic()
        log.info("scheduled backup to %s started", url)
        try:
            result = self._run(self.routing, url, auth=self.auth, **self._options)
            totals = result.manifest.totals
            last = {"location": url, "ok": True, "keys": totals["keys"],
                    "objects": totals["objects"], "bytes": totals["bytes"],
                    "seconds": round(time.monotonic() - started, 2)}
            log.info("scheduled backup to %s done: %d keys, %d objects", url, totals["keys"],
                     totals["objects"])
        except (AnnaError, ValueError, OSError) as e:
            last = {"location": url, "ok": False, "error": f"{type(e).__name__}: {e}",
                    "seconds": round(time.monotonic() - started, 2)}
            log.warning("scheduled backup to %s failed (next one in %.0f s): %s", url,
                        self.every, last["error"])
        with self._lock:
            self.last = last
            self.current = None
            if last["ok"]:
                self.completed += 1
            else:
                self.failed += 1

    def status(self) -> Dict[str, Any]:
        """The schedule and the last backup, for the monitor's published status."""
        with self._lock:
            return {"to": self.url, "every_s": self.every, "running": self.current,
                    "completed": self.completed, "failed": self.failed, "last": self.last}

    def join(self, timeout: float) -> bool:
        """Wait for the running backup; True when none is running any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def stop(self, timeout: float = 60.0) -> bool:
        """Start no more backups; wait for the running one. True when none is running."""
        with self._lock:
            self._stopped = True
        return self.join(timeout)
