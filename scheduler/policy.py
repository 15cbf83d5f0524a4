"""Executor choice for one call: data locality, then load with back-off, then a random tie-break.

Contract (dissertation 4.1): `choose_executors(functions, references, workers,
node_keys, rng)` returns `{function: worker_id}` for every function of a call, picked up
front, or raises `faas.errors.NoResources` when `workers` is empty. For each function,
in order:
1. back-off: workers that are *busy* (outstanding calls >= `busy_outstanding`, or reported
   utilization >= `busy_utilization`) are skipped unless every worker is busy;
2. data locality: keep the workers whose node's cache reports the most of the function's
   referenced keys;
3. load: keep the least loaded (outstanding calls); when every worker is busy, of those the
   ones not reported fully utilized (a worker that ran for the whole last report period
   may be running a long call, while an equally loaded one's calls may be short or just
   finished); among those, the worker that ran this
   function last for this scheduler (`warm`: function -> worker id), if it is one of them:
   a client calling one function or DAG again and again gets the same warm worker process,
   rather than alternating between idle ones on reported utilization (which made a warm
   call's latency depend on the run); then the least reported utilization;
4. hop saving: prefer a worker already chosen for one of the function's `neighbours`
   (its direct upstreams/downstreams in the DAG): the result then needs no network hop;
5. tie-break: `rng.choice` over the rest, sorted by worker id so a seeded rng is reproducible.
Load and back-off count the calls placed on a worker, not the slots leased
to clients on it (`WorkerView.leased`, part of `outstanding`: they limit how many calls the
worker may hold, `scheduler/dispatch.py`, but a leased slot may be idle): a call goes to an
idle leased worker rather than behind a call already running elsewhere, which may be long;
among workers running as few placed calls, those with the fewest leased slots come first
(right after the least loaded, before the warm worker), so that the scheduler's calls keep
off the workers where clients send calls direct, which would wait behind them.
A choice counts as one more outstanding call on that worker for the later functions of the
same call that may run at the same time (`concurrent_with`; by default every other function
of the call), so parallel branches spread out while a chain, whose functions never run at
once, may share a worker. No I/O, no clocks: the caller passes the live workers (see
`scheduler.membership`) and an injected `random.Random`. `dag_relations(dag)` computes
`concurrent_with` and `neighbours` for a `scheduler.dag.Dag`.

`choose_one_node(...)` (HydroCache's CT protocol, dissertation 4.3.1) places every function of
a call on workers of ONE node: the node is chosen first (nodes with a worker that is not busy,
then data locality over all the call's referenced keys, then the least mean load and
utilization of its workers, then `rng`), and the functions are placed on its workers by
`choose_executors`.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from faas.errors import NoResources

__all__ = ["WorkerView", "choose_executors", "choose_one_node", "dag_relations", "is_busy"]


@dataclass(frozen=True)
class WorkerView:
    """What the scheduler knows of one live executor worker."""

    worker_id: str
    node_id: str
    address: str
    utilization: float = 0.0   # fraction of the last report period spent running functions
    outstanding: int = 0       # calls this scheduler placed on it that are not finished
    cache_address: str = ""    # its node cache's request address (causal protocols)
    leased: int = 0            # of `outstanding`: slots leased to clients (direct calls)


def is_busy(w: WorkerView, outstanding: int, busy_outstanding: int, busy_utilization: float) -> bool:
    """True when `w` (with `outstanding` calls counted) should be backed off from."""
    return outstanding >= busy_outstanding or w.utilization >= busy_utilization


def dag_relations(dag: Any) -> Tuple[Dict[str, Set[str]], Dict[str, Set[str]]]:
    """(concurrent_with, neighbours) of a DAG's functions: the functions neither upstream nor
    downstream of each one (they may run at the same time), and its direct neighbours.
    Iterative (reverse topological order), so a long chain needs no recursion."""
    functions = list(dag.functions)
    downs = {f: dag.downstreams(f) for f in functions}
    ups = {f: dag.upstreams(f) for f in functions}
    # Kahn's order from the sinks up: every function after all of its downstreams
    left = {f: len(set(downs[f])) for f in functions}
    ready = [f for f in functions if left[f] == 0]
    below: Dict[str, Set[str]] = {}
    while ready:
        f = ready.pop()
        reach: Set[str] = set()
        for d in downs[f]:
            reach.add(d)
            reach |= below.get(d, set())
        below[f] = reach
        for u in set(ups[f]):
            left[u] -= 1
            if left[u] == 0:
                ready.append(u)
    for f in functions:          # only a cyclic graph leaves some out; validated DAGs have none
        below.setdefault(f, set())
    concurrent = {f: {g for g in functions
                      if g != f and g not in below[f] and f not in below[g]}
                  for f in functions}
    neighbours = {f: set(ups[f]) | set(downs[f]) for f in functions}
    return concurrent, neighbours


def choose_executors(functions: Sequence[str], references: Mapping[str, Collection[str]],
                     workers: Sequence[WorkerView], node_keys: Mapping[str, Collection[str]],
                     rng: random.Random, *, busy_outstanding: int = 1,
                     busy_utilization: float = 0.9,
                     concurrent_with: Optional[Mapping[str, Collection[str]]] = None,
                     neighbours: Optional[Mapping[str, Collection[str]]] = None,
                     warm: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Pick a worker for every function of one call; see the module contract."""
    if not workers:
        raise NoResources(f"no live executor worker to run {list(functions)}")
    base = {w.worker_id: w.outstanding - w.leased for w in workers}
    placement: Dict[str, str] = {}
    for fn in functions:
        parallel = (set(functions) - {fn}) if concurrent_with is None else concurrent_with.get(fn, ())
        load = dict(base)
        for other, wid in placement.items():
            if other in parallel:
                load[wid] += 1
        pool = [w for w in workers
                if not is_busy(w, load[w.worker_id], busy_outstanding, busy_utilization)]
        if not pool:
            pool = list(workers)
        refs = references.get(fn, ())
        if refs:
            def score(w: WorkerView) -> int:
                cached = node_keys.get(w.node_id, ())
                return sum(1 for k in refs if k in cached)
            best = max(score(w) for w in pool)
            pool = [w for w in pool if score(w) == best]
        fewest = min(load[w.worker_id] for w in pool)
        pool = [w for w in pool if load[w.worker_id] == fewest]
        # every worker busy: not one that ran the whole last report period (a long call may
        # run there) while an equally loaded one did not
        pool = [w for w in pool if w.utilization < busy_utilization] or pool
        unleased = min(w.leased for w in pool)      # not where a client's calls go direct
        pool = [w for w in pool if w.leased == unleased]
        last = warm.get(fn) if warm else None
        if last is not None and len(pool) > 1:
            pool = [w for w in pool if w.worker_id == last] or pool
        least = min(w.utilization for w in pool)
        pool = [w for w in pool if w.utilization == least]
        if neighbours:
            near = {placement[n] for n in neighbours.get(fn, ()) if n in placement}
            pool = [w for w in pool if w.worker_id in near] or pool
        pool.sort(key=lambda w: w.worker_id)
        chosen = pool[0] if len(pool) == 1 else rng.choice(pool)
        placement[fn] = chosen.worker_id
    return placement


def choose_one_node(functions: Sequence[str], references: Mapping[str, Collection[str]],
                    workers: Sequence[WorkerView], node_keys: Mapping[str, Collection[str]],
                    rng: random.Random, *, busy_outstanding: int = 1,
                    busy_utilization: float = 0.9,
                    concurrent_with: Optional[Mapping[str, Collection[str]]] = None,
                    neighbours: Optional[Mapping[str, Collection[str]]] = None) -> Dict[str, str]:
    """Pick one node and a worker of it for every function (CT); see the module contract."""
    if not workers:
        raise NoResources(f"no live executor worker to run {list(functions)}")
    by_node: Dict[str, List[WorkerView]] = {}
    for w in workers:
        by_node.setdefault(w.node_id, []).append(w)
    wanted = {k for fn in functions for k in references.get(fn, ())}

    def rank(node: str) -> Tuple[int, int, float, float]:
        ws = by_node[node]
        idle = any(not is_busy(w, w.outstanding - w.leased, busy_outstanding,
                               busy_utilization) for w in ws)
        cached = node_keys.get(node, ())
        local = sum(1 for k in wanted if k in cached)
        load = sum(w.outstanding - w.leased for w in ws) / len(ws)
        util = sum(w.utilization for w in ws) / len(ws)
        return (0 if idle else 1, -local, load, util)

    ranks = {n: rank(n) for n in by_node}
    best = min(ranks.values())
    nodes = sorted(n for n, r in ranks.items() if r == best)
    node = nodes[0] if len(nodes) == 1 else rng.choice(nodes)
    return choose_executors(functions, references, by_node[node], node_keys, rng,
                            busy_outstanding=busy_outstanding, busy_utilization=busy_utilization,
                            concurrent_with=concurrent_with, neighbours=neighbours)
