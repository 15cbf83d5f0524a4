"""Every knob of Anna's autoscaling policy, in one immutable object (dissertation 3.3, Table 3.2).

Contract:
- `PolicyConfig` holds the SLO spec (latency objective, cost budget, fault tolerance k) and
  every policy knob of Algorithms 1-5. It validates itself on construction (ValueError naming
  the field) and never changes afterwards; `dataclasses.replace(config, ...)` makes a variant.
- `PolicyConfig()` is the **local** default: the paper's thresholds with time compressed
  tenfold (monitoring period 1.5 s instead of 15 s, grace period 12 s instead of 120 s), sized
  for a `LocalCluster` on one machine (one replica per key, k = 0, no disk tier required).
- `PolicyConfig.paper()` is the configuration the paper evaluated (Table 3.2 and 3.5).
- Helpers answer per tier: `node_cost(tier)`, `storage_bounds(tier)`, `min_nodes(tier)`,
  `base_replication()` (the vector hot keys return to), `demoted_replication()`.
Times are seconds, sizes bytes, costs "cost units per node-hour" (any currency).

Where each value comes from (sections of the dissertation's chapter 3; the autoscaling Anna
paper has the same table):

| knob | paper | local | source |
|---|---|---|---|
| `latency_slo` (L_obj) | 2.5 ms | 2.5 ms | Table 3.2; 3.5.4 used 3.3 ms (33 % above unsaturated) |
| `latency_statistic` | mean | mean | 3.3: "average request latency" |
| `max_cost` (B) | None | None | 3.3: set either a latency SLO or a budget |
| `fault_tolerance` (k) | 2 | 0 | Table 3.2; local clusters keep one replica per key |
| `memory_node_cost` / `disk_node_cost` | 4 / 1 | 4 / 1 | 3.3.3: a memory node serves 15x the requests at 4x the cost (r4.2xlarge $0.532/h vs r4.large $0.133/h) |
| `fixed_cost` | 0 | 0 | 3.5: the paper's costs include routing and monitoring nodes; put theirs here |
| `min_memory_nodes` | 1 | 1 | 3.3.3: one memory node for metadata |
| `min_disk_nodes` | k + 1 = 3 | 0 | 3.3.3: k + 1 disk nodes; a local cluster may run without a disk tier |
| `memory_storage_bounds` (S_lower, S_upper) | (0.3, 0.6) | (0.3, 0.6) | Table 3.2 |
| `disk_storage_bounds` | (0.5, 0.75) | (0.5, 0.75) | Table 3.2 |
| `memory_target_occupancy` | 0.6 | 0.6 | = memory S_upper, as the original monitor fills memory (3.3.1) |
| `latency_bounds` (f_lower, f_upper) | (0.5, 0.75) | (0.5, 0.75) | 3.3.4, Table 3.2 |
| `compute_bounds` (C_lower, C_upper) | (0.05, 0.20) | (0.05, 0.20) | 3.3.4, Table 3.2 (tuned for network-bound EC2 nodes; re-measure) |
| `max_latency_ratio` (c) | 1.5 | 1.5 | 3.3.3, Table 3.2 |
| `hot_key_std_devs` (s, H = mean + s std) | 3 | 3 | 3.3.2, Table 3.2 |
| `cold_key_mean_fraction` (L = fraction x mean) | 1.0 | 1.0 | Table 3.2: L is the mean |
| `hot_key_min_accesses` | 0 | 10 | ours: a floor so a handful of accesses is never "hot" |
| `promote_accesses` / `promote_window` (P) | 2 in 60 s | 2 in 6 s | Table 3.2 |
| `demote_accesses` (D, same window) | 1 | 1 | 3.3.1 names D without a value; ours: half of P |
| `monitoring_period` (T) | 15 s | 1.5 s | Table 3.2 |
| `grace_period` | 120 s | 12 s | 3.3.3 (no value given); 120 s in the original Anna monitor |
| `pending_node_timeout` | 600 s | 30 s | ours: nodes took ~5 min to join on EC2 (3.5.4) |
| `replication_cooldown` | 30 s | 3 s | ours: two periods of fresh statistics per key change |
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Tuple, Union

from ..config import DISK, MEMORY, Replication, tier_name

__all__ = ["PolicyConfig", "TIERS"]

TIERS: Tuple[str, str] = (MEMORY, DISK)


def _check_bounds(name: str, bounds: Tuple[float, float], upper_limit: float = 1.0) -> None:
    if len(bounds) != 2:
        raise ValueError(f"PolicyConfig.{name} must be (lower, upper), got {bounds!r}")
    lower, upper = bounds
    if not 0.0 <= lower < upper <= upper_limit:
        raise ValueError(f"PolicyConfig.{name} must satisfy 0 <= lower < upper <= "
                         f"{upper_limit:g}, got {bounds!r}")


@dataclass(frozen=True)
class PolicyConfig:
    """The SLO spec and every knob of Anna's policy engine (see the module table).

    SLO spec (3.3):
        latency_slo: L_obj, the latency objective (s). With only a budget set, the paper
            aims at the unsaturated latency, 2.5 ms (3.3.5); so this always has a value.
        latency_statistic: which client statistic is compared with the SLO: "mean" (the
            paper's average request latency, weighted by requests) or "p99" (the worst
            client's 99th percentile, a conservative upper bound).
        max_cost: B, the cost budget in cost units per hour (None: unlimited). Node costs
            are `memory_node_cost` / `disk_node_cost` per node-hour.
        max_nodes: a budget in nodes, over both tiers (None: unlimited). Both budgets hold.
        fixed_cost: cost units per hour of what the policy does not scale (routing,
            monitoring), counted against `max_cost`.
        fault_tolerance: k; every key keeps k + 1 replicas over both tiers (3.2.7).
    Tiers:
        min_memory_nodes, min_disk_nodes: node removal never goes below these (3.3.3).
        memory_storage_bounds, disk_storage_bounds: (S_lower, S_upper), fractions of the
            tier's storage capacity: above S_upper nodes are added (both tiers), below
            S_lower disk nodes are removed (memory scales down on compute only, 3.3.3).
        memory_target_occupancy: promotion fills the memory tier up to this fraction of its
            capacity; above it, cold keys are demoted when no memory node can be added.
    Latency and compute (3.3.4):
        latency_bounds: (f_lower, f_upper) as fractions of `latency_slo`.
        compute_bounds: (C_lower, C_upper), the busy fraction of the *least* occupied memory
            node: above C_upper every node is busy (add nodes), below C_lower one is idle.
        max_latency_ratio: c, caps L_obs / L_obj when sizing additions and replication.
    Keys (3.3.1, 3.3.2):
        hot_key_std_devs: s; a key is hot above H = mean + s x std of per-key accesses.
        cold_key_mean_fraction: a replicated key is cold below L = fraction x mean.
        hot_key_min_accesses: a key with fewer accesses in a period is never hot.
        promote_accesses, demote_accesses, promote_window: P and D, accesses per
            `promote_window` seconds (compared as rates, so any period T works).
        max_memory_replication: caps a key's memory replicas (None: the memory node count).
        max_key_actions: at most this many replication changes per decision (bounded output).
        max_tracked_keys: the engine remembers the replication it set for at most this many
            keys (least recently changed forgotten first).
        replication_cooldown: a key's replication is not changed again sooner than this.
    Time:
        monitoring_period: T, how often statistics are summarised and `decide` runs.
        grace_period: after a node action or a membership change, no node action, demotion
            or hot-key (de)replication until this has passed (3.3.3).
        pending_node_timeout: requested nodes that have not joined by then stop counting
            as pending (the cluster manager failed to start them).
    Switches (the original monitor's kEnable* flags; 3.5.5 disables elasticity):
        tiering, selective_replication, elasticity.
    """

    latency_slo: float = 0.0025
    latency_statistic: str = "mean"
    max_cost: Optional[float] = None
    max_nodes: Optional[int] = None
    fault_tolerance: int = 0
    memory_node_cost: float = 4.0
    disk_node_cost: float = 1.0
    fixed_cost: float = 0.0
    min_memory_nodes: int = 1
    min_disk_nodes: int = 0
    memory_storage_bounds: Tuple[float, float] = (0.3, 0.6)
    disk_storage_bounds: Tuple[float, float] = (0.5, 0.75)
    memory_target_occupancy: float = 0.6
    latency_bounds: Tuple[float, float] = (0.5, 0.75)
    compute_bounds: Tuple[float, float] = (0.05, 0.20)
    max_latency_ratio: float = 1.5
    hot_key_std_devs: float = 3.0
    cold_key_mean_fraction: float = 1.0
    hot_key_min_accesses: int = 10
    promote_accesses: float = 2.0
    demote_accesses: float = 1.0
    promote_window: float = 6.0
    max_memory_replication: Optional[int] = None
    max_key_actions: int = 100
    max_tracked_keys: int = 10_000
    replication_cooldown: float = 3.0
    monitoring_period: float = 1.5
    grace_period: float = 12.0
    pending_node_timeout: float = 30.0
    tiering: bool = True
    selective_replication: bool = True
    elasticity: bool = True

    @classmethod
    def paper(cls, **overrides: object) -> "PolicyConfig":
        """The values the paper evaluated (Table 3.2, 3.5), with `overrides` applied."""
        values = dict(fault_tolerance=2, min_disk_nodes=3, hot_key_min_accesses=0,
                      promote_window=60.0, replication_cooldown=30.0, monitoring_period=15.0,
                      grace_period=120.0, pending_node_timeout=600.0)
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        positive = ("latency_slo", "monitoring_period", "promote_window",
                    "pending_node_timeout")
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"PolicyConfig.{name} must be a finite number > 0, got {value!r}")
        non_negative = ("memory_node_cost", "disk_node_cost", "fixed_cost", "grace_period",
                        "replication_cooldown", "hot_key_std_devs", "cold_key_mean_fraction",
                        "promote_accesses", "demote_accesses")
        for name in non_negative:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"PolicyConfig.{name} must be a finite number >= 0, got {value!r}")
        counts = ("fault_tolerance", "min_memory_nodes", "min_disk_nodes",
                  "hot_key_min_accesses")
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"PolicyConfig.{name} must be an int >= 0, got {value!r}")
        for name in ("max_key_actions", "max_tracked_keys"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PolicyConfig.{name} must be an int >= 1, got {value!r}")
        if self.latency_statistic not in ("mean", "p99"):
            raise ValueError(f"PolicyConfig.latency_statistic must be 'mean' or 'p99', got "
                             f"{self.latency_statistic!r}")
        if self.max_cost is not None and not (math.isfinite(self.max_cost) and self.max_cost >= 0):
            raise ValueError(f"PolicyConfig.max_cost must be None or >= 0, got {self.max_cost!r}")
        for name in ("max_nodes", "max_memory_replication"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"PolicyConfig.{name} must be None or an int >= 1, got {value!r}")
        _check_bounds("memory_storage_bounds", self.memory_storage_bounds)
        _check_bounds("disk_storage_bounds", self.disk_storage_bounds)
        _check_bounds("latency_bounds", self.latency_bounds, upper_limit=math.inf)
        _check_bounds("compute_bounds", self.compute_bounds)
        if not 0 < self.memory_target_occupancy <= self.memory_storage_bounds[1]:
            raise ValueError("PolicyConfig.memory_target_occupancy must be in (0, memory S_upper "
                             f"{self.memory_storage_bounds[1]:g}], got "
                             f"{self.memory_target_occupancy!r}")
        if not self.max_latency_ratio > 1:
            raise ValueError(f"PolicyConfig.max_latency_ratio must be > 1, got "
                             f"{self.max_latency_ratio!r}")
        if self.demote_accesses > self.promote_accesses:
            raise ValueError("PolicyConfig.demote_accesses must not exceed promote_accesses "
                             "(a key would be promoted and demoted at once)")
        if self.min_memory_nodes < 1:
            raise ValueError("PolicyConfig.min_memory_nodes must be >= 1: the memory tier "
                             "holds the metadata (3.3.3)")

    # ---- per-tier answers -----------------------------------------------------------

    def node_cost(self, tier: Union[str, int]) -> float:
        """Cost units per node-hour of `tier`."""
        return self.memory_node_cost if tier_name(tier) == MEMORY else self.disk_node_cost

    def storage_bounds(self, tier: Union[str, int]) -> Tuple[float, float]:
        """(S_lower, S_upper) of `tier`."""
        return (self.memory_storage_bounds if tier_name(tier) == MEMORY
                else self.disk_storage_bounds)

    def min_nodes(self, tier: Union[str, int]) -> int:
        """The fewest nodes `tier` may keep."""
        return self.min_memory_nodes if tier_name(tier) == MEMORY else self.min_disk_nodes

    def base_replication(self) -> Replication:
        """Where a hot key returns once cold: one memory replica, k disk replicas, one
        thread each (Algorithm 2 line 10)."""
        return Replication(memory_global=1, memory_local=1, disk_global=self.fault_tolerance,
                           disk_local=1)

    def demoted_replication(self) -> Replication:
        """A demoted key: no memory replica, k + 1 disk replicas (Algorithm 1 line 4)."""
        return Replication(memory_global=0, memory_local=1,
                           disk_global=self.fault_tolerance + 1, disk_local=1)

    def promote_rate(self) -> float:
        """P as accesses per second."""
        return self.promote_accesses / self.promote_window

    def demote_rate(self) -> float:
        """D as accesses per second."""
        return self.demote_accesses / self.promote_window

    def with_(self, **changes: object) -> "PolicyConfig":
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
