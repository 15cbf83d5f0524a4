"""The worker host's decisions (pure): which worker processes to start, signal and kill.

The worker host (`executor/workerhost.py`) runs an executor node's worker processes where the
node's key directory is not mounted (on Kubernetes, a container of its own). The node keeps
its supervision policy (when to restart, with what back-off, which worker to kill); the host
only carries out the node's requests and reports what became of each process. This module is
the host's state machine, with no sockets, clocks or processes: `HostCore` takes the node's
requests (`HostRequest`), what happened to the processes it started (`spawned`,
`spawn_failed`, `ready`, `exited`) and `now`, and returns actions (`Spawn`, `Kill`) for the
service to carry out; `report()` is the whole state, for the node.

Rules:
- **Sessions.** Every request names the node's session (one per node process). The first
  request of a new session makes the host SIGKILL every process of the previous one and
  forget them: a restarted node never leaves workers behind, and a worker of the old node
  never answers for the new one.
- **Starts.** `START(name, generation, config)` starts start number `generation` of `name`.
  A start whose generation is not above the one the host has for `name` is a duplicate (or
  late) and ignored. A start of a name whose previous start still runs first kills that one
  (SIGKILL) and starts the new one once it has exited: one process per name at any time.
  At most `max_workers` names; a name is 1-200 characters of `[A-Za-z0-9_.:-]`; a config at
  most `MAX_CONFIG` bytes. A start refused for these reasons is reported (`refused`) and
  starts nothing.
- **Signals** go only to the generation the node names, and only while it runs (a late
  SIGKILL never hits a restarted worker), and only SIGTERM, SIGINT or SIGKILL.
- **Stops.** `STOP_ALL(grace)`: SIGTERM to every process, SIGKILL to those still running
  `grace` seconds later (`tick`). Pending starts are dropped.
- Only processes the host started are ever signalled (`Kill` names a pid the service
  started; the service signals it through its own handle, never by a bare pid).
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Union

from hydro_proto import workerhost_pb2 as wh

__all__ = ["HostCore", "Spawn", "Kill", "Action", "MAX_CONFIG", "NAME", "ALLOWED_SIGNALS"]

MAX_CONFIG = 64 << 10
NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
ALLOWED_SIGNALS = frozenset({int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGKILL)})


class Spawn(NamedTuple):
    """Start start `generation` of worker `name` with `config` (WorkerConfig JSON)."""

    name: str
    generation: int
    config: str


class Kill(NamedTuple):
    """Send `signum` to the process the host started with `pid`."""

    pid: int
    signum: int


Action = Union[Spawn, Kill]


@dataclass
class _Proc:
    name: str
    generation: int
    config: str
    pid: int = 0
    ready: bool = False
    exited: bool = False
    exit_code: int = 0
    info: str = ""
    error: str = ""

    @property
    def running(self) -> bool:
        return self.pid > 0 and not self.exited


class HostCore:
    """The worker host's state; see the module contract."""

    def __init__(self, max_workers: int = 64) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self.max_workers = max_workers
        self.session = ""
        self.refused = ""
        self._procs: Dict[str, _Proc] = {}
        self._pending: Dict[str, _Proc] = {}     # a start waiting for its predecessor's exit
        self._by_pid: Dict[int, _Proc] = {}      # every process started and not yet exited
        self._kill_at: Dict[int, float] = {}     # SIGKILL deadlines of stopping processes

    # ---- the node's requests ----
    def request(self, req: wh.HostRequest, now: float) -> List[Action]:
        """The actions a request leads to (the rules of the module contract)."""
        actions: List[Action] = []
        if req.session != self.session:
            actions += self._new_session(req.session)
        if req.op == wh.HostRequest.START:
            actions += self._start(req)
        elif req.op == wh.HostRequest.SIGNAL:
            proc = self._procs.get(req.name)
            if req.signum not in ALLOWED_SIGNALS:
                self.refused = f"signal {req.signum} to {req.name!r}: only SIGTERM, SIGINT " \
                               f"and SIGKILL are sent to workers"
            elif proc is not None and proc.generation == req.generation and proc.running:
                actions.append(Kill(proc.pid, req.signum))
        elif req.op == wh.HostRequest.STOP_ALL:
            self._pending.clear()
            for pid in self._by_pid:
                actions.append(Kill(pid, int(signal.SIGTERM)))
                self._kill_at.setdefault(pid, now + max(0.0, req.grace))
        return actions

    def _new_session(self, session: str) -> List[Action]:
        actions: List[Action] = [Kill(pid, int(signal.SIGKILL)) for pid in self._by_pid]
        self.session = session
        self._procs.clear()      # their exits still arrive, for pids in _by_pid, unreported
        self._pending.clear()
        self.refused = ""
        return actions

    def _start(self, req: wh.HostRequest) -> List[Action]:
        name, generation = req.name, req.generation
        refusal = None
        if not NAME.fullmatch(name):
            refusal = f"start of {name[:80]!r}: a worker name is 1-200 characters of " \
                      f"[A-Za-z0-9_.:-]"
        elif generation < 1:
            refusal = f"start of {name!r}: generation must be at least 1"
        elif len(req.worker_config.encode()) > MAX_CONFIG:
            refusal = f"start of {name!r}: its configuration is over {MAX_CONFIG} bytes"
        elif name not in self._procs and len(self._procs) >= self.max_workers:
            refusal = f"start of {name!r}: this host runs at most {self.max_workers} workers"
        if refusal is not None:
            self.refused = refusal
            return []
        current = self._pending.get(name) or self._procs.get(name)
        if current is not None and current.generation >= generation:
            return []                                    # a duplicate or a late request
        new = _Proc(name, generation, req.worker_config)
        old = self._procs.get(name)
        if old is not None and old.running:
            self._pending[name] = new                    # started once `old` has exited
            return [Kill(old.pid, int(signal.SIGKILL))]
        self._pending.pop(name, None)
        self._procs[name] = new
        return [Spawn(name, generation, req.worker_config)]

    # ---- what became of the processes ----
    def spawned(self, name: str, generation: int, pid: int) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.generation == generation:
            proc.pid = pid
            self._by_pid[pid] = proc

    def spawn_failed(self, name: str, generation: int, error: str) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.generation == generation:
            proc.exited, proc.exit_code, proc.error = True, -1, error

    def ready(self, pid: int, info: str) -> None:
        proc = self._by_pid.get(pid)
        if proc is not None:
            proc.ready, proc.info = True, info

    def exited(self, pid: int, code: Optional[int]) -> List[Action]:
        """A process the host started exited: recorded, and a start waiting for it begins."""
        self._kill_at.pop(pid, None)
        proc = self._by_pid.pop(pid, None)
        if proc is None:
            return []
        proc.exited, proc.exit_code = True, -1 if code is None else code
        new = self._pending.pop(proc.name, None)
        if new is not None and self._procs.get(proc.name) is proc:
            self._procs[proc.name] = new
            return [Spawn(new.name, new.generation, new.config)]
        return []

    def tick(self, now: float) -> List[Action]:
        """SIGKILL to the stopping processes past their grace."""
        due = [pid for pid, at in self._kill_at.items() if now >= at]
        for pid in due:
            self._kill_at[pid] = float("inf")            # once
        return [Kill(pid, int(signal.SIGKILL)) for pid in due]

    def running_pids(self) -> List[int]:
        return sorted(self._by_pid)

    # ---- the node's view ----
    def report(self, host: str) -> wh.HostReport:
        """The whole state, for the node."""
        out = wh.HostReport(host=host, session=self.session, refused=self.refused)
        for name in sorted(self._procs):
            p = self._procs[name]
            out.processes.add(name=p.name, generation=p.generation, pid=p.pid, ready=p.ready,
                              exited=p.exited, exit_code=p.exit_code, info=p.info,
                              error=p.error)
        return out
