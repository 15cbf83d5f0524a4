"""A worker's connection to its node cache (the only path of a worker's reads and writes).

Contract: `CacheClient.get(keys)` returns `{key: buffer or None}` (None: no such key in the
KVS; a buffer is the value's bytes as received, not copied); `put(key, value)` returns once the node cache has written the value through to Anna.
Each request waits on the worker's own reply socket for the answer with the same request id
(older answers are dropped) until `timeout`; then `Timeout` names the node
cache and the keys. A failed answer raises `CloudburstError` with the node cache's reason
(`Fenced` when the cache refused a causal attempt that is fenced); a refused one (a write of
a key only the cluster writes) raises `NotPermitted` naming it; a lattice value that does
not decode raises `MalformedValue` naming its key.
While `session` is set (a `executor.call_session.CallSession`: the running call's), every
GET carries the floors of its keys, and every plain value read or written is noted in it
with its LWW timestamp (a merged lattice as merged). `before_wait`, if set, is called before
each wait (the worker clears a kill timer left armed between calls: executor/guard.py).
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import zmq

import anna_core
from hydro_proto import cloudburst_pb2 as pb
from hydrocache.copies import LocalCopies
from faas.errors import CloudburstError, MalformedValue, NotPermitted, Timeout
from hydrocache.replies import cache_reply
from runtime.rpc import await_reply
from runtime.sockets import PushCache

__all__ = ["CacheClient", "CausalRead", "Fenced"]


class Fenced(CloudburstError):
    """The node cache refused a causal request because its attempt is fenced: the scheduler
    released or failed the attempt, its snapshot is gone, or its commit was not granted.
    Nothing the attempt writes is accepted (hydrocache/DESIGN.md, "Fencing")."""


def _lattice(key: str, lattice_type: int, payload: Any) -> Any:
    """A lattice value from the node cache, by the kernel's codec; `MalformedValue` naming the
    key if it does not decode."""
    try:
        return anna_core.deserialize(lattice_type, bytes(payload))
    except (ValueError, TypeError) as e:
        raise MalformedValue(f"the value under key {key!r} does not decode: {e}",
                             key=key) from None


class CausalRead:
    """One key bound by a causal read: the version's clock, its values (read-only buffers, in
    the cache's sorted order) and its dependencies. The dependencies are decoded from the
    cache's answer on first use: only a key the sink writes needs them (the writer's
    transitive dependencies), and most keys read are not written."""

    __slots__ = ("clock", "values", "_deps", "_deps_pb")

    def __init__(self, clock: Dict[str, int], values: List[memoryview],
                 deps: Optional[Dict[str, Dict[str, int]]] = None, deps_pb: Any = ()) -> None:
        self.clock = clock
        self.values = values
        self._deps = deps
        self._deps_pb = deps_pb

    @property
    def deps(self) -> Dict[str, Dict[str, int]]:
        if self._deps is None:
            self._deps = {d.key: dict(d.vc) for d in self._deps_pb}
        return self._deps


class CacheClient:
    """Synchronous requests to the node cache; see the module contract."""

    def __init__(self, push: PushCache, cache_address: str, reply_socket: zmq.Socket,
                 reply_address: str, timeout: float, copy_bytes: int = 256 << 20) -> None:
        self._push = push
        self.cache_address = cache_address
        self._reply = reply_socket
        self._reply_address = reply_address
        self.timeout = timeout
        self._prefix = uuid.uuid4().hex[:8]
        self._seq = 0
        self.copies = LocalCopies(copy_bytes)
        self.session: Any = None        # the running call's CallSession, if it has one
        self.before_wait: Optional[Callable[[], None]] = None   # called before each wait

    def get(self, keys: Sequence[str]) -> Dict[str, Any]:
        """{key: the value's bytes (a read-only buffer, not copied), an `anna_core` lattice
        for a key that holds one (merged by `put(key, lattice)`), or None}."""
        keys = list(keys)
        req = pb.CacheRequest(op=pb.CACHE_GET, keys=keys)
        req.have.update(self.copies.have(keys))
        session = self.session
        if session is not None:
            req.session.CopyFrom(session.request(keys))
        response, frames = self._request(pb.CACHE_GET, keys, [], req)
        values = self._values(response, frames)
        if session is not None:
            for e in response.entries:
                if e.found and e.lattice_type:
                    session.note_merged(e.key)
                elif e.found:
                    session.note(e.key, e.timestamp)
        return {e.key: (None if not e.found else
                        _lattice(e.key, e.lattice_type, values[e.key][0])
                        if e.lattice_type else values[e.key][0])
                for e in response.entries}

    def _values(self, response: pb.CacheResponse, frames: List[memoryview]
                ) -> Dict[str, List[memoryview]]:
        """Each found entry's values: its frames, or the worker's copy when `unchanged`
        (copies are taken before new ones are stored, so none is dropped in between)."""
        out: Dict[str, List[memoryview]] = {}
        fresh = []
        i = 0
        for e in response.entries:
            if not e.found:
                continue
            if e.unchanged:
                got = self.copies.use(e.key, e.tag, True, ())
                if got is None:
                    raise CloudburstError(f"node cache answered 'unchanged' for {e.key!r}, "
                                          f"which this worker holds no copy of")
                out[e.key] = got
            else:
                fresh.append((e, frames[i:i + e.value_count]))
                i += e.value_count
        for e, values in fresh:
            out[e.key] = self.copies.use(e.key, e.tag, False, values)
        return out

    def put(self, key: str, value: bytes, lattice_type: int = 0) -> None:
        """Write through to Anna: `value` is a plain value, or with `lattice_type` a
        serialized lattice that Anna merges with what the key holds."""
        req = pb.CacheRequest(op=pb.CACHE_PUT, keys=[key], values=[value],
                              lattice_type=lattice_type)
        response, _ = self._request(pb.CACHE_PUT, [key], [value], req)
        session = self.session
        if session is not None:
            for e in response.entries:
                if lattice_type:
                    session.note_merged(e.key)
                else:
                    session.note(e.key, e.timestamp)

    def causal(self, request: pb.CacheRequest, timeout: Optional[float] = None
               ) -> Tuple[pb.CacheResponse, Dict[str, CausalRead]]:
        """A CAUSAL_* request (hydrocache/DESIGN.md); returns the response and a `CausalRead`
        per found entry.
        A TIMEOUT answer raises `Timeout` naming the stage the cache reports."""
        request.have.update(self.copies.have(request.keys))
        response, frames = self._request(request.op, list(request.keys), [], request,
                                         timeout=timeout)
        values = self._values(response, frames)
        return response, {e.key: CausalRead(dict(e.version.vc), values[e.key], deps_pb=e.deps)
                          for e in response.entries if e.found}

    def _request(self, op: int, keys: List[str], values: List[bytes],
                 req: Optional[pb.CacheRequest] = None, timeout: Optional[float] = None
                 ) -> Tuple[pb.CacheResponse, List[memoryview]]:
        self._seq += 1
        rid = f"{self._prefix}-{self._seq}"
        timeout = self.timeout if timeout is None else timeout
        if req is None:
            req = pb.CacheRequest(op=op, keys=keys, values=values)
        req.request_id = rid
        req.response_address = self._reply_address
        # the cache gives up a little earlier than we do, so its answer (naming the stage
        # that stalled) arrives before our own wait ends
        req.timeout = timeout * 0.85
        what = f"{pb.CacheOp.Name(op)} {keys[:5]}"
        if not self._push.send(self.cache_address, "cache", req):
            raise CloudburstError(f"node cache at {self.cache_address} is not accepting {what}")
        if self.before_wait is not None:     # the worker's kill timer (executor/guard.py)
            self.before_wait()
        got = await_reply(self._reply, rid, time.monotonic() + timeout, cache_reply)
        if got is None:
            raise Timeout(f"the node cache at {self.cache_address} to answer {what}", timeout)
        response, frames = got
        if response.status == pb.TIMEOUT:
            raise Timeout(response.stage or f"the node cache at {self.cache_address}: {what}",
                          timeout)
        if response.fenced:
            raise Fenced(response.message or f"node cache refused {what}: the attempt is fenced")
        if response.status == pb.NOT_PERMITTED:
            raise NotPermitted(response.message or f"node cache refused {what}",
                               keys[0] if len(keys) == 1 else None)
        if response.status != pb.OK:
            raise CloudburstError(response.message or f"node cache failed {what}")
        return response, frames
