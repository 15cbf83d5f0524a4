"""When a worker arms and clears its kill timer (executor/guard.py): pure, no clocks.

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
  a while); closer than that it is cleared at the call's end. Before the worker waits for
  anything between calls (its node cache: `settle`), and at `close_run`, it is cleared.
- A cancel arms the timer `grace` seconds out (`cancelled`): the next call re-arms it.

Each method returns what to do with the timer: seconds to arm it for, 0 to clear it, or None
to leave it.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["KillPlan", "RUN_SLACK", "RUN_KEEP"]

RUN_SLACK = 0.25     # seconds a stuck function may outlive its hard limit within a run
RUN_KEEP = 10.0      # seconds left on the timer for it to stay armed between calls


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
        self.armed_until = own + self.slack
        return hard_seconds + self.slack

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
