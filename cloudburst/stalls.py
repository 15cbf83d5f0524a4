"""When a client stops sending calls under a worker lease (pure): its worker is held up.

A worker runs its calls one at a time. A call sent under a lease whose worker is running a
long call (the lease's own, or one the scheduler placed there) waits behind it, even while
another worker idles, where the scheduler would have sent it. So the client watches its
leases: a lease whose oldest call in flight has been out much longer than the target's
direct calls usually take is *held up*, and the target's further calls go around it (to the
client's other leases of the target, else through the scheduler, which places them on a
free worker), until its long call's answer comes. Calls already sent stay where they are
(only a call that has not left the client is ever sent another way: none runs twice).

Contract: `CallTimes(max_targets)` is pure state; nothing here reads a clock or sends.
- `observe(target, seconds)`: a direct call of `target` was answered `seconds` after it was
  sent. Nonsense (negative, not finite) is ignored. At most `max_targets` targets are
  remembered (the one heard of longest ago is forgotten first).
- `patience(target)`: how long the oldest call in flight under a lease of `target` may be
  out before the lease counts as held up: `FACTOR` times the target's usual time (an
  exponentially weighted mean), at least `FLOOR` seconds (also for a target never heard of).
- `held_up(oldest_sent, patience, now)`: whether a lease whose oldest call in flight was
  sent at `oldest_sent` (None: no call in flight) is held up at `now`.
"""
from __future__ import annotations

import math
from typing import Dict, Hashable, Optional

__all__ = ["CallTimes", "held_up", "FLOOR", "FACTOR", "MAX_TARGETS"]

FLOOR = 0.5          # seconds: a call out this long holds its lease up, whatever the target
FACTOR = 10.0        # ... or this many times the target's usual time, if that is longer
WEIGHT = 0.2         # weight of a new answer in the mean
MAX_TARGETS = 1024   # targets whose usual time is remembered


class CallTimes:
    """Each target's usual direct-call time; see the module contract."""

    def __init__(self, max_targets: int = MAX_TARGETS) -> None:
        if max_targets < 1:
            raise ValueError(f"CallTimes: max_targets must be >= 1, not {max_targets!r}")
        self.max_targets = max_targets
        self._mean: Dict[Hashable, float] = {}

    def __len__(self) -> int:
        return len(self._mean)

    def observe(self, target: Hashable, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            return
        mean = self._mean.pop(target, None)       # re-inserted: the latest heard goes last
        self._mean[target] = seconds if mean is None else mean + WEIGHT * (seconds - mean)
        while len(self._mean) > self.max_targets:
            self._mean.pop(next(iter(self._mean)))

    def patience(self, target: Hashable) -> float:
        mean = self._mean.get(target)
        return FLOOR if mean is None else max(FLOOR, FACTOR * mean)


def held_up(oldest_sent: Optional[float], patience: float, now: float) -> bool:
    return oldest_sent is not None and now - oldest_sent > patience
