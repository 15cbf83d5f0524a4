"""The node cache's causal state and its upkeep (thin; the logic is the pure cut).

Contract: `CutKeeper` holds one node cache's strict causal cut (`hydrocache.cut`), its
temporary versions (`hydrocache.temp`) and the lock that guards both (never held across I/O),
and keeps the cut current; `hydrocache.service.HydroCacheService` adds the protocol
operations on top of it.
- Local cut update (4.2, `ensure`): a key missing from the cut is fetched from Anna,
  subscribed, and offered to the cut; dependencies the cut reports missing are fetched until
  they are superseded. A waiting request is woken by every change of the cut and re-reads
  Anna at growing intervals (Anna's replicas may lag); at its deadline it fails with
  `StageTimeout` naming the stage and the dependencies still missing. A key holding another
  lattice type raises `NotCausal`.
- Refresh (`on_update`): a version Anna pushes is offered the same way; one the cut already
  has is dropped before it is decoded; dependencies this cache never read are fetched (the
  others arrive with Anna's pushes). `_refresh` re-reads keys an aborted attempt read too old.
- Capacity (`capacity_bytes`, values' bytes): when the cut holds more, `sweep` evicts the
  least recently used keys, each with every key depending on it (eviction keeps the cut a
  cut); pushed versions of evicted keys are ignored unless a pending version needs them.
  `sweep` also drops expired temporary versions.
- Dependency-metadata GC (4.2.3): CAUSAL_GC_REPORT answers every clock the cache holds of a
  key that some held version depends on (cut and temporary versions: in-flight calls read
  those); CAUSAL_GC_APPLY merges a frontier that every Anna replica and every cache
  supersedes and drops the dependencies it supersedes from the cut and from every version
  fetched, pushed or committed later (so less metadata is stored and shipped).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set

import zmq

import anna_core
from runtime.sockets import PushCache, bind_pull
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb

from .cut import StrictCausalCut
from .gc import collect
from .temp import TempStore
from .vclock import merge, supersedes
from .version import Version

__all__ = ["CutKeeper", "StageTimeout", "NotCausal", "DEFAULT_TIMEOUT"]

log = logging.getLogger("hydrocache.service")

DEFAULT_TIMEOUT = 10.0


class StageTimeout(Exception):
    """A protocol stage did not finish before the request's deadline."""

    def __init__(self, stage: str) -> None:
        super().__init__(f"timed out in {stage}")
        self.stage = stage


class NotCausal(Exception):
    """A key read causally holds another lattice type (e.g. an LWW value)."""


def _send(push: PushCache, address: str, response: pb.CacheResponse,
          frames: Sequence[Any] = ()) -> None:
    if address:
        push.send_with_frames(address, "cache_reply", response, frames)


class _ThreadState(threading.local):
    kvs: Any = None
    push: Any = None
    reply: Any = None
    reply_address: str = ""


class CutKeeper:
    """One node cache's causal state; see the module contract."""

    def __init__(self, node_id: str, address: str, update_address: str, kvs_address: str,
                 context: zmq.Context, submit: Callable[..., Any], push: PushCache,
                 ip: str = "127.0.0.1", capacity_bytes: int = 2 << 30) -> None:
        self.node_id = node_id
        self.address = address
        self.update_address = update_address
        self.kvs_address = kvs_address
        self.ip = ip
        self._context = context
        self._submit = submit
        self._push = push                     # the loop thread's
        self.cut = StrictCausalCut()
        self.temp = TempStore()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._subscribed: Set[str] = set()
        self._local = _ThreadState()
        self._resources: List[Any] = []
        self.capacity_bytes = capacity_bytes
        self._sizes: Dict[str, int] = {}
        self._bytes = 0
        self._lru: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self._frontier: Dict[str, Dict[str, int]] = {}
        self._catching_up = False
        self.stats = {"binds": 0, "remote_fetches": 0, "aborts": 0, "anna_fetches": 0}

    # ---- lifecycle ----
    def close(self) -> None:
        for r in self._resources:
            try:
                r.close() if not isinstance(r, zmq.Socket) else r.close(0)
            except Exception:
                pass

    def keys(self) -> Iterable[str]:
        with self._lock:
            return self.cut.keys()

    def keyset_version(self) -> int:
        return self.cut.keyset_version

    def sweep(self, now: float) -> List[str]:
        """Expire temporary versions; evict over capacity. Returns the evicted keys."""
        with self._lock:
            self.temp.expire(now)
            evicted: List[str] = []
            while self._bytes > self.capacity_bytes and self._lru:
                key, _ = self._lru.popitem(last=False)
                for k in self.cut.evict(key) | {key}:
                    self._bytes -= self._sizes.pop(k, 0)
                    self._lru.pop(k, None)
                    self._subscribed.discard(k)
                    evicted.append(k)
        if evicted:
            log.info("evicted %d keys (capacity %d bytes)", len(evicted), self.capacity_bytes)
        return evicted

    def _account(self, exposed: Iterable[str]) -> None:
        """Caller holds the lock: sizes and recency of newly exposed versions."""
        for k in exposed:
            v = self.cut.get(k)
            size = sum(len(x) for x in v.values) if v is not None else 0
            self._bytes += size - self._sizes.get(k, 0)
            self._sizes[k] = size
            self._lru[k] = None
            self._lru.move_to_end(k)

    def _touch(self, keys: Iterable[str]) -> None:
        """Caller holds the lock."""
        for k in keys:
            if k in self._lru:
                self._lru.move_to_end(k)

    # ---- inputs from the node's loop ----
    def on_update(self, key: str, lattice: Any) -> None:
        """A version pushed by Anna (refresh): offered to the cut like a fetched one."""
        with self._lock:
            base = self.cut.get(key)
            if base is not None and supersedes(base.vc, lattice.vector_clock):
                return      # nothing new (e.g. this cache's own commit, pushed back)
            if base is None and key not in self.cut.pending_keys() \
                    and key not in self.cut.missing():
                return      # evicted since it was subscribed; nobody needs it now
        version = self._collected(Version.from_lattice(key, lattice))
        with self._changed:
            self._account(self.cut.offer(version).exposed)
            self._changed.notify_all()
            # dependencies this cache never read are not pushed to it: fetch them, or the
            # key would keep showing its old version until someone reads them (the others
            # arrive with Anna's next pushes)
            unknown = [d for d in version.deps if d not in self.cut
                       and d not in self.cut.pending_keys()] if key in self.cut.pending_keys() \
                else []
            catch_up = bool(unknown) and not self._catching_up
            if catch_up:
                self._catching_up = True
        if catch_up:
            self._submit(self._catch_up, unknown)

    def _catch_up(self, keys: List[str]) -> None:
        state = self._state()
        try:
            for _ in range(10):                       # bounded: dependencies of dependencies
                for dep in keys:
                    v = self._fetch_anna(state, dep)
                    if v is not None:
                        self._offer(v)
                with self._lock:
                    pending = self.cut.pending_keys()
                    keys = [d for d in self.cut.missing()
                            if d not in self.cut and d not in pending]
                if not keys:
                    return
        except Exception as e:
            log.warning("fetching dependencies of pushed versions failed: %s", e)
        finally:
            with self._lock:
                self._catching_up = False

    def _state(self) -> _ThreadState:
        s = self._local
        if s.kvs is None:
            s.kvs = anna_core.Client(self.kvs_address, timeout=5.0, ip=self.ip,
                                     context=self._context)
            s.push = PushCache(self._context)
            s.reply, s.reply_address = bind_pull(self._context, self.ip)
            with self._lock:
                self._resources.extend([s.kvs, s.push, s.reply])
        return s

    # ---- local cut update (4.2) ----
    def _fetch_anna(self, state: _ThreadState, key: str) -> Optional[Version]:
        self.stats["anna_fetches"] += 1
        try:
            lattice = state.kvs.get_lattice(key)
        except anna_core.KeyNotFound:
            return None
        if lattice.lattice_type != anna_pb2.MULTI_CAUSAL:
            raise NotCausal(f"key {key!r} holds a {type(lattice).__name__}, not a causal value "
                            f"(write it with consistency='causal')")
        self._subscribe(state, key)
        return Version.from_lattice(key, lattice)

    def _subscribe(self, state: _ThreadState, key: str) -> None:
        with self._lock:
            if key in self._subscribed:
                return
            self._subscribed.add(key)
        try:
            state.kvs.subscribe(key, self.update_address)
        except anna_core.AnnaError as e:
            log.warning("could not subscribe to %r: %s", key, e)
            with self._lock:
                self._subscribed.discard(key)

    def _offer(self, version: Version) -> None:
        with self._changed:
            self._account(self.cut.offer(self._collected(version)).exposed)
            self._changed.notify_all()

    def _collected(self, version: Version) -> Version:
        """Caller may hold the lock: `version` without the dependencies the GC frontier
        supersedes (4.2.3)."""
        return collect(version, self._frontier) if self._frontier else version

    # ---- dependency-metadata GC (4.2.3) ----
    def _gc_report(self, req: pb.CacheRequest) -> None:
        """Every clock this cache holds of a key some held version depends on (its cut and
        its temporary versions, which in-flight calls read), and those keys."""
        response = pb.CacheResponse(request_id=req.request_id, responder=self.address)
        with self._lock:
            dep_keys: Set[str] = set()
            for k in self.cut.keys():
                dep_keys.update(self.cut.get(k).deps)
            for v in self.cut.pending().values():
                dep_keys.update(v.deps)
            held = [v for k in dep_keys for v in ([self.cut.get(k)] if k in self.cut else [])]
            held += [v for v in self.temp.all_versions() if v.key in dep_keys]
        response.dep_keys.extend(sorted(dep_keys))
        for v in held:
            response.held.add(key=v.key).vc.update(v.vc)
        _send(self._push, req.response_address, response)

    def _gc_apply(self, req: pb.CacheRequest) -> None:
        frontier = {kv.key: dict(kv.vc) for kv in req.versions}
        with self._changed:
            for k, vc in frontier.items():
                self._frontier[k] = merge(self._frontier.get(k, {}), vc)
            before = self.cut.pending_keys()
            changed = self.cut.collect(self._frontier)
            self._account(k for k in before if k in self.cut)
            self._changed.notify_all()
        self.stats["gc_collected"] = self.stats.get("gc_collected", 0) + changed
        _send(self._push, req.response_address,
              pb.CacheResponse(request_id=req.request_id, responder=self.address))

    def ensure(self, state: _ThreadState, keys: Iterable[str], deadline: float) -> Set[str]:
        """Bring `keys` into the cut; returns the keys Anna does not have."""
        keys = list(dict.fromkeys(keys))
        absent: Set[str] = set()
        with self._lock:
            todo = [k for k in keys if k not in self.cut and k not in self.cut.pending_keys()]
        for k in todo:
            v = self._fetch_anna(state, k)
            if v is None:
                absent.add(k)
            else:
                self._offer(v)
        pause = 0.001
        while True:
            with self._lock:
                waiting = [k for k in keys if k not in absent and k not in self.cut]
                missing = self.cut.missing() if waiting else {}
            if not waiting:
                return absent
            if time.monotonic() > deadline:
                raise StageTimeout(f"the local cut update of {waiting[:5]}: dependencies "
                                   f"{dict(list(missing.items())[:5])} not yet in Anna")
            for dep in list(missing):
                v = self._fetch_anna(state, dep)
                if v is not None:
                    self._offer(v)
            with self._changed:
                if any(k not in self.cut for k in waiting):
                    self._changed.wait(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)

    def _refresh(self, state: _ThreadState, req: pb.CacheRequest) -> None:
        """Re-read from Anna the keys an earlier attempt read too old (OPT retries): without
        this a retry within Anna's push period would see the same stale cut and abort again."""
        with self._lock:
            keys = [k for k in req.refresh if k in self.cut or k in self.cut.pending_keys()]
        for k in keys:
            v = self._fetch_anna(state, k)
            if v is not None:
                self._offer(v)
        # a fresh version may wait for dependencies (e.g. written together with other keys):
        # fetch them too, for at most a fifth of the request's time (then bind what there is)
        deadline = time.monotonic() + 0.2 * (req.timeout if req.timeout > 0 else DEFAULT_TIMEOUT)
        while time.monotonic() < deadline:
            with self._lock:
                if not any(k in self.cut.pending_keys() for k in keys):
                    return
                missing = list(self.cut.missing())
            for dep in missing:
                v = self._fetch_anna(state, dep)
                if v is not None:
                    self._offer(v)
            with self._changed:
                if any(k in self.cut.pending_keys() for k in keys):
                    self._changed.wait(0.005)

