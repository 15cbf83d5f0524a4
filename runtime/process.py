"""Launching, supervising and stopping the platform's service processes.

Contract:
- A service announces it is ready with `announce_ready(info)` once its sockets are bound:
  one `READY <json>` line on stdout (for people and for launchers that read stdout), the
  same JSON written atomically to `ready_file` if one is given (for probes), and, when it
  was started by `ManagedProcess`, the JSON on the launcher's ready pipe. A service whose
  readiness for traffic comes later than its binding (a routing that has its membership back,
  a scheduler that has heard its executors) announces at bind and calls
  `write_ready_file(info, path)` itself once it is ready for traffic, for the probe.
- `ManagedProcess(name, argv, log_dir)` spawns `argv` with this checkout on PYTHONPATH, in
  its own session, with stdout and stderr appended to `<log_dir>/<name>.log`, and a pipe whose
  write end the child finds in the environment variable `READY_FD_ENV`. With `stdin_data`
  the child's stdin is a pipe holding exactly those bytes (then end of file): how a secret
  reaches a child without its command line, environment or a file. With `user` (and
  `group`) the child runs under that uid and gid with no supplementary groups (the parent
  must be root). With `stdin_later`, the child's stdin is a pipe the launcher writes
  once, later, with `send_stdin(data)` (a process started ahead that waits for its
  configuration). Readiness is an
  event, not a poll: the launcher selects on the pipes; a child that exits closes its end,
  which the launcher sees at once.
- `wait_all_ready(processes, timeout)` returns when every process announced itself, or raises
  `StartupError` naming the first that exited or stayed silent, with the tail of its log.
- `stop_all(processes, timeout, signum=SIGTERM)` sends the signal, waits up to `timeout`,
  SIGKILLs the rest and reaps every child.
- `Supervisor` restarts processes that exit, with exponential back-off (`RestartPolicy`, a
  pure function of the failure count), so a process that always crashes is retried ever more
  slowly instead of in a tight loop. A child learns which start it is from `START_ENV`.
- `parent_gone(pid)` lets a child stop by itself when the launcher died without stopping it.
Nothing here is global: every process is tracked by its own object and stopped by its pid.
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import time

__all__ = ["READY_PREFIX", "READY_FD_ENV", "StartupError", "announce_ready", "write_ready_file",
           "parent_gone", "repo_root", "ManagedProcess", "wait_all_ready", "stop_all", "RestartPolicy",
           "Supervisor", "Exit", "START_ENV", "process_start"]

READY_PREFIX = "READY "
READY_FD_ENV = "HYDRO_READY_FD"
START_ENV = "HYDRO_PROCESS_START"   # 1 for a process's first start, 2 after one restart, ...

log = logging.getLogger("runtime.process")


class StartupError(RuntimeError):
    """A process failed to start or to announce it was ready in time. `name` names it."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name


def repo_root() -> str:
    """The directory holding the platform's packages (put on a child's PYTHONPATH)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def announce_ready(info: Dict[str, Any], ready_file: Optional[str] = None) -> None:
    """Tell whoever started this process that it is ready, with its addresses."""
    text = json.dumps(info)
    if ready_file:
        write_ready_file(info, ready_file)
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is not None:
        try:
            os.write(int(fd), (text + "\n").encode())
            os.close(int(fd))
        except (OSError, ValueError):
            pass  # the launcher is gone; it will not be waiting
    sys.stdout.write(READY_PREFIX + text + "\n")
    sys.stdout.flush()


def write_ready_file(info: Dict[str, Any], ready_file: str) -> None:
    """Write `info` as JSON to `ready_file`, atomically: a probe never sees half of it."""
    tmp = f"{ready_file}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(json.dumps(info))
    os.replace(tmp, ready_file)


def process_start() -> int:
    """Which start of this process this is (1 unless a supervisor restarted it)."""
    try:
        return max(1, int(os.environ.get(START_ENV, "1")))
    except ValueError:
        return 1


def parent_gone(parent_pid: Optional[int]) -> bool:
    """True if the process was started with a parent pid and that parent has exited."""
    return bool(parent_pid) and os.getppid() != parent_pid


class ManagedProcess:
    """One child process, its log and its ready info; see the module contract."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: str, *,
                 stdin_data: Optional[bytes] = None, user: Optional[int] = None,
                 group: Optional[int] = None, stdin_later: bool = False) -> None:
        if stdin_data is not None and stdin_later:
            raise ValueError(f"{name}: stdin_data and stdin_later exclude each other")
        self.name = name
        self.argv = list(argv)
        self.stdin_data = stdin_data
        self.stdin_later = stdin_later
        self._stdin_w: Optional[int] = None
        self.user = user
        self.group = group
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.proc: Optional[subprocess.Popen] = None
        self.info: Dict[str, Any] = {}
        self.starts = 0
        self._ready_fd: Optional[int] = None
        self._buffer = b""

    def spawn(self) -> "ManagedProcess":
        """Start (or start again) the process; its ready info is cleared."""
        self.close_pipe()
        self.starts += 1
        self.info = {}
        self._buffer = b""
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root(), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[READY_FD_ENV] = str(write_fd)
        env[START_ENV] = str(self.starts)
        stdin: Any = subprocess.DEVNULL
        self._close_stdin()
        if self.stdin_later:
            stdin, self._stdin_w = os.pipe()
            os.set_inheritable(self._stdin_w, False)
        elif self.stdin_data is not None:
            if len(self.stdin_data) > 4096:      # must fit a pipe's buffer (never blocks)
                raise ValueError(f"{self.name}: stdin_data is limited to 4096 bytes")
            stdin, stdin_w = os.pipe()
            os.write(stdin_w, self.stdin_data)
            os.close(stdin_w)
        drop: Dict[str, Any] = {}
        if self.user is not None:
            drop = {"user": self.user, "group": self.group if self.group is not None
                    else self.user, "extra_groups": []}
        try:
            with open(self.log_path, "ab") as out:
                self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=stdin, env=env,
                                             pass_fds=(write_fd,), start_new_session=True,
                                             **drop)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
            if self.stdin_data is not None or self.stdin_later:
                os.close(stdin)            # the child holds its own copy
        self._ready_fd = read_fd
        return self

    def send_stdin(self, data: bytes) -> None:
        """With `stdin_later`: write `data` (at most 4096 bytes, so it never blocks) to the
        child's stdin and close it."""
        if self._stdin_w is None:
            raise RuntimeError(f"{self.name}: no stdin waits (stdin_later, once per start)")
        if len(data) > 4096:
            raise ValueError(f"{self.name}: stdin data is limited to 4096 bytes")
        try:
            os.write(self._stdin_w, data)
        finally:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin_w is not None:
            os.close(self._stdin_w)
            self._stdin_w = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    @property
    def returncode(self) -> Optional[int]:
        return None if self.proc is None else self.proc.poll()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int) -> None:
        """Send `signum` if the process is running."""
        if self.running():
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of the process' log."""
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""

    def fileno(self) -> int:
        """The ready pipe's read end (for select)."""
        assert self._ready_fd is not None
        return self._ready_fd

    def read_ready(self) -> Optional[bool]:
        """Consume what the ready pipe has, without blocking: True once the ready info
        arrived, False if the pipe closed without it (the process exited), None otherwise."""
        if self.info:
            return True
        if self._ready_fd is None:
            return False
        while select.select([self._ready_fd], [], [], 0)[0]:
            chunk = os.read(self._ready_fd, 65536)
            if not chunk:
                self.close_pipe()
                return self._parse_ready() or False
            self._buffer += chunk
            if self._parse_ready():
                self.close_pipe()
                return True
        return None

    def _parse_ready(self) -> bool:
        line, newline, _ = self._buffer.partition(b"\n")
        if not newline:
            return False
        self.info = json.loads(line)
        return True

    def close_pipe(self) -> None:
        if self._ready_fd is not None:
            os.close(self._ready_fd)
            self._ready_fd = None

    def wait_ready(self, timeout: float) -> Dict[str, Any]:
        wait_all_ready([self], timeout)
        return self.info

    def stop(self, timeout: float = 5.0) -> None:
        stop_all([self], timeout)


def wait_all_ready(processes: Sequence[ManagedProcess], timeout: float) -> None:
    """Wait until every process announced it is ready; StartupError names the first laggard."""
    deadline = time.monotonic() + timeout
    pending = list(processes)
    while pending:
        still = []
        for p in pending:
            state = p.read_ready()
            if state is False:
                try:
                    p.proc.wait(5)  # the pipe closed: the process is exiting
                    how = f"exited with code {p.proc.returncode}"
                except subprocess.TimeoutExpired:
                    how = "closed its ready pipe without announcing itself"
                raise StartupError(f"{p.name} {how} before it was ready; its log "
                                   f"({p.log_path}) ends:\n{p.log_tail()}", p.name)
            if state is None:
                still.append(p)
        pending = still
        if not pending:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            p = pending[0]
            raise StartupError(f"{p.name} did not report ready within {timeout:g} s; its log "
                               f"({p.log_path}) ends:\n{p.log_tail()}", p.name)
        select.select(pending, [], [], left)


def stop_all(processes: Sequence[ManagedProcess], timeout: float = 5.0,
             signum: int = signal.SIGTERM) -> None:
    """Send `signum` (SIGTERM) to every running process, wait up to `timeout`, SIGKILL the
    rest, reap all."""
    for p in processes:
        p.signal(signum)
    deadline = time.monotonic() + timeout
    for p in processes:
        if p.proc is None:
            continue
        try:
            p.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %g s after %s; killing it", p.name, timeout,
                        signal.Signals(signum).name)
            p.proc.kill()
            p.proc.wait(5)
        p.close_pipe()
        p._close_stdin()


@dataclass(frozen=True)
class RestartPolicy:
    """How long to wait before restarting a process that exited: `initial` seconds after
    the first failure in a row, doubling up to `maximum`. A process that stayed up for
    `stable` seconds is considered healthy again and its failure count resets."""

    initial: float = 0.1
    maximum: float = 10.0
    stable: float = 30.0

    def delay(self, failures: int) -> float:
        """The back-off before restart number `failures` (1 = the first in a row)."""
        return min(self.maximum, self.initial * (2 ** max(0, failures - 1)))

    def failures_after(self, failures: int, uptime: float) -> int:
        """The failure count once a process that ran `uptime` seconds exits."""
        return 1 if uptime >= self.stable else failures + 1


class Supervisor:
    """Restarts the processes it watches when they exit, with back-off; never blocks.

    `check(now)` is called from the owner's loop. It returns `Exit`s for processes that
    exited since the last check (so the owner can tell others at once), restarts those whose
    back-off has passed (spawn only: a restarted process announces itself on its ready pipe,
    and `on_ready(process)` runs on the check that first sees it), and counts `restarts`.
    A process that always crashes is retried ever more slowly (`RestartPolicy`). A process is
    watched until `forget`; stop processes with `stop_all` after forgetting them. With
    `restart=False` exits are only reported.
    """

    def __init__(self, policy: RestartPolicy = RestartPolicy(),
                 on_ready: Optional[Callable[[ManagedProcess], None]] = None,
                 restart: bool = True) -> None:
        self.policy = policy
        self.restart = restart
        self.on_ready = on_ready
        self._watched: Dict[str, ManagedProcess] = {}
        self._failures: Dict[str, int] = {}
        self._started_at: Dict[str, float] = {}
        self._restart_at: Dict[str, float] = {}
        self._starting: Dict[str, ManagedProcess] = {}
        self.restarts: Dict[str, int] = {}

    def watch(self, process: ManagedProcess, now: float) -> None:
        self._watched[process.name] = process
        self._started_at[process.name] = now
        self._failures.setdefault(process.name, 0)
        self.restarts.setdefault(process.name, 0)

    def forget(self, name: str) -> None:
        for table in (self._watched, self._failures, self._started_at, self._restart_at,
                      self._starting):
            table.pop(name, None)

    def check(self, now: float) -> List["Exit"]:
        exits = []
        for name, p in list(self._starting.items()):
            state = p.read_ready()
            if state is True:
                del self._starting[name]
                if self.on_ready is not None:
                    self.on_ready(p)
            elif state is False:
                del self._starting[name]   # exited before it was ready: handled below
        for name, p in list(self._watched.items()):
            if p.running():
                continue
            if name not in self._restart_at:
                failures = self.policy.failures_after(self._failures[name],
                                                      now - self._started_at[name])
                self._failures[name] = failures
                self._restart_at[name] = now + self.policy.delay(failures)
                self._starting.pop(name, None)
                exits.append(Exit(p, p.returncode))
                log.warning("%s exited with code %s; restarting in %.2g s (failure %d in a row)",
                            name, p.returncode, self._restart_at[name] - now, failures)
            if now < self._restart_at[name] or not self.restart:
                continue
            del self._restart_at[name]
            try:
                p.spawn()
            except OSError as e:
                log.error("restarting %s failed: %s", name, e)
                self._restart_at[name] = now + self.policy.delay(self._failures[name] + 1)
                continue
            self._started_at[name] = now
            self._starting[name] = p
            self.restarts[name] += 1
        return exits


class Exit(NamedTuple):
    """A watched process exited with `code` (negative: killed by that signal)."""

    process: ManagedProcess
    code: Optional[int]
