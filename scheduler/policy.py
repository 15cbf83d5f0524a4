"""Executor choice for one call: data locality, then load with back-off, then a random tie-break.

Contract (dissertation 4.1; issue 3): `choose_executors(functions, references, workers,
node_keys, rng)` returns `{function: worker_id}` for every function of a call, picked up
front, or raises `cloudburst.errors.NoResources` when `workers` is empty. For each function,
in order:
1. back-off: workers that are *busy* (outstanding calls >= `busy_outstanding`, or reported
   utilization >= `busy_utilization`) are skipped unless every worker is busy;
2. data locality: keep the workers whose node's cache reports the most of the function's
   referenced keys;
3. load: keep the least loaded (outstanding calls, then reported utilization);
4. tie-break: `rng.choice` over the rest, sorted by worker id so a seeded rng is reproducible.
A choice counts as one more outstanding call on that worker for the later functions of the
same call, so parallel branches spread out. No I/O, no clocks: the caller passes the live
workers (see `scheduler.membership`) and an injected `random.Random`.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Collection, Dict, List, Mapping, Sequence

from cloudburst.errors import NoResources

__all__ = ["WorkerView", "choose_executors", "is_busy"]


@dataclass(frozen=True)
class WorkerView:
    """What the scheduler knows of one live executor worker."""

    worker_id: str
    node_id: str
    address: str
    utilization: float = 0.0   # fraction of the last report period spent running functions
    outstanding: int = 0       # calls this scheduler placed on it that are not finished


def is_busy(w: WorkerView, outstanding: int, busy_outstanding: int, busy_utilization: float) -> bool:
    """True when `w` (with `outstanding` calls counted) should be backed off from."""
    return outstanding >= busy_outstanding or w.utilization >= busy_utilization


def choose_executors(functions: Sequence[str], references: Mapping[str, Collection[str]],
                     workers: Sequence[WorkerView], node_keys: Mapping[str, Collection[str]],
                     rng: random.Random, *, busy_outstanding: int = 1,
                     busy_utilization: float = 0.9) -> Dict[str, str]:
    """Pick a worker for every function of one call; see the module contract."""
    if not workers:
        raise NoResources(f"no live executor worker to run {list(functions)}")
    load = {w.worker_id: w.outstanding for w in workers}
    placement: Dict[str, str] = {}
    for fn in functions:
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
        least = min((load[w.worker_id], w.utilization) for w in pool)
        pool = [w for w in pool if (load[w.worker_id], w.utilization) == least]
        pool.sort(key=lambda w: w.worker_id)
        chosen = pool[0] if len(pool) == 1 else rng.choice(pool)
        placement[fn] = chosen.worker_id
        load[chosen.worker_id] += 1
    return placement
