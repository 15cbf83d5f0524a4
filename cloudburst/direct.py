"""The client's direct call path: worker leases, and calls sent straight to a leased worker.

A client made with `Client(direct=True)` asks its scheduler for a worker lease on a target
(a function, or a DAG) the first time it calls it. Once granted, the target's calls go
straight to the leased worker, `slots` at a time: one message to the worker and the result
back, instead of client -> scheduler -> worker -> client plus the worker's `done`. The client
tells the scheduler afterwards, batched with the lease's renewal, how many it made.

Contract: `DirectPath(owner, context, credentials)` belongs to one client; `owner` is the
client's `LeaseOwner` side (sending to a scheduler, delivering an answer to a waiting call).
- `eligible(call, stored, inputs)`: what may go direct: plain (LWW) calls of a function or a
  DAG without an `output_key`, `Future` arguments, arguments stored by reference, their own
  exception retries, and that are not actor calls. Everything else takes the scheduler's
  path, as does every call while no lease with a free slot is held.
- `send(call)` sends `call` direct and returns the lease's scheduler if a live lease of its
  target has a free slot (the call then counts against it until its answer arrives); else it
  records a request for a lease (once per target at a time, again `RETRY_ASK` s after a
  refusal) and returns None: the caller sends the call through the scheduler, then
  `flush`es, so the scheduler places the call before it leases (the call's warm worker,
  with its slot taken, rather than a lease that makes the call wait for its own worker).
- `on_lease(message)` and `on_result(result)` take what arrives on the client's answer
  socket (called with the client's answer lock held: they only record). `on_result` returns
  the result to deliver, or None when it is the path's own business: a call the worker
  refused (LEASE_REFUSED: it did not run) is sent again through the scheduler. A lease
  revoked because its worker died makes its calls in flight run again through the scheduler
  while their retry budget (the call's own `max_retries`, else the target's, which the grant
  carries) lasts, else fail with WORKER_DIED.
- `flush()` does what those recorded (resends, failures, renewals and usage reports), outside
  the lock. A lease in use (a call sent under it, or calls in flight: `flush` runs while the
  client waits for answers) is renewed once less than half its ttl is left; one not used
  lapses.
- `held()`: the leases held now (target, worker, slots, calls in flight), for
  `Client.worker_leases`.
- `lease_of(rid)`: (lease id, worker id) of a direct call in flight, else None (cancels go to
  the scheduler with the lease id, which stops the call on its worker; `where` names the
  worker).
- `release_all()` gives every lease back (the client changed the registry: a lease runs the
  function versions it was granted for); `close()` too, and closes the path's sockets.
  Usage not yet reported goes with the release.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol, Sequence, Set, Tuple

import zmq

from hydro_proto import cloudburst_pb2 as pb

from faas.errors import CloudburstError
from runtime.sockets import PushCache

__all__ = ["DirectPath", "LeaseOwner", "RETRY_ASK"]

log = logging.getLogger("cloudburst.client")

RETRY_ASK = 1.0          # seconds before a target whose lease was refused is asked for again
MARGIN = 0.2             # seconds before its end a lease is no longer used (in flight to it)
MAX_LATENCIES = 64       # latencies reported per lease and report (bounded)


class LeaseOwner(Protocol):
    """What the direct path needs from its client."""

    response_address: str

    def resend_call(self, call: pb.Call) -> str:
        """Send a call through the scheduler (it did not run direct); its scheduler."""

    def ask_lease(self, request: pb.LeaseRequest, to: Optional[str] = None) -> str:
        """Send a `lease_worker` request (to scheduler `to`, or the current one)."""

    def deliver(self, result: pb.CallResult) -> None: ...


@dataclass
class _Held:
    lease_id: str
    worker_id: str
    worker_address: str
    scheduler: str
    slots: int
    ttl: float
    expires: float
    max_retries: int
    in_flight: Set[str] = field(default_factory=set)
    calls: int = 0
    failed: int = 0
    latencies: List[float] = field(default_factory=list)
    renewing: bool = False


class DirectPath:
    """A client's worker leases and direct calls; see the module contract."""

    def __init__(self, owner: LeaseOwner, context: zmq.Context, credentials: Any) -> None:
        self._owner = owner
        self._push = PushCache(context, auth=credentials)
        self._lock = threading.Lock()
        self._held: Dict[Tuple[str, bool], _Held] = {}
        self._asked: Dict[Tuple[str, bool], float] = {}      # target -> when asked/refused
        # request id -> (target, the call, when sent, its worker)
        self._calls: Dict[str, Tuple[Tuple[str, bool], pb.Call, float, str]] = {}
        self._resend: List[pb.Call] = []
        self._fail: List[pb.CallResult] = []
        self._ask: List[Tuple[pb.LeaseRequest, Optional[str]]] = []   # and to which scheduler
        self._push_lock = threading.Lock()     # a client's threads share the sockets
        self._gone: List[_Held] = []                         # released: usage to report

    # ---- sending ----
    @staticmethod
    def eligible(call: pb.Call, stored: Sequence[str], inputs: Sequence[Any]) -> bool:
        return (call.consistency == pb.LWW and not call.output_key and not stored
                and not inputs and not call.HasField("actor")
                and not (call.HasField("retry") and call.retry.has_exceptions))

    def send(self, call: pb.Call) -> Optional[str]:
        key = (call.dag or call.function, bool(call.dag))
        now = time.monotonic()
        with self._lock:
            held = self._held.get(key)
            if held is not None and held.expires - MARGIN <= now:
                del self._held[key]               # lapsed: report its usage, ask again
                self._gone.append(held)
                held = None
            if held is None:
                asked = self._asked.get(key)
                if asked is None or now - asked >= RETRY_ASK:
                    self._asked[key] = now
                    self._ask.append((pb.LeaseRequest(target=key[0], dag=key[1]), None))
                free = False
            else:
                free = len(held.in_flight) < held.slots
            if free:
                call.lease_id = held.lease_id
                held.in_flight.add(call.request_id)
                self._calls[call.request_id] = (key, call, now, held.worker_id)
                if not held.renewing and held.expires - now < held.ttl / 2:
                    held.renewing = True
                    self._ask.append((self._renewal(held), held.scheduler))
        sent = False
        if free:
            with self._push_lock:
                sent = self._push.send(held.worker_address, "direct", call)
        if free and not sent:                     # the worker is not reachable: the long way
            with self._lock:
                held.in_flight.discard(call.request_id)
                self._calls.pop(call.request_id, None)
            call.ClearField("lease_id")
        return held.scheduler if sent else None

    def _renewal(self, held: _Held) -> pb.LeaseRequest:
        req = pb.LeaseRequest(renew=[held.lease_id])
        self._report(held, req)
        return req

    @staticmethod
    def _report(held: _Held, req: pb.LeaseRequest) -> None:
        if held.calls:
            req.usage.add(lease_id=held.lease_id, calls=held.calls, failed=held.failed,
                          latencies=held.latencies[:MAX_LATENCIES])
            held.calls, held.failed, held.latencies = 0, 0, []

    # ---- what arrives (the client's answer lock is held: record only) ----
    def on_lease(self, m: pb.WorkerLease) -> None:
        key = (m.target, m.dag)
        now = time.monotonic()
        with self._lock:
            held = self._held.get(key)
            if m.status != pb.OK:                 # refused: the scheduler's path meanwhile
                self._asked[key] = now
                log.info("no worker lease for %s: %s", m.target, m.reason)
                return
            if m.revoked:
                if held is None or held.lease_id != m.lease_id:
                    return
                del self._held[key]
                self._gone.append(held)
                if m.worker_died:
                    self._lost(held, m.reason)
                return
            if held is not None and held.lease_id == m.lease_id:       # renewed
                held.expires, held.renewing = now + m.ttl, False
                held.slots = max(1, m.slots)
                return
            if held is not None:                  # another lease for the target: keep one
                self._gone.append(held)
            self._held[key] = _Held(m.lease_id, m.worker_id, m.worker_address,
                                    m.scheduler_address, max(1, m.slots), m.ttl, now + m.ttl,
                                    m.max_retries)
            if held is not None:
                self._held[key].in_flight = held.in_flight

    def _lost(self, held: _Held, reason: str) -> None:
        for rid in sorted(held.in_flight):
            entry = self._calls.pop(rid, None)
            if entry is None:
                continue
            call = entry[1]
            budget = call.retry.max_retries if call.HasField("retry") and \
                call.retry.has_max_retries else held.max_retries
            if budget > 0:
                call.ClearField("lease_id")
                call.retry.max_retries, call.retry.has_max_retries = budget - 1, True
                self._resend.append(call)
            else:
                self._fail.append(pb.CallResult(
                    request_id=rid, status=pb.WORKER_DIED, attempts=1,
                    message=f"{call.dag or call.function}: {reason} while the call ran there "
                            f"(a direct call under a worker lease); its retries are spent"))
        held.in_flight.clear()

    def on_result(self, result: pb.CallResult) -> Optional[pb.CallResult]:
        rid = result.request_id.split("#", 1)[0]
        with self._lock:
            entry = self._calls.pop(rid, None)
            if entry is None:
                return result
            key, call, sent_at, _ = entry
            held = self._held.get(key)
            if held is not None and held.lease_id == call.lease_id:
                held.in_flight.discard(rid)
            if result.status == pb.LEASE_REFUSED:     # it did not run: the long way
                log.info("%s", result.message)
                if held is not None and held.lease_id == call.lease_id \
                        and "no lease of that id" not in result.message:
                    del self._held[key]               # revoked or expired there
                call.ClearField("lease_id")
                self._resend.append(call)
                return None
            if held is not None and held.lease_id == call.lease_id:
                held.calls += 1
                held.failed += result.status != pb.OK
                if len(held.latencies) < MAX_LATENCIES:
                    held.latencies.append(time.monotonic() - sent_at)
        return result

    def held(self) -> List[Dict[str, Any]]:
        """The leases held now: target, whether a DAG, worker id, slots, calls in flight."""
        with self._lock:
            return [{"target": key[0], "dag": key[1], "worker_id": h.worker_id,
                     "slots": h.slots, "in_flight": len(h.in_flight)}
                    for key, h in sorted(self._held.items())]

    def lease_of(self, rid: str) -> Optional[Tuple[str, str]]:
        with self._lock:
            entry = self._calls.get(rid)
            return None if entry is None else (entry[1].lease_id, entry[3])

    # ---- carrying it out (no lock held) ----
    def flush(self) -> None:
        now = time.monotonic()
        with self._lock:
            for held in self._held.values():       # in use: kept while calls run under it
                if held.in_flight and not held.renewing and \
                        held.expires - now < held.ttl / 2:
                    held.renewing = True
                    self._ask.append((self._renewal(held), held.scheduler))
            if not (self._resend or self._fail or self._ask or self._gone):
                return
            resend, self._resend = self._resend, []
            fail, self._fail = self._fail, []
            ask, self._ask = self._ask, []
            gone, self._gone = self._gone, []
            for held in gone:
                req = pb.LeaseRequest(release=[held.lease_id])
                self._report(held, req)
                ask.append((req, held.scheduler))
        for result in fail:
            self._owner.deliver(result)
        for call in resend:
            try:
                self._owner.resend_call(call)
            except CloudburstError as e:
                self._owner.deliver(pb.CallResult(
                    request_id=call.request_id, status=pb.EXECUTION_ERROR,
                    message=f"{call.dag or call.function}: its direct call could not run "
                            f"and no scheduler took it again: {e}"))
        for req, to in ask:
            req.response_address = self._owner.response_address
            try:
                self._owner.ask_lease(req, to)
            except CloudburstError as e:      # no lease: the scheduler's path serves
                log.debug("lease request not sent: %s", e)

    def release_all(self) -> None:
        """Give every lease back (at the next `flush`): the registry changed."""
        with self._lock:
            self._gone.extend(self._held.values())
            self._held.clear()

    def close(self) -> None:
        with self._lock:
            self._gone.extend(self._held.values())
            self._held.clear()
        try:
            self.flush()
        finally:
            with self._push_lock:
                self._push.close()
