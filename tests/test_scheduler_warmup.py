"""A scheduler's warm-up (SchedulerConfig.warmup), with real processes: a scheduler started
before its executors have found it holds the calls it gets instead of answering
NoResources, places them once a worker is heard, and only then writes its `--ready-file`
(the readiness probe of a Kubernetes rolling update, which must not replace the next
scheduler while this one has no executor). With no executor at all, the warm-up is a limit:
the held call fails with NoResources once it is over, and the scheduler is ready anyway
(a cluster whose executors come later must still serve). A scheduler that lost its only
executor node to silence holds the calls it gets for a heartbeat timeout, and places them
when the node's reports come back (they had only stalled)."""
import json
import os
import signal
import sys

import pytest

import anna_core
import cloudburst
from cloudburst import NoResources
from executor.config import NodeConfig
from process_tree import descendants
from runtime.process import ManagedProcess, stop_all, wait_all_ready
from scheduler.config import SchedulerConfig
from waiting import poll_until


@pytest.fixture(scope="module")
def kvs(tmp_path_factory):
    cluster = anna_core.LocalCluster(memory_threads=1, auth=False,
                                     log_dir=str(tmp_path_factory.mktemp("kvs-logs")))
    cluster.start()
    yield cluster
    cluster.stop()


def _scheduler(kvs, tmp_path, warmup, heartbeat_timeout=1.5):
    config = SchedulerConfig(kvs_address=",".join(kvs.routing_addresses), warmup=warmup,
                             heartbeat_timeout=heartbeat_timeout, parent_pid=os.getpid(),
                             log_level="info")
    ready = tmp_path / "scheduler.ready"
    p = ManagedProcess("scheduler", [sys.executable, "-m", "scheduler", "--config",
                                     config.to_json(), "--ready-file", str(ready)],
                       str(tmp_path)).spawn()
    wait_all_ready([p], 30)
    return p, p.info["address"], ready


def test_calls_wait_for_the_first_executor_and_readiness_with_them(kvs, tmp_path):
    sched, address, ready = _scheduler(kvs, tmp_path, warmup=30)
    node = None
    client = cloudburst.Client(address, kvs_address=",".join(kvs.routing_addresses),
                               timeout=30)
    try:
        assert not ready.exists(), "ready before any executor worker was heard"
        client.register(lambda lib, x: x * 3, "triple")
        held = client.call("triple", 14)              # no executor anywhere yet
        config = NodeConfig(node_id="warm-node", kvs_address=",".join(kvs.routing_addresses),
                            scheduler_addresses=[address], workers=1, heartbeat_period=0.2,
                            parent_pid=os.getpid(), log_dir=str(tmp_path))
        node = ManagedProcess("warm-node", [sys.executable, "-m", "executor", "--config",
                                            config.to_json()], str(tmp_path)).spawn()
        wait_all_ready([node], 60)
        assert held.get(timeout=30) == 42              # held, not refused: placed when heard
        info = json.loads(poll_until(ready.exists, 10, "the scheduler's ready file")
                          and ready.read_text())
        assert info["address"] == address and info["workers"] >= 1
    finally:
        client.close()
        stop_all([p for p in (node, sched) if p is not None], 10)


def test_with_no_executor_the_warmup_is_a_limit(kvs, tmp_path):
    sched, address, ready = _scheduler(kvs, tmp_path, warmup=1.0)
    client = cloudburst.Client(address, kvs_address=",".join(kvs.routing_addresses),
                               timeout=30)
    try:
        client.register(lambda lib, x: x, "identity")
        with pytest.raises(NoResources, match="no live executor worker"):
            client.call("identity", 1).get(timeout=20)
        info = json.loads(poll_until(ready.exists, 10, "the scheduler's ready file")
                          and ready.read_text())
        assert info == {"address": address, "pid": sched.pid, "workers": 0}
    finally:
        client.close()
        stop_all([sched], 10)


def test_calls_wait_while_the_only_executor_node_is_silent_for_a_moment(kvs, tmp_path):
    """The rolling upgrade's NoResources: every report of the executor pod stalled past the
    scheduler's heartbeat timeout (its connections waited on a name being resolved again),
    so the scheduler dropped its workers; a call then found none. Here the node and its
    workers are stopped (SIGSTOP) until the scheduler drops them, a call is made, and they
    go on (SIGCONT): the call is held and runs. Before, it failed with NoResources."""
    sched, address, _ready = _scheduler(kvs, tmp_path, warmup=30, heartbeat_timeout=3.0)
    config = NodeConfig(node_id="stalling-node", kvs_address=",".join(kvs.routing_addresses),
                        scheduler_addresses=[address], workers=1, heartbeat_period=0.2,
                        parent_pid=os.getpid(), log_dir=str(tmp_path))
    node = ManagedProcess("stalling-node", [sys.executable, "-m", "executor", "--config",
                                            config.to_json()], str(tmp_path)).spawn()
    client = cloudburst.Client(address, kvs_address=",".join(kvs.routing_addresses),
                               timeout=30)
    stopped, group = False, []
    try:
        wait_all_ready([node], 60)
        client.register(lambda lib, x: x * 3, "triple")
        assert client.call("triple", 14).get(timeout=30) == 42
        group = descendants(node.pid)                # the node and its workers
        for pid in group:
            os.kill(pid, signal.SIGSTOP)
        stopped = True
        poll_until(lambda: "dropped from scheduling" in sched.log_tail(200), 20,
                   "the scheduler dropping the silent node's worker")
        held = client.call("triple", 5)               # no live worker now
        for pid in group:
            os.kill(pid, signal.SIGCONT)
        stopped = False
        assert held.get(timeout=30) == 15
    finally:
        if stopped:
            for pid in group:
                os.kill(pid, signal.SIGCONT)
        client.close()
        stop_all([node, sched], 10)

