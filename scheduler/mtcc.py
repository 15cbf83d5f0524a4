"""Each MTCC protocol's control flow at the scheduler (dissertation 4.3.1-4.3.6), pure.

Contract: a `Flow` is the protocol-specific part of one causal call; the shared state and
mechanics (attempts, cache request rounds, the retry budget, failing, releasing) live on the
`scheduler.causal.CausalCall` it is handed. Every step returns actions
(`scheduler.causal_records`) and does no I/O:
- `start(call, now)`: the call begins;
- `retry(call, abort, now)`: an attempt aborted and the budget allows another (the
  coordinator has already stopped the attempt, released its temporary versions, counted it
  and learnt the keys the abort named);
- `resume(call, then, pieces, now)`: every reply of a round of cache requests is in; `then`
  is the round's continuation, one of the small records below, and says what comes next.
`flow_for(protocol, call_id)` picks the flow a call asked for (anything unknown runs HB).

Continuations: `ConSnapshotTaken(attempt_id, reuse)` (CON's CAUSAL_SNAPSHOT replies are in),
`ConFetched(attempt_id, snapshot_attempt, reuse)` (its CAUSAL_FETCHes are acknowledged),
`HbSnapshotTaken()` (HB's "#s" snapshot is complete).
HB's snapshot round is eager (taken at the start, as written) or lazy (taken only when the
OPT attempt aborts); `scheduler.hb_policy.SnapshotPolicy` chooses per DAG, from how often
OPT aborted lately, and `HbFlow.opt_aborted` is what it learns from each call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Union

from hydro_proto import cloudburst_pb2 as pb

from .causal_records import Action, AttemptState, Pieces

if TYPE_CHECKING:
    from .causal import CausalCall

__all__ = ["Flow", "CtFlow", "OptFlow", "ConFlow", "HbFlow", "flow_for", "Continuation",
           "ConSnapshotTaken", "ConFetched", "HbSnapshotTaken"]


# ---- continuations: what follows a round of cache requests ----
@dataclass(frozen=True)
class ConSnapshotTaken:
    """CON: every CAUSAL_SNAPSHOT reply for `attempt_id` is in; next, Algorithm 10's union
    and CAUSAL_FETCH of each function's fetch set."""

    attempt_id: str
    reuse: str = ""              # HB: the OPT attempt whose results CON may reuse


@dataclass(frozen=True)
class ConFetched:
    """CON: every CAUSAL_FETCH is acknowledged; next, `attempt_id` starts as CON on the
    snapshot the caches hold under `snapshot_attempt`."""

    attempt_id: str
    snapshot_attempt: str
    reuse: str = ""


@dataclass(frozen=True)
class HbSnapshotTaken:
    """HB: the snapshot under "#s" is complete; next, the simulation of OPT on it."""


Continuation = Union[ConSnapshotTaken, ConFetched, HbSnapshotTaken]


# ---- flows ----
class Flow:
    """One protocol's control flow; see the module contract."""

    protocol: int = -1

    def start(self, call: "CausalCall", now: float) -> List[Action]:
        raise NotImplementedError

    def retry(self, call: "CausalCall", abort: pb.CausalAbort, now: float) -> List[Action]:
        raise NotImplementedError

    def resume(self, call: "CausalCall", then: Continuation, pieces: Pieces,
               now: float) -> List[Action]:
        raise AssertionError(f"{type(self).__name__} has no step for {then!r}")

    def held_snapshots(self) -> List[str]:
        """Snapshot ids (besides the attempts') whose temporary versions the caches hold
        for this call: released with the attempts when the call ends."""
        return []


class CtFlow(Flow):
    """CT (4.3.1): every function on one node (the caller placed it so); the attempt's own
    id names its snapshot, which the node's cache builds on the first CAUSAL_READ. An abort
    (a key read outside the snapshot) starts a fresh attempt with a fresh snapshot."""

    protocol = pb.CT

    def start(self, call: "CausalCall", now: float) -> List[Action]:
        aid = call.new_attempt()
        return call.start_attempt(aid, pb.CT, now, snapshot_attempt=aid)

    def retry(self, call: "CausalCall", abort: pb.CausalAbort, now: float) -> List[Action]:
        return self.start(call, now)


class OptFlow(Flow):
    """OPT (4.3.3): start at once; each function validates what it binds against its
    upstreams' reads. An abort starts attempt n+1; the budget is the coordinator's
    (`CausalCall.give_up`): past `max_retries` aborts the caller gets ABORTED naming the last
    reason, and no further attempt starts."""

    protocol = pb.OPT

    def start(self, call: "CausalCall", now: float) -> List[Action]:
        return call.start_attempt(call.new_attempt(), pb.OPT, now)

    def retry(self, call: "CausalCall", abort: pb.CausalAbort, now: float) -> List[Action]:
        return self.start(call, now)


class ConFlow(Flow):
    """CON (4.3.4, Algorithm 10): CAUSAL_SNAPSHOT to every function's cache, the union of
    the pieces (`engine.distributed`), CAUSAL_FETCH of each function's fetch set, and only
    when every fetch is acknowledged the schedules (snapshot = the attempt's id). A retry
    builds a fresh snapshot, which covers any keys the abort named."""

    protocol = pb.CON

    def start(self, call: "CausalCall", now: float) -> List[Action]:
        return self.begin(call, now)

    def retry(self, call: "CausalCall", abort: pb.CausalAbort, now: float) -> List[Action]:
        return self.begin(call, now)

    def begin(self, call: "CausalCall", now: float, reuse: str = "") -> List[Action]:
        """snapshot -> union -> fetch -> start, for a new attempt."""
        aid = call.new_attempt()
        return call.snapshot_round(aid, "CON snapshot construction", now,
                                   then=ConSnapshotTaken(aid, reuse))

    def resume(self, call: "CausalCall", then: Continuation, pieces: Pieces,
               now: float) -> List[Action]:
        if isinstance(then, ConSnapshotTaken):          # union, then fetch where needed
            fetches = call.engine.distributed(pieces)
            return call.fetch_round(then.attempt_id, "CON snapshot fetch", fetches, now,
                                    then=ConFetched(then.attempt_id, then.attempt_id,
                                                    then.reuse))
        if isinstance(then, ConFetched):                # the snapshot is in place: run
            return call.start_attempt(then.attempt_id, pb.CON, now,
                                      snapshot_attempt=then.snapshot_attempt, reuse=then.reuse)
        return super().resume(call, then, pieces, now)


class HbFlow(ConFlow):
    """HB (4.3.5): attempt 0 runs as OPT (snapshot_attempt "#s") while CAUSAL_SNAPSHOT goes
    to every cache under "#s". With every piece in, `engine.simulate` runs OPT on them (each
    function's own keys, which is what OPT binds):
    - no abort: prefetch what OPT will fetch (under "#s", nothing waits for it);
    - abort: early abort of the OPT attempt (it counts against the budget), then CON over
      the same pieces: fetch under "#s", then a CON attempt reusing the OPT attempt's
      results whose read versions and inputs match.
    An OPT attempt that aborts by itself waits for the snapshot, then runs CON the same way.
    An abort naming new keys (or an abort of HB's CON attempt) drops the "#s" snapshot and
    runs CON from a fresh snapshot that covers them. Only the attempt the coordinator grants
    the call's commit to writes and answers (`CausalCall.grant`): OPT and CON never both
    commit.

    Lazy (`eager=False`): OPT alone at first, with no snapshot round, simulation or
    prefetch; when OPT aborts, CON from a fresh snapshot round reusing the OPT attempt's
    results. What the caller gets is the same in both modes (OPT's validation or CON's
    complete snapshot); only where the cost falls differs."""

    protocol = pb.HB

    def __init__(self, call_id: str, eager: bool = True) -> None:
        self.snapshot_id = f"{call_id}#s"
        self.eager = eager
        self.opt = ""                           # the OPT attempt
        self.pieces: Optional[Pieces] = None    # the "#s" snapshot, once complete
        self.waiting = False                    # OPT aborted before the snapshot was in
        self.opt_aborted = False                # the OPT attempt aborted (or early-aborted)
        self._started = False

    def held_snapshots(self) -> List[str]:
        return [self.snapshot_id] if self._started else []

    def start(self, call: "CausalCall", now: float) -> List[Action]:
        self.opt = call.new_attempt()
        if not self.eager:                      # OPT alone; a snapshot only if it aborts
            return call.start_attempt(self.opt, pb.OPT, now)
        # OPT at once, and the snapshot for the simulation at the same moment
        self._started = True
        out = call.start_attempt(self.opt, pb.OPT, now, snapshot_attempt=self.snapshot_id)
        return out + call.snapshot_round(self.snapshot_id, "HB snapshot for the OPT simulation",
                                         now, then=HbSnapshotTaken())

    def retry(self, call: "CausalCall", abort: pb.CausalAbort, now: float) -> List[Action]:
        if abort.attempt_id == self.opt:
            self.opt_aborted = True
        if self.eager and abort.attempt_id == self.opt and not any(abort.new_keys):
            if self.pieces is not None:
                return self._con_on_snapshot(call, now)
            self.waiting = True                 # the snapshot round is still out
            return []
        # lazy, new keys, or HB's CON attempt aborted: a fresh snapshot (covering them)
        call.cancel_rounds()
        self.pieces = None
        self.waiting = False
        return self.begin(call, now, reuse=self.opt)

    def resume(self, call: "CausalCall", then: Continuation, pieces: Pieces,
               now: float) -> List[Action]:
        if isinstance(then, HbSnapshotTaken):
            return self._simulate(call, pieces, now)
        return super().resume(call, then, pieces, now)

    def _simulate(self, call: "CausalCall", pieces: Pieces, now: float) -> List[Action]:
        self.pieces = pieces
        opt = call.attempts.get(self.opt)
        if self.waiting or opt is None or opt.state is AttemptState.ABORTED:
            self.waiting = False
            return self._con_on_snapshot(call, now)
        if opt.state is not AttemptState.RUNNING:
            return []
        own = {fn: [p for p in ps if p.local.key in call.keys.get(fn, ())]
               for fn, ps in pieces.items()}   # OPT binds only the function's own keys
        sim = call.engine.simulate(call.order, call.upstreams, own)
        if not sim.abort:
            return call.prefetch(self.snapshot_id, "HB prefetch", sim.fetches, now)
        # early abort: OPT would abort; stop it and run CON on the snapshot we have
        self.opt_aborted = True
        out = call.give_up(self.opt, f"HB simulation: {sim.reason or 'OPT would abort'}")
        if call.finished:                       # that was the last abort the budget allowed
            return out
        return out + self._con_on_snapshot(call, now)

    def _con_on_snapshot(self, call: "CausalCall", now: float) -> List[Action]:
        """Algorithm 10 over the "#s" pieces, fetch under "#s", then CON reusing OPT."""
        aid = call.new_attempt()
        fetches = call.engine.distributed(self.pieces or {})
        return call.fetch_round(self.snapshot_id, "HB CON snapshot fetch", fetches, now,
                                then=ConFetched(aid, self.snapshot_id, self.opt))


def flow_for(protocol: int, call_id: str, hb_eager: bool = True) -> Flow:
    """The flow of `protocol` for call `call_id` (HB for anything else; `hb_eager`: HB takes
    its snapshot round at the start)."""
    if protocol == pb.CT:
        return CtFlow()
    if protocol == pb.OPT:
        return OptFlow()
    if protocol == pb.CON:
        return ConFlow()
    return HbFlow(call_id, eager=hb_eager)
