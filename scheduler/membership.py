"""The scheduler's view of executors and of its calls in flight: liveness by heartbeats.

Contract: `ExecutorTable(heartbeat_timeout, unresponsive_timeout)` is pure state; every
method takes `now` (seconds, from any monotonic clock the caller chooses) instead of reading
a clock.
- `heartbeat(...)` records a worker's own report (with its node cache's address, used by the
  causal protocols: `cache_address(worker_id)`); an unknown worker joins.
- `vouch(worker_id, node_id, now)` records its executor node's report that the worker's
  process is alive (the node supervises it; see "Liveness" below). A vouch never makes a
  worker join: only its own heartbeat carries its address.
- `keyset(node_id, keys)` records the key set a node cache reports (for locality).
- `expire(now)` drops dead workers (see "Liveness") and returns
  `Expired(dead_workers, orphaned_calls, overdue_calls, reasons)`: calls in flight on a dead
  worker (to be failed at their caller, with `reasons[worker]`) and calls past their
  deadline (forgotten quietly: their caller's own deadline reports them).
- `credit(seconds)` moves every liveness clock forward: the scheduler could not read its
  socket for that long (a long handler), so silence over that time proves nothing.
- `hold_until()`: when `expire` dropped the last live worker for silence (not an exit its
  node reported), until when (`heartbeat_timeout` later) the scheduler does not know
  whether the executors are gone or their reports only stalled (a whole executor pod's
  connections wait while it resolves a replaced peer's name again): calls that find no
  worker meanwhile wait (`scheduler/dispatch.py`) rather than get NO_RESOURCES. None
  otherwise; a worker heard again ends it.

Liveness. A worker's own heartbeats come from a thread that cannot run while the worker
holds the interpreter in one long C call (unpickling a 200 MB argument, a `sum(range(N))`),
so missing them is not death. A worker is dead when
- its node reported its process exited (`drop_worker`, at once), or
- it was never vouched for by a node (an old node, a bare worker) and its own heartbeat is
  older than `heartbeat_timeout`, or
- its node has vouched for it but its last vouch is older than `heartbeat_timeout` (the node
  died or went silent and takes its workers with it), or
- its node still vouches for it but its own heartbeat is older than `unresponsive_timeout`
  (alive but unresponsive for far too long; its node kills and restarts such a worker too).

- `start_call(...)` / `finish_call(call_id)` track outstanding calls per worker; a worker's
  load is the number of unfinished calls placed on it. `placed(worker_id)` counts the calls
  ever placed on a live worker (`start_call(..., new_call=False)`: a further attempt of a
  call already counted, such as a causal call's, is not counted again).
- `live()` lists `WorkerView`s; `placeable()` those not on a draining node, for
  `scheduler.policy.choose_executors`.

Draining (executor autoscaling). `set_drain(node_id, draining, epoch)` records a drain
request (from the autoscaler through this scheduler) and `node_report(...)` a node's own
snapshot (`NodeStatus`: its drain state, functions running and invocations queued); of the
two drain states the one of the higher epoch wins, so a late message never undoes a newer
one. A draining node's workers are not `placeable()`. `nodes()` lists one `NodeView` per
node with live workers: its drain state as this scheduler applies it, the calls this
scheduler placed there and has not seen finish (`outstanding`: each call counted once per
node), and the node's last report. A node without live workers is forgotten.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple

from .policy import WorkerView

__all__ = ["ExecutorTable", "CallRecord", "Expired", "NodeView"]


@dataclass
class _Worker:
    node_id: str
    address: str
    utilization: float
    last_seen: float
    outstanding: int = 0
    placed: int = 0                        # calls placed on it, finished or not
    cache_address: str = ""
    control_address: str = ""
    restarts: int = 0
    vouched_at: Optional[float] = None     # last time its node reported its process alive


@dataclass
class CallRecord:
    """A call this scheduler placed: where each function runs and who waits for the result."""

    call_id: str
    name: str
    placement: Dict[str, str]          # function -> worker id
    response_address: str
    deadline: float


@dataclass
class Expired:
    dead_workers: List[str] = field(default_factory=list)
    orphaned_calls: List[Tuple[CallRecord, str]] = field(default_factory=list)  # (call, dead worker)
    overdue_calls: List[CallRecord] = field(default_factory=list)
    reasons: Dict[str, str] = field(default_factory=dict)   # dead worker -> why, for callers


@dataclass(frozen=True)
class NodeView:
    """One executor node as this scheduler sees it (see "Draining")."""

    node_id: str
    workers: int
    utilization: float        # mean busy fraction its live workers last reported
    draining: bool            # this scheduler places no new call on it
    drain_epoch: int
    outstanding: int          # calls this scheduler placed on it, unfinished
    running: int = 0          # from the node's last report
    queued: int = 0
    node_draining: bool = False   # the node's own last report


@dataclass
class _NodeReport:
    draining: bool
    drain_epoch: int
    running: int
    queued: int


class ExecutorTable:
    """Live executor workers, node key sets and calls in flight; see the module contract."""

    def __init__(self, heartbeat_timeout: float, unresponsive_timeout: float = 960.0) -> None:
        self.heartbeat_timeout = heartbeat_timeout
        self.unresponsive_timeout = max(unresponsive_timeout, heartbeat_timeout)
        self._workers: Dict[str, _Worker] = {}
        self._node_keys: Dict[str, FrozenSet[str]] = {}
        self._calls: Dict[str, CallRecord] = {}
        self._drains: Dict[str, Tuple[bool, int]] = {}     # node id -> (draining, epoch)
        self._reports: Dict[str, _NodeReport] = {}
        self._lost_all_at: Optional[float] = None   # the last live worker dropped for silence

    # ---- draining ----
    def set_drain(self, node_id: str, draining: bool, epoch: int) -> bool:
        """Apply a drain state unless a newer one (higher epoch) is known; True if the node's
        draining flag changed."""
        old = self._drains.get(node_id, (False, 0))
        if epoch < old[1] or (epoch == old[1] and draining == old[0]):
            return False
        self._drains[node_id] = (draining, epoch)
        return draining != old[0]

    def node_report(self, node_id: str, draining: bool, epoch: int, running: int,
                    queued: int) -> bool:
        """Record a node's own snapshot; True if its drain state changed this scheduler's."""
        self._reports[node_id] = _NodeReport(draining, epoch, running, queued)
        return self.set_drain(node_id, draining, epoch)

    def draining(self, node_id: str) -> bool:
        """Whether this scheduler places no new call on `node_id`."""
        return self._drains.get(node_id, (False, 0))[0]

    def placeable(self) -> List[WorkerView]:
        """Live workers of nodes that are not draining, sorted by id."""
        if not any(d for d, _ in self._drains.values()):
            return self.live()
        return [w for w in self.live() if not self.draining(w.node_id)]

    def nodes(self) -> List[NodeView]:
        """One view per node with live workers, sorted by node id (see "Draining")."""
        workers: Dict[str, List[_Worker]] = {}
        for w in self._workers.values():
            workers.setdefault(w.node_id, []).append(w)
        node_of = {wid: w.node_id for wid, w in self._workers.items()}
        outstanding: Dict[str, int] = {}
        for record in self._calls.values():
            for node in {node_of.get(wid) for wid in record.placement.values()} - {None}:
                outstanding[node] = outstanding.get(node, 0) + 1   # type: ignore[index]
        out = []
        for node_id in sorted(workers):
            ws = workers[node_id]
            draining, epoch = self._drains.get(node_id, (False, 0))
            report = self._reports.get(node_id)
            out.append(NodeView(node_id, len(ws), sum(w.utilization for w in ws) / len(ws),
                                draining, epoch, outstanding.get(node_id, 0),
                                report.running if report else 0,
                                report.queued if report else 0,
                                report.draining if report else False))
        return out

    # ---- executors ----
    def heartbeat(self, worker_id: str, node_id: str, address: str, utilization: float,
                  now: float, cache_address: str = "", control_address: str = "",
                  restarts: int = 0) -> bool:
        """Record a report; returns True if the worker is new."""
        w = self._workers.get(worker_id)
        if w is None:
            self._lost_all_at = None
            self._workers[worker_id] = _Worker(node_id, address, utilization, now,
                                               cache_address=cache_address,
                                               control_address=control_address,
                                               restarts=restarts)
            return True
        w.node_id, w.address, w.utilization = node_id, address, utilization
        if cache_address:
            w.cache_address = cache_address
        if control_address:
            w.control_address = control_address
        w.restarts = restarts
        w.last_seen = max(w.last_seen, now)
        return False

    def vouch(self, worker_id: str, node_id: str, now: float) -> bool:
        """Worker `worker_id`'s node reports its process alive; False if the worker is
        unknown (it joins with its own first heartbeat) or belongs to another node."""
        w = self._workers.get(worker_id)
        if w is None or w.node_id != node_id:
            return False
        w.vouched_at = now if w.vouched_at is None else max(w.vouched_at, now)
        return True

    def credit(self, seconds: float) -> None:
        """Forgive `seconds` of silence from every worker and node (see the module contract)."""
        if seconds <= 0:
            return
        for w in self._workers.values():
            w.last_seen += seconds
            if w.vouched_at is not None:
                w.vouched_at += seconds

    def why_dead(self, worker_id: str, now: float) -> Optional[str]:
        """Why the worker counts as dead at `now` (see "Liveness"), or None if it is alive
        (or unknown)."""
        w = self._workers.get(worker_id)
        if w is None:
            return None
        silent = now - w.last_seen
        if w.vouched_at is None:
            if silent > self.heartbeat_timeout:
                return f"died (no heartbeat for {self.heartbeat_timeout:g} s)"
            return None
        if now - w.vouched_at > self.heartbeat_timeout:
            return (f"was lost with its executor node {w.node_id} (the node has not reported "
                    f"it alive for {self.heartbeat_timeout:g} s)")
        if silent > self.unresponsive_timeout:
            return (f"is unresponsive (its process is alive but it has not heartbeaten for "
                    f"{self.unresponsive_timeout:g} s)")
        return None

    def hold_until(self) -> Optional[float]:
        """Until when calls that find no worker wait (module contract), or None."""
        if self._lost_all_at is None or self._workers:
            return None
        return self._lost_all_at + self.heartbeat_timeout

    def keyset(self, node_id: str, keys: FrozenSet[str]) -> None:
        """Record the key set node `node_id`'s cache reports."""
        self._node_keys[node_id] = frozenset(keys)

    def node_keys(self) -> Mapping[str, FrozenSet[str]]:
        """node id -> cached keys, as last reported."""
        return self._node_keys

    def address(self, worker_id: str) -> Optional[str]:
        """The worker's address, or None if it is not live."""
        w = self._workers.get(worker_id)
        return w.address if w else None

    def control_address(self, worker_id: str) -> Optional[str]:
        """Where a running function of the worker can be cancelled ("" if it reported none),
        or None if the worker is not live."""
        w = self._workers.get(worker_id)
        return w.control_address if w else None

    def restarts(self, worker_id: str) -> int:
        """How often the worker's node restarted it (as the worker last reported)."""
        w = self._workers.get(worker_id)
        return w.restarts if w else 0

    def cache_address(self, worker_id: str) -> Optional[str]:
        """The worker's node cache address ("" if it reported none), or None if not live."""
        w = self._workers.get(worker_id)
        return w.cache_address if w else None

    def live(self) -> List[WorkerView]:
        """Every live worker, sorted by id."""
        return [WorkerView(i, w.node_id, w.address, w.utilization, w.outstanding,
                           w.cache_address)
                for i, w in sorted(self._workers.items())]

    # ---- calls ----
    def start_call(self, record: CallRecord, new_call: bool = True) -> None:
        """Count `record` as outstanding on each of its (distinct) workers, and as placed
        there unless it is a further attempt of a call already counted (`new_call=False`)."""
        self._calls[record.call_id] = record
        for wid in set(record.placement.values()):
            if wid in self._workers:
                self._workers[wid].outstanding += 1
                self._workers[wid].placed += 1 if new_call else 0

    def placed(self, worker_id: str) -> int:
        """How many calls this scheduler placed on the worker, finished or not (0 if unknown)."""
        w = self._workers.get(worker_id)
        return w.placed if w else 0

    def finish_call(self, call_id: str) -> Optional[CallRecord]:
        """Forget a finished call (idempotent); returns its record if it was known."""
        record = self._calls.pop(call_id, None)
        if record is not None:
            for wid in set(record.placement.values()):
                w = self._workers.get(wid)
                if w is not None and w.outstanding > 0:
                    w.outstanding -= 1
        return record

    def call(self, call_id: str) -> Optional[CallRecord]:
        """The record of a call in flight, or None."""
        return self._calls.get(call_id)

    def calls_in_flight(self) -> int:
        return len(self._calls)

    def callers(self) -> List[Tuple[str, List[str]]]:
        """Each call in flight's caller (its answer address) and the workers it runs on."""
        return [(r.response_address, list(r.placement.values())) for r in self._calls.values()]

    def drop_worker(self, worker_id: str) -> List[CallRecord]:
        """Forget a worker known to have exited; returns (and forgets) the calls placed on it."""
        if self._workers.pop(worker_id, None) is None:
            return []
        return [self.finish_call(cid) for cid, r in list(self._calls.items())
                if worker_id in r.placement.values()]

    # ---- time ----
    def expire(self, now: float) -> Expired:
        """Drop silent workers and overdue calls; see the module contract."""
        out = Expired()
        for wid in list(self._workers):
            reason = self.why_dead(wid, now)
            if reason is not None:
                del self._workers[wid]
                out.dead_workers.append(wid)
                out.reasons[wid] = reason
        dead = set(out.dead_workers)
        if dead and not self._workers:
            self._lost_all_at = now
        for cid, record in list(self._calls.items()):
            hit = sorted(set(record.placement.values()) & dead)
            if hit:
                out.orphaned_calls.append((self.finish_call(cid), hit[0]))
            elif now > record.deadline:
                out.overdue_calls.append(self.finish_call(cid))
        if dead:
            live_nodes = {w.node_id for w in self._workers.values()}
            for table in (self._node_keys, self._drains, self._reports):
                for node in list(table):
                    if node not in live_nodes:
                        del table[node]
        return out
