"""Starting and stopping the platform's local processes (schedulers, executor nodes, workers).

Contract: `ManagedProcess(name, argv, log_dir)` spawns `argv` with this checkout on
PYTHONPATH, stderr appended to `<log_dir>/<name>.log`, and reads the one
`CLOUDBURST_READY <json>` line the process prints on stdout once it is bound (`wait_ready`,
with a deadline; a process that exits or stays silent raises `StartupError` with the tail of
its log). `stop(timeout)` sends SIGTERM, waits, then SIGKILLs. Nothing here is global: every
process is tracked by its own object and stopped by its own pid.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from .errors import CloudburstError
from ._wire import READY_PREFIX

__all__ = ["ManagedProcess", "StartupError", "wait_all_ready", "stop_all", "repo_root"]


class StartupError(CloudburstError):
    """A local process failed to start or to report ready in time."""


def repo_root() -> str:
    """The directory holding the `cloudburst`, `scheduler` and `executor` packages."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ManagedProcess:
    """One child process and its READY info; see the module contract."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: str) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc: Optional[subprocess.Popen] = None
        self.info: Dict[str, Any] = {}
        self._buffer = b""

    def spawn(self) -> "ManagedProcess":
        env = dict(os.environ)
        root = repo_root()
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log,
                                         stdin=subprocess.DEVNULL, env=env, cwd=root)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""

    def poll_ready(self) -> bool:
        """Read what stdout has without blocking; True once the READY line was seen."""
        if self.info:
            return True
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._buffer += chunk
        for line in self._buffer.split(b"\n"):
            text = line.decode(errors="replace")
            if text.startswith(READY_PREFIX):
                self.info = json.loads(text[len(READY_PREFIX):])
                return True
        return False

    def wait_ready(self, timeout: float) -> Dict[str, Any]:
        wait_all_ready([self], timeout)
        return self.info

    def stop(self, timeout: float = 5.0) -> None:
        stop_all([self], timeout)


def wait_all_ready(processes: Sequence[ManagedProcess], timeout: float) -> None:
    """Wait until every process printed its READY line; StartupError names the first laggard."""
    deadline = time.monotonic() + timeout
    pending = list(processes)
    while pending:
        pending = [p for p in pending if not p.poll_ready()]
        for p in pending:
            if not p.running():
                raise StartupError(f"{p.name} exited with code {p.proc.returncode} before it was "
                                   f"ready; its log ({p.log_path}) ends:\n{p.log_tail()}")
        if not pending:
            return
        if time.monotonic() > deadline:
            p = pending[0]
            raise StartupError(f"{p.name} did not report ready within {timeout:g} s; its log "
                               f"({p.log_path}) ends:\n{p.log_tail()}")
        fds = [p.proc.stdout.fileno() for p in pending]
        select.select(fds, [], [], min(0.05, max(0.0, deadline - time.monotonic())))


def stop_all(processes: Sequence[ManagedProcess], timeout: float = 5.0) -> None:
    """SIGTERM every running process, wait up to `timeout`, SIGKILL the rest, reap all."""
    live = [p for p in processes if p.running()]
    for p in live:
        try:
            p.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for p in live:
        try:
            p.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait(5)
    for p in processes:
        if p.proc is not None:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait(5)
            if p.proc.stdout is not None:
                p.proc.stdout.close()
