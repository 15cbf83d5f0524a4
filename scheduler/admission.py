"""What a scheduler's authentication refused: who may send what, and the counts it reports.

Contract:
- `CLIENT_KINDS` is what a client key may send a scheduler: exactly the kinds
  `cloudburst.Client` sends (registry requests, calls, and the `where` / `cancel` of a call in
  flight). Everything else comes from the cluster's own processes (heartbeat, keyset, done,
  causal_abort, cache_reply) or is not for a scheduler at all (schedule, result, ...).
- `FUNCTION_KINDS` is what a function key (an executor worker, running user code) may send:
  exactly what workers send a scheduler (heartbeat, done, causal_abort, values), plus a `call` that
  is an actor's method call or kill (a handle passed to a function: `executor/actor_caller.py`);
  a function may not register, make a plain call, create an actor or list (it is not a
  client), nor send what nodes send (keyset,
  node_status, cache_reply), nor a heartbeat of the kinds only nodes send (a worker's exit,
  or a node vouching for a worker without its address): `admits(frame, kind, payload)`
  reads the heartbeat to tell.
- `Admission(address, security, monitored)`: `admits(frame, kind)` says whether the sender of
  `frame` (its connection's ZAP User-Id) may send `kind`; a refused message is counted per
  (role, kind) in `dropped` and logged at WARNING at most once per `REFUSAL_LOG_PERIOD` per
  (role, kind). With `monitored` (the request socket), `check_handshakes(now)` drains the
  socket's monitor and counts the connections whose CURVE handshake failed (peers that do not
  speak CURVE never reach the ZAP handler), logging at most once per period.
  `refused_connections()` is those plus the ZAP handler's refusals (unknown keys, client keys
  on cluster-only sockets). Without `security` (authentication off) everything is admitted.
- `close()` stops the monitor. Single-threaded: the scheduler's loop owns it.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional, Tuple

import zmq

from hydro_proto.cloudburst_pb2 import ACTOR_KILL, ACTOR_METHOD, Call, WorkerStatus
from runtime.auth import CLUSTER, FUNCTION, MECHANISM_MISMATCH, Security, may_send, role_of

__all__ = ["CLIENT_KINDS", "FUNCTION_KINDS", "REFUSAL_LOG_PERIOD", "Admission"]

log = logging.getLogger("scheduler")

CLIENT_KINDS = frozenset({"register_fn", "register_dag", "delete_dag", "delete_fn", "list",
                          "info", "status", "call", "where", "cancel", "lease",
                          "lease_worker"})
FUNCTION_KINDS = frozenset({"heartbeat", "done", "causal_abort", "values"})
REFUSAL_LOG_PERIOD = 10.0  # seconds between two warnings about one (role, kind) dropped

_HANDSHAKE_FAILURES = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL


def _actor_call_of_function(payload: Any) -> bool:
    """Whether a function's `call` is what functions may send: an actor's method call or kill
    (a handle passed to the function), never a creation or a plain call."""
    try:
        call = Call.FromString(payload)
    except Exception:
        return False
    return call.HasField("actor") and call.actor.op in (ACTOR_METHOD, ACTOR_KILL)


class Admission:
    """The sender checks and refusal counts of one scheduler (see the module contract)."""

    def __init__(self, address: str, security: Optional[Security],
                 monitored: Optional[zmq.Socket] = None) -> None:
        self.address = address
        self.security = security
        self.dropped: Dict[Tuple[str, str], int] = {}      # (role, kind) -> messages dropped
        self._dropped_logged: Dict[Tuple[str, str], float] = {}
        self.refused_handshakes = 0                          # peers that do not speak CURVE
        self._handshake_logged = float("-inf")
        self._monitored = monitored if security is not None else None
        self._handshakes = self._monitored.get_monitor_socket(_HANDSHAKE_FAILURES) \
            if self._monitored is not None else None

    def admits(self, frame: Any, kind: str, payload: Any = None) -> bool:
        """Whether the sender of `frame` may send `kind` (and, for a function's heartbeat,
        `payload`); a refusal is counted and logged."""
        if self.security is None:
            return True
        role = role_of(frame)
        if role == FUNCTION and kind == "heartbeat" and payload is not None:
            try:
                status = WorkerStatus.FromString(payload)
            except Exception:           # the handler drops it as malformed
                return True
            if status.exited or not status.address:     # what only a node sends
                self._drop(role, "heartbeat (a node's)")
                return False
        if role == FUNCTION and kind == "call" and payload is not None and \
                _actor_call_of_function(payload):
            return True
        if role == CLUSTER or may_send(role or "", kind, CLIENT_KINDS, FUNCTION_KINDS):
            return True
        self._drop(role, kind)
        return False

    def _drop(self, role: Optional[str], kind: str) -> None:
        who = (role or "(no role)", kind)
        count = self.dropped[who] = self.dropped.get(who, 0) + 1
        now = time.monotonic()
        if now - self._dropped_logged.get(who, float("-inf")) >= REFUSAL_LOG_PERIOD:
            self._dropped_logged[who] = now
            allowed = FUNCTION_KINDS if role == FUNCTION else CLIENT_KINDS
            log.warning("dropped a %r message from %s: a %s may only send %s (%d such "
                        "message(s) dropped)", kind, who[0],
                        "function" if role == FUNCTION else "client",
                        ", ".join(sorted(allowed)), count)

    def check_handshakes(self, now: float) -> None:
        """Count (and log, rate-limited) the connections the CURVE handshake refused."""
        if self._handshakes is None:
            return
        from zmq.utils.monitor import recv_monitor_message
        while self._handshakes.poll(0):
            try:
                event = recv_monitor_message(self._handshakes)
            except (zmq.ZMQError, ValueError):
                return
            self.refused_handshakes += 1
            if now - self._handshake_logged < REFUSAL_LOG_PERIOD:
                continue
            self._handshake_logged = now
            value = event.get("value", 0)
            why = "it does not use CURVE (a client without keys?)" \
                if value == MECHANISM_MISMATCH else \
                f"its handshake failed ({int(value):#x}; a peer without keys, or with " \
                f"another cluster's key?)"
            log.warning("refused a connection to %s: %s; the cluster requires "
                        "authentication (%d refused so far)", self.address, why,
                        self.refused_handshakes)

    def refused_connections(self) -> int:
        """Connections refused at the handshake: unknown keys, client keys on cluster-only
        sockets (the ZAP authenticator), and peers that do not speak CURVE."""
        if self.security is None:
            return 0
        return self.security.authenticator.refused + self.refused_handshakes

    def close(self) -> None:
        if self._handshakes is not None:
            self._monitored.disable_monitor()
            self._handshakes.close(0)
            self._handshakes = None
