"""HydroCache's service half: the causal operations of a node cache (thin; the logic is pure).

Contract: `HydroCacheService` is driven by the executor node (`executor/node.py`). The node's
loop thread calls `handle(request)` for every CAUSAL_* `CacheRequest` and `on_update(key,
lattice)` for every MULTI_CAUSAL value Anna pushes; work that needs I/O (Anna fetches, other
caches' temporary versions, commits) runs on the node's fetch pool. The cut, its upkeep
(local cut update, refresh, capacity, dependency GC) and the lock are `hydrocache.keeper`'s.
- CAUSAL_BIND (OPT, Algorithms 8 and 6): upstream contexts -> parallel flow -> linear flow;
  keys only upstream caches hold are fetched from their holders (CAUSAL_TEMP_GET) or from an
  HB prefetch; the reply carries the bound versions (values as frames), S_new and R_new, or
  `abort` with the reason (and the stale keys a retry should re-read).
- CAUSAL_READ (CT, CON): reads the attempt's snapshot; under CT the first read builds it from
  the cut for every key of R~_DAG (4.3.1). Only keys this cache was asked to bind are served.
  Under CT (`explore`: this cache holds the whole snapshot) a key outside it is admitted if
  the linear flow check against the snapshot admits the cut's version without remote
  versions; otherwise (and always under CON, whose snapshot spans caches that cannot see each
  other's explorations) the reply aborts with `new_keys` and the scheduler retries with the
  read set extended (4.3.6).
- CAUSAL_SNAPSHOT (Algorithm 9), CAUSAL_FETCH (Algorithm 10 line 14, HB prefetch),
  CAUSAL_TEMP_GET (cache to cache), CAUSAL_RELEASE, CAUSAL_COMMIT (the sink's versions are
  written to Anna, then offered to the cut, then acknowledged), CAUSAL_GC_REPORT / APPLY.
- Requests that need no I/O are answered on the loop thread. Large values carry a tag, and
  one the requester already holds is not resent (`hydrocache/copies.py`).
Every failure is answered with a status and a message naming this cache; nothing is dropped
silently.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

import anna_core
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from runtime.rpc import await_reply, cache_reply
from runtime.sockets import PushCache

from . import versionset as vs
from .copies import ValueTags
from .keeper import DEFAULT_TIMEOUT, CutKeeper, NotCausal, StageTimeout, _send, _ThreadState
from .protocols import (create_snapshot, finish_linear, parallel_flow, parallel_stale,
                        plan_linear)
from .version import Version, merge_versions

__all__ = ["HydroCacheService", "StageTimeout", "NotCausal"]

log = logging.getLogger("hydrocache.service")

TEMP_SLACK = 30.0          # seconds temporary versions outlive their requester's deadline


class HydroCacheService(CutKeeper):
    """The causal half of one node cache; see the module contract."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._seq = 0
        self._tags = ValueTags()
        self._tags_lock = threading.Lock()

    def _entry(self, req: pb.CacheRequest, response: pb.CacheResponse, key: str,
               version: Optional[Version], frames: List[bytes]) -> None:
        """One entry; a large value the requester holds under the same tag is not resent."""
        e = response.entries.add(key=key, found=version is not None)
        if version is None:
            return
        e.version.key = key
        e.version.vc.update(version.vc)
        for dep_key, dep_vc in version.deps.items():
            d = e.deps.add(key=dep_key)
            d.vc.update(dep_vc)
        with self._tags_lock:
            e.tag = self._tags.tag(version, sum(len(v) for v in version.values))
        if e.tag and req.have.get(key) == e.tag:
            e.unchanged = True
            return
        e.value_count = len(version.values)
        frames.extend(version.values)

    def handle(self, req: pb.CacheRequest) -> None:
        op = req.op
        try:
            if op == pb.CAUSAL_TEMP_GET:
                return self._temp_get(req)
            if op == pb.CAUSAL_RELEASE:
                with self._lock:
                    self.temp.release(req.attempt_id)
                return _send(self._push, req.response_address,
                             pb.CacheResponse(request_id=req.request_id, responder=self.address))
            if op == pb.CAUSAL_GC_REPORT:
                return self._gc_report(req)
            if op == pb.CAUSAL_GC_APPLY:
                return self._gc_apply(req)
            if op == pb.CAUSAL_BIND and not req.refresh and self._bind_inline(req):
                return
            if op == pb.CAUSAL_READ and not req.refresh and self._read_inline(req):
                return
            if op == pb.CAUSAL_SNAPSHOT and self._snapshot_inline(req):
                return
        except Exception as e:
            return self._fail(self._push, req, e)
        handler = {pb.CAUSAL_BIND: self._bind, pb.CAUSAL_READ: self._read,
                   pb.CAUSAL_SNAPSHOT: self._snapshot, pb.CAUSAL_FETCH: self._fetch_into,
                   pb.CAUSAL_COMMIT: self._commit}.get(op)
        if handler is None:
            return self._fail(self._push, req, ValueError(f"unknown cache op {op}"))
        self._submit(self._in_pool, handler, req)

    # ---- helpers ----
    def _in_pool(self, handler: Callable, req: pb.CacheRequest) -> None:
        state = self._state()
        try:
            response, frames = handler(req, state)
        except Exception as e:
            return self._fail(state.push, req, e)
        response.request_id = req.request_id
        response.responder = self.address
        _send(state.push, req.response_address, response, frames)

    def _fail(self, push: PushCache, req: pb.CacheRequest, error: Exception) -> None:
        what = pb.CacheOp.Name(req.op) if req.op in pb.CacheOp.values() else str(req.op)
        response = pb.CacheResponse(request_id=req.request_id, responder=self.address)
        if isinstance(error, StageTimeout):
            response.status = pb.TIMEOUT
            response.stage = f"{error.stage} (node cache {self.node_id})"
        else:
            response.status = pb.EXECUTION_ERROR
            if not isinstance(error, (NotCausal, anna_core.AnnaError)):
                log.warning("%s of attempt %s failed", what, req.attempt_id, exc_info=error)
        response.message = f"node cache {self.node_id}: {what} failed: {error}"
        _send(push, req.response_address, response)

    @staticmethod
    def _deadline(req: pb.CacheRequest) -> float:
        return time.monotonic() + (req.timeout if req.timeout > 0 else DEFAULT_TIMEOUT)

    @staticmethod
    def _dag_keys(req: pb.CacheRequest) -> Optional[Set[str]]:
        return set(req.dag_keys) if req.dag_keys_known else None

    # ---- cache to cache ----
    def _temp_get(self, req: pb.CacheRequest) -> None:
        response = pb.CacheResponse(request_id=req.request_id, responder=self.address)
        with self._lock:
            for kv in req.versions:
                for v in self.temp.matching(req.attempt_id, kv.key, kv.vc):
                    response.entries.add(key=kv.key, found=True, lattice=v.serialize())
        _send(self._push, req.response_address, response)

    def _remote(self, state: _ThreadState, attempt: str, wanted: vs.VersionSet,
                deadline: float, prefetch: str = "") -> Dict[str, Version]:
        """The versions named by `wanted`, rebuilt from their holders' temporary versions
        (this cache's own, and an HB prefetch, first)."""
        got: Dict[str, Version] = {}
        by_holder: Dict[str, List[str]] = {}
        with self._lock:
            for key, entry in wanted.items():
                parts = self.temp.matching(attempt, key, entry.vc)
                if prefetch:
                    parts += self.temp.matching(prefetch, key, entry.vc)
                merged = _merge_all(parts)
                if merged is not None and merged.vc == dict(entry.vc):
                    got[key] = merged
                    continue
                for h in entry.holders:
                    if h != self.address:
                        by_holder.setdefault(h, []).append(key)
                if merged is not None:
                    got[key] = merged
        if by_holder:
            self.stats["remote_fetches"] += 1
        for holder, keys in by_holder.items():
            self._seq += 1
            rid = f"{uuid.uuid4().hex[:8]}-{self._seq}"
            request = pb.CacheRequest(request_id=rid, response_address=state.reply_address,
                                      op=pb.CAUSAL_TEMP_GET, attempt_id=attempt)
            request.versions.extend(vs.to_proto({k: wanted[k] for k in keys}))
            state.push.send(holder, "cache", request)
            response = self._await(state, rid, deadline,
                                   f"fetching {keys[:5]} from the cache at {holder}")
            for e in response.entries:
                v = Version.deserialize(e.key, e.lattice)
                got[e.key] = v if e.key not in got else merge_versions(got[e.key], v)
        for key, entry in wanted.items():
            if key not in got or got[key].vc != dict(entry.vc):
                raise RuntimeError(f"could not rebuild version {dict(entry.vc)} of {key!r} "
                                   f"from its holders {sorted(entry.holders)}")
        return got

    def _await(self, state: _ThreadState, rid: str, deadline: float,
               stage: str) -> pb.CacheResponse:
        got = await_reply(state.reply, rid, deadline, cache_reply)
        if got is None:
            raise StageTimeout(stage)
        response = got[0]
        if response.status != pb.OK:
            raise RuntimeError(response.message or stage)
        return response

    # ---- OPT: CAUSAL_BIND ----
    def _upstream(self, req: pb.CacheRequest):
        contexts = [(vs.from_proto(c.snapshot), vs.from_proto(c.read_set), c.abort, c.abort_reason)
                    for c in req.upstreams]
        fetches = max((c.remote_fetches for c in req.upstreams), default=0)
        if not contexts:
            return False, "", {}, {}, fetches, []
        if len(contexts) == 1:
            s, r, a, why = contexts[0]
            return a, why, s, r, fetches, []
        a, why, s, r = parallel_flow(contexts)
        return a, why, s, r, fetches, (parallel_stale(contexts) if a else [])

    def _plan(self, req: pb.CacheRequest, absent: Set[str] = frozenset()):
        abort, why, s_u, r_u, fetches, stale = self._upstream(req)
        keys = [k for k in req.keys if k not in absent]
        with self._lock:
            plan = plan_linear(s_u, r_u, keys, self._dag_keys(req), self.cut,
                               abort=abort, reason=why)
        if stale:
            plan.stale = stale
        return plan, s_u, r_u, fetches

    def _bind_inline(self, req: pb.CacheRequest) -> bool:
        plan, s_u, r_u, fetches = self._plan(req)
        if plan.need_update or (plan.remote and not plan.abort):
            return False
        response, frames = self._bind_finish(req, plan, s_u, r_u, {}, fetches)
        response.request_id = req.request_id
        response.responder = self.address
        _send(self._push, req.response_address, response, frames)
        return True

    def _bind(self, req: pb.CacheRequest, state: _ThreadState):
        deadline = self._deadline(req)
        self._refresh(state, req)
        plan, s_u, r_u, fetches = self._plan(req)
        if plan.need_update and not plan.abort:
            absent = self.ensure(state, plan.need_update, deadline)
            plan, s_u, r_u, fetches = self._plan(req, absent)
            if plan.need_update:   # exposed, then evicted or still pending: bounded retry
                plan, s_u, r_u, fetches = self._plan(req, absent | set(plan.need_update))
        fetched: Dict[str, Version] = {}
        if plan.remote and not plan.abort:
            try:
                fetched = self._remote(state, req.attempt_id, plan.remote, deadline,
                                       req.prefetch_attempt)
            except (RuntimeError, StageTimeout) as e:
                # the upstream versions are gone (the attempt was released: HB's early abort)
                # or unreachable: the attempt cannot continue, the scheduler decides what next
                plan.abort, plan.reason = True, f"upstream versions unavailable: {e}"
            fetches += 1
        return self._bind_finish(req, plan, s_u, r_u, fetched, fetches)

    def _bind_finish(self, req, plan, s_u, r_u, fetched, fetches):
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
        with self._lock:
            self._touch(plan.local)
            for key in plan.s_d:
                v = self.cut.get(key)
                if v is not None:
                    self.temp.add(req.attempt_id, v, expires)
        r_d, s_new, r_new = finish_linear(plan, s_u, r_u, fetched, self.address)
        for key in req.keys:
            self._entry(req, response, key, r_d.get(key), frames)
        response.context.snapshot.extend(vs.to_proto(s_new))
        response.context.read_set.extend(vs.to_proto(r_new))
        response.context.remote_fetches = fetches
        return response, frames

    # ---- CT / CON: CAUSAL_READ ----
    def _read_inline(self, req: pb.CacheRequest) -> bool:
        with self._lock:
            if req.attempt_id not in self.temp and req.explore:
                # CT's first read: when the cut already holds every key of R~_DAG (and none
                # waits for dependencies) the snapshot needs no I/O: take it here
                wanted = set(req.dag_keys) | set(req.keys)
                pending = self.cut.pending_keys()
                if any(k not in self.cut or k in pending for k in wanted):
                    return False
                expires = self._deadline(req) + TEMP_SLACK
                self._touch(wanted)
                self.temp.open(req.attempt_id, expires)
                self.temp.note_requested(req.attempt_id, wanted)
                for key in wanted:
                    self.temp.add(req.attempt_id, self.cut.get(key), expires)
            if req.attempt_id not in self.temp or not all(
                    self.temp.was_requested(req.attempt_id, k) for k in req.keys):
                return False
            views = {k: self.temp.view(req.attempt_id, k) for k in req.keys}
        if any(v is None for v in views.values()):
            return False
        response = pb.CacheResponse(request_id=req.request_id, responder=self.address)
        frames: List[bytes] = []
        for key in req.keys:
            self._entry(req, response, key, views[key], frames)
        _send(self._push, req.response_address, response, frames)
        return True

    def _read(self, req: pb.CacheRequest, state: _ThreadState):
        deadline = self._deadline(req)
        self._refresh(state, req)
        attempt = req.attempt_id
        expires = deadline + TEMP_SLACK
        with self._lock:
            exists = attempt in self.temp
        if not exists:
            # CT (4.3.1): one snapshot of the local cut for the DAG's whole read set
            wanted = set(req.dag_keys) | set(req.keys)
            self.ensure(state, wanted, deadline)
            with self._lock:
                self._touch(wanted)
                if attempt not in self.temp:
                    self.temp.open(attempt, expires)
                    self.temp.note_requested(attempt, wanted)
                    for key in wanted:
                        v = self.cut.get(key)
                        if v is not None:
                            self.temp.add(attempt, v, expires)
        response = pb.CacheResponse()
        frames: List[bytes] = []
        with self._lock:
            views = {k: self.temp.view(attempt, k) for k in req.keys}
            present = set(self.temp.keys(attempt))
            # only keys this cache was asked to bind are read from the snapshot: the others
            # may be kept here as part of some S_i (Algorithm 9) without having been
            # reconciled with the union S (Algorithm 10 fetches only what each R_i needs).
            # Absent and asked for: the KVS has no such key. Never asked for (another
            # function's key, or one read at run time): outside this snapshot.
            outside = [k for k in views if not self.temp.was_requested(attempt, k)]
        if outside:
            admitted = self._explore(state, attempt, outside, present, deadline, expires) \
                if req.explore else None
            if admitted is None:
                response.abort = True
                response.abort_reason = f"read of {outside} outside the call's snapshot"
                response.new_keys.extend(outside)
                return response, frames
            views.update(admitted)
        for key in req.keys:
            self._entry(req, response, key, views.get(key), frames)
        return response, frames

    def _explore(self, state, attempt, keys, present, deadline, expires):
        """Admit keys into an attempt's snapshot when the cut's versions are consistent with
        it (Algorithm 6 with S_u = R_u = the snapshot, no remote repair); None otherwise."""
        absent = self.ensure(state, keys, deadline)
        with self._lock:
            snap = vs.of_versions(v for v in (self.temp.view(attempt, k) for k in present)
                                  if v is not None)
            plan = plan_linear(snap, snap, [k for k in keys if k not in absent], None, self.cut)
            if plan.abort or plan.remote or plan.need_update:
                return None
            out: Dict[str, Optional[Version]] = {k: None for k in absent}
            self.temp.note_requested(attempt, keys)
            for key, v in plan.local.items():
                self.temp.add(attempt, v, expires)
                out[key] = v
        return out

    # ---- CON / HB: CAUSAL_SNAPSHOT, CAUSAL_FETCH ----
    def _snapshot_inline(self, req: pb.CacheRequest) -> bool:
        """Algorithm 9 on the loop thread when every key is already in the cut."""
        with self._lock:
            pending = self.cut.pending_keys()
            if any(k not in self.cut or k in pending for k in req.keys):
                return False
        response, frames = self._snapshot(req, None)
        response.request_id = req.request_id
        response.responder = self.address
        _send(self._push, req.response_address, response, frames)
        return True

    def _snapshot(self, req: pb.CacheRequest, state: Optional[_ThreadState]):
        deadline = self._deadline(req)
        if state is not None:
            self.ensure(state, list(req.keys), deadline)
        expires = deadline + TEMP_SLACK
        response = pb.CacheResponse()
        with self._lock:
            self._touch(req.keys)
            pieces, s_i = create_snapshot(list(req.keys), self._dag_keys(req), self.cut,
                                          self.address)
            self.temp.open(req.attempt_id, expires)
            self.temp.note_requested(req.attempt_id, req.keys)
            for key in s_i:
                v = self.cut.get(key)
                if v is not None:
                    self.temp.add(req.attempt_id, v, expires)
        for key in req.keys:
            piece = pieces.get(key)
            if piece is None:
                continue
            p = response.pieces.add()
            p.local.key = key
            p.local.vc.update(piece.local.vc)
            p.local.holders.append(self.address)
            p.cut.extend(vs.to_proto({k: vs.Entry(e.vc, frozenset([self.address]))
                                      for k, e in piece.cut.items()}))
        return response, []

    def _fetch_into(self, req: pb.CacheRequest, state: _ThreadState):
        deadline = self._deadline(req)
        wanted = vs.from_proto(req.versions)
        got = self._remote(state, req.attempt_id, wanted, deadline)
        expires = deadline + TEMP_SLACK
        with self._lock:
            for v in got.values():
                self.temp.add(req.attempt_id, v, expires)
        return pb.CacheResponse(), []

    # ---- the sink: CAUSAL_COMMIT ----
    def _commit(self, req: pb.CacheRequest, state: _ThreadState):
        versions = []
        for raw in req.writes:
            t = anna_pb2.KeyTuple.FromString(raw)
            version = Version.deserialize(t.key, t.payload)
            with self._lock:
                versions.append(self._collected(version))
        for v in versions:
            state.kvs.put(v.key, v.lattice)
        with self._changed:
            for v in versions:
                self._account(self.cut.offer(v).exposed)   # already collected (below)
            self._changed.notify_all()
        for v in versions:
            self._subscribe(state, v.key)
        response = pb.CacheResponse()
        for v in versions:
            response.entries.add(key=v.key, found=True)
        return response, []


def _merge_all(parts: Sequence[Version]) -> Optional[Version]:
    out = None
    for p in parts:
        out = p if out is None else merge_versions(out, p)
    return out
