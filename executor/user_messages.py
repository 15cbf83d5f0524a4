"""User messages between executor workers (`lib.send` and `lib.recv`).

Contract: `UserMessaging` is mixed into `executor.worker.Worker`.
- `send_user_message(dest, data)` looks worker `dest`'s address up in the worker directory
  (through the node cache, once per peer) and pushes it a `msg`; to itself it is delivered
  without a socket hop. With authentication it sends only to a directory entry that carries
  the function key (`ValueError` otherwise, and for an unknown id).
- Received messages wait in the worker's inbox, bounded by `INBOX_LIMIT` (the oldest is
  dropped, logged at WARNING). `receive_user_messages(timeout)` returns and empties it,
  reading the worker's socket until one arrives: other messages read meanwhile wait in the
  backlog until the running function returns. It raises `Timeout` when `timeout` > 0 passes
  without a message, and returns [] at once for `timeout` <= 0.
Uses the worker's `address`, `credentials`, `worker_id`, `cache`, `_push`, `_pull`,
`_stirred_pull`, `_peers`, `_inbox`, `_backlog` and `_admitted`.
"""
from __future__ import annotations

import logging
import time
from typing import List, Tuple

from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import parse_address
from faas.errors import Timeout
from runtime.framing import encode, recv_frame
from faas.keys import worker_key

__all__ = ["UserMessaging", "INBOX_LIMIT"]

log = logging.getLogger("cloudburst.worker")
INBOX_LIMIT = 10000
_MSG_CODE = encode("msg", pb.UserMessage())[:1]


class UserMessaging:
    """A worker's user messages; mixed into the worker (module contract)."""

    def _on_msg(self, m: pb.UserMessage) -> None:
        if len(self._inbox) >= INBOX_LIMIT:
            dropped = self._inbox.popleft()
            log.warning("inbox full; dropped a message from %s", dropped[0])
        self._inbox.append((m.sender, bytes(m.payload)))

    def send_user_message(self, dest: str, data: bytes) -> None:
        address = self._peers.get(dest)
        if address is None:
            key = worker_key(dest)
            entry = self.cache.get([key]).get(key)
            if entry is None or not isinstance(entry, memoryview) and \
                    not isinstance(entry, bytes):
                raise ValueError(f"lib.send: no executor worker has id {dest!r}")
            address = bytes(entry).decode("utf-8", "replace")
            self._check_peer(dest, address)
            self._peers[dest] = address
        message = pb.UserMessage(sender=self.worker_id, payload=data)
        if address == self.address:
            self._on_msg(message)
        else:
            self._push.send(address, "msg", message)

    def _check_peer(self, dest: str, address: str) -> None:
        """An authenticated worker sends user messages only to an address carrying the
        function key (its own): only its node (the cluster) writes the directory, and only a
        process holding the function secret completes a handshake with that key."""
        if self.credentials is None:
            return
        try:
            key = parse_address(address)[1]
        except ValueError:
            key = None
        if key != self.credentials.keypair.public:
            raise ValueError(f"lib.send: the directory entry of worker {dest!r} is not a "
                             f"cluster address ({address[:120]!r}); not sent")

    def receive_user_messages(self, timeout: float) -> List[Tuple[str, bytes]]:
        deadline = time.monotonic() + max(0.0, timeout)
        self._stirred_pull()    # it receives from the schedule socket (direct_calls.py)
        while not self._inbox:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timeout > 0:
                    raise Timeout(f"a message to worker {self.worker_id} (lib.recv)", timeout)
                return []
            if not self._pull.poll(int(remaining * 1000) + 1):
                continue
            frame = self._admitted(recv_frame(self._pull, copy=False))
            if frame is None:
                continue
            if frame[:1] == _MSG_CODE:
                try:
                    self._on_msg(pb.UserMessage.FromString(frame[1:]))
                except Exception as e:
                    log.warning("dropped a malformed user message: %s", e)
            else:
                self._backlog.append(frame)  # handled after the running function returns
        out = list(self._inbox)
        self._inbox.clear()
        return out
