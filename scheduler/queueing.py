"""The scheduler's glue between calls and its queue of calls waiting for a free worker.

Contract: `CallQueueing` is mixed into `scheduler.server.Scheduler` and carries out
`scheduler.dispatch.CallQueue`'s decisions:
- `_placeable()` is the workers plain calls may use: a worker that hosts an actor takes them
  only when no other worker is placeable (`scheduler.actor_calls.ActorCalls.placeable`);
  the queue and the placement policy both see these;
- `_requeue(...)` offers a retry (`scheduler.lifecycle`) to the queue as a new call (it
  waits, as a new call does, while the table holds: `ExecutorTable.hold_until`);
- `_pump(now)` places every waiting call a free worker can take now and fails the overdue;
- `_carry(action, now)`: a refused call's caller gets NO_RESOURCES, an expired one's TIMEOUT
  naming the queue; a call to place is started (`_start`), and if that raises, that call
  alone fails (INTERNAL, as any failed request) while the loop and the queue go on.
Uses the scheduler's `table`, `stats`, `_queue`, `_actors`, `_push`, `_start` and
`_answer_failure`.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List

from hydro_proto import cloudburst_pb2 as pb

from .dag import Dag
from .dispatch import Expire, Place, Refuse, Waiting

__all__ = ["CallQueueing"]

log = logging.getLogger("cloudburst.scheduler")


class CallQueueing:
    """The call queue's glue; mixed into the scheduler (module contract)."""

    def _requeue(self, call: pb.Call, dag: Dag, versions: Dict[str, str], concurrent: Any,
                 neighbours: Any) -> None:
        """A retry (scheduler/lifecycle.py): the new attempt waits for a free worker in the
        queue, as a new call does."""
        now = time.monotonic()
        self._carry(self._queue.offer(Waiting(call.request_id, dag.name, now, now + call.timeout,
                                              (call, dag, versions, concurrent, neighbours)),
                                      self._placeable(), now, self.table.hold_until()), now)

    def _placeable(self) -> List[Any]:
        """The workers plain calls may use: a worker that hosts an actor takes them only when
        no other worker is placeable. The queue and the policy both see these."""
        # leased slots count as load (scheduler/lease_grants.py)
        return self._with_leases(self._actors.placeable(self.table.placeable()))

    def _pump(self, now: float) -> None:
        """Place the waiting calls a free worker can take now, fail the overdue ones."""
        while self._queue:
            action = self._queue.next(self._placeable(), now, self.table.hold_until())
            if action is None:
                return
            self._carry(action, now)

    def _carry(self, action: Any, now: float) -> None:
        """Carry out the queue's decision about one call (scheduler/dispatch.py)."""
        call = action.waiting.item[0]
        if isinstance(action, (Refuse, Expire)):
            self.stats.finished(call.request_id, False, now)
            expired = isinstance(action, Expire)
            self._push.send(call.response_address, "result", pb.CallResult(
                request_id=call.request_id, status=pb.TIMEOUT if expired else pb.NO_RESOURCES,
                message=action.message, stage=action.message if expired else ""))
        elif isinstance(action, Place):
            try:
                self._start(*action.waiting.item, timeout=action.waiting.deadline - now)
            except Exception as e:      # this call fails, the loop and the queue go on
                log.exception("placing call %s failed", call.request_id)
                self._answer_failure("call", call.SerializeToString(), e)
