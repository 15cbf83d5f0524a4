"""How many calls may wait at one worker: two, or more for calls shorter than a round trip. Pure.

Contract: `Windows(slots, most, queued_work)` keeps, per worker, an exponentially weighted
mean of the seconds one call ran there, from the workers' `done` reports; no clocks.
- `observe(worker, calls, busy_seconds)`: a `done` of `worker` reported `calls` finished
  calls that ran `busy_seconds` in all (`CallDone.busy_seconds`). A report of `calls`
  calls weighs as `calls` reports of one call each (a heartbeat's count of thousands of
  direct calls moves the mean as far as their `done`s would have, not as far as one call:
  otherwise one slow first call kept a worker's window small for many seconds). Nonsense
  (no calls, a negative or non-finite time) is ignored.
- `bound(worker, calls, seconds)`: clients measured `calls` direct calls on `worker` that
  took `seconds` in all from send to answer (the latencies of a lease's usage report).
  Each took at least its run there, so their mean bounds the mean run time from above; it
  is kept apart (weighed the same way) until the worker's own next report (`observe`),
  which replaces it: it is news sooner than the worker's heartbeat, and a client's word
  never outlasts the worker's. Nonsense is ignored.
- `slots(worker, unknown=None)`: how many unfinished calls of this scheduler the worker may
  hold (the call queue's *free*, `scheduler/dispatch.py`): `ceil(queued_work / mean
  seconds per call)`, clamped to `[slots, most]`, from the reported run times or, when
  that is more, from the clients' bound (a window from the bound is never larger than one
  from the calls' true run times: the bound serves while the run times are unknown or
  dominated by a slow first call). A worker whose calls take `queued_work / slots` or
  longer gets `slots` (`SchedulerConfig.worker_slots`); so does a worker never heard of
  (neither run times nor a bound), unless the caller gives `unknown`, a window judged from
  elsewhere (clamped to `[slots, most]`): a lease spread to a fresh worker takes the window
  of the worker its client already leases the same target on (`scheduler/lease_grants.py`).
- `known(worker)`: whether the worker's run times or a clients' bound were heard.
- `forget(worker)`: the worker is gone.
Why: a worker finishing a call starts the next one waiting at it, and its `done` brings the
scheduler's next call one round trip later. With calls shorter than that round trip, `slots`
calls run out before it ends and the worker idles: at saturation, empty functions ran at half
the rate of calls placed at once. Letting such a worker hold as many calls as fill
`queued_work` seconds keeps it busy, while what waits at a worker, and so what a node added
meanwhile cannot take, stays bounded in time (`queued_work`, 5 ms by default) and in count
(`most`). Calls of a few milliseconds or more see exactly `slots`, as before.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

__all__ = ["Windows"]

WEIGHT = 0.2          # weight of a new report in the mean


class Windows:
    """See the module contract."""

    def __init__(self, slots: int, most: int, queued_work: float) -> None:
        if slots < 1 or most < slots or queued_work < 0:
            raise ValueError(f"Windows: need 1 <= slots <= most and queued_work >= 0, not "
                             f"{slots!r}, {most!r}, {queued_work!r}")
        self.base, self.most, self.queued_work = slots, most, queued_work
        self._mean: Dict[str, float] = {}         # worker -> seconds per call
        self._bound: Dict[str, float] = {}        # worker -> clients' seconds per call

    def __len__(self) -> int:
        return len(self._mean)

    def observe(self, worker: str, calls: int, busy_seconds: float) -> None:
        if _weigh(self._mean, worker, calls, busy_seconds):
            self._bound.pop(worker, None)        # the worker's own word replaces it

    def bound(self, worker: str, calls: int, seconds: float) -> None:
        _weigh(self._bound, worker, calls, seconds)

    def slots(self, worker: str, unknown: Optional[int] = None) -> int:
        if unknown is not None and not self.known(worker):
            return max(self.base, min(self.most, int(unknown)))
        return max(self._window(self._mean.get(worker)), self._window(self._bound.get(worker)))

    def known(self, worker: str) -> bool:
        return worker in self._mean or worker in self._bound

    def _window(self, mean: Optional[float]) -> int:
        if mean is None or self.queued_work <= 0:
            return self.base
        if mean * self.most <= self.queued_work:
            return self.most
        return max(self.base, min(self.most, math.ceil(self.queued_work / mean)))

    def forget(self, worker: str) -> None:
        self._mean.pop(worker, None)
        self._bound.pop(worker, None)


def _weigh(means: Dict[str, float], worker: str, calls: int, seconds: float) -> bool:
    """`calls` calls took `seconds` in all: `worker`'s mean in `means` moves as far as
    `calls` reports of one call each would move it (False: nonsense, ignored)."""
    if calls <= 0 or not math.isfinite(seconds) or seconds < 0:
        return False
    sample = seconds / calls
    mean = means.get(worker)
    weight = 1.0 - (1.0 - WEIGHT) ** min(calls, 1000)     # `calls` steps of WEIGHT
    means[worker] = sample if mean is None else mean + weight * (sample - mean)
    return True
