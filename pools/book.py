"""The pending/leaving record of a pool manager and its decisions, as pure code.

`PoolBook` holds, for every pool of a manager, the nodes requested and not up yet
(`Pending`: when the "machine" is provisioned, when its process was started) and the nodes
asked to leave. It is fed what was requested (`request`, `leave`), what the spawner saw (a
start's readiness: True up, False exited, None not yet) and the time, and answers with
`NodeEvent`s and what to do (`due`: starts to spawn now; `Outcome.kill`: a start to kill).
It never calls anything, sleeps or reads a clock (tests/test_pools.py drives it directly).

The rules:
- A requested node is spawned `provisioning_delay` seconds after `request` (standing in for
  a VM or pod boot); it is READY once the spawner says it is up; FAILED (`StartupError`) if
  it exited first, or if it is not up `startup_timeout` seconds after it was spawned (then it
  is killed: `Outcome.kill`). A spawn that raises is FAILED at once.
- `nodes(pool, running)`: the running nodes that are neither pending nor leaving.
- `check_leave` refuses, naming the node: `NodeLeaving` (already leaving), `UnknownNode`
  (not a running node of the pool: pending, elsewhere, gone), `LastNode` (the pool's only
  running node). `leave` records the node; `finish` forgets it once REMOVED or FAILED.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

from runtime.process import StartupError

from .errors import LastNode, NodeLeaving, UnknownNode
from .manager import FAILED, READY, REMOVED, NodeEvent

__all__ = ["Pending", "Outcome", "PoolBook"]


@dataclass
class Pending:
    """A requested node: `start_at` is when its process is started (the provisioning delay
    after the request); `spawned_at` when it was (None: not yet)."""

    pool: str
    node_id: str
    start_at: float
    spawned_at: Optional[float] = None


@dataclass(frozen=True)
class Outcome:
    """How a start ended: `event` (READY or FAILED) and whether to `kill` the process (a
    start that timed out)."""

    event: NodeEvent
    kill: bool = False


class PoolBook:
    """The pending and leaving nodes of a manager's pools; see the module contract.

    Args:
        provisioning_delay: seconds from a request to its process' start.
        startup_timeout: seconds from a process' start until it must be up.
    """

    def __init__(self, provisioning_delay: float, startup_timeout: float) -> None:
        if provisioning_delay < 0:
            raise ValueError(f"provisioning_delay must be >= 0, got {provisioning_delay!r}")
        if startup_timeout <= 0:
            raise ValueError(f"startup_timeout must be > 0, got {startup_timeout!r}")
        self.provisioning_delay = float(provisioning_delay)
        self.startup_timeout = float(startup_timeout)
        self._pending: Dict[str, Pending] = {}
        self._leaving: Dict[str, str] = {}          # node id -> pool

    # -- queries --

    def pending(self, pool: str) -> List[str]:
        return [n for n, p in self._pending.items() if p.pool == pool]

    def leaving(self, pool: str) -> List[str]:
        return [n for n, p in self._leaving.items() if p == pool]

    def is_pending(self, node_id: str) -> bool:
        return node_id in self._pending

    def nodes(self, pool: str, running: Iterable[str]) -> List[str]:
        """The running nodes of `pool` (as the spawner lists them) neither pending nor leaving."""
        return [n for n in running if n not in self._pending and n not in self._leaving]

    # -- starts --

    def request(self, pool: str, node_ids: Iterable[str], now: float) -> None:
        start_at = now + self.provisioning_delay
        for node_id in node_ids:
            self._pending[node_id] = Pending(pool, node_id, start_at)

    def due(self, now: float) -> List[Pending]:
        """The requested nodes whose process is to be started now."""
        return [p for p in self._pending.values() if p.spawned_at is None and now >= p.start_at]

    def starting(self) -> List[str]:
        """The requested nodes whose process was started and is not up yet."""
        return [n for n, p in self._pending.items() if p.spawned_at is not None]

    def spawned(self, node_id: str, now: float) -> None:
        self._pending[node_id].spawned_at = now

    def spawn_failed(self, node_id: str, error: BaseException) -> NodeEvent:
        p = self._pending.pop(node_id)
        return NodeEvent(FAILED, node_id, f"{p.pool} node {node_id} did not start: {error}",
                         error, pool=p.pool)

    def started(self, node_id: str, up: Optional[bool], now: float) -> Optional[Outcome]:
        """A spawned node's state (`up`: True up, False exited, None not yet); how its start
        ended, or None while it may still come up."""
        p = self._pending[node_id]
        if p.spawned_at is None:
            return None
        if up:
            del self._pending[node_id]
            return Outcome(NodeEvent(READY, node_id, f"{p.pool} node {node_id} is up "
                                     f"{now - p.spawned_at:.1f} s after its process started",
                                     pool=p.pool))
        timed_out = now - p.spawned_at > self.startup_timeout
        if up is None and not timed_out:
            return None
        del self._pending[node_id]
        how = ("exited before it was ready" if up is False
               else f"did not report ready within {self.startup_timeout:g} s (killed)")
        error = StartupError(f"{p.pool} node {node_id} {how}", node_id)
        return Outcome(NodeEvent(FAILED, node_id, f"{p.pool} node {node_id} {how}", error,
                                 pool=p.pool), kill=up is None)

    def forget_pending(self) -> None:
        """Drop every pending start (closing: nodes already spawned keep running)."""
        self._pending.clear()

    # -- leaves --

    def check_leave(self, pool: str, node_id: str, running: List[str],
                    absent: str = "does not exist") -> None:
        """Raise if `node_id` cannot leave `pool`: `running` are the pool's running nodes not
        leaving; `absent` says why a node not among them is not (e.g. "is a disk node")."""
        if self._leaving.get(node_id) == pool:
            raise NodeLeaving(f"{pool} node {node_id} is already leaving", node_id=node_id,
                              pool=pool)
        if node_id not in running:
            why = ("is still starting (pending), not running"
                   if self._pending.get(node_id, Pending("", "", 0)).pool == pool else absent)
            raise UnknownNode(f"cannot remove node {node_id} from the {pool} pool: it {why}; "
                              f"running {pool} nodes: {running}", node_id=node_id, pool=pool)
        if len(running) == 1:
            raise LastNode(f"cannot remove node {node_id}: it is the {pool} pool's last running "
                           f"node", node_id=node_id, pool=pool)

    def leave(self, pool: str, node_id: str) -> None:
        self._leaving[node_id] = pool

    def finish(self, event: NodeEvent) -> None:
        """Forget a leaving node once its removal ended (REMOVED or FAILED)."""
        if event.kind in (REMOVED, FAILED):
            self._leaving.pop(event.node_id, None)
