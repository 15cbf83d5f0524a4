"""Pushed updates: `Subscription`, a socket that receives the UPDATEs Anna's workers push to a
subscriber, and `Update`, one of them.

Contract (DESIGN.md "Gossip"): a worker pushes at most one UPDATE per subscribed key per epoch
(a `KeyResponse` of type UPDATE; tuple error KEY_DNE after a delete). Subscriptions move with
their keys on every placement change. `Subscription.poll/next/updates` each take a deadline;
anything that is not a well-formed UPDATE is discarded. A subscription made by
`Client.subscription` unsubscribes its keys when closed and tells its client through the
client's public `unsubscribe` and `subscription_closed`.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, List, NamedTuple, Optional, Tuple, Union

import zmq
from google.protobuf.message import DecodeError

from hydro_proto import anna_pb2

from runtime.auth import AuthConfig, Security, credentials_of
from runtime.framing import join
from runtime.sockets import bind_pull

from .errors import AnnaError, Timeout
from .wire import tuple_to_lattice

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Subscription", "Update", "Value"]

Value = Union[bytes, Any]  # bytes (LWW) or any `_core` lattice


def is_lattice(value: Any) -> bool:
    return hasattr(value, "lattice_type") and hasattr(value, "serialize")


def reveal_value(lattice: Any) -> Value:
    """bytes for an LWW lattice, the lattice itself otherwise."""
    if lattice.lattice_type == anna_pb2.LWW:
        return lattice.reveal()
    return lattice


class Update(NamedTuple):
    """One UPDATE pushed to a subscriber: the key, its current lattice (None when the key was
    deleted), and the worker that sent it."""

    key: str
    lattice: Any
    responder: str

    @property
    def value(self) -> Optional[Value]:
        """bytes for an LWW key, the lattice otherwise (as `Client.get` returns it); None
        when the key was deleted."""
        return None if self.lattice is None else reveal_value(self.lattice)


class Subscription:
    """A PULL socket on a free port that receives UPDATE messages for subscribed keys.

    Use `address` with `Client.subscribe(key, address)`, or `Client.subscription(key)`, which
    subscribes and unsubscribes for you. Every wait takes a deadline.
    """

    def __init__(self, *, ip: str = "127.0.0.1", context: Optional[zmq.Context] = None,
                 client: Optional["Client"] = None, keys: Tuple[str, ...] = (),
                 auth: Optional[AuthConfig] = None) -> None:
        self._own_context = context is None
        self._context = context or zmq.Context()
        # Updates come from KVS workers only: a CURVE server admitting cluster keys.
        self._security = Security.start(self._context, auth)
        self._socket, self.address = bind_pull(self._context, ip,
                                               auth=credentials_of(self._security))
        self._client = client
        self._keys = list(keys)
        self._pending: List[Update] = []

    def poll(self, timeout: float) -> Optional[Update]:
        """The next update, or None if none arrives within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._socket.poll(max(1, int(remaining * 1000))):
                return None
            self._parse(join(self._socket.recv_multipart()))
        return self._pending.pop(0)

    def next(self, timeout: float) -> Update:
        """The next update; raises `Timeout` if none arrives within `timeout` seconds."""
        update = self.poll(timeout)
        if update is None:
            keys = ", ".join(repr(k) for k in self._keys) or "subscribed keys"
            raise Timeout(f"UPDATE for {keys} at {self.address}", address=self.address,
                          seconds=timeout)
        return update

    def updates(self, timeout: float):
        """Yield updates as they arrive until `timeout` seconds have passed in total."""
        deadline = time.monotonic() + timeout
        while True:
            update = self.poll(max(0.0, deadline - time.monotonic()))
            if update is None:
                return
            yield update

    def _parse(self, frame: bytes) -> None:
        try:
            message = anna_pb2.KeyResponse.FromString(frame)
        except DecodeError:
            return
        if message.type != anna_pb2.UPDATE:
            return
        for t in message.tuples:
            if t.error == anna_pb2.KEY_DNE:  # the key was deleted
                self._pending.append(Update(t.key, None, message.responder))
                continue
            try:
                lattice = tuple_to_lattice(t)
            except ValueError:
                continue
            self._pending.append(Update(t.key, lattice, message.responder))

    def close(self) -> None:
        """Unsubscribe (if created by `Client.subscription`) and close the socket."""
        if self._client is not None and not self._client.closed:
            for key in self._keys:
                try:
                    self._client.unsubscribe(key, self.address)
                except AnnaError:
                    pass
        if self._client is not None:
            self._client.subscription_closed(self)
        self._client = None
        if self._socket.closed:
            return
        self._socket.close(0)
        if self._security is not None:
            self._security.stop()
        if self._own_context:
            self._context.term()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
