"""Binding and connecting the platform's ZeroMQ sockets.

Contract:
- `bind_pull(context, ip, port=0, ipc_dir=None)` binds a PULL socket on `tcp://ip:port`
  (0 picks a free port) or, with `ipc_dir`, on a fresh Unix socket in that directory (cheaper
  when every process is on one host), and returns it with the address peers connect to.
- `PushCache` keeps one connected PUSH socket per destination address, created on first use.
  Sends never block: a full or unreachable peer drops the message and the send returns False.
  It is not thread-safe; each thread that sends keeps its own.
"""
from __future__ import annotations

import logging
import os
import re
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import zmq

from .framing import encode, send, send_kind

__all__ = ["bind_pull", "check_address", "endpoint_of", "ipc_dir_of", "PushCache", "ZERO_COPY_BYTES"]

log = logging.getLogger("runtime.sockets")

# Frames at least this large are handed to ZeroMQ without a copy.
ZERO_COPY_BYTES = 64 * 1024


def bind_pull(context: zmq.Context, ip: str = "127.0.0.1", port: int = 0,
              ipc_dir: Optional[str] = None, rcvhwm: int = 100000) -> Tuple[zmq.Socket, str]:
    """A bound PULL socket and its connectable address (see the module contract)."""
    socket = context.socket(zmq.PULL)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, rcvhwm)
    if ipc_dir:
        socket.bind(f"ipc://{os.path.join(ipc_dir, uuid.uuid4().hex[:16])}")
        return socket, socket.getsockopt_string(zmq.LAST_ENDPOINT)
    socket.bind(f"tcp://{ip}:{port if port else '*'}")
    return socket, endpoint_of(socket)


def endpoint_of(socket: zmq.Socket) -> str:
    """The address a socket is bound on, as peers should connect to it."""
    endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
    # A wildcard host cannot be connected to; loopback is the only sensible fallback.
    return endpoint.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")


_ADDRESS = re.compile(r"^(tcp://[^\s:/]+:[0-9]{1,5}|ipc://\S+)$")


def check_address(address: Any, what: str = "a service") -> str:
    """`address` if it is a ZeroMQ address peers can connect to; ValueError saying which
    form is expected otherwise (a bare `host:port` is the usual mistake)."""
    if not isinstance(address, str) or not _ADDRESS.match(address):
        hint = f" (did you mean 'tcp://{address}'?)" if isinstance(address, str) \
            and re.match(r"^[^\s:/]+:[0-9]{1,5}$", address) else ""
        raise ValueError(f"{address!r} is not the address of {what}: expected "
                         f"'tcp://host:port' or 'ipc:///path'{hint}")
    return address


def ipc_dir_of(address: str) -> Optional[str]:
    """The directory of an `ipc://` address (None for other transports)."""
    return os.path.dirname(address[len("ipc://"):]) if address.startswith("ipc://") else None


class PushCache:
    """One connected PUSH socket per destination; see the module contract.

    `linger_ms` > 0 lets a message sent just before the process exits still leave; clients
    that close often and must never wait on close pass 0."""

    def __init__(self, context: zmq.Context, *, sndhwm: int = 100000, linger_ms: int = 500
                 ) -> None:
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

    def send(self, address: str, kind: str, message: Any) -> bool:
        """Send a Cloudburst message (`framing.encode`) to `address`; False if dropped."""
        return send(self.socket(address), kind, message)

    def send_with_frames(self, address: str, kind: str, message: Any,
                         frames: Sequence[Any] = ()) -> bool:
        """A Cloudburst message followed by raw value frames (large ones not copied, never
        copied into a protobuf). False, and a warning, if the peer is not accepting."""
        out = [encode(kind, message), *frames]
        zero_copy = any(len(f) >= ZERO_COPY_BYTES for f in frames)
        try:
            self.socket(address).send_multipart(out, flags=zmq.NOBLOCK, copy=not zero_copy)
            return True
        except zmq.Again:
            log.warning("dropped a %s message to %s (peer not accepting)", kind, address)
            return False

    def send_kind(self, address: str, kind: str, message: Any) -> bool:
        """Send an Anna `[kind][payload]` to `address` without blocking; False if dropped."""
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
        """Close the socket to `address` (e.g. a peer that left)."""
        s = self._sockets.pop(address, None)
        if s is not None:
            s.close(0)

    def close(self) -> None:
        """Close every cached socket."""
        for s in self._sockets.values():
            s.close(0)
        self._sockets.clear()
