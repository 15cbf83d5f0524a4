"""A call's life at the scheduler past its placement: retries (at least once) and client
leases (a call whose caller is gone is cancelled). The I/O around two pure cores,
`scheduler.retries.RetryTable` and `scheduler.leases.LeaseTable`.

Contract: `CallLifecycle(send, start, cancel, can_place, stats, causal_calls, max_retries)`;
the scheduler's loop calls it with `now`:
- `begin(call, records, payload, now, timeout)`: a call was accepted. Its retry policy is
  resolved (call, then its functions' `FunctionRecord.retry`, then `max_retries`) and the
  call is tracked; a call sent with `lease_ttl` and no `output_key` is held under its
  client's lease.
- `mark(schedule, attempt_id)`: writes into a schedule (and the schedules it forwards)
  which exceptions the call retries, so a worker whose function raises one reports it
  here (`done` with `retry`) instead of failing the call at its caller.
- `died(record, message, now)` (an LWW attempt lost its worker or node) and
  `causal_died(in_flight, message, now)`: True when handled here: the call runs again
  under a new attempt id (`f"{caller}#r{n}"`; a retry that finds no live worker waits
  for one until the call's deadline), or it fails at its caller with WORKER_DIED naming how
  many attempts ran; False: not tracked, the caller fails it as before. A causal call that
  was granted its commit is never run again (it may have committed).
- `exception(done, now)`: a worker's `retry` request (its function raised an exception
  the call's policy names): the call runs again, or the error goes to the caller, with
  how many attempts ran.
- `current(caller_id)`: the attempt in flight for a caller's id (for `where`, `cancel`).
  `finished(call_id)` forgets a call that ended and returns that attempt id.
- `lease(payload, now)`: a client's `ClientLease`: renewed, or (ttl 0) the client leaves
  and its leased calls are cancelled now. `tick(now)` cancels the calls of every client
  whose lease ran out, places held retries and forgets what is past its deadline.
  `credit(seconds)` extends leases over a stall of the scheduler's loop.
- Large values (`scheduler/values.py`, pure): `values_of(call_id, keys, now, timeout,
  live)` tracks a call's keys under `__values/` (its by-reference arguments, its functions'
  results passed on by reference); every end of a call above (`finished`, a retry budget
  spent, a retry no worker took) hands them to `delete`, and `tick` those of calls tracked
  past their deadline (plus DEADLINE_SLACK). A call with none costs one check per end.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Sequence, Tuple

from hydro_proto import cloudburst_pb2 as pb

from .leases import LeaseTable
from .values import ValueKeys
from .retries import (Failure, GiveUp, Retry, RetryPolicy, RetryTable, Tracked,
                      caller_of_attempt, resolve)

__all__ = ["CallLifecycle"]

log = logging.getLogger("cloudburst.scheduler")

DEADLINE_SLACK = 5.0     # seconds past a call's deadline before its tracking is dropped


class CallLifecycle:
    """See the module contract."""

    def __init__(self, send: Callable[[str, str, Any], Any],
                 start: Callable[..., None], cancel: Callable[[str], None],
                 can_place: Callable[[], bool], stats: Any, causal_calls: Any,
                 max_retries: int,
                 delete: Callable[[List[str]], None] = lambda keys: None) -> None:
        self._send = send
        self._start = start
        self._cancel = cancel
        self._can_place = can_place
        self._stats = stats
        self._causal_calls = causal_calls
        self.default = RetryPolicy(max(0, int(max_retries)))
        self.retries = RetryTable()
        self.leases = LeaseTable()
        self._held: Dict[str, Tuple[pb.Call, Tracked]] = {}   # retries waiting for a worker
        self.values = ValueKeys()
        self._delete = delete

    # ---- large values of calls (scheduler/values.py) ----
    def values_of(self, call_id: str, keys: Sequence[str], now: float, timeout: float,
                  live: bool = True) -> None:
        gone = self.values.add(caller_of_attempt(call_id), keys,
                               now + timeout + DEADLINE_SLACK, live)
        if gone:
            self._delete(gone)

    def _ended(self, caller: str) -> None:
        if self.values:
            gone = self.values.end(caller)
            if gone:
                self._delete(gone)

    # ---- a call's start ----
    def begin(self, call: pb.Call, records: Sequence[pb.FunctionRecord], payload: Any,
              now: float, timeout: float) -> None:
        policy = resolve(call.retry if call.HasField("retry") else None,
                         [r.retry if r.HasField("retry") else None for r in records],
                         self.default)
        self.retries.begin(call.request_id, policy, (call, payload),
                           now + timeout + DEADLINE_SLACK)
        if call.lease_ttl > 0 and not call.output_key:
            self.leases.add(call.response_address, call.request_id, call.lease_ttl, now)

    def mark(self, schedule: pb.Schedule, attempt_id: str) -> None:
        t = self.retries.tracked(attempt_id)
        if t is None or not t.policy.exceptions:
            return
        for s in [schedule, *schedule.forward]:
            s.retry_all_exceptions = t.policy.exceptions is True
            s.retry_exception_types[:] = t.policy.exception_types()

    def current(self, caller_id: str) -> str:
        return self.retries.current(caller_id) or caller_id

    def finished(self, call_id: str) -> str:
        current = self.current(call_id)
        self.retries.finish(call_id)
        self.leases.finish(caller_of_attempt(call_id))
        self._ended(caller_of_attempt(call_id))
        self._held.pop(caller_of_attempt(call_id), None)
        return current

    # ---- failures ----
    def died(self, record: Any, message: str, now: float) -> bool:
        decision = self.retries.on_failure(record.call_id, Failure(message))
        return self._carry_out(decision, record.call_id, record.response_address, message, now)

    def causal_died(self, rec: Any, message: str, now: float) -> bool:
        cid = rec.call.request_id
        decision = self.retries.on_failure(cid, Failure(
            message, committed=bool(rec.coordinator.granted)))
        if decision is None:
            return False
        if isinstance(decision, GiveUp):
            self._stats.finished(caller_of_attempt(cid), False, now)
            self.leases.finish(caller_of_attempt(cid))
            self._ended(caller_of_attempt(cid))
            self._causal_calls.worker_died(rec, decision.message, now,
                                           status=decision.status)
            return True
        # not granted: every attempt is released and fenced before the call runs again, so
        # nothing the lost attempt did can commit (hydrocache/DESIGN.md, "Fencing")
        self._causal_calls.stop(rec, now)
        return self._carry_out(decision, cid, rec.call.response_address, message, now)

    def exception(self, done: pb.CallDone, now: float) -> None:
        error = done.retry
        decision = self.retries.on_failure(error.request_id, Failure(
            error.message, system=False, type_names=frozenset(done.exception_types),
            status=error.status))
        if decision is None or isinstance(decision, GiveUp):
            if isinstance(decision, GiveUp):
                error.message, error.attempts = decision.message, decision.attempts
            self._stats.finished(caller_of_attempt(error.request_id), False, now)
            self.leases.finish(caller_of_attempt(error.request_id))
            self._ended(caller_of_attempt(error.request_id))
            self._send(done.response_address, "result", error)
            return
        self._carry_out(decision, error.request_id, done.response_address, error.message, now)

    def _carry_out(self, decision: Any, call_id: str, response_address: str, why: str,
                   now: float) -> bool:
        if decision is None:
            return False
        caller = caller_of_attempt(call_id)
        if isinstance(decision, GiveUp):
            self._stats.finished(caller, False, now)
            self.leases.finish(caller)
            self._ended(caller)
            self._send(response_address, "result", pb.CallResult(
                request_id=caller, status=decision.status, message=decision.message,
                attempts=decision.attempts))
            return True
        t = self.retries.tracked(caller)
        call = pb.Call()
        call.CopyFrom(t.payload[0])
        call.request_id = decision.attempt_id
        call.timeout = max(t.deadline - DEADLINE_SLACK - now, 0.001)
        log.info("call %s runs again (attempt %d, max_retries=%d): %s", caller,
                 decision.attempt, t.policy.max_retries, why)
        if self._can_place():
            self._start(call, *t.payload[1])
        else:
            self._held[caller] = (call, t)
        return True

    # ---- leases ----
    def lease(self, payload: bytes, now: float) -> None:
        lease = pb.ClientLease.FromString(payload)
        if lease.ttl > 0:
            self.leases.renew(lease.client, lease.ttl, now)
            return
        calls = self.leases.leave(lease.client)
        if calls:
            log.info("client %s left: cancelling its %d call(s)", lease.client, len(calls))
        for call_id in calls:
            self._cancel(call_id)

    def credit(self, seconds: float) -> None:
        self.leases.credit(seconds)

    def tick(self, now: float) -> None:
        for client, calls in self.leases.expire(now):
            log.warning("client %s stopped renewing its lease: cancelling its %d call(s)",
                        client, len(calls))
            for call_id in calls:
                self._cancel(call_id)
        if self._held:
            for caller, (call, t) in list(self._held.items()):
                if self._can_place():
                    del self._held[caller]
                    self._start(call, *t.payload[1])
                elif now > t.deadline - DEADLINE_SLACK:
                    del self._held[caller]
                    self.retries.finish(caller)
                    self._ended(caller)
                    self._stats.finished(caller, False, now)
                    self._send(call.response_address, "result", pb.CallResult(
                        request_id=caller, status=pb.WORKER_DIED, attempts=t.attempt,
                        message=(f"{t.history[-1] if t.history else caller}; no live worker "
                                 f"took its retry (attempt {t.attempt}) before the call's "
                                 f"deadline")))
        self.retries.expire(now)
        if self.values:
            gone = self.values.expire(now)
            if gone:
                self._delete(gone)

    def pending(self) -> List[str]:
        """Callers whose retry waits for a live worker."""
        return sorted(self._held)
