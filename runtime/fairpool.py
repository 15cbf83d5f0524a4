"""A thread pool that takes turns between its owners, so one large batch cannot hold up the rest.

Contract:
- `FairQueue` is the decision, pure (no threads, no clocks): `add(owner, item)` queues an item
  under an owner (any hashable: a request, a batch); `take()` returns the next
  `(owner, item)`, taking owners in turn (round robin, in the order they first queued): an
  owner's items come out in the order added, one per turn, so an owner that queued one item
  waits for at most one item of every other owner, however many those queued. None when empty.
- `pieces(items, lanes, cap)` splits a batch into consecutive pieces: as many as `lanes` (so a
  small batch still runs in parallel) and none longer than `cap` (so a large batch is queued
  as many bounded pieces, each one turn).
- `FairPool(threads, name)` runs queued calls on `threads` threads in `FairQueue` order:
  `submit(owner, fn, *args)` queues `fn(*args)` under `owner`. A call that raises is logged
  (callers hand their own errors back; nothing is silently lost but the exception object).
  `shutdown(wait=True)` drops what is queued and stops the threads (after the calls running
  now, when `wait`); `submit` after it raises RuntimeError, as `ThreadPoolExecutor` does.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, Hashable, List, Optional, Sequence, Tuple

__all__ = ["FairQueue", "FairPool", "pieces"]

log = logging.getLogger("runtime.fairpool")


def pieces(items: Sequence[Any], lanes: int, cap: int) -> List[List[Any]]:
    """`items` in consecutive pieces: at least `lanes` of them when there are enough items,
    each at most `cap` long (see the module contract)."""
    items = list(items)
    if not items:
        return []
    size = max(1, min(cap, len(items) // max(1, lanes)))
    return [items[i:i + size] for i in range(0, len(items), size)]


class FairQueue:
    """Round robin over owners; see the module contract."""

    def __init__(self) -> None:
        self._queues: Dict[Hashable, Deque[Any]] = {}
        self._turns: Deque[Hashable] = collections.deque()    # owners with items, in turn
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, owner: Hashable, item: Any) -> None:
        queue = self._queues.get(owner)
        if queue is None:
            queue = self._queues[owner] = collections.deque()
            self._turns.append(owner)
        queue.append(item)
        self._size += 1

    def take(self) -> Optional[Tuple[Hashable, Any]]:
        if not self._turns:
            return None
        owner = self._turns.popleft()
        queue = self._queues[owner]
        item = queue.popleft()
        self._size -= 1
        if queue:
            self._turns.append(owner)
        else:
            del self._queues[owner]
        return owner, item

    def clear(self) -> None:
        self._queues.clear()
        self._turns.clear()
        self._size = 0


class FairPool:
    """Threads running `FairQueue`'s calls; see the module contract."""

    def __init__(self, threads: int, name: str = "fair-pool") -> None:
        self._queue = FairQueue()
        self._cond = threading.Condition()
        self._stopping = False
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, threads))]
        for t in self._threads:
            t.start()

    def submit(self, owner: Hashable, fn: Callable[..., Any], *args: Any) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("cannot submit to a pool that has shut down")
            self._queue.add(owner, (fn, args))
            self._cond.notify()

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def shutdown(self, wait: bool = True, timeout: float = 10.0) -> None:
        """Drop what is queued and stop the threads; with `wait`, wait at most `timeout`
        seconds for the tasks running now (each has its own I/O deadline), then log the
        threads still busy and return."""
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._cond.notify_all()
        if wait:
            deadline = time.monotonic() + timeout
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join(max(0.0, deadline - time.monotonic()))
            busy = [t.name for t in self._threads if t.is_alive()
                    and t is not threading.current_thread()]
            if busy:
                log.warning("pool threads still running a task after %.1f s: %s", timeout,
                            ", ".join(busy))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                _, (fn, args) = self._queue.take()
            try:
                fn(*args)
            except Exception:
                log.exception("a pool task failed: %s", getattr(fn, "__name__", fn))
