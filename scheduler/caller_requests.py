"""A caller's questions about its calls, and the scheduler's own status: `where`, `cancel`,
`status` and the `/metrics` text.

Contract: `CallerRequests` is a mixin of `scheduler.server.Scheduler`, which sets up the state
it reads (`table`, `lifecycle`, `_causal`, `_queue`, `_push`, `_actors`, `stats`,
`admission`, `metrics`, `_security`, `_deferred`, `config`, `address`).
- `where` answers with an `accepted` naming the call's placement (for a causal call, its
  current attempt's), or its place and time in the queue, so a caller whose wait timed out
  can name the stage its call stalled at.
- `cancel` of a direct call goes to the lease's worker (`scheduler/lease_grants.py`); of any
  other call, `cancel_call` takes it out of the queue if it waits there, else tells every
  worker of its attempt in flight to `abort` it, and releases its load.
- `status` replies with every live worker, every executor node (drain state, load), the
  backlog, the actors, per-function statistics, and the admission counts as JSON in
  `message`; `_publish_metrics` renders the same as Prometheus text for `/metrics`.
"""
from __future__ import annotations

import json
import time

from hydro_proto import cloudburst_pb2 as pb

from .retries import caller_of_attempt
from .stats import WorkerGauge, render_prometheus

__all__ = ["CallerRequests"]


class CallerRequests:
    """`where`, `cancel` and `status` (module contract)."""

    def _where(self, payload: bytes) -> None:
        req = pb.NameRequest.FromString(payload)
        answer = pb.Accepted(request_id=req.request_id, scheduler=self.address)
        name = self.lifecycle.current(req.name)
        causal = self._causal.get(name)
        record = self.table.call(name if causal is None else
                                 (causal.coordinator.current() or ""))
        if record is not None:
            answer.placement.update(record.placement)
        queued = self._queue.position(name, time.monotonic())
        if queued is not None:
            answer.queued_position, answer.queued_seconds = queued
        self._push.send(req.response_address, "accepted", answer)

    def _cancel(self, payload: bytes) -> None:
        """The caller cancelled a call (or stopped waiting): every worker of it drops the call,
        a running function is stopped, and the call's load is released."""
        req = pb.NameRequest.FromString(payload)
        if req.lease_id:                  # a direct call (scheduler/lease_grants.py)
            return self._cancel_direct(req)
        self.cancel_call(req.name)

    def cancel_call(self, caller_id: str) -> None:
        """Stop call `caller_id` (its attempt in flight) where it runs; see `_cancel`."""
        name = self.lifecycle.finished(caller_id)
        if self._queue.remove(name) is not None:     # not placed yet: nothing runs
            self.stats.finished(caller_of_attempt(name), False, time.monotonic())
            return
        causal = self._causal.get(name)
        call_id = name if causal is None else (causal.coordinator.current() or "")
        record = self.table.call(call_id)
        if record is None:
            return
        abort = pb.CallDone(call_id=call_id, status=pb.CANCELLED,
                            message="its caller cancelled it")
        for worker_id in set(record.placement.values()):
            for address in (self.table.address(worker_id), self.table.control_address(worker_id)):
                if address:
                    self._push.send(address, "abort", abort)
        self._finish_one(call_id)

    def _status(self, payload: bytes) -> None:
        req = pb.NameRequest.FromString(payload)
        reply = pb.Reply(request_id=req.request_id, status=pb.OK,
                         kvs_address=self.config.kvs_address,
                         metrics_address=self.metrics.address if self.metrics else "")
        for w in self.table.live():
            reply.workers.add(worker_id=w.worker_id, node_id=w.node_id,
                              utilization=w.utilization, outstanding=w.outstanding,
                              restarts=self.table.restarts(w.worker_id),
                              placed=self.table.placed(w.worker_id))
        for n in self.table.nodes():
            reply.executor_nodes.add(node_id=n.node_id, workers=n.workers,
                                     utilization=n.utilization, draining=n.draining,
                                     drain_epoch=n.drain_epoch, outstanding=n.outstanding,
                                     running=n.running, queued=n.queued,
                                     node_draining=n.node_draining)
        reply.backlog = len(self._deferred) + len(self._queue)
        nodes = {w.worker_id: w.node_id for w in self.table.live()}
        reply.actors.extend(self._actors.states(lambda wid: nodes.get(wid, "")))
        for s in self.stats.summaries():
            reply.function_stats.add(name=s.name, calls=s.calls, errors=s.errors,
                                     p50=s.p50 or 0.0, p99=s.p99 or 0.0, in_flight=s.in_flight)
        reply.message = json.dumps({
            "auth": self._security is not None,
            "refused_connections": self.admission.refused_connections(),
            "dropped": [{"role": role, "kind": kind, "count": n}
                        for (role, kind), n in sorted(self.admission.dropped.items())]})
        self._reply(req.response_address, reply)

    def _publish_metrics(self) -> None:
        gauges = [WorkerGauge(w.worker_id, w.node_id, w.utilization, w.outstanding)
                  for w in self.table.live()]
        self._metrics_text = render_prometheus(
            self.stats, gauges, self.address, nodes=self.table.nodes(),
            dropped=self.admission.dropped,
            refused_connections=self.admission.refused_connections() if self._security else None)
