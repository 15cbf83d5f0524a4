"""The records a causal call's coordinator exchanges and keeps (pure data, no behaviour).

Contract:
- Actions, returned in order by every `scheduler.causal.CausalCall` event for the scheduler's
  loop to carry out: `StartAttempt(attempt_id, plan, timeout)`, `CacheSend(address, request)`,
  `HeldRelease(address, attempt_ids, timeout)`, `AbortAttempt(attempt_id)`,
  `Fail(status, message, stage)`, `Finished()` (always last).
- `Attempt(protocol, state)`: one attempt of a call; `state` is an `AttemptState`.
- `Round(op, attempt_id, stage, then)`: the cache requests of one coordination stage still
  awaited (`pending`: request id -> `Awaited(function, cache)`), the snapshot pieces received
  so far, and the continuation (`scheduler.mtcc`) that runs once every reply is in.
- `Waiting(stage, cache, op)`: one reply a call still waits for (what a timeout names).
- `SimResult(abort, reason, fetches)`: HB's simulation of OPT over a snapshot.
- `Pieces` (function -> the SnapshotPieces its cache returned) and `FetchSets`
  (function -> the versions its cache must fetch) are the shapes Algorithm 10 works on.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, NamedTuple, Tuple, Union

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["StartAttempt", "CacheSend", "HeldRelease", "AbortAttempt", "Fail", "Finished", "Action",
           "Attempt", "AttemptState", "Awaited", "Round", "Waiting", "SimResult", "Pieces",
           "FetchSets"]

Pieces = Dict[str, List[pb.SnapshotPiece]]
FetchSets = Dict[str, List[pb.KeyVersion]]


# ---- actions ----
@dataclass
class StartAttempt:
    """Send the call's schedules with `Schedule.call_id = attempt_id` and
    `Schedule.causal = plan`, giving the attempt `timeout` seconds (and track its load)."""

    attempt_id: str
    plan: pb.CausalPlan
    timeout: float


@dataclass
class CacheSend:
    """Send `request` to the node cache at `address`; a request with a `response_address`
    expects a `cache_reply` carrying its `request_id`."""

    address: str
    request: pb.CacheRequest


@dataclass
class HeldRelease:
    """Release (and fence) `attempt_ids` at the node cache at `address` for `timeout`
    seconds more, when convenient: with the next commit grant answered to that cache, or
    within a short delay (`scheduler.release_batch`). Only for a call whose commit was
    granted: nothing reads those attempts' temporary versions any more."""

    address: str
    attempt_ids: List[str]
    timeout: float


@dataclass
class AbortAttempt:
    """Tell the attempt's workers to `abort` (and drop its load)."""

    attempt_id: str


@dataclass
class Fail:
    """Answer the caller with `status` (and the call's CausalStats)."""

    status: int
    message: str
    stage: str = ""


@dataclass
class Finished:
    """The call needs nothing more: forget it."""


Action = Union[StartAttempt, CacheSend, HeldRelease, AbortAttempt, Fail, Finished]


# ---- what the coordinator keeps ----
class AttemptState(enum.Enum):
    RUNNING = "running"
    ABORTED = "aborted"     # by its own causal_abort, HB's early abort, or the call failing
    DONE = "done"


@dataclass
class Attempt:
    protocol: int                      # the protocol it runs (HB runs OPT, then CON)
    state: AttemptState = AttemptState.RUNNING


class Awaited(NamedTuple):
    """A cache request whose reply a round waits for."""

    function: str                      # the (first) function whose cache it went to
    cache: str                         # that cache's address
    # a snapshot request standing for several functions on one cache: each function's share
    # of the reply, by key (empty: the whole reply is `function`'s)
    shares: Tuple[Tuple[str, FrozenSet[str]], ...] = ()


class Waiting(NamedTuple):
    """A reply still awaited: the protocol stage, the cache, and the operation."""

    stage: str
    cache: str
    op: str


@dataclass
class Round:
    """Outstanding cache requests of one coordination stage."""

    op: int                            # pb.CAUSAL_SNAPSHOT | pb.CAUSAL_FETCH
    attempt_id: str                    # the attempt id the caches hold the snapshot under
    stage: str                         # e.g. "CON snapshot construction"
    then: Any                          # a scheduler.mtcc continuation: what follows the round
    pending: Dict[str, Awaited] = field(default_factory=dict)   # request id -> Awaited
    pieces: Pieces = field(default_factory=dict)

    @property
    def op_name(self) -> str:
        return pb.CacheOp.Name(self.op)


@dataclass
class SimResult:
    """What HB's simulation of OPT says: whether OPT aborts (and why), and per function the
    versions OPT's validation will fetch (prefetched under the snapshot attempt)."""

    abort: bool
    reason: str = ""
    fetches: FetchSets = field(default_factory=dict)
