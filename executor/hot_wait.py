"""A leased worker's one wait for its next work: the schedule socket, the direct socket and
the call links, in one `poll` system call.

A ZeroMQ poller over those sources (`zmq.Poller`) costs a call about seven `poll`s and four
`getpid`s: a first pass without waiting, then the wait, then, for each ZeroMQ socket, a look
at its mailbox (`ZMQ_EVENTS`) before and after. A direct call over a call link needs none of
that: the ZeroMQ sockets stay idle while calls come on the link.

Contract: `Sources(pull, direct, links_fd)` waits on the three descriptors. A ZeroMQ
socket's descriptor (`ZMQ_FD`) signals only that its mailbox changed, not that messages
wait, so a socket is asked (`ZMQ_EVENTS`) before the wait whenever it may hold messages the
descriptor will not signal again:
- at the start, and after its owner received from it or looked at it another way
  (`stirred(source)`: every receive from either socket outside `wait` must be told);
- when its descriptor became readable;
- and, as a net under a receive missed by `stirred`, the schedule socket whenever a wait
  ran to its timeout (so such a frame waits at most one receive timeout, never longer).
`wait(timeout_ms)` returns the ready sources as a bit set (`PULL`, `DIRECT`, `LINKS`; 0:
nothing came within the timeout; a descriptor that woke the wait with no message behind it
does not end it). A socket reported ready counts as stirred: the caller
receives from it. The links' descriptor is level-triggered and needs no asking.
"""
from __future__ import annotations

import select
import time
from typing import Any, Dict

import zmq

from runtime.framing import more

__all__ = ["Sources", "PULL", "DIRECT", "LINKS"]

PULL, DIRECT, LINKS = 1, 2, 4


class Sources:
    """The schedule socket, the direct socket and the links' descriptor (module contract)."""

    def __init__(self, pull: Any, direct: Any, links_fd: int = -1) -> None:
        self._sockets = {PULL: pull, DIRECT: direct}
        self._poll = select.poll()
        self._by_fd: Dict[int, int] = {}
        for source, fd in ((PULL, pull.get(zmq.FD)), (DIRECT, direct.get(zmq.FD)),
                           (LINKS, links_fd)):
            if fd >= 0:
                self._poll.register(fd, select.POLLIN)
                self._by_fd[fd] = source
        self._unsure = PULL | DIRECT        # sockets to ask before the next wait

    def stirred(self, source: int) -> None:
        """`source` was received from (or looked at) outside `wait`: ask it next time."""
        self._unsure |= source

    def wait(self, timeout_ms: int) -> int:
        ready = self._ask(self._unsure) if self._unsure else 0
        if ready:
            self._unsure = ready
            return ready
        self._unsure = 0
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            events = self._poll.poll(timeout_ms)
            if not events:                   # the net: a receive `stirred` was not told of
                ready = self._ask(PULL)
            for fd, _ in events:
                source = self._by_fd[fd]
                ready |= source if source == LINKS else self._ask(source)
            if ready or not events:
                self._unsure = ready & (PULL | DIRECT)
                return ready
            # a mailbox changed with no message behind it: wait out the rest
            if timeout_ms > 0:
                timeout_ms = max(0, round((deadline - time.monotonic()) * 1000))

    def _ask(self, sources: int) -> int:
        """Which of the ZeroMQ `sources` hold a message now."""
        ready = 0
        for source in (PULL, DIRECT):
            if sources & source and more(self._sockets[source]):
                ready |= source
        return ready
