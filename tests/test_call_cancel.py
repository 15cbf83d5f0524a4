"""A caller that leaves takes its calls with it: a client interrupted while waiting, killed
with SIGKILL, or exiting, and a Future collected unawaited, free the worker within seconds;
a call with an output_key runs on. One worker, so a call left running holds it. Real
processes (the killed and exiting clients are subprocesses)."""
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import _thread

import pytest

import cloudburst
from waiting import poll_until

LEASE_TTL = 2.0


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        c = cluster.client(lease_ttl=LEASE_TTL)
        c.register(lambda lib, x: x, "echo")

        def flagged_sleep(lib, flag, seconds):
            import time
            lib.put(flag, True)               # tells the test the function is running
            time.sleep(seconds)
            return "slept"

        c.register(flagged_sleep, "flagged-sleep")
        c.register_dag("flagged-sleep-dag", ["flagged-sleep"])
        yield cluster


@pytest.fixture(scope="module")
def client(cluster):
    return cluster.client(lease_ttl=LEASE_TTL)


def flag():
    return f"started-{uuid.uuid4().hex[:8]}"


def wait_started(client, key):
    def started():
        try:
            return client.get(key)
        except cloudburst.ObjectNotFound:
            return None
    poll_until(started, 15, "the function starting")


def wait_freed(client, within):
    """The one worker is free again: the scheduler has no call outstanding on it, the node
    reports nothing running, and a quick call comes back at once."""
    def free():
        (node,) = client.status().nodes
        return node.outstanding == 0 and node.running == 0
    start = time.monotonic()
    poll_until(free, within, "the worker being freed")
    assert client.call("echo", 1).get(timeout=5) == 1
    return time.monotonic() - start


def test_an_interrupted_get_cancels_its_call(client):
    key = flag()
    future = client.call("flagged-sleep", key, 60)
    wait_started(client, key)
    timer = threading.Timer(0.3, _thread.interrupt_main)     # Ctrl-C while get() waits
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        future.get(timeout=30)
    timer.join()
    assert future.cancelled()
    wait_freed(client, 5)


def test_a_collected_future_cancels_its_call(client):
    key = flag()
    future = client.call("flagged-sleep", key, 60)
    wait_started(client, key)
    del future
    gc.collect()
    wait_freed(client, 10)


def test_an_output_key_call_runs_on_when_its_future_is_collected(client):
    key, out = flag(), f"out-{uuid.uuid4().hex[:8]}"
    future = client.call_dag("flagged-sleep-dag", {"flagged-sleep": [key, 1.0]},
                             output_key=out)
    assert future.fire_and_forget
    wait_started(client, key)
    del future
    gc.collect()

    def stored():
        try:
            return client.get(out)
        except cloudburst.ObjectNotFound:
            return None
    assert poll_until(stored, 15, "the fire-and-forget result being stored") == "slept"


CLIENT = textwrap.dedent("""
    import sys, time, cloudburst
    address, key_dir, name, key, mode = sys.argv[1:6]
    c = cloudburst.Client(address, auth=cloudburst.AuthConfig(key_dir, name),
                          lease_ttl=float(sys.argv[6]))
    future = c.call("flagged-sleep", key, 60)
    print("called", flush=True)
    if mode == "wait":
        future.get(timeout=120)          # killed while waiting here
    else:
        while True:                      # exit while the call runs
            try:
                c.get(key)
                break
            except cloudburst.ObjectNotFound:
                time.sleep(0.05)
        sys.exit(0)
""")


def run_client(cluster, key, mode, lease_ttl):
    env = dict(os.environ)
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, cluster.address, cluster.key_dir,
         cluster.client_auth.identity, key, mode, str(lease_ttl)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def test_a_client_killed_while_waiting_has_its_call_cancelled_by_its_lease(cluster, client):
    key = flag()
    proc = run_client(cluster, key, "wait", LEASE_TTL)
    try:
        wait_started(client, key)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        took = wait_freed(client, LEASE_TTL + 8)
        assert took < LEASE_TTL + 8
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_client_that_exits_cancels_its_calls_at_once(cluster, client):
    key = flag()
    # a long lease: only the exiting client's goodbye can free the worker this soon
    proc = run_client(cluster, key, "exit", 120.0)
    try:
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
        took = wait_freed(client, 10)
        assert took < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
