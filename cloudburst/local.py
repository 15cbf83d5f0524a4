"""`LocalCluster`: the whole platform as real processes on loopback, on free ports.

Contract: `LocalCluster(executor_nodes=1, executors_per_node=3, schedulers=1)` is a context
manager. `start()` starts Anna (`anna_core.LocalCluster`: routing + KVS node), then the
schedulers (`python -m scheduler`), then the executor nodes (`python -m executor`, each
starting its worker processes), and returns once every scheduler sees every worker live
(`StartupError` with the failing process' log otherwise). `address` is the first scheduler's
address; `client()` returns a connected `Client` (closed by `stop()`). `workers` lists
`{worker_id, address, pid, node_id}`; `kill_worker(worker_id)` SIGKILLs one worker process
(for fault tests). `stop()` closes clients and stops every process (SIGTERM, then SIGKILL).
Every process logs to `<log_dir>/<name>.log`: workers' logs hold what functions printed, each
line tagged `call <call id> <function>:`. A `log_dir` given by the caller is kept after `stop()`.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from typing import Any, Dict, List, Optional

from runtime.process import ManagedProcess, StartupError, stop_all, wait_all_ready
from .client import Client

__all__ = ["LocalCluster", "StartupError"]


def _emergency_stop(nodes: List[ManagedProcess], schedulers: List[ManagedProcess],
                    log_dir: str) -> None:
    stop_all(nodes, timeout=2.0)
    stop_all(schedulers, timeout=2.0)
    shutil.rmtree(log_dir, ignore_errors=True)


class LocalCluster:
    """Anna, schedulers and executor nodes as local processes; see the module contract.

    Args:
        executor_nodes: executor nodes (each with its own node cache).
        executors_per_node: executor worker processes per node.
        schedulers: scheduler processes (they share the registry through Anna).
        kvs_threads: Anna worker threads per KVS node.
        kvs_nodes: Anna memory-tier nodes (`self.kvs` is that `anna_core.LocalCluster`, so a
            test can add, remove or kill its nodes).
        kvs_replication: Anna's default replication vector (`anna_core.Replication`, a
            4-tuple or a dict); None: one replica.
        heartbeat_period / heartbeat_timeout: worker liveness reporting and detection (s).
        log_level: level of every process' log (files under `log_dir`).
        startup_timeout: seconds to wait for the whole cluster to be ready.
        transport: "tcp" (loopback TCP, free ports) or "ipc" (Unix sockets in a private
            directory: cheaper per message; clients must run on this host).
        colocate_chains: let the schedulers put functions of a call that never run at the
            same time on one worker (see `scheduler.policy`); False spreads them out.
        max_causal_retries: aborted attempts of a causal call the schedulers retry before
            failing it with `Aborted`.
        port: the first scheduler's TCP port (0: a free port); the others pick free ports.
        restart_workers: executor nodes restart worker processes that exit (with back-off);
            False leaves them gone (fault tests of the schedulers).
        function_time_limit: seconds a function may run unless it (`register(time_limit=)`)
            or its call (`call(time_limit=)`) says otherwise.
        metrics_port: serve Prometheus metrics from the first scheduler on this HTTP port
            (0: a free one; the others then use free ones); None (default): off.
        log_dir: where every process logs (`<name>.log`; the KVS's under `kvs/`); kept after
            `stop()`. Default: a temporary directory removed by `stop()`.
    """

    def __init__(self, executor_nodes: int = 1, executors_per_node: int = 3,
                 schedulers: int = 1, *, kvs_threads: int = 1, heartbeat_period: float = 0.2,
                 heartbeat_timeout: float = 1.5, log_level: str = "warning",
                 startup_timeout: float = 60.0, seed: Optional[int] = None,
                 transport: str = "tcp", colocate_chains: bool = True,
                 max_causal_retries: int = 10, log_dir: Optional[str] = None,
                 port: int = 0, metrics_port: Optional[int] = None,
                 function_time_limit: float = 900.0, restart_workers: bool = True,
                 kvs_nodes: int = 1, kvs_replication: Any = None) -> None:
        if executor_nodes < 1 or executors_per_node < 1 or schedulers < 1:
            raise ValueError("a LocalCluster needs at least one executor node, one executor "
                             "per node and one scheduler")
        self.executor_nodes = executor_nodes
        self.executors_per_node = executors_per_node
        self.scheduler_count = schedulers
        self.kvs_threads = kvs_threads
        self.kvs_nodes = kvs_nodes
        self.kvs_replication = kvs_replication
        self.heartbeat_period = heartbeat_period
        self.heartbeat_timeout = heartbeat_timeout
        self.log_level = log_level
        self.startup_timeout = startup_timeout
        self.seed = seed
        if transport not in ("tcp", "ipc"):
            raise ValueError(f"transport must be 'tcp' or 'ipc', got {transport!r}")
        self.transport = transport
        self.colocate_chains = colocate_chains
        self.max_causal_retries = max_causal_retries
        self.port = port
        self.metrics_port = metrics_port
        self.function_time_limit = function_time_limit
        self.restart_workers = restart_workers
        # private: Unix sockets, and the logs unless `log_dir` is given (short paths: a Unix
        # socket's path is limited to about 100 bytes)
        self._private_dir = tempfile.mkdtemp(prefix="cloudburst-local-")
        self.log_dir = os.path.abspath(log_dir) if log_dir else self._private_dir
        os.makedirs(self.log_dir, exist_ok=True)
        self.ipc_dir: Optional[str] = None
        if transport == "ipc":
            self.ipc_dir = os.path.join(self._private_dir, "ipc")
            os.makedirs(self.ipc_dir)
        self.kvs: Any = None
        self.scheduler_addresses: List[str] = []
        self.workers: List[Dict[str, Any]] = []
        self._schedulers: List[ManagedProcess] = []
        self._nodes: List[ManagedProcess] = []
        self._clients: List[Client] = []
        self.started = False
        # if the cluster is dropped (or the interpreter exits) without stop(): kill and clean up
        self._finalizer = weakref.finalize(self, _emergency_stop, self._nodes, self._schedulers,
                                           self._private_dir)

    @property
    def address(self) -> str:
        """The first scheduler's address (what `Client(address)` takes)."""
        if not self.scheduler_addresses:
            raise RuntimeError("LocalCluster is not started")
        return self.scheduler_addresses[0]

    def start(self) -> "LocalCluster":
        import anna_core
        from executor.config import NodeConfig
        from scheduler.config import SchedulerConfig

        if self.started:
            return self
        self.started = True
        deadline = time.monotonic() + self.startup_timeout
        try:
            self.kvs = anna_core.LocalCluster(memory_threads=self.kvs_threads,
                                              nodes=self.kvs_nodes,
                                              replication=self.kvs_replication,
                                              log_dir=os.path.join(self.log_dir, "kvs"),
                                              log_level=self.log_level)
            self.kvs.start()
            for i in range(self.scheduler_count):
                config = SchedulerConfig(kvs_address=self.kvs.routing_address,
                                         heartbeat_timeout=self.heartbeat_timeout,
                                         log_level=self.log_level, parent_pid=os.getpid(),
                                         seed=None if self.seed is None else self.seed + i,
                                         ipc_dir=self.ipc_dir,
                                         colocate_chains=self.colocate_chains,
                                         max_causal_retries=self.max_causal_retries,
                                         port=self.port if i == 0 else 0,
                                         metrics_port=None if self.metrics_port is None
                                         else self.metrics_port if i == 0 else 0)
                self._schedulers.append(ManagedProcess(
                    f"scheduler-{i}", [sys.executable, "-m", "scheduler", "--config",
                                       config.to_json()], self.log_dir).spawn())
            wait_all_ready(self._schedulers, self._left(deadline))
            self.scheduler_addresses = [p.info["address"] for p in self._schedulers]
            for i in range(self.executor_nodes):
                config = NodeConfig(node_id=f"node{i}", kvs_address=self.kvs.routing_address,
                                    scheduler_addresses=self.scheduler_addresses,
                                    workers=self.executors_per_node,
                                    heartbeat_period=self.heartbeat_period,
                                    log_level=self.log_level, parent_pid=os.getpid(),
                                    log_dir=self.log_dir, ipc_dir=self.ipc_dir,
                                    function_time_limit=self.function_time_limit,
                                    restart_workers=self.restart_workers)
                self._nodes.append(ManagedProcess(
                    f"node{i}", [sys.executable, "-m", "executor", "--config", config.to_json()],
                    self.log_dir).spawn())
            wait_all_ready(self._nodes, self._left(deadline))
            for p in self._nodes:
                for w in p.info["workers"]:
                    self.workers.append(dict(w, node_id=p.info["node_id"]))
            expected = {w["worker_id"] for w in self.workers}
            for address in self.scheduler_addresses:
                self.wait_for_workers(expected, address, self._left(deadline))
        except BaseException:
            self.stop()
            raise
        return self

    def _left(self, deadline: float) -> float:
        return max(0.1, deadline - time.monotonic())

    def wait_for_workers(self, expected: Any, address: Optional[str] = None,
                         timeout: float = 10.0, present: bool = True) -> None:
        """Wait until the scheduler at `address` sees every worker id in `expected` live
        (or, with present=False, none of them); `StartupError`/`TimeoutError` otherwise."""
        expected = set(expected)
        deadline = time.monotonic() + timeout
        with Client(address or self.address, timeout=max(1.0, timeout)) as c:
            while True:
                live = set(c.executors())
                if (expected <= live) if present else not (expected & live):
                    return
                if time.monotonic() > deadline:
                    state = "live" if present else "gone"
                    raise StartupError(f"scheduler {address or self.address} did not see workers "
                                       f"{sorted(expected - live if present else expected & live)} "
                                       f"{state} within {timeout:g} s (live: {sorted(live)})")
                time.sleep(0.05)  # polling the scheduler's view, bounded by the deadline

    def client(self, scheduler: int = 0, **kwargs: Any) -> Client:
        """A new `Client` connected to scheduler number `scheduler` (closed by `stop()`)."""
        c = Client(self.scheduler_addresses[scheduler], **kwargs)
        self._clients.append(c)
        return c

    def kill_worker(self, worker_id: str) -> None:
        """SIGKILL one executor worker process."""
        for w in self.workers:
            if w["worker_id"] == worker_id:
                os.kill(w["pid"], signal.SIGKILL)
                return
        raise KeyError(f"no worker {worker_id!r} in this cluster")

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of every process' log (for diagnosing a failure)."""
        out = []
        for p in self._schedulers + self._nodes:
            out.append(f"== {p.name} ==\n{p.log_tail(lines)}")
        return "\n".join(out)

    def stop(self) -> None:
        """Close clients and stop every process (idempotent)."""
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        self._clients.clear()
        stop_all(self._nodes, timeout=10.0)
        stop_all(self._schedulers, timeout=5.0)
        if self.kvs is not None:
            self.kvs.stop()
            self.kvs = None
        shutil.rmtree(self._private_dir, ignore_errors=True)   # a given log_dir is kept
        self._finalizer.detach()
        self.started = False

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
