"""A scheduler's graceful stop (SIGTERM, e.g. a rolling upgrade): when to refuse a call and
when to exit. A pure rule: times in, decisions out; no sockets or clocks.

Contract: `GracefulStop(grace, quiet)`; the service calls `begin(now)` when asked to stop.
- Before `begin`, nothing changes: `refuses()` is False and `finished(...)` is False.
- From `begin` on, `refuses()` is True: every new call is answered SCHEDULER_STOPPING, which
  tells its client that the call never started here, so the client sends the same call to
  another scheduler (cloudburst/client.py). The service calls `refused(now)` for each.
  Everything else (results, `done` reports, heartbeats, registry requests) is served as
  before, so the calls already accepted run to their end.
- `finished(now, in_flight)` is True once nothing accepted here is in flight and no call was
  refused for `quiet` seconds (the clients have moved on, so no call is left in a socket
  buffer when the process exits), or `grace` seconds after `begin` whatever is in flight
  (the pod's grace period is longer: the process exits before it is killed).
- `grace` 0 stops at once (`finished` is True right after `begin`): the behaviour of a
  scheduler that is not configured for graceful stops.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["GracefulStop"]


class GracefulStop:
    """When a stopping scheduler refuses calls and exits; see the module contract."""

    def __init__(self, grace: float, quiet: float = 0.5) -> None:
        if grace < 0 or quiet < 0:
            raise ValueError(f"GracefulStop: grace and quiet must be >= 0, not {grace!r} and "
                             f"{quiet!r}")
        self.grace = float(grace)
        self.quiet = float(quiet)
        self.since: Optional[float] = None         # when the stop began
        self.last_refusal: Optional[float] = None  # when a call was last refused
        self.refusals = 0

    def begin(self, now: float) -> None:
        """Asked to stop (again: no change)."""
        if self.since is None:
            self.since = now

    @property
    def stopping(self) -> bool:
        return self.since is not None

    def refuses(self) -> bool:
        """Whether a new call is refused (answered SCHEDULER_STOPPING)."""
        return self.since is not None and self.grace > 0

    def refused(self, now: float) -> None:
        """A call was refused at `now`."""
        self.last_refusal = now
        self.refusals += 1

    def finished(self, now: float, in_flight: int) -> bool:
        """Whether the scheduler may exit now, with `in_flight` calls accepted and not over."""
        if self.since is None:
            return False
        if self.grace <= 0 or now - self.since >= self.grace:
            return True
        quiet_since = self.since if self.last_refusal is None else self.last_refusal
        return in_flight <= 0 and now - quiet_since >= self.quiet
