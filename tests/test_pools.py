"""The node-pool layer (pools/): the pure pending/leaving record, the removal rule, and
`LocalPool` over a scripted spawner (a unit-test stand-in; the real spawners run in
tests/test_cluster_manager.py and tests/test_executor_autoscale.py)."""
import threading

import pytest
from hypothesis import given, settings, strategies as st

from pools import (EXECUTORS, FAILED, MEMORY, READY, REMOVED, LastNode, LeaveFailed,
                   NodeLeaving, PoolError, UnknownNode, check_count)
from pools.book import PoolBook
from pools.local import LocalPool
from pools.removal import CHOSEN, HIGHEST_ORDINAL, ordinal, removal
from runtime.process import StartupError


# ---- the pure record --------------------------------------------------------------------------

def test_a_request_is_pending_until_spawned_and_up():
    book = PoolBook(provisioning_delay=2.0, startup_timeout=5.0)
    book.request(MEMORY, ["m-2"], now=10.0)
    assert book.pending(MEMORY) == ["m-2"] and book.pending("disk") == []
    assert book.due(11.9) == [] and [p.node_id for p in book.due(12.0)] == ["m-2"]
    assert book.started("m-2", True, 12.0) is None          # not spawned yet: nothing to say
    book.spawned("m-2", 12.0)
    assert book.starting() == ["m-2"] and book.due(13.0) == []
    assert book.started("m-2", None, 16.9) is None          # still within its startup time
    outcome = book.started("m-2", True, 13.5)
    assert (outcome.event.kind, outcome.event.node_id, outcome.event.pool) == (READY, "m-2", MEMORY)
    assert not outcome.kill and book.pending(MEMORY) == []


def test_a_start_that_exits_or_times_out_fails_and_only_a_silent_one_is_killed():
    book = PoolBook(0.0, startup_timeout=5.0)
    book.request(EXECUTORS, ["a", "b"], 0.0)
    for p in book.due(0.0):
        book.spawned(p.node_id, 0.0)
    exited = book.started("a", False, 1.0)
    assert exited.event.kind == FAILED and not exited.kill
    assert isinstance(exited.event.error, StartupError) and "exited" in exited.event.detail
    assert book.started("b", None, 5.0) is None
    silent = book.started("b", None, 5.1)
    assert silent.event.kind == FAILED and silent.kill and "within 5 s" in silent.event.detail
    assert book.pending(EXECUTORS) == []


def test_leaves_are_refused_by_name_and_forgotten_once_finished():
    book = PoolBook(0.0, 5.0)
    book.request(MEMORY, ["m-3"], 0.0)
    running = ["m-0", "m-1"]
    with pytest.raises(UnknownNode, match="m-3.*still starting"):
        book.check_leave(MEMORY, "m-3", running)
    with pytest.raises(UnknownNode, match="m-9.*is a disk node"):
        book.check_leave(MEMORY, "m-9", running, "is a disk node")
    book.check_leave(MEMORY, "m-1", running)
    book.leave(MEMORY, "m-1")
    assert book.leaving(MEMORY) == ["m-1"] and book.nodes(MEMORY, running) == ["m-0"]
    with pytest.raises(NodeLeaving, match="m-1") as info:
        book.check_leave(MEMORY, "m-1", ["m-0"])
    assert (info.value.node_id, info.value.pool) == ("m-1", MEMORY)
    with pytest.raises(LastNode, match="m-0"):
        book.check_leave(MEMORY, "m-0", ["m-0"])
    from pools import NodeEvent
    book.finish(NodeEvent(READY, "m-1"))                    # not an end of a leave
    assert book.leaving(MEMORY) == ["m-1"]
    book.finish(NodeEvent(REMOVED, "m-1"))
    assert book.leaving(MEMORY) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["request", "spawn", "up", "exit", "tick", "leave",
                                           "left"]),
                          st.integers(0, 5)), max_size=40))
def test_every_request_ends_once_and_a_node_is_never_both_pending_and_leaving(steps):
    book = PoolBook(provisioning_delay=1.0, startup_timeout=3.0)
    now, serial, running, ended = 0.0, 0, ["n-a", "n-b"], {}
    requested = []
    for op, k in steps:
        now += 0.5
        if op == "request":
            ids = [f"n{serial + i}" for i in range(k % 3 + 1)]
            serial += len(ids)
            requested += ids
            book.request(MEMORY, ids, now)
        elif op == "spawn":
            for p in book.due(now):
                book.spawned(p.node_id, now)
        elif op in ("up", "exit", "tick") and book.starting():
            node = book.starting()[k % len(book.starting())]
            outcome = book.started(node, {"up": True, "exit": False, "tick": None}[op], now)
            if outcome is not None:
                assert node not in ended
                ended[node] = outcome.event.kind
                if outcome.event.kind == READY:
                    running.append(node)
        elif op == "leave":
            candidates = book.nodes(MEMORY, running)
            node = candidates[k % len(candidates)]
            try:
                book.check_leave(MEMORY, node, candidates)
            except LastNode:
                assert len(candidates) == 1
                continue
            book.leave(MEMORY, node)
        elif op == "left" and book.leaving(MEMORY):
            from pools import NodeEvent
            node = book.leaving(MEMORY)[0]
            book.finish(NodeEvent(REMOVED, node))
            running.remove(node)
        pending, leaving = set(book.pending(MEMORY)), set(book.leaving(MEMORY))
        assert not pending & leaving and not pending & set(ended)
        assert pending | set(ended) == set(requested)
        assert not set(book.nodes(MEMORY, running)) & (pending | leaving)
        assert book.nodes(MEMORY, running), "the pool was emptied"


def test_counts_must_be_positive_ints():
    assert check_count(2) == 2
    for bad in (0, -1, True, 1.0, "1"):
        with pytest.raises(ValueError, match="count"):
            check_count(bad)


# ---- which node leaves ------------------------------------------------------------------------

def test_a_statefulset_removes_its_highest_ordinal_a_deployment_the_chosen_node():
    nodes = ["anna-disk-0", "anna-disk-2", "anna-disk-10", "anna-disk-1"]
    assert ordinal("anna-disk-10") == 10 and ordinal("anna-disk") is None
    assert ordinal("anna-disk-01") is None                  # not a StatefulSet pod name
    assert removal("anna-disk-1", nodes, CHOSEN) == "anna-disk-1"
    assert removal("anna-disk-1", nodes, HIGHEST_ORDINAL) == "anna-disk-10"
    with pytest.raises(UnknownNode, match="anna-disk-7"):
        removal("anna-disk-7", nodes, HIGHEST_ORDINAL, "disk")
    with pytest.raises(ValueError, match="rule"):
        removal("anna-disk-1", nodes, "random")
    with pytest.raises(ValueError, match="ordinal"):
        removal("x", ["x", "anna-disk-1"], HIGHEST_ORDINAL)


@given(st.sets(st.integers(0, 50), min_size=1, max_size=12), st.integers(0, 100),
       st.sampled_from([CHOSEN, HIGHEST_ORDINAL]))
def test_the_removal_is_always_a_running_node_and_obeys_its_rule(ordinals, pick, rule):
    nodes = [f"anna-disk-{o}" for o in sorted(ordinals)]
    requested = nodes[pick % len(nodes)]
    chosen = removal(requested, nodes, rule)
    assert chosen in nodes
    if rule == CHOSEN:
        assert chosen == requested
    else:
        assert chosen == f"anna-disk-{max(ordinals)}"


# ---- LocalPool over a scripted spawner ------------------------------------------------------

class _Spawner:
    """Nodes whose readiness the test sets; removals block until released."""

    startup_timeout = 5.0

    def __init__(self, nodes):
        self.procs = {n: True for n in nodes}         # node -> ready state (None: starting)
        self.serial = len(nodes)
        self.discarded, self.fail_spawn, self.leave_error = [], False, None
        self.release = threading.Event()

    def new_id(self, pool):
        self.serial += 1
        return f"{pool}-{self.serial}"

    def spawn(self, pool, node_id):
        if self.fail_spawn:
            raise OSError("no room to boot")
        self.procs[node_id] = None

    def ready(self, node_id):
        return self.procs[node_id]

    def discard(self, node_id, exited):
        self.discarded.append((node_id, exited))
        self.procs.pop(node_id)

    def running(self, pool):
        return [n for n, up in self.procs.items() if up is not False]

    def absent(self, pool, node_id):
        return "does not exist"

    def log_tail(self, node_id):
        return "last words"

    def remove(self, pool, node_id):
        self.release.wait(5)
        if self.leave_error is not None:
            raise self.leave_error
        self.procs.pop(node_id)


def _until(pool, clock, kinds, limit=50):
    events = []
    for _ in range(limit):
        events += pool.poll(clock[0])
        if {e.kind for e in events} >= kinds:
            return events
        threading.Event().wait(0.02)     # removal threads run meanwhile (bounded loop)
    raise AssertionError(f"no {kinds} within {limit} polls: {events}")


def test_local_pool_provisions_starts_and_times_out_through_its_spawner():
    spawner, clock = _Spawner(["executor-0"]), [0.0]
    pool = LocalPool(spawner, (EXECUTORS,), provisioning_delay=1.0, clock=lambda: clock[0])
    ids = pool.add_nodes(EXECUTORS, 2)
    assert pool.pending(EXECUTORS) == ids and pool.poll(0.5) == []
    assert set(ids).isdisjoint(spawner.procs)                # not spawned before the delay
    assert pool.poll(1.0) == [] and all(spawner.procs[i] is None for i in ids)
    spawner.procs[ids[0]] = True
    events = pool.poll(2.0)
    assert [(e.kind, e.node_id, e.pool) for e in events] == [(READY, ids[0], EXECUTORS)]
    assert pool.nodes(EXECUTORS) == ["executor-0", ids[0]] and pool.pending(EXECUTORS) == [ids[1]]
    events = pool.poll(6.5)                                  # 5.5 s after its start: killed
    assert [(e.kind, e.node_id) for e in events] == [(FAILED, ids[1])]
    assert isinstance(events[0].error, StartupError) and "last words" in str(events[0].error)
    assert spawner.discarded == [(ids[1], False)] and pool.owns(ids[1])
    spawner.fail_spawn = True
    bad, = pool.add_nodes(EXECUTORS, 1)
    events = pool.poll(10.0)
    assert [(e.kind, e.node_id) for e in events] == [(FAILED, bad)]
    assert "no room to boot" in events[0].detail
    with pytest.raises(ValueError, match="pool must be one of"):
        pool.add_nodes(MEMORY, 1)


def test_local_pool_removes_on_a_thread_and_reports_how_the_leave_ended():
    spawner, clock = _Spawner(["m-0", "m-1", "m-2"]), [0.0]
    pool = LocalPool(spawner, (MEMORY,), clock=lambda: clock[0])
    pool.remove_node(MEMORY, "m-2")
    assert pool.leaving(MEMORY) == ["m-2"] and pool.nodes(MEMORY) == ["m-0", "m-1"]
    with pytest.raises(NodeLeaving):
        pool.remove_node(MEMORY, "m-2")
    assert pool.poll() == []                                 # the leave is still under way
    spawner.release.set()
    events = _until(pool, clock, {REMOVED})
    assert [(e.kind, e.node_id) for e in events] == [(REMOVED, "m-2")]
    assert pool.leaving(MEMORY) == []
    spawner.leave_error = RuntimeError("SIGTERM ignored")
    pool.remove_node(MEMORY, "m-1")
    events = _until(pool, clock, {FAILED})
    assert isinstance(events[0].error, LeaveFailed) and isinstance(events[0].error, PoolError)
    assert "SIGTERM ignored" in events[0].detail and events[0].error.node_id == "m-1"
    assert pool.leaving(MEMORY) == [] and pool.nodes(MEMORY) == ["m-0", "m-1"]  # still runs
    with pytest.raises(UnknownNode, match="m-9.*does not exist"):
        pool.remove_node(MEMORY, "m-9")
    pool.close()
    alone = LocalPool(_Spawner(["m-0"]), (MEMORY,))
    with pytest.raises(LastNode, match="m-0"):
        alone.remove_node(MEMORY, "m-0")
