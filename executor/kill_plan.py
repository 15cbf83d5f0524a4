"""When a worker arms and clears its kill timer and its alarm (executor/guard.py): pure, no
clocks.

The kill timer ends the worker when a function stuck in C code outlives its hard limit
(`hard_limit(seconds)` after it started). Arming or clearing it is a system call through
ctypes, the largest single cost of a no-op call at the worker. So:

- Alone (a scheduler's call, or a direct call outside a run of them), a function's timer is
  armed at its start to exactly its hard limit and cleared at its end, as always.
- Within a run of calls (`open_run` .. `close_run`: the direct calls a worker finds waiting,
  handled back to back), the timer stays armed from one call to the next while the armed
  time is still a valid hard limit for the call starting: not before that call's own hard
  limit and at most `slack` seconds after it. So a run of calls arms it about once per
  `slack` seconds of calls instead of twice per call, and a stuck function is still ended
  at its own hard limit, at most `slack` later (never earlier: its time limit always holds).
  Between calls the timer is left armed only while at least `keep` seconds remain before it
  fires (the worker's own work after a call, such as serializing a large result, may take
  a while); closer than that it is cleared at the call's end. So it may stay armed across a
  wait bounded well below `keep` (the worker's wait for its next frame, at most a receive
  timeout: a run of direct calls stays open from one wake-up to the next while calls keep
  coming, `executor/direct_calls.py`). Before any other wait between calls (its node
  cache: `settle`), and at `close_run`, it is cleared. A run arms the timer `CLOCK_ROOM`
  under `slack` past the starting call's hard limit, so that the next function of the same
  call, whose limit is read a few microseconds later, still fits that arming.
- A cancel arms the timer `grace` seconds out (`cancelled`): the next call re-arms it.

Each method returns what to do with the timer: seconds to arm it for, 0 to clear it, or None
to leave it.

The alarm (`AlarmPlan`: the real-time timer whose signal stops a function at its time limit,
`Interrupted`) follows the same runs. Alone, a function arms it to its own limit and clears
it at its end. Within a run it is left armed from call to call while it fires no later than
the starting call's own limit; when it fires earlier (`fired`, with the running function's
limit), it is re-armed for what is left, and only a function at its own limit is stopped.
It fires between calls harmlessly (the guard's handler does nothing then), and is cleared
at `close_run` and by `settle`.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["AlarmPlan", "KillPlan", "RUN_SLACK", "RUN_KEEP", "ALARM_EARLY", "CLOCK_ROOM"]

RUN_SLACK = 0.25     # seconds a stuck function may outlive its hard limit within a run
RUN_KEEP = 10.0      # seconds left on the timer for it to stay armed between calls
ALARM_EARLY = 0.001  # an alarm this close to a function's limit is its limit (timer rounding)
CLOCK_ROOM = 0.001   # a run's arming this much under the slack (clock reads drift)


class KillPlan:
    """The kill timer's arming, per the module contract; `hard(seconds)`: a function's hard
    limit for its time limit of `seconds`."""

    def __init__(self, slack: float = RUN_SLACK, keep: float = RUN_KEEP) -> None:
        self.slack = slack
        self.keep = keep
        self.armed_until: Optional[float] = None   # when the timer fires; None: cleared
        self.in_run = False

    def start(self, now: float, hard_seconds: float) -> Optional[float]:
        """A function starts, to be killed `hard_seconds` from `now` if it is stuck."""
        own = now + hard_seconds
        if not self.in_run:
            self.armed_until = own
            return hard_seconds
        armed = self.armed_until
        if armed is not None and own <= armed <= own + self.slack:
            return None
        # a hair under the slack: the next function of the same call reads the clock a few
        # microseconds later and may find its own limit that much earlier
        room = self.slack - min(CLOCK_ROOM, self.slack / 2)
        self.armed_until = own + room
        return hard_seconds + room

    def end(self, now: float) -> Optional[float]:
        """The function returned or raised."""
        armed = self.armed_until
        if armed is None:
            return None
        if self.in_run and armed - now >= self.keep:
            return None
        self.armed_until = None
        return 0.0

    def cancelled(self, now: float, grace: float) -> float:
        """The running function was cancelled: it has `grace` seconds to stop."""
        self.armed_until = now + grace
        return grace

    def open_run(self) -> None:
        self.in_run = True

    def settle(self) -> Optional[float]:
        """No function runs and the worker is about to wait: clear a timer left armed."""
        if self.armed_until is None:
            return None
        self.armed_until = None
        return 0.0

    def close_run(self) -> Optional[float]:
        self.in_run = False
        return self.settle()


class AlarmPlan:
    """The alarm's arming, per the module contract (`start`/`end` around each function)."""

    def __init__(self) -> None:
        self.armed_until: Optional[float] = None   # when the alarm fires; None: cleared
        self.in_run = False

    def start(self, now: float, seconds: float) -> Optional[float]:
        """A function starts, to be stopped `seconds` from `now`."""
        own = now + seconds
        armed = self.armed_until
        if self.in_run and armed is not None and armed <= own:
            return None                     # it fires first; `fired` re-arms it then
        self.armed_until = own
        return seconds

    def fired(self, now: float, running_until: Optional[float]) -> Optional[float]:
        """The alarm went off; `running_until`: the running function's limit (None: none
        runs). Seconds to re-arm it for, None to leave it off, 0 if the function's time is up."""
        self.armed_until = None
        if running_until is None:
            return None
        if now < running_until - ALARM_EARLY:
            self.armed_until = running_until
            return running_until - now
        return 0.0

    def open_run(self) -> None:
        self.in_run = True

    def close_run(self) -> Optional[float]:
        self.in_run = False
        return self.settle()

    def end(self) -> Optional[float]:
        if self.in_run or self.armed_until is None:
            return None
        self.armed_until = None
        return 0.0

    def settle(self) -> Optional[float]:
        if self.armed_until is None:
            return None
        self.armed_until = None
        return 0.0
