"""Executor choice (scheduler.policy) and liveness/load bookkeeping (scheduler.membership)."""
import random

import pytest
from hypothesis import given, settings, strategies as st

from cloudburst.errors import NoResources
from scheduler.membership import CallRecord, ExecutorTable
from scheduler.policy import WorkerView, choose_executors


def W(wid, node="n1", util=0.0, out=0):
    return WorkerView(wid, node, f"tcp://127.0.0.1:{abs(hash(wid)) % 60000}", util, out)


def test_no_workers_is_no_resources():
    with pytest.raises(NoResources, match="no live executor"):
        choose_executors(["f"], {}, [], {}, random.Random(0))


def test_locality_wins_over_randomness():
    workers = [W("a", "n1"), W("b", "n2"), W("c", "n3")]
    keys = {"n2": {"k1", "k2"}, "n3": {"k1"}}
    for seed in range(20):
        got = choose_executors(["f"], {"f": ["k1", "k2"]}, workers, keys, random.Random(seed))
        assert got == {"f": "b"}


def test_busy_local_worker_is_backed_off_from():
    workers = [W("a", "n1", out=1), W("b", "n2")]
    got = choose_executors(["f"], {"f": ["k"]}, workers, {"n1": {"k"}}, random.Random(0))
    assert got == {"f": "b"}
    hot = [W("a", "n1", util=0.95), W("b", "n2")]
    assert choose_executors(["f"], {"f": ["k"]}, hot, {"n1": {"k"}}, random.Random(0)) == {"f": "b"}


def test_all_busy_still_schedules_least_loaded():
    workers = [W("a", out=3), W("b", out=1), W("c", out=2)]
    assert choose_executors(["f"], {}, workers, {}, random.Random(0)) == {"f": "b"}


def test_parallel_functions_of_one_call_spread_out():
    workers = [W("a"), W("b"), W("c")]
    got = choose_executors(["f", "g", "h"], {}, workers, {}, random.Random(1))
    assert sorted(got.values()) == ["a", "b", "c"]


def test_random_tie_break_uses_injected_rng():
    workers = [W(x) for x in "abcdef"]
    picks = {choose_executors(["f"], {}, workers, {}, random.Random(s))["f"] for s in range(60)}
    assert len(picks) > 1
    assert (choose_executors(["f"], {}, workers, {}, random.Random(7))
            == choose_executors(["f"], {}, workers, {}, random.Random(7)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 1), st.integers(0, 2)), min_size=1, max_size=6),
       st.lists(st.sampled_from(["k1", "k2", "k3"]), max_size=3), st.integers(0, 2**32))
def test_choice_is_live_local_and_not_busy_when_possible(specs, refs, seed):
    workers = [W(f"w{i}", f"n{node}", util, out) for i, (out, util, node) in enumerate(specs)]
    node_keys = {"n0": {"k1", "k2"}, "n1": {"k3"}, "n2": set()}
    got = choose_executors(["f"], {"f": refs}, workers, node_keys, random.Random(seed))["f"]
    chosen = next(w for w in workers if w.worker_id == got)
    free = [w for w in workers if w.outstanding < 1 and w.utilization < 0.9]
    if free:
        assert chosen in free
        score = lambda w: sum(1 for k in refs if k in node_keys[w.node_id])
        assert score(chosen) == max(score(w) for w in free)


def test_table_liveness_and_orphaned_calls():
    t = ExecutorTable(heartbeat_timeout=1.0)
    assert t.heartbeat("w1", "n1", "tcp://x:1", 0.0, now=0.0)
    assert t.heartbeat("w2", "n2", "tcp://x:2", 0.5, now=0.0)
    t.keyset("n1", frozenset({"k"}))
    t.keyset("n2", frozenset({"j"}))
    t.start_call(CallRecord("c1", "dag", {"f": "w1", "g": "w2"}, "tcp://client", deadline=100))
    t.start_call(CallRecord("c2", "dag", {"f": "w1"}, "tcp://client", deadline=1.5))
    assert {w.worker_id: w.outstanding for w in t.live()} == {"w1": 2, "w2": 1}
    t.heartbeat("w1", "n1", "tcp://x:1", 0.1, now=0.9)
    out = t.expire(now=1.6)
    assert out.dead_workers == ["w2"]
    assert [(r.call_id, w) for r, w in out.orphaned_calls] == [("c1", "w2")]
    assert [r.call_id for r in out.overdue_calls] == ["c2"]
    assert [w.worker_id for w in t.live()] == ["w1"]
    assert t.live()[0].outstanding == 0
    assert dict(t.node_keys()) == {"n1": frozenset({"k"})}
    assert t.finish_call("c1") is None  # idempotent


def test_finish_call_releases_load():
    t = ExecutorTable(heartbeat_timeout=1.0)
    t.heartbeat("w1", "n1", "a", 0.0, now=0.0)
    t.start_call(CallRecord("c", "f", {"f": "w1"}, "r", deadline=10))
    assert t.live()[0].outstanding == 1
    assert t.finish_call("c").name == "f"
    assert t.live()[0].outstanding == 0


def test_chain_shares_a_worker_and_parallel_branches_spread():
    from scheduler.dag import Dag
    from scheduler.policy import dag_relations
    workers = [W("a"), W("b"), W("c"), W("d")]
    chain = Dag.create("chain", ["f", "g", "h"], [("f", "g"), ("g", "h")])
    conc, near = dag_relations(chain)
    assert conc == {"f": set(), "g": set(), "h": set()}
    for seed in range(10):
        got = choose_executors(chain.functions, {}, workers, {}, random.Random(seed),
                               concurrent_with=conc, neighbours=near)
        assert len(set(got.values())) == 1
    fan = Dag.create("fan", ["s", "l", "r", "j"], [("s", "l"), ("s", "r"), ("l", "j"), ("r", "j")])
    conc, near = dag_relations(fan)
    assert conc["l"] == {"r"} and conc["s"] == set()
    for seed in range(10):
        got = choose_executors(fan.functions, {}, workers, {}, random.Random(seed),
                               concurrent_with=conc, neighbours=near)
        assert got["l"] != got["r"]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(0, 2**32))
def test_concurrent_functions_never_share_an_idle_worker_when_others_are_free(n_workers, seed):
    from scheduler.dag import Dag
    from scheduler.policy import dag_relations
    fan = Dag.create("fan", ["s", "a", "b", "c", "j"],
                     [("s", "a"), ("s", "b"), ("s", "c"), ("a", "j"), ("b", "j"), ("c", "j")])
    conc, near = dag_relations(fan)
    workers = [W(f"w{i}") for i in range(n_workers)]
    got = choose_executors(fan.functions, {}, workers, {}, random.Random(seed),
                           concurrent_with=conc, neighbours=near)
    branches = [got[f] for f in "abc"]
    assert len(set(branches)) == min(3, n_workers)


def test_a_function_goes_back_to_its_warm_worker_among_equally_loaded_ones():
    # the warm worker ran last, so it reports the higher utilization: without `warm` a serial
    # caller's calls alternate between the idle workers
    workers = [W("a", util=0.3), W("b", util=0.0)]
    rng = random.Random(0)
    assert choose_executors(["f"], {}, workers, {}, rng) == {"f": "b"}
    assert choose_executors(["f"], {}, workers, {}, rng, warm={"f": "a"}) == {"f": "a"}
    # load still comes first: a warm worker holding a call is not preferred to an idle one
    busy = [W("a", out=1), W("b")]
    assert choose_executors(["f"], {}, busy, {}, rng, warm={"f": "a"}) == {"f": "b"}
    # a warm worker that is gone changes nothing
    assert choose_executors(["f"], {}, workers, {}, rng, warm={"f": "gone"}) == {"f": "b"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 16)), min_size=2, max_size=6),
       st.integers(0, 10_000))
def test_leased_slots_limit_room_but_a_call_goes_where_the_fewest_calls_run(loads, seed):
    """Slots leased to clients count in `outstanding` (the worker's room) but not as calls
    running there: a call goes to a worker running the fewest placed calls, never behind a
    call placed on another while a leased worker runs none."""
    workers = [WorkerView(f"w{i}", "n1", f"tcp://w{i}", 0.0, placed + leased, leased=leased)
               for i, (placed, leased) in enumerate(loads)]
    got = choose_executors(["f"], {}, workers, {}, random.Random(seed))["f"]
    fewest = min(placed for placed, _ in loads)
    assert loads[int(got[1:])][0] == fewest


def test_an_idle_leased_worker_is_chosen_over_one_running_a_call():
    running = W("a", out=1)                     # one call placed, maybe a long one
    leased = WorkerView("b", "n1", "tcp://b", 0.0, 11, leased=11)   # leased, idle maybe
    for seed in range(10):
        assert choose_executors(["f"], {}, [running, leased], {}, random.Random(seed)) == \
            {"f": "b"}


def test_among_equally_loaded_workers_the_unleased_one_is_chosen_even_over_the_warm_one():
    leased = WorkerView("a", "n1", "tcp://a", 0.0, 3, leased=3)
    free = W("b")
    for seed in range(10):
        assert choose_executors(["f"], {}, [leased, free], {}, random.Random(seed),
                                warm={"f": "a"}) == {"f": "b"}


def test_with_every_worker_busy_a_call_keeps_off_the_one_that_ran_the_whole_last_period():
    # "a" runs a call that has kept it busy since the last report (a long one, maybe); "b"
    # counts a call too, but ran little (its call is short, or ended and its `done` is on
    # the way) and holds a client's lease, which would otherwise keep the call off it
    long = W("a", util=1.0, out=1)
    short = WorkerView("b", "n1", "tcp://b", 0.1, 2, leased=1)
    for seed in range(10):
        assert choose_executors(["f"], {}, [long, short], {}, random.Random(seed),
                                warm={"f": "a"}) == {"f": "b"}
    # less loaded still comes first: a fully utilized worker with fewer calls is chosen
    assert choose_executors(["f"], {}, [W("a", util=1.0, out=1), W("b", out=2)], {},
                            random.Random(0)) == {"f": "a"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.sampled_from([0.0, 0.5, 0.95, 1.0])),
                min_size=1, max_size=6), st.integers(0, 2**32))
def test_among_the_least_loaded_busy_workers_a_fully_utilized_one_is_chosen_only_if_all_are(
        specs, seed):
    workers = [W(f"w{i}", util=util, out=out) for i, (out, util) in enumerate(specs)]
    got = choose_executors(["f"], {}, workers, {}, random.Random(seed))["f"]
    chosen = next(w for w in workers if w.worker_id == got)
    fewest = min(w.outstanding for w in workers)        # every worker is busy (out >= 1)
    least = [w for w in workers if w.outstanding == fewest]
    assert chosen in least
    assert chosen.utilization < 0.9 or all(w.utilization >= 0.9 for w in least)
