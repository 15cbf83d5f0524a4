"""Results of direct calls sent back together (pure): one message answers several calls.

A client that queues direct calls sends them to a worker in one `direct_batch`; the worker
runs them one after the other. Sending each result on its own costs a message (and a
wake-up of the client) per call; this holds the results of the batch being run and lets the
worker send them per client as one `direct_results` message.

Contract: `ResultBatch(hold_seconds, max_bytes)` is pure state; methods take `now` (any
monotonic clock) and nothing here sends or sleeps.
- `open()` starts holding (the worker is about to run a batch); `close()` stops. Outside
  `open()`/`close()` nothing is held: `add` returns False and the caller sends at once.
- `add(address, result, now)`: True if `result` (for the client at `address`) is held.
- `due(now, last_run=0.0)`: whether what is held must go now (asked after each call of the
  batch, `last_run` being how long that call took): its oldest result has waited
  `hold_seconds`, or the call just run took that long (calls this slow are not held for
  the next one: results are held only across calls shorter than the hold, so a result
  waits for at most one slow call it did not expect), or the results held add up to
  `max_bytes` (a message stays well below a frame's limit).
- `due_before(expected)`: whether what is held must go before the next call runs, which is
  expected to take `expected` seconds (None: nothing is known of it, e.g. the first call
  of its lease): if anything is held and that call is not known to be shorter than
  `hold_seconds`. So a result waits for a later call only when that call's lease's
  previous call was short: a long call of another lease, or of a lease never run here,
  never holds it up.
- `take()`: what is held, as `(address, [results])` in the order they were added, and
  forgets it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

__all__ = ["ResultBatch", "RESULT_HOLD_SECONDS", "RESULT_BATCH_BYTES"]

RESULT_HOLD_SECONDS = 0.002      # the longest a finished direct call's result is held
RESULT_BATCH_BYTES = 1 << 20     # results held before they must go


class ResultBatch:
    """Held results of the direct batch being run (module contract)."""

    def __init__(self, hold_seconds: float = RESULT_HOLD_SECONDS,
                 max_bytes: int = RESULT_BATCH_BYTES) -> None:
        if hold_seconds < 0 or max_bytes < 1:
            raise ValueError(f"ResultBatch: hold_seconds >= 0 and max_bytes >= 1, not "
                             f"{hold_seconds!r}, {max_bytes!r}")
        self.hold_seconds = hold_seconds
        self.max_bytes = max_bytes
        self._open = False
        self._held: Dict[str, List[Any]] = {}
        self._first: Optional[float] = None
        self._bytes = 0

    def __len__(self) -> int:
        return sum(len(v) for v in self._held.values())

    def __bool__(self) -> bool:            # (asked per call: no count made)
        return bool(self._held)

    def open(self) -> None:
        self._open = True

    def close(self) -> None:
        self._open = False

    def add(self, address: str, result: Any, now: float) -> bool:
        if not self._open:
            return False
        self._held.setdefault(address, []).append(result)
        if self._first is None:
            self._first = now
        self._bytes += len(result.value) + len(result.logs) + len(result.message) + 64
        return True

    def due(self, now: float, last_run: float = 0.0) -> bool:
        return self._first is not None and (now - self._first >= self.hold_seconds
                                            or last_run >= self.hold_seconds
                                            or self._bytes >= self.max_bytes)

    def due_before(self, expected: Optional[float]) -> bool:
        return self._first is not None and (expected is None or expected >= self.hold_seconds)

    def take(self) -> List[Tuple[str, List[Any]]]:
        out = list(self._held.items())
        self._held, self._first, self._bytes = {}, None, 0
        return out
