"""Executor autoscaling around the pure policy: the schedulers' drain state, the merged sample,
and real clusters (a spike adds a node; scale-in drains it with every call completing; a call
placed before a drain keeps its node up until it finishes)."""
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cloudburst import LocalCluster
from hydro_proto import cloudburst_pb2 as pb
from cloudburst.autoscaler import ExecutorAutoscalerService, SchedulerLink, build_sample
from cloudburst.cli import main as cli_main
from cloudburst.executor_spawner import local_pool
from pools import EXECUTORS, REMOVED, LastNode, PoolManager, UnknownNode
from cloudburst.status import ClusterStatus, ExecutorNodeStatus, format_status
from cloudburst.executor_policy import (AddNodes, Drain, ExecutorAutoscaler, ExecutorPolicyConfig,
                                       Remove)
from scheduler.membership import CallRecord, ExecutorTable
from scheduler.stats import CallStats, render_prometheus
from waiting import poll_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the scheduler's drain state (pure) ------------------------------------------------------

def _table():
    t = ExecutorTable(heartbeat_timeout=5.0)
    for wid, node in (("a", "n0"), ("b", "n1")):
        t.heartbeat(wid, node, f"tcp://{wid}", 0.0, now=0.0)
    return t


def test_a_draining_node_is_not_placeable_and_the_newest_epoch_wins():
    t = _table()
    assert [w.worker_id for w in t.placeable()] == ["a", "b"]
    assert t.set_drain("n1", True, epoch=5)
    assert [w.worker_id for w in t.placeable()] == ["a"]
    # the node's own report of an older state (it had not heard the drain yet) changes nothing
    assert not t.node_report("n1", False, 3, running=1, queued=0)
    assert t.draining("n1")
    assert t.node_report("n1", False, 7, running=0, queued=0)      # undrained, newer
    assert [w.worker_id for w in t.placeable()] == ["a", "b"]
    assert not t.set_drain("n1", True, epoch=6)                       # late drain: ignored
    assert not t.draining("n1")


def test_nodes_count_each_call_once_per_node_until_it_finishes():
    t = _table()
    t.heartbeat("c", "n1", "tcp://c", 0.5, now=0.0)
    t.start_call(CallRecord("call1", "dag", {"f": "b", "g": "c"}, "tcp://caller", 100.0))
    t.start_call(CallRecord("call2", "dag", {"f": "a", "g": "b"}, "tcp://caller", 100.0))
    t.set_drain("n1", True, 1)
    views = {n.node_id: n for n in t.nodes()}
    assert (views["n0"].outstanding, views["n1"].outstanding) == (1, 2)
    assert views["n1"].draining and views["n1"].workers == 2
    assert views["n1"].utilization == pytest.approx(0.25)
    t.finish_call("call1")
    t.finish_call("call2")
    assert [n.outstanding for n in t.nodes()] == [0, 0]


# ---- the merged sample and the no-lost-call rule (pure) --------------------------------------

def _status(*nodes, backlog=0):
    return ClusterStatus("s", "kvs", [], [], "", nodes=list(nodes), backlog=backlog)


def _node(node_id, draining=False, outstanding=0, running=0, queued=0, utilization=0.0):
    return ExecutorNodeStatus(node_id, 2, utilization, draining, 1 if draining else 0, outstanding,
                              running, queued, draining)


def test_a_node_counts_as_draining_only_when_every_scheduler_says_so():
    both = build_sample([_status(_node("n0"), _node("n1", True)),
                         _status(_node("n0"), _node("n1", True))])
    assert [n.draining for n in both.nodes] == [False, True]
    one = build_sample([_status(_node("n1", True)), _status(_node("n1", False))])
    assert not one.nodes[0].draining
    missing = build_sample([_status(_node("n1", True)), None])   # a scheduler did not answer
    assert not missing.nodes[0].draining
    unknown = build_sample([_status(_node("n1", True)), _status()])  # not heard of it yet
    assert not unknown.nodes[0].draining


def test_calls_placed_by_any_scheduler_keep_a_drained_node_from_removal():
    sample = build_sample([_status(_node("n1", True, outstanding=0)),
                           _status(_node("n1", True, outstanding=2, running=1), backlog=3)])
    n = sample.nodes[0]
    assert (n.in_flight, n.queued, sample.backlog) == (1, 1, 3)

    # the policy drains the idle node, and removes it only once no scheduler has a call there
    policy = ExecutorAutoscaler(ExecutorPolicyConfig(stable_window=2.0, panic_window=0.5,
                                                     tick=0.5))
    idle = [_node("n0"), _node("n1")]
    actions = policy.decide(build_sample([_status(*idle)]), 0.0)
    drained = [a.node_id for a in actions if isinstance(a, Drain)]
    assert drained == ["n0"]
    busy = [_node("n0", True), _node("n1")]
    on_wire = [_node("n0", True, outstanding=1), _node("n1")]  # placed before the drain
    for now, views in ((1.0, [busy, on_wire]), (1.5, [busy, on_wire])):
        actions = policy.decide(build_sample([_status(*v) for v in views]), now)
        assert not [a for a in actions if isinstance(a, Remove)], actions
    actions = policy.decide(build_sample([_status(*busy), _status(*busy)]), 2.0)
    assert [a.node_id for a in actions if isinstance(a, Remove)] == ["n0"]


class _Manager(PoolManager):
    """Nodes appear when added; removals of node 'stuck' are refused."""

    def __init__(self, nodes):
        self.up, self.removed, self.added = list(nodes), [], 0

    def pools(self):
        return (EXECUTORS,)

    def add_nodes(self, pool, count):
        self.check_pool(pool)
        ids = [f"new{self.added + i}" for i in range(count)]
        self.added += count
        self.up += ids
        return ids

    def remove_node(self, pool, node_id):
        self.check_pool(pool)
        if node_id == "stuck":
            raise UnknownNode("stuck is not running", node_id=node_id, pool=pool)
        self.up.remove(node_id)
        self.removed.append(node_id)

    def nodes(self, pool):
        return list(self.up)

    def pending(self, pool):
        return []

    def leaving(self, pool):
        return []

    def poll(self, now=None):
        return []


class _Link:
    def __init__(self):
        self.views, self.drains = [], []

    def statuses(self):
        return [_status(*self.views)]

    def drain(self, node_id, draining):
        self.drains.append((node_id, draining))
        return 1

    def close(self):
        pass


def test_the_service_carries_out_and_logs_every_action_with_its_reason(caplog):
    manager, link = _Manager(["n0"]), _Link()
    service = ExecutorAutoscalerService(
        ExecutorAutoscaler(ExecutorPolicyConfig(stable_window=2.0, panic_window=0.5, tick=0.5,
                                                max_nodes=3)), manager, link)
    caplog.set_level(logging.INFO, logger="cloudburst.autoscale")
    link.views = [_node("n0", outstanding=8, running=2)]          # a spike on one node
    actions = service.step(0.0)
    added = [a for a in actions if isinstance(a, AddNodes)]
    assert added and manager.nodes(EXECUTORS) == ["n0", "new0", "new1"]
    assert any("panic" in r.message and "new0" in r.message for r in caplog.records)
    # idle again: after the panic, the idle nodes are drained, then removed once drained
    link.views = [_node(n) for n in manager.nodes(EXECUTORS)]
    now = 0.5
    while not manager.removed and now < 30:
        link.views = [_node(n, draining=(n, True) in link.drains and (n, False) not in
                            link.drains) for n in manager.nodes(EXECUTORS)]
        service.step(now)
        now += 0.5
    assert manager.removed, list(service.history)
    assert link.drains[0][1] is True and link.drains[0][0] in manager.removed + manager.up
    logged = [r.message for r in caplog.records]
    assert any(m.startswith("drained executor node") for m in logged)
    assert any(m.startswith("removed executor node") for m in logged)
    # a removal the manager refuses is logged and recorded, not raised
    failed = service._apply(Remove("stuck", "test"), now)
    assert not failed.ok and "UnknownNode" in failed.error
    assert any("could not carry out" in r.message for r in caplog.records
               if r.levelno == logging.WARNING)


def test_status_and_metrics_show_draining_nodes():
    status = _status(_node("n0"), _node("n1", True, outstanding=1), backlog=2)
    text = format_status(status)
    assert "2 executor node(s), 1 draining, 2 call(s) waiting for a worker" in text
    n1 = [line for line in text.splitlines() if line.split()[:1] == ["n1"]]
    assert len(n1) == 1 and n1[0].endswith("draining")
    t = _table()
    t.set_drain("n1", True, 1)
    metrics = render_prometheus(CallStats(), [], "s", nodes=t.nodes())
    assert 'cloudburst_executor_nodes{scheduler="s"} 2' in metrics
    assert 'cloudburst_executor_nodes_draining{scheduler="s"} 1' in metrics
    assert 'cloudburst_executor_node_draining{scheduler="s",node="n1"} 1' in metrics


def test_cli_rejects_autoscaling_options_without_autoscale(capsys):
    assert cli_main(["local", "--max-executors", "3"]) == 2
    assert "need --autoscale" in capsys.readouterr().err
    assert cli_main(["local", "--autoscale", "--executor-nodes", "4", "--max-executors",
                     "2"]) == 2
    assert "within --min-executors and --max-executors" in capsys.readouterr().err


def test_local_cluster_refuses_to_scale_to_zero():
    with pytest.raises(ValueError, match="min_nodes must be at least 1"):
        LocalCluster(autoscale=ExecutorPolicyConfig(min_nodes=0))
    with pytest.raises(TypeError):
        LocalCluster(autoscale="yes")


def test_benchmark_documents_every_option():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "autoscaling",
                                                       "executors.py"), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for option in ("--provisioning-delay", "--spike-rate", "--base-rate", "--out"):
        assert option in out.stdout


# ---- real processes --------------------------------------------------------------------------

def _sleep(lib, seconds, value):
    import time
    time.sleep(seconds)
    return value


def _views(link):
    return [{n.node_id: n for n in s.nodes} for s in link.statuses()]


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_call_placed_before_the_drain_runs_and_keeps_its_node_up():
    with LocalCluster(executor_nodes=2, executors_per_node=1, schedulers=2,
                      colocate_chains=False) as cluster:
        clients = [cluster.client(0), cluster.client(1)]
        clients[0].register(_sleep, "sleep")
        link = SchedulerLink(cluster.scheduler_addresses, cluster.cluster_auth)
        manager = local_pool(cluster)
        try:
            first = clients[0].call("sleep", 1.5, "first")
            placed = poll_until(lambda: [n for n, v in _views(link)[0].items()
                                         if v.outstanding], 10, "the first call placed")
            busy, = placed
            idle, = set(cluster.executor_node_ids()) - {busy}
            # a client key may not drain a node: the scheduler drops the message
            clients[0]._send("drain", pb.DrainRequest(node_id=busy, draining=True,
                                                      epoch=time.time_ns()))
            poll_until(lambda: any(d.kind == "drain" for d in clients[0].status().dropped),
                       10, "the client's drain dropped")
            assert not any(v[busy].draining for v in _views(link))
            # drain the idle node: every scheduler stops placing there although it is idle
            link.drain(idle, True)
            poll_until(lambda: all(v[idle].draining for v in _views(link)), 10,
                       f"{idle} draining at both schedulers")
            second = clients[1].call("sleep", 1.0, "second")
            views = poll_until(lambda: (lambda v: v if v[busy].outstanding == 1 else None)(
                _views(link)[1]), 10, "the second call placed through scheduler 1")
            assert views[idle].outstanding == 0
            # undrain it and drain the busy node while calls run there
            link.drain(idle, False)
            link.drain(busy, True)
            poll_until(lambda: all(v[busy].draining and not v[idle].draining
                                   for v in _views(link)), 10,
                       f"{busy} draining and {idle} taking calls at both schedulers")
            sample = build_sample(link.statuses())
            node = {n.node_id: n for n in sample.nodes}[busy]
            assert node.draining and node.in_flight + node.queued >= 1, sample
            third = clients[0].call("sleep", 0.2, "third")     # only the idle node takes it
            assert third.get(timeout=20) == "third"
            assert first.get(timeout=20) == "first" and second.get(timeout=20) == "second"
            # nothing is left there: the sample now allows its removal
            node = poll_until(lambda: (lambda n: n if n.in_flight + n.queued == 0 else None)(
                {n.node_id: n for n in build_sample(link.statuses()).nodes}[busy]), 10,
                f"{busy} empty")
            assert node.draining
            with pytest.raises(UnknownNode):
                manager.remove_node(EXECUTORS, "node9")
            manager.remove_node(EXECUTORS, busy)
            events = poll_until(lambda: manager.poll(), 20, f"{busy} removed")
            assert [(e.kind, e.node_id) for e in events] == [(REMOVED, busy)]
            assert cluster.executor_node_ids() == [idle]
            with pytest.raises(LastNode):
                manager.remove_node(EXECUTORS, idle)
            assert clients[1].call("sleep", 0.0, "after").get(timeout=20) == "after"
        finally:
            link.close()


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_cloudburst_local_autoscale_starts_and_stops():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", "cloudburst.cli", "local", "--autoscale",
                             "--max-executors", "2", "--executors-per-node", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while not any("Ctrl-C stops" in line for line in lines):
            assert time.monotonic() < deadline, lines
            line = proc.stdout.readline()
            assert line, f"cloudburst local exited: {lines}"
            lines.append(line)
        assert any("executor autoscaling on: 1..2 node(s)" in line for line in lines), lines
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_spike_adds_a_node_and_scale_in_drains_it_with_every_call_completing():
    config = ExecutorPolicyConfig(stable_window=3.0, panic_window=0.75, tick=0.25,
                                  max_nodes=2, drain_retry=2.0)
    with LocalCluster(executor_nodes=1, executors_per_node=2, schedulers=2,
                      autoscale=config) as cluster:
        clients = [cluster.client(0), cluster.client(1)]
        clients[0].register(_sleep, "sleep")
        futures = []
        stop = threading.Event()

        def trickle():      # calls keep coming while the cluster scales in (light load)
            i = 0
            while not stop.wait(0.1):       # pacing the load, not synchronisation
                f = clients[i % 2].call("sleep", 0.02, f"t{i}")
                futures.append((f, f"t{i}"))
                f.get(timeout=30)
                i += 1

        spike = [(clients[i % 2].call("sleep", 0.3, f"s{i}"), f"s{i}") for i in range(24)]
        poll_until(lambda: len(cluster.executor_node_ids()) == 2, 20, "a second executor node")
        added = [a for a in cluster.autoscaler.history if isinstance(a.action, AddNodes)]
        assert added and "panic" in added[0].action.reason
        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            poll_until(lambda: any(isinstance(a.action, Remove)
                                   for a in cluster.autoscaler.history), 40, "a node removed")
            poll_until(lambda: len(cluster.executor_node_ids()) == 1, 20, "one node left")
        finally:
            stop.set()
            thread.join(timeout=30)
        assert not thread.is_alive()
        for future, value in spike + futures:
            assert future.get(timeout=30) == value
        assert len(futures) > 5           # calls arrived throughout the scale-in
        kinds = [type(a.action).__name__ for a in cluster.autoscaler.history]
        assert kinds.index("Drain") < kinds.index("Remove")
        assert all(a.ok for a in cluster.autoscaler.history)
