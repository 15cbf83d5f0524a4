"""Configuration of an executor node and of its worker processes (passed in; no fixed ports)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Union

from anna_core.config import check_write_quorum

__all__ = ["NodeConfig", "WorkerConfig", "WorkerHostConfig"]


@dataclass
class NodeConfig:
    """One executor node: a node cache plus `workers` worker processes.

    heartbeat_period: seconds between worker heartbeats and node key-set reports.
    fetch_threads: threads of the node cache that talk to Anna (misses and writes).
    cache_bytes: bytes of causal values HydroCache keeps before it evicts the least recently
        used. plain_cache_bytes / plain_cache_entries: the same bounds for the plain (LWW)
        cache (`executor/cache.py`); an evicted key is unsubscribed, a later read fetches it.
    restart_workers: restart a worker process that exits (False: it stays gone).
    restart_backoff / restart_backoff_max: seconds before restarting a worker that exited,
        doubling for each failure in a row up to the maximum.
    function_time_limit: seconds a function may run when neither it nor its call sets a limit.
    unresponsive_timeout: seconds a worker whose process runs may go without heartbeating to
        its node before the node kills and restarts it (None: `function_time_limit` + 60 s;
        a function stuck in C code is killed one second past its time limit by its own guard).
    write_quorum: when the node cache acknowledges a write it makes for a function (a causal
        call's commit, and `lib.put`): "all" (default) once every replica of each written key
        holds it, so an acknowledged write survives the crash of any replica; an int n once
        n replicas do; "one" once one replica does (faster; a replica that dies before
        gossip spreads the write takes it along). `anna_core.check_write_quorum`.
    key_dir: the cluster's key directory (`cloudburst keys`): the node authenticates every
        socket with the cluster's key pair; its workers get the function role's pair (over a
        pipe, never the directory: `executor/privilege.py`). No client reaches a node cache
        or a worker. None: plain sockets. No key is ever on a command line.
    worker_user: the user (name or uid) workers run as when the node runs as root (None:
        `nobody`; "": the node's own, not recommended); see `executor/privilege.py`.
    worker_host: the address of a worker host (`executor/workerhost.py`) that runs this
        node's workers (None: the node runs them as its own children). On Kubernetes, a
        container of the executor pod without the node's keys. The node keeps its whole
        supervision policy; workers bind TCP sockets (`ipc_dir` must be None).
    worker_host_timeout: seconds after which a worker start the host has not acknowledged,
        or a host that stopped reporting, counts as an exited worker (`executor/backends.py`).
    """

    node_id: str
    kvs_address: str
    scheduler_addresses: List[str] = field(default_factory=list)
    workers: int = 3
    ip: str = "127.0.0.1"
    heartbeat_period: float = 0.2
    fetch_threads: int = 4
    worker_start_timeout: float = 30.0
    log_level: str = "warning"
    parent_pid: Optional[int] = None
    log_dir: Optional[str] = None
    ipc_dir: Optional[str] = None       # node cache and workers bind Unix sockets here (one host)
    cache_bytes: int = 2 << 30          # HydroCache: values' bytes kept before LRU eviction
    plain_cache_bytes: int = 2 << 30    # the plain (LWW) cache: bytes kept before LRU eviction
    plain_cache_entries: int = 1 << 20  # the plain (LWW) cache: keys kept before LRU eviction
    restart_workers: bool = True
    restart_backoff: float = 0.1
    restart_backoff_max: float = 10.0
    function_time_limit: float = 900.0
    unresponsive_timeout: Optional[float] = None
    key_dir: Optional[str] = None       # authenticate with the cluster's keys here (None: plain)
    write_quorum: Union[str, int] = "all"   # replicas that hold a write before it is acked
    worker_user: Optional[str] = None   # workers' user when the node is root (None: nobody)
    worker_host: Optional[str] = None   # a worker host runs the workers (None: children)
    worker_host_timeout: float = 10.0

    def __post_init__(self) -> None:
        self.write_quorum = check_write_quorum(self.write_quorum)
        if self.worker_host and self.ipc_dir:
            raise ValueError("worker_host and ipc_dir exclude each other: a worker host's "
                             "workers reach their node over TCP (its sockets are in another "
                             "container)")
        if self.worker_host_timeout <= 0:
            raise ValueError(f"worker_host_timeout must be positive, got "
                             f"{self.worker_host_timeout}")

    def worker_unresponsive_timeout(self) -> float:
        """`unresponsive_timeout`, or its default."""
        if self.unresponsive_timeout is not None:
            return self.unresponsive_timeout
        return self.function_time_limit + 60.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "NodeConfig":
        return cls(**json.loads(text))


@dataclass
class WorkerConfig:
    """One executor worker process; `worker_id` is unique (vector clocks will use it).
    `auth`: the worker reads its function-role credentials from stdin (the node's hand-off,
    `runtime.auth.decode_handoff`); it never gets the key directory."""

    worker_id: str
    node_id: str
    kvs_address: str
    cache_address: str
    scheduler_addresses: List[str] = field(default_factory=list)
    ip: str = "127.0.0.1"
    heartbeat_period: float = 0.2
    cache_timeout: float = 30.0
    log_level: str = "warning"
    parent_pid: Optional[int] = None
    ipc_dir: Optional[str] = None
    output_limit: int = 64 * 1024   # characters of a call's printed output kept for its caller
    function_time_limit: float = 900.0   # seconds a function may run unless it sets its own
    auth: bool = False              # credentials come on stdin (False: plain sockets)
    # the outcomes of calls whose sink ran here are held this long, within these bytes, for
    # later calls that take them as arguments (a Future passed to a call; executor/held.py)
    result_ttl: float = 120.0
    result_bytes: int = 64 << 20
    max_actors: int = 64            # actor instances this worker holds at most

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "WorkerConfig":
        return cls(**json.loads(text))


@dataclass
class WorkerHostConfig:
    """A worker host (`executor/workerhost.py`): runs an executor node's workers.

    ip, port: where it binds its request socket (loopback by default; port 0: a free one).
    key_dir: the function role's keys (`function.key`, `function.key_secret`) and the
        cluster's public key (`cluster.key`), never `cluster.key_secret`; None: plain sockets.
    max_workers: the most worker names it runs at once.
    report_period: seconds between its reports of every worker's state to the node.
    stop_grace: seconds between SIGTERM and SIGKILL when it stops its workers.
    """

    ip: str = "127.0.0.1"
    port: int = 0
    key_dir: Optional[str] = None
    max_workers: int = 64
    report_period: float = 1.0
    stop_grace: float = 5.0
    log_dir: Optional[str] = None
    log_level: str = "warning"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "WorkerHostConfig":
        return cls(**json.loads(text))
