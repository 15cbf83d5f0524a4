"""A service process' file descriptors: its limit, and the share its socket caches may use.

Contract:
- `raise_descriptor_limit()` is called once by every service's `main` before it opens
  anything: it raises the soft RLIMIT_NOFILE to the hard limit (to `fs.nr_open` when the hard
  limit is unlimited) and returns the soft limit now in effect. It never raises: a refusal is
  logged at WARNING and the process keeps the limit it had.
- `socket_budget(limit, in_use, claimed)` is the pure sizing rule: how many sockets the
  process' `runtime.sockets.PushCache`s may hold together, open or lingering, when the
  process may open `limit` descriptors, `in_use` are open now, and `claimed` are promised to
  something else (the KVS kernel's own socket caches). Each socket costs
  `FDS_PER_SOCKET` descriptors (its mailbox and its one connection); `reserve(limit)` is left
  for everything that is not a cache: bound sockets and the connections peers open to them,
  logs, files, child processes' pipes. It is at least `MIN_SOCKETS`.
- `descriptor_budget()` is that number for this process, computed once, at first use, from
  the soft limit and `/proc/self/fd`; `claim_descriptors(n)` lowers it (before or after its
  first use) for descriptors another part of the process will open.
- The budget counts the sockets a cache holds, not those it closed: ZeroMQ closes a socket
  asynchronously (its reaper and I/O threads release the mailbox and the connection later,
  far later on a loaded machine, while a flood keeps closing and opening). So a cache also
  looks at what is really open: `sockets_openable(limit, open_now)` is the pure rule, how
  many more sockets may be opened while `open_now` descriptors are open, keeping the process
  below `descriptor_ceiling(limit)` (the limit less half the reserve: the other half stays
  for bound sockets' peers and everything else). The ceiling is where a cache stops opening,
  not a hard bound: a new socket's connection is opened by ZeroMQ's I/O thread after the
  count was taken, so the sockets opened just before a look are counted without their
  connections; in a flood the process was seen up to about 45 descriptors above the ceiling
  (at a limit of 1,024). That half of the reserve absorbs it: the hard bound is the limit,
  which the tests (tests/test_socket_bounds.py) see the process stay well below.
  `open_descriptors()` is cheap where the kernel reports the count as the size of
  `/proc/self/fd` (one `stat`); `cheap_only=True` says None rather than list the directory.
Nothing here keeps a socket; `runtime.sockets` enforces the budget and the ceiling.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Optional

try:
    import resource
except ImportError:                       # not a POSIX platform
    resource = None  # type: ignore[assignment]

__all__ = ["raise_descriptor_limit", "descriptor_limit", "open_descriptors", "reserve",
           "socket_budget", "descriptor_ceiling", "sockets_openable", "descriptor_budget",
           "claim_descriptors", "FDS_PER_SOCKET", "MIN_SOCKETS"]

log = logging.getLogger("runtime.limits")

# A connected PUSH socket holds its mailbox (an eventfd) and one TCP or Unix connection.
FDS_PER_SOCKET = 2
# A process whose limit leaves less still gets this many cache sockets (it will evict often).
MIN_SOCKETS = 16
# Used when the process cannot count its descriptors.
_ASSUMED_IN_USE = 64
# Where the hard limit is unlimited and fs.nr_open is unreadable.
_UNLIMITED_FALLBACK = 1 << 20


def reserve(limit: int) -> int:
    """Descriptors left to everything that is not a socket cache: a quarter of the limit,
    at least 64 (bound sockets and the peers that connect to them are the bulk)."""
    return max(64, limit // 4)


def socket_budget(limit: int, in_use: int, claimed: int = 0) -> int:
    """How many cache sockets fit (see the module contract); at least MIN_SOCKETS."""
    free = limit - in_use - claimed - reserve(limit)
    return max(MIN_SOCKETS, free // FDS_PER_SOCKET)


def descriptor_ceiling(limit: int) -> int:
    """Socket caches open a socket only while the process has fewer descriptors open than
    this: the limit less half the reserve (the cache's budget leaves the whole reserve; the
    first half absorbs sockets closed but not yet released by ZeroMQ's threads)."""
    return limit - reserve(limit) // 2


def sockets_openable(limit: int, open_now: int) -> int:
    """How many more sockets (FDS_PER_SOCKET descriptors each) the caches may open while
    `open_now` descriptors are open, staying below `descriptor_ceiling(limit)`; 0 when none."""
    return max(0, (descriptor_ceiling(limit) - open_now) // FDS_PER_SOCKET)


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return _UNLIMITED_FALLBACK


def raise_descriptor_limit() -> Optional[int]:
    """Raise the soft descriptor limit to the hard one; the soft limit in effect (None where
    the platform has no such limit). Called once at a service's start."""
    if resource is None:
        return None
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError) as e:
        log.warning("cannot read the descriptor limit: %s", e)
        return None
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("descriptor limit raised from %d to %d", soft, target)
            soft = target
        except (OSError, ValueError) as e:
            log.warning("cannot raise the descriptor limit from %d to %d: %s; keeping %d",
                        soft, target, e, soft)
    return soft


def descriptor_limit() -> int:
    """The soft descriptor limit now in effect (a large number where unlimited or unknown)."""
    if resource is None:
        return _UNLIMITED_FALLBACK
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return _UNLIMITED_FALLBACK
    return _nr_open() if soft == resource.RLIM_INFINITY else int(soft)


def open_descriptors(cheap_only: bool = False) -> Optional[int]:
    """How many descriptors this process has open (None where it cannot tell). One `stat`
    where the kernel reports the count as the size of /proc/self/fd (Linux 6.2 on), else a
    directory listing (not with `cheap_only`: None then)."""
    try:
        size = os.stat("/proc/self/fd").st_size
        if size > 0:
            return size
    except OSError:
        pass
    if cheap_only:
        return None
    for path in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(path))
        except OSError:
            continue
    return None


class _Budget:
    """The process' cache-socket budget: computed at first use, lowered by claims."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: Optional[int] = None
        self._claimed = 0

    def sockets(self) -> int:
        with self._lock:
            if self._sockets is None:
                in_use = open_descriptors()
                self._sockets = socket_budget(descriptor_limit(),
                                              _ASSUMED_IN_USE if in_use is None else in_use,
                                              self._claimed)
                log.debug("socket caches may hold %d sockets", self._sockets)
            return self._sockets

    def claim(self, n: int) -> None:
        with self._lock:
            self._claimed += max(0, int(n))
            if self._sockets is not None:
                self._sockets = max(MIN_SOCKETS, self._sockets - max(0, int(n)) // FDS_PER_SOCKET)


_budget = _Budget()


def descriptor_budget() -> int:
    """How many sockets this process' socket caches may hold together, open or lingering."""
    return _budget.sockets()


def claim_descriptors(n: int) -> None:
    """Promise `n` descriptors to something other than the Python socket caches (e.g. the
    KVS kernel's caches in a node process); the caches' budget shrinks accordingly."""
    _budget.claim(n)
