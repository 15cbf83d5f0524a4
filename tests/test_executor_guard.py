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
    import subprocess
    import sys
    from executor.guard import hard_limit
    limit = 0.5
    proc = subprocess.Popen([sys.executable, "-c", STUCK, str(limit)], stdout=subprocess.PIPE,
                            text=True)
    elapsed = _killed_after(proc, hard_limit(limit) * 4 + 10)
    assert hard_limit(limit) - 0.05 < elapsed < hard_limit(limit) + 0.9, elapsed


def _killed_after(proc, timeout):
    """Seconds from the time `proc` printed to its end, which must be by SIGPROF."""
    import signal
    started = float(proc.stdout.readline())
    try:
        proc.wait(timeout=timeout)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGPROF
    return time.monotonic() - started


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


IN_A_RUN = """
import sys, time
from executor.guard import FunctionGuard
g = FunctionGuard()
g.install()
g._plan.keep = 0.1            # keep the timer armed between calls even this close to firing
mode, limit = sys.argv[1], float(sys.argv[2])
with g.run_of_calls():
    g.run("c0", limit, "limit", lambda: 1)      # leaves the timer armed for the next
    if mode == "stuck":
        time.sleep(0.6)           # past the slack: the armed time is too early for c1
        print(time.monotonic(), flush=True)
        g.run("c1", limit, "limit", lambda: sum(range(10 ** 13)))
    elif mode == "settle":
        g.settle()                              # the worker is about to wait
        time.sleep(limit + 1.6)                 # past the armed limit + grace + slack
if mode == "close":
    time.sleep(limit + 1.6)
print("alive", flush=True)
"""


def _in_a_run(mode, limit):
    import subprocess
    import sys
    return subprocess.Popen([sys.executable, "-c", IN_A_RUN, mode, str(limit)],
                            stdout=subprocess.PIPE, text=True)


def test_a_function_stuck_in_c_code_within_a_run_of_calls_is_killed_at_its_own_limit():
    """The timer a run's earlier call armed is re-armed for the stuck call's own hard limit:
    never before it, at most the run's slack after it."""
    from executor.guard import hard_limit
    from executor.kill_plan import RUN_SLACK
    limit = 0.5
    elapsed = _killed_after(_in_a_run("stuck", limit), hard_limit(limit) * 4 + 10)
    assert hard_limit(limit) - 0.05 < elapsed < hard_limit(limit) + RUN_SLACK + 0.9, elapsed


@pytest.mark.parametrize("mode", ["close", "settle"])
def test_a_kill_timer_left_armed_by_a_run_is_cleared_at_its_end_and_before_a_wait(mode):
    proc = _in_a_run(mode, 0.3)
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out.strip() == "alive", (proc.returncode, out)


def test_the_worker_cache_client_settles_the_guard_before_every_wait():
    """A worker waits for its node cache only after `before_wait` (the guard's `settle`)."""
    import zmq
    from executor.cache_client import CacheClient
    from faas.errors import Timeout
    from runtime.sockets import bind_pull

    class Sent:
        def send(self, address, kind, message):
            return True

    context = zmq.Context()
    replies, address = bind_pull(context, "127.0.0.1")
    try:
        order = []
        cache = CacheClient(Sent(), "tcp://127.0.0.1:1", replies, address, timeout=0.05)
        cache.before_wait = lambda: order.append("settled")
        with pytest.raises(Timeout):
            cache.get(["k"])
        assert order == ["settled"]
    finally:
        replies.close(0)
        context.term()


def test_in_a_run_an_earlier_calls_alarm_does_not_stop_a_later_call_in_its_time(guard):
    """The alarm left armed by c0 fires while c1 runs, before c1's own limit: c1 goes on."""
    import signal
    with guard.run_of_calls():
        assert guard.run("c0", 0.3, "limit", lambda: 0) == 0
        time.sleep(0.1)
        start = time.monotonic()
        assert guard.run("c1", 0.3, "limit", lambda: time.sleep(0.25) or 1) == 1
        assert time.monotonic() - start < 0.3 + 1
        with pytest.raises(Interrupted) as info:   # and the next is still stopped in time
            guard.run("c2", 0.2, "its limit", lambda: time.sleep(5))
        assert info.value.status == pb.TIMEOUT and time.monotonic() - start < 0.25 + 0.2 + 1.5
        assert guard.run("c3", 30.0, "limit", lambda: 3) == 3
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)      # cleared with the run


def test_in_a_run_a_shorter_limit_after_a_longer_one_is_kept(guard):
    with guard.run_of_calls():
        assert guard.run("c0", 30.0, "limit", lambda: 0) == 0
        start = time.monotonic()
        with pytest.raises(Interrupted):
            guard.run("c1", 0.2, "limit", lambda: time.sleep(5))
        assert time.monotonic() - start < 2
