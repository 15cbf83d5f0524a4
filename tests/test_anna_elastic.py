"""Elastic Anna on real processes: nodes join, leave and fail under write load, routing
restarts and fails over, and no acknowledged write is lost.

"Acknowledged" means `put_all` (or `put`) returned. Every test runs writer threads (one
client each, short timeouts), changes the cluster under them, stops them, and reads every
acknowledged key back. Heartbeats are fast here (0.25 s, timeout 1 s) to keep the file
short; every wait polls a condition with a deadline (tests/waiting.py).
"""
import threading
import time
import uuid
from typing import Dict, List, Tuple

import pytest

import anna_core
from anna_core import _core
from waiting import poll_until

HEARTBEAT = dict(heartbeat_period=0.25, heartbeat_timeout=1.0, gossip_period_ms=50)
TIMEOUT = HEARTBEAT["heartbeat_timeout"]


class Writers:
    """`n` threads writing fresh keys with `put_all` (or `put`) until stopped.

    Records every acknowledged (key, value) and every attempt as (start, end, ok)."""

    def __init__(self, cluster, n: int = 4, *, single: bool = False, pace: float = 0.01,
                 **client_options) -> None:
        self.cluster = cluster
        self.single = single
        self.pace = pace
        self.options = dict(timeout=0.3, retries=4, **client_options)
        self.acked: Dict[str, bytes] = {}
        self.attempts: List[Tuple[float, float, bool]] = []
        self.errors: List[str] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.prefix = uuid.uuid4().hex[:6]
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(n)]

    def __enter__(self) -> "Writers":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(30)

    def _run(self, index: int) -> None:
        client = anna_core.Client(self.cluster.routing_addresses, auth=self.cluster.client_auth,
                                  **self.options)
        try:
            i = 0
            while not self.stop_event.is_set():
                key, value = f"{self.prefix}-{index}-{i}", f"value-{index}-{i}".encode()
                i += 1
                start = time.monotonic()
                try:
                    (client.put if self.single else client.put_all)(key, value)
                    ok = True
                except anna_core.AnnaError as e:
                    ok = False
                    with self.lock:
                        self.errors.append(str(e))
                with self.lock:
                    self.attempts.append((start, time.monotonic(), ok))
                    if ok:
                        self.acked[key] = value
                self.stop_event.wait(self.pace)
        finally:
            client.close()

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def snapshot(self) -> Dict[str, bytes]:
        with self.lock:
            return dict(self.acked)

    def ok_started_after(self, t: float) -> int:
        with self.lock:
            return sum(1 for start, _, ok in self.attempts if ok and start >= t)


def assert_nothing_lost(cluster, acked: Dict[str, bytes]) -> None:
    """Every acknowledged key reads back with its value (a fresh client, every key)."""
    assert acked, "the writers got no write acknowledged"
    kvs = cluster.client(timeout=1.0, retries=3)
    lost = {}
    for key, value in acked.items():
        try:
            got = kvs.get(key)
        except anna_core.KeyNotFound:
            got = None
        if got != value:
            lost[key] = got
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged keys lost, e.g. " \
                     f"{list(lost.items())[:5]}"


def fully_replicated(kvs, keys, replicas: int, done: set) -> bool:
    """Whether every key is held by `replicas` replicas (keys found so are remembered)."""
    for key in keys:
        if key in done:
            continue
        try:
            if len(kvs.get_replicas(key)) < replicas:
                return False
        except anna_core.AnnaError:
            return False
        done.add(key)
    return True


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_kill_9_under_write_load_recovers_within_the_heartbeat_timeout_and_loses_nothing():
    with anna_core.LocalCluster(memory_threads=1, nodes=4, fault_tolerance=1, **HEARTBEAT) as c:
        with Writers(c, 4) as writers:
            poll_until(lambda: writers.count() >= 40, 10.0, "40 acknowledged writes")
            killed_at = time.monotonic()
            c.kill_node("memory-1")
            recovered_by = killed_at + TIMEOUT + 1.0
            poll_until(lambda: writers.ok_started_after(recovered_by) >= 40, 15.0,
                       "40 writes started after heartbeat timeout + 1 s acknowledged")
            failed = [start for start, _, ok in writers.attempts
                      if not ok and start >= killed_at]
            last_failure = max(failed, default=killed_at) - killed_at
            assert last_failure <= TIMEOUT + 1.0, \
                f"writes still failing {last_failure:.2f} s after the kill: {writers.errors[-3:]}"
            # A write in flight at the kill waits out the failure detection, no longer.
            stall = max(end for start, end, ok in writers.attempts
                        if ok and killed_at - 0.5 <= start <= killed_at + TIMEOUT) - killed_at
            assert stall <= TIMEOUT + 1.0, f"a write took until {stall:.2f} s after the kill"
            # Re-replication: every key acknowledged so far is on 2 replicas again.
            kvs = c.client(timeout=0.5, retries=2)
            first = writers.snapshot()
            done: set = set()
            poll_until(lambda: fully_replicated(kvs, first, 2, done), 20.0,
                       f"{len(first)} acknowledged keys back at 2 replicas")
            c.kill_node("memory-2")
            second_kill = time.monotonic()
            poll_until(lambda: writers.ok_started_after(second_kill + TIMEOUT + 1.0) >= 20, 15.0,
                       "writes acknowledged after the second kill")
        assert_nothing_lost(c, writers.acked)
        print(f"kill -9: last failed write started {last_failure:.2f} s after the kill, every "
              f"write acknowledged by {stall:.2f} s; {len(writers.acked)} keys, none lost")


def test_a_graceful_leave_under_write_load_with_one_replica_loses_nothing():
    with anna_core.LocalCluster(memory_threads=2, nodes=3, fault_tolerance=0,
                                **HEARTBEAT) as c:
        with Writers(c, 4, single=True) as writers:
            poll_until(lambda: writers.count() >= 100, 10.0, "100 acknowledged writes")
            started = time.monotonic()
            c.remove_node("memory-1", timeout=30.0)
            took = time.monotonic() - started
            left_at = time.monotonic()
            poll_until(lambda: writers.ok_started_after(left_at) >= 40, 10.0,
                       "writes acknowledged after the leave")
        assert not c.is_running("memory-1")
        assert_nothing_lost(c, writers.acked)
        print(f"graceful leave took {took:.2f} s; {len(writers.acked)} keys, none lost")


def test_a_restarted_disk_node_catches_up_on_writes_made_while_it_was_down(tmp_path):
    with anna_core.LocalCluster(memory_threads=0, disk_threads=1, nodes=2, fault_tolerance=1,
                                data_dir=str(tmp_path), **HEARTBEAT) as c:
        kvs = c.client(timeout=0.5, retries=4)
        before = {f"before-{i}": b"b%d" % i for i in range(20)}
        for k, v in before.items():
            kvs.put_all(k, v)
        c.stop_node("disk-1")
        during = {f"during-{i}": b"d%d" % i for i in range(20)}
        for k, v in during.items():
            kvs.put(k, v)     # one replica acknowledges: disk-0
        addresses = c.start_node("disk-1")

        def disk1_has_everything():
            for key, value in {**before, **during}.items():
                try:
                    replicas = dict(kvs.get_replicas(key))
                except anna_core.AnnaError:
                    return False
                held = [replicas.get(a) for a in addresses if a in replicas]
                if not held or held[0].reveal() != value:
                    return False
            return True

        poll_until(disk1_has_everything, 15.0, "the restarted disk-1 holding every key")


@pytest.mark.slow
def test_join_and_leave_cycles_under_load_converge_and_lose_nothing():
    with anna_core.LocalCluster(memory_threads=1, nodes=2, fault_tolerance=1, **HEARTBEAT) as c:
        with Writers(c, 3) as writers:
            poll_until(lambda: writers.count() >= 30, 10.0, "30 acknowledged writes")
            for cycle in range(3):
                node = c.add_node("memory")
                mark = time.monotonic()
                poll_until(lambda: writers.ok_started_after(mark) >= 15, 10.0,
                           f"writes acknowledged after {node} joined (cycle {cycle})")
                c.remove_node(node, timeout=30.0)
                mark = time.monotonic()
                poll_until(lambda: writers.ok_started_after(mark) >= 15, 10.0,
                           f"writes acknowledged after {node} left (cycle {cycle})")
        assert_nothing_lost(c, writers.acked)
        # Converged: routing and a fresh lookup agree on the two remaining nodes only.
        kvs = c.client(timeout=1.0)
        owners = {a for i in range(64) for a in kvs.addresses(f"spread-{i}", refresh=True)}
        assert owners == set(c.worker_addresses("memory-0") + c.worker_addresses("memory-1"))


def test_a_restarted_routing_rebuilds_the_membership_and_reloads_the_overrides():
    with anna_core.LocalCluster(memory_threads=1, nodes=3, log_level="info", **HEARTBEAT) as c:
        kvs = c.client(timeout=1.0, retries=3, auth=c.cluster_auth)  # placement: cluster key
        assert len(kvs.set_replication("hot", memory=3, disk=0)) == 3
        kvs.put_all("hot", b"h")
        keys = {f"r-{i}": b"%d" % i for i in range(30)}
        for k, v in keys.items():
            kvs.put(k, v)
        everyone = set(c.worker_addresses())
        restarted_at = time.monotonic()
        c.restart_routing(0)
        fresh = c.client(timeout=1.0, retries=3)

        def rebuilt():
            owners = {a for i in range(64) for a in fresh.addresses(f"spread-{i}", refresh=True)}
            return owners == everyone

        poll_until(rebuilt, 5.0, "the restarted routing knowing all 3 nodes")
        rebuilt_in = time.monotonic() - restarted_at
        poll_until(lambda: len(fresh.addresses("hot", refresh=True)) == 3, 10.0,
                   "the override of 'hot' reloaded from the KVS")
        assert {k: fresh.get(k) for k in keys} == keys and fresh.get("hot") == b"h"
        poll_until(lambda: "recovery over: 3 nodes" in c.log_tail("routing", 60), 5.0,
                   "routing logging the end of its recovery with all 3 nodes")
        print(f"routing restart: membership rebuilt {rebuilt_in:.2f} s after the restart began")


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_nodes_and_clients_fail_over_between_two_routings():
    with anna_core.LocalCluster(memory_threads=1, nodes=3, fault_tolerance=1, routers=2,
                                **HEARTBEAT) as c:
        assert len(c.routing_addresses) == 2
        with Writers(c, 2) as writers:
            poll_until(lambda: writers.count() >= 20, 10.0, "20 acknowledged writes")
            c.stop_routing(0)
            # A node joins through the routing that is left; clients keep writing.
            joined = c.add_node("memory")
            mark = time.monotonic()
            poll_until(lambda: writers.ok_started_after(mark) >= 20, 10.0,
                       "writes acknowledged with routing 0 down")
            # A node failure is detected by routing 1 alone.
            c.kill_node("memory-0")
            mark = time.monotonic()
            poll_until(lambda: writers.ok_started_after(mark + TIMEOUT + 1.0) >= 20, 15.0,
                       "writes acknowledged after memory-0 died")
            # Routing 0 comes back and recovers; then routing 1 goes.
            c.start_routing(0)
            routing0 = anna_core.Client(c.routing_addresses[0], timeout=1.0, auth=c.client_auth)
            alive = set(c.worker_addresses())

            def routing0_knows_the_live_nodes():
                owners = {a for i in range(64)
                          for a in routing0.addresses(f"spread-{i}", refresh=True)}
                return owners == alive

            try:
                poll_until(routing0_knows_the_live_nodes, 10.0,
                           "routing 0 knowing exactly the live nodes after its restart")
            finally:
                routing0.close()
            c.stop_routing(1)
            mark = time.monotonic()
            poll_until(lambda: writers.ok_started_after(mark) >= 20, 10.0,
                       "writes acknowledged with routing 1 down")
        assert joined in c.node_ids
        assert_nothing_lost(c, writers.acked)


def test_remove_node_raises_leave_failed_when_the_hand_off_cannot_finish():
    # The only node cannot hand its keys to anyone: it must time out and say so.
    with anna_core.LocalCluster(memory_threads=1, nodes=1, leave_timeout=1.0,
                                **HEARTBEAT) as c:
        kvs = c.client(timeout=1.0)
        for i in range(5):
            kvs.put(f"stuck-{i}", b"x")
        with pytest.raises(anna_core.LeaveFailed) as info:
            c.remove_node("memory-0", timeout=20.0)
        assert info.value.node_id == "memory-0"
        assert info.value.status in (4, 5), str(info.value)


@pytest.mark.slow
def test_an_override_set_through_one_routing_reaches_the_other():
    with anna_core.LocalCluster(memory_threads=1, nodes=3, fault_tolerance=0, routers=2,
                                **HEARTBEAT) as c:
        only_first = anna_core.Client(c.routing_addresses[0], timeout=1.0, auth=c.cluster_auth)
        only_second = anna_core.Client(c.routing_addresses[1], timeout=1.0, auth=c.client_auth)
        try:
            key = f"override-{uuid.uuid4().hex[:8]}"
            assert len(only_first.set_replication(key, memory=3, disk=0)) == 3
            # routing 1 never saw the request: it adopts the override from the KVS on its
            # periodic refresh (RoutingConfig.override_refresh_period, 5 s by default)
            poll_until(lambda: len(only_second.addresses(key, refresh=True)) == 3, 15.0,
                       "routing 1 adopting the override set through routing 0")
            # a membership change broadcast by either routing keeps it
            c.add_node("memory")
            assert len(only_second.addresses(key, refresh=True)) == 3
            assert len(only_first.addresses(key, refresh=True)) == 3
        finally:
            only_first.close()
            only_second.close()
