"""The scheduler's side of HydroCache's MTCC protocols (dissertation 4.3.1-4.3.6), pure.

Contract: one `CausalCall` per causal call (Call.consistency == CAUSAL) coordinates its
attempts. It does no I/O and reads no clock: the scheduler's event loop feeds it events
(`start`, `on_cache_reply`, `on_abort`, `on_done`, `tick`, `fail`, `stop`), each with `now`, and
carries out the actions it returns, in order (`scheduler.causal_records`: `StartAttempt`,
`CacheSend`, `AbortAttempt`, `Fail`, `Finished` — always the last).

The protocol-specific control flow (CT, OPT, CON, HB) is a `scheduler.mtcc.Flow`, one per
call; the coordinator keeps what every protocol shares and offers the flow its steps:
`new_attempt`, `start_attempt`, `snapshot_round` / `fetch_round` (cache requests whose
replies, once all in, resume the flow with the round's continuation), `prefetch` (nothing
waits), `give_up` (an attempt aborted: stop it, release it, count it against the budget),
`cancel_rounds`.
- Retry budget: every aborted attempt counts (its own `causal_abort`, or HB's early abort);
  past `max_retries` the caller gets ABORTED naming the last reason and nothing restarts.
- Unknown read set (4.3.6): a `causal_abort` naming `new_keys` adds them to the DAG's keys
  (and to the function's) for the next attempt; `stale_keys` are re-read from Anna by it.
- Coordination (snapshot and fetch replies) must finish by `coord_deadline`; past it the
  caller gets TIMEOUT whose stage names the protocol stage and the cache that did not answer.
  A cache answering with an error fails the call with its status (TIMEOUT keeps its stage).
- Whenever the call finishes or fails, one CAUSAL_RELEASE goes to every cache of the call,
  naming every attempt id used not yet released (and HB's "#s": `attempt_id` and
  `also_release`); a release fences each attempt it names at the cache until the call's
  deadline plus slack (hydrocache/DESIGN.md, "Fencing"). A call whose commit is granted
  releases them at the grant instead, as `HeldRelease`s (below).
- One commit per call (`grant(attempt_id, now) -> (granted, reason, actions)`): a sink's node
  cache asks before it writes anything. The grant goes to a running attempt of a call not
  finished, once per call; the other running attempts are stopped and released at that
  moment, outstanding rounds are cancelled, and no attempt starts or is granted after it
  (`granted`). The call's remaining attempts (the granted one included: its binds are over)
  are released then too, as `HeldRelease`s that may ride on a later message to each cache. Everything else is refused with the reason. A call failed after its grant
  tells the caller that the granted commit may still be applied.

Ids: attempt n of call c is `f"{c}#{n}"` (attempt n follows n aborted attempts, so
`CausalPlan.attempt` is also the abort count); HB's snapshot lives under `f"{c}#s"`; cache
requests are `f"{c}#snap-{n}"` / `f"{c}#fetch-{n}"`. `caller_of(id)` gives back `c` for any
of them, so the scheduler routes replies and reports without an index of its own.
Placement (function -> worker, and so function -> node cache) is fixed for the whole call.

`hb_eager=False` runs HB lazily: no snapshot round until its OPT attempt aborts
(`scheduler.mtcc.HbFlow`, chosen per DAG by `scheduler.hb_policy.SnapshotPolicy`).

`engine` turns snapshot pieces into plans (default: `HydroEngine`, over hydrocache.protocols).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from hydro_proto import cloudburst_pb2 as pb
from hydrocache.session import Floors

from .causal_records import (AbortAttempt, Action, Attempt, AttemptState, Awaited, CacheSend,
                             Fail, FetchSets, Finished, HeldRelease, Pieces, Round, SimResult,
                             StartAttempt, Waiting)
from .mtcc import Continuation, Flow, flow_for

__all__ = ["CausalCall", "StartAttempt", "CacheSend", "HeldRelease", "AbortAttempt", "Fail",
           "Finished",
           "SimResult", "HydroEngine", "topological_order", "caller_of", "PROTOCOL_NAMES"]

PROTOCOL_NAMES = {pb.HB: "HB", pb.CT: "CT", pb.OPT: "OPT", pb.CON: "CON"}

RUNNING, ABORTED, DONE = AttemptState.RUNNING, AttemptState.ABORTED, AttemptState.DONE


def caller_of(minted_id: str) -> str:
    """The call id an attempt, snapshot or cache request id of a causal call was made from
    (the call id itself may hold "#": only the last one separates)."""
    return minted_id.rsplit("#", 1)[0]


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


class CausalCall:
    """Coordinates one causal call's attempts; see the module contract."""

    __slots__ = ("call_id", "name", "requested", "functions", "upstreams", "order", "keys",
                 "dag_keys", "caches", "refresh_keys", "reply_address", "timeout", "deadline",
                 "coord_deadline", "max_retries", "engine", "flow", "attempts", "aborts",
                 "last_reason", "finished", "granted", "_next", "_seq", "_rounds",
                 "_released", "session")

    def __init__(self, call_id: str, requested: int, functions: Sequence[str],
                 upstreams: Mapping[str, Sequence[str]], keys: Mapping[str, Sequence[str]],
                 caches: Mapping[str, str], reply_address: str, now: float, timeout: float,
                 max_retries: int = 10, engine: Any = None, name: str = "",
                 session: Optional[pb.Session] = None, hb_eager: bool = True) -> None:
        self.call_id = call_id
        # the caller's floors: snapshots are at least this new
        self.session = None if session is None else Floors(session)
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
        self.flow: Flow = flow_for(requested, call_id, hb_eager)
        self.attempts: Dict[str, Attempt] = {}
        self.aborts = 0
        self.last_reason = ""
        self.finished = False
        self.granted = ""               # the attempt holding the call's one commit
        self._next = 0
        self._seq = 0
        self._rounds: List[Round] = []
        self._released: Set[str] = set()

    # ---- queries ----
    def running(self) -> List[str]:
        return [a for a, s in self.attempts.items() if s.state is RUNNING]

    def current(self) -> Optional[str]:
        """The latest attempt started (for `where`), or None while coordinating."""
        return next(reversed(self.attempts), None) if self.attempts else None

    def waiting_on(self) -> List[Waiting]:
        """Every reply still awaited."""
        return [Waiting(r.stage, awaited.cache, r.op_name) for r in self._rounds
                for _, awaited in sorted(r.pending.items())]

    # ---- events ----
    def start(self, now: float) -> List[Action]:
        return self.flow.start(self, now)

    def on_cache_reply(self, resp: pb.CacheResponse, now: float) -> List[Action]:
        if self.finished:
            return []
        for r in self._rounds:
            if resp.request_id in r.pending:
                break
        else:
            return []   # a reply to a request no longer awaited (prefetch, cancelled round)
        if now > self.coord_deadline:
            return self._coord_timeout()
        fn, cache, shares = r.pending.pop(resp.request_id)
        if resp.status != pb.OK:
            who = resp.responder or cache
            if resp.status == pb.TIMEOUT:
                stage = f"{r.stage}: cache {who} timed out on {r.op_name}" + \
                    (f" ({resp.stage})" if resp.stage else "")
                return self.fail(pb.TIMEOUT, f"{self.name}: {stage}: {resp.message}", stage)
            return self.fail(resp.status, f"{self.name}: {r.stage}: cache {who} failed "
                                          f"{r.op_name} for {fn}: {resp.message}")
        if r.op == pb.CAUSAL_SNAPSHOT:
            if not shares:
                r.pieces.setdefault(fn, []).extend(resp.pieces)
            for name, keys in shares:       # one cache's reply for several functions
                r.pieces.setdefault(name, []).extend(p for p in resp.pieces
                                                     if p.local.key in keys)
        if r.pending:
            return []
        self._rounds.remove(r)
        return self.flow.resume(self, r.then, r.pieces, now)

    def on_abort(self, abort: pb.CausalAbort, now: float) -> List[Action]:
        if self.finished:
            return []
        att = self.attempts.get(abort.attempt_id)
        if att is None or att.state is not RUNNING or self.granted:
            # a duplicate (parallel branches), an attempt already given up, or a report after
            # the commit was granted (nothing may start any more)
            return []
        self._learn(abort)
        out = self.give_up(abort.attempt_id, (
            f"{abort.reason} (function {abort.function}, attempt {abort.attempt_id})"
            if abort.function else f"{abort.reason} (attempt {abort.attempt_id})"))
        if self.finished:   # the retry budget is spent
            return out
        return out + self.flow.retry(self, abort, now)

    def on_done(self, attempt_id: str, now: float) -> List[Action]:
        """An attempt's sink answered the caller (or the caller reported the result: pass
        any id of the call; after a grant, the granted attempt is the one done): the call is
        over. The attempts still running are stopped (`AbortAttempt`), never the done one."""
        if self.finished:
            return []
        att = self.attempts.get(attempt_id)
        if att is None and self.granted:
            # the caller's report (the call's own id, with its next call): after the grant
            # the other attempts are stopped, and every function of the granted one has run
            # (its sink runs last), so it is done and its workers need no `abort`
            attempt_id = self.granted
            att = self.attempts.get(attempt_id)
        if att is not None:
            att.state = DONE
        return self._stop_running(keep=attempt_id) + self._finish()

    def tick(self, now: float) -> List[Action]:
        if self.finished:
            return []
        if self._rounds and now > self.coord_deadline:
            return self._coord_timeout()
        if now > self.deadline + 5.0:   # the attempt's own deadline passed long ago: forget
            return self._stop_running() + self._finish()
        return []

    def fail(self, status: int, message: str, stage: str = "") -> List[Action]:
        """Fail the call at its caller (releasing everything)."""
        if self.finished:
            return []
        if self.granted:
            message += (f" (attempt {self.granted} was granted the call's commit before: its "
                        "writes may still be applied)")
        return self._stop_running() + [Fail(status, message, stage)] + self._finish()

    def stop(self) -> List[Action]:
        """End the call without a word to its caller (it runs again as another call): every
        running attempt is stopped, and every attempt released (so fenced at the caches)."""
        if self.finished:
            return []
        return self._stop_running() + self._finish()

    def grant(self, attempt_id: str, now: float) -> Tuple[bool, str, List[Action]]:
        """May `attempt_id` commit? Granted once per call, to a running attempt of a call in
        flight; granting stops and releases every other running attempt."""
        if self.finished:
            return False, f"{self.name}: the call already finished or failed", []
        if self.granted:
            return False, (f"{self.name}: attempt {self.granted} holds the call's one commit"
                           if self.granted != attempt_id else
                           f"{self.name}: attempt {attempt_id} was already granted its commit"), []
        att = self.attempts.get(attempt_id)
        if att is None or att.state is not RUNNING:
            return False, f"{self.name}: attempt {attempt_id} is not running (aborted)", []
        self.granted = attempt_id
        self._rounds = []
        out: List[Action] = []
        for aid, other in self.attempts.items():
            if aid != attempt_id and other.state is RUNNING:
                other.state = ABORTED
                out.append(AbortAttempt(aid))
                out += self._release([aid], now)
        # the call's binds are over (its one sink runs after every other function), so the
        # rest of its temporary versions can go: held, to ride on the next grant to each cache
        out += self._release(list(self.attempts) + self.flow.held_snapshots(), now, held=True)
        return True, "", out

    # ---- steps offered to the flows (scheduler.mtcc) ----
    def new_attempt(self) -> str:
        aid = f"{self.call_id}#{self._next}"
        self._next += 1
        return aid

    def start_attempt(self, aid: str, protocol: int, now: float, snapshot_attempt: str = "",
                      reuse: str = "") -> List[Action]:
        if self.granted or self.finished:   # the call's one commit is taken: start nothing
            return []
        self.attempts[aid] = Attempt(protocol)
        plan = pb.CausalPlan(protocol=protocol, requested=self.requested, call_id=self.call_id,
                             attempt=int(aid.rsplit("#", 1)[1]), dag_keys=self.dag_keys,
                             dag_keys_known=True, reuse_attempt=reuse,
                             snapshot_attempt=snapshot_attempt, refresh_keys=self.refresh_keys)
        plan.caches.update(self.caches)
        return [StartAttempt(aid, plan, max(self.deadline - now, 0.001))]

    def snapshot_round(self, attempt_id: str, stage: str, now: float,
                       then: Continuation) -> List[Action]:
        """CAUSAL_SNAPSHOT under `attempt_id`, one request per cache for all the functions
        placed on it (its keys are theirs together, and one cut serves them all); `then`
        resumes the flow with the pieces, per function, once every reply is in."""
        r = Round(pb.CAUSAL_SNAPSHOT, attempt_id, stage, then)
        by_cache: Dict[str, List[Tuple[str, List[str]]]] = {}
        for fn in self.order:
            # the sink's cache snapshots every key of the DAG: a write at the sink inherits
            # the dependencies of the version the DAG read of its key (hydrocache/writer.py),
            # so the sink must be able to bind any key read upstream
            keys = self.dag_keys if fn == self.order[-1] else self.keys[fn]
            by_cache.setdefault(self.caches[fn], []).append((fn, list(keys)))
        out: List[Action] = []
        for cache, fns in by_cache.items():
            rid = self._rid("snap")
            keys = list(dict.fromkeys(k for _, ks in fns for k in ks))
            shares = tuple((fn, frozenset(ks)) for fn, ks in fns) if len(fns) > 1 else ()
            r.pending[rid] = Awaited(fns[0][0], cache, shares)
            out.append(CacheSend(cache, self._request(
                pb.CAUSAL_SNAPSHOT, attempt_id, now, request_id=rid,
                response_address=self.reply_address, keys=keys,
                dag_keys=self.dag_keys, dag_keys_known=True,
                session=None if self.session is None else
                self.session.restrict(keys + self.dag_keys))))
        return out + self._await(r, now)

    def fetch_round(self, attempt_id: str, stage: str, fetches: FetchSets, now: float,
                    then: Continuation) -> List[Action]:
        """CAUSAL_FETCH of each function's fetch set under `attempt_id`; `then` resumes the
        flow once every fetch is acknowledged (at once when there is nothing to fetch)."""
        r = Round(pb.CAUSAL_FETCH, attempt_id, stage, then)
        out = self._fetches(r, fetches, now, wait=True)
        return out + self._await(r, now)

    def prefetch(self, attempt_id: str, stage: str, fetches: FetchSets,
                 now: float) -> List[Action]:
        """CAUSAL_FETCH of each function's fetch set under `attempt_id`; nothing waits."""
        return self._fetches(Round(pb.CAUSAL_FETCH, attempt_id, stage, None), fetches, now,
                             wait=False)

    def give_up(self, attempt_id: str, reason: str) -> List[Action]:
        """Attempt `attempt_id` aborted for `reason`: stop its workers, release its temporary
        versions and count it; past the retry budget the call fails with ABORTED (then
        `finished` is set and the flow must start nothing more)."""
        self.attempts[attempt_id].state = ABORTED
        self.aborts += 1
        self.last_reason = reason
        out: List[Action] = [AbortAttempt(attempt_id)]
        out += self._release([attempt_id], None)
        if self.aborts > self.max_retries:
            out += self.fail(pb.ABORTED, (
                f"{self.name}: causal call aborted {self.aborts} times (more than "
                f"max_causal_retries={self.max_retries}) under "
                f"{PROTOCOL_NAMES.get(self.requested, '?')}; last reason: {self.last_reason}"))
        return out

    def cancel_rounds(self) -> None:
        """Stop waiting for every outstanding round (late replies are then ignored)."""
        self._rounds = []

    # ---- internals ----
    def _learn(self, abort: pb.CausalAbort) -> None:
        """The keys an abort names: new ones join the read sets, stale ones are re-read."""
        new_keys = [k for k in abort.new_keys if k]
        if new_keys:
            fn_keys = self.keys.get(abort.function)
            for k in new_keys:
                if fn_keys is not None and k not in fn_keys:
                    fn_keys.append(k)
                if k not in self.dag_keys:
                    self.dag_keys.append(k)
        for k in abort.stale_keys:       # the retry re-reads them from Anna before binding
            if k and k not in self.refresh_keys:
                self.refresh_keys.append(k)

    def _rid(self, kind: str) -> str:
        self._seq += 1
        return f"{self.call_id}#{kind}-{self._seq}"

    def _request(self, op: int, attempt_id: str, now: float, **fields: Any) -> pb.CacheRequest:
        return pb.CacheRequest(op=op, attempt_id=attempt_id,
                               timeout=max(self.coord_deadline - now, 0.001), **fields)

    def _fetches(self, r: Round, fetches: FetchSets, now: float, wait: bool) -> List[Action]:
        """One CAUSAL_FETCH per cache, of the fetch sets of the functions placed on it
        together (Algorithm 10 gives a key one version, from the union S; a key two of them
        name differently would go in separate requests)."""
        by_cache: Dict[str, List[Tuple[str, Dict[str, Any]]]] = {}
        for fn in self.order:
            versions = fetches.get(fn)
            if not versions:
                continue
            groups = by_cache.setdefault(self.caches[fn], [])
            for group in groups:
                if all(group[1].get(v.key, v) == v for v in versions):
                    group[1].update((v.key, v) for v in versions)
                    break
            else:
                groups.append((fn, {v.key: v for v in versions}))
        out: List[Action] = []
        for cache, groups in by_cache.items():
            for fn, versions in groups:
                rid = self._rid("fetch")
                if wait:
                    r.pending[rid] = Awaited(fn, cache)
                out.append(CacheSend(cache, self._request(
                    pb.CAUSAL_FETCH, r.attempt_id, now, request_id=rid,
                    response_address=self.reply_address if wait else "",
                    versions=list(versions.values()))))
        return out

    def _await(self, r: Round, now: float) -> List[Action]:
        """Wait for the round's replies; a round with nothing to wait for resumes at once."""
        if not r.pending:
            return self.flow.resume(self, r.then, r.pieces, now)
        self._rounds.append(r)
        return []

    def _stop_running(self, keep: str = "") -> List[Action]:
        """Abort every running attempt (but `keep`) and mark them aborted."""
        out: List[Action] = []
        for aid, att in self.attempts.items():
            if att.state is RUNNING:
                att.state = ABORTED
                if aid != keep:
                    out.append(AbortAttempt(aid))
        return out

    def _coord_timeout(self) -> List[Action]:
        stage, cache, op = self.waiting_on()[0]
        stage_text = f"{stage}: cache {cache} did not answer {op}"
        return self.fail(pb.TIMEOUT, f"{self.name}: {stage_text} within the call's deadline "
                                     f"({self.timeout:g} s)", stage_text)

    def _all_caches(self) -> List[str]:
        return sorted(set(self.caches.values()))

    def _release(self, attempt_ids: Sequence[str], now: Optional[float],
                 held: bool = False) -> List[Action]:
        """CAUSAL_RELEASE (which also fences) of `attempt_ids` on every cache of the call;
        `timeout` is the call's time left (the cache fences until then plus slack). `held`:
        as `HeldRelease`s, which may wait for a message going to the cache anyway."""
        fresh = [a for a in attempt_ids if a not in self._released]
        self._released.update(fresh)
        left = self.timeout if now is None else max(self.deadline - now, 0.001)
        if not fresh:
            return []
        if held:
            return [HeldRelease(c, fresh, left) for c in self._all_caches()]
        # one message per cache for all of them: a call's end would otherwise cost a message
        # per attempt and cache (HB ends holding its OPT attempt and its snapshot)
        return [CacheSend(c, pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id=fresh[0],
                                             also_release=fresh[1:], timeout=left))
                for c in self._all_caches()]

    def _finish(self) -> List[Action]:
        self.finished = True
        self._rounds = []
        return self._release(list(self.attempts) + self.flow.held_snapshots(),
                             None) + [Finished()]
