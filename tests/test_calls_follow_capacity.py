"""Calls follow capacity, on real processes: a call waits at the scheduler until a worker is
free, so a node added while calls wait takes them at once (scheduler/dispatch.py)."""
import re
import threading
import time

import pytest

from cloudburst import LocalCluster
from cloudburst.errors import Timeout
from waiting import poll_until


def slow(lib, seconds):
    import time
    time.sleep(seconds)
    return lib.getid()


@pytest.fixture(scope="module")
def one_worker():
    """One executor node with one worker (a test may add nodes: it runs last)."""
    with LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        cluster.client().register(slow, "slow")
        yield cluster


def test_a_waiting_call_times_out_naming_the_queue_and_a_cancelled_one_leaves_it(one_worker):
    cb = one_worker.client()
    running = cb.call("slow", 4.0, timeout=30)      # busy long enough for what follows
    behind = cb.call("slow", 0.0, timeout=30)       # the worker's second slot (worker_slots)
    start = time.monotonic()
    waiting = cb.call("slow", 0.0, timeout=1.0)
    with pytest.raises(Timeout) as e:
        waiting.get()
    assert re.search(r"queue of (the )?scheduler", str(e.value)), str(e.value)
    assert time.monotonic() - start < 3.5, "it waited for the running call to finish"
    cancelled = cb.call("slow", 0.0, timeout=30)
    poll_until(lambda: cb.status().backlog == 1, 5.0, "the call waiting in the queue")
    assert cancelled.cancel()
    poll_until(lambda: cb.status().backlog == 0, 5.0, "the cancelled call leaving the queue")
    assert running.get(timeout=30) and behind.get(timeout=30)


def test_dag_and_causal_calls_wait_their_turn_and_run(one_worker):
    """A DAG call and a causal call that find the worker busy wait in the queue, then run
    with their full deadline's rest and give their results."""
    cb = one_worker.client()

    def inc(lib, x):
        return x + 1

    def double(lib, x):
        return 2 * x

    cb.register(inc, "inc")
    cb.register(double, "double")
    cb.register_dag("inc_double", ["inc", "double"], [("inc", "double")])
    running = cb.call("slow", 3.0, timeout=30)
    behind = cb.call("slow", 0.0, timeout=30)       # the worker's second slot (worker_slots)
    dag = cb.call_dag("inc_double", {"inc": [4]}, timeout=30)
    causal = cb.call_dag("inc_double", {"inc": [1]}, consistency="causal", timeout=30)
    poll_until(lambda: cb.status().backlog >= 1, 5.0, "calls waiting in the queue")
    assert dag.get(timeout=30) == 10
    assert causal.get(timeout=30) == 4
    assert running.get(timeout=30) and behind.get(timeout=30)


def test_a_future_argument_whose_call_still_waits_is_resolved(one_worker):
    """A call taking a Future whose call waits in the queue too is placed after it (first in,
    first out) and gets its result, not DependencyFailed."""
    cb = one_worker.client()

    def echo(lib, x):
        return x

    cb.register(echo, "echo")
    running = cb.call("slow", 2.0, timeout=30)
    behind = cb.call("slow", 0.0, timeout=30)       # the worker's second slot (worker_slots)
    producer = cb.call("slow", 0.0, timeout=30)     # waits in the queue
    consumer = cb.call("echo", producer, timeout=30)
    assert consumer.get(timeout=30) == producer.get(timeout=30)
    assert running.get(timeout=30) and behind.get(timeout=30)


def test_an_added_node_takes_queued_calls_at_once(one_worker):
    """10 calls of a 1 s function on a one-worker cluster, a second node added after 1 s: the
    calls that have not started when the new node's worker joins are shared by both workers
    (the previous placement left all 10 on the first worker: 10 s). With the node up within
    about 3 s, as on an idle machine, that is at least 3 calls on the new node and the burst
    done by about 7 s; on a loaded machine a node takes longer to start, so the bounds are
    computed from when every scheduler saw it (`joined`)."""
    import math
    cluster = one_worker
    cb = cluster.client()
    first = {w["worker_id"] for w in cluster.workers}
    start = time.monotonic()
    futures = [cb.call("slow", 1.0, timeout=30) for _ in range(10)]
    time.sleep(1.0)   # the scenario: the node is added one second after the burst
    added = {}
    adder = threading.Thread(target=lambda: added.update(node=cluster.add_executor_node(),
                                                         joined=time.monotonic() - start))
    adder.start()
    ran_on = [f.get(timeout=30) for f in futures]
    took = time.monotonic() - start
    adder.join(30)
    assert added.get("node"), "the second node did not come up"
    joined = added["joined"]
    assert joined < 7.0, f"the added node took {joined - 1:.1f} s to come up: too slow to show"
    new = [w for w in ran_on if w not in first]
    # calls not yet started on the first worker then; one of them already waits there (the
    # second of its `worker_slots`), the others are shared
    left = 10 - math.ceil(joined)
    assert len(new) >= (left - 1) // 2, (
        f"only {len(new)} of the {left} calls that had not started when the added node "
        f"joined ({joined:.1f} s) ran on it: {ran_on}")
    assert took < joined + math.ceil(left / 2) + 1.5, (
        f"the burst took {took:.1f} s with a second worker from {joined:.1f} s on")
