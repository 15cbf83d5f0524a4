"""The dependency-metadata GC round (dissertation 4.2.3), run by a scheduler in a thread.

Contract: `GcCoordinator(context, kvs_address, caches, period, ip, timeout)` runs `round()`
every `period` seconds until `stop()`. `caches()` returns the request addresses of the live
node caches (the scheduler learns them from heartbeats). A round asks every cache for its
GC report (CAUSAL_GC_REPORT), reads each reported dependency key from every Anna replica
(`anna_core.Client.get_replicas`), computes the frontier with the pure
`hydrocache.gc.frontier_from_reports`, and sends it to every cache (CAUSAL_GC_APPLY). A cache
that does not answer within `timeout` makes the round end without a frontier (consensus
needs everyone); so does any error, which is logged. At most `max_keys` keys per round.
`rounds`, `applied_keys` and `last_error` describe what happened (for tests and `info`).
With `auth` (the scheduler's cluster credentials) its reply socket admits only cluster keys
and its pushes are CURVE clients; `kvs_auth` goes to its `anna_core.Client`.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Callable, Dict, List, Optional

import zmq

import anna_core
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import AuthConfig, Credentials
from hydrocache.replies import cache_reply
from runtime.rpc import collect_replies
from runtime.sockets import PushCache, bind_pull
from hydrocache.gc import frontier_from_reports

__all__ = ["GcCoordinator"]

log = logging.getLogger("cloudburst.scheduler.gc")


class GcCoordinator:
    """Periodic dependency-GC rounds over every live cache; see the module contract."""

    def __init__(self, context: zmq.Context, kvs_address: str, caches: Callable[[], List[str]],
                 period: float, ip: str = "127.0.0.1", timeout: float = 2.0,
                 max_keys: int = 2000, auth: Optional[Credentials] = None,
                 kvs_auth: Optional[AuthConfig] = None) -> None:
        self._context = context
        self.auth = auth
        self.kvs_auth = kvs_auth
        self.kvs_address = kvs_address
        self.caches = caches
        self.period = period
        self.ip = ip
        self.timeout = timeout
        self.max_keys = max_keys
        self.rounds = 0
        self.applied_keys = 0
        self.last_error: Optional[str] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dependency-gc", daemon=True)

    def start(self) -> "GcCoordinator":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def _run(self) -> None:
        pull, address = bind_pull(self._context, self.ip, auth=self.auth)
        push = PushCache(self._context, auth=self.auth)
        kvs = anna_core.Client(self.kvs_address, timeout=self.timeout, ip=self.ip,
                               context=self._context, auth=self.kvs_auth)
        try:
            while not self._stop.wait(self.period):
                try:
                    self.round(pull, address, push, kvs)
                except Exception as e:   # never kill the scheduler; say why
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.warning("dependency GC round failed: %s", self.last_error)
        finally:
            kvs.close()
            push.close()
            pull.close(0)

    def _ask(self, pull: zmq.Socket, address: str, push: PushCache, caches: List[str],
             make: Callable[[], pb.CacheRequest]) -> Optional[Dict[str, pb.CacheResponse]]:
        wanted: Dict[str, str] = {}
        for cache in caches:
            req = make()
            req.request_id = uuid.uuid4().hex
            req.response_address = address
            req.timeout = self.timeout
            wanted[req.request_id] = cache
            push.send(cache, "cache", req)
        got = collect_replies(pull, wanted, time.monotonic() + self.timeout, cache_reply)
        if len(got) < len(wanted):
            missing = sorted(cache for rid, cache in wanted.items() if rid not in got)
            self.last_error = f"caches {missing} did not answer"
            return None
        return {wanted[rid]: response for rid, (response, _) in got.items()}

    def round(self, pull: zmq.Socket, address: str, push: PushCache, kvs: anna_core.Client) -> int:
        """One GC round; returns how many keys the applied frontier covers."""
        caches = sorted(set(self.caches()))
        if not caches:
            return 0
        replies = self._ask(pull, address, push, caches,
                            lambda: pb.CacheRequest(op=pb.CAUSAL_GC_REPORT))
        if replies is None:
            return 0
        reports = [([(kv.key, dict(kv.vc)) for kv in r.held], list(r.dep_keys))
                   for r in replies.values()]
        keys = sorted({k for _, dep_keys in reports for k in dep_keys})[: self.max_keys]
        replica_clocks: Dict[str, List[Dict[str, int]]] = {}
        for key in keys:
            clocks = []
            for _, lattice in kvs.get_replicas(key):
                if lattice.lattice_type == anna_pb2.MULTI_CAUSAL:
                    clocks.append(dict(lattice.vector_clock))
            if clocks:
                replica_clocks[key] = clocks
        frontier = frontier_from_reports(reports, replica_clocks)
        frontier = {k: v for k, v in frontier.items() if v}
        if frontier:
            def apply() -> pb.CacheRequest:
                req = pb.CacheRequest(op=pb.CAUSAL_GC_APPLY)
                for k, vc in sorted(frontier.items()):
                    req.versions.add(key=k).vc.update(vc)
                return req
            self._ask(pull, address, push, caches, apply)
        self.rounds += 1
        self.applied_keys += len(frontier)
        return len(frontier)
