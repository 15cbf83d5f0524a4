"""Configuration objects for the Anna processes. Passed in explicitly: no globals, no fixed ports.

Contract:
- `Replication` is a key's replication vector (dissertation 3.2.3): nodes per tier
  (`memory_global`, `disk_global`) and threads per node (`memory_local`, `disk_local`).
- `NodeConfig` is the "anna node" role's configuration object (`runtime.config`: `python -m
  anna_core.node --config PATH|JSON`, every field a flag that overrides it). It holds the
  keys of the kernel's `_core.Node(config_json)` (DESIGN.md "Node config keys"), `key_dir`,
  the directory of the cluster's CURVE keys (None: authentication off), and the process'
  own settings (`PROCESS_FIELDS`: its routings, join, heartbeat, leave and report periods).
  `to_json()` is the whole configuration; it never holds a key. `kernel_json(credentials)`
  is what `_core.Node` takes: the kernel's keys only, plus, with credentials
  (`runtime.auth.Credentials`, loaded from `key_dir` inside the node process), the node's
  CURVE key pair and the keys it admits with their roles (`curve_public_key`,
  `curve_secret_key`, `curve_admitted`). Secret keys therefore never travel on a command
  line; `from_json` refuses key material. A bad field raises `runtime.config.ConfigError`
  naming the role and the field.
- `disk_sync` (NodeConfig and ClusterConfig) says when a disk node fsyncs its write-ahead
  log: "interval" (the default: at most every `disk_sync_interval_ms`, 1000; a group commit
  as Redis's appendfsync everysec), "always" (before every write is acknowledged) or "none"
  (left to the OS). Every mode survives a process crash; only "always" keeps every
  acknowledged write through an OS crash or power loss (anna_core/DESIGN.md "Durability").
- `RoutingConfig` is the "routing" role's configuration object (`python -m anna_core.routing
  --config PATH|JSON`); `port=0` binds a free port; failure detection knobs
  (`heartbeat_period` 1.0 s, `heartbeat_timeout` 3.0 s, `recovery_period`).
- `ClusterConfig` describes a `LocalCluster` (nodes and threads per tier, routers, heartbeat
  and leave knobs, fault tolerance).
- A write quorum (`check_write_quorum`) says when a client's put is acknowledged: `"one"`
  (one replica; gossip spreads the write), `"all"` (every replica of the key's current
  placement, in every tier) or an int n >= 1 (n of them; all when the key has fewer).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, List, Mapping, Optional, Sequence, Tuple, Union

from runtime.config import ConfigError, from_dict, knob, to_dict

__all__ = ["Replication", "NodeConfig", "RoutingConfig", "ClusterConfig", "MEMORY", "DISK",
           "tier_number", "tier_name", "DEFAULT_MAX_VALUE_BYTES", "DEFAULT_HEARTBEAT_PERIOD",
           "DEFAULT_HEARTBEAT_TIMEOUT", "DEFAULT_LEAVE_TIMEOUT", "WriteQuorum", "ONE", "ALL",
           "check_write_quorum", "DISK_SYNC_MODES", "DEFAULT_DISK_SYNC",
           "DEFAULT_DISK_SYNC_INTERVAL_MS", "check_disk_sync", "PROCESS_FIELDS"]

MEMORY = "memory"
DISK = "disk"
_TIERS = {MEMORY: 0, DISK: 1}
DEFAULT_MAX_VALUE_BYTES = 64 * 1024 * 1024
# Bounds of a non-zero NodeConfig.service_rate (the kernel checks the same: node_config.hpp).
_MIN_SERVICE_RATE = 0.001
_MAX_SERVICE_RATE = 1e9


DEFAULT_HEARTBEAT_PERIOD = 1.0
DEFAULT_HEARTBEAT_TIMEOUT = 3.0
DEFAULT_LEAVE_TIMEOUT = 30.0

# When a disk node fsyncs its write-ahead log (the kernel reads the same names: store.hpp).
DISK_SYNC_MODES = ("none", "interval", "always")
DEFAULT_DISK_SYNC = "interval"
DEFAULT_DISK_SYNC_INTERVAL_MS = 1000


def check_disk_sync(owner: str, mode: Any, interval_ms: Any) -> None:
    """Raise ValueError naming `owner` unless `mode` is one of DISK_SYNC_MODES and
    `interval_ms` an int in [1, 3600000]."""
    if mode not in DISK_SYNC_MODES:
        raise ValueError(f"{owner}.disk_sync must be one of {', '.join(DISK_SYNC_MODES)}, "
                         f"got {mode!r}")
    if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) \
            or not 1 <= interval_ms <= 3600 * 1000:
        raise ValueError(f"{owner}.disk_sync_interval_ms must be an int in [1, 3600000], got "
                         f"{interval_ms!r}")


ONE = "one"      # write quorum: one replica acknowledges (gossip spreads the write)
ALL = "all"      # write quorum: every replica of the key's current placement acknowledges
WriteQuorum = Union[str, int]


def check_write_quorum(value: Any) -> WriteQuorum:
    """`value` as a write quorum: "one", "all" or an int >= 1 (a numeric string is read as
    the int). Raises ValueError naming the value otherwise."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, str) and value in (ONE, ALL):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"write quorum must be {ONE!r}, {ALL!r} or an int >= 1, got {value!r}")


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
        """Accept a Replication, a 4-tuple in `as_tuple()` order (or its "mg,ml,dg,dl" text),
        or a dict of field names."""
        if isinstance(value, Replication):
            return value
        if isinstance(value, Mapping):
            return cls(**value)
        if isinstance(value, str):          # "mg,ml,dg,dl", as a command line writes it
            try:
                value = [int(part) for part in value.split(",")]
            except ValueError:
                raise ValueError(f"a replication vector is mg,ml,dg,dl, got {value!r}") from None
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
    """One KVS node process (the "anna node" role): `threads` worker threads in `tier`, bound
    on `ip` (free ports). The kernel's keys come first; the process' own (joining `routing`,
    heartbeats, leave, reports) follow and never reach the kernel (`PROCESS_FIELDS`)."""

    ROLE: ClassVar[str] = "anna node"

    node_id: str = knob(help="this node's name, unique in the cluster (a pod's name)")
    tier: str = knob(MEMORY, help="the node's tier: memory or disk")
    threads: int = knob(1, help="worker threads")
    ip: str = knob("127.0.0.1", help="the address the workers and the control socket bind")
    data_dir: Optional[str] = knob(None, help="where a disk node keeps its data (required for "
                                              "the disk tier)")
    gossip_period_ms: int = knob(100, help="the workers' epoch: how often replicas exchange "
                                           "merged updates")
    max_value_bytes: int = knob(DEFAULT_MAX_VALUE_BYTES, help="largest value a worker accepts")
    pin_threads: bool = knob(True, help="pin each worker thread to a core")
    log_level: str = knob("warning", help="debug, info, warning or error")
    # Placement changes (anna_core/DESIGN.md, "Placement changes"): resend unacknowledged
    # hand-offs every handoff_retry_ms; new owners fetch missing keys from the previous owners
    # for handoff_window_ms after a change, waiting at most fetch_timeout_ms for an answer;
    # delete tombstones are kept tombstone_ttl_ms.
    handoff_retry_ms: int = knob(500, help="ms between re-sends of an unacknowledged hand-off")
    handoff_window_ms: int = knob(5000, help="ms after a placement change during which new "
                                             "owners fetch missing keys from previous owners")
    fetch_timeout_ms: int = knob(1000, help="ms a new owner waits for such a fetch's answer")
    tombstone_ttl_ms: int = knob(60000, help="ms delete tombstones are kept")
    # PUSH sockets each worker thread keeps open (one per destination: clients' response
    # addresses, peers); the least recently used is closed beyond it. Lowered by the kernel
    # when the process' descriptor limit cannot hold every thread's (anna_core/csrc/node.cpp).
    max_push_sockets: int = knob(1024, help="PUSH sockets each worker thread keeps open")
    # How long a worker keeps a PUSH socket after its last send before it may close it for a
    # new address: a new peer's handshake (CURVE, on a loaded machine) has that long. A flood
    # of new addresses faster than max_push_sockets per push_handshake_ms waits instead
    # (anna_core/csrc/push_cache.hpp).
    push_handshake_ms: int = knob(250, help="ms a worker keeps an answer socket before it may "
                                            "close it for a new address")
    # Keys each KVS worker thread's access statistics track per report period (a Space-Saving
    # top-k; anna_core/DESIGN.md "Statistics").
    stats_top_k: int = knob(1000, help="keys each worker's access statistics track per period")
    # Capacity emulation, off by default (anna_core/DESIGN.md "Capacity emulation"): each
    # worker thread serves at most `service_rate` client GET/PUT/DELETE requests (owned key
    # tuples) per second, the time of each counting as busy, so that on a small machine a
    # node behaves like a slower one: load beyond nodes x threads x rate queues and latency
    # rises, and adding a node adds capacity. 0 = unlimited. An emulation for experiments,
    # not a production rate limiter (it limits nothing per client and drops nothing).
    service_rate: float = knob(0.0, help="capacity emulation: requests/s per worker thread "
                                         "(0: unlimited)")
    # The node's storage capacity in bytes, which the autoscaling policy compares stored
    # bytes against; each worker's report carries capacity_bytes / threads. 0 = unknown (the
    # default for both tiers: nodes sharing one machine share its memory and disks, so no
    # per-node figure would be honest without being told).
    capacity_bytes: int = knob(0, help="the node's storage capacity in bytes (0: unknown)")
    # When a disk node fsyncs its write-ahead log (module docstring; ignored by memory nodes).
    disk_sync: str = knob(DEFAULT_DISK_SYNC, help="when a disk node fsyncs its write-ahead "
                                                  "log: interval, always or none")
    disk_sync_interval_ms: int = knob(DEFAULT_DISK_SYNC_INTERVAL_MS,
                                      help="the group-commit period of disk_sync interval, ms")
    # Client links (anna_core/DESIGN.md "Client links"): each worker also serves clients over
    # its own TCP listener, so a request passes no ZeroMQ I/O thread. With key_dir the links
    # are secured: a CURVE key handshake (the keys and roles the node admits), then every
    # frame sealed.
    client_links: bool = knob(True, help="workers also serve clients over their own TCP "
                                         "links (secured with the node's keys with key_dir)")
    # Those links from clients on the same host go over a Unix-domain socket next to the TCP
    # port (a socket file in /tmp/anna-links-<uid>, mode 0700): the same framing and the
    # same handshake, a few microseconds less CPU per round trip at each end. A client that
    # cannot reach the file (another host or pod, another user) uses TCP at once.
    unix_links: bool = knob(True, help="client links from the same host use a Unix-domain "
                                       "socket (TCP otherwise)")
    # The cluster's CURVE key directory (runtime.auth, `anna keys DIR`); None: no
    # authentication. Read by the node process, never sent to the kernel as a path.
    key_dir: Optional[str] = knob(None, help="the cluster's CURVE key directory (`anna keys`); "
                                             "default: no authentication")
    # ---- the process' own settings (never sent to the kernel) ----
    routing: List[str] = knob(factory=list, help="routing address(es): every one gets the "
                                                 "join, the heartbeats and the leave (with "
                                                 "key_dir, each carries #k=KEY)")
    join_timeout: float = knob(20.0, help="give up (exit 3) if no routing acknowledges the "
                                          "join in this many seconds")
    join_retry: float = knob(1.0, help="re-send the join (and the leave) this often, seconds")
    heartbeat_period: float = knob(DEFAULT_HEARTBEAT_PERIOD,
                                   help="seconds between heartbeats to every routing "
                                        "(routing's heartbeat_timeout must be well above it)")
    leave_timeout: float = knob(DEFAULT_LEAVE_TIMEOUT,
                                help="on SIGTERM, seconds allowed for the leave and the "
                                     "hand-off of every key (then exit 4)")
    report_period: Optional[float] = knob(None, help="report the workers' statistics into the "
                                                     "KVS every this many seconds (the "
                                                     "monitor's period; default: no reports)")
    parent_pid: Optional[int] = knob(None, help="stop when this process is gone")

    def __post_init__(self) -> None:
        self.tier = tier_name(self.tier)
        if self.threads < 1:
            raise ValueError(f"NodeConfig.threads must be >= 1, got {self.threads}")
        for knob in ("handoff_retry_ms", "handoff_window_ms", "fetch_timeout_ms",
                     "tombstone_ttl_ms", "max_push_sockets", "push_handshake_ms", "stats_top_k"):
            value = getattr(self, knob)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"NodeConfig.{knob} must be a positive int, got {value!r}")
        rate = self.service_rate
        if (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate)
                or not (rate == 0 or _MIN_SERVICE_RATE <= rate <= _MAX_SERVICE_RATE)):
            raise ValueError(f"NodeConfig.service_rate must be 0 (no limit) or a number of "
                             f"requests/s in [{_MIN_SERVICE_RATE:g}, {_MAX_SERVICE_RATE:g}], "
                             f"got {rate!r}")
        cap = self.capacity_bytes
        if isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= 1 << 62:
            raise ValueError(f"NodeConfig.capacity_bytes must be an int in [0, 2**62] "
                             f"(0: unknown), got {cap!r}")
        check_disk_sync("NodeConfig", self.disk_sync, self.disk_sync_interval_ms)
        if self.tier == DISK and not self.data_dir:
            raise ValueError(f"disk node {self.node_id!r} needs a data_dir")
        _check_positive("NodeConfig", self, ("join_timeout", "join_retry", "heartbeat_period",
                                             "leave_timeout"))
        if self.report_period is not None:
            _check_positive("NodeConfig", self, ("report_period",))

    def to_dict(self) -> dict:
        """The node process' configuration as JSON-ready data (`from_json` reads it back);
        `key_dir` only when authentication is on."""
        d = to_dict(self)
        if d["key_dir"] is None:
            del d["key_dir"]
        return d

    def to_json(self) -> str:
        """The node process' configuration (`python -m anna_core.node --config`)."""
        return json.dumps(self.to_dict())

    def kernel_json(self, credentials: Any = None) -> str:
        """The JSON `_core.Node(config_json)` takes: the kernel's keys only (no `key_dir`,
        none of `PROCESS_FIELDS`), with the CURVE keys of `credentials` (a
        `runtime.auth.Credentials`; None: authentication off)."""
        d = {k: v for k, v in self.to_dict().items()
             if k not in PROCESS_FIELDS and k != "key_dir"}
        if d["data_dir"] is None:
            d["data_dir"] = ""
        if credentials is not None:
            d["curve_public_key"] = credentials.keypair.public.decode("ascii")
            d["curve_secret_key"] = credentials.keypair.secret.decode("ascii")
            # the KVS admits the cluster and clients; user code (the function role) reaches
            # it only through its executor node, which acts for it with a client's rights
            d["curve_admitted"] = {key.decode("ascii"): role
                                   for key, role in credentials.allowed.items()
                                   if role != "function"}
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "NodeConfig":
        """Inverse of `to_json()`; unknown keys are rejected (`runtime.config.ConfigError`
        naming the field), and so is key material (a node is given `key_dir`, never keys:
        they would show on its command line)."""
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NodeConfig":
        """`from_json` of already parsed JSON."""
        keys = sorted(k for k in d if isinstance(k, str) and k.startswith("curve_"))
        if keys:
            raise ConfigError(cls.ROLE, keys[0], f"NodeConfig takes key_dir, not keys "
                              f"({', '.join(keys)}): keys on a command line can be read by "
                              f"every user of the host")
        if d.get("data_dir") == "":
            d = {**d, "data_dir": None}
        return from_dict(cls, d)


# The NodeConfig fields the node process uses itself and never passes to the kernel.
PROCESS_FIELDS = frozenset({"routing", "join_timeout", "join_retry", "heartbeat_period",
                            "leave_timeout", "report_period", "parent_pid"})


def _check_positive(owner: str, config: Any, names: Sequence[str]) -> None:
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or not value > 0:
            raise ValueError(f"{owner}.{name} must be a number > 0, got {value!r}")




def _check_liveness(owner: str, period: float, timeout: float) -> None:
    for name, value in (("heartbeat_period", period), ("heartbeat_timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{owner}.{name} must be a number > 0, got {value!r}")
    if timeout <= period:
        raise ValueError(f"{owner}.heartbeat_timeout ({timeout:g} s) must be longer than "
                         f"heartbeat_period ({period:g} s), or every node is declared failed")


@dataclass
class RoutingConfig:
    """One routing process: bound on tcp://ip:port (port 0 = a free port).

    Failure detection (anna_core/membership.py): nodes heartbeat every `heartbeat_period`
    seconds (default 1.0; the nodes' own `--heartbeat-period` should match); a node silent for
    more than `heartbeat_timeout` seconds (default 3.0) is removed from the ring. A restarted
    routing collects heartbeats for `recovery_period` seconds (default None = 1.25 heartbeat
    periods: every node's heartbeat falls inside it, with slack) before its first broadcast.
    Until it first has a member, for `startup_grace` seconds after it started (default None =
    `heartbeat_timeout`), routing answers lookups ROUTING_NOT_READY ("ask again or
    elsewhere") rather than NO_NODES: a routing made again in a running cluster knows no node
    until the nodes' heartbeats find it (on Kubernetes, after its name resolves to the new
    pod). Every `override_refresh_period` seconds (default 5; 0 = never) routing reads the
    replication overrides stored in the KVS again and adopts those set through another
    routing, so several routings converge on the same overrides.
    """

    ROLE: ClassVar[str] = "routing"

    ip: str = knob("127.0.0.1", help="the address the request socket binds")
    port: int = knob(0, help="the request socket's port (0: a free one)")
    default_replication: Replication = knob(factory=Replication,
                                            help="the default replication vector: "
                                                 "mg,ml,dg,dl or a JSON object")
    vnodes: int = knob(64, help="virtual nodes per member on every hash ring")
    log_level: str = knob("warning", help="debug, info, warning or error")
    heartbeat_period: float = knob(DEFAULT_HEARTBEAT_PERIOD,
                                   help="seconds between a node's heartbeats; paces re-sends "
                                        "and is the default recovery period")
    heartbeat_timeout: float = knob(DEFAULT_HEARTBEAT_TIMEOUT,
                                    help="a node silent for longer is removed from the ring")
    recovery_period: Optional[float] = knob(None, help="after a restart, collect heartbeats "
                                                       "this long before the first broadcast "
                                                       "(default: 1.25 heartbeat periods)")
    override_refresh_period: float = knob(5.0, help="seconds between reads of the replication "
                                                    "overrides stored in the KVS (0: never)")
    startup_grace: Optional[float] = knob(None, help="seconds after start that a routing with no "
                                                     "member yet answers lookups "
                                                     "ROUTING_NOT_READY, not NO_NODES (default: "
                                                     "heartbeat_timeout)")
    # CURVE keys (runtime/auth.py): the cluster's key directory, None = authentication off.
    key_dir: Optional[str] = knob(None, help="the cluster's CURVE key directory (`anna keys`); "
                                             "default: unauthenticated sockets")
    parent_pid: Optional[int] = knob(None, help="stop when this process is gone")

    def __post_init__(self) -> None:
        self.default_replication = Replication.coerce(self.default_replication)
        if not self.override_refresh_period >= 0:
            raise ValueError(f"RoutingConfig.override_refresh_period must be >= 0, "
                             f"got {self.override_refresh_period!r}")
        _check_liveness("RoutingConfig", self.heartbeat_period, self.heartbeat_timeout)
        for name in ("recovery_period", "startup_grace"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"RoutingConfig.{name} must be >= 0, got {value!r}")

    def effective_recovery_period(self) -> float:
        """The recovery period in seconds (1.25 heartbeat periods unless set)."""
        return 1.25 * self.heartbeat_period if self.recovery_period is None \
            else self.recovery_period

    def to_dict(self) -> dict:
        """This configuration as JSON-ready data (`from_dict` reads it back)."""
        d = to_dict(self)
        d["default_replication"] = list(self.default_replication.as_tuple())
        return d

    def to_json(self) -> str:
        """The routing process' configuration (`python -m anna_core.routing --config`)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "RoutingConfig":
        """Inverse of `to_json()`; a bad field raises `runtime.config.ConfigError`."""
        return from_dict(cls, json.loads(text))

    @property
    def bind_address(self) -> str:
        """The ZMQ endpoint to bind (`tcp://ip:*` when port is 0)."""
        return f"tcp://{self.ip}:{self.port if self.port else '*'}"


@dataclass
class ClusterConfig:
    """A local cluster: `nodes` memory nodes (and as many disk nodes if disk_threads > 0).

    Elasticity and failures: `routers` routing processes (default 1) serve the cluster;
    nodes heartbeat every `heartbeat_period` s (default 1.0) and are declared failed after
    `heartbeat_timeout` s of silence (default 3.0); a node asked to leave (SIGTERM) has
    `leave_timeout` s (default 30.0) to hand its keys off. `fault_tolerance=k` gives every
    key k+1 replicas in each tier that has nodes (needs at least k+1 nodes per tier; not
    together with `replication`). By default a cluster of two or more nodes per tier keeps
    two replicas (it survives one crash) and a single node keeps one. `max_push_sockets`
    bounds each KVS worker thread's open sockets (NodeConfig.max_push_sockets).

    Authentication: with `auth` (the default) every socket is a CURVE server or client and
    only holders of the cluster's key or an authorized client key get in; the keys are read
    from `key_dir`, or written fresh into the cluster's own temporary directory (the cluster
    key and a client named "local") when `key_dir` is None. `auth=False` runs every socket
    plain, and the cluster warns that anyone who can reach its ports can read, write and
    delete every key (unless `warn_auth_off=False`: a cloudburst.LocalCluster, which warns
    once for the whole stack it runs).
    """

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
    routers: int = 1
    heartbeat_period: float = DEFAULT_HEARTBEAT_PERIOD
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT
    leave_timeout: float = DEFAULT_LEAVE_TIMEOUT
    fault_tolerance: Optional[int] = None
    max_push_sockets: int = 1024      # per KVS worker thread (NodeConfig.max_push_sockets)
    push_handshake_ms: int = 250      # NodeConfig.push_handshake_ms
    handoff_window_ms: int = 5000     # NodeConfig.handoff_window_ms: new owners read through
    auth: bool = True
    key_dir: Optional[str] = None
    # NodeConfig.client_links for every node (secured links when auth is on).
    client_links: bool = True
    # NodeConfig.unix_links for every node.
    unix_links: bool = True
    warn_auth_off: bool = True
    # Autoscaling: False (off), True (the local defaults of autoscale.PolicyConfig, with this
    # cluster's fault tolerance and minimums), a dict of PolicyConfig knobs (the same, with
    # those knobs set) or a PolicyConfig. On, the nodes report their statistics
    # every monitoring period and the cluster runs a monitor that acts through a local
    # cluster manager, which starts a requested node `provisioning_delay` seconds late (a
    # stand-in for a VM or pod boot). `monitor=True` reports and summarises without acting.
    autoscale: Any = False
    monitor: bool = False
    provisioning_delay: float = 0.0
    # Capacity emulation (NodeConfig.service_rate: requests/s per worker thread, 0 = off) and
    # each node's storage capacity per tier (NodeConfig.capacity_bytes, 0 = unknown), for
    # showing on one small machine what the autoscaling policy does on many.
    service_rate: float = 0.0
    memory_capacity_bytes: int = 0
    disk_capacity_bytes: int = 0
    # When disk nodes fsync their write-ahead log (NodeConfig.disk_sync).
    disk_sync: str = DEFAULT_DISK_SYNC
    disk_sync_interval_ms: int = DEFAULT_DISK_SYNC_INTERVAL_MS

    def __post_init__(self) -> None:
        check_disk_sync("ClusterConfig", self.disk_sync, self.disk_sync_interval_ms)
        if not (self.service_rate >= 0) or isinstance(self.service_rate, bool):
            raise ValueError(f"ClusterConfig.service_rate must be >= 0 (0: no emulation), got "
                             f"{self.service_rate!r}")
        for knob in ("memory_capacity_bytes", "disk_capacity_bytes"):
            value = getattr(self, knob)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ClusterConfig.{knob} must be an int >= 0, got {value!r}")
        value = self.handoff_window_ms
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"ClusterConfig.handoff_window_ms must be a positive int, got "
                             f"{value!r}")
        if not (self.provisioning_delay >= 0):
            raise ValueError(f"ClusterConfig.provisioning_delay must be >= 0, got "
                             f"{self.provisioning_delay!r}")
        if self.key_dir is not None and not self.auth:
            raise ValueError("ClusterConfig.key_dir is given but auth is off; drop one")
        if isinstance(self.routers, bool) or not isinstance(self.routers, int) \
                or self.routers < 1:
            raise ValueError(f"ClusterConfig.routers must be an int >= 1, got {self.routers!r}")
        _check_liveness("ClusterConfig", self.heartbeat_period, self.heartbeat_timeout)
        if not self.leave_timeout > 0:
            raise ValueError(f"ClusterConfig.leave_timeout must be > 0, got {self.leave_timeout!r}")
        if self.fault_tolerance is not None:
            k = self.fault_tolerance
            if isinstance(k, bool) or not isinstance(k, int) or k < 0:
                raise ValueError(f"ClusterConfig.fault_tolerance must be an int >= 0, got {k!r}")
            if self.replication is not None:
                raise ValueError("give fault_tolerance or replication, not both")
            if k + 1 > self.nodes:
                raise ValueError(f"fault_tolerance={k} needs {k + 1} replicas of every key but "
                                 f"the cluster has {self.nodes} node(s) per tier")
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

    @property
    def effective_fault_tolerance(self) -> int:
        """Node crashes a key survives: `fault_tolerance`, or by default 1 when every tier
        has at least two nodes (two replicas) and 0 for a single node."""
        if self.fault_tolerance is not None:
            return self.fault_tolerance
        return 1 if self.nodes >= 2 else 0

    def effective_replication(self) -> Replication:
        """The default replication vector: `effective_fault_tolerance + 1` replicas in each
        tier that has nodes (or `replication` when given)."""
        if self.replication is not None:
            return self.replication
        replicas = self.effective_fault_tolerance + 1
        return Replication(memory_global=replicas if self.memory_nodes else 0, memory_local=1,
                           disk_global=replicas if self.disk_nodes else 0, disk_local=1)

    def effective_pin_threads(self) -> bool:
        """Pin worker threads only when asked, or by default when a single node runs here."""
        if self.pin_threads is not None:
            return self.pin_threads
        return self.memory_nodes + self.disk_nodes == 1
