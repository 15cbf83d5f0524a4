"""Binding and connecting the platform's ZeroMQ sockets.

Contract:
- `bind_pull(context, ip, port=0, ipc_dir=None, max_frame_bytes=DEFAULT_MAX_FRAME_BYTES)`
  binds a PULL socket on `tcp://ip:port` (0 picks a free port) or, with `ipc_dir`, on a fresh
  Unix socket in that directory (cheaper when every process is on one host; mode 0666, as
  reachable as a loopback port to whoever may search the directory), and returns it
  with the address peers connect to. A peer that sends a frame larger than `max_frame_bytes`
  (16 MiB by default, `framing.MAX_FRAME_BYTES`) is disconnected by ZeroMQ before the frame is
  buffered (`zmq.MAXMSGSIZE`, applied from the handshake on, so before authentication too);
  the socket keeps serving everyone else.
- `PushCache` keeps one connected PUSH socket per destination address, created on first use.
  Sends never block: a full or unreachable peer drops the message and the send returns False.
  A malformed address (see `check_address`) is refused: logged at WARNING with the address,
  the send returns False, nothing is raised. At most `max_sockets` sockets stay open. An
  evicted socket keeps what it queued within the last `evict_linger_ms` (it lingers only for
  the rest of that time), so a message sent just before its eviction still leaves; at most a
  quarter of `max_sockets` evicted sockets linger at once (beyond that, in a flood, an evicted
  socket lingers at most `FLOOD_LINGER_MS`, so an answer to a new peer is not dropped before
  its handshake completes).
  Two budgets count every cache's sockets, open or lingering: the caches of one ZeroMQ context
  together stay below the context's MAX_SOCKETS (less `CONTEXT_RESERVE` for bound and client
  sockets), and all the caches of the process together stay within
  `runtime.limits.descriptor_budget()` (what the descriptor limit leaves); short of either, a
  cache closes its least recently used socket at once. Those budgets count the sockets a cache
  holds, but ZeroMQ releases a closed socket's descriptors later, in its own threads (far
  later on a loaded machine, while a flood closes and opens sockets by the thousand), so a
  cache also opens a socket only while the process' descriptors really open stay below
  `runtime.limits.descriptor_ceiling` (counted before each new socket by one `stat`; where
  only a directory listing counts them, again once the sockets opened since could have spent
  the room last seen; a soft bound, `runtime.limits` says by how much it is passed). Short of
  room, it closes its least recently used socket at once and waits for ZeroMQ to release
  closed sockets for at most `REAPER_WAIT` (0.5 s); then it drops the send (logged, returns
  False). So a flood of distinct addresses never exhausts the process' descriptors, and
  bound sockets keep accepting new peers.
  A new socket refused with EMFILE (closed sockets not yet reaped by ZeroMQ's reaper thread)
  is retried for at most `REAPER_WAIT` (0.5 s) before the send is dropped.
  It is not thread-safe; each thread that sends keeps its own.
- Every socket that connects (`PushCache`'s, and any other made with `connect_options`)
  gives up a TCP connection attempt after `CONNECT_TIMEOUT_MS` and tries again, resolving the
  address's host name afresh. A peer that went away without an answer (a pod whose address
  vanished, SYNs dropped) therefore holds a connection attempt for at most that long, not
  the kernel's two minutes of SYN retries, and a name that moved to a new address (a
  StatefulSet pod made again) is followed within about `CONNECT_TIMEOUT_MS` of the name's
  new address being resolvable.
- Authentication (opt-in, `runtime.auth`): `bind_pull(..., auth=credentials)` makes the socket
  a CURVE server (its context needs a running `auth.Authenticator`) and returns its address
  with the server's public key (`tcp://host:port#k=<hex key>`). It admits only cluster keys
  unless bound with `audience="any"` (sockets clients send to: routing, schedulers). `check_address` accepts such
  an address. A `PushCache(..., auth=credentials)` connects to a keyed address as a CURVE
  client of that key and refuses (logged at WARNING, send returns False) an address without a
  key; a cache without credentials connects plainly to the endpoint (a CURVE server then
  refuses it). Without credentials everything is as before.
"""
from __future__ import annotations

import collections
import errno
import heapq
import logging
import os
import re
import threading
import time
import uuid
import weakref
from typing import Any, Callable, List, Optional, Sequence, Tuple

import zmq

from .auth import (Credentials, format_address, make_client, make_server, parse_address,
                   strip_key)
from .framing import MAX_FRAME_BYTES, encode, send, send_kind, send_request, split
from .limits import descriptor_budget, descriptor_limit, open_descriptors, sockets_openable

__all__ = ["bind_pull", "check_address", "endpoint_of", "ipc_dir_of", "PushCache",
           "connect_options", "CONNECT_TIMEOUT_MS", "ZERO_COPY_BYTES", "DEFAULT_MAX_FRAME_BYTES", "DEFAULT_MAX_SOCKETS",
           "DEFAULT_EVICT_LINGER_MS", "CONTEXT_RESERVE"]

log = logging.getLogger("runtime.sockets")

# Frames at least this large are handed to ZeroMQ without a copy.
ZERO_COPY_BYTES = 64 * 1024

# Largest frame a bound socket accepts by default: the platform's frame limit (16 MiB, the
# same in the KVS kernel). ZeroMQ applies it from the handshake on, so a peer without a key
# cannot make a process buffer more; larger payloads travel as several frames.
DEFAULT_MAX_FRAME_BYTES = MAX_FRAME_BYTES

# A TCP connection attempt is given up after this long, and the next one resolves the host
# name again (ZeroMQ re-resolves at every attempt, but by default an attempt waits out the
# kernel's SYN retries, about two minutes, on an address whose host vanished). The native
# client's push sockets use the same value (anna_core/csrc/push_cache.hpp, kConnectTimeoutMs).
CONNECT_TIMEOUT_MS = 1000
# Sockets one PushCache keeps open before it closes the least recently used one.
DEFAULT_MAX_SOCKETS = 512
# How long an evicted socket may keep trying to deliver what it queued (ms since its last use).
DEFAULT_EVICT_LINGER_MS = 100
# ... and at most this long when a quarter of the cache's maximum already lingers (a flood).
FLOOD_LINGER_MS = 20
# Sockets of a context left to everything that is not a PushCache (bound sockets, clients,
# sockets closed but still lingering).
CONTEXT_RESERVE = 128
# A new socket refused with EMFILE is retried this long while the context's reaper thread
# frees the slots of sockets closed just before (zmq_close is asynchronous).
REAPER_WAIT = 0.5
# A cache holding fewer sockets than this may always open one more (it is never starved by
# the other caches of its context; the reserve absorbs it).
_FLOOR = 8


def bind_pull(context: zmq.Context, ip: str = "127.0.0.1", port: int = 0,
              ipc_dir: Optional[str] = None, rcvhwm: int = 100000,
              max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
              auth: Optional[Credentials] = None,
              audience: str = "cluster") -> Tuple[zmq.Socket, str]:
    """A bound PULL socket and its connectable address (see the module contract); with
    `auth`, a CURVE server whose address carries its public key, admitting only cluster keys
    (`audience="cluster"`, the default) or client keys too (`audience="any"`)."""
    socket = context.socket(zmq.PULL)
    try:
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, rcvhwm)
        if max_frame_bytes and max_frame_bytes > 0:
            socket.setsockopt(zmq.MAXMSGSIZE, int(max_frame_bytes))
        if auth is not None:
            make_server(socket, auth, audience)
        if ipc_dir:
            path = os.path.join(ipc_dir, uuid.uuid4().hex[:16])
            socket.bind(f"ipc://{path}")
            # as reachable as a loopback TCP port (executor workers run under another uid):
            # the directory decides who can reach it, CURVE who is admitted
            os.chmod(path, 0o666)
            address = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            socket.bind(f"tcp://{ip}:{port if port else '*'}")
            address = endpoint_of(socket)
    except BaseException:
        socket.close(0)
        raise
    return socket, (address if auth is None else format_address(address, auth.keypair.public))


def connect_options(socket: zmq.Socket) -> zmq.Socket:
    """Set what every connecting socket needs before `connect` (module contract): a
    connection attempt is given up after `CONNECT_TIMEOUT_MS`, and the next attempt resolves
    the address's host afresh. Returns the socket."""
    socket.setsockopt(zmq.CONNECT_TIMEOUT, CONNECT_TIMEOUT_MS)
    return socket


def endpoint_of(socket: zmq.Socket) -> str:
    """The address a socket is bound on, as peers should connect to it."""
    endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
    # A wildcard host cannot be connected to; loopback is the only sensible fallback.
    return endpoint.replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")


_ADDRESS = re.compile(r"^(tcp://[^\s:/]+:[0-9]{1,5}|ipc://\S+)$")
_INPROC = re.compile(r"^inproc://\S+$")


def check_address(address: Any, what: str = "a service") -> str:
    """`address` if it is a ZeroMQ address peers can connect to, optionally carrying its
    server's key (`#k=<hex>`); ValueError saying which form is expected otherwise (a bare
    `host:port` is the usual mistake)."""
    endpoint = address
    if isinstance(address, str):
        try:
            endpoint = parse_address(address)[0]
        except ValueError as e:
            raise ValueError(f"{_shown(address)} is not the address of {what}: {e}") from None
    if not isinstance(address, str) or not _ADDRESS.fullmatch(endpoint) or len(address) > 1024 \
            or (endpoint.startswith("tcp://") and not 0 < int(endpoint.rsplit(":", 1)[1]) < 65536):
        hint = f" (did you mean 'tcp://{address}'?)" if isinstance(address, str) \
            and re.match(r"^[^\s:/]+:[0-9]{1,5}$", address) else ""
        raise ValueError(f"{_shown(address)} is not the address of {what}: expected "
                         f"'tcp://host:port' or 'ipc:///path'{hint}")
    return address


def _shown(address: Any) -> str:
    """An untrusted address for a log line: repr, truncated."""
    text = repr(address)
    return text if len(text) <= 120 else text[:117] + "..."


def ipc_dir_of(address: str) -> Optional[str]:
    """The directory of an `ipc://` address (None for other transports)."""
    address = strip_key(address)
    return os.path.dirname(address[len("ipc://"):]) if address.startswith("ipc://") else None


class _Budget:
    """Sockets counted against one limit, open or lingering, shared by every cache (and
    thread) that draws on it: the sockets of one ZeroMQ context, or the process' descriptors
    (`runtime.limits.descriptor_budget`)."""

    def __init__(self, limit: int, limit_of: Optional[Callable[[], int]] = None) -> None:
        self.limit = limit
        self._limit_of = limit_of                      # a limit that may shrink later
        self.used = 0                                  # open sockets
        self.lingering: List[float] = []               # heap: until when each one lingers
        self.lock = threading.Lock()

    def take(self, own: int, now: float) -> bool:
        """Count one more socket; False when none is left for a cache that already holds
        `own` sockets (it must close one of its own first)."""
        with self.lock:
            while self.lingering and self.lingering[0] <= now:
                heapq.heappop(self.lingering)
            if self._limit_of is not None:
                self.limit = self._limit_of()
            if self.used + len(self.lingering) >= self.limit and own >= _FLOOR:
                return False
            self.used += 1
            return True

    def give(self, n: int = 1, linger_until: Optional[float] = None) -> None:
        """`n` sockets closed; with `linger_until`, one closed socket that keeps its
        descriptors until then."""
        with self.lock:
            self.used = max(0, self.used - n)
            if linger_until is not None:
                heapq.heappush(self.lingering, linger_until)


_budgets: "weakref.WeakKeyDictionary[zmq.Context, _Budget]" = weakref.WeakKeyDictionary()
_budgets_lock = threading.Lock()
_process_budget: Optional[_Budget] = None


def _budgets_of(context: zmq.Context) -> Tuple[_Budget, _Budget]:
    """The budget of `context`'s sockets and the process' descriptor budget."""
    global _process_budget
    with _budgets_lock:
        budget = _budgets.get(context)
        if budget is None:
            limit = max(_FLOOR, int(context.get(zmq.MAX_SOCKETS)) - CONTEXT_RESERVE)
            budget = _budgets[context] = _Budget(limit)
        if _process_budget is None:
            _process_budget = _Budget(descriptor_budget(), descriptor_budget)
        return budget, _process_budget


class _Ceiling:
    """The process' descriptors really open, against `limits.descriptor_ceiling`: sockets
    closed but not yet released by ZeroMQ's threads are counted too. Looked at before every
    new socket where the count is one `stat`; where it takes a directory listing, again only
    once the sockets opened since the last look could have spent the room it showed (each at
    most `FDS_PER_SOCKET` descriptors)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.credit = 0            # sockets that may still be opened without listing
        self.open_now = 0          # what the last look saw

    def take(self) -> bool:
        """One more socket may be opened (False: the process is at its ceiling now)."""
        with self.lock:
            seen = open_descriptors(cheap_only=True)
            if seen is not None:
                self.open_now = seen
                return sockets_openable(descriptor_limit(), seen) > 0
            if self.credit <= 0:
                seen = open_descriptors()
                self.open_now = -1 if seen is None else seen
                self.credit = 1 << 30 if seen is None \
                    else sockets_openable(descriptor_limit(), seen)
            if self.credit <= 0:
                return False
            self.credit -= 1
            return True


_ceiling = _Ceiling()


class _Entry:
    __slots__ = ("socket", "last_use")

    def __init__(self, socket: zmq.Socket, now: float) -> None:
        self.socket = socket
        self.last_use = now


class PushCache:
    """One connected PUSH socket per destination, least recently used closed first; see the
    module contract.

    `linger_ms` > 0 lets a message sent just before the process exits still leave; clients
    that close often and must never wait on close pass 0. `max_sockets` bounds the sockets
    this cache keeps open; `evict_linger_ms` bounds how long an evicted one may linger."""

    def __init__(self, context: zmq.Context, *, sndhwm: int = 100000, linger_ms: int = 500,
                 max_sockets: int = DEFAULT_MAX_SOCKETS,
                 evict_linger_ms: int = DEFAULT_EVICT_LINGER_MS,
                 auth: Optional[Credentials] = None) -> None:
        if max_sockets < 1:
            raise ValueError(f"PushCache: max_sockets must be at least 1, not {max_sockets}")
        self._context = context
        self._sndhwm = sndhwm
        self._linger_ms = linger_ms
        self._max = max_sockets
        self._evict_linger_ms = max(0, min(evict_linger_ms, linger_ms))
        self._budgets = _budgets_of(context)
        self._auth = auth
        self._sockets: "collections.OrderedDict[str, _Entry]" = collections.OrderedDict()
        self._lingering: "collections.deque[float]" = collections.deque()   # until when
        self.evictions = 0      # sockets closed to stay within the bounds
        self.refused = 0        # sends refused for a malformed address
        self.descriptor_waits = 0   # pauses for closed sockets' descriptors to be released

    def __len__(self) -> int:
        return len(self._sockets)

    def socket(self, address: str) -> zmq.Socket:
        """The PUSH socket connected to `address`; ValueError for a malformed address,
        zmq.ZMQError when ZeroMQ cannot open or connect one."""
        now = time.monotonic()
        entry = self._sockets.get(address)
        if entry is not None:
            entry.last_use = now
            self._sockets.move_to_end(address)
            return entry.socket
        if not (isinstance(address, str) and _INPROC.fullmatch(address) and len(address) <= 1024):
            check_address(address, "a peer")     # inproc: this process' own sockets
        endpoint, server_key = parse_address(address)
        if self._auth is not None and server_key is None and not endpoint.startswith("inproc://"):
            raise ValueError(f"{_shown(address)} carries no server key; authentication is on, "
                             f"so it is refused")
        while len(self._sockets) >= self._max:
            self._evict(now)
        # A socket from every budget; short of one, close an own socket at once (an evicted
        # socket that lingered would still count).
        while not self._take(now):
            self._evict(now, may_linger=False)
        if not _ceiling.take():
            if self._sockets:                 # one of ours closes at once to make room
                self._evict(now, may_linger=False)
            if not self._wait_for_descriptors():
                self._give()
                raise zmq.ZMQError(errno.EMFILE,
                                   f"{_ceiling.open_now} descriptors open, at the ceiling for "
                                   f"sockets; closed ones not released within {REAPER_WAIT} s")
        try:
            s = self._new_push_socket()
        except BaseException:
            self._give()
            raise
        try:
            s.setsockopt(zmq.LINGER, self._linger_ms)
            s.setsockopt(zmq.SNDHWM, self._sndhwm)
            s.setsockopt(zmq.IMMEDIATE, 0)
            connect_options(s)
            if self._auth is not None and server_key is not None:
                make_client(s, self._auth, server_key)
            s.connect(endpoint)
        except BaseException:
            s.close(0)
            self._give()
            raise
        self._sockets[address] = _Entry(s, now)
        return s

    def _new_push_socket(self) -> zmq.Socket:
        """A new PUSH socket. zmq_close is asynchronous: a closed socket keeps its slot in
        the context until the context's reaper thread gets to it, which on a loaded machine
        can lag behind a burst of evictions. EMFILE is therefore retried for at most
        `REAPER_WAIT` seconds (bounded back-off while that thread frees slots), then raised."""
        deadline = time.monotonic() + REAPER_WAIT
        pause = 0.001
        while True:
            try:
                return self._context.socket(zmq.PUSH)
            except zmq.ZMQError as e:
                if e.errno != errno.EMFILE or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _wait_for_descriptors(self) -> bool:
        """Room for one more socket below the process' descriptor ceiling (`_Ceiling`),
        waiting at most `REAPER_WAIT` (bounded back-off) for ZeroMQ's threads to release
        sockets closed just before; False if there is still none."""
        deadline = time.monotonic() + REAPER_WAIT
        pause = 0.001
        while not _ceiling.take():
            if time.monotonic() >= deadline:
                return False
            self.descriptor_waits += 1
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return True

    def _take(self, now: float) -> bool:
        """One socket from the context's budget and from the process' descriptors."""
        context, process = self._budgets
        if not context.take(len(self._sockets), now):
            return False
        if not process.take(len(self._sockets), now):
            context.give()
            return False
        return True

    def _give(self, n: int = 1, linger_until: Optional[float] = None) -> None:
        for budget in self._budgets:
            budget.give(n, linger_until)

    def _evict(self, now: float, may_linger: bool = True) -> None:
        """Close the least recently used socket; it lingers only for what is left of
        `evict_linger_ms` since its last use, and counts against the budgets until then."""
        address, entry = self._sockets.popitem(last=False)
        linger = max(0, int(self._evict_linger_ms - (now - entry.last_use) * 1000))
        while self._lingering and self._lingering[0] <= now:
            self._lingering.popleft()
        if not may_linger:
            linger = 0                 # out of budget: close at once
        elif len(self._lingering) >= max(1, self._max // 4):
            # a flood: still a moment for what it queued (an answer to a new peer must not be
            # dropped before its handshake completes); the budgets count it until then
            linger = min(linger, FLOOD_LINGER_MS)
        elif linger:
            self._lingering.append(now + linger / 1000)
        until = now + linger / 1000 if linger else None
        entry.socket.close(linger)
        self._give(linger_until=until)
        self.evictions += 1
        log.debug("closed the least recently used socket (to %s)", address)

    def _socket_or_none(self, address: str, kind: str) -> Optional[zmq.Socket]:
        """`socket(address)`, or None (logged) when the address is malformed or ZeroMQ refuses
        it: a bad address in a message never raises into the service's loop."""
        try:
            return self.socket(address)
        except ValueError as e:
            self.refused += 1
            log.warning("dropped a %s message: %s", kind or "raw", e)
        except zmq.ZMQError as e:
            log.warning("dropped a %s message to %s: cannot connect (%s)", kind or "raw",
                        _shown(address), e)
        return None

    def send(self, address: str, kind: str, message: Any) -> bool:
        """Send a Cloudburst message (`framing.encode`) to `address`; False if dropped."""
        s = self._socket_or_none(address, kind)
        return s is not None and send(s, kind, message)

    def send_with_frames(self, address: str, kind: str, message: Any,
                         frames: Sequence[Any] = ()) -> bool:
        """A Cloudburst message followed by raw value frames (large ones not copied, never
        copied into a protobuf). False, and a warning, if the peer is not accepting."""
        s = self._socket_or_none(address, kind)
        if s is None:
            return False
        out = split(encode(kind, message))
        for f in frames:
            out += split(f)             # each value: parts under MAX_FRAME_BYTES
        zero_copy = any(len(f) >= ZERO_COPY_BYTES for f in frames)
        try:
            s.send_multipart(out, flags=zmq.NOBLOCK, copy=not zero_copy)
            return True
        except zmq.Again:
            log.warning("dropped a %s message to %s (peer not accepting)", kind, address)
            return False

    def send_kind(self, address: str, kind: str, message: Any) -> bool:
        """Send an Anna `[kind][payload]` to `address` without blocking; False if dropped."""
        s = self._socket_or_none(address, kind)
        return s is not None and send_kind(s, kind, message)

    def send_request(self, address: str, message: Any) -> bool:
        """Send an Anna client `request` to a KVS worker (`framing.send_request`: one frame
        when it fits) without blocking; False if dropped."""
        s = self._socket_or_none(address, "request")
        return s is not None and send_request(s, message)

    def send_frame(self, address: str, payload: bytes) -> bool:
        """Send an answer to `address` without blocking (one frame, or several for a payload
        above MAX_FRAME_BYTES: `framing.split`); False if dropped."""
        s = self._socket_or_none(address, "")
        if s is None:
            return False
        try:
            s.send_multipart(split(payload), flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def send_frames(self, address: str, frames: List[bytes]) -> bool:
        """Send raw frames to `address` without blocking; False if dropped."""
        s = self._socket_or_none(address, "")
        if s is None:
            return False
        try:
            s.send_multipart(frames, flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def forget(self, address: str) -> None:
        """Close the socket to `address` (e.g. a peer that left)."""
        entry = self._sockets.pop(address, None)
        if entry is not None:
            entry.socket.close(0)
            self._give()

    def close(self) -> None:
        """Close every cached socket."""
        for entry in self._sockets.values():
            entry.socket.close(0)
        self._give(len(self._sockets))
        self._sockets.clear()
