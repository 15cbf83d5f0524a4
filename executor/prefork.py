"""Workers forked from their node at its start, so a new node serves without a second
interpreter start and import.

Contract:
- Why: starting a node was almost all interpreter start and imports, twice in a row: the
  node's own (about 0.5 s of CPU), then each worker's (`python -m executor.worker`, about
  0.6 s), on a machine where other processes share the cores often several times that.
  A forked worker has the node's modules already imported.
- `Preforked.fork(count)` is called by the node's `main` right after its imports, before it
  reads any key, opens any socket or starts any thread: it forks `count` children (fewer,
  or none, if the process has threads already or fork fails; the rest start the usual way).
  A child holds nothing but the imported modules and the node's configuration. It waits on
  a pipe for its start: the worker's command line, log file, uid and gid, then the function
  role's hand-off (`runtime.auth.encode_handoff`), which becomes its stdin. It then does
  what `runtime.process.ManagedProcess.spawn` does for an exec'd worker (a session of its
  own, stdout and stderr to its log, the ready pipe, the start number, the uid and gid
  with no supplementary groups) and runs `executor.worker.main`, which hides the key
  directory and drops capabilities before any user code runs, as always. A child whose
  pipe closes before its start (the node died or had more children than workers) exits.
  Each child asks to be killed when the node dies (`executor.liveness.die_with_parent`).
- `Preforked.take()` gives one unused child (or None); `close()` ends the unused ones.
- `PreforkedProcess` is a `ManagedProcess` whose first `spawn()` starts a forked child and
  whose later spawns (restarts after an exit, when the node has threads) exec as usual; its
  `proc` is a child handle with `Popen`'s `pid`, `poll`, `wait(timeout)`, `send_signal`
  and `kill`, so supervision and stopping are unchanged.
"""
from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, List, Optional, Sequence

from runtime.process import READY_FD_ENV, START_ENV, ManagedProcess

__all__ = ["Preforked", "PreforkedProcess", "ForkedChild"]

log = logging.getLogger("cloudburst.node")

_MAX_START = 1 << 16          # bytes of a child's start message (config, paths) plus hand-off


class ForkedChild:
    """A forked child as `subprocess.Popen` exposes one (the subset supervision uses)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:        # reaped elsewhere: gone
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = None
        try:
            fd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):    # an old kernel: poll below
            pass
        try:
            while self.poll() is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired([str(self.pid)], timeout or 0.0)
                if fd is not None:
                    select.select([fd], [], [], left)     # readable once the child exits
                else:
                    time.sleep(min(0.01, left) if left is not None else 0.01)
        finally:
            if fd is not None:
                os.close(fd)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Spare:
    """The node's end of one waiting child."""

    def __init__(self, pid: int, start_w: int, ready_r: int) -> None:
        self.child = ForkedChild(pid)
        self.start_w = start_w
        self.ready_r = ready_r

    def close(self) -> None:
        """Close the node's ends (once: a closed descriptor's number may be reused)."""
        for fd in (self.start_w, self.ready_r):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.start_w = self.ready_r = -1


class Preforked:
    """Children forked before the node holds a secret (module contract)."""

    def __init__(self) -> None:
        self._spares: List[_Spare] = []

    @classmethod
    def fork(cls, count: int) -> "Preforked":
        pool = cls()
        if count <= 0:
            return pool
        if threading.active_count() > 1:
            log.info("not forking workers: the node already runs threads")
            return pool
        import executor.worker  # noqa: F401  (what the children run, imported once, here)
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        for _ in range(count):
            start_r, start_w = os.pipe()
            ready_r, ready_w = os.pipe()
            try:
                pid = os.fork()
            except OSError as e:
                log.warning("fork failed (%s): the other workers start the usual way", e)
                for fd in (start_r, start_w, ready_r, ready_w):
                    os.close(fd)
                break
            if pid == 0:
                os.close(start_w)
                os.close(ready_r)
                for spare in pool._spares:       # siblings' ends are not this child's
                    spare.close()
                _child(parent, start_r, ready_w)     # never returns
            os.close(start_r)
            os.close(ready_w)
            for fd in (start_w, ready_r):
                os.set_inheritable(fd, False)
            pool._spares.append(_Spare(pid, start_w, ready_r))
        return pool

    def __len__(self) -> int:
        return len(self._spares)

    def take(self) -> Optional[_Spare]:
        return self._spares.pop(0) if self._spares else None

    def close(self) -> None:
        """End the children not taken (their pipe closes; they exit) and reap them."""
        spares, self._spares = self._spares, []
        for spare in spares:
            spare.close()
        for spare in spares:
            try:
                spare.child.wait(5.0)
            except subprocess.TimeoutExpired:
                spare.child.kill()
                spare.child.wait(5.0)


class PreforkedProcess(ManagedProcess):
    """A worker whose first start is a forked child (module contract)."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: str, spare: _Spare, *,
                 stdin_data: Optional[bytes] = None, user: Optional[int] = None,
                 group: Optional[int] = None) -> None:
        super().__init__(name, argv, log_dir, stdin_data=stdin_data, user=user, group=group)
        self._spare: Optional[_Spare] = spare

    def spawn(self) -> "ManagedProcess":
        spare, self._spare = self._spare, None
        if spare is None:
            return super().spawn()
        self.close_pipe()
        self.starts += 1
        self.info = {}
        self._buffer = b""
        header = json.dumps({"argv": self.argv, "log_path": self.log_path, "uid": self.user,
                             "gid": self.group if self.group is not None else self.user,
                             "start": self.starts}).encode()
        message = len(header).to_bytes(4, "big") + header + (self.stdin_data or b"")
        if len(message) > _MAX_START:
            spare.close()
            spare.child.kill()
            spare.child.wait(5.0)
            raise ValueError(f"{self.name}: its start message is over {_MAX_START} bytes")
        try:
            os.write(spare.start_w, message)      # fits the pipe's buffer: never blocks
        except OSError as e:                      # the child is gone: start the usual way
            log.warning("%s: its forked process is gone (%s); starting it anew", self.name, e)
            spare.close()
            spare.child.poll()
            self.starts -= 1
            return super().spawn()
        os.close(spare.start_w)
        self.proc = spare.child                   # type: ignore[assignment]
        self._ready_fd = spare.ready_r
        spare.start_w = spare.ready_r = -1        # now this process' own
        return self


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        if sum(map(len, chunks)) > _MAX_START:
            raise ValueError("start message too long")


def _child(parent: int, start_r: int, ready_w: int) -> None:
    """A forked child: wait for the start, become the worker, exit (module contract)."""
    code = 1
    try:
        from .liveness import die_with_parent
        die_with_parent(parent)
        data = _read_all(start_r)
        os.close(start_r)
        if not data:                      # never started: the node is gone or had enough
            os._exit(0)
        size = int.from_bytes(data[:4], "big")
        start = json.loads(data[4:4 + size])
        handoff = data[4 + size:]
        os.setsid()
        out = os.open(start["log_path"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        stdin_r, stdin_w = os.pipe()      # the hand-off, then end of file, as ManagedProcess
        os.write(stdin_w, handoff)
        os.close(stdin_w)
        os.dup2(stdin_r, 0)
        os.close(stdin_r)
        os.closerange(3, ready_w)         # nothing of the node's stays open here (its ready
        os.closerange(ready_w + 1, 1 << 16)   # pipe to its own launcher among them)
        os.environ[READY_FD_ENV] = str(ready_w)
        os.environ[START_ENV] = str(start["start"])
        if start["uid"] is not None:
            os.setgroups([])
            os.setgid(start["gid"])
            os.setuid(start["uid"])
        for handler in list(logging.root.handlers):     # the worker sets up its own
            logging.root.removeHandler(handler)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        argv = start["argv"]
        sys.argv = ["executor.worker"] + argv[argv.index("--config"):]
        from executor import worker
        worker.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            import atexit
            atexit._run_exitfuncs()      # what the worker registered (its scratch directory)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
