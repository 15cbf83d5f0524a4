"""Small helpers for Anna's framing and sockets (proto/anna.proto, header).

Contract:
- Messages to workers and routing are two frames, `[kind][payload]`; `kind` is one of the
  lower-case names in `KINDS`. `send_kind` writes one; `split_frames` checks one and raises
  `FrameError` (never anything else) for a wrong frame count or unknown kind.
- Answers to a response address are one frame, no kind.
- `bind_pull` binds a PULL socket on `tcp://ip:*` and returns the bound address.
- `PushCache` keeps one PUSH socket per destination; sends never block (a full or
  unreachable peer drops the message and reports False).
- `lattice_to_tuple` / `tuple_to_lattice` move lattices in and out of `anna.KeyTuple`
  through the kernel's codec (`serialize` / `_core.deserialize`); no merge logic lives here.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import zmq

from hydro_proto import anna_pb2

from . import _core

__all__ = ["KINDS", "FrameError", "split_frames", "send_kind", "bind_pull", "PushCache",
           "lattice_to_tuple", "tuple_to_lattice", "endpoint_of", "configure_logging",
           "MonotoneClock", "parent_gone", "announce_ready", "READY_PREFIX"]

KINDS = frozenset({b"request", b"gossip", b"membership", b"replication", b"address", b"join",
                   b"replicate"})

log = logging.getLogger("anna.wire")


class FrameError(ValueError):
    """A received ZMQ message does not follow the [kind][payload] framing."""


def split_frames(frames: Sequence[bytes]) -> Tuple[str, bytes]:
    """Check a received [kind][payload] message and return (kind, payload)."""
    if len(frames) != 2:
        raise FrameError(f"expected 2 frames [kind][payload], got {len(frames)}")
    kind, payload = bytes(frames[0]), bytes(frames[1])
    if kind not in KINDS:
        raise FrameError(f"unknown message kind {kind[:32]!r}")
    return kind.decode("ascii"), payload


def send_kind(socket: zmq.Socket, kind: str, message: Any, *, block: bool = False) -> bool:
    """Send [kind][serialized message]; returns False if it would block (message dropped)."""
    try:
        socket.send_multipart([kind.encode("ascii"), message.SerializeToString()],
                              flags=0 if block else zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False


def bind_pull(context: zmq.Context, ip: str = "127.0.0.1", port: int = 0) -> Tuple[zmq.Socket, str]:
    """Bind a PULL socket on tcp://ip:port (0 = a free port); return it and its address."""
    socket = context.socket(zmq.PULL)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(f"tcp://{ip}:{port if port else '*'}")
    return socket, endpoint_of(socket)


def endpoint_of(socket: zmq.Socket) -> str:
    """The address a socket is bound on, as peers should connect to it."""
    endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
    # A wildcard host cannot be connected to; loopback is the only sensible fallback.
    return endpoint.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")


class PushCache:
    """One connected PUSH socket per destination address, created on first use."""

    def __init__(self, context: zmq.Context, *, sndhwm: int = 10000, linger_ms: int = 0) -> None:
        self._context = context
        self._sndhwm = sndhwm
        self._linger_ms = linger_ms
        self._sockets: Dict[str, zmq.Socket] = {}

    def socket(self, address: str) -> zmq.Socket:
        """The PUSH socket connected to `address`."""
        s = self._sockets.get(address)
        if s is None:
            s = self._context.socket(zmq.PUSH)
            s.setsockopt(zmq.LINGER, self._linger_ms)
            s.setsockopt(zmq.SNDHWM, self._sndhwm)
            s.setsockopt(zmq.IMMEDIATE, 0)
            s.connect(address)
            self._sockets[address] = s
        return s

    def send_kind(self, address: str, kind: str, message: Any) -> bool:
        """Send [kind][payload] to `address` without blocking; False if dropped."""
        return send_kind(self.socket(address), kind, message)

    def send_frame(self, address: str, payload: bytes) -> bool:
        """Send one frame (an answer) to `address` without blocking; False if dropped."""
        try:
            self.socket(address).send(payload, flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def send_frames(self, address: str, frames: List[bytes]) -> bool:
        """Send raw frames to `address` without blocking; False if dropped."""
        try:
            self.socket(address).send_multipart(frames, flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def forget(self, address: str) -> None:
        """Close the socket to `address` (e.g. a node that left)."""
        s = self._sockets.pop(address, None)
        if s is not None:
            s.close(0)

    def close(self) -> None:
        """Close every cached socket."""
        for s in self._sockets.values():
            s.close(0)
        self._sockets.clear()


def lattice_to_tuple(key: str, lattice: Any) -> Any:
    """An `anna.KeyTuple` holding `lattice` (any `_core` lattice) under `key`."""
    return anna_pb2.KeyTuple(key=key, lattice_type=lattice.lattice_type,
                             payload=lattice.serialize())


def tuple_to_lattice(key_tuple: Any) -> Any:
    """The lattice held by an `anna.KeyTuple`; `ValueError` if the payload does not parse."""
    return _core.deserialize(int(key_tuple.lattice_type), bytes(key_tuple.payload))


def configure_logging(level: Optional[str], name: str) -> logging.Logger:
    """Set up stderr logging for a service process and return its logger."""
    numeric = getattr(logging, (level or "warning").upper(), logging.WARNING)
    logging.basicConfig(level=numeric, format=f"%(asctime)s {name} %(levelname)s %(message)s")
    return logging.getLogger(f"anna.{name}")


class MonotoneClock:
    """Nanosecond wall-clock timestamps that strictly increase within one process object.

    Used for LWW timestamps: `time.time_ns()` when it moved forward, else last + 1, so two
    writes from the same writer are always ordered even within one clock tick.
    """

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        """The next timestamp (strictly greater than the previous one)."""
        import time
        now = time.time_ns()
        self._last = now if now > self._last else self._last + 1
        return self._last


def parent_gone(parent_pid: Optional[int]) -> bool:
    """True if the process was started with a parent pid and that parent has exited."""
    import os
    return bool(parent_pid) and os.getppid() != parent_pid


READY_PREFIX = "ANNA_READY "


def announce_ready(info: dict, ready_file: Optional[str]) -> None:
    """Report readiness: if asked, a file written atomically (temporary name, then rename, so
    a parent never reads half of it), then one `ANNA_READY <json>` line on stdout."""
    import json
    import os
    text = json.dumps(info)
    if ready_file:
        tmp = f"{ready_file}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, ready_file)
    print(READY_PREFIX + text, flush=True)
