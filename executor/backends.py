"""Where an executor node's worker processes run: its own children, or a worker host's.

Contract:
- A backend makes worker process handles (`make(name, config)`) that the node's
  `runtime.process.Supervisor` drives exactly like local children: `spawn()`, `running()`,
  `returncode`, `read_ready()`, `signal(signum)`, `info`, `pid`, `name`. The node keeps its
  whole supervision policy (restart with back-off, killing an unresponsive worker, overrun
  reports, vouching); only the process operations differ. `wait_ready(handles, timeout)`
  waits for a first start (`StartupError` naming the first that failed or is late),
  `poll()` takes in what the backend learned (call it before `Supervisor.check`),
  `stop(handles, timeout)` stops every worker (SIGTERM, SIGKILL after `timeout`), `close()`
  frees the backend's resources.
- `worker_backend(config, context, credentials, auth, handoff)` chooses for a node:
  `RemoteWorkers` with `config.worker_host`, else `LocalWorkers` (with the identity and
  the isolation WARNING of `executor/privilege.py`); also the workers' Unix socket
  directory (None for remote workers).
- `LocalWorkers`: the workers are the node's children (`runtime.process.ManagedProcess`):
  the function role's key pair goes to each on stdin; as root, they run under another uid
  (`executor/privilege.py`). With `preforked` (`executor/prefork.py`), a worker's first
  start is a child forked at the node's start, which needs no interpreter start or imports.
- `RemoteWorkers(context, address, session, timeout, credentials, server_key)`: a worker host
  (`executor/workerhost.py`) at `address` runs them, e.g. in a container of the same pod
  without the node's key directory. The node's DEALER socket is a CURVE client with the
  node's (cluster) credentials of the host whose public key is `server_key` (the function
  key), so only a host holding the function secret is believed, and the host obeys only the
  cluster key. Requests are `HostRequest`s; the host's `HostReport`s feed a
  `executor.workerhost_view.HostView`, whose rules decide when a worker counts as exited
  (including a silent or restarted host). `poll` also sends a HELLO every `HELLO_PERIOD`,
  so a restarted host hears of the node's session at once. Sends never block: a request that cannot be
  queued (the host is unreachable and the queue is full) is dropped and logged, and the
  view's timeout then fails that start.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import zmq

from hydro_proto import workerhost_pb2 as wh
from runtime.auth import Credentials, make_client
from runtime.process import ManagedProcess, StartupError, stop_all, wait_all_ready

from .config import NodeConfig, WorkerConfig
from .prefork import Preforked, PreforkedProcess
from .privilege import isolation_warning, landlock_abi, worker_identity, worker_ipc_dir
from .workerhost_view import HostView, WorkerState

__all__ = ["LocalWorkers", "RemoteWorkers", "RemoteProcess", "WORKER_ARGV", "MAX_REPORT",
           "worker_backend", "worker_argv"]

log = logging.getLogger("cloudburst.node")

WORKER_ARGV = ["-m", "executor.worker"]
MAX_REPORT = 1 << 20         # bytes of one host report (a few hundred bytes per worker)
HELLO_PERIOD = 1.0           # seconds between the node's HELLOs to its host
_QUEUE = 1000                # requests queued for an unreachable host before any is dropped


def worker_argv(config: WorkerConfig) -> List[str]:
    """The command line of a worker process (it holds no secret)."""
    return [sys.executable] + WORKER_ARGV + ["--config", config.to_json()]


def worker_backend(config: NodeConfig, context: zmq.Context, credentials: Optional[Credentials],
                   auth: Any, handoff: Optional[bytes], preforked: Optional[Preforked] = None
                   ) -> Tuple[Any, Optional[str]]:
    """(backend, the workers' Unix socket directory) for a node (module contract)."""
    if config.worker_host:
        server_key = None if credentials is None else auth.function_keypair().public
        return RemoteWorkers(context, config.worker_host, uuid.uuid4().hex,
                             config.worker_host_timeout, credentials, server_key), None
    identity = worker_identity(config)
    warning = isolation_warning(identity, config.key_dir, os.geteuid(), landlock_abi())
    if warning:
        log.warning("%s", warning)
    ipc_dir = worker_ipc_dir(config.ipc_dir, config.node_id, identity)
    return LocalWorkers(config.log_dir or os.getcwd(), handoff, identity.uid,
                        identity.gid, preforked), ipc_dir


class LocalWorkers:
    """Workers as the node's own children (module contract)."""

    def __init__(self, log_dir: str, handoff: Optional[bytes], uid: Optional[int],
                 gid: Optional[int], preforked: Optional[Preforked] = None) -> None:
        self.log_dir, self.handoff, self.uid, self.gid = log_dir, handoff, uid, gid
        self.preforked = preforked

    def make(self, name: str, config: WorkerConfig) -> ManagedProcess:
        spare = self.preforked.take() if self.preforked is not None else None
        if spare is not None:        # forked at the node's start: no exec, no imports
            return PreforkedProcess(name, worker_argv(config), self.log_dir, spare,
                                    stdin_data=self.handoff, user=self.uid, group=self.gid)
        return ManagedProcess(name, worker_argv(config), self.log_dir, stdin_data=self.handoff,
                              user=self.uid, group=self.gid)

    def wait_ready(self, handles: Sequence[Any], timeout: float) -> None:
        wait_all_ready(handles, timeout)

    def poll(self) -> None:
        pass

    def stop(self, handles: Sequence[Any], timeout: float) -> None:
        stop_all(handles, timeout)

    def close(self) -> None:
        if self.preforked is not None:
            self.preforked.close()


class RemoteProcess:
    """A worker run by the worker host, driven like a `ManagedProcess` (module contract)."""

    def __init__(self, backend: "RemoteWorkers", name: str, config: WorkerConfig) -> None:
        self.name = name
        self.config = config
        self.starts = 0
        self.info: Dict[str, Any] = {}
        self.log_path = f"{name}.log in the worker host's log directory ({backend.address})"
        self._backend = backend

    def _state(self) -> WorkerState:
        return self._backend.state(self.name)

    def spawn(self) -> "RemoteProcess":
        self.starts += 1
        self.info = {}
        self._backend.start(self)
        return self

    @property
    def pid(self) -> int:
        return self._state().pid

    @property
    def returncode(self) -> Optional[int]:
        return None if self.starts == 0 else self._state().exit_code

    def running(self) -> bool:
        return self.starts > 0 and self._state().running

    def signal(self, signum: int) -> None:
        if self.running():
            self._backend.signal(self.name, int(signum))

    def read_ready(self) -> Optional[bool]:
        """True once ready (its ready info in `info`), False if it exited first, else None."""
        if self.info:
            return True
        state = self._state()
        if state.ready:
            try:
                self.info = json.loads(state.info)
            except ValueError:
                log.error("%s announced unreadable ready info %r", self.name, state.info[:200])
                return None
            return True
        return None if state.running else False

    def exit_reason(self) -> str:
        state = self._state()
        return state.reason or f"exit code {state.exit_code}"

    def log_tail(self, lines: int = 25) -> str:
        return f"(its log is {self.log_path})"

    def close_pipe(self) -> None:
        pass


class RemoteWorkers:
    """Workers run by a worker host (module contract)."""

    def __init__(self, context: zmq.Context, address: str, session: str, timeout: float,
                 credentials: Optional[Credentials] = None,
                 server_key: Optional[bytes] = None) -> None:
        self.address = address
        self.view = HostView(session, timeout)
        self._socket = context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_REPORT)
        self._socket.setsockopt(zmq.SNDHWM, _QUEUE)
        if credentials is not None:
            if server_key is None:
                raise ValueError("an authenticated worker host needs its public key")
            make_client(self._socket, credentials, server_key)
        self._socket.connect(address)
        self._hello_at = 0.0
        self._hello(time.monotonic())

    def _hello(self, now: float) -> None:
        """HELLO once a second: a host that restarted learns the session and reports at once
        (its workers died with it; the view then counts them exited)."""
        if now - self._hello_at >= HELLO_PERIOD:
            self._hello_at = now
            self._send(wh.HostRequest(op=wh.HostRequest.HELLO))

    def _send(self, req: wh.HostRequest) -> None:
        req.session = self.view.session
        try:
            self._socket.send(req.SerializeToString(), zmq.NOBLOCK)
        except zmq.Again:
            (log.debug if req.op == wh.HostRequest.HELLO else log.error)("the worker host at %s is not taking requests (%d queued); dropped a "
                      "%s of %r", self.address, _QUEUE, wh.HostRequest.Op.Name(req.op),
                      req.name)

    def make(self, name: str, config: WorkerConfig) -> RemoteProcess:
        return RemoteProcess(self, name, config)

    def start(self, p: RemoteProcess) -> None:
        generation = self.view.want(p.name, time.monotonic())
        self._send(wh.HostRequest(op=wh.HostRequest.START, name=p.name, generation=generation,
                                  worker_config=p.config.to_json()))

    def signal(self, name: str, signum: int) -> None:
        self._send(wh.HostRequest(op=wh.HostRequest.SIGNAL, name=name, signum=signum,
                                  generation=self.view.generation(name)))

    def state(self, name: str) -> WorkerState:
        return self.view.state(name, time.monotonic())

    def poll(self, wait: float = 0.0) -> None:
        """Take in every report waiting (waiting up to `wait` seconds for the first)."""
        self._hello(time.monotonic())
        timeout = int(wait * 1000)
        while self._socket.poll(timeout, zmq.POLLIN):
            timeout = 0
            data = self._socket.recv()
            try:
                report = wh.HostReport.FromString(data)
            except Exception as e:  # noqa: BLE001 - any parse failure: dropped, named
                log.warning("dropped a malformed report from the worker host: %s", e)
                continue
            if report.refused and report.refused != self.view.refused:
                log.error("the worker host at %s refused a request: %s", self.address,
                          report.refused)
            self.view.apply(report, time.monotonic())

    def wait_ready(self, handles: Sequence[RemoteProcess], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            pending = []
            for p in handles:
                state = p.read_ready()
                if state is False:
                    raise StartupError(f"{p.name} exited before it was ready "
                                       f"({p.exit_reason()}); {p.log_tail()}", p.name)
                if state is None:
                    pending.append(p)
            if not pending:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                heard = "has not answered" if self.view.heard is None else "answers"
                raise StartupError(f"{pending[0].name} did not report ready within "
                                   f"{timeout:g} s (the worker host at {self.address} "
                                   f"{heard}); {pending[0].log_tail()}", pending[0].name)
            self.poll(min(left, 0.5))

    def stop(self, handles: Sequence[RemoteProcess], timeout: float) -> None:
        """STOP_ALL, then wait (bounded) until the host reports every worker gone."""
        self._send(wh.HostRequest(op=wh.HostRequest.STOP_ALL, grace=timeout))
        deadline = time.monotonic() + timeout + 2.0
        while any(p.running() for p in handles) and time.monotonic() < deadline:
            self.poll(0.2)
        still = [p.name for p in handles if p.running()]
        if still:
            log.warning("the worker host did not report %s stopped within %g s", still,
                        timeout + 2.0)

    def close(self) -> None:
        self._socket.close(0)
