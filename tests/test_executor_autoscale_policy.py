"""Executor-node autoscaling (cloudburst/executor_policy.py): stable and panic windows, drain
before remove, bounds, and properties over random load (spikes acted on within the panic
window, no removal with calls in flight, no scale-in in panic, no oscillation). Pure code."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from cloudburst.executor_policy import (DOWN, UP, AddNodes, Drain, ExecutorAutoscaler,
                                       ExecutorNodeStats, ExecutorPolicyConfig, ExecutorSample,
                                       Note, Remove, Undrain, demand)

TICK = 0.5


def node(name, workers=2, util=0.0, in_flight=0, queued=0, draining=False):
    return ExecutorNodeStats(name, workers, util, in_flight, queued, draining)


def fleet(count, load_per_node=0.0, workers=2, **extra):
    """`count` nodes e0.. each running `load_per_node` calls."""
    return ExecutorSample(tuple(node(f"e{i}", workers, min(1.0, load_per_node / workers),
                                     int(load_per_node)) for i in range(count)), **extra)


def run(scaler, sample, start, until, tick=TICK):
    """Feed the same sample every tick in [start, until); all actions with their times."""
    out, t = [], start
    while t < until - 1e-9:
        out.extend((t, a) for a in scaler.decide(sample, t))
        t += tick
    return out


def of(actions, kind):
    return [a for a in actions if type(a) is kind]


def watching(scaler, since=-60.0):
    """`scaler` as if it had been watching the cluster since `since` (its windows are not
    young: see test_a_young_window_does_not_grow_the_fleet_on_one_busy_sample)."""
    scaler.first_sample = since
    return scaler


# ---- config and demand --------------------------------------------------------------------

def test_knative_defaults_and_the_compressed_local_ones():
    k, local = ExecutorPolicyConfig.knative(), ExecutorPolicyConfig()
    assert (k.stable_window, k.panic_window, k.tick) == (60.0, 6.0, 2.0)
    assert (local.stable_window, local.panic_window, local.tick) == (15.0, 1.5, 0.5)
    for c in (k, local):
        assert c.panic_window == pytest.approx(0.1 * c.stable_window)
        assert c.panic_window / c.tick == 3
        assert (c.panic_threshold, c.max_scale_up_rate, c.max_scale_down_rate) == (2.0, 1000.0, 2.0)
        assert (c.target_utilisation, c.scale_down_delay) == (0.7, 0.0)


@pytest.mark.parametrize("changes, field", [
    (dict(panic_window=20.0), "panic_window"), (dict(target_utilisation=0.0), "target_utilisation"),
    (dict(panic_threshold=1.0), "panic_threshold"), (dict(min_nodes=-1), "min_nodes"),
    (dict(max_nodes=0), "max_nodes"), (dict(workers_per_node=0), "workers_per_node"),
])
def test_config_refuses_bad_values(changes, field):
    with pytest.raises(ValueError, match=field):
        ExecutorPolicyConfig(**changes)


def test_demand_is_busy_workers_or_backlog_whichever_is_larger():
    s = ExecutorSample((node("a", 4, util=0.5, in_flight=1), node("b", 2, util=0.1, in_flight=3,
                                                                   queued=2)), backlog=4)
    assert demand(s) == 2.0 + 5 + 4


# ---- stable mode --------------------------------------------------------------------------

def test_load_within_capacity_changes_nothing():
    scaler = ExecutorAutoscaler()
    assert [a for _, a in run(scaler, fleet(2, 1.2), 0.0, 60.0)] == []


def test_stable_growth_adds_nodes_without_panic():
    scaler = watching(ExecutorAutoscaler())
    actions = run(scaler, fleet(2, 2.0), 0.0, 5.0)          # 4 busy workers / 1.4 -> 3 nodes
    ((t, add),) = [(t, a) for t, a in actions if isinstance(a, AddNodes)]
    assert add.count == 1 and "panic" not in add.reason and not scaler.panicking(t)
    assert "demand 4.0 busy workers over the last 15 s needs 3 nodes" in add.reason


def test_pending_nodes_are_not_asked_for_twice_and_time_out():
    scaler = watching(ExecutorAutoscaler())
    actions = run(scaler, fleet(2, 2.0), 0.0, 29.0)
    assert len(of([a for _, a in actions], AddNodes)) == 1
    late = scaler.decide(fleet(2, 2.0), 30.0)
    assert any("never appeared" in n.reason for n in of(late, Note)) and of(late, AddNodes)
    scaler.decide(fleet(3, 1.3), 31.0)                       # the node appears
    assert scaler.pending_adds == []


# ---- panic mode ---------------------------------------------------------------------------

def test_a_young_window_does_not_grow_the_fleet_on_one_busy_sample():
    """What the executor-spike benchmark saw: an idle cluster of one node of two workers,
    the autoscaler just started, a warm-up DAG call (a runs, b waits on the other worker: 2
    busy workers, then 1), then nothing. The first samples were the whole window, so the
    panic average was 1.5 busy workers "over the last 1.5 s" and a node was added. One
    busy sample must weigh what it weighs once the window has been watched."""
    config = ExecutorPolicyConfig(min_nodes=1, max_nodes=4)
    warm_up = [ExecutorSample((node("node0", 2, 0.5, 1, 1),)),   # a runs, b waits: 2.0
               ExecutorSample((node("node0", 2, 0.5, 1, 0),))]   # b runs: 1.0
    idle = ExecutorSample((node("node0", 2),))
    scaler = ExecutorAutoscaler(config)
    actions = []
    for i, sample in enumerate(warm_up + [idle] * 20):
        actions += scaler.decide(sample, i * TICK)
    assert not [a for a in actions if isinstance(a, UP)], actions
    # the same samples seen later, on a window watched in full, change nothing either
    later = watching(ExecutorAutoscaler(config))
    run(later, idle, 0.0, 20.0)
    assert not [a for i, s in enumerate(warm_up + [idle] * 4)
                for a in later.decide(s, 20.0 + i * TICK) if isinstance(a, UP)]
    # and a real overload right after the start is still acted on within the panic window
    fresh = ExecutorAutoscaler(config)
    busy = ExecutorSample((node("node0", 2, 1.0, 2, 2),))        # 4 busy workers
    acted = [t for t, a in run(fresh, busy, 0.0, config.panic_window + 1e-6)
             if isinstance(a, AddNodes)]
    assert acted and acted[0] <= config.panic_window

def test_a_spike_is_acted_on_within_the_panic_window():
    scaler = ExecutorAutoscaler()
    run(scaler, fleet(2, 1.0), 0.0, 20.0)
    spike = run(scaler, fleet(2, 2.0, backlog=8), 20.0, 21.5)   # 12 busy workers: 9 nodes
    adds = [(t, a) for t, a in spike if isinstance(a, AddNodes)]
    t, first = adds[0]
    assert t - 20.0 <= 1.5 and first.reason.startswith(f"added {first.count} executor node(s): panic")
    assert sum(a.count for _, a in adds) == 7               # as the panic average ramps up
    assert scaler.panicking(t)


def test_no_scale_in_while_panicking_then_stable_mode_shrinks():
    scaler = ExecutorAutoscaler(ExecutorPolicyConfig(min_nodes=1))
    run(scaler, fleet(2, 1.0), 0.0, 20.0)
    scaler.decide(fleet(2, 2.0, backlog=8), 20.0)
    actions = run(scaler, fleet(2, 2.0, backlog=8), 20.5, 21.5)
    assert of([a for _, a in actions], AddNodes)
    calm = fleet(9, 0.0)                                    # the nodes came; load went away
    during = run(scaler, calm, 22.0, 21.0 + 15.0)           # panic held until t = 21.0
    assert not [a for _, a in during if isinstance(a, DOWN)]
    assert scaler.panicking(35.9) and not scaler.panicking(36.0)
    after = run(scaler, calm, 21.0 + 15.0, 40.0)
    first = min(t for t, a in after if isinstance(a, Drain))
    assert len([a for t, a in after if t == first and isinstance(a, Drain)]) == 5  # 9 -> 4


# ---- scale in: drain, then remove ---------------------------------------------------------

def test_idle_nodes_are_drained_then_removed_once_nothing_runs_there():
    scaler = ExecutorAutoscaler()
    busy_one = ExecutorSample((node("a", 2, 0.5, 1), node("b", 2, 0.0, 0), node("c", 2, 0.3, 1)))
    actions = scaler.decide(busy_one, 0.0)                  # 2 busy workers: 2 nodes
    assert [a.node_id for a in of(actions, Drain)] == ["b"]
    assert "0 calls in flight" in of(actions, Drain)[0].reason
    # b acknowledges the drain but a late call still runs there: no removal yet
    running = ExecutorSample((node("a", 2, 0.5, 1), node("b", 2, 0.5, 1, draining=True),
                              node("c", 2, 0.3, 1)))
    assert not of(scaler.decide(running, 0.5), Remove)
    done = ExecutorSample((node("a", 2, 0.5, 1), node("b", 2, 0.0, 0, draining=True),
                           node("c", 2, 0.3, 1)))
    (remove,) = of(scaler.decide(done, 1.0), Remove)
    assert remove.node_id == "b" and "no call in flight" in remove.reason
    assert not of(scaler.decide(done, 1.5), Remove)          # asked once
    gone = ExecutorSample((node("a", 2, 0.5, 1), node("c", 2, 0.3, 1)))
    scaler.decide(gone, 2.0)
    assert scaler.removing == {} and scaler.draining == {}


def test_an_unacknowledged_drain_is_sent_again_and_nothing_is_removed():
    scaler = ExecutorAutoscaler(ExecutorPolicyConfig(drain_retry=2.0))
    s = ExecutorSample((node("a", 2, 0.5, 1), node("b", 2, 0.0, 0)))
    assert of(scaler.decide(s, 0.0), Drain)
    actions = [a for _, a in run(scaler, s, 0.5, 2.5)]
    assert not of(actions, Remove)
    (again,) = of(actions, Drain)
    assert "not acknowledged" in again.reason


def test_a_draining_node_is_taken_back_before_adding_new_ones():
    scaler = ExecutorAutoscaler()
    quiet = ExecutorSample((node("a", 2, 0.5, 1), node("b", 2, 0.0, 0)))
    assert of(scaler.decide(quiet, 0.0), Drain)
    surge = ExecutorSample((node("a", 2, 1.0, 2, queued=6), node("b", 2, 0.0, 0, draining=True)))
    actions = scaler.decide(surge, 0.5)
    assert [a.node_id for a in of(actions, Undrain)] == ["b"]
    (add,) = of(actions, AddNodes)
    assert "b" not in scaler.draining and add.count >= 1


def test_bounds_min_and_max_nodes():
    scaler = ExecutorAutoscaler(ExecutorPolicyConfig(min_nodes=2))
    actions = [a for _, a in run(scaler, fleet(4, 0.0), 0.0, 10.0)]
    assert len({a.node_id for a in of(actions, Drain)}) == 2    # (re-sent: never acknowledged)
    capped = watching(ExecutorAutoscaler(ExecutorPolicyConfig(max_nodes=4)))
    actions = capped.decide(fleet(2, 2.0, backlog=20), 0.0)
    (add,) = of(actions, AddNodes)
    assert add.count == 2 and any("wanted 18 executor nodes, max_nodes is 4" in n.reason
                                  for n in of(actions, Note))


def test_scale_from_zero_on_backlog():
    scaler = ExecutorAutoscaler(ExecutorPolicyConfig(min_nodes=0, workers_per_node=4))
    (add,) = of(scaler.decide(ExecutorSample((), backlog=3), 0.0), AddNodes)
    assert add.count == 2                                   # 3 / (4 x 0.7) -> 2 nodes


def test_scale_down_delay_keeps_recent_peaks():
    config = ExecutorPolicyConfig(scale_down_delay=10.0, stable_window=2.0, panic_window=0.5)
    scaler = ExecutorAutoscaler(config)
    run(scaler, fleet(4, 1.3), 0.0, 5.0)                     # 4 nodes wanted
    quiet = [(t, a) for t, a in run(scaler, fleet(4, 0.0), 5.0, 20.0) if isinstance(a, Drain)]
    assert quiet and min(t for t, _ in quiet) >= 14.0


# ---- properties ---------------------------------------------------------------------------

class Executors:
    """Executor nodes that join after a delay, spread the wanted calls over the nodes that
    take calls, finish a draining node's calls over a few samples, and vanish when removed."""

    def __init__(self, count, workers, join_delay):
        self.nodes = {f"e{i}": dict(workers=workers, draining=False, in_flight=0, asked=False)
                      for i in range(count)}
        self.joining, self.serial = [], 0
        self.workers, self.join_delay = workers, join_delay

    def apply(self, actions, now, sample):
        by_id = {n.node_id: n for n in sample.nodes}
        for a in actions:
            if isinstance(a, AddNodes):
                for _ in range(a.count):
                    self.serial += 1
                    self.joining.append((now + self.join_delay, f"x{self.serial}"))
            elif isinstance(a, Drain):
                self.nodes[a.node_id]["asked"] = True
            elif isinstance(a, Undrain):
                self.nodes[a.node_id].update(asked=False, draining=False)
            elif isinstance(a, Remove):
                seen = by_id[a.node_id]
                assert seen.draining and seen.in_flight == 0 and seen.queued == 0, seen
                del self.nodes[a.node_id]

    def sample(self, now, wanted, finish):
        for t, name in [j for j in self.joining if j[0] <= now]:
            self.joining.remove((t, name))
            self.nodes[name] = dict(workers=self.workers, draining=False, in_flight=0, asked=False)
        taking = [n for n in sorted(self.nodes) if not self.nodes[n]["draining"]]
        for name, state in self.nodes.items():
            if state["draining"]:
                state["in_flight"] = max(0, state["in_flight"] - finish)
            if state["asked"]:
                state["draining"] = True          # acknowledged: seen from the next sample
        backlog = wanted if not taking else 0
        for i, name in enumerate(taking):
            share = wanted // len(taking) + (1 if i < wanted % len(taking) else 0)
            self.nodes[name]["in_flight"] = share
        out = []
        for name, state in sorted(self.nodes.items()):
            w, f = state["workers"], state["in_flight"]
            out.append(ExecutorNodeStats(name, w, min(1.0, f / w), min(f, w), max(0, f - w),
                                         state["draining"]))
        return ExecutorSample(tuple(out), backlog=backlog)


@settings(max_examples=40, deadline=None)
@given(start=st.integers(1, 5), workers=st.integers(1, 4), min_nodes=st.integers(0, 2),
       max_nodes=st.one_of(st.none(), st.integers(5, 15)), join_delay=st.floats(0.0, 5.0),
       finish=st.integers(1, 3),
       plan=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20)), min_size=1, max_size=12))
def test_random_load_keeps_every_invariant(start, workers, min_nodes, max_nodes, join_delay,
                                           finish, plan):
    start = max(start, min_nodes)
    if max_nodes is not None:
        start = min(start, max_nodes)
    config = ExecutorPolicyConfig(min_nodes=min_nodes, max_nodes=max_nodes)
    scaler = ExecutorAutoscaler(config)
    world = Executors(start, workers, join_delay)
    now = 0.0
    for wanted, ticks in plan:                              # `wanted` calls for `ticks` samples
        for _ in range(ticks):
            now += TICK
            sample = world.sample(now, wanted, finish)
            actions = scaler.decide(sample, now)
            if scaler.panicking(now):
                assert not [a for a in actions if isinstance(a, DOWN)], actions
            world.apply(actions, now, sample)              # asserts removals are safe
            active = [n for n in world.nodes if n not in scaler.draining
                      and n not in scaler.removing]
            assert len(active) >= min(start, min_nodes)
            if max_nodes is not None:
                assert len(world.nodes) + len(world.joining) <= max_nodes
            assert all(a.reason for a in actions)


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(1, 6), workers=st.integers(1, 4), factor=st.floats(2.05, 6.0),
       tick=st.sampled_from([0.1, 0.25, 0.5]), quiet=st.floats(16.0, 40.0))
def test_a_spike_is_always_acted_on_within_the_panic_window(nodes, workers, factor, tick, quiet):
    config = ExecutorPolicyConfig()
    scaler = ExecutorAutoscaler(config)
    capacity = config.target_utilisation * workers
    calm = 0.95 * config.target_utilisation                 # the nodes carry it: no change
    base = ExecutorSample(tuple(node(f"e{i}", workers, calm) for i in range(nodes)))
    assert not [a for _, a in run(scaler, base, 0.0, quiet, tick) if isinstance(a, UP + DOWN)]
    spike = ExecutorSample(base.nodes, backlog=math.ceil(factor * capacity * nodes) + 1)
    acted = [t for t, a in run(scaler, spike, quiet, quiet + config.panic_window + 1e-6, tick)
             if isinstance(a, UP)]
    assert acted and acted[0] - quiet <= config.panic_window


@settings(max_examples=40, deadline=None)
@given(loads=st.lists(st.tuples(st.integers(1, 4), st.floats(0.0, 1.0), st.integers(0, 6),
                                st.integers(0, 3), st.booleans()), min_size=1, max_size=8),
       backlog=st.integers(0, 30), min_nodes=st.integers(0, 3))
def test_a_steady_sample_moves_the_fleet_one_way_only(loads, backlog, min_nodes):
    sample = ExecutorSample(tuple(node(f"e{i}", w, u, f, q, d)
                                  for i, (w, u, f, q, d) in enumerate(loads)), backlog=backlog)
    scaler = ExecutorAutoscaler(ExecutorPolicyConfig(min_nodes=min_nodes))
    directions = {("up" if isinstance(a, UP) else "down")
                  for _, a in run(scaler, sample, 0.0, 120.0) if isinstance(a, UP + DOWN)}
    assert len(directions) <= 1, directions
