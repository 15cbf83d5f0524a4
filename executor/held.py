"""The results a worker holds for later calls that take them as arguments (a `Future` passed
to a call is resolved on the worker that runs it, from the worker that ran the producing
call's sink, without a trip through the client).

Contract (pure state; every method takes `now`, in seconds):
- `keep(call_id, outcome, now)` holds a call's `Outcome` (its status, its result's bytes when
  OK, or the message saying why it failed) for `ttl` seconds, within `max_entries` outcomes
  and `max_bytes` of values (the oldest go first; a value larger than `max_bytes` is not
  held). It returns the requests that were waiting for that outcome, to be answered with it.
  The first outcome of a call wins: a later report (an abort after the result) is ignored.
- `ask(call_id, request, deadline, now)` returns the held outcome, or a DEPENDENCY_FAILED
  outcome saying why there is none (the outcome was held and dropped: it expired or made
  room), or None after registering `request` to be answered by `keep` (at most
  `max_waiting` requests wait; beyond that the answer is DEPENDENCY_FAILED at once).
- `expire(now)` drops outcomes past their `ttl` and returns `(request, outcome)` for every
  waiting request past its deadline (an outcome saying the call produced nothing in time).
Values and requests are opaque here.
"""
from __future__ import annotations

import collections
from typing import Any, Dict, List, NamedTuple, Optional, OrderedDict, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["HeldResults", "Outcome"]


class Outcome(NamedTuple):
    # (a tuple, not a frozen dataclass: every call a worker runs keeps one)
    status: int                 # cloudburst.Status
    value: bytes = b""          # the serialized result, when status is OK
    message: str = ""           # why there is no result, otherwise


class _Held(NamedTuple):
    outcome: Outcome
    expires: float


class HeldResults:
    """Outcomes of calls this worker ran, and requests waiting for them; see the contract."""

    def __init__(self, ttl: float = 120.0, max_entries: int = 1024,
                 max_bytes: int = 64 << 20, max_waiting: int = 1024) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_waiting = max_waiting
        self._held: OrderedDict[str, _Held] = collections.OrderedDict()
        self._bytes = 0
        self._gone: OrderedDict[str, str] = collections.OrderedDict()   # call id -> why
        self._waiting: Dict[str, List[Tuple[Any, float]]] = {}
        self._n_waiting = 0
        # (one sentence for every outcome dropped to make room: not formatted per call)
        self._room = (f"it was dropped to make room for newer results (a worker holds "
                      f"{max_entries} results, {max_bytes} bytes)")

    def __len__(self) -> int:
        return len(self._held)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def keep(self, call_id: str, outcome: Outcome, now: float) -> List[Any]:
        if call_id in self._held or call_id in self._gone:
            return []
        waiters = [r for r, _ in self._waiting.pop(call_id, ())] if self._waiting else []
        self._n_waiting -= len(waiters)
        size = len(outcome.value)
        if size > self.max_bytes:
            self._forget(call_id, f"its result ({size} bytes) is larger than the "
                                  f"{self.max_bytes} bytes a worker holds")
            return waiters
        self._held[call_id] = _Held(outcome, now + self.ttl)
        self._bytes += size
        while len(self._held) > self.max_entries or self._bytes > self.max_bytes:
            old, entry = self._held.popitem(last=False)
            self._bytes -= len(entry.outcome.value)
            self._forget(old, self._room)
        return waiters

    def ask(self, call_id: str, request: Any, deadline: float,
            now: float) -> Optional[Outcome]:
        entry = self._held.get(call_id)
        if entry is not None:
            return entry.outcome
        why = self._gone.get(call_id)
        if why is not None:
            return Outcome(pb.DEPENDENCY_FAILED, message=f"its result is no longer held: {why}")
        if self._n_waiting >= self.max_waiting:
            return Outcome(pb.DEPENDENCY_FAILED, message=(
                f"its worker already has {self.max_waiting} requests waiting for results"))
        self._waiting.setdefault(call_id, []).append((request, deadline))
        self._n_waiting += 1
        return None

    def expire(self, now: float) -> List[Tuple[Any, Outcome]]:
        while self._held:
            call_id, entry = next(iter(self._held.items()))
            if entry.expires > now:
                break
            del self._held[call_id]
            self._bytes -= len(entry.outcome.value)
            self._forget(call_id, f"results are held {self.ttl:g} s")
        out = []
        for call_id, waiters in list(self._waiting.items()):
            keep = [(r, d) for r, d in waiters if d > now]
            for r, d in waiters:
                if d <= now:
                    out.append((r, Outcome(pb.DEPENDENCY_FAILED, message=(
                        "it produced no result on this worker before the waiting call's "
                        "deadline"))))
            self._n_waiting -= len(waiters) - len(keep)
            if keep:
                self._waiting[call_id] = keep
            else:
                del self._waiting[call_id]
        return out

    def _forget(self, call_id: str, why: str) -> None:
        self._gone[call_id] = why
        while len(self._gone) > 4 * self.max_entries:
            self._gone.popitem(last=False)
