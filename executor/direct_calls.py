"""Direct calls at the worker: calls a client sends straight to the worker under a worker
lease, admitted by the pure `executor/leased.py`, run as the scheduler's schedules are.

Contract (mixed into `executor.worker.Worker`):
- `worker_lease` (from the cluster: a scheduler) grants, renews or revokes a lease
  (`LeaseAdmission.told`); a grant carries the schedules of the target's sources, built by
  the scheduler.
- `direct` (a `Call` naming `lease_id`, from a client key, or from anyone on a plain
  cluster) runs only if `LeaseAdmission.admit` admits it: the lease is live, the sender's
  role is the lease's client, a slot is free. The call supplies only its id, its arguments
  per function, its answer address, deadline, time limit and session; everything else (the
  functions, versions, where results go between them) is the scheduler's schedule, so a
  client cannot make the worker run another function or send triggers elsewhere. A call
  that is not admitted gets a `result` with status LEASE_REFUSED naming the worker and why
  (it did not run); one that names functions outside the lease's target, passes `Future`s,
  asks for an `output_key` or causal consistency gets INVALID_ARGUMENTS (those take the
  scheduler's path; `Client` never sends them direct).
- From a client key a worker takes only `direct`; any other kind is dropped and logged.
- A direct call's end frees its slot (`LeaseAdmission.finished`, from the worker's
  `done` and `abort` paths); the worker sends the scheduler no `done` for it: its client
  reports it, batched, with its lease renewals.
"""
from __future__ import annotations

import logging
import time
from typing import Any, List

from google.protobuf.message import DecodeError

from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import FrameError, parse

from .leased import LeaseAdmission

__all__ = ["DirectCalls", "CLIENT_KINDS"]

log = logging.getLogger("cloudburst.worker")

CLIENT_KINDS = frozenset({"direct"})     # what a client key may send a worker


class DirectCalls:
    """Direct calls' glue; mixed into the worker (module contract)."""

    leased: LeaseAdmission

    def _init_direct_calls(self) -> None:
        self.leased = LeaseAdmission()

    def _on_worker_lease(self, m: pb.WorkerLease) -> None:
        self.leased.told(m.lease_id, m.client, m.slots, m.ttl, time.monotonic(),
                         list(m.templates) if m.templates else None, m.revoked, m.reason)

    def _from_client(self, data: bytes, role: str) -> None:
        """A frame from a client key: only a direct call is taken."""
        try:
            kind, payload = parse(data)
            if kind not in CLIENT_KINDS:
                raise FrameError(f"a worker takes only {sorted(CLIENT_KINDS)} from a client "
                                 f"key, not {kind!r}")
            call = pb.Call.FromString(payload)
        except (FrameError, DecodeError) as e:
            log.warning("dropped a message from client %s: %s", role, e)
            return
        self._on_direct(call, role)

    def _on_direct_unkeyed(self, call: pb.Call) -> None:
        """A direct call that reached the dispatch table: from a plain socket (role "") or
        from the cluster's key."""
        self._on_direct(call, "cluster" if self.credentials is not None else "")

    def _on_direct(self, call: pb.Call, role: str) -> None:
        now = time.monotonic()
        why, templates = self.leased.admit(call.lease_id, role, call.request_id,
                                           now + max(0.0, call.timeout), now)
        if why is not None:
            return self._refuse_direct(call, pb.LEASE_REFUSED, why)
        problem = _not_direct(call, templates)
        if problem:
            self.leased.finished(call.request_id)
            return self._refuse_direct(call, pb.INVALID_ARGUMENTS, problem)
        for template in templates:
            self._on_schedule(_schedule_of(call, template))

    def _refuse_direct(self, call: pb.Call, status: int, why: str) -> None:
        log.info("refused direct call %s: %s", call.request_id, why)
        if call.response_address:
            self._push.send(call.response_address, "result", pb.CallResult(
                request_id=call.request_id, status=status,
                message=f"worker {self.worker_id} refused direct call {call.request_id}: "
                        f"{why}"))


def _functions(templates: List[pb.Schedule]) -> set:
    names = set()
    for t in templates:
        names.add(t.function)
        names.update(f.function for f in t.forward)
    return names


def _not_direct(call: pb.Call, templates: List[pb.Schedule]) -> str:
    """Why `call` cannot run as a direct call ("" if it can)."""
    if call.timeout <= 0:
        return "a direct call needs a deadline (Call.timeout)"
    if call.output_key or call.consistency != pb.LWW or call.HasField("actor"):
        return "calls with an output_key, causal calls and actor calls take the scheduler's path"
    foreign = sorted(set(call.args) - _functions(templates))
    if foreign:
        return f"arguments for {foreign}, which the lease's target does not have"
    for arglist in call.args.values():
        if any(a.WhichOneof("kind") == "call" for a in
               list(arglist.args) + list(arglist.kwargs.values())):
            return "Future arguments take the scheduler's path"
    return ""


def _schedule_of(call: pb.Call, template: pb.Schedule) -> pb.Schedule:
    """The scheduler's schedule of one source, filled with the call's own fields."""
    s = pb.Schedule()
    s.CopyFrom(template)
    for one in [s, *s.forward]:
        one.call_id = call.request_id
        one.response_address = call.response_address
        one.time_limit = call.time_limit
        if one.function in call.args:
            one.args.CopyFrom(call.args[one.function])
    s.timeout = call.timeout
    if call.HasField("session"):
        s.session.CopyFrom(call.session)
    return s
