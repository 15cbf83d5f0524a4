"""HB's snapshot round, taken only while OPT aborts often enough to pay for it. Pure.

Contract: `SnapshotPolicy(window, eager_above, lazy_below, min_outcomes, max_dags)` decides,
per DAG, whether an HB call takes its snapshot round at the start (`eager(dag) -> bool`), and
learns from every HB call that ends (`record(dag, opt_aborted)`): did its OPT attempt abort,
by itself or by the simulation's early abort?

- HB (dissertation 4.3.5) starts OPT and a snapshot round together so that, when OPT
  aborts, CON can run at once on the snapshot it already has, and so that the simulation
  can abort OPT early. The round costs a CAUSAL_SNAPSHOT per function, the simulation, the
  prefetches and releasing the snapshot: most of HB's cost over OPT. When OPT seldom aborts
  that work is wasted.
- So: *eager* (take the round at the start, HB as written) while the share of OPT attempts
  that aborted among the last `window` outcomes of the DAG is at least `lazy_below`, and
  *lazy* (OPT alone; an abort then takes a fresh snapshot round and runs CON on it, reusing
  the OPT attempt's results where they match) once it falls below `lazy_below`, back to eager
  when it reaches `eager_above` (hysteresis, so one abort does not flip the mode).
- A DAG with fewer than `min_outcomes` outcomes is eager: HB as written until there is
  evidence.
- Outcomes are observed in both modes: an eager call's simulation says whether OPT would
  abort, a lazy call's OPT attempt says whether it did. No probing is needed.
- Consistency does not depend on this choice. OPT validates every bind (Algorithm 6) and
  CON runs on a complete distributed snapshot (Algorithm 10) in both modes; the policy only
  moves cost between the common case and the abort case.
- Bounded: at most `max_dags` DAGs are remembered (least recently used forgotten first),
  each with at most `window` outcomes.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Deque

__all__ = ["SnapshotPolicy", "DagOutcomes"]


@dataclass
class DagOutcomes:
    """The last outcomes of one DAG's HB calls (True: its OPT attempt aborted) and its mode."""

    window: int
    outcomes: Deque[bool] = field(default_factory=deque)
    aborted: int = 0
    lazy: bool = False

    def add(self, aborted: bool) -> None:
        self.outcomes.append(aborted)
        self.aborted += aborted
        if len(self.outcomes) > self.window:
            self.aborted -= self.outcomes.popleft()

    @property
    def rate(self) -> float:
        return self.aborted / len(self.outcomes) if self.outcomes else 1.0


class SnapshotPolicy:
    """Per DAG: eager or lazy snapshot round for HB; see the module contract."""

    def __init__(self, window: int = 50, eager_above: float = 0.15, lazy_below: float = 0.08,
                 min_outcomes: int = 20, max_dags: int = 4096) -> None:
        if not 0.0 <= lazy_below <= eager_above <= 1.0:
            raise ValueError(f"need 0 <= lazy_below ({lazy_below}) <= eager_above "
                             f"({eager_above}) <= 1")
        if window < 1 or max_dags < 1 or not 0 <= min_outcomes <= window:
            raise ValueError(f"need window >= 1 (got {window}), max_dags >= 1 (got {max_dags}) "
                             f"and 0 <= min_outcomes ({min_outcomes}) <= window")
        self.window = window
        self.eager_above = eager_above
        self.lazy_below = lazy_below
        self.min_outcomes = min_outcomes
        self.max_dags = max_dags
        self._dags: "OrderedDict[str, DagOutcomes]" = OrderedDict()

    def eager(self, dag: str) -> bool:
        """Should an HB call of `dag` take its snapshot round at the start?"""
        d = self._dags.get(dag)
        if d is None:
            return True
        self._dags.move_to_end(dag)
        return not d.lazy

    def record(self, dag: str, opt_aborted: bool) -> None:
        """An HB call of `dag` ended; `opt_aborted`: its OPT attempt aborted (by itself, or
        early by the simulation)."""
        d = self._dags.get(dag)
        if d is None:
            d = self._dags[dag] = DagOutcomes(self.window)
            while len(self._dags) > self.max_dags:
                self._dags.popitem(last=False)
        self._dags.move_to_end(dag)
        d.add(opt_aborted)
        if len(d.outcomes) < self.min_outcomes:
            d.lazy = False
        elif d.lazy:
            d.lazy = d.rate < self.eager_above
        else:
            d.lazy = d.rate < self.lazy_below

    def rate(self, dag: str) -> float:
        """The share of aborted OPT attempts among `dag`'s remembered outcomes (1.0: none)."""
        d = self._dags.get(dag)
        return 1.0 if d is None else d.rate

    def __len__(self) -> int:
        return len(self._dags)
