"""One worker lease as a client holds it: its record, when it lapses and is renewed, the
usage it reports, and what becomes of its calls when its worker dies.

Plain code: no sockets, no clocks (`now` is passed in), no locks (its one caller,
`cloudburst/direct.py`'s `DirectPath`, holds its own lock around every use).

Contract:
- `Held`: a granted lease (`Held.granted(message, now)` from a `WorkerLease`): its worker,
  its scheduler, `slots`, `ttl`, when it `expires`, the retry budget of its target's calls
  (`max_retries`), the calls in flight under it (request id -> when sent, oldest first),
  the usage not yet reported, and the worker's call-link address ("": ZeroMQ only).
- `until(held)`: until when it is used: its end less `MARGIN` (calls in flight to it would
  arrive after it); one whose renewal is unanswered is used one ttl more (a busy scheduler
  reads renewals late and keeps the lease meanwhile: `scheduler/worker_leases.py`,
  `expire`, or says it is gone).
- `next_sweep(held)`: when it next needs looking at: when it lapses, or before that when
  it falls due for renewal unless its renewal was asked already.
- `renewal_due(held, now)`: a lease in use is renewed once less than half its ttl is left
  (one not used lapses).
- `renewal(held)` / `release(held)`: the `LeaseRequest` renewing / giving back the lease,
  with the usage not reported yet (at most `MAX_LATENCIES` latencies: bounded);
  `record(held, ok, took)` counts one answered call.
- `after_death(call, held, reason)`: a call in flight when the lease was revoked because
  its worker died runs again through the scheduler while its retry budget (the call's own
  `max_retries`, else the target's, which the grant carries) lasts: the call is readied for
  that and None returned; else the WORKER_DIED result to deliver.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["Held", "Key", "MARGIN", "MAX_LATENCIES", "until", "next_sweep", "renewal_due",
           "renewal", "release", "record", "after_death"]

MARGIN = 0.2             # seconds before its end a lease is no longer used (in flight to it)
MAX_LATENCIES = 64       # latencies reported per lease and report (bounded)

Key = Tuple[str, bool]       # a target: (name, whether a DAG)


@dataclass
class Held:
    lease_id: str
    worker_id: str
    worker_address: str
    scheduler: str
    slots: int
    ttl: float
    expires: float
    max_retries: int
    in_flight: Dict[str, float] = field(default_factory=dict)   # id -> sent, oldest first
    calls: int = 0
    failed: int = 0
    latencies: List[float] = field(default_factory=list)
    renewing: bool = False
    grown: float = float("-inf")     # when it was last renewed early to grow (`direct._grow`)
    grow_wait: float = 0.0           # seconds before it may be again (`pacing.next_grow_wait`)
    link_address: str = ""           # the worker's call links ("": ZeroMQ only)

    @classmethod
    def granted(cls, m: pb.WorkerLease, now: float) -> "Held":
        return cls(m.lease_id, m.worker_id, m.worker_address, m.scheduler_address,
                   max(1, m.slots), m.ttl, now + m.ttl, m.max_retries,
                   link_address=m.link_address)


def until(held: Held) -> float:
    """Until when a lease is used. One whose renewal is unanswered waits one more ttl: a
    scheduler that is behind reads the renewal late and keeps the lease meanwhile
    (`scheduler/worker_leases.py`, `expire`), or says it is gone."""
    return held.expires - MARGIN + (held.ttl if held.renewing else 0.0)


def next_sweep(held: Held) -> float:
    """When a lease next needs looking at: when it lapses (`until`), or before that when it
    falls due for renewal, unless its renewal was asked already (then its answer, lease
    news, is what comes next). A serial caller's lease, past half its ttl while the renewal
    is on its way, would otherwise be swept at every flush until the answer came."""
    return until(held) if held.renewing else min(until(held), held.expires - held.ttl / 2)


def renewal_due(held: Held, now: float) -> bool:
    return not held.renewing and held.expires - now < held.ttl / 2


def _report(held: Held, req: pb.LeaseRequest) -> None:
    if held.calls:
        req.usage.add(lease_id=held.lease_id, calls=held.calls, failed=held.failed,
                      latencies=held.latencies[:MAX_LATENCIES])
        held.calls, held.failed, held.latencies = 0, 0, []


def renewal(held: Held) -> pb.LeaseRequest:
    req = pb.LeaseRequest(renew=[held.lease_id])
    _report(held, req)
    return req


def release(held: Held) -> pb.LeaseRequest:
    req = pb.LeaseRequest(release=[held.lease_id])
    _report(held, req)
    return req


def record(held: Held, ok: bool, took: float) -> None:
    held.calls += 1
    held.failed += not ok
    if len(held.latencies) < MAX_LATENCIES:
        held.latencies.append(took)


def after_death(call: pb.Call, held: Held, reason: str) -> Optional[pb.CallResult]:
    budget = call.retry.max_retries if call.HasField("retry") and \
        call.retry.has_max_retries else held.max_retries
    if budget > 0:
        call.ClearField("lease_id")
        call.retry.max_retries, call.retry.has_max_retries = budget - 1, True
        return None
    return pb.CallResult(
        request_id=call.request_id, status=pb.WORKER_DIED, attempts=1,
        message=f"{call.dag or call.function}: {reason} while the call ran there "
                f"(a direct call under a worker lease); its retries are spent")
