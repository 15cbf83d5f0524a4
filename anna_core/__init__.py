"""Anna: a lattice key-value store with a C++ shared-nothing kernel (see DESIGN.md).

What users import:
- `Client`: key operations against a running cluster (`get`, `put`, `delete`, `get_all`,
  `put_all`, `subscribe`, `set_replication`); `Subscription` receives pushed updates.
- `LocalCluster`: routing and KVS nodes as local processes, for tests, demos and benchmarks.
- The lattices (merges implemented once, in the C++ kernel): `LWWLattice`, `SetLattice`,
  `OrderedSetLattice`, `MaxLattice`, `MapLattice`, `PriorityLattice`,
  `SingleKeyCausalLattice`, `MultiKeyCausalLattice`, and `deserialize`; the vector-clock
  order and merge `compare_clocks` (0 equal, 1 before, 2 after, 3 concurrent), `clock_supersedes`
  and `merge_clocks`.
- Typed errors: `AnnaError` and its subclasses.
- Configuration objects: `Replication`, `NodeConfig`, `RoutingConfig`, `ClusterConfig`;
  `check_write_quorum` (a put's write quorum: "one", "all" or n replicas).
"""
from ._core import (LWWLattice, MapLattice, MaxLattice, MultiKeyCausalLattice,
                    OrderedSetLattice, PriorityLattice, SetLattice, SingleKeyCausalLattice,
                    clock_supersedes, compare_clocks, deserialize, merge_clocks)
from .client import Client, Subscription, Update
from .cluster import LocalCluster
from .config import ClusterConfig, NodeConfig, Replication, RoutingConfig, check_write_quorum
from .errors import (AnnaError, DiskFull, KeyNotFound, LatticeTypeMismatch, LeaveFailed,
                     MalformedRequest, NoNodes, NotPermitted, StartupError, StoreFailed, Timeout,
                     UnknownLatticeType, ValueTooLarge, WrongOwner)

__all__ = [
    "Client", "Subscription", "Update", "LocalCluster",
    "LWWLattice", "SetLattice", "OrderedSetLattice", "MaxLattice", "MapLattice",
    "PriorityLattice", "SingleKeyCausalLattice", "MultiKeyCausalLattice", "deserialize",
    "compare_clocks", "clock_supersedes", "merge_clocks",
    "AnnaError", "KeyNotFound", "LatticeTypeMismatch", "ValueTooLarge", "UnknownLatticeType",
    "MalformedRequest", "NoNodes", "Timeout", "WrongOwner", "StoreFailed", "DiskFull",
    "NotPermitted", "StartupError", "LeaveFailed", "Replication", "NodeConfig", "RoutingConfig",
    "ClusterConfig", "check_write_quorum",
]
