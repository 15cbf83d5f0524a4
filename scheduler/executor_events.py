"""The scheduler's handling of what executors report, and of workers it loses.

Contract: `ExecutorEvents` is mixed into `scheduler.server.Scheduler`.
- `heartbeat`: a worker's own status (with its address) joins or refreshes it in the
  `membership.ExecutorTable`; one without an address is its node vouching for its process;
  `exited` (EXECUTION_ERROR; TIMEOUT when it was killed at a function's time limit) and
  `overran` (a function stuck in C code past its limit: TIMEOUT for that call) drop the
  worker at once, end the actors it hosted and orphan its calls.
- `drain` marks a node draining or not (the highest epoch wins) and is forwarded to the
  node; `node_status` is the node's own report of it and of its load; `keyset` is the keys a
  node's cache holds (for locality).
- `_expire(now)` (every tick) drops dead workers (the table's liveness rules), ends their
  actors, counts overdue calls as failed, and orphans the calls on dead workers.
- `_orphaned(...)`: a call that lost a worker runs again while its retry budget lasts
  (`scheduler.lifecycle`), else its other workers get `abort` and its caller gets `status`
  naming the worker and why; a causal call's fate is its coordinator's
  (`scheduler.causal_calls`).
Uses the scheduler's `table`, `stats`, `lifecycle`, `_actors`, `_causal`, `_causal_calls`
and `_push`.
"""
from __future__ import annotations

import logging
import signal
import time

from hydro_proto import cloudburst_pb2 as pb

from .membership import CallRecord
from .retries import caller_of_attempt

__all__ = ["ExecutorEvents", "STATS_HORIZON"]

log = logging.getLogger("cloudburst.scheduler")

STATS_HORIZON = 3600.0    # a call unfinished this long is dropped from the statistics


class ExecutorEvents:
    """Executors' reports and lost workers; mixed into the scheduler (module contract)."""

    def _heartbeat(self, payload: bytes) -> None:
        s = pb.WorkerStatus.FromString(payload)
        if s.overran:
            # executor/node.py: a function is past its time limit, stuck in C code, and its
            # worker kills itself a grace period later (executor/guard.py): the call fails
            # now, and the worker is dropped until it comes back (restarted, it heartbeats)
            how = ("ran a function past its time limit that did not return to the "
                   "interpreter (stuck in C code); the worker is being killed and restarted")
            log.warning("worker %s of node %s %s", s.worker_id, s.node_id, how)
            self._actors.worker_lost(s.worker_id, how)
            self._leases_lost(s.worker_id, how)
            for record in self.table.drop_worker(s.worker_id):
                self._orphaned(record, s.worker_id, f"executor worker {s.worker_id} {how}",
                               time.monotonic(),
                               pb.TIMEOUT if record.call_id == s.call_id else pb.EXECUTION_ERROR)
            return
        if s.exited:
            status = pb.EXECUTION_ERROR
            if s.exit_code >= 0:
                how = f"exited with code {s.exit_code}"
            elif -s.exit_code == signal.SIGPROF:
                # executor/guard.py: a function past its time limit that never returned to
                # the interpreter (stuck in C code) is stopped by killing its worker
                how, status = ("was killed at its function's time limit (the function did "
                               "not return to the interpreter)"), pb.TIMEOUT
            else:
                how = f"was killed by signal {-s.exit_code}"
            log.warning("worker %s of node %s %s", s.worker_id, s.node_id, how)
            self._actors.worker_lost(s.worker_id, how)
            self._leases_lost(s.worker_id, how)
            for record in self.table.drop_worker(s.worker_id):
                self._orphaned(record, s.worker_id, f"executor worker {s.worker_id} {how}",
                               time.monotonic(), status)
            return
        if s.direct_address:    # where its leases' direct calls go (scheduler/lease_grants.py)
            self._note_direct(s.worker_id, s.direct_address, s.call_link_address)
        if s.direct_calls:      # its window learns from direct calls as from `done`s
            window = self._windows.slots(s.worker_id)
            self._windows.observe(s.worker_id, s.direct_calls, s.direct_busy_seconds)
            if self._windows.slots(s.worker_id) > window:
                self._widened(s.worker_id)      # its leases grow now (lease_grants.py)
        if not s.address:       # its node vouches that the worker's process is alive
            self.table.vouch(s.worker_id, s.node_id, time.monotonic())
            return
        if self.table.heartbeat(s.worker_id, s.node_id, s.address, s.utilization,
                                time.monotonic(), s.cache_address, s.control_address,
                                s.restarts):
            log.info("worker %s of node %s joined at %s", s.worker_id, s.node_id, s.address)

    def _drain(self, payload: bytes) -> None:
        """Stop (or resume) placing calls on a node now, and tell the node."""
        req = pb.DrainRequest.FromString(payload)
        if self.table.set_drain(req.node_id, req.draining, req.epoch):
            log.info("executor node %s %s (epoch %d)", req.node_id,
                     "is draining: no new calls placed on it" if req.draining
                     else "takes calls again", req.epoch)
        node = next((w.cache_address for w in self.table.live()
                     if w.node_id == req.node_id and w.cache_address), None)
        if node:
            self._push.send(node, "drain", req)

    def _node_status(self, payload: bytes) -> None:
        s = pb.NodeStatus.FromString(payload)
        if self.table.node_report(s.node_id, s.draining, s.drain_epoch, s.running, s.queued):
            log.info("executor node %s reports it %s (epoch %d)", s.node_id,
                     "is draining" if s.draining else "takes calls", s.drain_epoch)

    def _keyset(self, payload: bytes) -> None:
        k = pb.CacheKeySet.FromString(payload)
        self.table.keyset(k.node_id, frozenset(k.keys))

    def _expire(self, now: float) -> None:
        expired = self.table.expire(now)
        for wid in expired.dead_workers:
            log.warning("worker %s %s; dropped from scheduling", wid, expired.reasons[wid])
            self._actors.worker_lost(wid, expired.reasons[wid])
            self._leases_lost(wid, expired.reasons[wid])
            self._windows.forget(wid)
        hold = self.table.hold_until()
        if expired.dead_workers and hold is not None:
            log.warning("no live executor worker left; calls that find none wait up to "
                        "%.1f s for one (its reports may only have stalled)", hold - now)
        for record in expired.overdue_calls:
            self.stats.finished(caller_of_attempt(record.call_id), False, now)
        self.stats.expire(now, STATS_HORIZON)
        for record, dead in expired.orphaned_calls:
            self._orphaned(record, dead, f"executor worker {dead} {expired.reasons[dead]}",
                           now)

    def _orphaned(self, record: CallRecord, dead: str, what: str, now: float,
                  status: int = pb.EXECUTION_ERROR) -> None:
        """A call lost a worker it was placed on: it runs again while its retry budget
        lasts (scheduler/lifecycle.py), else it fails (`status`) naming the worker and why."""
        fns = sorted(f for f, w in record.placement.items() if w == dead)
        message = f"{record.name}: {what} while the call's function(s) {fns} were placed on it"
        causal = self._causal_calls.owner(record.call_id) if self._causal else None
        if causal is not None:
            if status != pb.EXECUTION_ERROR or not self.lifecycle.causal_died(causal, message,
                                                                             now):
                self.stats.finished(caller_of_attempt(record.call_id), False, now)
                self._causal_calls.worker_died(causal, message, now)
            return
        handled = status == pb.EXECUTION_ERROR and self.lifecycle.died(record, message, now)
        # a retry placed (or waiting for a worker): the attempt's workers keep no verdict
        # for `Future` arguments (executor/sharing.py); the retry's result will answer them
        again = self.lifecycle.retries.current(caller_of_attempt(record.call_id))
        retried = handled and again not in (None, record.call_id)
        for fn, wid in record.placement.items():
            address = self.table.address(wid)
            if address is not None:
                self._push.send(address, "abort", pb.CallDone(
                    call_id=record.call_id, status=status, message=message, retried=retried))
        if handled:
            return            # run again, or failed naming its attempts, by the lifecycle
        self.stats.finished(caller_of_attempt(record.call_id), False, now)
        status, message = self._actors.orphaned(record.call_id, status, message)
        self._push.send(record.response_address, "result", pb.CallResult(
            request_id=record.call_id, status=status, message=message))
