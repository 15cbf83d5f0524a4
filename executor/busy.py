"""How long a worker has spent running functions.

Contract: `BusyClock` is plain state with the times passed in. The worker's loop calls
`start` when a function begins and `stop` when it ends. The heartbeat thread reads `running`
and `total(now)` for the utilization it reports; `on_start`, if given, is called at each start
(the heartbeat thread's doorbell, `executor/liveness.py`). Each read takes one consistent copy of the
start time, so a heartbeat that races with `stop` sees the run either ongoing or finished,
never counted twice. `take_finished` gives the busy time finished since its last call, which
the worker reports with its `done`s (scheduler/window.py sizes windows from it).
"""
from typing import Callable, Optional

__all__ = ["BusyClock"]


class BusyClock:
    """A worker's busy time; see the module contract."""

    def __init__(self, on_start: Optional[Callable[[], None]] = None) -> None:
        self.on_start = on_start                # told of each start (the heartbeat's doorbell)
        self._since: Optional[float] = None     # start of the function running now
        self._total = 0.0                       # seconds of functions that finished
        self._mark = 0.0                        # `_total` at the last `take_finished`

    def start(self, now: float) -> None:
        self._since = now
        if self.on_start is not None:
            self.on_start()

    def stop(self, now: float) -> None:
        since, self._since = self._since, None
        if since is not None:
            self._total += now - since

    @property
    def running(self) -> bool:
        return self._since is not None

    @property
    def since(self) -> Optional[float]:
        """When the function running now began (None: none runs)."""
        return self._since

    def total(self, now: float) -> float:
        """Busy seconds so far, the running function's included."""
        since = self._since
        return self._total + (now - since if since is not None else 0.0)

    def take_finished(self) -> float:
        """Busy seconds of the functions that finished since the last call."""
        done, self._mark = self._total - self._mark, self._total
        return done
