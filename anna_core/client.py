"""The Anna client: key operations sent straight to the KVS workers that own the key.

Contract (DESIGN.md "Processes", dissertation 3.2.5):
- One PULL socket bound on a free port receives every answer (routing's and workers');
  answers are matched to requests by request id, anything else is discarded as stale.
  One PUSH socket per destination address, cached.
- Key addresses come from routing ("address" kind) and are cached per key. A `WRONG_OWNER`
  answer replaces the cached addresses with the ones it carries, or, when it carries none
  (the worker has no membership yet), drops them so routing is asked again.
- Several routing addresses may be given (`anna_core/key_routing.py`, with the address cache
  and the choice of a replica): lookups go to one (rotating), and a routing that
  does not answer within `routing_timeout` is skipped for `ROUTING_SUSPECT_SECONDS` while
  another is left. A lookup answered NO_NODES asks the routings that have not said so first
  (a routing made again knows no node until the nodes' heartbeats reach it), and raises
  NoNodes only once every routing said it or stayed silent, and `NO_NODES_PATIENCE` routing
  timeouts (3 s) have passed. ROUTING_NOT_READY (a routing that has not learned the
  membership yet) is asked again, other routings first, until the operation's deadline. `set_replication` goes to every routing (first answer wins), so they all
  hold the override.
- Every operation has one deadline, `timeout * (retries + 1)`. Single-replica operations
  (get/put/delete) pick one replica (sticky per client and key, so a client reads its own
  writes); each attempt waits `attempt_timeout` when another replica is left to try, else
  `timeout`. On a silent replica the client drops the key's cached addresses, asks routing
  again and retries elsewhere, avoiding the silent worker for a while; a dead node's keys are
  served again once routing has removed it (within its heartbeat timeout). Redirects
  (WRONG_OWNER) are retried within the same deadline. At the deadline `Timeout` names the
  key and the last address tried.
- `get_all`/`put_all` address every replica in every tier; `get_all` merges the replicas'
  values with the kernel's lattice `merge` (never in Python); `put_all` returns only when
  every replica of the key's current placement acknowledged: a replica that stays silent
  makes it ask routing again until the deadline, so after a node died it succeeds once
  routing has removed the node (the acknowledging replicas then hold the value, and the
  kernel copies it to the replacement replicas). At the deadline `Timeout` names the key
  and the replicas that did not acknowledge.
- `put(key, value, quorum=...)` chooses when a put is acknowledged (`config.check_write_quorum`):
  "one" (default: one replica, as above), "all" (`put_all`), or n: sent to every replica,
  returned once n of the key's current replicas acknowledged (all of them when it has
  fewer), with `put_all`'s retries and deadline.
- DELETE carries the client's timestamp (`KeyTuple.timestamp`, from its MonotoneClock): the
  kernel keeps it as the key's tombstone.
- Plain bytes are stored as `LWWLattice(timestamp, value)` with a timestamp strictly
  increasing per client (`time.time_ns()` or last + 1); `get` of an LWW key returns bytes.
- Server error codes become typed errors (`anna_core.errors`). A Client is not thread-safe.
- The request path is native (`_core.ClientTransport`, csrc/client_transport.hpp): the
  answer socket, the sockets to workers and routing, CURVE and the wait for an answer are
  C++, and each get/put/delete attempt is one call (`Transport.key_request`) that builds the
  request, sends it, waits and decodes the answer with the GIL released. With `auth`
  the answer socket is a CURVE server admitting only the cluster's key, and requests go only
  to addresses carrying their server's key, as every other client of the platform. An
  answer above `max_answer_bytes` (the largest value plus a scan page) is dropped unread and
  counted; a `Timeout` then says so. A `context`, when given, serves only the sockets of
  `subscription()`.
"""
from __future__ import annotations

import time
import uuid
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import zmq

from hydro_proto import anna_pb2

from runtime.auth import ADDRESS_KEY_MARK, CLUSTER, AuthConfig, Security, check_client_auth

from . import _core
from .config import ALL, DEFAULT_MAX_VALUE_BYTES, ONE, Replication, WriteQuorum, \
    check_write_quorum
from .errors import (KeyNotFound, LatticeTypeMismatch, MalformedRequest, NoNodes,
                     NotPermitted, Timeout, ValueTooLarge, error_from_code)
from .client_reports import ClientLatencyReports
from .transport import Transport
from .key_routing import KeyRouting
from .subscription import Subscription, Update, Value, is_lattice as _is_lattice, \
    reveal_value as _reveal_value
from .wire import MonotoneClock, lattice_to_tuple, tuple_to_lattice

__all__ = ["Client", "Subscription", "Update"]

MAX_REFRESH_HINTS = 10_000   # keys whose replica-count hint the client remembers


def routing_addresses(routing: Union[str, Sequence[str]]) -> List[str]:
    """Routing addresses from one address, a comma-separated string or a sequence."""
    items = [routing] if isinstance(routing, str) else list(routing)
    out = [a.strip() for item in items for a in str(item).split(",") if a.strip()]
    if not out:
        raise ValueError("at least one routing address is needed")
    return list(dict.fromkeys(out))


# The fields of a single-key answer (`Transport.key_request`).
_ERROR, _LATTICE_TYPE, _PAYLOAD, _REVEALED, _REPLICAS, _ADDRESSES, _ERROR_DETAIL, _RESPONDER = \
    range(8)

# What wrapping a value as an LWW payload adds at most (the kernel's codec).
_LWW_OVERHEAD = _core.lww_payload_bound(0)

_OP_NAMES = {anna_pb2.GET: "GET", anna_pb2.PUT: "PUT", anna_pb2.DELETE: "DELETE",
             anna_pb2.SUBSCRIBE: "SUBSCRIBE", anna_pb2.UNSUBSCRIBE: "UNSUBSCRIBE"}


class Client:
    """A client of one Anna cluster, given its routing address(es).

    Args:
        routing_address: e.g. "tcp://127.0.0.1:5555" (`LocalCluster.routing_address`), a
            comma-separated list, or a sequence of addresses (`LocalCluster.routing_addresses`).
        timeout: seconds to wait for one answer from the last replica left to try.
        retries: with `timeout`, sets every operation's deadline: `timeout * (retries + 1)`.
        attempt_timeout: seconds to wait for one replica while another one is left to try
            (default min(timeout, 0.5)).
        routing_timeout: seconds to wait for one routing before asking another (default
            min(timeout, 1.0)).
        ip: the local address to bind the answer socket on (must be reachable by workers).
        context: a ZMQ context for the sockets of `subscription()` (default: a private one,
            made on the first subscription and closed by `close()`); requests never use it.
        auth: this client's keys (`runtime.auth.AuthConfig(key_dir, "client:NAME")`, or the
            "cluster" identity for the cluster's own processes). Required when the routing
            address carries the cluster's key (`...#k=<hex>`): AuthenticationRequired
            otherwise. None talks plain to a cluster without authentication.
    """

    def __init__(self, routing_address: Union[str, Sequence[str]], *, timeout: float = 5.0,
                 retries: int = 2, ip: str = "127.0.0.1", context: Optional[zmq.Context] = None,
                 attempt_timeout: Optional[float] = None,
                 routing_timeout: Optional[float] = None,
                 auth: Optional[AuthConfig] = None,
                 max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
                 report_period: Optional[float] = None,
                 client_id: Optional[str] = None) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        self.routing_addresses = routing_addresses(routing_address)
        check_client_auth(self.routing_addresses, auth, "the Anna cluster")
        self.routing_address = self.routing_addresses[0]
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.attempt_timeout = min(self.timeout, 0.5) if attempt_timeout is None \
            else float(attempt_timeout)
        self.routing_timeout = min(self.timeout, 1.0) if routing_timeout is None \
            else float(routing_timeout)
        self.max_value_bytes = int(max_value_bytes)
        if self.attempt_timeout <= 0 or self.routing_timeout <= 0:
            raise ValueError("attempt_timeout and routing_timeout must be > 0")
        self.ip = ip
        # Only subscriptions' sockets use a ZeroMQ context of Python's (made on first use).
        self._own_context = context is None
        self._context = context
        self._security: Optional[Security] = None
        self.auth = auth
        self._transport = Transport(ip, auth, self.max_value_bytes)
        self.max_answer_bytes = self._transport.max_answer_bytes
        self.response_address = self._transport.address
        self._clock = MonotoneClock()
        self._id_prefix = uuid.uuid4().hex[:12]
        self._salt = zlib.crc32(self._id_prefix.encode())
        self._seq = 0
        # where key requests go (`key_routing.py`); tools (backups) ask routing through it
        self.routing = KeyRouting(self, self._transport, self._next_id, self._salt)
        self._addresses = self.routing.cache          # (key, all tiers?) -> its addresses
        self._suspects = self.routing.suspects        # workers silent lately
        self._subscriptions: List[Subscription] = []
        self.latency_reports: Optional[ClientLatencyReports] = None
        self._refreshed_for: Dict[str, int] = {}   # key -> replica count last refreshed for
        if report_period is not None:
            self.latency_reports = ClientLatencyReports(client_id or self._id_prefix,
                                                        report_period)
        self.closed = False

    # ---- public API ---------------------------------------------------------------------

    def get(self, key: str) -> Value:
        """The value of `key`: bytes for an LWW key, the lattice object otherwise.

        Raises KeyNotFound, Timeout, NoNodes or another AnnaError.
        """
        answer = self._single(anna_pb2.GET, key, reveal=True)
        if answer[_REVEALED]:
            return answer[_PAYLOAD]        # an LWW value, decoded by the kernel's codec
        return _reveal_value(self._decode_answer(key, answer, "GET"))

    def get_lattice(self, key: str) -> Any:
        """The lattice stored under `key` (an `LWWLattice` for plain bytes)."""
        return self._decode_answer(key, self._single(anna_pb2.GET, key), "GET")

    def put(self, key: str, value: Value, *, quorum: WriteQuorum = ONE) -> None:
        """Merge `value` into `key`; returns once `quorum` replicas acknowledged.

        `value` is bytes (stored as LWWLattice with this client's next timestamp) or any
        lattice. `quorum`: "one" (default: one replica; gossip spreads the write to the
        others within an epoch, so it is lost if that replica dies first), "all" (every
        replica of the key's current placement in every tier, as `put_all`), or an int n
        (sent to every replica; n of them, or all when the key has fewer). Raises
        LatticeTypeMismatch, ValueTooLarge, DiskFull (a disk-tier replica's disk is full:
        nothing was stored), Timeout (naming the key and the replicas that did not
        acknowledge), ... on failure.
        """
        if quorum is not ONE:
            quorum = check_write_quorum(quorum)
        if quorum == ONE:
            if type(value) is bytes and len(value) + _LWW_OVERHEAD <= self.max_value_bytes:
                # wrapped as an LWW value in C++, within the limit whatever the timestamp
                self._single(anna_pb2.PUT, key, payload=value, lww_at=self._clock.next())
            else:
                t = self._tuple_for(key, value)
                self._single(anna_pb2.PUT, key, lattice_type=t.lattice_type, payload=t.payload)
        else:
            self._all(anna_pb2.PUT, key, self._tuple_for(key, value),
                      quorum=None if quorum == ALL else int(quorum))

    def delete(self, key: str) -> int:
        """Delete `key` (on one replica; forwarded to the others). Deleting a missing key is
        not an error. Returns the tombstone's timestamp (a value written with a later one
        outlives the delete)."""
        timestamp = self._clock.next()
        try:
            self._single(anna_pb2.DELETE, key, timestamp=timestamp)
        except KeyNotFound:
            pass
        return timestamp

    def get_all(self, key: str) -> Value:
        """Read every replica of `key` in every tier and return their merge.

        Replicas that do not have the key are skipped; KeyNotFound if none has it.
        """
        answers = self._all(anna_pb2.GET, key, anna_pb2.KeyTuple(key=key))
        merged = None
        for address, t in answers:
            if t.error == anna_pb2.KEY_DNE:
                continue
            lattice = self._decode(t, "GET_ALL", address)
            try:
                merged = lattice if merged is None else merged.merge(lattice)
            except TypeError:
                raise LatticeTypeMismatch(
                    f"GET_ALL {key!r}: replicas hold different lattice types "
                    f"({type(merged).__name__} vs {type(lattice).__name__} at {address})",
                    key=key, address=address) from None
        if merged is None:
            raise KeyNotFound(f"GET_ALL {key!r}: key not found on any of {len(answers)} replicas",
                              key=key)
        return _reveal_value(merged)

    def get_replicas(self, key: str) -> List[Tuple[str, Any]]:
        """Every replica's own lattice of `key` (in every tier), unmerged, as
        (worker address, lattice); replicas without the key are left out. Used where the
        meet of the replicas matters (HydroCache's dependency GC), not their join."""
        answers = self._all(anna_pb2.GET, key, anna_pb2.KeyTuple(key=key))
        return [(address, self._decode(t, "GET_REPLICAS", address)) for address, t in answers
                if t.error != anna_pb2.KEY_DNE]

    def put_all(self, key: str, value: Value) -> None:
        """Merge `value` into every replica of `key` in every tier; returns when all acked
        (`put(key, value, quorum="all")`)."""
        self._all(anna_pb2.PUT, key, self._tuple_for(key, value))

    def subscribe(self, key: str, address: str) -> None:
        """Ask every replica of `key` to push UPDATEs to `address` when the key changes.

        With authentication the address must carry its listener's key (a `Subscription`
        made with the same `auth`): the workers push only to authenticated listeners."""
        if self.auth is not None and ADDRESS_KEY_MARK not in address:
            raise ValueError(f"subscribe {key!r}: {address!r} carries no key, and this cluster "
                             f"pushes updates only to authenticated listeners; use "
                             f"Subscription(auth=...) or Client.subscription({key!r})")
        self._all(anna_pb2.SUBSCRIBE, key, anna_pb2.KeyTuple(key=key, subscriber_address=address))

    def unsubscribe(self, key: str, address: str) -> None:
        """Stop the UPDATEs for `key` to `address` (on every replica)."""
        self._all(anna_pb2.UNSUBSCRIBE, key,
                  anna_pb2.KeyTuple(key=key, subscriber_address=address))

    def subscription(self, *keys: str) -> Subscription:
        """A new `Subscription` subscribed to `keys`; closing it unsubscribes."""
        if self._context is None:
            self._context = zmq.Context()
        if self.auth is not None and self._security is None:
            # shared by this client's subscriptions (or one already running on the context)
            self._security = Security.start(self._context, self.auth)
        sub = Subscription(ip=self.ip, context=self._context, client=self, keys=keys,
                           auth=self.auth)
        self._subscriptions.append(sub)  # closed before the shared context in close()
        try:
            for key in keys:
                self.subscribe(key, sub.address)
        except BaseException:
            sub.close()
            raise
        return sub

    def subscription_closed(self, sub: Subscription) -> None:
        """`sub`, made by `subscription`, was closed: the client no longer closes it with
        itself. Unknown subscriptions are ignored."""
        if sub in self._subscriptions:
            self._subscriptions.remove(sub)

    def set_replication(self, key: str, *, memory: int, disk: int, local: int = 1,
                        memory_local: Optional[int] = None,
                        disk_local: Optional[int] = None) -> List[str]:
        """Set `key`'s replication vector through routing; returns its new addresses.

        `memory`/`disk` are replicas (nodes) per tier, `local` threads per node in both tiers
        unless `memory_local`/`disk_local` say otherwise.
        """
        if self.auth is not None and self.auth.identity != CLUSTER:
            # routing drops it from a client key: say so instead of timing out
            raise NotPermitted(f"set_replication of {key!r}: changing placement is reserved to "
                               f"the cluster's key (AuthConfig(key_dir, 'cluster')); this client "
                               f"is {self.auth.identity!r}", key=key)
        replication = Replication(memory, local if memory_local is None else memory_local,
                                  disk, local if disk_local is None else disk_local)
        request = anna_pb2.SetReplication(response_address=self.response_address)
        request.replications.add(key=key, replication=replication.to_proto())
        response = self.routing.ask("replicate", request, f"set_replication of {key!r}", key,
                                     everyone=True)
        self._addresses.pop((key, False), None)
        self._addresses.pop((key, True), None)
        addresses = [list(a.addresses) for a in response.addresses if a.key == key]
        if response.error == anna_pb2.NO_NODES or not addresses or not addresses[0]:
            raise NoNodes(f"set_replication {key!r}: no KVS node for the new vector "
                          f"{replication.as_tuple()}", key=key, address=self.routing_address)
        self._addresses[(key, False)] = addresses[0]
        return addresses[0]

    def addresses(self, key: str, *, all_tiers: bool = False, refresh: bool = False) -> List[str]:
        """The worker addresses of `key` (cached; `refresh=True` asks routing again)."""
        if refresh:
            self._addresses.pop((key, all_tiers), None)
        return list(self.routing.lookup(key, all_tiers))

    def close(self) -> None:
        """Close the sockets (and the private ZMQ context). Idempotent."""
        if self.closed:
            return
        self.closed = True
        for sub in list(self._subscriptions):
            sub.close()  # no UNSUBSCRIBE round trips while closing
        self._subscriptions.clear()
        self._transport.close()
        if self._security is not None:
            self._security.stop()
        if self._own_context and self._context is not None:
            self._context.term()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- requests -------------------------------------------------------------------------

    def _tuple_for(self, key: str, value: Value) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = _core.LWWLattice(self._clock.next(), bytes(value))
        elif not _is_lattice(value):
            raise TypeError(f"put {key!r}: value must be bytes or an anna_core lattice, "
                            f"not {type(value).__name__}")
        t = lattice_to_tuple(key, value)
        if len(t.payload) > self.max_value_bytes:
            raise ValueTooLarge(f"put {key!r}: the value is {len(t.payload):,} bytes, above the "
                                f"cluster's limit of {self.max_value_bytes:,} (the nodes' "
                                f"max_value_bytes; pass the same to Client)", key=key)
        return t

    def _decode_answer(self, key: str, answer: Tuple, op: str) -> Any:
        """The lattice of a `key_request` answer (see `_single`)."""
        try:
            return _core.deserialize(answer[_LATTICE_TYPE], answer[_PAYLOAD])
        except ValueError as e:
            raise MalformedRequest(f"{op} {key!r}: answer payload does not parse ({e})",
                                   key=key, address=answer[_RESPONDER] or None) from None

    def _decode(self, t: Any, op: str, address: Optional[str] = None) -> Any:
        try:
            return tuple_to_lattice(t)
        except ValueError as e:
            raise MalformedRequest(f"{op} {t.key!r}: answer payload does not parse ({e})",
                                   key=t.key, address=address) from None

    def _next_id(self) -> str:
        self._seq += 1
        return f"{self._id_prefix}-{self._seq}"

    def send_kind(self, address: str, kind: str, message: Any) -> None:
        """Send `message` of kind `kind` ("members", "scan", ...) to a node or routing at
        `address` through this client's transport; its answer comes to `response_address`.
        For tools speaking Anna's other requests (backups); raises as the transport does."""
        self._transport.send_kind(address, kind, message)

    def _send_key_request(self, address: str, req_type: int, key_tuple: Any) -> str:
        request_id = self._next_id()
        request = anna_pb2.KeyRequest(type=req_type, response_address=self.response_address,
                                      request_id=request_id)
        request.tuples.append(key_tuple)
        self._transport.send_request(address, request)
        return request_id

    def _collect(self, pending: Dict[str, str], deadline: float,
                 message_type: Type = anna_pb2.KeyResponse,
                 enough: Optional[int] = None) -> Dict[str, Any]:
        """Wait until every request id in `pending` (or `enough` of them) is answered or the
        deadline passes.

        Returns {request_id: parsed answer}; unknown ids (stale answers) are discarded.
        """
        return self._transport.collect(pending, deadline, message_type, enough)

    @staticmethod
    def _tuple_of(response: Any, key: str) -> Any:
        for t in response.tuples:
            if t.key == key:
                return t
        # No tuple for the key: the whole request was rejected.
        return anna_pb2.KeyTuple(key=key, error=response.error or anna_pb2.MALFORMED)

    def _single(self, req_type: int, key: str, *, lattice_type: int = 0, payload: bytes = b"",
                timestamp: int = 0, lww_at: int = 0, reveal: bool = False) -> Tuple:
        """Send one single-key request to one replica of `key`, handling redirects and
        timeouts; returns the answer for the key (`Transport.key_request`: indices `_ERROR`,
        `_LATTICE_TYPE`, `_PAYLOAD`, `_REVEALED`, ...), whose error is NO_ERROR."""
        if self.latency_reports is None:
            return self._single_request(req_type, key, lattice_type, payload, timestamp,
                                        lww_at, reveal)
        started = time.perf_counter()
        try:
            return self._single_request(req_type, key, lattice_type, payload, timestamp,
                                        lww_at, reveal)
        finally:   # a failed request's time is latency the application saw too
            self.latency_reports.record(self, key, time.perf_counter() - started)

    def _single_request(self, req_type: int, key: str, lattice_type: int, payload: bytes,
                        timestamp: int, lww_at: int, reveal: bool) -> Tuple:
        op = _OP_NAMES[req_type]
        deadline = time.monotonic() + self.timeout * (self.retries + 1)
        timed_out: List[str] = []
        backoff = 0.005
        redirects = 0
        while True:
            addresses = self.routing.lookup(key, False)
            fresh = [a for a in addresses if a not in timed_out] if timed_out else addresses
            address = self.routing.pick(key, fresh or addresses)
            # While another replica is left to try, do not wait long for this one.
            sent_at = time.monotonic()
            wait = self.attempt_timeout if len(fresh) > 1 else self.timeout
            first_wait = min(wait, self.attempt_timeout)
            request_id = self._next_id()
            # built, sent, awaited and decoded in one native call, the GIL released
            answer = self._transport.key_request(
                address, req_type, key, request_id, min(deadline, sent_at + first_wait)
                - sent_at, lattice_type, payload, timestamp, lww_at, reveal)
            if answer is None and wait > first_wait:
                # The only replica is slow, or its node left or died and routing has moved
                # the key: ask routing before waiting any longer for it.
                self._addresses.pop((key, False), None)
                if self.routing.lookup(key, False) == addresses:
                    answer = self._transport.key_wait(
                        request_id, key, max(0.0, min(deadline, sent_at + wait)
                                             - time.monotonic()), reveal)
            if answer is None:
                if address not in timed_out:
                    timed_out.append(address)
                self.routing.suspect(address)
                # The node may be dead or have moved: ask routing again, retry elsewhere.
                self._addresses.pop((key, False), None)
                if time.monotonic() >= deadline:
                    raise Timeout(f"{op} {key!r} from {address}{self._transport.timeout_note()}",
                                  key=key, address=address,
                                  seconds=self.timeout * (self.retries + 1))
                continue
            if self._suspects:
                self._suspects.pop(address, None)
            error = answer[_ERROR]
            if error == anna_pb2.WRONG_OWNER:
                if time.monotonic() + backoff >= deadline:
                    raise Timeout(f"{op} {key!r}: an owner (workers at {address} keep "
                                  f"answering WRONG_OWNER)", key=key, address=address)
                redirects += 1
                owners = answer[_ADDRESSES]
                if owners and owners != addresses and redirects <= 3:
                    self._addresses[(key, False)] = owners
                else:
                    self._addresses.pop((key, False), None)
                    time.sleep(backoff)  # retry pacing while membership propagates
                    backoff = min(backoff * 2, 0.1)
                continue
            if error != anna_pb2.NO_ERROR:
                raise error_from_code(error, key=key, address=answer[_RESPONDER] or address,
                                      operation=op, detail=answer[_ERROR_DETAIL])
            replicas = answer[_REPLICAS]
            if replicas > len(addresses) and self._refreshed_for.get(key) != replicas:
                # the key gained replicas since its addresses were cached: ask routing again
                # next time, so requests spread over them (once per replica count: routing
                # may list fewer when the tier has fewer nodes than the vector asks for)
                if len(self._refreshed_for) >= MAX_REFRESH_HINTS:
                    self._refreshed_for.clear()
                self._refreshed_for[key] = replicas
                self._addresses.pop((key, False), None)
            return answer

    def _all(self, req_type: int, key: str, key_tuple: Any,
             quorum: Optional[int] = None) -> List[Tuple[str, Any]]:
        """Send one request to every replica of `key` in every tier; all must answer (or,
        with `quorum`, that many of the current replicas, all when there are fewer).

        A replica that stays silent makes the client ask routing again (a dead node is
        removed within routing's heartbeat timeout) until the deadline. Returns
        [(address, KeyTuple)] for the current replicas that answered; KEY_DNE tuples are
        returned, other errors raised.
        """
        op = _OP_NAMES[req_type] + ("_ALL" if req_type in (anna_pb2.GET, anna_pb2.PUT) else "")
        deadline = time.monotonic() + self.timeout * (self.retries + 1)
        backoff = 0.005
        results: Dict[str, Any] = {}
        while True:
            addresses = self.routing.lookup(key, True)
            need = len(addresses) if quorum is None else min(quorum, len(addresses))
            if quorum is not None and sum(1 for a in addresses if a in results) >= need:
                return [(a, results[a]) for a in addresses if a in results]
            missing = [a for a in addresses if a not in results]
            pending = {self._send_key_request(a, req_type, key_tuple): a for a in missing}
            wait_until = min(deadline, time.monotonic() + self.timeout)
            redirected = False
            while pending:
                acked = sum(1 for a in addresses if a in results)
                answers = self._collect(pending, wait_until,
                                        enough=None if quorum is None else need - acked)
                if not answers:
                    break
                for request_id, response in answers.items():
                    address = pending.pop(request_id)
                    self._suspects.pop(address, None)
                    t = self._tuple_of(response, key)
                    if t.error == anna_pb2.WRONG_OWNER:
                        redirected = True
                        continue
                    if t.error == anna_pb2.KEY_DNE and req_type in (
                            anna_pb2.GET, anna_pb2.DELETE, anna_pb2.UNSUBSCRIBE):
                        results[address] = t
                        continue
                    if t.error != anna_pb2.NO_ERROR:
                        raise error_from_code(t.error, key=key, address=address, operation=op,
                                              detail=t.error_detail)
                    results[address] = t
                if quorum is not None and sum(1 for a in addresses if a in results) >= need:
                    # the quorum holds it; the other replicas were sent it too
                    return [(a, results[a]) for a in addresses if a in results]
            missing = [a for a in addresses if a not in results]
            if not missing and not redirected:
                return [(a, results[a]) for a in addresses]
            self._addresses.pop((key, True), None)   # ask routing afresh
            if redirected:
                if time.monotonic() + backoff >= deadline:
                    raise Timeout(f"{op} {key!r}: the owners (replicas keep answering "
                                  f"WRONG_OWNER)", key=key)
                time.sleep(backoff)  # retry pacing while membership propagates
                backoff = min(backoff * 2, 0.1)
                continue
            for address in missing:
                self.routing.suspect(address)
            if time.monotonic() >= deadline:
                raise Timeout(f"{op} {key!r} from {', '.join(missing)}{self._transport.timeout_note()}",
                              key=key,
                              address=missing[0], seconds=self.timeout * (self.retries + 1))
