"""Message framing on the platform's ZeroMQ sockets (the schema itself is in `proto/`).

Contract:
- **Cloudburst messages** (schedulers, executor nodes, workers, HydroCache, the SDK) are one
  logical frame: a kind code byte (a message's code is its 1-based position in `KIND_ORDER`)
  followed by the serialized protobuf, optionally followed by raw value frames. One frame per
  message because every send call costs on small machines. `encode` builds one, `parse`
  checks one and returns `(kind, payload view)` or raises `FrameError`; `code_of(kind)` is
  a kind's code byte (for a reader that recognises its one common kind before `parse`);
  `send` writes one without blocking and returns False when the peer is not accepting.
- A logical frame of `PART_BYTES` or more travels as several ZeroMQ frames (`split`): parts
  of exactly `PART_BYTES`, then one shorter part (possibly empty) that ends it. `PART_BYTES`
  is below `MAX_FRAME_BYTES` by more than what CURVE adds to a frame on the wire.
  `unsplit` turns a received message's frames back into its logical frames; `recv_frame`
  receives a one-frame message that way (the result carries the first part's metadata, e.g.
  its sender's role, through `get`).
- **Anna messages** (to KVS workers and routing) are `[kind][payload]`, with `kind` one of
  `ANNA_KINDS`, because the C++ kernel reads them that way; a payload larger than
  `MAX_FRAME_BYTES` travels as several frames (`split`), which the receiver joins. `send_kind`
  writes one and `split_frames` checks one, raising `FrameError` (never anything else).
  A client's `request` that fits one frame may omit its kind: a one-frame message to a KVS
  worker is a request (`send_request` sends it so: one frame, hence one CURVE box, less).
  Answers to a response address are the payload's frames with no kind (`join` reads them).
- `MAX_FRAME_BYTES` (16 MiB) is the largest frame any of the platform's sockets accepts
  (`runtime.sockets.bind_pull`): a peer, authenticated or not, cannot make a process buffer
  a larger frame.
- `more(socket)` says whether another message is waiting, without blocking.
"""
from __future__ import annotations

import builtins

from typing import Any, List, Sequence, Tuple

import zmq

__all__ = ["KIND_ORDER", "KINDS", "ANNA_KINDS", "FrameError", "code_of", "encode", "parse", "send",
           "send_kind", "send_request", "split_frames", "more", "MAX_FRAME_BYTES", "PART_BYTES",
           "join", "split", "unsplit", "recv_frame", "Joined"]

# The largest frame a socket accepts (ZMQ_MAXMSGSIZE is per frame, and ZeroMQ applies it from
# the handshake on); the C++ kernel's kMaxFrameBytes is the same.
MAX_FRAME_BYTES = 16 << 20
# The size of each part of a larger payload (the kernel's kFramePartBytes): a frame on the
# wire also carries CURVE's box and nonce, which the receiver's limit counts.
PART_BYTES = MAX_FRAME_BYTES - (64 << 10)

# The Cloudburst message kinds, in code order.
KIND_ORDER = (
    "register_fn", "register_dag", "delete_dag", "list", "info", "call", "where", "heartbeat",
    "keyset", "done", "schedule", "trigger", "abort", "msg", "cache_reply", "cache", "reply",
    "accepted", "result", "causal_abort", "cancel", "delete_fn", "status", "drain",
    "node_status", "fetch", "lease", "values", "moved",
    "lease_worker", "worker_lease", "direct", "direct_batch", "direct_results",
)
KINDS = frozenset(KIND_ORDER)
_CODE = {k: bytes([i + 1]) for i, k in enumerate(KIND_ORDER)}
_KIND_OF = {i + 1: k for i, k in enumerate(KIND_ORDER)}

ANNA_KINDS = frozenset({b"request", b"gossip", b"membership", b"replication", b"address",
                        b"join", b"replicate", b"heartbeat", b"leave", b"handoff",
                        b"handoff_ack", b"fetch", b"fetched", b"scan", b"members"})


class FrameError(ValueError):
    """A received message does not follow its framing."""


def code_of(kind: str) -> bytes:
    """A Cloudburst message kind's code byte, the first byte of its frames."""
    return _CODE[kind]


def encode(kind: str, message: Any) -> bytes:
    """One Cloudburst frame: the kind's code byte, then the serialized message."""
    return _CODE[kind] + message.SerializeToString()


def parse(frame: Any) -> Tuple[str, memoryview]:
    """Check a received Cloudburst frame; return (kind, payload) without copying the payload."""
    view = memoryview(frame)
    if len(view) == 0:
        raise FrameError("empty message")
    kind = _KIND_OF.get(view[0])
    if kind is None:
        raise FrameError(f"unknown message kind code {view[0]}")
    return kind, view[1:]


def send(socket: zmq.Socket, kind: str, message: Any) -> bool:
    """Send one Cloudburst message without blocking; False if it was dropped (peer full)."""
    frame = encode(kind, message)
    try:
        if len(frame) < PART_BYTES:
            socket.send(frame, flags=zmq.NOBLOCK, copy=True)
        else:
            socket.send_multipart(split(frame), flags=zmq.NOBLOCK, copy=False)
        return True
    except zmq.Again:
        return False


def split(frame: Any) -> List[Any]:
    """A logical frame as the ZeroMQ frames that carry it (see the module contract)."""
    view = memoryview(frame).cast("B")
    if len(view) < PART_BYTES:
        return [frame]
    out = [view[i:i + PART_BYTES] for i in range(0, len(view), PART_BYTES)]
    if len(out[-1]) == PART_BYTES:
        out.append(b"")                     # the part that says the frame ended
    return out


def _size(frame: Any) -> int:
    return len(frame.buffer) if isinstance(frame, zmq.Frame) else len(frame)


class Joined(bytes):
    """A logical frame received in several parts; `get(property)` reads the first part's
    ZeroMQ metadata (e.g. "User-Id") as `zmq.Frame.get` does."""

    first: Any = None

    @property
    def bytes(self) -> "bytes":
        """The joined bytes (as `zmq.Frame.bytes`)."""
        return builtins.bytes(self)

    def get(self, name: str) -> Any:
        if self.first is None or not isinstance(self.first, zmq.Frame):
            raise zmq.ZMQError(zmq.EINVAL, "no metadata")
        return self.first.get(name)


def _joined(group: List[Any]) -> Any:
    if len(group) == 1:
        return group[0]
    out = Joined(b"".join(f.buffer if isinstance(f, zmq.Frame) else f for f in group))
    out.first = group[0]
    return out


def unsplit(frames: Sequence[Any]) -> List[Any]:
    """A received message's logical frames: the parts of each split frame joined again
    (`Joined`); frames that were not split are returned as they are."""
    out: List[Any] = []
    group: List[Any] = []
    for f in frames:
        group.append(f)
        if _size(f) != PART_BYTES:
            out.append(_joined(group))
            group = []
    if group:                                 # a message cut short: keep what came
        out.append(_joined(group))
    return out


def recv_frame(socket: zmq.Socket, flags: int = 0, copy: bool = True) -> Any:
    """Receive one Cloudburst message of one logical frame (zmq.Again as `recv`): the frame,
    joined when it came in parts; any further frames are dropped."""
    frames = socket.recv_multipart(flags=flags, copy=copy)
    if len(frames) == 1:
        return frames[0]
    return unsplit(frames)[0]


def join(frames: Sequence[Any]) -> bytes:
    """An Anna payload received as `frames` (every frame after the kind, joined)."""
    if len(frames) == 1:
        return bytes(frames[0])
    return b"".join(bytes(f) if not isinstance(f, (bytes, memoryview)) else f for f in frames)


def split_frames(frames: Sequence[Any]) -> Tuple[str, bytes]:
    """Check a received Anna `[kind][payload...]` message and return (kind, payload)."""
    if len(frames) < 2:
        raise FrameError(f"expected [kind][payload] frames, got {len(frames)} frame(s)")
    kind = bytes(frames[0])
    if kind not in ANNA_KINDS:
        raise FrameError(f"unknown message kind {kind[:32]!r}")
    return kind.decode("ascii"), join(frames[1:])


def send_kind(socket: zmq.Socket, kind: str, message: Any, *, block: bool = False) -> bool:
    """Send an Anna `[kind][serialized message]`; False if it would block (message dropped)."""
    try:
        socket.send_multipart([kind.encode("ascii"), *split(message.SerializeToString())],
                              flags=0 if block else zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False


def send_request(socket: zmq.Socket, message: Any, *, block: bool = False) -> bool:
    """Send an Anna `request` to a KVS worker: `[serialized message]` when it fits one frame
    (the kind is implied), else `[b"request"][parts...]`; False if it would block."""
    payload = message.SerializeToString()
    if len(payload) >= PART_BYTES:
        return send_kind(socket, "request", message, block=block)
    try:
        socket.send(payload, flags=0 if block else zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False


_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_get = zmq.backend.Socket.get


def more(socket: zmq.Socket) -> bool:
    """True if `socket` has a message ready (no exception, no waiting)."""
    # (the backend's `get` and plain ints: pyzmq's own `getsockopt` and `&` with its flag
    # enum build enum members, ~1 us of a serial call's few)
    return bool(_get(socket, _EVENTS) & _POLLIN)
