"""Stopping a running function (executor/guard.py), in this process: pytest runs tests on
the main thread, where Python delivers signals."""
import threading
import time

import pytest

from executor.guard import FunctionGuard, Interrupted
from hydro_proto import cloudburst_pb2 as pb


@pytest.fixture
def guard():
    import signal
    old = signal.getsignal(signal.SIGALRM), signal.getsignal(signal.SIGUSR1)
    g = FunctionGuard()
    g.install()
    yield g
    signal.signal(signal.SIGALRM, old[0])
    signal.signal(signal.SIGUSR1, old[1])


def test_a_function_past_its_time_is_stopped_even_in_a_blocking_sleep(guard):
    def swallow_errors():
        try:
            time.sleep(5)
        except Exception:
            return "swallowed"

    start = time.monotonic()
    with pytest.raises(Interrupted) as info:
        guard.run("c1", 0.2, "its time limit of 0.2 s", swallow_errors)
    assert info.value.status == pb.TIMEOUT and "0.2 s" in info.value.reason
    assert time.monotonic() - start < 2


def test_a_function_in_time_returns_and_the_timer_is_disarmed(guard):
    assert guard.run("c1", 0.3, "limit", lambda: 42) == 42
    time.sleep(0.5)                       # a stale timer would raise here, outside any call


def test_cancel_stops_only_the_call_it_names(guard):
    threading.Timer(0.2, guard.cancel, args=("other",)).start()
    threading.Timer(0.4, guard.cancel, args=("c1",)).start()
    start = time.monotonic()
    with pytest.raises(Interrupted) as info:
        guard.run("c1", 10, "limit", lambda: time.sleep(5))
    assert info.value.status == pb.CANCELLED and 0.3 < time.monotonic() - start < 2
    guard.cancel("c1")                    # nothing runs now: harmless
    assert guard.run("c2", 10, "limit", lambda: "ok") == "ok"


STUCK = """
import signal, sys, time
from executor.guard import FunctionGuard
g = FunctionGuard()
g.install()
print(time.monotonic(), flush=True)
g.run("c1", float(sys.argv[1]), "limit", lambda: sum(range(10 ** 13)))
"""


def test_a_function_stuck_in_c_code_is_killed_at_its_limit_plus_the_grace():
    """Wall-clock, whatever the CPU count: a budget of CPU seconds times the CPUs killed one
    spinning thread only after (limit + grace) x CPUs seconds (6 s for 2 s on 2 cores)."""
    import signal
    import subprocess
    import sys
    from executor.guard import hard_limit
    limit = 0.5
    proc = subprocess.Popen([sys.executable, "-c", STUCK, str(limit)], stdout=subprocess.PIPE,
                            text=True)
    started = float(proc.stdout.readline())
    try:
        proc.wait(timeout=hard_limit(limit) * 4 + 10)
    finally:
        proc.kill()
    elapsed = time.monotonic() - started
    assert proc.returncode == -signal.SIGPROF
    assert hard_limit(limit) - 0.05 < elapsed < hard_limit(limit) + 0.9, elapsed


def test_the_kill_timer_is_disarmed_after_a_call(guard):
    assert guard.run("c1", 0.05, "limit", lambda: 1) == 1
    time.sleep(1.3)               # past limit + grace: a live kill timer would end pytest here


STUBBORN = """
import sys, threading, time
from executor.guard import FunctionGuard
g = FunctionGuard()
g.install()

def stubborn():
    while True:
        try:
            time.sleep(10)
        except BaseException:      # swallows the cancel's interrupt
            pass

threading.Timer(0.3, g.cancel, args=("c1",)).start()
print(time.monotonic(), flush=True)
g.run("c1", 60.0, "limit", stubborn)
"""


def test_a_cancelled_function_that_will_not_stop_is_ended_with_its_worker():
    """A function that swallows the cancel's interrupt: its worker dies a grace period
    later (its node restarts it), long before the function's own time limit of 60 s."""
    import signal
    import subprocess
    import sys
    from executor.guard import HARD_GRACE
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE,
                            text=True)
    started = float(proc.stdout.readline())
    try:
        proc.wait(timeout=20)
    finally:
        proc.kill()
    elapsed = time.monotonic() - started
    assert proc.returncode == -signal.SIGPROF
    assert 0.3 + HARD_GRACE - 0.05 < elapsed < 0.3 + HARD_GRACE + 1.5, elapsed
