"""What an executor node knows of its workers when a worker host runs them (pure).

The node asks the worker host (`executor/workerhost.py`) to start a worker (`want`: the
next start number, a "generation", of that worker's name) and learns what became of it from
the host's reports (`apply`: a `HostReport`, the host's whole state). `state(name, now)` is
what the node's supervisor sees (`executor/backends.py`: a `RemoteProcess` looks like a
local child process to `runtime.process.Supervisor`).

Rules (no sockets, no clocks: `now` is passed in):
- Only reports of the node's own session count. A report describes start `generation` of a
  name; one of an older start is stale and ignored, so a late exit never fails a restarted
  worker.
- A start runs until the host reports it exited, with its exit code. It is also taken as
  exited (code -1, with the reason) when
  - the host has not acknowledged it `timeout` seconds after it was asked for;
  - the host has been silent for `timeout` seconds (it reports every period);
  - the host restarted (a report from another host run) or no longer lists it: its
    processes died with it.
  The node's supervisor then restarts the worker with its back-off; a host that is back
  takes the new start.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from hydro_proto import workerhost_pb2 as wh

__all__ = ["HostView", "WorkerState"]


@dataclass(frozen=True)
class WorkerState:
    """One worker's current start as the node sees it."""

    generation: int
    running: bool
    ready: bool = False
    pid: int = 0
    exit_code: Optional[int] = None
    info: str = ""
    reason: str = ""           # why it counts as exited, when the host did not say


@dataclass
class _Want:
    generation: int
    since: float
    seen: Optional[wh.HostProcess] = None
    acked_by: str = ""          # the host run that reported this start
    lost: str = ""              # why it is taken as exited without the host saying so


class HostView:
    """See the module contract."""

    def __init__(self, session: str, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.session = session
        self.timeout = timeout
        self.host = ""                  # the host run last heard from
        self.heard: Optional[float] = None
        self.refused = ""
        self._wants: Dict[str, _Want] = {}

    def want(self, name: str, now: float) -> int:
        """A new start of `name`; its generation (1 for the first)."""
        old = self._wants.get(name)
        generation = 1 if old is None else old.generation + 1
        self._wants[name] = _Want(generation, now)
        return generation

    def generation(self, name: str) -> int:
        w = self._wants.get(name)
        return 0 if w is None else w.generation

    def apply(self, report: wh.HostReport, now: float) -> None:
        """A report from the host (module contract)."""
        if report.session != self.session:
            return
        self.heard = now
        self.host = report.host
        self.refused = report.refused
        listed = {p.name: p for p in report.processes}
        for name, w in self._wants.items():
            if w.lost:
                continue
            p = listed.get(name)
            if p is not None and p.generation == w.generation:
                w.seen, w.acked_by = p, report.host
            elif w.acked_by and w.acked_by != report.host:
                w.lost = "the worker host restarted (its processes died with it)"
            elif w.acked_by and (p is None or p.generation < w.generation):
                w.lost = "the worker host no longer runs it"

    def state(self, name: str, now: float) -> WorkerState:
        """The current start of `name` (KeyError if it was never wanted)."""
        w = self._wants[name]
        p = w.seen
        if p is not None and p.exited:
            return WorkerState(w.generation, False, False, p.pid, p.exit_code, p.info,
                               p.error)
        if w.lost:
            return WorkerState(w.generation, False, exit_code=-1, reason=w.lost)
        if self.heard is not None and now - self.heard > self.timeout:
            return WorkerState(w.generation, False, exit_code=-1,
                               reason=f"the worker host has been silent for "
                                      f"{now - self.heard:.1f} s")
        if p is None:
            if now - w.since > self.timeout:
                return WorkerState(w.generation, False, exit_code=-1,
                                   reason=f"the worker host did not start it within "
                                          f"{self.timeout:g} s" + (
                                              f" ({self.refused})" if self.refused else ""))
            return WorkerState(w.generation, True)
        return WorkerState(w.generation, True, p.ready, p.pid, None, p.info)
