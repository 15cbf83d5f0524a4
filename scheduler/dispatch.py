"""Calls follow capacity: a call waits at its scheduler until a worker is free to take it.

Contract: `CallQueue(capacity, slots, scheduler, enabled=True)` is pure state (every method
takes `now`, seconds from any monotonic clock, and the workers calls may be placed on: the
`WorkerView`s of live workers of nodes that are not draining; workers hosting actors only
when there are no others). It decides *when* a call is
placed; *where* stays `scheduler.policy`'s choice, made at that moment.
- A worker is *free* when fewer than `slots` calls this scheduler placed on it are
  unfinished (`WorkerView.outstanding`; a call counts until its `done`), or fewer than
  `window(worker_id)` when the queue was given one (`CallQueue(..., window=)`,
  `scheduler/window.py`: more for a worker whose calls are shorter than a `done` round trip). The scheduler
  passes `SchedulerConfig.worker_slots` (2: the call a worker runs and the next one, which
  it then starts without waiting for a round trip to the scheduler; 1: no call ever waits
  at a worker). Reported utilization does not count here: it lags by a heartbeat period,
  and a worker that just finished a call reports itself busy. (Among free workers the policy still prefers the
  least utilized, and the ones whose node caches the call's keys: locality is a preference,
  never a reason to wait while another worker is free.)
- `offer(waiting, workers, now, hold_until=None)` for a call just received returns `Place`
  (place it now: the queue is empty and some worker is free, or there is no worker at all,
  for which the policy answers NO_RESOURCES as before), `Queued` (it waits; a call whose id
  already waits is not queued twice), or `Refuse` (the queue holds `capacity` calls:
  admission control; the caller gets NO_RESOURCES naming the limit, never a silent drop).
  With no worker at all before `hold_until` (the scheduler lost its last worker to silence
  just now: `ExecutorTable.hold_until`) the call waits instead, as for a busy worker: the
  scheduler does not know yet whether the executors are gone.
- `next(workers, now, hold_until=None)` returns the next action once capacity may have
  changed (a call done, a worker joined, a drain lifted, every tick): `Expire` for a waiting
  call past its deadline (the caller gets TIMEOUT naming this stage: how long it waited in
  which scheduler's queue, and why), else `Place` for the call at the head of the queue if a
  worker is free, or if there is still no worker at all once `hold_until` has passed (the
  calls held for it get NO_RESOURCES when the hold ends, as a call received then does, not
  at their own deadline), else None. The service calls it until None, placing each call before
  asking again (a placement changes the workers' outstanding counts). Calls are placed in
  the order they came (FIFO): a call never overtakes an earlier one, so a call taking the
  `Future` of a call that waits too is placed after it.
- `remove(call_id)` takes a waiting call out (cancelled by its caller); `position(call_id)`
  is `(1-based place in the queue, seconds waited)` or None; `len(queue)` is how many wait.
- `enabled=False` is the previous behaviour, kept as a switch for comparisons: every call is
  placed at once on the least loaded worker, where it waits in that worker's queue even if
  another node frees up or joins meanwhile.

What waits. Every function of a call is placed at the same moment (a DAG's downstream
schedules travel with the data), so a call waits as a whole, and is placed once a worker is
free for it; the policy then spreads its functions that may run at the same time over free
workers when there are enough, otherwise over the least loaded. A causal call waits the
same way before its coordinator starts (CT then chooses a node with a free worker first);
its retries keep the call's placement. A call placed on a worker that then dies fails as
before; a waiting call is not affected by a death. With several schedulers each has its own
queue and counts only its own calls, so a worker may hold up to `slots` calls per scheduler
at a time: bounded, never a pile-up on the first worker.

Bounds: at most `capacity` calls wait; each waits at most until its deadline (its own
timeout from when the scheduler received it; when placed, only what is left of it is given
to the workers).
"""
from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from .policy import WorkerView

__all__ = ["CallQueue", "Waiting", "Place", "Queued", "Refuse", "Expire", "free_workers"]


@dataclass(frozen=True)
class Waiting:
    """One call that may have to wait; `item` is the service's, opaque here."""

    call_id: str
    name: str                 # the function or DAG, for messages
    since: float              # when the scheduler received it
    deadline: float           # since + the call's timeout
    item: Any = None


@dataclass(frozen=True)
class Place:
    """Place the call now; its workers get `deadline - now` seconds."""

    waiting: Waiting


@dataclass(frozen=True)
class Queued:
    """The call waits for a free worker (`position`: 1-based place in the queue)."""

    waiting: Waiting
    position: int


@dataclass(frozen=True)
class Refuse:
    """The queue is full: the caller gets NO_RESOURCES with `message`."""

    waiting: Waiting
    message: str


@dataclass(frozen=True)
class Expire:
    """The call waited past its deadline: the caller gets TIMEOUT with `message`."""

    waiting: Waiting
    message: str


Action = Union[Place, Queued, Refuse, Expire]


def free_workers(workers: Sequence[WorkerView], slots: int,
                 window: Optional[Callable[[str], int]] = None) -> List[WorkerView]:
    """The workers with fewer than `slots` unfinished calls of this scheduler (or than
    `window(worker_id)`, when given: `scheduler/window.py`)."""
    if window is None:
        return [w for w in workers if w.outstanding < slots]
    return [w for w in workers if w.outstanding < window(w.worker_id)]


class CallQueue:
    """The calls waiting at one scheduler for a free worker; see the module contract."""

    def __init__(self, capacity: int, slots: int, scheduler: str = "",
                 enabled: bool = True, window: Optional[Callable[[str], int]] = None) -> None:
        if capacity < 0:
            raise ValueError(f"CallQueue capacity must be >= 0, not {capacity!r}")
        if slots < 1:
            raise ValueError(f"CallQueue slots must be >= 1, not {slots!r}")
        self.capacity = capacity
        self.slots = slots
        self.scheduler = scheduler
        self.enabled = enabled
        self.window = window
        self._waiting: "OrderedDict[str, Waiting]" = OrderedDict()
        self._deadlines: List[Tuple[float, str]] = []   # a heap; stale entries skipped

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._waiting

    def offer(self, waiting: Waiting, workers: Sequence[WorkerView], now: float,
              hold_until: Optional[float] = None) -> Action:
        """A call just received: place it now, queue it, or refuse it (module contract)."""
        if waiting.call_id in self._waiting:
            return Queued(waiting, self._position(waiting.call_id))
        holding = not workers and hold_until is not None and now < hold_until
        if not self.enabled or (not workers and not holding) or \
                (not self._waiting and free_workers(workers, self.slots, self.window)):
            return Place(waiting)
        if len(self._waiting) >= self.capacity:
            return Refuse(waiting, (
                f"{waiting.name}: every executor worker is busy and {len(self._waiting)} "
                f"calls already wait in the queue of scheduler {self.scheduler} (its limit, "
                f"max_queued_calls); try again later or add executor nodes"))
        self._waiting[waiting.call_id] = waiting
        heapq.heappush(self._deadlines, (waiting.deadline, waiting.call_id))
        return Queued(waiting, len(self._waiting))

    def next(self, workers: Sequence[WorkerView], now: float,
             hold_until: Optional[float] = None) -> Optional[Action]:
        """The next call to expire or to place, or None (module contract)."""
        while self._deadlines:
            deadline, call_id = self._deadlines[0]
            w = self._waiting.get(call_id)
            if w is None or w.deadline != deadline:
                heapq.heappop(self._deadlines)          # removed or placed meanwhile
                continue
            if deadline > now:
                break
            heapq.heappop(self._deadlines)
            del self._waiting[call_id]
            busy = len(workers) - len(free_workers(workers, self.slots, self.window))
            why = (f"all {len(workers)} executor worker(s) it may use were busy with calls "
                   f"placed before it" if workers and busy == len(workers) else
                   "no executor worker it may use was live" if not workers else
                   "calls received before it were still waiting")
            return Expire(w, (
                f"a free executor worker: {w.name} waited {now - w.since:.1f} s in the queue "
                f"of scheduler {self.scheduler} and reached its timeout of "
                f"{w.deadline - w.since:g} s ({why})"))
        if self._waiting and (free_workers(workers, self.slots, self.window) or
                              (not workers and hold_until is not None and now >= hold_until)):
            _, w = self._waiting.popitem(last=False)
            return Place(w)
        return None

    def remove(self, call_id: str) -> Optional[Waiting]:
        """Take a waiting call out (its heap entry is skipped later); None if not waiting."""
        return self._waiting.pop(call_id, None)

    def position(self, call_id: str, now: float) -> Optional[Tuple[int, float]]:
        """(1-based place in the queue, seconds waited), or None if the call is not waiting."""
        w = self._waiting.get(call_id)
        if w is None:
            return None
        return self._position(call_id), now - w.since

    def _position(self, call_id: str) -> int:
        for i, cid in enumerate(self._waiting, 1):
            if cid == call_id:
                return i
        return 0
