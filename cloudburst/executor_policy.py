"""Executor-node autoscaling with a stable and a panic window (after Knative's KPA), pure.

Contract:
- `ExecutorAutoscaler(config).decide(sample, now) -> List[Action]`, called once per sample
  (every `config.tick` seconds) with what the schedulers know of every executor node
  (`ExecutorSample`: per node its workers, busy fraction, calls in flight and queued, and
  whether it acknowledged a drain; plus calls no node could take). `now` is seconds on the
  caller's monotonic clock. No sockets, clocks, sleeps or logging: reasons are returned.
- Demand of a sample = for every node, max(busy fraction x workers, calls in flight +
  queued), plus the calls waiting for any node. The busy fraction catches short calls that
  finish between samples; in-flight + queued catches a backlog. A node's capacity is
  `target_utilisation` x its workers.
- Windows: the stable average is the mean demand of the samples of the last
  `stable_window`, the panic average that of the last `panic_window`; each gives a node
  count, ceil(average / capacity per node). Panic starts when the panic count reaches
  `panic_threshold` x the ready (active) nodes, and lasts until it has not done so for a
  whole stable window. In panic the desired count is the largest of the panic and stable
  counts and the count desired earlier in this panic: it never goes down, and nothing is
  drained or removed. Out of panic it is the stable count, at least ready /
  `max_scale_down_rate`, and (over `scale_down_delay`) the largest count recently desired.
  Always: at most ceil(`max_scale_up_rate` x ready), within [min_nodes, max_nodes].
- Young windows: until the autoscaler has watched a whole window (since its first sample,
  plus one tick), the part of the window it has not watched counts as no demand when a
  count would grow past the ready nodes (not when it shrinks, and not with no node ready,
  where any waiting call is real demand). Otherwise the first samples after a start are
  the whole window: one busy sample (a warm-up call) read as demand sustained over the
  window and added a node to an idle cluster. A sustained overload right after the start
  is still acted on within the panic window.
- Scale out: draining nodes are taken back first (`Undrain`), then `AddNodes("executor",
  count)` (`pools.actions`, shared with Anna's policy); the
  requested nodes count as pending until that many new nodes appear in a sample (or for
  `pending_node_timeout`), and nothing is added on top of pending nodes beyond the desired
  count, nor past `max_nodes` (counting every node that still runs).
- Scale in (never in panic, never while additions are pending, never below `min_nodes`
  active nodes): the idlest nodes (fewest calls in flight and queued, then lowest busy
  fraction) get `Drain(node)`: the schedulers stop placing calls on them. A drained node
  gets `Remove(node)` only once a sample shows it acknowledged the drain with no call in
  flight and none queued; a drain not acknowledged within `drain_retry` is sent again.
  Removed nodes count until they vanish from the samples (or `pending_node_timeout`).
  A node must report `draining` and its calls in one snapshot: draining with nothing in
  flight or queued then means nothing runs there and nothing new will start.
- Where the samples come from and where the actions go: `cloudburst/autoscaler.py` (every
  scheduler's `status` merged by `build_sample`: a node is `draining` only when every
  scheduler places nothing new on it, and its calls in flight and queued include every
  call a scheduler placed there and has not seen finish; see `cloudburst/DESIGN.md`).
- Where it lives: the schedulers observe executor load (heartbeats with utilisation, calls
  they placed) and are the ones that must stop placing calls on a draining node; `anna_core`
  sits a layer below and knows nothing of executors.

Knative's defaults (https://knative.dev/docs/serving/autoscaling/kpa-specific): stable window
60 s, panic window 10 % of it (6 s), panic threshold 200 %, max scale-up rate 1000, max
scale-down rate 2, scale-down delay 0 s, a 2 s tick, target utilisation 70 %
(`ExecutorPolicyConfig.knative()`). The local default keeps the 10 % ratio and three samples
per panic window with a 0.5 s tick: stable 15 s, panic 1.5 s.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Deque, Dict, List, Optional, Sequence, Set, Tuple, Union

from pools.actions import AddNodes, Note
from pools.manager import EXECUTORS

__all__ = ["ExecutorPolicyConfig", "ExecutorNodeStats", "ExecutorSample", "ExecutorAutoscaler",
           "AddNodes", "Drain", "Undrain", "Remove", "Note", "Action", "UP", "DOWN", "demand"]


@dataclass(frozen=True)
class ExecutorPolicyConfig:
    """Every knob of executor autoscaling (see the module contract for the values' sources).

    target_utilisation: the busy fraction of a node's workers to aim at (0..1].
    stable_window, panic_window: averaging windows (s), panic_window < stable_window.
    panic_threshold: panic when the panic count / ready nodes reaches this (> 1).
    max_scale_up_rate: a decision asks for at most this many times the ready nodes.
    max_scale_down_rate: out of panic, a decision keeps at least ready / this many nodes.
    scale_down_delay: scale in to the largest count desired over this long (s; 0: off).
    min_nodes, max_nodes: bounds on the node count (max_nodes None: no bound).
    workers_per_node: a node's workers when no node reports (sizing from zero).
    pending_node_timeout: requested nodes that never appear, or removed nodes that never
        vanish, stop counting after this (s).
    drain_retry: a drain not acknowledged after this (s) is sent again.
    tick: how often the service samples and calls `decide` (s); documentation for it.
    """

    target_utilisation: float = 0.7
    stable_window: float = 15.0
    panic_window: float = 1.5
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    scale_down_delay: float = 0.0
    min_nodes: int = 1
    max_nodes: Optional[int] = None
    workers_per_node: int = 1
    pending_node_timeout: float = 30.0
    drain_retry: float = 5.0
    tick: float = 0.5

    @classmethod
    def knative(cls, **overrides: object) -> "ExecutorPolicyConfig":
        """Knative KPA's defaults (60 s / 6 s windows, 2 s tick), with `overrides`."""
        values: Dict[str, object] = dict(stable_window=60.0, panic_window=6.0, tick=2.0,
                                         pending_node_timeout=600.0, drain_retry=30.0)
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        for name in ("stable_window", "panic_window", "pending_node_timeout", "drain_retry",
                     "tick"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"ExecutorPolicyConfig.{name} must be > 0, got {value!r}")
        if not self.panic_window < self.stable_window:
            raise ValueError("ExecutorPolicyConfig.panic_window must be shorter than stable_window")
        if not 0 < self.target_utilisation <= 1:
            raise ValueError(f"ExecutorPolicyConfig.target_utilisation must be in (0, 1], got "
                             f"{self.target_utilisation!r}")
        if not self.panic_threshold > 1:
            raise ValueError("ExecutorPolicyConfig.panic_threshold must be > 1")
        if not (self.max_scale_up_rate > 1 and self.max_scale_down_rate > 1):
            raise ValueError("ExecutorPolicyConfig.max_scale_up_rate and max_scale_down_rate "
                             "must be > 1")
        if not (math.isfinite(self.scale_down_delay) and self.scale_down_delay >= 0):
            raise ValueError("ExecutorPolicyConfig.scale_down_delay must be >= 0")
        if isinstance(self.min_nodes, bool) or not isinstance(self.min_nodes, int) \
                or self.min_nodes < 0:
            raise ValueError(f"ExecutorPolicyConfig.min_nodes must be an int >= 0, got "
                             f"{self.min_nodes!r}")
        if self.max_nodes is not None and (not isinstance(self.max_nodes, int) or
                                           self.max_nodes < max(1, self.min_nodes)):
            raise ValueError("ExecutorPolicyConfig.max_nodes must be None or an int >= "
                             "max(1, min_nodes)")
        if not isinstance(self.workers_per_node, int) or self.workers_per_node < 1:
            raise ValueError("ExecutorPolicyConfig.workers_per_node must be an int >= 1")


# ---- inputs ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExecutorNodeStats:
    """One executor node as the schedulers see it in one sample."""

    node_id: str
    workers: int
    utilisation: float = 0.0     # mean busy fraction of its workers over the last period
    in_flight: int = 0           # calls running on it
    queued: int = 0              # calls placed on it, waiting for a worker
    draining: bool = False       # it acknowledged a drain: it takes no new calls


@dataclass(frozen=True)
class ExecutorSample:
    """Every executor node, and the calls that no node could take (`backlog`)."""

    nodes: Tuple[ExecutorNodeStats, ...] = ()
    backlog: int = 0


def _load(n: ExecutorNodeStats) -> float:
    busy = min(1.0, max(0.0, n.utilisation)) * max(0, n.workers)
    return max(busy, float(max(0, n.in_flight) + max(0, n.queued)))


def demand(sample: ExecutorSample) -> float:
    """The sample's demand in busy workers (see the module contract)."""
    return sum(_load(n) for n in sample.nodes) + max(0, sample.backlog)


# ---- actions --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Drain:
    """Stop placing calls on `node_id`; it finishes what it has."""

    node_id: str
    reason: str


@dataclass(frozen=True)
class Undrain:
    """Place calls on draining node `node_id` again."""

    node_id: str
    reason: str


@dataclass(frozen=True)
class Remove:
    """Stop node `node_id` (drained, nothing in flight)."""

    node_id: str
    reason: str


Action = Union[AddNodes, Drain, Undrain, Remove, Note]
UP = (AddNodes, Undrain)
DOWN = (Drain, Remove)


# ---- the autoscaler -------------------------------------------------------------------------

class ExecutorAutoscaler:
    """Stable/panic-window autoscaling of executor nodes (see the module contract)."""

    MAX_SAMPLES = 4096

    def __init__(self, config: Optional[ExecutorPolicyConfig] = None) -> None:
        self.config = config if config is not None else ExecutorPolicyConfig()
        self.window: Deque[Tuple[float, float]] = collections.deque(maxlen=self.MAX_SAMPLES)
        self.desired_history: Deque[Tuple[float, int]] = collections.deque(maxlen=self.MAX_SAMPLES)
        self.last_panic: Optional[float] = None     # when the panic condition last held
        self.panic_desired = 0                      # the most desired during this panic
        self.pending_adds: List[float] = []         # request time of each node asked for
        self.draining: Dict[str, float] = {}        # node id -> when Drain was last sent
        self.removing: Dict[str, float] = {}        # node id -> when Remove was sent
        self.known: Optional[Set[str]] = None
        self.first_sample: Optional[float] = None   # when this autoscaler began to watch

    def panicking(self, now: float) -> bool:
        """Whether the autoscaler is in panic mode at `now`."""
        return self.last_panic is not None and now - self.last_panic < self.config.stable_window

    # ---- the decision -----------------------------------------------------------------

    def decide(self, sample: ExecutorSample, now: float) -> List[Action]:
        """One sample's actions (see the module contract)."""
        cfg = self.config
        notes: List[Action] = self._reconcile(sample, now)
        nodes = {n.node_id: n for n in sample.nodes}
        active = [n for n in sample.nodes
                  if n.node_id not in self.draining and n.node_id not in self.removing]
        ready = len(active)

        if self.first_sample is None:
            self.first_sample = now
        self.window.append((now, demand(sample)))
        while self.window and now - self.window[0][0] >= cfg.stable_window:
            self.window.popleft()
        stable = sum(d for _, d in self.window) / len(self.window)
        recent = [d for t, d in self.window if now - t < cfg.panic_window]
        panic = sum(recent) / len(recent)
        workers = (sum(n.workers for n in active) / ready if ready and
                   sum(n.workers for n in active) > 0 else cfg.workers_per_node)
        capacity = cfg.target_utilisation * workers
        stable_count = math.ceil(stable / capacity - 1e-9)
        panic_count = math.ceil(panic / capacity - 1e-9)
        if ready and self.first_sample is not None:
            # a window not yet watched in full: what was not watched counts as no demand
            # when growing past the ready nodes, so one busy sample right after the start
            # weighs what it would weigh later (module contract, "Young windows")
            watched = now - self.first_sample + cfg.tick
            stable_count = min(stable_count, max(ready, math.ceil(
                stable * min(1.0, watched / cfg.stable_window) / capacity - 1e-9)))
            panic_count = min(panic_count, max(ready, math.ceil(
                panic * min(1.0, watched / cfg.panic_window) / capacity - 1e-9)))

        if panic_count > ready and panic_count >= cfg.panic_threshold * max(1, ready):
            self.last_panic = now
        if self.panicking(now):
            desired = max(panic_count, stable_count, self.panic_desired)
            self.panic_desired = desired
            why = (f"panic: demand {panic:.1f} busy workers over the last "
                   f"{cfg.panic_window:g} s needs {panic_count} nodes of {workers:g} workers at "
                   f"{cfg.target_utilisation:g} utilisation, {ready} ready")
        else:
            self.panic_desired = 0
            desired = max(stable_count, math.floor(ready / cfg.max_scale_down_rate))
            why = (f"demand {stable:.1f} busy workers over the last {cfg.stable_window:g} s "
                   f"needs {stable_count} nodes of {workers:g} workers at "
                   f"{cfg.target_utilisation:g} utilisation, {ready} ready")
        desired = min(desired, math.ceil(cfg.max_scale_up_rate * max(1, ready)))
        self.desired_history.append((now, desired))
        while self.desired_history and now - self.desired_history[0][0] > cfg.scale_down_delay:
            self.desired_history.popleft()
        if desired < ready and self.desired_history:
            desired = max(desired, max(d for _, d in self.desired_history))
        desired = max(desired, cfg.min_nodes)
        actions: List[Action] = []
        supply = ready + len(self.pending_adds)
        if cfg.max_nodes is not None and desired > cfg.max_nodes:
            if supply < desired:
                notes.append(Note(f"wanted {desired} executor nodes, max_nodes is "
                                  f"{cfg.max_nodes}: {why}"))
            desired = cfg.max_nodes
        if desired > supply:
            self._scale_out(desired - supply, sample, why, now, actions, notes)
        elif desired < ready:
            self._scale_in(ready - desired, active, why, now, actions, notes)
        if not self.panicking(now):
            self._remove_drained(nodes, now, actions)
        return actions + notes

    # ---- steps ------------------------------------------------------------------------

    def _reconcile(self, sample: ExecutorSample, now: float) -> List[Action]:
        """Joins use up pending additions; vanished nodes end drains and removals."""
        ids = {n.node_id for n in sample.nodes}
        if self.known is not None:
            for _ in ids - self.known:
                if self.pending_adds:
                    self.pending_adds.pop(0)
            for node_id in self.known - ids:
                self.draining.pop(node_id, None)
                self.removing.pop(node_id, None)
        self.known = ids
        notes: List[Action] = []
        timeout = self.config.pending_node_timeout
        late = [t for t in self.pending_adds if now - t >= timeout]
        if late:
            self.pending_adds = [t for t in self.pending_adds if now - t < timeout]
            notes.append(Note(f"{len(late)} executor node(s) requested {now - min(late):.0f} s "
                              f"ago never appeared; no longer counted as pending"))
        for node_id, since in list(self.removing.items()):
            if now - since >= timeout:
                del self.removing[node_id]
                notes.append(Note(f"executor node {node_id} was removed {now - since:.0f} s ago "
                                  f"and still reports; it counts as draining again"))
                self.draining[node_id] = now
        return notes

    def _scale_out(self, need: int, sample: ExecutorSample, why: str, now: float,
                   actions: List[Action], notes: List[Action]) -> None:
        for node_id in sorted(self.draining, key=lambda n: -self.draining[n]):
            if need <= 0:
                break
            del self.draining[node_id]
            need -= 1
            actions.append(Undrain(node_id, f"took back draining executor node {node_id}: {why}"))
        if need <= 0:
            return
        if self.config.max_nodes is not None:
            running = len(sample.nodes) + len(self.pending_adds)
            room = max(0, self.config.max_nodes - running)
            if room < need:
                notes.append(Note(f"wanted {need} more executor nodes, max_nodes "
                                  f"{self.config.max_nodes} allows {room} ({running} running or "
                                  f"pending)"))
            need = min(need, room)
        if need > 0:
            actions.append(AddNodes(EXECUTORS, need, f"added {need} executor node(s): {why}"))
            self.pending_adds.extend([now] * need)

    def _scale_in(self, surplus: int, active: Sequence[ExecutorNodeStats], why: str, now: float,
                  actions: List[Action], notes: List[Action]) -> None:
        if self.panicking(now):
            notes.append(Note(f"held scale-in of {surplus} executor node(s): panic mode until "
                              f"t={self.last_panic + self.config.stable_window:.1f}"))
            return
        if self.pending_adds:
            notes.append(Note(f"held scale-in of {surplus} executor node(s): "
                              f"{len(self.pending_adds)} requested nodes have not appeared"))
            return
        surplus = min(surplus, len(active) - self.config.min_nodes)
        idlest = sorted(active, key=lambda n: (max(0, n.in_flight) + max(0, n.queued),
                                               n.utilisation, n.node_id))
        for n in idlest[:max(0, surplus)]:
            self.draining[n.node_id] = now
            actions.append(Drain(n.node_id, f"drained executor node {n.node_id} ({n.in_flight} "
                                            f"calls in flight, {n.queued} queued, busy "
                                            f"{n.utilisation:.2f}): {why}"))

    def _remove_drained(self, nodes: Dict[str, ExecutorNodeStats], now: float,
                        actions: List[Action]) -> None:
        for node_id, since in sorted(self.draining.items()):
            n = nodes.get(node_id)
            if n is None or since == now:
                continue
            if n.draining and n.in_flight == 0 and n.queued == 0:
                del self.draining[node_id]
                self.removing[node_id] = now
                actions.append(Remove(node_id, f"removed executor node {node_id}: drained, no "
                                               f"call in flight or queued"))
            elif not n.draining and now - since >= self.config.drain_retry:
                self.draining[node_id] = now
                actions.append(Drain(node_id, f"drained executor node {node_id} again: it has "
                                              f"not acknowledged the drain sent "
                                              f"{now - since:.1f} s ago"))
