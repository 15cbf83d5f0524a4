"""Sizing node additions and removals, and the cost budget (Algorithms 3 and 4), pure.

Contract:
- `nodes_for_storage(stored, node_capacity, fraction)`: the fewest nodes holding `stored`
  bytes with each node filled to at most `fraction` of `node_capacity` (required_storage).
- `compute_target(nodes, ratio, cap)`: Algorithm 3 line 7, N_target = ceil(N x min(ratio, c)),
  and never fewer than N + 1 (the dissertation enters at f_upper x L_obj, where the ratio
  may be below 1 and the formula alone would add nothing).
- `Budget(config)`: the cost of a node layout ({tier: nodes}), how many nodes of a tier may
  still be added without passing `max_cost` or `max_nodes` (`affordable`), and whether a
  layout is over budget (`over`, a sentence or "").
- `reduce_for_removal(replications, tier, nodes_after, config, disk_nodes)`: the vectors the
  keys must take before a node of `tier` leaves (Algorithm 4, reduce_replication): a key
  with more global replicas in `tier` than `nodes_after` is cut to `nodes_after`, and when
  that leaves it fewer than k + 1 replicas over both tiers, the other tier makes up the
  difference as far as its nodes allow.
Nothing here keeps state or reads a clock.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, Mapping, Optional

from ..config import DISK, MEMORY, Replication
from .policy_config import TIERS, PolicyConfig

__all__ = ["nodes_for_storage", "compute_target", "Budget", "reduce_for_removal"]


def nodes_for_storage(stored: float, node_capacity: Optional[float], fraction: float) -> int:
    """Nodes needed so `stored` bytes fill each node to at most `fraction` of its capacity
    (0 when the capacity is unknown)."""
    if not node_capacity or node_capacity <= 0 or stored <= 0:
        return 0
    return int(math.ceil(stored / (fraction * node_capacity) - 1e-9))


def compute_target(nodes: int, ratio: float, cap: float) -> int:
    """Algorithm 3 line 7: ceil(nodes x min(ratio, cap)), at least nodes + 1."""
    return max(nodes + 1, int(math.ceil(max(1, nodes) * min(ratio, cap) - 1e-9)))


class Budget:
    """The cost budget: `max_cost` cost units per hour and `max_nodes` nodes (both optional)."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config

    def cost(self, layout: Mapping[str, int]) -> float:
        """Cost units per hour of `layout` ({tier: nodes}), with the fixed cost."""
        return self.config.fixed_cost + sum(self.config.node_cost(t) * layout.get(t, 0)
                                            for t in TIERS)

    def affordable(self, layout: Mapping[str, int], tier: str, wanted: int) -> int:
        """How many of `wanted` more `tier` nodes fit the budget on top of `layout`."""
        allowed = max(0, wanted)
        if self.config.max_nodes is not None:
            allowed = min(allowed, self.config.max_nodes - sum(layout.get(t, 0) for t in TIERS))
        unit = self.config.node_cost(tier)
        if self.config.max_cost is not None and unit > 0:
            room = self.config.max_cost - self.cost(layout)
            allowed = min(allowed, int(math.floor(room / unit + 1e-9)))
        return max(0, allowed)

    def over(self, layout: Mapping[str, int]) -> str:
        """Why `layout` is over budget, or "" when it is within it."""
        total = sum(layout.get(t, 0) for t in TIERS)
        if self.config.max_nodes is not None and total > self.config.max_nodes:
            return f"{total} nodes > budget of {self.config.max_nodes} nodes"
        cost = self.cost(layout)
        if self.config.max_cost is not None and cost > self.config.max_cost + 1e-9:
            return f"cost {cost:g}/h > budget {self.config.max_cost:g}/h"
        return ""

    def describe(self, layout: Mapping[str, int]) -> str:
        """The layout's cost against the budget, for reasons."""
        parts = [f"{layout.get(MEMORY, 0)} memory + {layout.get(DISK, 0)} disk nodes "
                 f"cost {self.cost(layout):g}/h"]
        if self.config.max_cost is not None:
            parts.append(f"budget {self.config.max_cost:g}/h")
        if self.config.max_nodes is not None:
            parts.append(f"at most {self.config.max_nodes} nodes")
        return ", ".join(parts)


def reduce_for_removal(replications: Mapping[str, Replication], tier: str, nodes_after: int,
                       config: PolicyConfig, disk_nodes: int,
                       memory_nodes: Optional[int] = None) -> Dict[str, Replication]:
    """The new vectors of the keys whose `tier` replication exceeds `nodes_after`."""
    wanted = config.fault_tolerance + 1
    out: Dict[str, Replication] = {}
    for key, r in replications.items():
        if tier == MEMORY and r.memory_global > nodes_after:
            memory = max(0, nodes_after)
            disk = r.disk_global
            if memory + disk < wanted:
                disk = max(disk, min(disk_nodes, wanted - memory))
            out[key] = dataclasses.replace(r, memory_global=memory, disk_global=disk)
        elif tier == DISK and r.disk_global > nodes_after:
            disk = max(0, nodes_after)
            memory = r.memory_global
            if memory + disk < wanted and memory_nodes is not None:
                memory = max(memory, min(memory_nodes, wanted - disk))
            out[key] = dataclasses.replace(r, memory_global=memory, disk_global=disk)
    return out
