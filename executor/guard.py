"""Stopping a running function: at its time limit, at its call's deadline, or on a cancel.

Contract: a worker runs one function at a time on its main thread. `FunctionGuard.run(call_id,
seconds, reason, fn)` calls `fn()` with a real-time timer armed for `seconds`; when the timer
fires, a signal handler raises `Interrupted(TIMEOUT, reason)` inside the function, which
stops it wherever it is (a blocking sleep or socket wait included). `cancel(call_id)`, from
any thread, raises `Interrupted(CANCELLED, ...)` in the function if it belongs to that call.
`Interrupted` is a BaseException, so a function's own `except Exception` does not swallow
it. Outside `run` the handlers do nothing: a late signal never hits the worker's own code.
`install()` must run on the main thread (Python delivers signals there).

A function stuck in C code that holds the interpreter (for example `sum(range(10**12))`) never
sees the signal. For that case `run` also arms a CPU-time timer (`ITIMER_PROF`, left at its
default action, which terminates the process) at `hard_limit(seconds)` CPU seconds: the worker
is killed by SIGPROF, its executor node restarts it, and the scheduler fails the call with
`Timeout` (exit by SIGPROF means exactly this). The budget is the time limit plus
`HARD_GRACE` seconds, times the CPUs the process may use, so a function that computes on
several threads is never killed before its wall-clock limit; one spinning thread is killed
after at most that many seconds of CPU. Both timers cost one system call each to arm and clear.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable, Optional

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["FunctionGuard", "Interrupted", "HARD_GRACE", "hard_limit"]

HARD_GRACE = 1.0    # seconds past the limit before a function stuck in C code is killed
_CPUS = max(1, os.cpu_count() or 1)


def hard_limit(seconds: float) -> float:
    """CPU seconds after which a function that ignored its time limit kills its worker."""
    return (seconds + HARD_GRACE) * _CPUS


class Interrupted(BaseException):
    """Raised inside a running function: its time is up (`status` TIMEOUT) or its call was
    cancelled (CANCELLED); `reason` says which limit or why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class FunctionGuard:
    """See the module contract."""

    def __init__(self) -> None:
        self._running: Optional[str] = None          # the call id of the function running now
        self._cancel_target: Optional[str] = None    # a call asked to stop while running
        self._reason = ""

    def install(self) -> None:
        signal.signal(signal.SIGALRM, self._time_up)
        signal.signal(signal.SIGUSR1, self._cancelled)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)    # terminate: see the module contract

    def run(self, call_id: str, seconds: float, reason: str, fn: Callable[[], Any]) -> Any:
        self._reason = reason
        self._running = call_id
        seconds = max(0.001, seconds)
        signal.setitimer(signal.ITIMER_PROF, hard_limit(seconds))
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn()
        finally:
            self._running = None
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.setitimer(signal.ITIMER_PROF, 0)

    def cancel(self, call_id: str) -> None:
        """Stop the running function if it belongs to `call_id` (any thread)."""
        self._cancel_target = call_id
        if self._running == call_id:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def _time_up(self, signum: int, frame: Any) -> None:
        if self._running is not None:
            raise Interrupted(pb.TIMEOUT, self._reason)

    def _cancelled(self, signum: int, frame: Any) -> None:
        if self._running is not None and self._running == self._cancel_target:
            raise Interrupted(pb.CANCELLED, "its call was cancelled")
