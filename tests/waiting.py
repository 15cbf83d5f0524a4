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
