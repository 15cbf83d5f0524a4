"""The `done` reports a worker owes its schedulers: when to send them, which to drop. Pure.

Contract: `DoneReports(hold, batch)`; every method that decides takes `now` (no clocks).
- `add(scheduler, call_id, ok, busy_seconds, now, hold=False)`: a call whose sink ran here
  finished (its result went to the caller); `busy_seconds`: what the worker ran since its
  last report; `hold`: the whole call ran on this worker, so its caller's next call (placed
  on the same warm worker) brings this worker the acknowledgement below.
- `acknowledged(call_ids)`: a schedule from a scheduler says it already counts these calls
  finished (`Schedule.finished`: their caller reported them with its next call), so their
  `done` is not sent.
- `due(now, idle)`: send what is owed now? Yes once `batch` calls are owed. While more
  messages wait to be handled (`idle` False) they are held, so that at saturation a few
  calls' `done`s go together. When the worker is idle and owes exactly one successful
  call's `done`, added with `hold`, it is held for up to `hold` seconds: a caller that calls again reports
  that call finished itself, and its next call, placed on this warm worker
  (`scheduler/policy.py`), brings the acknowledgement; the scheduler is then not woken for
  a `done` at the very moment that next call reaches it. Otherwise, now.
- `take()`: `(scheduler, CallDone fields)` for everything owed, and forgets it.
A held `done` delays only the scheduler's count of that call, by at most `hold`; one call
at most is held, so a worker never looks busier than one call more than it is.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

__all__ = ["DoneReports"]


class DoneReports:
    """See the module contract."""

    def __init__(self, hold: float, batch: int) -> None:
        self.hold, self.batch = hold, batch
        self._owed: Dict[str, Tuple[List[str], List[str], List[float]]] = {}
        self._since = 0.0
        self._count = 0
        self._holdable = False        # the last call added may be held (its whole call ran here)

    def __bool__(self) -> bool:
        return self._count > 0

    def add(self, scheduler: str, call_id: str, ok: bool, busy_seconds: float,
            now: float, hold: bool = False) -> None:
        if not self._count:
            self._since = now
        self._holdable = hold and ok
        done, failed, busy = self._owed.setdefault(scheduler, ([], [], [0.0]))
        (done if ok else failed).append(call_id)
        busy[0] += busy_seconds
        self._count += 1

    def acknowledged(self, call_ids: Iterable[str]) -> None:
        known = set(call_ids)
        for address in list(self._owed):
            done, failed, busy = self._owed[address]
            kept = [c for c in done if c not in known]
            self._count -= len(done) - len(kept)
            done[:] = kept
            if not done and not failed:
                del self._owed[address]     # its busy time goes with the next report

    def due(self, now: float, idle: bool) -> bool:
        if not self._count:
            return False
        if self._count >= self.batch:
            return True
        if not idle:
            return False
        if self._count == 1 and self._holdable and now - self._since < self.hold:
            return False                 # hold one successful call's done (contract)
        return True

    def take(self) -> List[Tuple[str, List[str], List[str], float]]:
        out = [(a, done, failed, busy[0]) for a, (done, failed, busy) in self._owed.items()]
        self._owed, self._count = {}, 0
        return out
