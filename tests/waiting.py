"""Waiting in tests for something another process does: one helper, always with a deadline."""
import threading
import time


def poll_until(condition, timeout=10.0, what="the condition", interval=0.02):
    """Call `condition()` until it returns something truthy and return that; fail the test
    naming `what` once `timeout` seconds have passed. For state owned by another process,
    which offers no event to wait on."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)


def block_until_written(lib, key, work=0.0):
    """A registered function's body for a call that runs until the test releases it: it
    works `work` seconds (a call that has run a while), writes the id of the worker it runs
    on under `key`-started, then runs until the KVS key `key` is written (at most 60 s)."""
    import time as t
    t.sleep(work)
    lib.put(key + "-started", lib.getid())
    deadline = t.monotonic() + 60
    while lib.get(key, default=None) is None:
        if t.monotonic() > deadline:
            raise TimeoutError(f"{key} was never written")
        t.sleep(0.02)
    return "released"


def run_in_threads(target, count, timeout=60.0, what="a thread"):
    """Run `target(t)` in `count` threads (t = 0 .. count-1) at once; fail the test when one
    has not finished within `timeout` seconds, or with the first error one raised."""
    errors = []

    def run(t):
        try:
            target(t)
        except BaseException as e:      # handed to the test's thread below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(count)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
        assert not th.is_alive(), f"{what} did not finish within {timeout:g} s"
    if errors:
        raise errors[0]
