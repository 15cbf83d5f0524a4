"""The Anna client's request path: `Transport`, Python's side of `_core.ClientTransport`.

Contract (DESIGN.md "The client's request path"):
- `Transport(ip, auth, max_value_bytes)` owns one native transport: a private ZeroMQ context,
  the answer socket bound on a free port of `ip` (`address`, keyed with authentication) and
  the sockets to workers and routing. With `auth` (a `runtime.auth.AuthConfig`, loaded here:
  `KeyFileError` naming a bad file) the answer socket admits only the cluster's key and
  requests go only to keyed addresses, as CURVE clients with the client's pair.
- Sends never block; they return False when the message was not queued (a malformed address,
  an address without a key while authentication is on, a full peer), as `runtime.sockets`.
  `send_request` sends one frame (kind implied) when the payload fits one, as
  `runtime.framing.send_request`.
- `key_request(address, type, key, request_id, timeout, ...)` is a single-key request in one
  native call (`_core.ClientTransport.key_request`, csrc/client_ops.hpp): the request built,
  sent, awaited and its answer decoded in C++ with the GIL released; it returns the answer's
  fields for the key, or None when none came in `timeout`. `key_wait` waits longer for one.
- `collect(pending, deadline, message_type, enough)` waits for answers
  to several request ids (all, or `enough`) and returns the parsed ones; an answer that does
  not parse is discarded and the wait goes on.
- An answer above `max_answer_bytes` (the largest value, plus a scan page and an envelope) is
  dropped unread and counted; `timeout_note()` says so, for the `Timeout` that follows.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Type

from google.protobuf.message import DecodeError

from hydro_proto import anna_pb2

from runtime.auth import CLUSTER, AuthConfig
from runtime.framing import PART_BYTES
from runtime.sockets import DEFAULT_MAX_SOCKETS

from . import _core

__all__ = ["Transport", "SCAN_PAGE_MAX_BYTES", "ANSWER_ENVELOPE_BYTES"]

# The largest page a worker's `scan` answers (DESIGN.md "Backups"): with one value past it and
# the envelope, what bounds any answer a client accepts.
SCAN_PAGE_MAX_BYTES = 64 << 20
ANSWER_ENVELOPE_BYTES = 1 << 20

_ID_FIELDS: Dict[Type, int] = {}


def _id_field(message_type: Type) -> int:
    """The field number of `request_id` in an answer type (how the transport matches it)."""
    number = _ID_FIELDS.get(message_type)
    if number is None:
        number = _ID_FIELDS[message_type] = \
            message_type.DESCRIPTOR.fields_by_name["request_id"].number
    return number


_KEY_RESPONSE_ID = _id_field(anna_pb2.KeyResponse)


class Transport:
    """One client's sockets and waits (see the module contract)."""

    def __init__(self, ip: str, auth: Optional[AuthConfig], max_value_bytes: int) -> None:
        public = secret = b""
        cluster_keys: List[bytes] = []
        if auth is not None:
            credentials = auth.load()
            public, secret = credentials.keypair.public, credentials.keypair.secret
            cluster_keys = [k for k, role in credentials.allowed.items() if role == CLUSTER]
        self.max_answer_bytes = max_value_bytes + SCAN_PAGE_MAX_BYTES + ANSWER_ENVELOPE_BYTES
        self._native = _core.ClientTransport(ip, public, secret, cluster_keys,
                                             self.max_answer_bytes, DEFAULT_MAX_SOCKETS)
        self.address: str = self._native.address
        # bound as they are: a get/put calls into C++ without a Python layer in between
        self.key_request = self._native.key_request
        self.key_wait = self._native.key_wait

    def send_kind(self, address: str, kind: str, message: Any) -> bool:
        """Send an Anna `[kind][payload]`; False if it was not queued."""
        return self._native.send(address, kind, message.SerializeToString())

    def send_request(self, address: str, message: Any) -> bool:
        """Send a client `request` to a KVS worker; False if it was not queued."""
        payload = message.SerializeToString()
        return self._native.send(address, "" if len(payload) < PART_BYTES else "request", payload)

    def collect(self, pending: Dict[str, Any], deadline: float,
                message_type: Type = anna_pb2.KeyResponse,
                enough: Optional[int] = None) -> Dict[str, Any]:
        """Wait until every request id in `pending` (or `enough` of them) is answered or the
        deadline passes: {request_id: parsed answer}."""
        answers: Dict[str, Any] = {}
        wanted = len(pending) if enough is None else min(enough, len(pending))
        id_field = _id_field(message_type)
        while len(answers) < wanted:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ids = [i for i in pending if i not in answers]
            for request_id, payload in self._native.collect(ids, id_field, remaining,
                                                            wanted - len(answers)):
                try:
                    answers[request_id] = message_type.FromString(payload)
                except DecodeError:
                    continue   # as any malformed answer: the wait goes on
        return answers

    def stats(self) -> Dict[str, int]:
        """Counters: stale, malformed, oversize, last_oversize_bytes, auth_refused,
        push_refused, max_answer_bytes."""
        return self._native.stats()

    def timeout_note(self) -> str:
        """What a Timeout adds when answers were dropped for their size ("" otherwise)."""
        stats = self._native.stats()
        if not stats["oversize"]:
            return ""
        return (f" ({stats['oversize']} answer(s) dropped unread for exceeding the client's "
                f"limit of {stats['max_answer_bytes']:,} bytes, the last of "
                f"{stats['last_oversize_bytes']:,} bytes)")

    def close(self) -> None:
        """Close the sockets and the context; never waits for unsent messages."""
        self._native.close()
