"""Rolling upgrades and restarts of Anna's tiers on real processes (anna_core.LocalCluster):
what a Kubernetes Deployment (maxSurge 1, maxUnavailable 0) and a StatefulSet do to the
nodes, with no acknowledged key lost.

- A memory tier replaced node by node: a new node joins, then an old one gets SIGTERM and
  leaves gracefully, until none of the original nodes is left; keys with one replica in the
  memory tier only (as the function registry's) are all still readable.
- A disk node SIGKILLed and started again on its data directory, with the same node id and
  new addresses (a StatefulSet pod): its keys are readable again within a deadline, every
  time, whether routing removed it meanwhile or not.
- The disk tier's only node stopped gracefully (a StatefulSet's rolling update or a drain)
  and started again: its leave is refused, it drops nothing, and its keys read back.
"""
import signal
import threading
import time

import pytest

import anna_core
from test_anna_elastic import HEARTBEAT, Writers
from waiting import poll_until

MEMORY_ONLY = (1, 1, 0, 1)      # one replica, in the memory tier only


def test_a_rolling_upgrade_of_the_memory_tier_under_load_loses_no_memory_only_key():
    """The memory tier's node is replaced as a Deployment's rolling update does it: a new node
    joins, then the old one leaves on SIGTERM, under write load. As on Kubernetes while the
    new pod's name for the second routing does not resolve yet (or resolves to a replaced
    pod), the new node reaches only the first routing; and the second routing handles the
    leave first (the first is paused meanwhile). In the second routing's view the leave
    empties the memory tier. No acknowledged key may be lost, and the leave must end by
    handing the keys off (exit 0)."""
    with anna_core.LocalCluster(memory_threads=1, disk_threads=1, nodes=1, routers=2,
                                replication=MEMORY_ONLY, log_level="info", **HEARTBEAT) as c:
        original = [n for n in c.node_ids if c.tier_of(n) == "memory"]
        with Writers(c, 2, single=True, pace=0.005) as writers:
            poll_until(lambda: writers.count() >= 50, 10.0, "50 acknowledged writes")
            for old in original:
                new = c.add_node("memory", routing=c.routing_addresses[:1])
                mark = time.monotonic()
                poll_until(lambda: writers.ok_started_after(mark) >= 10, 10.0,
                           f"writes acknowledged after {new} joined")
                _leave_second_routing_first(c, old)
                mark = time.monotonic()
                poll_until(lambda: writers.ok_started_after(mark) >= 10, 10.0,
                           f"writes acknowledged after {old} left")
        assert not any(c.is_running(n) for n in original)
        # Read through the first routing: the second never hears from the new nodes here
        # (they were not given its address), so its answers stay stale by construction.
        kvs = anna_core.Client(c.routing_addresses[:1], auth=c.client_auth, timeout=1.0,
                               retries=3)
        try:
            assert_all_readable(kvs, writers.acked)
        finally:
            kvs.close()


def _leave_second_routing_first(c, node_id: str) -> None:
    """`remove_node(node_id)` while the first routing is paused until the second has handled
    the leave (its log, at level info, names it); raises what remove_node raises."""
    outcome = {}

    def leave():
        try:
            c.remove_node(node_id, timeout=30.0)
        except BaseException as e:      # handed to the test's thread below
            outcome["error"] = e

    c.signal_routing(0, signal.SIGSTOP)
    try:
        leaving = threading.Thread(target=leave, daemon=True)
        leaving.start()
        poll_until(lambda: f"leave of {node_id}" in c.log_tail("routing-1", 50)
                   or f"node {node_id} leaves" in c.log_tail("routing-1", 50), 10.0,
                   f"the second routing handling {node_id}'s leave")
    finally:
        c.signal_routing(0, signal.SIGCONT)
    leaving.join(40.0)
    assert not leaving.is_alive(), f"{node_id}'s leave did not end"
    if "error" in outcome:
        raise outcome["error"]


DISK_ONLY = (0, 1, 1, 1)


def assert_all_readable(kvs, acked) -> None:
    """Every acknowledged key reads back with its value through `kvs`."""
    assert acked, "no write was acknowledged"
    read = {k: _read(kvs, k) for k in acked}
    lost = {k: got for k, got in read.items() if got != acked[k]}
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged keys lost, e.g. " \
                     f"{list(lost.items())[:5]}"


def _read(kvs, key):
    try:
        return kvs.get(key)
    except anna_core.AnnaError:
        return None


def test_a_disk_node_killed_and_restarted_on_its_data_serves_its_keys_again(tmp_path):
    with _disk_cluster(tmp_path) as c:
        kvs, keys = _disk_only_keys(c)
        for round_ in range(2):
            before = c.worker_addresses("disk-0")
            c.kill_node("disk-0")
            if round_ == 1:     # routing removes it first (round 0: it is back before that)
                poll_until(lambda: not _routed_to(kvs, "probe"), 5.0, "disk-0 removed")
            after = c.start_node("disk-0")
            assert set(after).isdisjoint(before), "the restart must move the node's addresses"
            poll_until(lambda: all(_read(kvs, k) == v for k, v in keys.items()), 10.0,
                       f"every disk-only key readable after restart {round_}")


def test_a_disk_node_restarted_gracefully_as_a_statefulset_pod_keeps_its_only_copy(tmp_path):
    with _disk_cluster(tmp_path) as c:
        kvs, keys = _disk_only_keys(c)
        # The tier's only node: every routing refuses its leave (its keys have nowhere to
        # go), so it stops without handing off or dropping anything (exit 5).
        with pytest.raises(anna_core.LeaveFailed) as refused:
            c.remove_node("disk-0", timeout=30.0)
        assert refused.value.status == 5
        c.start_node("disk-0")
        poll_until(lambda: all(_read(kvs, k) == v for k, v in keys.items()), 10.0,
                   "every disk-only key readable after the restart")


def _disk_cluster(tmp_path) -> anna_core.LocalCluster:
    """One memory and one disk node, two routings; keys live on the disk tier only."""
    return anna_core.LocalCluster(memory_threads=1, disk_threads=1, nodes=1, routers=2,
                                  replication=DISK_ONLY, data_dir=str(tmp_path), **HEARTBEAT)


def _disk_only_keys(c):
    """A client and the 20 keys it put (acknowledged by the disk node)."""
    kvs = c.client(timeout=0.5, retries=3)
    keys = {f"disk-{i}": b"kept %d" % i for i in range(20)}
    for k, v in keys.items():
        kvs.put(k, v)
    return kvs, keys


def _routed_to(kvs, key):
    """The addresses routing gives for `key` now (none while its tier has no node)."""
    try:
        return kvs.addresses(key, refresh=True)
    except anna_core.AnnaError:
        return []
