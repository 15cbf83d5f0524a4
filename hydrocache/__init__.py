"""HydroCache: transactional causal consistency for Cloudburst (dissertation chapter 4).

The pure cores (no sockets, clocks or sleeps) and their public names; see DESIGN.md.
``NodeCache`` is a node cache's causal side as a state machine; ``hydrocache.service`` runs it
with sockets and Anna's client (and imports what it needs from the modules directly).
"""
from .checker import Observed, Transaction, Violation, check
from .cut import CutUpdate, StrictCausalCut
from .gc import collect, stable_frontier
from .lru import ByteLru
from .node_cache import NodeCache
from .protocols import (LinearPlan, Piece, SimResult, create_snapshot, distributed_snapshot,
                        finish_linear, parallel_flow, plan_linear, retrieve_cut, simulate_opt)
from .vclock import Order, compare, concurrent, happens_before, merge, supersedes
from .version import Version, merge_versions, version_supersedes
from .versionset import (Entry, VersionSet, from_proto, intersect, not_superseding, of_versions,
                         set_supersedes, to_proto, union)
from .writer import ExecutorWriter

__all__ = [
    "Order", "compare", "merge", "happens_before", "concurrent", "supersedes",
    "Version", "merge_versions", "version_supersedes",
    "Entry", "VersionSet", "union", "intersect", "not_superseding", "set_supersedes",
    "of_versions", "to_proto", "from_proto",
    "CutUpdate", "StrictCausalCut",
    "retrieve_cut", "LinearPlan", "plan_linear", "finish_linear", "parallel_flow", "Piece",
    "create_snapshot", "distributed_snapshot", "SimResult", "simulate_opt",
    "ExecutorWriter", "stable_frontier", "collect", "ByteLru", "NodeCache",
    "Observed", "Transaction", "Violation", "check",
]
