"""One function invocation of a causal call, as its worker sees it (hydrocache/DESIGN.md).

Contract: `CausalInvocation(cache, schedule, upstreams, timeout)` binds the
function's reads through the node cache and remembers them:
- `bind(keys)`: under OPT a CAUSAL_BIND with the upstream contexts (Algorithms 8 and 6 run in
  the cache); under CT/CON a CAUSAL_READ of the attempt's snapshot. Keys read later by
  `lib.get` are bound the same way, with this invocation's own S/R as the one upstream context.
  A key outside the call's known read set (4.3.6) aborts under OPT and CON (upstream
  snapshots were restricted to the known keys, or span caches that cannot see each other's
  reads), and is admitted under CT when it fits the node's snapshot; the retry knows it. An
  abort raises `CausalAbortError` (with the new keys, or the stale ones, when that was why).
- `value(key, concurrent)`: the bound version's first value (sorted, deterministic), or all of
  them with `concurrent=True`; a key Anna does not have is `None`. Repeated reads of a key
  return the same version (repeatable read: it is bound once per invocation and the protocols
  keep it equal across functions). A key written earlier in the call reads its buffered value.
- `put(key, bytes)` buffers the write; buffered writes travel downstream in
  `CausalContext.writes` and are committed at the sink (`commit`, 4.2.2): the worker's
  `hydrocache.writer.ExecutorWriter` makes them mutually dependent and dependent on the
  whole read set, and the node cache writes them to Anna before the result is sent, once
  the call's scheduler granted the commit (one per call). A written key read upstream
  inherits the dependencies of the version read, which the upstream functions sent down
  (`read_deps`); only without them (a context from an older worker) does the sink re-bind the
  key, on the call's own snapshot only (`snapshot_required`): a snapshot gone by then (the
  attempt was released) fails the commit with `Fenced`, like a commit not granted; the writer
  then forgets the versions it built (nothing was written).
- `context()` is what goes downstream (`Trigger.causal`): S_new, R_new, writes, fetch count,
  and (not from a sink) the carried versions of S and the read dependencies
  (`hydrocache/carried.py`). A function whose transitive downstream functions on another
  cache read keys asks its cache for its versions of S_d of those keys only (`carry_versions`,
  `carry_keys`; `carried.carry_plan`), and passes on the received versions only of keys a
  downstream function reads; a bind sends the cache only the carried versions of the keys it
  binds, less those the upstream snapshot says that cache alone holds (`worth_sending`),
  and none of the upstream contexts' writes or read dependencies (the cache reads neither).
Parallel upstream contexts of a function that reads nothing are validated here with
`hydrocache.protocols.parallel_flow` (pure), saving a cache round trip.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from faas.errors import CloudburstError
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from hydrocache import versionset as vs
from hydrocache.carried import Carried, ReadDeps, carry_plan, worth_sending
from hydrocache.protocols import parallel_flow, parallel_stale
from hydrocache.session import Floors
from hydrocache.writer import ExecutorWriter

from .cache_client import CausalRead, Fenced

__all__ = ["CausalInvocation", "CausalAbortError"]

_MISSING = object()


class CausalAbortError(CloudburstError):
    """The attempt must abort (validation failed or the read set grew)."""

    def __init__(self, reason: str, new_keys: Sequence[str] = (),
                 stale_keys: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.new_keys = list(new_keys)
        self.stale_keys = list(stale_keys)


class CausalInvocation:
    """The causal state of one function invocation; see the module contract."""

    def __init__(self, cache: Any, schedule: pb.Schedule,
                 upstreams: Sequence[pb.CausalContext], timeout: float) -> None:
        self.cache = cache
        self.schedule = schedule
        self.plan: pb.CausalPlan = schedule.causal
        self.timeout = max(0.05, timeout)
        self.upstreams = list(upstreams)
        # S and R as the cache sent them (KeyVersion lists), decoded only when read here: an
        # OPT function that only binds passes them downstream as received (`context`)
        self._snapshot: Optional[vs.VersionSet] = {}
        self._read_set: Optional[vs.VersionSet] = {}
        self._snapshot_pb: Any = None
        self._read_set_pb: Any = None
        self._floors: Optional[Floors] = None    # the caller's session, indexed on first use
        self.bound: Dict[str, Optional[CausalRead]] = {}
        self.writes: Dict[str, bytes] = {}
        self.remote_fetches = max((c.remote_fetches for c in upstreams), default=0)
        # what goes down with the context besides S and R: the upstream caches' versions of
        # S (a downstream cache then asks no holder) and the dependencies of each version
        # read (the sink then binds no key again); hydrocache/carried.py
        self.carried = Carried()
        self.read_deps = ReadDeps()
        for c in upstreams:             # in upstream order; a later branch's write wins
            self.writes.update(c.writes)
            self.carried.extend(c.carried)
            self.read_deps.extend(c.read_deps)
        # ask the cache for its versions of S_d only of keys a downstream function on another
        # cache reads, and pass on only what some downstream function reads (carry_plan)
        self._carry_ask, self._carry_keep = (frozenset(), frozenset()) if schedule.sink \
            else carry_plan(schedule)
        self._carry = bool(self._carry_ask) if self._carry_ask is not None \
            else not schedule.sink and len(set(self.plan.caches.values())) > 1
        if self.plan.protocol != pb.OPT:
            for c in upstreams:
                self.read_set = vs.union(self.read_set, vs.from_proto(c.read_set))
        self._first_bind = True

    # ---- S and R: decoded on first use ----
    @property
    def snapshot(self) -> vs.VersionSet:
        if self._snapshot is None:
            self._snapshot = vs.from_proto(self._snapshot_pb)
        return self._snapshot

    @snapshot.setter
    def snapshot(self, value: vs.VersionSet) -> None:
        self._snapshot, self._snapshot_pb = value, None

    @property
    def read_set(self) -> vs.VersionSet:
        if self._read_set is None:
            self._read_set = vs.from_proto(self._read_set_pb)
        return self._read_set

    @read_set.setter
    def read_set(self, value: vs.VersionSet) -> None:
        self._read_set, self._read_set_pb = value, None

    def _received(self, context: pb.CausalContext) -> None:
        """S and R are `context`'s, kept as received until something here reads them."""
        self._snapshot, self._snapshot_pb = None, context.snapshot
        self._read_set, self._read_set_pb = None, context.read_set

    def _snapshot_proto(self, out: Any) -> None:
        out.extend(self._snapshot_pb if self._snapshot is None
                   else vs.to_proto(self._snapshot))

    def _read_set_proto(self, out: Any) -> None:
        out.extend(self._read_set_pb if self._read_set is None
                   else vs.to_proto(self._read_set))

    # ---- binding reads ----
    def bind(self, keys: Sequence[str]) -> None:
        keys = [k for k in dict.fromkeys(keys) if k not in self.bound]
        if not keys and not self._first_bind:
            return
        if self.plan.protocol == pb.OPT and self.plan.dag_keys_known:
            # the upstream snapshots were restricted to R~_DAG (Algorithm 7 line 10), so they
            # say nothing about other keys: a key outside it cannot be validated. Abort; the
            # retry knows the key (4.3.6: the read set is explored, attempt by attempt)
            known = set(self.plan.dag_keys)
            new = [k for k in keys if k not in known and k not in self.read_set]
            if new:
                raise CausalAbortError(f"read of {new} outside the call's known read set",
                                       new_keys=new)
        if self.plan.protocol == pb.OPT:
            self._bind_opt(keys)
        elif keys:
            self._read(keys)
        self._first_bind = False

    def _dag_keys(self, req: pb.CacheRequest, keys: Sequence[str]) -> None:
        dag_keys = set(self.plan.dag_keys)
        req.dag_keys.extend(sorted(dag_keys))
        req.dag_keys_known = self.plan.dag_keys_known and all(k in dag_keys for k in keys)
        if self.schedule.HasField("session"):     # the caller's floors (read-your-writes)
            if self._floors is None:
                self._floors = Floors(self.schedule.session)
            req.session.CopyFrom(self._floors.restrict(list(keys) + sorted(dag_keys)))

    def _bind_opt(self, keys: Sequence[str]) -> None:
        if self._first_bind:
            contexts = self.upstreams
        else:
            own = pb.CausalContext(remote_fetches=self.remote_fetches)
            self._snapshot_proto(own.snapshot)
            self._read_set_proto(own.read_set)
            contexts = [own]
        if not keys and len(contexts) == 1:
            self._received(contexts[0])
            return
        if not keys:
            # nothing to read: only the parallel flow check (Algorithm 8) is left
            parsed = [(vs.from_proto(c.snapshot), vs.from_proto(c.read_set), c.abort,
                       c.abort_reason) for c in contexts]
            abort, reason, s, r = parallel_flow(parsed) if parsed else (False, "", {}, {})
            if abort:
                raise CausalAbortError(reason, stale_keys=parallel_stale(parsed))
            self.snapshot, self.read_set = s, r
            return
        req = pb.CacheRequest(op=pb.CAUSAL_BIND, attempt_id=self.schedule.call_id, keys=keys,
                              prefetch_attempt=self.plan.snapshot_attempt
                              if self.plan.requested == pb.HB else "",
                              carry_versions=self._carry)
        if self._carry and self._carry_ask is not None:
            req.carry_keys.extend(sorted(self._carry_ask))
        req.upstreams.extend(contexts)
        for c in req.upstreams:     # what the cache reads of them: S, R, the abort flag, the
            del c.carried[:]        # fetch count and (below) the carried versions it may use;
            del c.read_deps[:]      # the writes and read dependencies go downstream only
            c.writes.clear()
        if self.carried:    # the cache rebuilds versions only of the keys it binds, and
            # those its upstream snapshot says it holds alone come from its own
            req.upstreams[0].carried.extend(self.carried.to_proto(worth_sending(
                contexts, keys, self.plan.caches.get(self.schedule.function, ""))))
        req.refresh.extend(self.plan.refresh_keys)
        self._dag_keys(req, keys)
        response, found = self.cache.causal(req, timeout=self.timeout)
        if response.abort:
            raise CausalAbortError(response.abort_reason or "validation failed",
                                   stale_keys=response.stale_keys)
        self._received(response.context)
        self.remote_fetches = max(self.remote_fetches, response.context.remote_fetches)
        self.carried.extend(response.context.carried)
        self._note_deps(response)
        for k in keys:
            self.bound[k] = found.get(k)

    def _read(self, keys: Sequence[str], snapshot_required: bool = False) -> None:
        req = pb.CacheRequest(op=pb.CAUSAL_READ, attempt_id=self.plan.snapshot_attempt
                              or self.schedule.call_id, keys=keys,
                              explore=self.plan.protocol == pb.CT,
                              snapshot_required=snapshot_required)
        self._dag_keys(req, keys)
        response, found = self.cache.causal(req, timeout=self.timeout)
        if response.abort:
            raise CausalAbortError(response.abort_reason or "read outside the snapshot",
                                   response.new_keys)
        self._note_deps(response)
        for k in keys:
            hit = found.get(k)
            self.bound[k] = hit
            if hit is not None:
                self.read_set = vs.union(self.read_set, {k: vs.Entry(hit.clock)})

    def _note_deps(self, response: pb.CacheResponse) -> None:
        """Remember the dependencies of every version bound (they go downstream as sent)."""
        for e in response.entries:
            if e.found:
                self.read_deps.note(e.key, e.deps)

    # ---- what the function sees ----
    def value(self, key: str, concurrent: bool = False) -> Any:
        """The bound values of `key` (bytes-like), `None` if the KVS has no such key."""
        if key in self.writes:
            return [self.writes[key]] if concurrent else self.writes[key]
        if key not in self.bound:
            self.bind([key])
        hit = self.bound.get(key)
        if hit is None:
            return None
        return list(hit.values) if concurrent else hit.values[0]

    def read_clocks(self) -> Dict[str, Dict[str, int]]:
        return {k: hit.clock for k, hit in self.bound.items() if hit is not None}

    def put(self, key: str, value: bytes) -> None:
        self.writes[key] = value

    # ---- downstream and sink ----
    def context(self) -> pb.CausalContext:
        out = pb.CausalContext(remote_fetches=self.remote_fetches)
        self._snapshot_proto(out.snapshot)
        self._read_set_proto(out.read_set)
        for k, v in self.writes.items():
            out.writes[k] = v
        if not self.schedule.sink:
            out.carried.extend(self.carried.to_proto(self._carry_keep))
            out.read_deps.extend(self.read_deps.to_proto())
        return out

    def commit(self, writer: ExecutorWriter, extra: Optional[Dict[str, bytes]] = None
               ) -> List[Any]:
        """Write the call's buffered writes (and `extra`, e.g. the output key) atomically."""
        writes = dict(self.writes)
        writes.update(extra or {})
        if not writes:
            return []
        # a new version of a key inherits the dependencies of the version read (transitive
        # causality, hydrocache/writer.py): the upstream functions that read a key sent them
        # down (`read_deps`); a key read upstream without them (an older worker) is bound
        # here to learn them, on the call's own snapshot (never a newer one: its clock would
        # become the base)
        read_deps = {k: self.read_deps.get(k) for k in writes
                     if k not in self.bound and k in self.read_set and k in self.read_deps}
        unbound = [k for k in writes if k in self.read_set and k not in self.bound
                   and k not in read_deps]
        if unbound and self.plan.protocol != pb.OPT:
            self._read(unbound, snapshot_required=True)
        elif unbound:
            self.bind(unbound)
        read_deps.update({k: self.bound[k].deps for k in writes
                          if self.bound.get(k) is not None})
        versions = writer.commit(writes, self.read_set, read_deps, record=False)
        req = pb.CacheRequest(op=pb.CAUSAL_COMMIT, attempt_id=self.schedule.call_id,
                              keys=[v.key for v in versions],
                              grant_address=self.schedule.scheduler_address)
        for v in versions:
            req.writes.append(anna_pb2.KeyTuple(key=v.key, lattice_type=anna_pb2.MULTI_CAUSAL,
                                                payload=v.serialize()).SerializeToString())
        try:
            self.cache.causal(req, timeout=self.timeout)
        except Fenced:
            raise                       # refused before anything was written
        except BaseException:
            writer.record(versions)     # outcome unknown: a later write must not drop these
            raise
        writer.record(versions)
        return versions

