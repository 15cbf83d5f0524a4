"""The node cache's plain (last-writer-wins) service: the I/O around the pure `LwwCache`.

Contract: `LwwCacheService(config, context, credentials, auth, update_address, pool)` serves
the CACHE_GET and CACHE_PUT requests of the node's workers (`handle(request)`) and the LWW
updates Anna pushes (`on_update(key, lattice)`, `on_deleted(key)`), on the node's loop
thread and its fetch threads (`runtime.fairpool.FairPool`, shared with HydroCache). What to
keep, subscribe and evict is decided by `executor/cache.py`; this module only carries it out:
- A GET hit is answered at once from memory (a copy older than the caller's session floor
  is a miss). The misses of one GET are fetched in parallel, in bounded pieces (at most
  `MISS_PIECE` keys each) on the fetch threads, which take turns between requests: a GET of
  many missing keys never holds up another request's miss by more than one piece per fetch
  thread. A read with a session floor reads the key at least that new
  (`executor/fresh_read.py`). A key newly cached is subscribed at `update_address`, then read
  once more (a write between the read and the subscription taking effect is never pushed);
  every key the bounds evict is unsubscribed, and subscribed again once that is acknowledged
  if it was cached again meanwhile (`LwwCache.unsubscribed`).
- A PUT is written through to Anna (an LWW lattice with this node's timestamp, acknowledged
  by `config.write_quorum` replicas) and admitted to the cache before it is acknowledged; a
  lattice PUT is merged in Anna and not cached.
- Registry keys (`config.uncached_prefix`) and lattices other than LWW are read from Anna
  every time, never cached; an LWW read of a causal key is an error saying so.
- Every answer is one `cache_reply` with each value as its own frame; a large value the
  worker already holds (same tag) is not resent (`hydrocache/copies.py`). Anna errors reach
  the worker as a failed `CacheResponse` naming the node and the key; every request gets an
  answer.
- `kvs()` is the calling thread's `anna_core.Client` of the node (one per thread, made by
  `make_client`, by default a client of `kvs_address` with the node's keys); `keys()`
  and `keyset_version` are the cache's; `close()` (once the fetch threads have stopped)
  closes every thread's client and push sockets.
Thread-safe: the cache is used under one lock, Anna is called outside it.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

import zmq

import anna_core
from anna_core.wire import MonotoneClock
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from hydrocache.copies import ValueTags
from hydrocache.session import Floors
from runtime.fairpool import pieces
from runtime.sockets import PushCache
from faas.values import CAUSAL_LATTICES

from .cache import LwwCache
from .cache_gather import Gather, Lattice
from .fresh_read import read_at_least

__all__ = ["LwwCacheService", "MISS_PIECE", "send_reply"]

log = logging.getLogger("cloudburst.node")

MISS_PIECE = 32     # keys of a GET's misses fetched by one fetch-thread turn


def send_reply(push: PushCache, address: str, response: pb.CacheResponse,
               values: List[bytes]) -> None:
    """A `cache_reply`: the response, then each found value as its own frame."""
    push.send_with_frames(address, "cache_reply", response, values)


class LwwCacheService:
    """The plain node cache's I/O; see the module contract."""

    def __init__(self, node_id: str, kvs_address: Any, *, context: zmq.Context,
                 credentials: Any, auth: Any, update_address: str, ip: str,
                 submit: Callable[..., None], fetch_threads: int, write_quorum: Any,
                 push: PushCache, uncached_prefix: str, max_bytes: int,
                 max_entries: int, make_client: Optional[Callable[[], Any]] = None) -> None:
        self.node_id = node_id
        self._context, self._credentials = context, credentials
        self._update_address = update_address
        self._submit, self._fetch_threads = submit, max(1, fetch_threads)
        self._quorum = write_quorum
        self._push = push                 # the node loop's (this thread's) push sockets
        self._uncached = uncached_prefix
        self.cache = LwwCache(max_bytes, max_entries)
        self._lock = threading.Lock()
        self._clock = MonotoneClock()
        self._local = threading.local()
        self._clients: List[Any] = []     # every thread's Anna client and push sockets
        self._make_client = make_client or (lambda: anna_core.Client(
            kvs_address, timeout=5.0, ip=ip, context=context, auth=auth))
        self._tags = ValueTags()
        self._tags_lock = threading.Lock()

    # ---- what the node asks ----
    @property
    def keyset_version(self) -> int:
        return self.cache.keyset_version

    def keys(self) -> List[str]:
        with self._lock:
            return sorted(self.cache.keys())

    def kvs(self) -> Any:
        """This thread's Anna client of the node."""
        return self._thread_state().kvs

    def handle(self, req: pb.CacheRequest) -> None:
        """A CACHE_GET (answered now, or once its misses are fetched) or CACHE_PUT."""
        if req.op == pb.CACHE_PUT:
            self._submit(object(), self._put_in_thread, req)     # its own turn
            return
        floors = Floors(req.session) if req.HasField("session") else None
        with self._lock:          # a copy older than the session's floor is a miss
            values, stamps = self.cache.lookup(req.keys, floors)
        found = dict(zip(req.keys, values))
        if all(v is not None for v in values):
            response, frames = self._answer_get(req, found, stamps)
            send_reply(self._push, req.response_address, response, frames)
            return
        # misses are fetched in parallel in bounded pieces, this request taking turns
        # with every other on the fetch threads; the last piece to finish answers
        gather = Gather(req, found, stamps, floors)
        for piece in pieces(gather.missing, self._fetch_threads, MISS_PIECE):
            self._submit(gather, self._fetch_for, gather, piece)

    def on_update(self, key: str, lattice: Any) -> None:
        """An LWW value Anna pushed for `key`."""
        with self._lock:
            pushed = self.cache.pushed(key, lattice)
        stale = pushed.evicted + ((key,) if pushed.unsubscribe else ())
        if stale:         # Anna is called on a fetch thread, never on the node's loop
            self._submit(object(), lambda: self._unsubscribe(stale, self.kvs()))

    def on_deleted(self, key: str) -> None:
        with self._lock:
            self.cache.deleted(key)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for c in clients:
            c.close()

    # ---- on the fetch threads ----
    def _thread_state(self) -> Any:
        state = self._local
        if not hasattr(state, "kvs"):
            state.kvs = self._make_client()
            state.push = PushCache(self._context, auth=self._credentials)
            with self._lock:
                self._clients.extend((state.kvs, state.push))
        return state

    def _fetch_for(self, gather: Gather, keys: List[str]) -> None:
        state = self._thread_state()
        for key in keys:
            try:
                (value, stamp), error = self._fetch(state.kvs, key, gather.floors), None
            except Exception as e:
                value, stamp, error = None, None, e
            if gather.record(key, value, error, stamp):
                self._answer_gathered(state, gather)

    def _answer_gathered(self, state: Any, gather: Gather) -> None:
        """Every miss of `gather` is fetched: answer its GET."""
        req = gather.request
        if gather.error is not None:
            log.warning("cache request %s failed: %s", req.request_id, gather.error)
            return send_reply(state.push, req.response_address,
                              self._failed(req, str(gather.error)), [])
        try:
            response, frames = self._answer_get(req, gather.values, gather.stamps)
        except Exception as e:      # never leave the worker waiting for an answer
            log.exception("answering cache request %s failed", req.request_id)
            response, frames = self._failed(req, f"{type(e).__name__}: {e}"), []
        send_reply(state.push, req.response_address, response, frames)

    def _failed(self, req: pb.CacheRequest, message: str) -> pb.CacheResponse:
        return pb.CacheResponse(request_id=req.request_id, status=pb.EXECUTION_ERROR,
                                message=f"node cache {self.node_id}: {message}")

    def _answer_get(self, req: pb.CacheRequest, values: Dict[str, Optional[bytes]],
                    stamps: Dict[str, Optional[int]]) -> "tuple[pb.CacheResponse, List[bytes]]":
        """A GET's answer; a large value the worker already holds (same tag) is not resent."""
        response = pb.CacheResponse(request_id=req.request_id)
        frames: List[bytes] = []
        for k in req.keys:
            v = values.get(k)
            e = response.entries.add(key=k, found=v is not None)
            if v is None:
                continue
            if isinstance(v, Lattice):
                e.lattice_type, e.value_count = v.lattice_type, 1
                frames.append(v.payload)
                continue
            e.timestamp = stamps.get(k) or 0
            with self._tags_lock:
                e.tag = self._tags.tag(v, len(v))
            if e.tag and req.have.get(k) == e.tag:
                e.unchanged = True
            else:
                e.value_count = 1
                frames.append(v)
        return response, frames

    def _put_in_thread(self, req: pb.CacheRequest) -> None:
        """A CACHE_PUT: written through to Anna, then into the cache, then acknowledged."""
        state = self._thread_state()
        response = pb.CacheResponse(request_id=req.request_id)
        try:
            if len(req.values) != len(req.keys):
                raise ValueError(f"PUT of {len(req.keys)} keys with {len(req.values)} values")
            for key, value in zip(req.keys, req.values):
                if req.lattice_type:          # merged in Anna; not cached here (see _fetch)
                    state.kvs.put(key, anna_core.deserialize(req.lattice_type, value),
                                  quorum=self._quorum)
                    response.entries.add(key=key, found=True)
                    continue
                with self._lock:
                    lattice = anna_core.LWWLattice(self._clock.next(), value)
                state.kvs.put(key, lattice, quorum=self._quorum)
                self._admit(state.kvs, key, lattice)
                response.entries.add(key=key, found=True, timestamp=lattice.timestamp)
        except Exception as e:
            log.warning("cache request %s failed: %s", req.request_id, e)
            response = self._failed(req, str(e))
        send_reply(state.push, req.response_address, response, [])

    def _fetch(self, kvs: Any, key: str, floors: Optional[Floors] = None
               ) -> "tuple[Optional[bytes], Optional[int]]":
        """(value, its LWW timestamp) read from Anna: at least as new as the session's
        floor, if any."""
        if floors is None:
            try:
                lattice = kvs.get_lattice(key)
            except anna_core.KeyNotFound:
                return None, None
        else:
            floor, own = floors.floor(key)
            lattice = read_at_least(kvs, key, floor, own, floors.merged(key),
                                    floors.deleted(key))
            if lattice is None:
                return None, None
        if key.startswith(self._uncached) and lattice.lattice_type == anna_pb2.LWW:
            return lattice.reveal(), None   # the registry: read from Anna every time, never cached
        if lattice.lattice_type in CAUSAL_LATTICES:
            raise TypeError(f"key {key!r} holds a causal value: read it in a causal call "
                            f"(consistency='causal')")
        if lattice.lattice_type != anna_pb2.LWW:
            # a lattice merged by `put(key, lattice)`: read from Anna every time, never cached
            # here, so a reader sees every merge that reached the replica it reads
            return Lattice(lattice.lattice_type, lattice.serialize()), None
        admitted = self._admit(kvs, key, lattice)
        return admitted.value, admitted.timestamp

    def _admit(self, kvs: Any, key: str, lattice: Any) -> Any:
        """Admit a value read or written; subscribe and unsubscribe as the cache says."""
        with self._lock:
            admitted = self.cache.admit(key, lattice)
        self._unsubscribe(admitted.evicted, kvs)
        if admitted.subscribe:
            self._subscribe(kvs, key)
        return admitted

    def _subscribe(self, kvs: Any, key: str) -> None:
        try:
            kvs.subscribe(key, self._update_address)
        except anna_core.AnnaError as e:
            log.warning("could not subscribe to %r: %s", key, e)
            with self._lock:
                self.cache.subscribe_failed(key)
            return
        # A write between the read that led here and the subscription taking effect is
        # never pushed: read the key once more and merge it.
        try:
            lattice = kvs.get_lattice(key)
        except anna_core.KeyNotFound:
            return
        except anna_core.AnnaError as e:
            log.warning("could not re-read %r after subscribing: %s", key, e)
            return
        if lattice.lattice_type == anna_pb2.LWW:
            with self._lock:
                pushed = self.cache.pushed(key, lattice)
            self._unsubscribe(pushed.evicted, kvs)

    def _unsubscribe(self, keys: Sequence[str], kvs: Any) -> None:
        """Stop Anna's pushes of keys the cache no longer holds; a key cached again
        meanwhile is subscribed again (its subscription may have reached Anna first)."""
        for key in keys:
            try:
                kvs.unsubscribe(key, self._update_address)
            except anna_core.AnnaError as e:   # its pushes are ignored (not subscribed)
                log.warning("could not unsubscribe from %r: %s", key, e)
            with self._lock:
                again = self.cache.unsubscribed(key)
            if again:
                self._subscribe(kvs, key)
