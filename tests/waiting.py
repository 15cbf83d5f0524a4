"""Waiting in tests for something another process does: one helper, always with a deadline."""
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
