"""The scheduler's side of HydroCache's MTCC protocols (dissertation 4.3.1-4.3.6), pure.

Contract: one `CausalCall` per causal call (Call.consistency == CAUSAL) coordinates its
attempts. It does no I/O and reads no clock: the scheduler's event loop feeds it events
(`start`, `on_cache_reply`, `on_abort`, `on_done`, `tick`, `fail`), each with `now`, and
carries out the actions it returns, in order:
- `StartAttempt(attempt_id, plan, timeout)`: send the call's schedules with
  `Schedule.call_id = attempt_id` and `Schedule.causal = plan` (and track the attempt's load);
- `CacheSend(address, request)`: send a `cache` request to a node cache; a request with a
  `response_address` expects a `cache_reply` carrying its `request_id`;
- `AbortAttempt(attempt_id)`: tell the attempt's workers to `abort` (and drop its load);
- `Fail(status, message, stage)`: answer the caller with that status (its request id);
- `Finished()`: the call needs nothing more; forget it (always the last action).

Attempt ids are `f"{call_id}#{n}"` (n = 0, 1, ...; attempt n follows n aborted attempts, so
`CausalPlan.attempt` is also the abort count); HB's snapshot lives under `f"{call_id}#s"`.
Placement (function -> worker, and so function -> node cache) is fixed for the whole call.

Protocols:
- CT: start at once, every function on one node (the caller placed it so), the snapshot
  under the attempt id (the cache builds it on the first CAUSAL_READ).
- OPT: start at once; a `causal_abort` releases the attempt's temporary versions at every
  cache and starts attempt n+1, at most `max_retries` times, then the caller gets ABORTED
  naming the last reason.
- CON (Algorithm 10): CAUSAL_SNAPSHOT to every function's cache (its referenced keys), the
  union of the pieces (`engine.distributed`), CAUSAL_FETCH of each function's fetch set, and
  only when every fetch is acknowledged the schedules (protocol CON, snapshot = attempt id).
- HB: attempt 0 runs as OPT (snapshot_attempt "#s") while CAUSAL_SNAPSHOT goes to every cache
  under "#s". With every piece in, `engine.simulate` runs OPT on them: no abort -> prefetch
  what OPT will fetch (under "#s", no wait); abort -> early abort of the OPT attempt, then
  CON over the same pieces (fetch under "#s", then attempt 1 as CON with reuse_attempt = the
  OPT attempt). An OPT attempt that aborts by itself waits for the snapshot, then runs CON.
  The first attempt whose `done` arrives finishes the call.
- Unknown read set (4.3.6): a `causal_abort` naming `new_keys` adds them to the DAG's keys
  (and to the function's) for the next attempt; HB/CON then build a fresh snapshot.
- Coordination (snapshot and fetch replies) must finish by `coord_deadline`; past it the
  caller gets TIMEOUT whose stage names the protocol stage and the cache that did not answer.
  A cache answering with an error fails the call with its status (TIMEOUT keeps its stage).
- Whenever the call finishes or fails, CAUSAL_RELEASE goes to every cache of the call for
  every attempt id used (and "#s").

`engine` turns snapshot pieces into plans (default: `HydroEngine`, over hydrocache.protocols).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["CausalCall", "StartAttempt", "CacheSend", "AbortAttempt", "Fail", "Finished",
           "SimResult", "HydroEngine", "topological_order", "PROTOCOL_NAMES"]

PROTOCOL_NAMES = {pb.HB: "HB", pb.CT: "CT", pb.OPT: "OPT", pb.CON: "CON"}

# pieces: function -> the SnapshotPieces its cache returned; fetch sets: function -> KeyVersions
Pieces = Dict[str, List[pb.SnapshotPiece]]
FetchSets = Dict[str, List[pb.KeyVersion]]


@dataclass
class StartAttempt:
    attempt_id: str
    plan: pb.CausalPlan
    timeout: float


@dataclass
class CacheSend:
    address: str
    request: pb.CacheRequest


@dataclass
class AbortAttempt:
    attempt_id: str


@dataclass
class Fail:
    status: int
    message: str
    stage: str = ""


@dataclass
class Finished:
    pass


@dataclass
class SimResult:
    """What HB's simulation of OPT says: whether OPT aborts (and why), and per function the
    versions OPT's validation will fetch (prefetched under the snapshot attempt)."""

    abort: bool
    reason: str = ""
    fetches: FetchSets = field(default_factory=dict)


def topological_order(functions: Sequence[str], upstreams: Mapping[str, Sequence[str]]) -> List[str]:
    """The functions in a topological order (stable: `functions` order among the ready ones)."""
    done: Set[str] = set()
    out: List[str] = []
    while len(out) < len(functions):
        progressed = False
        for f in functions:
            if f not in done and all(u in done for u in upstreams.get(f, ())):
                done.add(f)
                out.append(f)
                progressed = True
        if not progressed:   # a cycle: validated DAGs have none; keep the rest in order
            out.extend(f for f in functions if f not in done)
            break
    return out


class HydroEngine:
    """Algorithm 10 and HB's simulation over `hydrocache.protocols` (imported lazily)."""

    @staticmethod
    def _convert(pieces: Pieces) -> Dict[str, Any]:
        """function -> {key: hydrocache Piece(local Entry, cut VersionSet)}."""
        from hydrocache import protocols, versionset
        out: Dict[str, Any] = {}
        for fn, ps in pieces.items():
            mine = out.setdefault(fn, {})
            for p in ps:
                local = versionset.from_proto([p.local])[p.local.key]
                piece = protocols.Piece(local=local, cut=versionset.from_proto(list(p.cut)))
                if p.local.key in mine:   # two replies for one key: keep their union
                    old = mine[p.local.key]
                    piece = protocols.Piece(
                        local=versionset.union({p.local.key: old.local},
                                               {p.local.key: local})[p.local.key],
                        cut=versionset.union(old.cut, piece.cut))
                mine[p.local.key] = piece
        return out

    @staticmethod
    def _fetch_protos(fetches: Mapping[str, Any]) -> FetchSets:
        from hydrocache import versionset
        return {fn: list(versionset.to_proto(v)) for fn, v in fetches.items() if v}

    def distributed(self, pieces: Pieces) -> FetchSets:
        from hydrocache import protocols
        _, fetches = protocols.distributed_snapshot(self._convert(pieces))
        return self._fetch_protos(fetches)

    def simulate(self, order: Sequence[str], upstreams: Mapping[str, Sequence[str]],
                 pieces: Pieces) -> SimResult:
        from hydrocache import protocols
        r = protocols.simulate_opt(list(order), {f: list(u) for f, u in upstreams.items()},
                                   self._convert(pieces))
        return SimResult(bool(r.abort), r.reason or "", self._fetch_protos(r.fetches))


@dataclass
class _Attempt:
    protocol: int
    state: str = "running"      # running | aborted | done


@dataclass
class _Round:
    """Outstanding cache requests of one coordination stage."""

    kind: str                           # "snapshot" | "fetch"
    attempt_id: str                     # the attempt id the caches hold the snapshot under
    stage: str                          # e.g. "CON snapshot construction"
    op_name: str                        # "CAUSAL_SNAPSHOT" | "CAUSAL_FETCH"
    pending: Dict[str, Tuple[str, str]] = field(default_factory=dict)  # rid -> (fn, cache)
    pieces: Pieces = field(default_factory=dict)
    then: Any = None                    # what to do when every reply is in


class CausalCall:
    """Coordinates one causal call's attempts; see the module contract."""

    def __init__(self, call_id: str, requested: int, functions: Sequence[str],
                 upstreams: Mapping[str, Sequence[str]], keys: Mapping[str, Sequence[str]],
                 caches: Mapping[str, str], reply_address: str, now: float, timeout: float,
                 max_retries: int = 10, engine: Any = None, name: str = "") -> None:
        self.call_id = call_id
        self.name = name or call_id
        self.requested = requested
        self.functions = list(functions)
        self.upstreams = {f: list(upstreams.get(f, ())) for f in self.functions}
        self.order = topological_order(self.functions, self.upstreams)
        self.keys: Dict[str, List[str]] = {f: list(dict.fromkeys(keys.get(f, ())))
                                           for f in self.functions}
        self.dag_keys: List[str] = list(dict.fromkeys(k for f in self.functions
                                                      for k in self.keys[f]))
        self.caches = dict(caches)
        self.refresh_keys: List[str] = []   # keys aborted attempts read too old
        self.reply_address = reply_address
        self.timeout = timeout
        self.deadline = now + timeout
        # coordination must end a little before the caller's own wait does, so the caller
        # hears which stage stalled rather than only that its result did not come
        self.coord_deadline = now + 0.9 * timeout
        self.max_retries = max_retries
        self.engine = engine if engine is not None else HydroEngine()
        self.attempts: Dict[str, _Attempt] = {}
        self.aborts = 0
        self.last_reason = ""
        self.finished = False
        self._next = 0
        self._seq = 0
        self._rounds: List[_Round] = []
        # HB
        self.snapshot_id = f"{call_id}#s"
        self._hb_opt: Optional[str] = None           # the OPT attempt of HB
        self._hb_pieces: Optional[Pieces] = None     # the "#s" snapshot, once complete
        self._hb_wait_snapshot = False               # OPT aborted before the snapshot was in
        self._used_snapshot = False
        self._released: Set[str] = set()

    # ---- queries ----
    def running(self) -> List[str]:
        return [a for a, s in self.attempts.items() if s.state == "running"]

    def current(self) -> Optional[str]:
        """The latest attempt started (for `where`), or None while coordinating."""
        return next(reversed(self.attempts), None) if self.attempts else None

    def waiting_on(self) -> List[Tuple[str, str, str]]:
        """(stage, cache, op) of every reply still awaited."""
        return [(r.stage, cache, r.op_name) for r in self._rounds
                for _, (_, cache) in sorted(r.pending.items())]

    # ---- events ----
    def start(self, now: float) -> List[Any]:
        p = self.requested
        if p == pb.CT:
            aid = self._new_attempt()
            return self._start(aid, pb.CT, now, snapshot_attempt=aid)
        if p == pb.OPT:
            return self._start(self._new_attempt(), pb.OPT, now)
        if p == pb.CON:
            return self._begin_con(now)
        # HB: OPT at once, and the snapshot for the simulation at the same moment
        aid = self._new_attempt()
        self._hb_opt = aid
        self._used_snapshot = True
        out = self._start(aid, pb.OPT, now, snapshot_attempt=self.snapshot_id)
        out += self._snapshot_round(self.snapshot_id, "HB snapshot for the OPT simulation", now,
                                    then=("hb_snapshot",))
        return out

    def on_cache_reply(self, resp: pb.CacheResponse, now: float) -> List[Any]:
        if self.finished:
            return []
        for r in self._rounds:
            if resp.request_id in r.pending:
                break
        else:
            return []   # a reply to a request no longer awaited (prefetch, cancelled round)
        fn, cache = r.pending.pop(resp.request_id)
        if now > self.coord_deadline:
            r.pending[resp.request_id] = (fn, cache)
            return self._coord_timeout()
        if resp.status != pb.OK:
            who = resp.responder or cache
            if resp.status == pb.TIMEOUT:
                stage = f"{r.stage}: cache {who} timed out on {r.op_name}" + \
                    (f" ({resp.stage})" if resp.stage else "")
                return self.fail(pb.TIMEOUT, f"{self.name}: {stage}: {resp.message}", stage)
            return self.fail(resp.status, f"{self.name}: {r.stage}: cache {who} failed "
                                          f"{r.op_name} for {fn}: {resp.message}")
        if r.kind == "snapshot":
            r.pieces.setdefault(fn, []).extend(resp.pieces)
        if r.pending:
            return []
        self._rounds.remove(r)
        return self._then(r, now)

    def on_abort(self, abort: pb.CausalAbort, now: float) -> List[Any]:
        if self.finished:
            return []
        att = self.attempts.get(abort.attempt_id)
        if att is None or att.state != "running":
            return []     # a duplicate (parallel branches) or an attempt already given up
        att.state = "aborted"
        self.aborts += 1
        self.last_reason = (f"{abort.reason} (function {abort.function}, attempt "
                            f"{abort.attempt_id})" if abort.function else
                            f"{abort.reason} (attempt {abort.attempt_id})")
        new_keys = [k for k in abort.new_keys if k]
        if new_keys:
            fn_keys = self.keys.setdefault(abort.function, []) if abort.function in self.keys \
                else None
            for k in new_keys:
                if fn_keys is not None and k not in fn_keys:
                    fn_keys.append(k)
                if k not in self.dag_keys:
                    self.dag_keys.append(k)
        for k in abort.stale_keys:       # the retry re-reads them from Anna before binding
            if k and k not in self.refresh_keys:
                self.refresh_keys.append(k)
        out: List[Any] = [AbortAttempt(abort.attempt_id)]
        out += self._release([abort.attempt_id])
        if self.aborts > self.max_retries:
            return out + self.fail(pb.ABORTED, (
                f"{self.name}: causal call aborted {self.aborts} times (more than "
                f"max_causal_retries={self.max_retries}) under "
                f"{PROTOCOL_NAMES.get(self.requested, '?')}; last reason: {self.last_reason}"))
        p = self.requested
        if p == pb.CT:
            aid = self._new_attempt()
            return out + self._start(aid, pb.CT, now, snapshot_attempt=aid)
        if p == pb.OPT:
            return out + self._start(self._new_attempt(), pb.OPT, now)
        if p == pb.CON:
            return out + self._begin_con(now)
        # HB
        if abort.attempt_id == self._hb_opt and not new_keys:
            if self._hb_pieces is not None:
                return out + self._con_from_pieces(now)
            self._hb_wait_snapshot = True    # the snapshot round is still out: wait for it
            return out
        # new keys (or a CON attempt of HB aborted): a fresh snapshot covering them
        self._cancel_rounds()
        self._hb_pieces = None
        self._hb_wait_snapshot = False
        return out + self._begin_con(now, reuse=self._hb_opt or "")

    def on_done(self, attempt_id: str, now: float) -> List[Any]:
        """An attempt's sink answered the caller (or the caller reported the result: pass
        any attempt id of the call): the call is over."""
        if self.finished:
            return []
        att = self.attempts.get(attempt_id)
        if att is not None:
            att.state = "done"
        out: List[Any] = [AbortAttempt(a) for a in self.running() if a != attempt_id]
        for a in self.attempts.values():
            if a.state == "running":
                a.state = "aborted"
        return out + self._finish()

    def tick(self, now: float) -> List[Any]:
        if self.finished:
            return []
        if self._rounds and now > self.coord_deadline:
            return self._coord_timeout()
        if now > self.deadline + 5.0:   # the attempt's own deadline passed long ago: forget
            return [AbortAttempt(a) for a in self.running()] + self._finish()
        return []

    def fail(self, status: int, message: str, stage: str = "") -> List[Any]:
        """Fail the call at its caller (releasing everything)."""
        if self.finished:
            return []
        out: List[Any] = [AbortAttempt(a) for a in self.running()]
        for a in self.attempts.values():
            if a.state == "running":
                a.state = "aborted"
        return out + [Fail(status, message, stage)] + self._finish()

    # ---- internals ----
    def _new_attempt(self) -> str:
        aid = f"{self.call_id}#{self._next}"
        self._next += 1
        return aid

    def _rid(self, what: str) -> str:
        self._seq += 1
        return f"{self.call_id}/{what}/{self._seq}"

    def _plan(self, aid: str, protocol: int, snapshot_attempt: str, reuse: str) -> pb.CausalPlan:
        plan = pb.CausalPlan(protocol=protocol, requested=self.requested, call_id=self.call_id,
                             attempt=int(aid.rsplit("#", 1)[1]), dag_keys=self.dag_keys,
                             dag_keys_known=True, reuse_attempt=reuse,
                             snapshot_attempt=snapshot_attempt, refresh_keys=self.refresh_keys)
        plan.caches.update(self.caches)
        return plan

    def _start(self, aid: str, protocol: int, now: float, snapshot_attempt: str = "",
               reuse: str = "") -> List[Any]:
        self.attempts[aid] = _Attempt(protocol)
        return [StartAttempt(aid, self._plan(aid, protocol, snapshot_attempt, reuse),
                             max(self.deadline - now, 0.001))]

    def _request(self, op: int, attempt_id: str, now: float, **fields: Any) -> pb.CacheRequest:
        return pb.CacheRequest(op=op, attempt_id=attempt_id,
                               timeout=max(self.coord_deadline - now, 0.001), **fields)

    def _snapshot_round(self, attempt_id: str, stage: str, now: float, then: Any) -> List[Any]:
        r = _Round("snapshot", attempt_id, stage, "CAUSAL_SNAPSHOT", then=then)
        out: List[Any] = []
        for fn in self.order:
            rid = self._rid(f"snap/{fn}")
            cache = self.caches[fn]
            r.pending[rid] = (fn, cache)
            # the sink's cache snapshots every key of the DAG: a write at the sink inherits
            # the dependencies of the version the DAG read of its key (hydrocache/writer.py),
            # so the sink must be able to bind any key read upstream
            keys = self.dag_keys if fn == self.order[-1] else self.keys[fn]
            out.append(CacheSend(cache, self._request(
                pb.CAUSAL_SNAPSHOT, attempt_id, now, request_id=rid,
                response_address=self.reply_address, keys=keys,
                dag_keys=self.dag_keys, dag_keys_known=True)))
        self._rounds.append(r)
        if not r.pending:
            self._rounds.remove(r)
            return out + self._then(r, now)
        return out

    def _fetch_round(self, attempt_id: str, stage: str, fetches: FetchSets, now: float,
                     then: Any, wait: bool = True) -> List[Any]:
        r = _Round("fetch", attempt_id, stage, "CAUSAL_FETCH", then=then)
        out: List[Any] = []
        for fn in self.order:
            versions = fetches.get(fn)
            if not versions:
                continue
            rid = self._rid(f"fetch/{fn}")
            cache = self.caches[fn]
            if wait:
                r.pending[rid] = (fn, cache)
            out.append(CacheSend(cache, self._request(
                pb.CAUSAL_FETCH, attempt_id, now, request_id=rid,
                response_address=self.reply_address if wait else "", versions=versions)))
        if not wait:
            return out
        if not r.pending:
            return out + self._then(r, now)
        self._rounds.append(r)
        return out

    def _then(self, r: _Round, now: float) -> List[Any]:
        what = r.then[0]
        if what == "con_snapshot":            # CON: Algorithm 10 on the pieces
            _, aid, reuse = r.then
            fetches = self.engine.distributed(r.pieces)
            return self._fetch_round(aid, "CON snapshot fetch", fetches, now,
                                     then=("start_con", aid, aid, reuse))
        if what == "start_con":
            _, aid, snap, reuse = r.then
            return self._start(aid, pb.CON, now, snapshot_attempt=snap, reuse=reuse)
        if what == "hb_snapshot":
            self._hb_pieces = r.pieces
            opt = self.attempts.get(self._hb_opt or "")
            if self._hb_wait_snapshot or opt is None or opt.state == "aborted":
                self._hb_wait_snapshot = False
                return self._con_from_pieces(now)
            if opt.state != "running":
                return []
            own = {fn: [p for p in ps if p.local.key in self.keys.get(fn, ())]
                   for fn, ps in r.pieces.items()}   # OPT binds only the function's own keys
            sim = self.engine.simulate(self.order, self.upstreams, own)
            if not sim.abort:                  # prefetch what OPT will fetch
                return self._fetch_round(self.snapshot_id, "HB prefetch", sim.fetches, now,
                                         then=None, wait=False)
            # early abort: OPT would abort; stop it and run CON on the snapshot we have
            opt.state = "aborted"
            self.aborts += 1
            self.last_reason = f"HB simulation: {sim.reason or 'OPT would abort'}"
            out: List[Any] = [AbortAttempt(self._hb_opt)] + self._release([self._hb_opt])
            if self.aborts > self.max_retries:
                return out + self.fail(pb.ABORTED, (
                    f"{self.name}: causal call aborted {self.aborts} times (more than "
                    f"max_causal_retries={self.max_retries}) under HB; last reason: "
                    f"{self.last_reason}"))
            return out + self._con_from_pieces(now)
        raise AssertionError(f"unknown continuation {r.then!r}")

    def _con_from_pieces(self, now: float) -> List[Any]:
        """HB: Algorithm 10 over the "#s" pieces, fetch under "#s", then CON reusing OPT."""
        aid = self._new_attempt()
        fetches = self.engine.distributed(self._hb_pieces or {})
        return self._fetch_round(self.snapshot_id, "HB CON snapshot fetch", fetches, now,
                                 then=("start_con", aid, self.snapshot_id, self._hb_opt or ""))

    def _begin_con(self, now: float, reuse: str = "") -> List[Any]:
        aid = self._new_attempt()
        stage = "CON snapshot construction"
        return self._snapshot_round(aid, stage, now, then=("con_snapshot", aid, reuse))

    def _cancel_rounds(self) -> None:
        self._rounds = []

    def _coord_timeout(self) -> List[Any]:
        stage, cache, op = self.waiting_on()[0]
        stage_text = f"{stage}: cache {cache} did not answer {op}"
        return self.fail(pb.TIMEOUT, f"{self.name}: {stage_text} within the call's deadline "
                                     f"({self.timeout:g} s)", stage_text)

    def _all_caches(self) -> List[str]:
        return sorted(set(self.caches.values()))

    def _release(self, attempt_ids: Sequence[str]) -> List[Any]:
        fresh = [a for a in attempt_ids if a not in self._released]
        self._released.update(fresh)
        return [CacheSend(c, pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id=a))
                for a in fresh for c in self._all_caches()]

    def _finish(self) -> List[Any]:
        self.finished = True
        self._rounds = []
        ids = list(self.attempts)
        if self._used_snapshot:
            ids.append(self.snapshot_id)
        return self._release(ids) + [Finished()]
