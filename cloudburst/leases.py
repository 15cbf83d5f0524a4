"""A client's lease on its calls: while it lives its schedulers keep them; once it is gone
(killed, exited, or it dropped a `Future`) they are cancelled within seconds.

Contract: `ClientLeases(client, ttl)` belongs to one `Client`.
- `hold(rid, scheduler)`: call `rid` (not fire-and-forget) was sent to `scheduler` with
  `Call.lease_ttl = ttl`; the first one starts a daemon thread that, every `ttl / 4`
  seconds, sends each scheduler holding one of this client's calls a `lease`
  (`ClientLease(client=<answer address>, ttl)`), and cancels abandoned calls.
- `release(rid)`: the call ended (result collected, cancelled, given up on); `release_all(rids)`
  the same for several at once.
- `moved(rid, scheduler)`: a held call was sent again to another scheduler (its own was
  stopping): the lease is renewed there.
- `abandon(rid)`: its `Future` was collected unawaited; the thread cancels it (a finalizer
  runs inside any allocation, maybe while the client's send lock is held, so it only
  records the call).
- The same thread flushes the client's direct path (`cloudburst/direct.py`) every `ttl / 4`
  seconds: lapsed worker leases go back with the usage reports of the calls made under them.
  While a call link is opening it also has the direct path read the client's answers
  (`advance_links`, every `call_link.ADVANCE_EVERY` s: the link's connect and handshake
  advance where answers are read), so a link opens even while its client neither calls
  nor waits.
- `flush_by(deadline)`: the direct path holds calls to send together; the thread (started
  if need be) flushes it at `deadline` (`time.monotonic()`), or as soon after as it runs,
  and again at the deadline that flush returns, so a held call goes even if its caller
  makes no other call and waits for nothing.
- `leave()`: the client closes: the thread stops and each scheduler gets a `lease` with
  ttl 0, which cancels every call of this client there at once.
A client that is killed sends nothing more: its schedulers cancel its calls when the lease
runs out (`scheduler/leases.py`), at most `ttl` seconds (plus a scheduler tick) later.
Every renewal has the client's failover deadline, a goodbye `LEAVE_PATIENCE`; a scheduler
that is gone is skipped (its calls are gone with it).
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Deque, Dict, Iterable, Optional

from hydro_proto import cloudburst_pb2 as pb

from faas.errors import CloudburstError

if TYPE_CHECKING:
    from .client import Client

__all__ = ["ClientLeases"]

log = logging.getLogger("cloudburst.client")

_OPEN: "weakref.WeakSet[ClientLeases]" = weakref.WeakSet()
LEAVE_PATIENCE = 0.5   # seconds a closing client waits for a scheduler to take its goodbye


@atexit.register
def _leave_all() -> None:
    """The interpreter exits: every open client's calls are cancelled now, not at lease end
    (closing the client flushes the `lease` messages before its sockets go)."""
    for leases in list(_OPEN):
        client = leases._client()
        if client is not None:
            client.close()


class ClientLeases:
    """See the module contract."""

    def __init__(self, client: "Client", ttl: float) -> None:
        if not ttl > 0:
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {ttl!r}")
        self.ttl = float(ttl)
        self._client = weakref.ref(client)
        self._lock = threading.Lock()
        self._calls: Dict[str, str] = {}        # request id -> scheduler
        self._abandoned: Deque[str] = deque()
        self._stop = threading.Event()
        self._wake = threading.Event()          # set by `flush_by` and `leave`
        self._flush_at: Optional[float] = None  # when the direct path must be flushed next
        self._thread: threading.Thread = None  # type: ignore[assignment]
        self._left = False

    def hold(self, rid: str, scheduler: str) -> None:
        with self._lock:
            self._calls[rid] = scheduler
            if self._thread is None:
                self._start()

    def _start(self) -> None:
        """The thread runs from now (lock held)."""
        if self._thread is None and not self._left:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="cloudburst-lease")
            self._thread.start()
            _OPEN.add(self)

    def flush_by(self, deadline: float) -> None:
        with self._lock:
            if self._flush_at is None or deadline < self._flush_at:
                self._flush_at = deadline
            self._start()
        self._wake.set()

    def release(self, rid: str) -> None:
        with self._lock:
            self._calls.pop(rid, None)

    def release_all(self, rids: Iterable[str]) -> None:
        with self._lock:
            for rid in rids:
                self._calls.pop(rid, None)

    def moved(self, rid: str, scheduler: str) -> None:
        """Call `rid` went to another scheduler: its lease is renewed there (if held)."""
        with self._lock:
            if rid in self._calls:
                self._calls[rid] = scheduler

    def abandon(self, rid: str) -> None:
        self._abandoned.append(rid)       # deque.append is atomic: no lock in a finalizer

    def leave(self) -> None:
        with self._lock:
            if self._left:
                return
            self._left = True
            schedulers = sorted(set(self._calls.values()))
            self._calls.clear()
            thread = self._thread
        self._stop.set()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self._send_all(schedulers, 0.0, patience=LEAVE_PATIENCE)

    def _run(self) -> None:
        beat = time.monotonic() + self.ttl / 4      # the next renewal
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                flush_at = self._flush_at
                due = flush_at is not None and flush_at <= now
                if due:
                    self._flush_at = None
            if now < beat and not due:
                self._wake.wait(min(beat, flush_at if flush_at is not None else beat) - now)
                self._wake.clear()        # then looks again at `_flush_at` (set before it)
                continue
            client = self._client()
            if client is None or client.closed:
                return
            if now < beat:                # only the direct path's held calls are due
                self._flush_direct(client)
                del client
                continue
            beat = now + self.ttl / 4
            while self._abandoned:
                rid = self._abandoned.popleft()
                with self._lock:
                    scheduler = self._calls.pop(rid, None)
                if scheduler is not None:
                    client._cancel(rid, scheduler)
            with self._lock:
                schedulers = sorted(set(self._calls.values()))
            self._flush_direct(client)        # lapsed leases back, with their usage
            del client
            self._send_all(schedulers, self.ttl)

    def _flush_direct(self, client: "Client") -> None:
        direct = client._direct
        if direct is None:
            return
        try:
            # a call link opens where answers are read: here too, so it opens even while
            # its client neither calls nor waits (cloudburst/call_link.py)
            look = direct.advance_links()
            later = direct.flush()
        except Exception as e:           # never the end of this thread
            log.warning("the direct path's flush failed: %s", e)
            return
        if look is not None:             # a link still opening: read again then
            later = look if later is None else min(later, look)
        if later is not None:            # calls held since: due then
            with self._lock:
                if self._flush_at is None or later < self._flush_at:
                    self._flush_at = later

    def _send_all(self, schedulers: list, ttl: float, patience: Optional[float] = None) -> None:
        client = self._client()
        if client is None or client.closed:
            return
        for scheduler in schedulers:
            try:
                client._send("lease", pb.ClientLease(client=client.response_address, ttl=ttl),
                             to=scheduler, patience=patience)
            except CloudburstError as e:     # gone: its calls are gone with it
                log.debug("lease to %s not sent: %s", scheduler, e)
