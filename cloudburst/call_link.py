"""Call links at the client: direct calls sent to a leased worker over a link (TCP, or a
Unix-domain socket when the worker is on the same host: `anna_core/csrc/link.hpp`), and
their results read from it, instead of the ZeroMQ direct socket and answer socket.

A call over ZeroMQ crosses an I/O thread at each end of each hop; a link is written by the
calling thread and read by the thread that reads the answers (`anna_core/csrc/
call_links.hpp`), so a warm call costs a write and a read at each end.

Contract: `ClientCallLinks(credentials)` (None: a plain cluster) belongs to one client.
- `send(worker_address, link_address, kind, message)`: writes the message on the link to
  that worker; False when there is no open link (none advertised, it is still opening, it
  could not be opened, it was refused, or it broke on this write), and the caller sends it
  over ZeroMQ instead. A call never waits for a link to open: the first call to a worker
  starts opening one (a non-blocking connect) and goes over ZeroMQ, as do the calls made
  until the link is open; the connect and the handshake advance wherever the client reads
  its answers (`wait`, which the waiting thread and `read_arrived` call; the client's lease
  thread has them read every `ADVANCE_EVERY` s while a link is `opening()`, so a client that
  neither calls nor waits still finishes opening it), and a link not open within
  `OPEN_TIMEOUT` is given up. A link that cannot be opened is logged once per
  worker and not tried again for `RETRY_OPEN` seconds (doubling to `MAX_RETRY_OPEN` while it
  keeps failing). (A call sent on a link just opened may overtake one sent over ZeroMQ just
  before: calls made concurrently have no order, as over two ZeroMQ sockets.) A frame only
  partly written is never served (the worker serves whole frames), so sending it again
  elsewhere cannot run it twice; the link is then half-closed (below) and not used again.
- Secured exactly as the ZeroMQ path: with credentials the client proves its key pair and
  the worker must prove the key its keyed direct address carries (the one the lease names);
  a worker address without a key gets no link then. Without credentials links are plain.
- `wait(socket, timeout, quiet=False)`: waits up to `timeout` s (0: not at all) for the
  answer `socket` (always the same one) or a link to have something, in one native wait
  with the GIL released (another thread may send meanwhile); returns (whether `socket` has
  a message, the answers that came on links as `(kind, message)`: `result`s, including
  each of a `direct_results`). When it returns False for `socket`, its last look at the
  socket's events found no message. `quiet=True` says the caller's last look found none
  and nothing read the socket since: the look before waiting is skipped (it costs two
  system calls); passed wrongly, a message already there waits for the next one.
  A worker may send a client only results (its key is a function's): anything else on a
  link is dropped and logged, as on the answer socket. A link that closes or fails (a
  frame that does not open, one above `MAX_FRAME_BYTES`) is forgotten and logged; its calls
  in flight are waited for as any direct call is: if the worker lives it answers them over
  ZeroMQ (its results go there once their link is gone); if it died, its lease is revoked
  as dead and the client's usual retry-or-WORKER_DIED rule applies. A worker that closes a
  link for a fault says first how many of the client's frames it served from it (the
  native farewell); the calls of the frames written after those never run there, and go to
  `unanswered(call ids, why, False)` (the direct path sends them through the scheduler: no
  call runs twice), promptly rather than at their deadline. A link the client closes
  because a frame from the worker does not open (above the limit, or not authentic) may
  have carried results it can no longer read: every call written on it goes to
  `unanswered(call ids, why, True)`, and those still without a result fail at once with
  CALL_LINK_BROKEN (they may or may not have run; a retry could run one twice). The client
  remembers the call ids of the last `MAX_WRITTEN` messages written on each link for this
  (more than the slots of its leases). The client itself never
  closes a link under calls in flight: after a failed write, or when it leases the worker
  no more (`drop`), it half-closes it and reads it until the worker closes its end, so the
  answers the worker wrote before it saw that end are read.
- `drop(workers)` half-closes the links to workers the client no longer leases (a worker
  serves a bounded number of links); `active()`: whether any link is open (else `wait`
  need not be asked; a link still opening counts, so that it advances);
  `stats()`: counters (open, opened, sent, results, failures; unix: the links open or
  opening over a worker's Unix-domain socket); `close()` closes every link.
Thread-safe: a lock per object (the native links have their own).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import zmq

from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import Credentials, parse_address
from runtime.framing import MAX_FRAME_BYTES, FrameError, code_of, encode, more, parse

__all__ = ["ClientCallLinks", "open_call_links", "ADVANCE_EVERY", "OPEN_TIMEOUT", "RETRY_OPEN",
           "MAX_RETRY_OPEN", "answers_of"]

log = logging.getLogger("cloudburst.client")

OPEN_TIMEOUT = 0.5       # seconds to connect and finish the handshake (in the background)
ADVANCE_EVERY = 0.002    # seconds between the lease thread's reads while a link opens
RETRY_OPEN = 2.0         # seconds before a link that failed to open is tried again
MAX_RETRY_OPEN = 60.0
SEND_TIMEOUT = 1.0       # seconds a frame may wait for room on the link
MAX_REMEMBERED = 4096    # workers whose link failed, remembered (bounded)
MAX_WRITTEN = 1024       # messages remembered per link, for a farewell (bounded)
# the native side's words for a frame from the worker the client cannot open (it closes the
# link; what followed on it is lost), as against a link the worker ended or that failed
_UNREADABLE = ("a frame of ", "a frame that does not authenticate")
_RESULT = code_of("result")


def answers_of(data: bytes) -> List[Tuple[str, Any]]:
    """The answers a worker's frame carries: `result`s (a `direct_results` is several);
    FrameError/DecodeError/KeyError for anything else (a worker sends a client only those)."""
    if data[:1] == _RESULT:        # (the common case, without `parse`'s checks: the same)
        return [("result", pb.CallResult.FromString(memoryview(data)[1:]))]
    kind, payload = parse(data)
    if kind == "direct_results":
        return [("result", r) for r in pb.DirectResults.FromString(payload).results]
    if kind != "result":
        raise FrameError(f"a worker may send a client only results, not {kind!r}")
    return [("result", pb.CallResult.FromString(payload))]


class ClientCallLinks:
    """A client's call links to the workers it leases (module contract)."""

    def __init__(self, credentials: Optional[Credentials],
                 unanswered: Callable[[List[str], str, bool], None] =
                 lambda ids, why, may_have_run: None) -> None:
        from anna_core import _core
        self._native = _core.CallLinkClient() if credentials is None else \
            _core.CallLinkClient(credentials.keypair.public, credentials.keypair.secret,
                                 MAX_FRAME_BYTES)
        self._secured = credentials is not None
        self._lock = threading.Lock()
        self._links: Dict[str, int] = {}            # worker address -> link
        self._workers: Dict[int, str] = {}          # link -> worker address
        self._opening: Dict[int, str] = {}          # link still opening -> its address
        # link -> (frames written on it, the call ids of the last MAX_WRITTEN as (number, ids))
        self._written: Dict[int, Tuple[List[int], Deque[Tuple[int, Any]]]] = {}
        self._unanswered = unanswered
        self._failed: Dict[str, Tuple[float, float]] = {}   # worker -> (until, backoff)
        self._watched: Optional[zmq.Socket] = None   # the answer socket `wait` watches
        self.counts = {"opened": 0, "sent": 0, "calls": 0, "results": 0, "failures": 0}

    def active(self) -> bool:
        return bool(self._workers)

    def opening(self) -> bool:
        return bool(self._opening)

    def _link(self, worker_address: str, link_address: str) -> int:
        """The open link to a worker, or 0 (lock held); starts opening one if there is none
        and it may be tried (`_opened` and `_not_opened` finish the opening)."""
        link = self._links.get(worker_address)
        if link is not None:
            return 0 if link in self._opening else link
        failed = self._failed.get(worker_address)
        if failed is not None and time.monotonic() < failed[0]:
            return 0
        try:
            server_key = parse_address(worker_address)[1]
        except ValueError:
            server_key = None
        if self._secured and server_key is None:
            link, why = 0, "its address carries no key"
        else:
            link, why = self._native.begin(link_address, (server_key or b"").decode("ascii"),
                                           OPEN_TIMEOUT)
        if not link:
            self._not_opened(worker_address, link_address, why)
            return 0
        self._links[worker_address] = link
        self._workers[link] = worker_address
        self._opening[link] = link_address
        return 0

    def _opened(self, link: int) -> None:
        """A link finished opening (lock held): the worker's calls go on it from now."""
        if self._opening.pop(link, None) is not None:
            self._failed.pop(self._workers.get(link, ""), None)
            self.counts["opened"] += 1

    def _not_opened(self, worker_address: str, link_address: str, why: str) -> None:
        """A link could not be opened (lock held): not tried again for a while."""
        failed = self._failed.get(worker_address)
        backoff = min(MAX_RETRY_OPEN, failed[1] * 2) if failed else RETRY_OPEN
        if len(self._failed) >= MAX_REMEMBERED:
            self._failed.clear()
        self._failed[worker_address] = (time.monotonic() + backoff, backoff)
        self.counts["failures"] += 1
        if failed is None:           # once per worker while it keeps failing
            log.info("no call link to worker %s at %s (%s): its direct calls use ZeroMQ",
                     worker_address, link_address, why)

    def send(self, worker_address: str, link_address: str, kind: str, message: Any) -> bool:
        frame = encode(kind, message)
        if len(frame) > MAX_FRAME_BYTES:
            return False
        with self._lock:
            link = self._link(worker_address, link_address)
            if not link:
                return False
            if self._native.send(link, frame, SEND_TIMEOUT):
                ids = message.request_id if kind == "direct" else \
                    [c.request_id for c in message.calls]
                self.counts["sent"] += 1
                self.counts["calls"] += 1 if kind == "direct" else len(ids)
                written = self._written.get(link)
                if written is None:
                    written = self._written[link] = ([0], deque(maxlen=MAX_WRITTEN))
                written[0][0] += 1        # (ids, not calls: their arguments are not kept)
                written[1].append((written[0][0], ids))
                return True
            # half-closed by the native side: read until the worker closes it
            self._forget(link, "a call could not be written on it", closed=False)
            return False

    def _forget(self, link: int, why: str, closed: bool = True) -> None:
        """A link that broke (lock held): the worker's calls go over ZeroMQ. One still
        `closed=False` (half-closed) is read until the worker closes its end."""
        worker = self._workers.get(link)
        if closed:
            self._native.close(link)
            self._workers.pop(link, None)
            self._written.pop(link, None)
        address = self._opening.pop(link, None)
        if address is not None:          # it never opened
            if worker is not None and self._links.get(worker) == link:
                del self._links[worker]
                self._not_opened(worker, address, why)
            return
        if worker is not None and self._links.get(worker) == link:
            del self._links[worker]
            self.counts["failures"] += 1
            log.info("the call link to worker %s closed (%s): its direct calls use ZeroMQ "
                     "until it opens again", worker, why)

    def wait(self, socket: zmq.Socket, timeout: float,
             quiet: bool = False) -> Tuple[bool, List[Tuple[str, Any]]]:
        # One native wait for both: the links, and the answer socket's ZMQ_FD, which the
        # native side watches in its epoll set. ZMQ_FD only signals that the socket's state
        # may have changed (edge-triggered: a message already there when its events were
        # last looked at does not signal it again), so its events are looked at after a
        # signal, and before waiting unless `quiet` (the caller's last look at them found
        # no message and nothing read the socket since: any message since has signalled).
        if self._watched is not socket:
            self._native.watch(socket.getsockopt(zmq.FD))
            self._watched = socket
            quiet = False
        on_socket = False if quiet else more(socket)
        signalled, frames, broken, opened = self._native.wait(0.0 if on_socket else timeout)
        if signalled and not on_socket:
            on_socket = more(socket)
        out: List[Tuple[str, Any]] = []
        for link, data in frames:
            try:
                out.extend(answers_of(data))
            except Exception as e:     # malformed or not for a client: dropped, and said
                log.warning("dropped a message a client cannot take from a call link "
                            "(%d bytes): %s", len(data), e)
        if broken or opened:
            unanswered: List[Tuple[List[str], str, bool]] = []
            with self._lock:
                for link in opened:
                    self._opened(link)
                for link, why, taken in broken:
                    if taken >= 0 or why.startswith(_UNREADABLE):
                        unanswered.extend(self._unread(link, why, taken))
                    self._forget(link, why)
            for calls, why, lost in unanswered:  # (without the lock: the path takes its own)
                self._unanswered(calls, why, lost)
        self.counts["results"] += len(out)
        return on_socket, out

    def _unread(self, link: int, why: str, taken: int) -> List[Tuple[List[str], str, bool]]:
        """What a broken link leaves unanswered (lock held), for `unanswered`: the calls of
        the frames after the first `taken`, which the worker never read (its farewell); or,
        `taken` -1 (the client could not read the link on), every call written on it."""
        written = self._written.get(link)
        if written is None or written[0][0] <= taken:
            return []
        calls: List[str] = []
        for number, ids in written[1]:
            if number > taken:
                calls.extend([ids] if isinstance(ids, str) else ids)
        worker = self._workers.get(link, "?")
        if taken >= 0:
            log.warning("worker %s closed call link %d (%s) without reading %d call(s) "
                        "written on it: they go through the scheduler", worker, link, why,
                        len(calls))
            return [(calls, f"executor worker {worker} closed call link {link} ({why}) "
                            "before reading it", False)]
        log.warning("closed call link %d to worker %s (%s): results in transit on it are "
                    "lost", link, worker, why)
        return [(calls, f"the call link {link} to executor worker {worker} broke before the "
                        f"call's result came ({why}); the call may or may not have run",
                 True)]

    def drop(self, workers: Any) -> None:
        """Close the links to `workers` (the client leases them no more)."""
        with self._lock:
            for worker in workers:
                link = self._links.pop(worker, None)
                if link is None:
                    continue
                if self._opening.pop(link, None) is not None:   # it never opened
                    self._native.close(link)
                    self._workers.pop(link, None)
                else:                      # read until the worker closes it
                    self._native.finish(link)

    def stats(self) -> Dict[str, int]:
        return dict(self.counts, open=len(self._links) - len(self._opening),
                    opening=len(self._opening), unix=self._native.unix_links)

    def close(self) -> None:
        with self._lock:
            for link in list(self._workers):
                self._native.close(link)
            self._links.clear()
            self._workers.clear()
            self._opening.clear()
            self._written.clear()


def open_call_links(credentials: Optional[Credentials],
                    unanswered: Callable[..., None]) -> Optional[ClientCallLinks]:
    """A client's call links, or None (the native module lacks them: ZeroMQ only)."""
    try:
        return ClientCallLinks(credentials, unanswered)
    except (ImportError, AttributeError, RuntimeError, ValueError) as e:
        log.info("no call links (%s): direct calls use ZeroMQ", e)
        return None
