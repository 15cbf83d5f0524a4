"""Stopping a running function: at its time limit, at its call's deadline, or on a cancel.

Contract: a worker runs one function at a time on its main thread. `FunctionGuard.run(call_id,
seconds, reason, fn)` calls `fn()` with a real-time timer armed for `seconds`; when the timer
fires, a signal handler raises `Interrupted(TIMEOUT, reason)` inside the function, which
stops it wherever it is (a blocking sleep or socket wait included). `cancel(call_id)`, from
any thread, raises `Interrupted(CANCELLED, ...)` in the function if it belongs to that call.
`Interrupted` is a BaseException, so a function's own `except Exception` does not swallow
it. A cancelled function that has not returned `HARD_GRACE` seconds later (it swallowed the
interrupt) is ended with its worker by the kill timer below, as at a time limit: nothing
keeps running for a caller that left. (A function holding the interpreter in C code does not
let the cancel's thread run at all; it is ended at its time limit, as below.) Outside `run` the handlers do nothing: a late signal never hits the worker's own code.
`install()` must run on the main thread (Python delivers signals there).

A function stuck in C code that holds the interpreter (for example `sum(range(10**12))`) never
sees the signal, and no Python thread of the worker runs meanwhile. For that case `run` also
arms a kernel timer on the monotonic clock (a POSIX per-process timer, `timer_create`) that
sends SIGPROF, left at its default action (terminate the process), at `hard_limit(seconds)`:
the time limit plus `HARD_GRACE` seconds of wall-clock time, whatever the number of CPUs or
threads. The worker dies by SIGPROF and its executor node restarts it. The call has already
failed with `Timeout` at the limit (its node saw the limit pass with the worker silent:
`executor/liveness.py`); otherwise the scheduler fails it now (exit by SIGPROF means exactly
this). Where the kernel has no such
timer (not Linux), a CPU-time timer (`ITIMER_PROF`) at the limit plus the grace, times the
CPUs the process may use, stands in. Arming and clearing cost one system call each, the
largest single cost of a short call; so calls run back to back (`run_of_calls()`, or
`open_run()` .. `close_run()`: a worker's direct calls while they keep coming) share one
arming while it still fits each call, ending a stuck one at
most `kill_plan.RUN_SLACK` after its hard limit, never before; the alarm is left armed too,
and re-armed when it fires before the running function's own limit (executor/kill_plan.py
decides both).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, Optional, Union

from hydro_proto import cloudburst_pb2 as pb

from .kill_plan import AlarmPlan, KillPlan

__all__ = ["FunctionGuard", "Interrupted", "HARD_GRACE", "hard_limit"]

log = logging.getLogger("cloudburst.worker")

HARD_GRACE = 1.0    # seconds past the limit before a function stuck in C code is killed
_CPUS = max(1, os.cpu_count() or 1)


def hard_limit(seconds: float) -> float:
    """Seconds (wall clock) after which a function that ignored its time limit kills its
    worker."""
    return seconds + HARD_GRACE


class _SigEvent(ctypes.Structure):
    """Linux's `struct sigevent` (64 bytes): value, signal number, notify, padding."""
    _fields_ = [("sigev_value", ctypes.c_void_p), ("sigev_signo", ctypes.c_int),
                ("sigev_notify", ctypes.c_int), ("_pad", ctypes.c_int * 12)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_MONOTONIC = 1
_SIGEV_SIGNAL = 0


class KillTimer:
    """A one-shot wall-clock (monotonic) timer that sends SIGPROF to this process; it needs
    no Python thread, so it fires while the main thread holds the interpreter. `arm(seconds)`
    (0 disarms). Falls back to a CPU-time `ITIMER_PROF` budget of seconds times the CPUs
    where POSIX timers are unavailable."""

    def __init__(self) -> None:
        self._timer = ctypes.c_void_p()
        self._settime = None
        self._spec = _ITimerspec()        # filled in place by the thread that made it
        self._spec_ref = ctypes.byref(self._spec)
        self._owner = threading.get_ident()
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if not hasattr(libc, "timer_create"):          # glibc before 2.34: in librt
                libc = ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)
            event = _SigEvent(sigev_signo=signal.SIGPROF, sigev_notify=_SIGEV_SIGNAL)
            if libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(event),
                                 ctypes.byref(self._timer)) != 0:
                raise OSError(ctypes.get_errno(), "timer_create failed")
            self._settime = libc.timer_settime
        except (OSError, AttributeError, TypeError) as e:
            log.warning("no POSIX timer (%s): a function stuck in C code is stopped by a "
                        "CPU-time budget instead", e)

    def arm(self, seconds: float) -> None:
        if self._settime is None:
            signal.setitimer(signal.ITIMER_PROF, seconds * _CPUS)
            return
        whole = int(seconds)
        if threading.get_ident() == self._owner:    # armed twice per call: one structure
            spec, ref = self._spec, self._spec_ref
        else:                                       # a cancel, from another thread
            spec = _ITimerspec()
            ref = ctypes.byref(spec)
        spec.it_value.tv_sec, spec.it_value.tv_nsec = whole, int((seconds - whole) * 1e9)
        if self._settime(self._timer, 0, ref, None) != 0:
            raise OSError(ctypes.get_errno(), "timer_settime failed")


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
        self._kill_timer: Optional[KillTimer] = None
        self._lock = threading.Lock()    # a cancel's kill timer never outlives its function
        self._plan = KillPlan()          # when the kill timer is armed and cleared
        self._alarm = AlarmPlan()        # when the alarm is (main thread and its handler)
        self._until = 0.0                # when the running function's time is up

    def install(self) -> None:
        self._kill_timer = KillTimer()
        signal.signal(signal.SIGALRM, self._time_up)
        signal.signal(signal.SIGUSR1, self._cancelled)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)    # terminate: see the module contract

    def run(self, call_id: str, seconds: float, reason: Union[str, Callable[[], str]],
            fn: Callable[[], Any]) -> Any:
        """`fn()` stopped at `seconds` (`Interrupted` with `reason`, or what it returns when
        it is a function: made only when the limit is reached)."""
        self._reason = reason
        seconds = max(0.001, seconds)
        kill_timer = self._kill_timer
        now = time.monotonic()
        self._until = now + seconds        # set before `_running`: the alarm reads both
        # (the plans' answers are looked at here: within a run of calls they are mostly
        # None, and a call into `_arm`/`_alarm_for` per answer was a tenth of this method)
        with self._lock:       # a cancel (or a settle) sees the call running, timers armed
            self._running = call_id
            if kill_timer is not None:
                armed = self._plan.start(now, hard_limit(seconds))
                if armed is not None:
                    kill_timer.arm(armed)
            alarm = self._alarm.start(now, seconds)
            if alarm is not None:
                signal.setitimer(signal.ITIMER_REAL, alarm)
        try:
            return fn()
        finally:
            with self._lock:
                self._running = None
                alarm = self._alarm.end()
                if alarm is not None:
                    signal.setitimer(signal.ITIMER_REAL, alarm)
                if kill_timer is not None:
                    armed = self._plan.end(time.monotonic())
                    if armed is not None:
                        kill_timer.arm(armed)

    @contextlib.contextmanager
    def run_of_calls(self) -> Iterator[None]:
        """Calls run back to back in the block share one arming of the kill timer and of
        the alarm while they still fit each (executor/kill_plan.py); both are cleared when
        the block ends."""
        self.open_run()
        try:
            yield
        finally:
            self.close_run()

    @property
    def in_run(self) -> bool:
        return self._plan.in_run

    def open_run(self) -> None:
        """A run of calls starts (or goes on: nothing changes if one is open)."""
        if not self._plan.in_run:
            with self._lock:
                self._plan.open_run()
                self._alarm.open_run()

    def close_run(self) -> None:
        """The run of calls (if any) ends: the kill timer and the alarm are cleared."""
        if self._plan.in_run:
            with self._lock:
                self._arm(self._plan.close_run())
                self._alarm_for(self._alarm.close_run())

    def settle(self) -> None:
        """Between calls, before the worker waits (for its node cache): a kill timer left
        armed by a run of calls is cleared, so the wait cannot outlast it (and the alarm,
        which would only interrupt the wait)."""
        with self._lock:
            if self._running is None:
                self._arm(self._plan.settle())
                self._alarm_for(self._alarm.settle())

    def cancel(self, call_id: str) -> None:
        """Stop the running function if it belongs to `call_id` (any thread)."""
        self._cancel_target = call_id
        with self._lock:
            if self._running == call_id:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
                if self._kill_timer is not None:      # deaf to the signal: the worker dies
                    self._arm(self._plan.cancelled(time.monotonic(), HARD_GRACE))

    def _arm(self, seconds: Optional[float]) -> None:
        """Do what the plan said (under the lock): arm for `seconds`, clear (0), or nothing."""
        if seconds is not None and self._kill_timer is not None:
            self._kill_timer.arm(seconds)

    @staticmethod
    def _alarm_for(seconds: Optional[float]) -> None:
        """Do what the alarm's plan said: arm it for `seconds`, clear it (0), or nothing."""
        if seconds is not None:
            signal.setitimer(signal.ITIMER_REAL, seconds)

    def _time_up(self, signum: int, frame: Any) -> None:
        # takes no lock: it runs on the main thread, which may hold it
        running = self._running is not None
        again = self._alarm.fired(time.monotonic(), self._until if running else None)
        if again:          # it fired before the running function's own limit: re-armed
            signal.setitimer(signal.ITIMER_REAL, again)
        elif running and again is not None:
            reason = self._reason
            raise Interrupted(pb.TIMEOUT, reason if isinstance(reason, str) else reason())

    def _cancelled(self, signum: int, frame: Any) -> None:
        if self._running is not None and self._running == self._cancel_target:
            raise Interrupted(pb.CANCELLED, "its call was cancelled")
