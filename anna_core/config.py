"""Configuration objects for the Anna processes. Passed in explicitly: no globals, no fixed ports.

Contract:
- `Replication` is a key's replication vector (dissertation 3.2.3): nodes per tier
  (`memory_global`, `disk_global`) and threads per node (`memory_local`, `disk_local`).
- `NodeConfig` holds exactly the keys of the kernel's `_core.Node(config_json)`
  (DESIGN.md "Node config keys"); `to_json()` produces that JSON.
- `RoutingConfig` configures one routing process; `port=0` binds a free port.
- `ClusterConfig` describes a `LocalCluster` (number of nodes and threads per tier, ...).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["Replication", "NodeConfig", "RoutingConfig", "ClusterConfig", "MEMORY", "DISK",
           "tier_number", "tier_name", "DEFAULT_MAX_VALUE_BYTES"]

MEMORY = "memory"
DISK = "disk"
_TIERS = {MEMORY: 0, DISK: 1}
DEFAULT_MAX_VALUE_BYTES = 64 * 1024 * 1024


def tier_number(tier: Union[str, int]) -> int:
    """The `anna.Tier` number of a tier given by name ("memory"/"disk") or number."""
    if isinstance(tier, int):
        if tier not in (0, 1):
            raise ValueError(f"unknown tier number {tier}")
        return tier
    try:
        return _TIERS[tier]
    except KeyError:
        raise ValueError(f"unknown tier {tier!r}; expected 'memory' or 'disk'") from None


def tier_name(tier: Union[str, int]) -> str:
    """The name ("memory"/"disk") of a tier given by name or `anna.Tier` number."""
    return MEMORY if tier_number(tier) == 0 else DISK


@dataclass(frozen=True)
class Replication:
    """A replication vector: replicas per tier (global) and threads per node (local)."""

    memory_global: int = 1
    memory_local: int = 1
    disk_global: int = 0
    disk_local: int = 1

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"Replication.{f.name} must be an int >= 0, got {value!r}")

    def as_tuple(self) -> Tuple[int, int, int, int]:
        """(memory_global, memory_local, disk_global, disk_local), as `_core.ClusterMap` takes it."""
        return (self.memory_global, self.memory_local, self.disk_global, self.disk_local)

    @classmethod
    def coerce(cls, value: Union["Replication", Sequence[int], Mapping[str, int]]) -> "Replication":
        """Accept a Replication, a 4-tuple in `as_tuple()` order, or a dict of field names."""
        if isinstance(value, Replication):
            return value
        if isinstance(value, Mapping):
            return cls(**value)
        values = tuple(value)
        if len(values) != 4:
            raise ValueError(f"a replication vector has 4 numbers, got {values!r}")
        return cls(*values)

    def to_proto(self) -> Any:
        """This vector as an `anna.Replication` message."""
        from hydro_proto import anna_pb2
        return anna_pb2.Replication(memory_global=self.memory_global,
                                    memory_local=self.memory_local,
                                    disk_global=self.disk_global, disk_local=self.disk_local)

    @classmethod
    def from_proto(cls, message: Any) -> "Replication":
        """Read an `anna.Replication` message."""
        return cls(message.memory_global, message.memory_local, message.disk_global,
                   message.disk_local)


@dataclass
class NodeConfig:
    """One KVS node: `threads` worker threads in `tier`, bound on `ip` (free ports)."""

    node_id: str
    tier: str = MEMORY
    threads: int = 1
    ip: str = "127.0.0.1"
    data_dir: Optional[str] = None
    gossip_period_ms: int = 100
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    pin_threads: bool = True
    log_level: str = "warning"

    def __post_init__(self) -> None:
        self.tier = tier_name(self.tier)
        if self.threads < 1:
            raise ValueError(f"NodeConfig.threads must be >= 1, got {self.threads}")
        if self.tier == DISK and not self.data_dir:
            raise ValueError(f"disk node {self.node_id!r} needs a data_dir")

    def to_dict(self) -> dict:
        """The node's configuration as a plain dict (the kernel's config keys)."""
        d = dataclasses.asdict(self)
        if d["data_dir"] is None:
            d["data_dir"] = ""
        return d

    def to_json(self) -> str:
        """The JSON string `_core.Node(config_json)` takes."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "NodeConfig":
        """Inverse of `to_json()`; unknown keys are rejected."""
        d = json.loads(text)
        if d.get("data_dir") == "":
            d["data_dir"] = None
        return cls(**d)


@dataclass
class RoutingConfig:
    """One routing process: bound on tcp://ip:port (port 0 = a free port)."""

    ip: str = "127.0.0.1"
    port: int = 0
    default_replication: Replication = field(default_factory=Replication)
    vnodes: int = 64
    log_level: str = "warning"

    def __post_init__(self) -> None:
        self.default_replication = Replication.coerce(self.default_replication)

    @property
    def bind_address(self) -> str:
        """The ZMQ endpoint to bind (`tcp://ip:*` when port is 0)."""
        return f"tcp://{self.ip}:{self.port if self.port else '*'}"


@dataclass
class ClusterConfig:
    """A local cluster: `nodes` memory nodes (and as many disk nodes if disk_threads > 0)."""

    memory_threads: int = 1
    disk_threads: int = 0
    nodes: int = 1
    data_dir: Optional[str] = None
    gossip_period_ms: int = 100
    replication: Optional[Replication] = None
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    ip: str = "127.0.0.1"
    pin_threads: Optional[bool] = None
    startup_timeout: float = 30.0
    stop_timeout: float = 10.0
    vnodes: int = 64
    log_level: str = "warning"

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"ClusterConfig.nodes must be >= 1, got {self.nodes}")
        if self.memory_threads < 0 or self.disk_threads < 0:
            raise ValueError("thread counts must be >= 0")
        if self.memory_threads == 0 and self.disk_threads == 0:
            raise ValueError("a cluster needs memory_threads > 0 or disk_threads > 0")
        if self.replication is not None:
            self.replication = Replication.coerce(self.replication)

    @property
    def memory_nodes(self) -> int:
        """Number of memory-tier nodes."""
        return self.nodes if self.memory_threads > 0 else 0

    @property
    def disk_nodes(self) -> int:
        """Number of disk-tier nodes."""
        return self.nodes if self.disk_threads > 0 else 0

    def effective_replication(self) -> Replication:
        """The default replication vector: one replica in each tier that has nodes."""
        if self.replication is not None:
            return self.replication
        return Replication(memory_global=1 if self.memory_nodes else 0, memory_local=1,
                           disk_global=1 if self.disk_nodes else 0, disk_local=1)

    def effective_pin_threads(self) -> bool:
        """Pin worker threads only when asked, or by default when a single node runs here."""
        if self.pin_threads is not None:
            return self.pin_threads
        return self.memory_nodes + self.disk_nodes == 1
