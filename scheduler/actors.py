"""Where actors live, as one scheduler knows it: the pure decisions of actor placement and routing.

Contract (no sockets, no clocks; the scheduler's loop owns it):
- `choose_actor_worker(workers, hosting, rng)`: the worker a new actor is placed on, among
  `workers` (the placeable `WorkerView`s): the fewest live actors first (`hosting`: worker id
  -> actors), then the fewest calls outstanding, then random. `NoResources` when there is none.
- `prefer_free(workers, hosting)`: the workers plain calls may be placed on: those hosting
  no live actor, when there is at least one; otherwise all of them (an actor's worker still
  takes plain calls then, between its method calls).
- `ActorDirectory(max_actors)`: actor id -> `ActorEntry` (class, worker, the worker's restart
  count when the actor was placed, and why it ended, if it did), at most `max_actors`
  entries (the oldest ended ones are forgotten first, then the oldest).
  - `placed(entry)` records a new actor (or one learnt from another scheduler's record).
  - `route(actor_id, restarts_of)`: `(entry, None)` when the method call may go to
    `entry.worker_id`, `(entry, why)` when the actor is dead (`why` says why), `(None, None)`
    when unknown here. `restarts_of(worker_id)` is the worker's restart count if it is live,
    None if not: a worker that is gone, or was restarted since (same id, new process), no
    longer holds the actor, which is then recorded dead.
  - `worker_lost(worker_id, why)`: every live actor on that worker is dead; returns them.
  - `ended(actor_id, why)`: the actor is dead (killed, or its constructor failed).
  - Calls: `call_started(call_id, actor_id, op)` and `call_finished(call_id, ok)` (which
    records the actor dead when its creation failed, and returns its entry then);
    `actor_of_call(call_id)` names the actor of a call in flight. At most `max_calls` calls
    are tracked (the oldest forgotten first).
  - `hosting()`: worker id -> live actors on it.
  - Restarts (Ray's `max_restarts`): an entry records `max_restarts` (0: never re-created;
    -1: without limit), its `incarnation` (times re-created so far), its `owner` (the
    scheduler that placed it) and its `creation` (the serialized creation). An actor that
    died with its worker (`lost_worker`) is `restartable(entry, me)` when `me` owns it, its
    budget is not spent and its creation is known; `restarted(entry, worker_id,
    worker_restarts)` records the next incarnation on that worker, alive. Killed actors and
    failed constructors are never re-created.
  - Calls in flight: `calls_of()` (actor id -> its unfinished calls here), and the workers
    that wait on others: a method call made by a function on worker C (`caller`) to an actor
    on worker T holds C until T answers, since a worker runs one function at a time.
    `wait_cycle(caller, target)` is the chain of workers `[target, ..., caller]` through
    which the calls in flight would make `target` wait, transitively, on `caller` (None if
    none): a call from `caller` to `target` would then wait for itself.
- `find_wait_cycle(edges, caller, target)`: the same over any `(waiting, waited on)` pairs.
"""
from __future__ import annotations

import collections
import random
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from faas.errors import NoResources

from .policy import WorkerView

__all__ = ["ActorEntry", "ActorDirectory", "choose_actor_worker", "prefer_free",
           "find_wait_cycle"]

CREATE, METHOD, KILL = "create", "method", "kill"


@dataclass
class ActorEntry:
    actor_id: str
    class_name: str
    worker_id: str
    restarts: int = 0
    dead: Optional[str] = None       # why it ended; None while it lives
    max_restarts: int = 0            # times it may be re-created (-1: without limit)
    incarnation: int = 0             # times it was re-created so far
    owner: str = ""                  # the scheduler that placed it (and re-creates it)
    creation: bytes = b""            # the creation's serialized ActorCall
    lost_worker: bool = False        # it died with its worker (not killed, not failed)

    def describe(self) -> str:
        return f"actor {self.actor_id} ({self.class_name})"

    def restarts_left(self) -> bool:
        return self.max_restarts < 0 or self.incarnation < self.max_restarts


def find_wait_cycle(edges: Iterable[Tuple[str, str]], caller: str,
                    target: str) -> Optional[List[str]]:
    """The chain `[target, ..., caller]` along `edges` (waiting -> waited on), shortest
    first, or None when `target` does not wait on `caller` (module contract)."""
    if caller == target:
        return [target]
    waits: Dict[str, Set[str]] = {}
    for a, b in edges:
        waits.setdefault(a, set()).add(b)
    previous: Dict[str, str] = {target: target}
    frontier = collections.deque([target])
    while frontier:
        w = frontier.popleft()
        for nxt in sorted(waits.get(w, ())):
            if nxt in previous:
                continue
            previous[nxt] = w
            if nxt == caller:
                chain = [caller]
                while chain[-1] != target:
                    chain.append(previous[chain[-1]])
                return chain[::-1]
            frontier.append(nxt)
    return None


def choose_actor_worker(workers: Sequence[WorkerView], hosting: Mapping[str, int],
                        rng: random.Random) -> WorkerView:
    """The worker a new actor goes to (see the module contract)."""
    if not workers:
        raise NoResources("no live executor worker can take a new actor")
    best = min((hosting.get(w.worker_id, 0), w.outstanding) for w in workers)
    tied = [w for w in workers if (hosting.get(w.worker_id, 0), w.outstanding) == best]
    return tied[rng.randrange(len(tied))]


def prefer_free(workers: Sequence[WorkerView], hosting: Mapping[str, int]) -> List[WorkerView]:
    """Workers without actors if there are any, else every worker (module contract)."""
    free = [w for w in workers if not hosting.get(w.worker_id)]
    return free if free else list(workers)


class ActorDirectory:
    """This scheduler's view of the actors; see the module contract."""

    def __init__(self, max_actors: int = 100_000, max_calls: int = 100_000) -> None:
        self.max_actors = max(1, int(max_actors))
        self.max_calls = max(1, int(max_calls))
        self._actors: "collections.OrderedDict[str, ActorEntry]" = collections.OrderedDict()
        # call id -> (actor id, op, caller worker ("" for a client), the actor's worker)
        self._calls: "collections.OrderedDict[str, Tuple[str, str, str, str]]" = \
            collections.OrderedDict()
        # worker id -> live actors there, kept as entries change (read on every plain call)
        self._hosting: Dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._actors)

    def get(self, actor_id: str) -> Optional[ActorEntry]:
        return self._actors.get(actor_id)

    def placed(self, entry: ActorEntry) -> None:
        old = self._actors.pop(entry.actor_id, None)
        if old is not None:
            self._count(old, -1)
        self._actors[entry.actor_id] = entry
        self._count(entry, +1)
        while len(self._actors) > self.max_actors:
            victim = next((a for a, e in self._actors.items() if e.dead is not None),
                          next(iter(self._actors)))
            self._count(self._actors.pop(victim), -1)

    def _count(self, entry: ActorEntry, delta: int) -> None:
        if entry.dead is None:
            n = self._hosting.get(entry.worker_id, 0) + delta
            if n > 0:
                self._hosting[entry.worker_id] = n
            else:
                self._hosting.pop(entry.worker_id, None)

    def _end(self, entry: ActorEntry, why: str, lost_worker: bool = False) -> None:
        if entry.dead is None:
            self._count(entry, -1)
            entry.dead = why
            entry.lost_worker = lost_worker

    def route(self, actor_id: str, restarts_of: Callable[[str], Optional[int]]
              ) -> Tuple[Optional[ActorEntry], Optional[str]]:
        entry = self._actors.get(actor_id)
        if entry is None:
            return None, None
        if entry.dead is None:
            restarts = restarts_of(entry.worker_id)
            if restarts is None:
                self._end(entry, f"its worker {entry.worker_id} is gone", True)
            elif restarts != entry.restarts:
                self._end(entry, f"its worker {entry.worker_id} was restarted since the actor "
                                 f"was placed there (the instance died with the old process)",
                          True)
        return entry, entry.dead

    def worker_lost(self, worker_id: str, why: str) -> List[ActorEntry]:
        lost = [e for e in self._actors.values() if e.worker_id == worker_id and e.dead is None]
        for e in lost:
            self._end(e, f"its worker {worker_id} {why}", True)
        return lost

    def restartable(self, entry: ActorEntry, me: str) -> bool:
        """Whether scheduler `me` re-creates this dead actor now (module contract)."""
        return (entry.dead is not None and entry.lost_worker and entry.owner == me
                and bool(entry.creation) and entry.restarts_left())

    def restarted(self, entry: ActorEntry, worker_id: str, worker_restarts: int) -> ActorEntry:
        """The actor's next incarnation, alive on `worker_id`, recorded and returned."""
        new = ActorEntry(entry.actor_id, entry.class_name, worker_id, worker_restarts,
                         max_restarts=entry.max_restarts, incarnation=entry.incarnation + 1,
                         owner=entry.owner, creation=entry.creation)
        self.placed(new)
        return new

    def ended(self, actor_id: str, why: str) -> Optional[ActorEntry]:
        entry = self._actors.get(actor_id)
        if entry is not None:
            self._end(entry, why)
        return entry

    def hosting(self) -> Dict[str, int]:
        """worker id -> live actors there (a copy)."""
        return dict(self._hosting)

    # ---- calls ----
    def call_started(self, call_id: str, actor_id: str, op: str, caller: str = "",
                     worker_id: str = "") -> None:
        self._calls[call_id] = (actor_id, op, caller, worker_id)
        while len(self._calls) > self.max_calls:
            self._calls.popitem(last=False)

    def call_finished(self, call_id: str, ok: bool) -> Optional[ActorEntry]:
        """Forget the call; the actor's entry if this was its creation and it failed."""
        actor_id, op, _, _ = self._calls.pop(call_id, (None, None, "", ""))
        if actor_id is None or ok or op != CREATE:
            return None
        return self.ended(actor_id, "its constructor failed")

    def actor_of_call(self, call_id: str) -> Optional[ActorEntry]:
        actor_id = self._calls.get(call_id, (None,))[0]
        return None if actor_id is None else self._actors.get(actor_id)

    def calls_of(self) -> Dict[str, int]:
        """actor id -> its calls in flight here (running or queued)."""
        return dict(collections.Counter(c[0] for c in self._calls.values()))

    def entries(self) -> List[ActorEntry]:
        """Every actor known here, live ones first (then in placement order)."""
        return sorted(self._actors.values(), key=lambda e: e.dead is not None)

    def wait_cycle(self, caller: str, target: str) -> Optional[List[str]]:
        """The workers through which `target` waits on `caller` (module contract)."""
        return find_wait_cycle(((c, w) for _, _, c, w in self._calls.values() if c and w),
                               caller, target)
