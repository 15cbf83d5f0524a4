"""How a client's direct calls reach the workers it leases: over the worker's call link when
the lease names one and it is open, else over ZeroMQ to the worker's direct socket.

Contract: `WorkerRoutes(context, credentials, unanswered, flush_by)` belongs to one client's
direct path (`cloudburst/direct.py`), which decides what goes where; this only carries it.
- `send(held, calls)`: sends `calls` (one or more `Call`s under lease `held`) to its worker in
  one message: a `direct` for one call, a `direct_batch` for several, encoded from each
  call's own serialization (`encode_batch`: no copy of the calls into a `DirectBatch`, which
  cost a burst about 2 us per call). True once a route took it; False when neither did (the
  caller sends the calls through the scheduler). A link still opening has `flush_by` told
  when to look again (`ADVANCE_EVERY`), so its connect and handshake advance.
- `links`: the client's `ClientCallLinks` (`cloudburst/call_link.py`, which says what becomes
  of the calls on a link that closes, through `unanswered`), None without the native module.
- `advance(read)`: while a link is opening, calls `read` (reading the answers advances it);
  returns when to do so again (None: no link is opening).
- `drop(workers)`: no lease names these worker addresses any more: their links are
  half-closed (their results on the way are still read).
- `close()` closes the ZeroMQ sockets and the links.
Thread-safe: the client's threads share the sockets (a lock; the links have their own).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, List, Optional, Sequence

import zmq

from hydro_proto import cloudburst_pb2 as pb
from runtime.sockets import PushCache

from .call_link import ADVANCE_EVERY, open_call_links

__all__ = ["WorkerRoutes", "EncodedBatch", "encode_batch"]


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# `DirectBatch.calls`' key, read from the schema: its field number, wire type 2 (length-delimited)
_CALLS_TAG = _varint(pb.DirectBatch.DESCRIPTOR.fields_by_name["calls"].number << 3 | 2)


def encode_batch(calls: Sequence[pb.Call]) -> bytes:
    """The serialized `DirectBatch` of `calls`, byte for byte as protobuf writes it, from
    each call's own serialization."""
    parts = []
    for call in calls:
        data = call.SerializeToString()
        parts += (_CALLS_TAG, _varint(len(data)), data)
    return b"".join(parts)


class EncodedBatch:
    """A `DirectBatch` as the senders take it (`SerializeToString`, and `calls` for the
    links' record of the call ids written), without copying its calls."""

    __slots__ = ("calls",)

    def __init__(self, calls: Sequence[pb.Call]) -> None:
        self.calls = calls

    def SerializeToString(self) -> bytes:  # noqa: N802 (protobuf's name)
        return encode_batch(self.calls)


class WorkerRoutes:
    """A client's routes to its leased workers (module contract)."""

    def __init__(self, context: zmq.Context, credentials: Any,
                 unanswered: Callable[[List[str], str, bool], None],
                 flush_by: Callable[[float], None]) -> None:
        self._push = PushCache(context, auth=credentials)
        self._push_lock = threading.Lock()
        self._flush_by = flush_by
        self.links = open_call_links(credentials, unanswered)

    def send(self, held: Any, calls: Sequence[pb.Call]) -> bool:
        kind, message = ("direct", calls[0]) if len(calls) == 1 else \
            ("direct_batch", EncodedBatch(calls))
        links = self.links
        if held.link_address and links is not None:
            if links.send(held.worker_address, held.link_address, kind, message):
                return True
            if links.opening():    # the lease thread reads until it is open (call_link.py)
                self._flush_by(time.monotonic() + ADVANCE_EVERY)
        with self._push_lock:
            return self._push.send(held.worker_address, kind, message)

    def advance(self, read: Callable[[], None]) -> Optional[float]:
        links = self.links
        if links is None or not links.opening():
            return None
        read()
        return time.monotonic() + ADVANCE_EVERY if links.opening() else None

    def drop(self, workers: Iterable[str]) -> None:
        if self.links is not None:
            self.links.drop(set(workers))

    def close(self) -> None:
        try:
            with self._push_lock:
                self._push.close()
        finally:
            if self.links is not None:
                self.links.close()
