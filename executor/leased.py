"""Worker leases, the worker's side (pure): which direct calls from clients a worker admits.

A client that holds a worker lease (granted by a scheduler: `scheduler/worker_leases.py`)
sends the calls of the lease's target straight to the worker. The worker admits such a call
only within a lease the scheduler told it of; a client cannot forge one (the lease id is
random and only the scheduler, a cluster key, can tell a worker of a lease).

Contract: `LeaseAdmission(max_leases)` is pure state; every method takes `now` (any
monotonic clock); nothing here sends or sleeps.
- `told(lease_id, client, slots, ttl, now, schedules=None, revoked=False)`: the scheduler
  granted (with the sources' `schedules`), renewed (without: the ones it had are kept) or
  revoked a lease. A renewal or grant runs until `now + ttl`. A revocation, like an expiry,
  ends admissions at once; calls already admitted run to their end. At most `max_leases`
  leases are kept: a grant beyond them drops the one that expires first.
- `admit(lease_id, client, call_id, deadline, now)`: `(None, schedules)` if the call is
  admitted (the lease is known and live, it is `client`'s, a slot is free, the call id is
  new), then it counts against the lease's slots until `finished(call_id)` or `deadline`;
  else `(reason, None)`, a sentence naming why (unknown, revoked or expired lease, another
  client's, every slot in use, a repeated call id).
- `finished(call_id)`: the call ended (its result or failure was sent, or it was aborted);
  True if it was a direct call (its slot is free again; the worker owes the scheduler no
  `done` for it: the client reports it).
- `calls_of(lease_id)`: the calls admitted under a lease (revoked or not) that have not
  ended: what a worker cancels when the lease's holder is gone. Readable from another
  thread (the heartbeat thread's control socket).
- `expire(now)`: forget leases past their end and direct calls past their deadline.
- `busy()`: whether any lease is held or any admitted direct call has not ended.
- `cancel(call_id, now)`: the call was cancelled: if admitted, `finished`; if not arrived
  yet (a cancel can overtake its call: they come over different connections), it is
  remembered (bounded: `MAX_CANCELLED`, for 60 s) and `admit` refuses it with
  `CANCELLED`, so it never runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

__all__ = ["LeaseAdmission", "MAX_LEASES", "LATE_GRACE", "CANCELLED"]

MAX_LEASES = 1024        # leases one worker keeps at once
LATE_GRACE = 5.0         # seconds past its deadline a direct call still holds its slot
CANCELLED = "it was cancelled before it arrived"   # `admit`'s reason for a cancelled call
MAX_CANCELLED = 4096     # cancels of direct calls not arrived yet, remembered (bounded)


@dataclass
class _Lease:
    client: str
    slots: int
    expires: float
    schedules: List[Any]
    calls: Set[str] = field(default_factory=set)


class LeaseAdmission:
    """The worker's leases and the direct calls admitted under them (module contract)."""

    def __init__(self, max_leases: int = MAX_LEASES) -> None:
        if max_leases < 1:
            raise ValueError(f"LeaseAdmission: max_leases must be >= 1, not {max_leases!r}")
        self.max_leases = max_leases
        self._leases: Dict[str, _Lease] = {}
        self._revoked: Dict[str, str] = {}          # lease id -> why (bounded like leases)
        self._calls: Dict[str, Tuple[str, float]] = {}   # call id -> (lease id, deadline)
        self._cancelled: Dict[str, float] = {}           # call id -> forgotten after

    def __len__(self) -> int:
        return len(self._leases)

    def busy(self) -> bool:
        """Whether any lease is held or any direct call runs."""
        return bool(self._leases or self._calls)

    def in_flight(self, lease_id: str) -> int:
        lease = self._leases.get(lease_id)
        return len(lease.calls) if lease is not None else \
            sum(1 for lid, _ in self._calls.values() if lid == lease_id)

    def told(self, lease_id: str, client: str, slots: int, ttl: float, now: float,
             schedules: Optional[List[Any]] = None, revoked: bool = False,
             reason: str = "") -> None:
        lease = self._leases.get(lease_id)
        if revoked:
            if lease is not None:
                del self._leases[lease_id]
            self._remember_revoked(lease_id, reason or "the scheduler revoked it")
            return
        if lease_id in self._revoked:
            return                # a renewal overtaken by its revocation: stays revoked
        if lease is not None:
            if lease.client == client:
                lease.expires = max(lease.expires, now + ttl)
                lease.slots = max(1, int(slots))
            return
        if schedules is None:
            return                # a renewal of a lease this worker never had: nothing to run
        if len(self._leases) >= self.max_leases:
            first = min(self._leases, key=lambda lid: self._leases[lid].expires)
            del self._leases[first]
            self._remember_revoked(first, "the worker holds its most leases")
        calls = {cid for cid, (lid, _) in self._calls.items() if lid == lease_id}
        self._leases[lease_id] = _Lease(client, max(1, int(slots)), now + ttl,
                                        list(schedules), calls)

    def _remember_revoked(self, lease_id: str, reason: str) -> None:
        self._revoked[lease_id] = reason
        while len(self._revoked) > self.max_leases:
            self._revoked.pop(next(iter(self._revoked)))

    def admit(self, lease_id: str, client: str, call_id: str, deadline: float,
              now: float) -> Tuple[Optional[str], Optional[List[Any]]]:
        lease = self._leases.get(lease_id)
        if call_id in self._cancelled:
            return CANCELLED, None
        if lease is None:
            why = self._revoked.get(lease_id)
            return (f"its lease was revoked ({why})" if why else
                    "no lease of that id was granted on this worker"), None
        if lease.expires <= now:
            return "its lease expired", None
        if lease.client != client:
            return "the lease belongs to another client", None
        if call_id in self._calls:
            return f"call {call_id} was already admitted", None
        if len(lease.calls) >= lease.slots:
            return f"every slot of the lease is in use ({lease.slots})", None
        lease.calls.add(call_id)
        self._calls[call_id] = (lease_id, deadline)
        return None, lease.schedules

    def calls_of(self, lease_id: str) -> List[str]:
        """The calls admitted under the lease that have not ended (revoked or not). Safe to
        call from another thread than the one changing the state (it copies first)."""
        return sorted(cid for cid, (lid, _) in list(self._calls.items()) if lid == lease_id)

    def finished(self, call_id: str) -> bool:
        entry = self._calls.pop(call_id, None)
        if entry is None:
            return False
        lease = self._leases.get(entry[0])
        if lease is not None:
            lease.calls.discard(call_id)
        return True

    def cancel(self, call_id: str, now: float) -> bool:
        if self.finished(call_id):
            return True
        self._cancelled[call_id] = now + 60.0
        while len(self._cancelled) > MAX_CANCELLED:
            self._cancelled.pop(next(iter(self._cancelled)))
        return False

    def expire(self, now: float) -> None:
        for cid in [cid for cid, until in self._cancelled.items() if until < now]:
            del self._cancelled[cid]
        for lid in [lid for lid, lease in self._leases.items() if lease.expires <= now]:
            del self._leases[lid]
            self._remember_revoked(lid, "it expired")
        for cid in [cid for cid, (_, deadline) in self._calls.items()
                    if deadline + LATE_GRACE < now]:
            self.finished(cid)
