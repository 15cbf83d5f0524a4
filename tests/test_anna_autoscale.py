"""Autoscaling on real processes: the monitor reads the reports, decides and acts.

Each test runs a LocalCluster with a monitor on a short period (0.5 s) and a short grace
period, drives a workload with real clients, and waits (with a deadline) for what the policy
must do, reading the decisions from the monitor's history.
"""
import json
import threading
import time

import pytest

from anna_core import LocalCluster
from anna_core.autoscale import PolicyConfig
from anna_core.autoscale.reports import STATUS_KEY
from tests.waiting import poll_until

FAST = dict(monitoring_period=0.5, grace_period=2.0, replication_cooldown=1.0,
            promote_window=2.0, pending_node_timeout=20.0)


def decisions(cluster, word):
    """Every decision of the monitor so far whose text contains `word`."""
    return [a for s in list(cluster.monitor.history) for a in s["actions"] if word in a]


def test_monitor_publishes_a_status_that_anna_status_reads():
    with LocalCluster(nodes=1, monitor=True,
                      autoscale=False) as cluster:
        assert cluster.manager is None, "monitor=True only observes"
        kvs = cluster.client()
        for i in range(50):
            kvs.put(f"k{i}", b"v" * 10)

        def seen_requests():
            for i in range(50):
                kvs.get(f"k{i}")
            latest = cluster.monitor.latest
            return latest and latest["latency"] and latest["tiers"]["memory"]["requests"] > 0
        poll_until(seen_requests, 15, "a monitor status with requests and client latency")
        status = json.loads(kvs.get(STATUS_KEY))
        assert status["tiers"]["memory"]["node_ids"] == ["memory-0"]
        assert status["autoscaling"] is False and status["actions"] == []
        assert status["latency"]["clients"] >= 1


def test_a_hot_key_is_replicated_and_then_de_replicated():
    # SLO far below what any request takes: latency is "over the SLO" throughout, and with
    # one of the two nodes idle that means skew, which Algorithm 2 answers by replication.
    policy = PolicyConfig(latency_slo=0.00001, elasticity=False, min_memory_nodes=2,
                          hot_key_min_accesses=20, **FAST)
    with LocalCluster(nodes=2, fault_tolerance=0, autoscale=policy) as cluster:
        kvs = cluster.client()
        keys = [f"cold-{i}" for i in range(40)]
        for k in keys + ["hot"]:
            kvs.put(k, b"x" * 64)

        def replicated():
            for k in keys[:10]:
                kvs.get("hot")
                kvs.get("hot")
                kvs.get(k)
            # the decision, with its reason, is in the monitor's history once the period ends
            return decisions(cluster, "'hot'")
        poll_until(replicated, 30, "the hot key's replication")
        r = cluster.monitor.overrides["hot"]
        assert r.memory_global * r.memory_local > 1
        # the client cached one address for "hot"; a response says the key has more
        # replicas now, and the client asks routing again (no explicit refresh)
        def spread():
            kvs.get("hot")
            return len(kvs.addresses("hot")) >= 2
        poll_until(spread, 10, "the client learning the hot key's new replicas")

        turn = [0]

        def cooled():
            for _ in range(20):
                kvs.get(keys[turn[0] % len(keys)])
                turn[0] += 1
            r = cluster.monitor.overrides.get("hot")
            return r is not None and r.memory_global == 1 and r.memory_local == 1
        poll_until(cooled, 30, "the cooled key's de-replication")
        assert kvs.get("hot") == b"x" * 64


def test_garbage_in_the_report_keys_is_named_and_the_monitor_keeps_going():
    from anna_core import SetLattice
    from anna_core.autoscale.reports import bucket_of, client_reports_key
    with LocalCluster(nodes=1, monitor=True) as cluster:
        kvs = cluster.client()
        period = cluster.policy.monitoring_period

        def garbage_named():
            kvs.put(client_reports_key(bucket_of(time.time(), period)),
                    SetLattice([b"\x00 not a report"]))
            latest = cluster.monitor.latest
            return latest and any("not JSON" in p for p in latest["problems"])
        poll_until(garbage_named, 15, "the monitor naming the bad report", interval=0.2)
        ticks = cluster.monitor.ticks
        poll_until(lambda: cluster.monitor.ticks >= ticks + 2, 10, "two more monitor periods")


def _keys_readable(kvs, values):
    return [k for k, v in values.items() if kvs.get(k) != v]


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_load_spike_adds_a_node_and_a_quiet_period_removes_it_losing_no_data():
    # Capacity emulation: every worker serves at most 2000 requests/s, so eight clients
    # queue at one node (about 4 ms) and a second node halves that.
    policy = PolicyConfig(latency_slo=0.003, max_nodes=2, **FAST)
    with LocalCluster(nodes=1, fault_tolerance=0, service_rate=2000, autoscale=policy,
                      stop_timeout=20) as cluster:
        writer = cluster.client()
        values = {f"key-{i}": f"value-{i}".encode() for i in range(200)}
        for k, v in values.items():
            writer.put(k, v)
        spike = threading.Event()
        stop = threading.Event()
        errors = []

        def load(index):
            kvs = cluster.client()
            keys = list(values)
            i = index
            deadline = time.monotonic() + 90
            try:
                while not stop.is_set() and time.monotonic() < deadline:
                    if not spike.is_set() and index > 0:
                        stop.wait(0.05)
                        continue
                    kvs.get(keys[i % len(keys)])
                    i += 7
                    if not spike.is_set():
                        stop.wait(0.02)   # the quiet load: a few requests a second
            except Exception as e:   # noqa: BLE001 - reported by the test
                errors.append(e)

        threads = [threading.Thread(target=load, args=(n,), daemon=True) for n in range(8)]
        spike.set()
        for t in threads:
            t.start()
        try:
            poll_until(lambda: len(cluster.manager.nodes("memory")) == 2, 40,
                       "a second memory node joining under the spike", interval=0.2)
            added = decisions(cluster, "added 1 memory node")
            assert added and "SLO" in added[0] and "occupancy" in added[0], added
            spike.clear()
            poll_until(lambda: len(cluster.manager.nodes("memory")) == 1
                       and not cluster.manager.leaving("memory"), 60,
                       "the quiet period removing a memory node", interval=0.2)
            assert decisions(cluster, "removed memory node")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert errors == []
        assert _keys_readable(writer, values) == [], "every key survives the removal"


def test_cold_keys_are_demoted_when_memory_is_full_and_promoted_when_hot():
    policy = PolicyConfig(elasticity=False, min_disk_nodes=1, **FAST)
    with LocalCluster(nodes=1, memory_threads=1, disk_threads=1, fault_tolerance=0,
                      memory_capacity_bytes=64 * 1024, autoscale=policy) as cluster:
        kvs = cluster.client()
        values = {f"key-{i}": bytes([i % 251]) * 1024 for i in range(150)}
        for k, v in values.items():
            kvs.put(k, v)

        def demoted():
            kvs.get("key-0")   # some traffic, so the monitor gets reports
            # the decisions, with their reasons, are in the history once the period ends
            return decisions(cluster, "demoted")
        poll_until(demoted, 30, "cold keys demoted to disk", interval=0.1)
        cold = [k for k, r in cluster.monitor.overrides.items() if r.memory_global == 0]
        assert cold, "a demotion sets the key's memory replicas to 0"
        target = cold[0]

        def promoted():
            for _ in range(10):
                kvs.get(target)
            r = cluster.monitor.overrides.get(target)
            return r is not None and r.memory_global >= 1
        poll_until(promoted, 30, f"the hot demoted key {target!r} promoted to memory",
                   interval=0.05)
        assert _keys_readable(kvs, values) == [], "demotion and promotion lose nothing"
