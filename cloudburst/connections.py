"""A client's connections to its schedulers: one PUSH socket each, and what each reported.

Contract:
- `SchedulerConnections(context, addresses, credentials, auth)` connects one PUSH socket per
  scheduler address (a CURVE client of the address's key, else of the cluster's key, when
  `credentials` are given), with `IMMEDIATE` so nothing queues for a scheduler that is not
  connected. `socket(address)` is that socket. Its connection attempts are bounded
  (`runtime.sockets.connect_options`), so a scheduler given by name (a StatefulSet pod's
  stable name) is reached again at its new address once it comes back.
- Each socket's monitor reports drops and handshake outcomes; `read(address)` takes them in:
  `dropped_since(address, since)` says whether the connection dropped at or after `since`
  (monotonic seconds), and `refusals(addresses)` maps each scheduler whose last handshake
  failed to (for want of keys?, why in words, with what to do). A successful handshake
  clears the refusal.
- Not thread-safe: the Client calls it holding its send lock. `close()` closes everything.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Optional, Sequence, Tuple

import zmq
from zmq.utils.monitor import recv_monitor_message

from runtime.auth import (CLUSTER, HOW_TO_AUTHENTICATE, KEYS_GIVEN_TO_A_PLAIN_CLUSTER,
                          MECHANISM_MISMATCH, AuthConfig, Credentials, make_client, parse_address)
from runtime.sockets import connect_options

__all__ = ["SchedulerConnections", "HOW_TO_AUTHENTICATE"]

# what the scheduler connections' monitors report: drops and handshake outcomes
_MONITORED = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
              | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
              | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


class SchedulerConnections:
    """The PUSH sockets to a client's schedulers and their monitors (module contract)."""

    def __init__(self, context: zmq.Context, addresses: Sequence[str],
                 credentials: Optional[Credentials], auth: Optional[AuthConfig]) -> None:
        self.auth = auth
        self._sockets: Dict[str, zmq.Socket] = {}
        self._monitors: Dict[str, zmq.Socket] = {}
        self._dropped_at: Dict[str, float] = {}    # scheduler -> when its connection last dropped
        # scheduler -> (for want of keys?, why in words) when its last handshake failed
        self._refused: Dict[str, Tuple[bool, str]] = {}
        cluster_key = None if credentials is None else \
            next(k for k, role in credentials.allowed.items() if role == CLUSTER)
        for a in addresses:
            endpoint, server_key = parse_address(a)
            push = context.socket(zmq.PUSH)
            push.setsockopt(zmq.LINGER, 500)
            push.setsockopt(zmq.SNDHWM, 100000)
            push.setsockopt(zmq.IMMEDIATE, 1)     # never queue for a scheduler not connected
            connect_options(push)                 # a name that moved is followed
            if credentials is not None:           # the address's key, else the cluster's
                make_client(push, credentials, server_key or cluster_key)
            self._monitors[a] = push.get_monitor_socket(_MONITORED)
            push.connect(endpoint)
            self._sockets[a] = push

    def socket(self, address: str) -> zmq.Socket:
        return self._sockets[address]

    def read(self, scheduler: str) -> None:
        """Take in what the connection to `scheduler` reported: when it dropped, and whether
        its last handshake failed and why."""
        monitor = self._monitors[scheduler]
        while monitor.poll(0):
            event = recv_monitor_message(monitor)
            what = event["event"]
            if what == zmq.EVENT_DISCONNECTED:
                self._dropped_at[scheduler] = time.monotonic()
            elif what == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._refused.pop(scheduler, None)
            elif what in (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                          zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL):
                self._refused[scheduler] = self._refusal(what, event.get("value"))

    def refusals(self, schedulers: Sequence[str]) -> Dict[str, Tuple[bool, str]]:
        """The schedulers among `schedulers` whose last handshake failed, with why."""
        out = {}
        for a in schedulers:
            self.read(a)
            if a in self._refused:
                out[a] = self._refused[a]
        return out

    def dropped_since(self, scheduler: str, since: float) -> bool:
        """True if the connection to `scheduler` dropped at or after `since`."""
        self.read(scheduler)
        return self._dropped_at.get(scheduler, -1.0) >= since

    def close(self) -> None:
        for a, push in self._sockets.items():
            push.disable_monitor()
            self._monitors[a].close(0)
            push.close(0)

    def _refusal(self, event: int, value: Any) -> Tuple[bool, str]:
        """Why a handshake failed, in words, with what to do; True first when it is for
        want of keys (a plain client meets a failed handshake only with a CURVE server, which
        drops it for its mechanism; it may see that as the connection closing first)."""
        if self.auth is None:
            return True, f"requires authentication and this client has no keys: " \
                         f"{HOW_TO_AUTHENTICATE}"
        return False, self._keyed_refusal(event, value)

    def _keyed_refusal(self, event: int, value: Any) -> str:
        auth = self.auth
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return (f"refused this client's key ({auth.identity} from {auth.key_dir}): the "
                    f"cluster does not know it. Use a client key the cluster authorized, or "
                    f"authorize this one (`cloudburst keys KEY_DIR --add-client --client "
                    f"NAME` in the cluster's key directory, then restart the cluster)")
        if value == MECHANISM_MISMATCH:
            return f"does not use authentication, but {KEYS_GIVEN_TO_A_PLAIN_CLUSTER}"
        return (f"failed the authentication handshake ({value!r}): is the server key in its "
                f"address, or {auth.key_dir}/cluster.key, the cluster's? (or the cluster does "
                f"not use authentication)")
