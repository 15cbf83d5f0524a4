"""Configuration of an executor node and of its worker processes (passed in; no fixed ports).

Each class is a role's configuration object (`runtime.config`): `python -m executor`,
`python -m executor.worker` and `python -m executor.workerhost` read theirs with `--config
PATH|JSON`, every field also a flag that overrides it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, List, Optional, Union

from anna_core.config import check_write_quorum
from runtime.config import from_dict, knob, to_dict

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
    unix_links: workers listen for call links on a Unix-domain socket next to their TCP
        port, which clients on the same host use (same framing, same handshake; a client
        that cannot reach the socket file, on another host or in another pod, uses TCP at
        once). False: TCP only.
    """

    ROLE: ClassVar[str] = "executor node"

    node_id: str = knob(help="this node's name, unique in the cluster (a pod's name)")
    kvs_address: str = knob(help="the Anna routing address(es), comma-separated")
    scheduler_addresses: List[str] = knob(factory=list, help="the schedulers' addresses")
    workers: int = knob(3, help="worker processes this node runs")
    ip: str = knob("127.0.0.1", help="the address the node cache and workers bind")
    heartbeat_period: float = knob(0.2, help="seconds between worker heartbeats and key-set "
                                             "reports")
    fetch_threads: int = knob(4, help="threads of the node cache that talk to Anna")
    worker_start_timeout: float = knob(30.0, help="seconds a worker has to report ready")
    log_level: str = knob("warning", help="debug, info, warning or error")
    parent_pid: Optional[int] = knob(None, help="stop when this process is gone")
    log_dir: Optional[str] = knob(None, help="where workers' output goes (default: a "
                                             "temporary directory)")
    ipc_dir: Optional[str] = knob(None, help="node cache and workers bind Unix sockets in this "
                                             "directory (one host)")
    cache_bytes: int = knob(2 << 30, help="bytes of values the node cache keeps before LRU "
                                          "eviction")
    plain_cache_bytes: int = knob(2 << 30, help="bytes of values the plain (LWW) cache keeps "
                                                "before LRU eviction")
    plain_cache_entries: int = knob(1 << 20, help="keys the plain (LWW) cache keeps before LRU "
                                                  "eviction")
    restart_workers: bool = knob(True, help="restart a worker process that exits")
    restart_backoff: float = knob(0.1, help="seconds before restarting a worker that exited "
                                            "(doubling for each failure in a row)")
    restart_backoff_max: float = knob(10.0, help="the most seconds between restarts")
    function_time_limit: float = knob(900.0, help="seconds a function may run when neither it "
                                                  "nor its call sets a limit")
    unresponsive_timeout: Optional[float] = knob(None, help="seconds a running worker may go "
                                                            "without heartbeating before it is "
                                                            "restarted (default: "
                                                            "function_time_limit + 60)")
    key_dir: Optional[str] = knob(None, help="the cluster's key directory (`cloudburst keys`); "
                                             "default: plain sockets")
    write_quorum: Union[str, int] = knob("all", help="replicas that hold a function's write "
                                                     "before it is acknowledged: all, one or n")
    worker_user: Optional[str] = knob(None, help="the user workers run as when the node is "
                                                 "root (default: nobody)")
    worker_host: Optional[str] = knob(None, help="a worker host's address that runs the "
                                                 "workers (default: the node's children)")
    worker_host_timeout: float = knob(10.0, help="seconds for a worker host to acknowledge a "
                                                 "start or report")
    unix_links: bool = knob(True, help="workers take call links from clients on the same host "
                                       "over a Unix-domain socket (TCP otherwise)")

    def __post_init__(self) -> None:
        try:
            self.write_quorum = check_write_quorum(self.write_quorum)
        except ValueError as e:
            raise ValueError(f"NodeConfig.write_quorum: {e}") from None
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
        """This configuration as the JSON its process' `--config` reads."""
        return json.dumps(to_dict(self))

    @classmethod
    def from_json(cls, text: str) -> "NodeConfig":
        """Inverse of `to_json()`; a bad field raises `runtime.config.ConfigError`."""
        return from_dict(cls, json.loads(text))


@dataclass
class WorkerConfig:
    """One executor worker process; `worker_id` is unique (vector clocks will use it).
    `auth`: the worker reads its function-role credentials from stdin (the node's hand-off,
    `runtime.auth.decode_handoff`); it never gets the key directory."""

    ROLE: ClassVar[str] = "executor worker"

    worker_id: str = knob(help="this worker's name, unique in the cluster")
    node_id: str = knob(help="its executor node's name")
    kvs_address: str = knob(help="the Anna routing address(es)")
    cache_address: str = knob(help="its node cache's address")
    scheduler_addresses: List[str] = knob(factory=list, help="the schedulers' addresses")
    ip: str = knob("127.0.0.1", help="the address the worker binds")
    heartbeat_period: float = knob(0.2, help="seconds between heartbeats")
    cache_timeout: float = knob(30.0, help="seconds to wait for the node cache")
    log_level: str = knob("warning", help="debug, info, warning or error")
    parent_pid: Optional[int] = knob(None, help="stop when this process is gone")
    ipc_dir: Optional[str] = knob(None, help="bind Unix sockets in this directory")
    output_limit: int = knob(64 * 1024, help="characters of a call's printed output kept for "
                                             "its caller")
    function_time_limit: float = knob(900.0, help="seconds a function may run unless it sets "
                                                  "its own")
    auth: bool = knob(False, help="read function-role credentials from stdin (default: plain "
                                  "sockets)")
    result_ttl: float = knob(120.0, help="seconds the outcomes of calls whose sink ran here "
                                         "are held for later calls")
    result_bytes: int = knob(64 << 20, help="bytes of such outcomes held at most")
    max_actors: int = knob(64, help="actor instances this worker holds at most")
    run_slot: str = knob("", help="the shared file its node reads what it runs from "
                                  "(executor/run_slot.py; \"\": tell the node by message)")
    unix_links: bool = knob(True, help="take call links from clients on the same host over a "
                                       "Unix-domain socket (TCP otherwise)")

    def to_json(self) -> str:
        """This configuration as the JSON its process' `--config` reads."""
        return json.dumps(to_dict(self))

    @classmethod
    def from_json(cls, text: str) -> "WorkerConfig":
        """Inverse of `to_json()`; a bad field raises `runtime.config.ConfigError`."""
        return from_dict(cls, json.loads(text))


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

    ROLE: ClassVar[str] = "worker host"

    ip: str = knob("127.0.0.1", help="the address its request socket binds")
    port: int = knob(0, help="its request socket's port (0: a free one)")
    key_dir: Optional[str] = knob(None, help="the function role's keys and the cluster's "
                                             "public key (default: plain sockets)")
    max_workers: int = knob(64, help="the most workers it runs at once")
    report_period: float = knob(1.0, help="seconds between its reports to the node")
    stop_grace: float = knob(5.0, help="seconds between SIGTERM and SIGKILL when it stops "
                                       "its workers")
    log_dir: Optional[str] = knob(None, help="where workers' output goes")
    log_level: str = knob("warning", help="debug, info, warning or error")

    def to_json(self) -> str:
        """This configuration as the JSON its process' `--config` reads."""
        return json.dumps(to_dict(self))

    @classmethod
    def from_json(cls, text: str) -> "WorkerHostConfig":
        """Inverse of `to_json()`; a bad field raises `runtime.config.ConfigError`."""
        return from_dict(cls, json.loads(text))
