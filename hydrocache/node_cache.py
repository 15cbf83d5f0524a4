"""One node's HydroCache as a pure state machine: requests in, replies and I/O requests out.

Contract: `NodeCache(node_id, address, capacity_bytes)` is the whole causal side of a node
cache without sockets, threads, clocks or sleeps (the style of h11, and of
`scheduler/causal.py`). Its owner (`hydrocache.service.HydroCacheService`) calls it from one
thread, passes the current time `now` (seconds, any monotonic clock) into every entry point,
and carries out the `Step(replies, io)` each returns (`hydrocache.actions`):
- `handle(request, now)`: one CAUSAL_* `CacheRequest`. An operation that needs no I/O is
  answered within this call. One that does (keys missing from the cut, upstream versions held
  by other caches, a commit to write) becomes a pending operation: the I/O it needs is in
  `io`, and it resumes when the results arrive through the entry points below, or fails with
  `StageTimeout` naming the stage when a `tick(now)` comes after its deadline (the request's
  `timeout`, default `DEFAULT_TIMEOUT`).
- I/O results: `on_fetched(key, lattice, now, error=None)`, `on_pushed(key, lattice, now)`
  (Anna's subscription pushes: refresh), `on_put(token, now, error=None)`,
  `on_cache_reply(response, now)` (another cache's CAUSAL_TEMP_GET answer; late or unknown
  answers are dropped), `on_subscribe_failed(key, now)`.
- Time: `tick(now)` resumes or fails what is due (deadlines, and re-reads from Anna of what a
  waiting operation or a pending version still needs, at growing intervals); `next_wakeup()`
  is the earliest time a tick has something to do (None: nothing to do). `sweep(now)` drops expired temporary
  versions and evicts over capacity (returns the evicted keys).
- `keys()`, `keyset_version()`, `stats`, and for tests `cut`, `temp`, `lru`.
Every failure is answered with a status and a message naming this cache: `TIMEOUT` with the
stage for `StageTimeout`, `EXECUTION_ERROR` otherwise; nothing is dropped silently.
The cut and its upkeep are `hydrocache.keeper.CutKeeper`'s; each operation below is a
generator run by `hydrocache.pending.Operations` (one path whether or not it waits);
CAUSAL_COMMIT is `hydrocache.committing.Committing`'s, mixed in, and the waits for the cut
(a key brought in, an OPT retry's refresh, a session's floors) `hydrocache.cut_waits.CutWaits`'s.

The operations (dissertation 4.3; `hydrocache/protocols.py` holds their decisions):
- CAUSAL_BIND (OPT, Algorithms 8 and 6): an OPT retry first re-reads the keys the aborted
  attempt read too old (`refresh`) and waits at most a fifth of its time for their
  dependencies; then upstream contexts -> parallel flow -> linear flow; keys not in the cut are
  brought in (local cut update); keys only upstream caches hold are found in this cache's
  temporary versions (its own, an HB prefetch) or among the versions the attempt carried
  (`hydrocache.carried`: used only when the entry's clock supersedes them and their merge is
  that clock), or else fetched from their holders (CAUSAL_TEMP_GET, in parallel). Holders
  that fail or do not answer in time abort the attempt ("upstream versions
  unavailable"). The reply carries the bound versions (values as frames), S_new and R_new
  (with `carry_versions`, also this cache's versions of S_d, of `carry_keys` only when it
  names any, in `context.carried`), or
  `abort` with the reason and the stale keys.
- CAUSAL_READ (CT, CON): reads the attempt's snapshot; when the attempt has none (CT's first
  read) it is built from the cut for every key of R~_DAG after a local cut update (4.3.1).
  A read with `snapshot_required` (a sink re-binding the keys it writes before its commit)
  never builds one: a snapshot gone by then fails the read with `Fenced`.
  Only keys this cache was asked to bind are served. Under CT (`explore`) a key outside the
  snapshot is admitted if the linear flow check against the snapshot admits the cut's version
  without remote versions; otherwise (and always under CON) the reply aborts with `new_keys`.
- CAUSAL_SNAPSHOT (Algorithm 9, after a local cut update), CAUSAL_FETCH (Algorithm 10 line 14,
  HB prefetch: versions fetched from their holders into the attempt's temporary versions),
  CAUSAL_TEMP_GET (cache to cache), CAUSAL_RELEASE, CAUSAL_COMMIT (the versions are written to
  Anna, then offered to the cut and subscribed, then acknowledged), CAUSAL_GC_REPORT (the
  dependency keys and every clock held: cut, pending and temporary versions) / APPLY.
- Fencing (hydrocache/DESIGN.md, "Fencing"): CAUSAL_RELEASE fences the attempt (and each one
  in `also_release`: a call's end releases all its attempts in one message) until its
  deadline plus `TEMP_SLACK` (the release's `timeout` is the call's time left); a fenced
  attempt's BIND, READ, SNAPSHOT, FETCH and COMMIT are refused with `Fenced` (reply
  `fenced`, naming the attempt and this cache). A COMMIT naming `grant_address` first asks
  that scheduler for the grant (CAUSAL_GRANT, one per call, naming this cache as
  `requester`) and writes nothing unless it is granted; a refusal is `Fenced` with the
  scheduler's reason, no answer in time a `StageTimeout` naming the grant. The releases a
  grant's reply hands over (`release`, `release_timeout`) are applied as a CAUSAL_RELEASE;
  the granted commit goes on.
- Sessions (read-your-writes and monotonic reads, `hydrocache/session.py`): a CAUSAL_BIND,
  the CAUSAL_READ that builds a CT snapshot (or admits keys into it under CT), and a
  CAUSAL_SNAPSHOT carrying the caller's session first re-read from Anna every key (of the request and of R~_DAG) whose cut version
  does not supersede its floor, until it does (re-read at growing intervals, `SESSION_PAUSE`;
  short of it near the deadline, `SessionUnmet` names the keys), so the snapshot includes what the caller
  wrote and read before.
- Temporary versions (`hydrocache.temp`) live until CAUSAL_RELEASE or `TEMP_SLACK` seconds
  after their request's deadline. Large values carry a tag, and one the requester already
  holds is not resent (`hydrocache/copies.py`).
"""
from __future__ import annotations

import itertools
import logging
import uuid
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Set, Tuple

from anna_core.errors import AnnaError
from hydro_proto import cloudburst_pb2 as pb

from . import versionset as vs
from .actions import (DEFAULT_TIMEOUT, TEMP_SLACK, AskCache, Fenced, NotCausal,
                      RemoteUnavailable, Reply, StageTimeout, Step)
from .carried import Carried, unpack
from .committing import Committing
from .cut_waits import CutWaits
from .copies import ValueTags
from .keeper import CutKeeper
from .pending import Operations, PutWait, RepliesWait
from .protocols import (LinearPlan, create_snapshot, finish_linear, parallel_flow,
                        parallel_stale, plan_linear)
from .temp import TempStore
from .vclock import supersedes
from .version import Version, merge_versions

__all__ = ["NodeCache", "Step", "StageTimeout", "NotCausal", "RemoteUnavailable", "Fenced"]

log = logging.getLogger("hydrocache.node_cache")

Answer = Tuple[pb.CacheResponse, List[bytes]]
Upstream = Tuple[bool, str, vs.VersionSet, vs.VersionSet, int, List[str]]


class NodeCache(Committing, CutWaits):
    """The causal side of one node cache, sans I/O; see the module contract."""

    def __init__(self, node_id: str, address: str, capacity_bytes: int = 2 << 30) -> None:
        self.node_id = node_id
        self.address = address
        self._io: List[Any] = []
        self._out: List[Reply] = []
        self.keeper = CutKeeper(capacity_bytes, self._io)
        self.temp = TempStore()
        self.stats = self.keeper.stats
        self.stats.update(binds=0, remote_fetches=0, aborts=0, session_refreshes=0,
                          carried_hits=0)
        self._tags = ValueTags()
        self._ops = Operations(self._answer, self._fail)
        self._awaiting: Dict[str, RepliesWait] = {}
        self._puts: Dict[int, PutWait] = {}
        self._ids = itertools.count(1)
        self._rid_prefix = uuid.uuid4().hex[:8]
        self._bodies: Dict[int, Callable[[pb.CacheRequest], Generator]] = {
            pb.CAUSAL_BIND: self._bind, pb.CAUSAL_READ: self._read,
            pb.CAUSAL_SNAPSHOT: self._snapshot, pb.CAUSAL_FETCH: self._fetch_into,
            pb.CAUSAL_COMMIT: self._commit}

    # ---- reading ----
    @property
    def _now(self) -> float:
        return self._ops.now

    @property
    def cut(self):
        return self.keeper.cut

    @property
    def lru(self):
        return self.keeper.lru

    def keys(self) -> frozenset:
        return self.keeper.cut.keys()

    def keyset_version(self) -> int:
        return self.keeper.cut.keyset_version

    def pending_operations(self) -> int:
        return len(self._ops)

    # ---- entry points ----
    def handle(self, req: pb.CacheRequest, now: float) -> Step:
        self._ops.now = now
        try:
            body = self._bodies.get(req.op)
            if body is not None:
                if self.temp.fenced(req.attempt_id):
                    raise self._fenced(req.attempt_id, "it was released (the call ended, "
                                       "failed or the attempt aborted)")
                self._ops.start(req, body(req), now)
            elif req.op == pb.CAUSAL_TEMP_GET:
                self._temp_get(req)
            elif req.op == pb.CAUSAL_RELEASE:
                until = self._deadline(req) + TEMP_SLACK
                for attempt in (req.attempt_id, *req.also_release):
                    self.temp.release(attempt, until)
                self._answer(req, pb.CacheResponse())
            elif req.op == pb.CAUSAL_GC_REPORT:
                self._gc_report(req)
            elif req.op == pb.CAUSAL_GC_APPLY:
                self._gc_apply(req)
            else:
                raise ValueError(f"unknown cache op {req.op}")
        except Exception as e:
            self._fail(req, e)
        return self._step()

    def on_fetched(self, key: str, lattice: Any, now: float,
                   error: Optional[BaseException] = None) -> Step:
        self._ops.now = now
        self.keeper.on_fetched(key, lattice, error, now)
        self._ops.resume_ready()
        return self._step()

    def on_pushed(self, key: str, lattice: Any, now: float) -> Step:
        self._ops.now = now
        if self.keeper.on_pushed(key, lattice):
            self._ops.resume_ready()
        return self._step()

    def on_put(self, token: int, now: float, error: Optional[BaseException] = None) -> Step:
        self._ops.now = now
        w = self._puts.get(token)
        if w is not None:
            w.finish(error)
            self._ops.resume_ready()
        return self._step()

    def on_cache_reply(self, response: pb.CacheResponse, now: float) -> Step:
        self._ops.now = now
        w = self._awaiting.get(response.request_id)
        if w is not None:
            w.answer(response)
            self._ops.resume_ready()
        return self._step()

    def on_subscribe_failed(self, key: str, now: float) -> Step:
        self._ops.now = now
        self.keeper.on_subscribe_failed(key)
        return self._step()

    def tick(self, now: float) -> Step:
        self.keeper.retry(now)
        self._ops.tick(now)
        return self._step()

    def next_wakeup(self) -> Optional[float]:
        ops, retry = self._ops.next_wakeup(), self.keeper.next_retry()
        return ops if retry is None else retry if ops is None else min(ops, retry)

    def sweep(self, now: float) -> List[str]:
        self._ops.now = now
        self.temp.expire(now)
        return self.keeper.sweep()

    # ---- answers ----
    def _step(self) -> Step:
        out, io = self._out, list(self._io)
        self._out = []
        self._io.clear()
        return Step(out, io)

    def _answer(self, req: pb.CacheRequest, response: pb.CacheResponse,
                frames: Sequence[Any] = ()) -> None:
        if req.response_address:
            response.request_id = req.request_id
            response.responder = self.address
            self._out.append(Reply(req.response_address, response, list(frames)))

    def _fail(self, req: pb.CacheRequest, error: BaseException) -> None:
        what = pb.CacheOp.Name(req.op) if req.op in pb.CacheOp.values() else str(req.op)
        response = pb.CacheResponse()
        if isinstance(error, StageTimeout):
            response.status = pb.TIMEOUT
            response.stage = f"{error.stage} (node cache {self.node_id})"
        else:
            response.status = pb.EXECUTION_ERROR
            response.fenced = isinstance(error, Fenced)
            if not isinstance(error, (NotCausal, RemoteUnavailable, AnnaError, Fenced)):
                log.warning("%s of attempt %s failed", what, req.attempt_id, exc_info=error)
        response.message = f"node cache {self.node_id}: {what} failed: {error}"
        self._answer(req, response)

    def _fenced(self, attempt: str, why: str) -> Fenced:
        return Fenced(attempt, self.node_id, why)

    def _deadline(self, req: pb.CacheRequest) -> float:
        return self._now + (req.timeout if req.timeout > 0 else DEFAULT_TIMEOUT)

    @staticmethod
    def _dag_keys(req: pb.CacheRequest) -> Optional[Set[str]]:
        return set(req.dag_keys) if req.dag_keys_known else None

    def _entry(self, req: pb.CacheRequest, response: pb.CacheResponse, key: str,
               version: Optional[Version], frames: List[bytes]) -> None:
        """One entry; a large value the requester holds under the same tag is not resent."""
        e = response.entries.add(key=key, found=version is not None)
        if version is None:
            return
        # the clock and dependencies, encoded once per version: a hot key's version answers
        # many binds, and building them field by field was a bind's largest Python step
        e.MergeFromString(version.memo("cache_entry", _entry_meta))
        # a causal version is named by its key and clock: equal versions held in different
        # objects (re-read, re-offered, stripped by GC) keep one tag
        e.tag = self._tags.tag(version, sum(len(v) for v in version.values),
                               identity=(key, tuple(sorted(version.vc.items()))))
        if e.tag and req.have.get(key) == e.tag:
            e.unchanged = True
            return
        e.value_count = len(version.values)
        frames.extend(version.values)

    # ---- cache to cache ----
    def _temp_get(self, req: pb.CacheRequest) -> None:
        response = pb.CacheResponse()
        for kv in req.versions:
            for v in self.temp.matching(req.attempt_id, kv.key, kv.vc):
                response.entries.add(key=kv.key, found=True, lattice=v.serialize())
        self._answer(req, response)

    def _remote(self, attempt: str, wanted: vs.VersionSet, deadline: float,
                prefetch: str = "", carried: Optional[Dict[str, List[Version]]] = None
                ) -> Generator:
        """The versions named by `wanted`, rebuilt from their holders' temporary versions
        (this cache's own, an HB prefetch and the versions the attempt carried first; the
        other holders asked in parallel)."""
        got: Dict[str, Version] = {}
        by_holder: Dict[str, List[str]] = {}
        for key, entry in wanted.items():
            parts = self.temp.matching(attempt, key, entry.vc)
            if prefetch:
                parts += self.temp.matching(prefetch, key, entry.vc)
            if carried and key in carried:
                parts += [v for v in carried[key] if supersedes(entry.vc, v.vc)]
            merged = _merge_all(parts)
            if merged is not None and merged.vc == dict(entry.vc):
                got[key] = merged
                if carried and key in carried:
                    self.stats["carried_hits"] += 1
                continue
            for h in entry.holders:
                if h != self.address:
                    by_holder.setdefault(h, []).append(key)
            if merged is not None:
                got[key] = merged
        if by_holder:
            self.stats["remote_fetches"] += 1
            w = RepliesWait(self._awaiting, deadline)
            for holder, keys in by_holder.items():
                rid = f"{self._rid_prefix}-{next(self._ids)}"
                request = pb.CacheRequest(request_id=rid, op=pb.CAUSAL_TEMP_GET,
                                          attempt_id=attempt)
                vs.into(request, "versions", {k: wanted[k] for k in keys})
                w.expect(rid, holder, keys)
                self._io.append(AskCache(holder, request))
            yield from self._ops.wait(w)
            for rid, response in w.answers.items():
                if response.status != pb.OK:
                    holder, keys = w.asked[rid]
                    raise RemoteUnavailable(response.message or
                                            f"fetching {keys[:5]} from the cache at {holder}")
            for response in w.answers.values():
                for e in response.entries:
                    v = Version.deserialize(e.key, e.lattice)
                    got[e.key] = v if e.key not in got else merge_versions(got[e.key], v)
        for key, entry in wanted.items():
            if key not in got or got[key].vc != dict(entry.vc):
                raise RemoteUnavailable(f"could not rebuild version {dict(entry.vc)} of {key!r} "
                                        f"from its holders {sorted(entry.holders)}")
        return got

    # ---- OPT: CAUSAL_BIND ----
    @staticmethod
    def _upstream(req: pb.CacheRequest) -> Upstream:
        contexts = [(vs.from_proto(c.snapshot), vs.from_proto(c.read_set), c.abort,
                     c.abort_reason) for c in req.upstreams]
        fetches = max((c.remote_fetches for c in req.upstreams), default=0)
        if not contexts:
            return False, "", {}, {}, fetches, []
        if len(contexts) == 1:
            s, r, a, why = contexts[0]
            return a, why, s, r, fetches, []
        a, why, s, r = parallel_flow(contexts)
        return a, why, s, r, fetches, (parallel_stale(contexts) if a else [])

    def _plan(self, req: pb.CacheRequest, up: Upstream, absent: Set[str] = frozenset()
              ) -> LinearPlan:
        abort, why, s_u, r_u, _, stale = up
        keys = [k for k in req.keys if k not in absent]
        plan = plan_linear(s_u, r_u, keys, self._dag_keys(req), self.keeper.cut,
                           abort=abort, reason=why)
        if stale:
            plan.stale = stale
        return plan

    def _bind(self, req: pb.CacheRequest) -> Generator:
        deadline = self._deadline(req)
        yield from self._session_floors(req, list(req.keys) + list(req.dag_keys), deadline)
        if req.refresh:
            yield from self._refresh(req, deadline)
        up = self._upstream(req)
        plan = self._plan(req, up)
        if plan.need_update and not plan.abort:
            absent = yield from self._ensure(plan.need_update, deadline)
            plan = self._plan(req, up, absent)
            if plan.need_update:     # exposed, then gone again: bind without them
                plan = self._plan(req, up, absent | set(plan.need_update))
        fetched: Dict[str, Version] = {}
        fetches = up[4]
        if plan.remote and not plan.abort:
            try:
                fetched = yield from self._remote(req.attempt_id, plan.remote, deadline,
                                                  req.prefetch_attempt,
                                                  unpack(req.upstreams, plan.remote))
            except (RemoteUnavailable, StageTimeout) as e:
                # the upstream versions are gone (the attempt was released: HB's early abort)
                # or unreachable: the attempt cannot continue, the scheduler decides what next
                plan.abort, plan.reason = True, f"upstream versions unavailable: {e}"
            fetches += 1
        return self._bind_finish(req, plan, up, fetched, fetches)

    def _bind_finish(self, req: pb.CacheRequest, plan: LinearPlan, up: Upstream,
                     fetched: Dict[str, Version], fetches: int) -> Answer:
        response = pb.CacheResponse()
        frames: List[bytes] = []
        self.stats["binds"] += 1
        if plan.abort:
            self.stats["aborts"] += 1
            response.abort = True
            response.abort_reason = plan.reason
            response.stale_keys.extend(plan.stale)
            return response, frames
        expires = self._deadline(req) + TEMP_SLACK
        self.keeper.lru.touch(plan.local)
        cut = self.keeper.cut
        carry = Carried() if req.carry_versions else None
        only = frozenset(req.carry_keys)     # empty: every key (a worker that names none)
        for key in plan.s_d:
            v = cut.get(key)
            if v is not None:
                self.temp.add(req.attempt_id, v, expires)
                if carry is not None and (not only or key in only):
                    carry.add(key, v.serialize())   # what a downstream cache would ask for
        if carry:
            response.context.carried.extend(carry.to_proto())
        r_d, s_new, r_new = finish_linear(plan, up[2], up[3], fetched, self.address)
        for key in req.keys:
            self._entry(req, response, key, r_d.get(key), frames)
        vs.into(response.context, "snapshot", s_new)
        vs.into(response.context, "read_set", r_new)
        response.context.remote_fetches = fetches
        return response, frames

    # ---- CT / CON: CAUSAL_READ ----
    def _read(self, req: pb.CacheRequest) -> Generator:
        deadline = self._deadline(req)
        if req.refresh:
            yield from self._refresh(req, deadline)
        attempt = req.attempt_id
        expires = deadline + TEMP_SLACK
        temp = self.temp
        if attempt not in temp and req.snapshot_required:
            # a commit binds on the snapshot its call read; a new cut here would give the
            # commit a newer base than what the call saw, dominating writes it never read
            raise self._fenced(attempt, "its snapshot is gone (released or expired), and a "
                               "commit never binds on a new one")
        if attempt not in temp:
            # CT (4.3.1): one snapshot of the local cut for the DAG's whole read set
            wanted = sorted(set(req.dag_keys) | set(req.keys))
            yield from self._session_floors(req, wanted, deadline)
            yield from self._ensure(wanted, deadline)
            self.keeper.lru.touch(wanted)
            if attempt not in temp:
                temp.open(attempt, expires)
                temp.note_requested(attempt, wanted)
                cut = self.keeper.cut
                for key in wanted:
                    v = cut.get(key)
                    if v is not None:
                        temp.add(attempt, v, expires)
        response = pb.CacheResponse()
        frames: List[bytes] = []
        views = {k: temp.view(attempt, k) for k in req.keys}
        # only keys this cache was asked to bind are read from the snapshot: the others may
        # be kept here as part of some S_i (Algorithm 9) without having been reconciled with
        # the union S (Algorithm 10 fetches only what each R_i needs). Absent and asked for:
        # the KVS has no such key. Never asked for (another function's key, or one read at
        # run time): outside this snapshot.
        outside = [k for k in views if not temp.was_requested(attempt, k)]
        if outside:
            admitted = None
            if req.explore:       # keys read at run time meet the session's floors too
                yield from self._session_floors(req, outside, deadline)
                admitted = yield from self._explore(attempt, outside, deadline, expires)
            if admitted is None:
                response.abort = True
                response.abort_reason = f"read of {outside} outside the call's snapshot"
                response.new_keys.extend(outside)
                return response, frames
            views.update(admitted)
        for key in req.keys:
            self._entry(req, response, key, views.get(key), frames)
        return response, frames

    def _explore(self, attempt: str, keys: List[str], deadline: float,
                 expires: float) -> Generator:
        """Admit keys into an attempt's snapshot when the cut's versions are consistent with
        it (Algorithm 6 with S_u = R_u = the snapshot, no remote repair); None otherwise."""
        absent = yield from self._ensure(keys, deadline)
        temp = self.temp
        snap = vs.of_versions(v for v in (temp.view(attempt, k) for k in temp.keys(attempt))
                              if v is not None)
        plan = plan_linear(snap, snap, [k for k in keys if k not in absent], None,
                           self.keeper.cut)
        if plan.abort or plan.remote or plan.need_update:
            return None
        out: Dict[str, Optional[Version]] = {k: None for k in absent}
        temp.note_requested(attempt, keys)
        for key, v in plan.local.items():
            temp.add(attempt, v, expires)
            out[key] = v
        return out

    # ---- CON / HB: CAUSAL_SNAPSHOT, CAUSAL_FETCH ----
    def _snapshot(self, req: pb.CacheRequest) -> Generator:
        deadline = self._deadline(req)
        yield from self._session_floors(req, list(req.keys) + list(req.dag_keys), deadline)
        yield from self._ensure(list(req.keys), deadline)
        expires = deadline + TEMP_SLACK
        cut = self.keeper.cut
        self.keeper.lru.touch(req.keys)
        pieces, s_i = create_snapshot(list(req.keys), self._dag_keys(req), cut, self.address)
        self.temp.open(req.attempt_id, expires)
        self.temp.note_requested(req.attempt_id, req.keys)
        for key in s_i:
            v = cut.get(key)
            if v is not None:
                self.temp.add(req.attempt_id, v, expires)
        response = pb.CacheResponse()
        for key in req.keys:
            piece = pieces.get(key)
            if piece is None:
                continue
            p = response.pieces.add()
            p.local.key = key
            p.local.vc.update(piece.local.vc)
            p.local.holders.append(self.address)
            vs.into(p, "cut", {k: vs.Entry(e.vc, frozenset([self.address]))
                              for k, e in piece.cut.items()})
        return response, []

    def _fetch_into(self, req: pb.CacheRequest) -> Generator:
        deadline = self._deadline(req)
        got = yield from self._remote(req.attempt_id, vs.from_proto(req.versions), deadline)
        expires = deadline + TEMP_SLACK
        for v in got.values():
            self.temp.add(req.attempt_id, v, expires)
        return pb.CacheResponse(), []

    # ---- dependency-metadata GC (4.2.3) ----
    def _gc_report(self, req: pb.CacheRequest) -> None:
        """The keys some held version depends on, and every clock this cache holds (its cut
        and its temporary versions, which in-flight calls read)."""
        dep_keys, held = self.keeper.gc_report()
        held += self.temp.all_versions()
        response = pb.CacheResponse()
        response.dep_keys.extend(dep_keys)
        for v in held:
            response.held.add(key=v.key).vc.update(v.vc)
        self._answer(req, response)

    def _gc_apply(self, req: pb.CacheRequest) -> None:
        self.keeper.gc_apply({kv.key: dict(kv.vc) for kv in req.versions})
        self._answer(req, pb.CacheResponse())
        self._ops.resume_ready()


def _entry_meta(version: Version) -> bytes:
    """A `CacheEntry` holding only `version`'s key, clock and dependencies, serialized (an
    answer's entry merges it in)."""
    e = pb.CacheEntry()
    e.version.key = version.key
    e.version.vc.update(version.vc)
    for dep_key, dep_vc in version.deps.items():
        e.deps.add(key=dep_key).vc.update(dep_vc)
    return e.SerializeToString()


def _merge_all(parts: Sequence[Version]) -> Optional[Version]:
    out = None
    for p in parts:
        out = p if out is None else merge_versions(out, p)
    return out
