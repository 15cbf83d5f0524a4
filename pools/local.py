"""`LocalPool`: a pool manager whose nodes are local processes, started through a `Spawner`.

Contract: `LocalPool(spawner, pools, provisioning_delay=0.0)` implements `PoolManager` for
`pools` over a `Spawner`, the small interface a local cluster offers (Anna's tiers:
`anna_core.autoscale.spawner.AnnaSpawner`; executor nodes:
`cloudburst.executor_spawner.ExecutorSpawner`). The decisions (pending and leaving, the
provisioning delay, start deadlines, refusals) are the pure `book.PoolBook`'s; this class
starts processes, asks whether they are up, and removes nodes on worker threads (a removal
blocks for as long as the node takes to leave), whose outcome `poll()` reports: REMOVED, or
FAILED with a `LeaveFailed` (the spawner's own `LeaveFailed` subclass as it raised it, any
other exception wrapped in one). `poll()` never blocks.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable, List, Optional, Protocol, Sequence, Tuple

from runtime.process import StartupError

from .book import PoolBook
from .errors import LeaveFailed
from .manager import FAILED, REMOVED, NodeEvent, PoolManager, check_count

__all__ = ["Spawner", "LocalPool"]

log = logging.getLogger("pools.local")


class Spawner(Protocol):
    """What a local cluster offers a `LocalPool`. `startup_timeout` bounds a start."""

    startup_timeout: float

    def new_id(self, pool: str) -> str:
        """A fresh node id for `pool`, never handed out before."""

    def spawn(self, pool: str, node_id: str) -> None:
        """Start the node's process without waiting for it (OSError, ValueError, RuntimeError
        or StartupError if it cannot)."""

    def ready(self, node_id: str) -> Optional[bool]:
        """True once the node is up, False if its process exited first, None meanwhile."""

    def discard(self, node_id: str, exited: bool) -> None:
        """Forget a start that failed; kill its process unless it already `exited`."""

    def running(self, pool: str) -> List[str]:
        """The pool's nodes whose process runs, in the order they were started."""

    def absent(self, pool: str, node_id: str) -> str:
        """Why `node_id` is not a running node of `pool` (e.g. "is a disk node")."""

    def log_tail(self, node_id: str) -> str:
        """The end of the node's log, for a failed start's error ('' if none)."""

    def remove(self, pool: str, node_id: str) -> None:
        """Make the node leave gracefully and wait until it has (LeaveFailed if it did not)."""


class LocalPool(PoolManager):
    """Nodes as local processes; see the module contract.

    Args:
        spawner: the local cluster's `Spawner`.
        pools: the pools it manages (e.g. ("memory", "disk"), or ("executor",)).
        provisioning_delay: seconds between `add_nodes` and the node's process starting.
        clock: the monotonic clock `add_nodes` and `poll()` read (tests may pass another).
    """

    def __init__(self, spawner: Spawner, pools: Sequence[str], provisioning_delay: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not pools:
            raise ValueError("a LocalPool manages at least one pool")
        self.spawner = spawner
        self._pools = tuple(pools)
        self.book = PoolBook(provisioning_delay, spawner.startup_timeout)
        self.provisioning_delay = self.book.provisioning_delay
        self.clock = clock
        self._finished: List[NodeEvent] = []               # from removal threads
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._handled: set = set()                         # every id it started or removed

    def pools(self) -> Tuple[str, ...]:
        return self._pools

    # -- queries --

    def nodes(self, pool: str) -> List[str]:
        return self.book.nodes(self.check_pool(pool), self.spawner.running(pool))

    def pending(self, pool: str) -> List[str]:
        return self.book.pending(self.check_pool(pool))

    def leaving(self, pool: str) -> List[str]:
        return self.book.leaving(self.check_pool(pool))

    def owns(self, node_id: str) -> bool:
        """Whether this manager started `node_id` or asked it to leave: the node's exit is
        then the manager's to report (as a NodeEvent), not a crash of the cluster."""
        return node_id in self._handled

    # -- changes --

    def add_nodes(self, pool: str, count: int) -> List[str]:
        self.check_pool(pool)
        check_count(count)
        ids = [self.spawner.new_id(pool) for _ in range(count)]
        self._handled.update(ids)
        self.book.request(pool, ids, self.clock())
        log.info("requested %d %s node(s) %s; provisioning %.3g s", count, pool,
                 ", ".join(ids), self.provisioning_delay)
        return ids

    def remove_node(self, pool: str, node_id: str) -> None:
        self.check_pool(pool)
        running = self.nodes(pool)
        absent = "" if node_id in running else self.spawner.absent(pool, node_id)
        self.book.check_leave(pool, node_id, running, absent)
        self.book.leave(pool, node_id)
        self._handled.add(node_id)
        thread = threading.Thread(target=self._leave, args=(pool, node_id),
                                  name=f"leave-{node_id}", daemon=True)
        self._threads.append(thread)
        thread.start()
        log.info("asked %s node %s to leave", pool, node_id)

    def poll(self, now: Optional[float] = None) -> List[NodeEvent]:
        now = self.clock() if now is None else now
        events: List[NodeEvent] = []
        for p in self.book.due(now):
            try:
                self.spawner.spawn(p.pool, p.node_id)
            except (OSError, ValueError, RuntimeError, StartupError) as e:
                events.append(self.book.spawn_failed(p.node_id, e))
                continue
            self.book.spawned(p.node_id, now)
        for node_id in self.book.starting():
            outcome = self.book.started(node_id, self.spawner.ready(node_id), now)
            if outcome is None:
                continue
            event = outcome.event
            if event.kind == FAILED:
                tail = self.spawner.log_tail(node_id)
                self.spawner.discard(node_id, exited=not outcome.kill)
                if tail:
                    event = dataclasses.replace(event, error=StartupError(
                        f"{event.error}; its log ends:\n{tail}", node_id))
            events.append(event)
        with self._lock:
            events.extend(self._finished)
            self._finished.clear()
        for e in events:
            self.book.finish(e)
            (log.warning if e.kind == FAILED else log.info)("%s", e.detail)
        self._threads = [t for t in self._threads if t.is_alive()]
        return events

    def close(self, timeout: float = 15.0) -> None:
        """Forget pending starts (nodes already spawned keep running); wait up to `timeout`
        for leaves under way."""
        self.book.forget_pending()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    # -- internals --

    def _leave(self, pool: str, node_id: str) -> None:
        try:
            self.spawner.remove(pool, node_id)
            event = NodeEvent(REMOVED, node_id, f"{pool} node {node_id} left", pool=pool)
        except LeaveFailed as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            event = NodeEvent(FAILED, node_id, f"{pool} node {node_id} did not leave cleanly: "
                                               f"{first}", e, pool=pool)
        except Exception as e:  # noqa: BLE001 - reported, never lost on a thread
            error = LeaveFailed(f"removing {pool} node {node_id} failed: {e}", node_id=node_id,
                                pool=pool)
            event = NodeEvent(FAILED, node_id, str(error), error, pool=pool)
        with self._lock:
            self._finished.append(event)
