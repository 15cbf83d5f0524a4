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
    """One executor node with one worker, and a standby node (a test may add nodes: it runs
    last)."""
    with LocalCluster(executor_nodes=1, executors_per_node=1, standby_node=True) as cluster:
        cluster.client().register(slow, "slow")
        yield cluster


def test_a_waiting_call_times_out_naming_the_queue_and_a_cancelled_one_leaves_it(one_worker):
    cb = one_worker.client()
    running = cb.call("slow", 6.0, timeout=30)      # busy long enough for what follows
    behind = cb.call("slow", 0.0, timeout=30)       # the worker's second slot (worker_slots)
    waiting = cb.call("slow", 0.0, timeout=1.0)
    with pytest.raises(Timeout) as e:
        waiting.get()
    assert re.search(r"queue of (the )?scheduler", str(e.value)), str(e.value)
    # it timed out in the queue, not after the running call let it through
    assert not running.done(), "it waited for the running call to finish"
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
    """The issue's scenario as written: 10 calls of a 1 s function on a one-worker cluster, a
    second node added 1 s later: at least 3 of them run on the new node, and all finish
    well before the 10 s one worker needs, both counted from the first call. The added node
    is the cluster's standby (started ahead, its workers forked: cloudburst/standby.py),
    so it serves a fraction of a second after `add`; with the previous placement
    (`queue_calls=False`) all 10 ran on the first worker, in 10 s."""
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
    new = [w for w in ran_on if w not in first]
    assert len(new) >= 3, (f"only {len(new)} of 10 calls ran on the node added after 1 s "
                           f"(it joined {added['joined']:.1f} s after the first call): {ran_on}")
    assert took < 8.0, (f"the burst took {took:.1f} s (one worker alone: 10 s; the node "
                        f"joined {added['joined']:.1f} s after the first call)")
