"""HydroCache's service: the I/O around the pure core (`hydrocache.node_cache.NodeCache`).

Contract: `HydroCacheService` runs inside the executor node's event loop (`executor/node.py`)
and only moves bytes; every decision is the core's. Everything it does to the core happens on
the loop thread, so the core needs no lock:
- The loop hands it every CAUSAL_* `CacheRequest` (`handle(request)`) and every MULTI_CAUSAL
  value Anna pushes (`on_update(key, lattice)`), polls its `sockets` and calls
  `on_readable(socket)` when one has input, calls `tick(now)` every iteration (and wakes up by
  `next_wakeup()` at the latest), and `sweep(now)` every heartbeat (temporary versions,
  capacity).
- Replies go out on the loop's `PushCache` as `cache_reply` messages (values as raw frames).
- Requests to other caches (CAUSAL_TEMP_GET) go out on the loop's `PushCache` too, answered
  to this service's own reply socket; answers are fed to the core as they arrive (a request
  that cannot be sent is answered at once with an error naming the peer).
- Anna's client is blocking, so reads, writes and subscriptions run on the node's fetch pool
  (`submit(owner, fn, *args)`, a `runtime.fairpool.FairPool` that takes turns between
  owners), one `anna_core.Client` per pool thread. The I/O of one core step is one owner, and
  its reads and subscriptions go in bounded pieces (`PIECE` keys), so a step that misses many
  keys holds up another step's I/O by at most one piece per pool thread. A pool thread does
  the I/O only: it appends the results to a queue and wakes the loop through an inproc
  socket; the loop feeds the core. An operation that needs no I/O never leaves the loop
  thread.
Failures reach the requester as the core's typed answers (TIMEOUT naming the stage, or
EXECUTION_ERROR naming this cache); an I/O error becomes the core's input, never a silent drop.
Durability: a commit's versions are written with the node's write quorum
(`NodeConfig.write_quorum`, "all" by default: every replica of each key's current placement,
in every tier, acknowledged it), so an acknowledged commit survives the crash of any replica.
A replica that stays silent makes the write ask routing again (a dead node is removed within
Anna's heartbeat timeout) and retry until the client's deadline; then `anna_core.Timeout`
names the key and the replicas, and the core fails the commit with it (or with TIMEOUT
naming the stage, when the request's own deadline comes first).
Authentication (`runtime.auth`): with `auth` (the node's cluster credentials) the reply
socket admits only cluster keys and the pool threads' pushes are CURVE clients; `kvs_auth` is
the identity its `anna_core.Client`s use (the KVS shares the cluster's key directory).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from typing import Any, Callable, Iterable, List, Optional, Tuple

import zmq

import anna_core
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import AuthConfig, Credentials
from runtime.fairpool import pieces
from .replies import cache_reply
from runtime.sockets import PushCache, bind_pull

from .actions import AskCache, FetchKey, PutVersions, Step, Subscribe
from .node_cache import NodeCache, NotCausal, StageTimeout

__all__ = ["HydroCacheService", "StageTimeout", "NotCausal"]

log = logging.getLogger("hydrocache.service")

_BATCH = 1000              # messages taken from one socket per readiness
PIECE = 32                 # keys read (or subscribed) from Anna in one pool turn


class _ThreadState(threading.local):
    kvs: Any = None
    push: Any = None


class HydroCacheService:
    """The I/O of one node cache's causal side; see the module contract."""

    def __init__(self, node_id: str, address: str, update_address: str, kvs_address: str,
                 context: zmq.Context, submit: Callable[..., Any], push: PushCache,
                 ip: str = "127.0.0.1", capacity_bytes: int = 2 << 30,
                 ipc_dir: Optional[str] = None, auth: Optional[Credentials] = None,
                 kvs_auth: Optional[AuthConfig] = None,
                 write_quorum: anna_core.config.WriteQuorum = anna_core.config.ALL) -> None:
        self.node_id = node_id
        self.write_quorum = anna_core.check_write_quorum(write_quorum)
        self.address = address
        self.update_address = update_address
        self.kvs_address = kvs_address
        self.ip = ip
        self.core = NodeCache(node_id, address, capacity_bytes)
        self._context = context
        self._submit = submit
        self._push = push                     # the loop thread's
        self._auth = auth
        self._kvs_auth = kvs_auth
        self._replies, self.reply_address = bind_pull(context, ip, ipc_dir=ipc_dir, auth=auth)
        self._wake = context.socket(zmq.PULL)
        self._wake.setsockopt(zmq.LINGER, 0)
        self.wake_address = f"inproc://hydrocache-{uuid.uuid4().hex}"
        self._wake.bind(self.wake_address)
        self._results: "collections.deque[Tuple[Any, ...]]" = collections.deque()
        self._local = _ThreadState()
        self._resources: List[Any] = []
        self._resources_lock = threading.Lock()

    # ---- the loop's calls ----
    @property
    def sockets(self) -> Tuple[zmq.Socket, zmq.Socket]:
        return self._replies, self._wake

    @property
    def stats(self) -> dict:
        return self.core.stats

    def keys(self) -> Iterable[str]:
        return self.core.keys()

    def keyset_version(self) -> int:
        return self.core.keyset_version()

    def handle(self, req: pb.CacheRequest) -> None:
        self._carry(self.core.handle(req, time.monotonic()))

    def on_update(self, key: str, lattice: Any) -> None:
        self._carry(self.core.on_pushed(key, lattice, time.monotonic()))

    def on_readable(self, socket: Any) -> None:
        if socket is self._replies:
            self._take_replies()
        elif socket is self._wake:
            self._take_results()

    def tick(self, now: float) -> None:
        wakeup = self.core.next_wakeup()
        if wakeup is not None and now >= wakeup:
            self._carry(self.core.tick(now))

    def next_wakeup(self) -> Optional[float]:
        return self.core.next_wakeup()

    def sweep(self, now: float) -> List[str]:
        evicted = self.core.sweep(now)
        if evicted:
            log.info("evicted %d keys (capacity %d bytes)", len(evicted),
                     self.core.lru.capacity)
        return evicted

    def close(self) -> None:
        """After the pool has stopped: close every socket and client this service made."""
        with self._resources_lock:
            resources, self._resources = self._resources, []
        for r in resources:
            try:
                r.close()
            except Exception:
                pass
        self._replies.close(0)
        self._wake.close(0)

    # ---- carrying out the core's steps (loop thread) ----
    def _carry(self, step: Step) -> None:
        push = self._push
        for r in step.replies:
            push.send_with_frames(r.address, "cache_reply", r.response, r.frames)
        owner = object()                  # this step's I/O takes one turn at a time
        fetches: List[str] = []
        subscribes: List[str] = []
        for action in step.io:
            kind = type(action)
            if kind is FetchKey:
                fetches.append(action.key)
            elif kind is Subscribe:
                subscribes.append(action.key)
            elif kind is PutVersions:
                self._spawn(owner, self._put, action.token, action.versions)
            elif kind is AskCache:
                self._ask(action)
            else:
                raise TypeError(f"unknown HydroCache action {action!r}")
        for piece in pieces(fetches, 1, PIECE):
            self._spawn(owner, self._fetch, piece)
        for piece in pieces(subscribes, 1, PIECE):
            self._spawn(owner, self._subscribe, piece)

    def _ask(self, action: AskCache) -> None:
        request = action.request
        request.response_address = self.reply_address
        if not self._push.send(action.address, "cache", request):
            failed = pb.CacheResponse(request_id=request.request_id, status=pb.EXECUTION_ERROR,
                                      message=f"the cache at {action.address} is not accepting "
                                              f"requests")
            self._carry(self.core.on_cache_reply(failed, time.monotonic()))

    def _take_replies(self) -> None:
        for _ in range(_BATCH):
            try:
                frames = self._replies.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                _, (response, _) = cache_reply(frames)
            except Exception as e:
                log.warning("dropped a malformed cache reply: %s", e)
                continue
            self._carry(self.core.on_cache_reply(response, time.monotonic()))

    def _take_results(self) -> None:
        while True:
            try:
                self._wake.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
        core = self.core
        while self._results:
            kind, *args = self._results.popleft()
            now = time.monotonic()
            if kind == "fetched":
                step = core.on_fetched(args[0], args[1], now, args[2])
            elif kind == "put":
                step = core.on_put(args[0], now, args[1])
            elif kind == "pushed":
                step = core.on_pushed(args[0], args[1], now)
            else:
                step = core.on_subscribe_failed(args[0], now)
            self._carry(step)

    def _spawn(self, owner: Any, fn: Callable[..., None], *args: Any) -> None:
        try:
            self._submit(owner, fn, *args)
        except RuntimeError:          # the pool is shutting down with the node
            log.debug("dropped %s%r: the fetch pool has stopped", fn.__name__, args)

    # ---- Anna I/O (pool threads: I/O only, results handed back to the loop) ----
    def _kvs(self) -> Any:
        s = self._local
        if s.kvs is None:
            s.kvs = anna_core.Client(self.kvs_address, timeout=5.0, ip=self.ip,
                                     context=self._context, auth=self._kvs_auth)
            with self._resources_lock:
                self._resources.append(s.kvs)
        return s.kvs

    def _hand_back(self, *items: Tuple[Any, ...]) -> None:
        """Queue results for the loop thread and wake it (every pool task ends here, so the
        core never waits for an answer that cannot come)."""
        self._results.extend(items)
        s = self._local
        if s.push is None:
            s.push = PushCache(self._context, auth=self._auth)
            with self._resources_lock:
                self._resources.append(s.push)
        s.push.send_frame(self.wake_address, b"")

    def _fetch(self, keys: List[str]) -> None:
        results = []
        for key in keys:
            lattice, error = None, None
            try:
                lattice = self._kvs().get_lattice(key)
            except anna_core.KeyNotFound:
                pass
            except Exception as e:
                error = e
            results.append(("fetched", key, lattice, error))
        self._hand_back(*results)

    def _subscribe(self, keys: List[str]) -> None:
        results = []
        for key in keys:
            result = self._subscribe_one(key)
            if result is not None:
                results.append(result)
        if results:
            self._hand_back(*results)

    def _subscribe_one(self, key: str) -> Optional[Tuple[Any, ...]]:
        try:
            self._kvs().subscribe(key, self.update_address)
        except Exception as e:
            log.warning("could not subscribe to %r: %s", key, e)
            return ("subscribe_failed", key)
        # A version written between the fetch that led here and the subscription taking
        # effect is never pushed: read the key once more and offer it as if pushed.
        try:
            lattice = self._kvs().get_lattice(key)
        except anna_core.KeyNotFound:
            return None
        except Exception as e:
            log.warning("could not re-read %r after subscribing: %s", key, e)
            return None
        return ("pushed", key, lattice)

    def _put(self, token: int, versions: List[Any]) -> None:
        error = None
        try:
            kvs = self._kvs()
            for v in versions:
                kvs.put(v.key, v.lattice, quorum=self.write_quorum)
        except Exception as e:
            error = e
        self._hand_back(("put", token, error))
