"""`LocalCluster`: the whole platform as real processes on loopback, on free ports.

Contract: `LocalCluster(executor_nodes=1, executors_per_node=3, schedulers=1)` is a context
manager. `start()` starts Anna (`anna_core.LocalCluster`: routing + KVS node), then the
schedulers (`python -m scheduler`), then the executor nodes (`python -m executor`, each
starting its worker processes), and returns once every scheduler sees every worker live
(`StartupError` with the failing process' log otherwise). `address` is the first scheduler's
address; `client()` returns a connected `Client` that knows every scheduler (it fails over
between them; closed by `stop()`). `workers` lists `{worker_id, address, pid, node_id}`;
`kill_worker(worker_id)` SIGKILLs one worker process (for fault tests).
`signal_node(node_id, sig, workers=True)` sends `sig` to an executor node and its workers
(SIGSTOP / SIGCONT: a stalled node; SIGKILL: a crashed one; for fault tests). These and
`kill_node`, `kill_scheduler` are in `cloudburst/faults.py`.
Nothing stops with one process: with `supervise=True` (default) a thread of this process
restarts a scheduler or an executor node that exits (`runtime.process.Supervisor`, with
back-off; `cloudburst/supervision.py`). A scheduler comes back on the address it had
(`SchedulerConfig.bind_address`), so clients and nodes reach it again; it relearns the workers from their next heartbeats and the
registry from Anna. An executor node comes back with new workers (the old ones die with
it), which join the schedulers by their first heartbeats; `workers` is updated when it is
ready. `stop()` closes clients and stops every process (SIGTERM, then SIGKILL).
Every process logs to `<log_dir>/<name>.log`: workers' logs hold what functions printed, each
line tagged `call <call id> <function>:`. A `log_dir` given by the caller is kept after `stop()`.
Executor autoscaling: with `autoscale=True` (or an `ExecutorPolicyConfig`) a thread of this
process runs `cloudburst.autoscaler.ExecutorAutoscalerService` every tick: it adds executor
nodes (after `provisioning_delay`), drains idle ones and removes them once drained
(`autoscaler` is the service; its `history` the actions). The executor nodes can also be
changed by hand: `add_executor_node()`, `remove_executor_node(node_id)` (drain it first:
removal does not wait for calls), `executor_node_ids()`.
Authentication is on by default (`runtime.auth`): the cluster's key pair and one client key
pair (`LOCAL_CLIENT`, "local") are written in a private key directory (or `key_dir` is
used: it must hold the cluster's pair; its clients are the ones admitted), every service is
given the directory (never a key) and authenticates every socket, Anna shares the keys, and
`client()` connects as a client (`client_auth`). `key_dir`, `client_auth` and
`cluster_auth` (the services' identity, for tools and tests that act as the cluster) say
how. `auth=False` runs everything plain and logs a loud WARNING (`AUTH_OFF_WARNING`).
State: with `data_dir=D` functions, DAGs, keys and objects survive a restart on D
(`cloudburst.data_dir`: the KVS runs its disk tier under `D/kvs`, the keys are `D/keys`);
without it everything lives in memory and temporary directories and is gone after `stop()`.
"""
from __future__ import annotations

import dataclasses
import os
import logging
import shutil
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Union

from runtime.auth import CLIENT_PREFIX, AuthConfig, KeyFileError, write_keys
from runtime.process import (ManagedProcess, RestartPolicy, StartupError, stop_all,
                             wait_all_ready)
from .executor_policy import ExecutorPolicyConfig

from .client import Client
from .data_dir import DataDir, sync_policy
from .executor_nodes import ExecutorNodes
from .faults import FaultInjection
from .standby import StandbyNode
from .supervision import SUPERVISE_PERIOD, Watchdog, emergency_stop  # noqa: F401 (SUPERVISE_PERIOD: as before)

__all__ = ["LocalCluster", "StartupError", "LOCAL_CLIENT", "AUTH_OFF_WARNING"]


log = logging.getLogger("cloudburst.local")

LOCAL_CLIENT = "local"     # the client key pair a LocalCluster writes (and prefers in key_dir)
AUTH_OFF_WARNING = (
    "authentication is OFF: anyone who can reach these ports can register and run code on "
    "this cluster, read and overwrite its data, and pose as its schedulers and workers. "
    "Turn it off only on a machine and network you trust.")

# anna_core.LocalCluster arguments LocalCluster sets itself (not through kvs_options)
_KVS_FIXED = {"memory_threads", "nodes", "replication", "log_dir", "log_level", "auth",
              "key_dir", "warn_auth_off", "data_dir", "disk_threads", "disk_sync",
              "disk_sync_interval_ms"}

class LocalCluster(FaultInjection, ExecutorNodes):
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
        kvs_options: further keyword arguments of `anna_core.LocalCluster` (e.g.
            `gossip_period_ms`, `heartbeat_timeout`); the ones set above are refused here.
        write_quorum: replicas of a key that hold a write made by a node cache (a causal
            call's commit, a function's `lib.put`) before it is acknowledged: "all"
            (default: it survives the crash of any replica), an int n, or "one"
            (`executor.config.NodeConfig.write_quorum`).
        heartbeat_period / heartbeat_timeout: worker liveness reporting and detection (s).
        log_level: level of every process' log (files under `log_dir`).
        startup_timeout: seconds to wait for the whole cluster to be ready.
        transport: "tcp" (loopback TCP, free ports) or "ipc" (Unix sockets in a private
            directory: cheaper per message; clients must run on this host).
        colocate_chains: let the schedulers put functions of a call that never run at the
            same time on one worker (see `scheduler.policy`); False spreads them out.
        queue_calls: a call that finds every worker busy waits at its scheduler and goes to
            the first worker that is free, on any node, one added meanwhile too (default;
            `scheduler/dispatch.py`); False places every call at once on the least loaded
            worker, where it waits (the previous behaviour, for comparisons).
        max_causal_retries: aborted attempts of a causal call the schedulers retry before
            failing it with `Aborted`.
        hb_snapshot: when an HB call takes its snapshot round (`SchedulerConfig.hb_snapshot`).
        port: the first scheduler's TCP port (0: a free port); the others pick free ports.
        restart_workers: executor nodes restart worker processes that exit (with back-off);
            False leaves them gone (fault tests of the schedulers).
        function_time_limit: seconds a function may run unless it (`register(time_limit=)`)
            or its call (`call(time_limit=)`) says otherwise.
        metrics_port: serve Prometheus metrics from the first scheduler on this HTTP port
            (0: a free one; the others then use free ones); None (default): off.
        log_dir: where every process logs (`<name>.log`; the KVS's under `kvs/`); kept after
            `stop()`. Default: a temporary directory removed by `stop()`.
        scheduler_stop_grace: a scheduler given SIGTERM refuses new calls (its clients send
            them to another scheduler) and ends the ones in flight, for at most this many
            seconds (`scheduler.config.SchedulerConfig.stop_grace`; 0: it stops at once).
        supervise: restart schedulers and executor nodes that exit (with back-off from
            `restart_backoff` doubling up to 5 s); False leaves them gone.
        unresponsive_timeout: seconds a worker whose process runs may go without heartbeating
            before its node kills and restarts it (None: `function_time_limit` + 60 s); the
            schedulers drop such a worker a little later if its node does not.
        auth: authenticate every socket with CURVE keys (default); False runs the whole
            cluster plain and logs a loud warning.
        key_dir: a key directory made by `cloudburst keys DIR --client NAME` to use instead of
            fresh keys: the cluster's pair (`cluster.key_secret`) and the clients it admits
            (`authorized/`); `client()` connects as client "local" if it has that pair, else
            as the first of `clients/`.
        autoscale: scale the executor nodes with the load (`cloudburst.autoscaler`): True
            for the default `ExecutorPolicyConfig()` (at least 1 node, no upper bound), or a
            config (its `workers_per_node` is set to `executors_per_node`; `min_nodes` must be
            at least 1: the cluster is never scaled to zero); None/False: off.
            `executor_nodes` is the starting size.
        provisioning_delay: seconds between the autoscaler asking for a node and its process
            starting (stands in for a VM or pod boot).
        data_dir: keep the cluster's state here across restarts (`cloudburst.data_dir`): its
            keys (`D/keys`, written on first use; not with `key_dir`) and its KVS, which then
            runs on disk (`kvs_nodes` x `kvs_threads` disk workers; a write is acknowledged
            once in the disk store's write-ahead log). The same shape must be used on every
            run; one cluster at a time (`DataDirInUse`). None: nothing survives `stop()`.
        disk_sync, disk_sync_interval_ms: with `data_dir`, when the KVS fsyncs its log
            (`cloudburst.data_dir.sync_policy`; default "interval", every 1000 ms).
        standby_node: keep one spare executor node process started ahead, its code imported
            and its workers forked (`cloudburst/standby.py`), so that an added node serves
            within a fraction of a second; replaced once taken. None (default): on with
            `autoscale`, off otherwise (it costs an idle process).
    """

    def __init__(self, executor_nodes: int = 1, executors_per_node: int = 3,
                 schedulers: int = 1, *, kvs_threads: int = 1, heartbeat_period: float = 0.2,
                 heartbeat_timeout: float = 1.5, log_level: str = "warning",
                 startup_timeout: float = 60.0, seed: Optional[int] = None,
                 transport: str = "tcp", colocate_chains: bool = True,
                 queue_calls: bool = True,
                 max_causal_retries: int = 10, hb_snapshot: str = "adaptive",
                 log_dir: Optional[str] = None,
                 port: int = 0, metrics_port: Optional[int] = None,
                 function_time_limit: float = 900.0, restart_workers: bool = True,
                 kvs_nodes: int = 1, kvs_replication: Any = None,
                 kvs_options: Optional[Dict[str, Any]] = None,
                 write_quorum: Union[str, int] = "all", supervise: bool = True,
                 scheduler_stop_grace: float = 0.0,
                 restart_backoff: float = 0.1,
                 unresponsive_timeout: Optional[float] = None, auth: bool = True,
                 key_dir: Optional[str] = None,
                 autoscale: Union[None, bool, ExecutorPolicyConfig] = None,
                 provisioning_delay: float = 0.0, data_dir: Optional[str] = None,
                 disk_sync: Optional[str] = None,
                 disk_sync_interval_ms: Optional[int] = None,
                 standby_node: Optional[bool] = None) -> None:
        if executor_nodes < 1 or executors_per_node < 1 or schedulers < 1:
            raise ValueError("a LocalCluster needs at least one executor node, one executor "
                             "per node and one scheduler")
        self.disk_sync, self.disk_sync_interval_ms = sync_policy(data_dir, disk_sync,
                                                                 disk_sync_interval_ms)
        self.executor_nodes = executor_nodes
        self.executors_per_node = executors_per_node
        self.scheduler_count = schedulers
        self.kvs_threads = kvs_threads
        self.kvs_nodes = kvs_nodes
        self.kvs_replication = kvs_replication
        self.kvs_options = dict(kvs_options or {})
        fixed = sorted(set(self.kvs_options) & _KVS_FIXED)
        if fixed:
            raise ValueError(f"LocalCluster: kvs_options may not set {fixed} (set by "
                             f"LocalCluster itself or by its own arguments)")
        from anna_core.config import check_write_quorum
        self.write_quorum = check_write_quorum(write_quorum)
        self.heartbeat_period = heartbeat_period
        self.heartbeat_timeout = heartbeat_timeout
        self.log_level = log_level
        self.startup_timeout = startup_timeout
        self.seed = seed
        if transport not in ("tcp", "ipc"):
            raise ValueError(f"transport must be 'tcp' or 'ipc', got {transport!r}")
        self.transport = transport
        self.colocate_chains = colocate_chains
        self.queue_calls = queue_calls
        self.max_causal_retries = max_causal_retries
        self.hb_snapshot = hb_snapshot
        self.port = port
        self.metrics_port = metrics_port
        self.function_time_limit = function_time_limit
        self.restart_workers = restart_workers
        self.supervise = supervise
        self.scheduler_stop_grace = scheduler_stop_grace
        self.unresponsive_timeout = unresponsive_timeout
        if provisioning_delay < 0:
            raise ValueError(f"provisioning_delay must be >= 0, got {provisioning_delay!r}")
        if autoscale is True:
            autoscale = ExecutorPolicyConfig()
        if autoscale not in (None, False) and not isinstance(autoscale, ExecutorPolicyConfig):
            raise TypeError(f"autoscale must be None, a bool or an ExecutorPolicyConfig, not "
                            f"{type(autoscale).__name__}")
        if autoscale and autoscale.min_nodes < 1:
            raise ValueError("LocalCluster: autoscale.min_nodes must be at least 1 (a call needs "
                             "an executor node; the cluster is never scaled to zero)")
        self.autoscale: Optional[ExecutorPolicyConfig] = (
            dataclasses.replace(autoscale, workers_per_node=executors_per_node)
            if autoscale else None)
        self.provisioning_delay = float(provisioning_delay)
        self.standby_node = bool(self.autoscale) if standby_node is None else standby_node
        self.autoscaler: Any = None          # cloudburst.autoscaler.ExecutorAutoscalerService
        self._node_seq = 0                   # the next executor node is node<_node_seq>
        self._nodes_lock = threading.Lock()
        self._ready_nodes: set = set()       # node ids whose workers are in `workers`
        # private: Unix sockets, and the logs unless `log_dir` is given (short paths: a Unix
        # socket's path is limited to about 100 bytes)
        self._private_dir = tempfile.mkdtemp(prefix="cloudburst-local-")
        self.log_dir = os.path.abspath(log_dir) if log_dir else self._private_dir
        os.makedirs(self.log_dir, exist_ok=True)
        self.ipc_dir: Optional[str] = None
        if transport == "ipc":
            self.ipc_dir = os.path.join(self._private_dir, "ipc")
            os.makedirs(self.ipc_dir)
            if os.geteuid() == 0:
                # executor workers run under another uid (executor/privilege.py) and must
                # reach the sockets: searchable, not listable; the keys stay mode 0700
                os.chmod(self._private_dir, 0o711)
                os.chmod(self.ipc_dir, 0o711)
        # authentication: the key directory every process is given, and who a client is
        self.auth = bool(auth)
        self.data_dir: Optional[DataDir] = None
        if data_dir is not None:
            if key_dir is not None:
                shutil.rmtree(self._private_dir, ignore_errors=True)
                raise ValueError("LocalCluster: give data_dir or key_dir, not both (a data "
                                 "directory keeps its own keys, in DATA_DIR/keys)")
            self.data_dir = DataDir(data_dir)
            try:
                self.data_dir.open({"kvs_nodes": kvs_nodes, "kvs_threads": kvs_threads},
                                   LOCAL_CLIENT)
            except BaseException:
                shutil.rmtree(self._private_dir, ignore_errors=True)
                raise
            key_dir = self.data_dir.key_dir if self.auth else None
        self.key_dir: Optional[str] = None
        self.cluster_auth: Optional[AuthConfig] = None
        self.client_auth: Optional[AuthConfig] = None
        if not self.auth:
            if key_dir is not None:
                shutil.rmtree(self._private_dir, ignore_errors=True)
                raise ValueError("LocalCluster: key_dir is given but auth=False")
            log.warning(AUTH_OFF_WARNING)
        else:
            try:
                self._set_keys(key_dir)
            except BaseException:
                shutil.rmtree(self._private_dir, ignore_errors=True)
                if self.data_dir is not None:
                    self.data_dir.close()
                raise
        self.kvs: Any = None
        self.scheduler_addresses: List[str] = []
        self.workers: List[Dict[str, Any]] = []
        self._schedulers: List[ManagedProcess] = []
        self._scheduler_configs: List[Any] = []
        self._nodes: List[ManagedProcess] = []
        self._standby = StandbyNode(self.log_dir, executors_per_node) \
            if self.standby_node else None
        self._clients: List[Client] = []
        self.started = False
        me = weakref.ref(self)
        self._watchdog = Watchdog(RestartPolicy(initial=restart_backoff, maximum=5.0),
                                   lambda p: _restarted(me, p))
        # if the cluster is dropped (or the interpreter exits) without stop(): kill and clean up
        self._finalizer = weakref.finalize(self, emergency_stop, self._watchdog, self._nodes,
                                           self._schedulers, self._private_dir, self.data_dir)

    def _set_keys(self, key_dir: Optional[str]) -> None:
        """Fresh keys in the private directory, or check `key_dir` (KeyFileError naming the
        missing file) and pick its client."""
        if key_dir is None:
            self.key_dir = os.path.join(self._private_dir, "keys")
            write_keys(self.key_dir, [LOCAL_CLIENT])
        else:
            self.key_dir = os.path.abspath(key_dir)
        self.cluster_auth = AuthConfig(self.key_dir)
        self.cluster_auth.load()                  # fails now, naming the file, if unusable
        clients = os.path.join(self.key_dir, "clients")
        names = sorted(f[:-len(".key_secret")] for f in os.listdir(clients)
                       if f.endswith(".key_secret")) if os.path.isdir(clients) else []
        name = LOCAL_CLIENT if LOCAL_CLIENT in names else (names[0] if names else None)
        if name is not None:
            self.client_auth = AuthConfig(self.key_dir, CLIENT_PREFIX + name)

    @property
    def address(self) -> str:
        """The first scheduler's address (what `Client(address)` takes)."""
        if not self.scheduler_addresses:
            raise RuntimeError("LocalCluster is not started")
        return self.scheduler_addresses[0]

    def start(self) -> "LocalCluster":
        import anna_core
        from scheduler.config import SchedulerConfig

        if self.started:
            return self
        self.started = True
        deadline = time.monotonic() + self.startup_timeout
        try:
            if self._standby is not None:      # it imports while the rest starts
                self._standby.replenish()
            # Anna shares the key directory
            kvs_keys = self.cluster_auth
            durable = self.data_dir is not None     # the disk tier only, under D/kvs
            self.kvs = anna_core.LocalCluster(memory_threads=0 if durable else self.kvs_threads,
                                              disk_threads=self.kvs_threads if durable else 0,
                                              data_dir=self.data_dir.kvs_dir if durable
                                              else None,
                                              nodes=self.kvs_nodes,
                                              replication=self.kvs_replication,
                                              log_dir=os.path.join(self.log_dir, "kvs"),
                                              log_level=self.log_level,
                                              auth=kvs_keys is not None,
                                              key_dir=self.key_dir if kvs_keys else None,
                                              warn_auth_off=False,    # warned for the stack
                                              disk_sync=self.disk_sync,
                                              disk_sync_interval_ms=self.disk_sync_interval_ms,
                                              **self.kvs_options)
            self.kvs.start()
            for i in range(self.scheduler_count):
                config = SchedulerConfig(kvs_address=self._kvs_address(),
                                         heartbeat_timeout=self.heartbeat_timeout,
                                         log_level=self.log_level, parent_pid=os.getpid(),
                                         seed=None if self.seed is None else self.seed + i,
                                         ipc_dir=self.ipc_dir,
                                         colocate_chains=self.colocate_chains,
                                         queue_calls=self.queue_calls,
                                         max_causal_retries=self.max_causal_retries,
                                         hb_snapshot=self.hb_snapshot,
                                         port=self.port if i == 0 else 0,
                                         metrics_port=None if self.metrics_port is None
                                         else self.metrics_port if i == 0 else 0,
                                         unresponsive_timeout=self._node_unresponsive()
                                         + 2 * self.heartbeat_timeout,
                                         key_dir=self.key_dir,
                                         stop_grace=self.scheduler_stop_grace)
                self._scheduler_configs.append(config)
                self._schedulers.append(ManagedProcess(
                    f"scheduler-{i}", [sys.executable, "-m", "scheduler", "--config",
                                       config.to_json()], self.log_dir).spawn())
            wait_all_ready(self._schedulers, self._left(deadline))
            self.scheduler_addresses = [p.info["address"] for p in self._schedulers]
            for p, config in zip(self._schedulers, self._scheduler_configs):
                config.bind_address = p.info["address"]      # a restart keeps the address
                p.argv = [sys.executable, "-m", "scheduler", "--config", config.to_json()]
            for _ in range(self.executor_nodes):
                self._nodes.append(self._node_process(self.reserve_executor_node_id()).spawn())
            wait_all_ready(self._nodes, self._left(deadline))
            for p in self._nodes:
                self._ready_nodes.add(p.info["node_id"])
                for w in p.info["workers"]:
                    self.workers.append(dict(w, node_id=p.info["node_id"]))
            expected = {w["worker_id"] for w in self.workers}
            for address in self.scheduler_addresses:
                self.wait_for_workers(expected, address, self._left(deadline))
            if self.supervise:
                self._watchdog.watch(self._schedulers + self._nodes)
            if self.autoscale is not None:
                self._start_autoscaler()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_autoscaler(self) -> None:
        from .executor_policy import ExecutorAutoscaler
        from .autoscaler import ExecutorAutoscalerService, SchedulerLink
        from .executor_spawner import local_pool
        assert self.autoscale is not None
        self.autoscaler = ExecutorAutoscalerService(
            ExecutorAutoscaler(self.autoscale),
            local_pool(self, self.provisioning_delay),
            SchedulerLink(self.scheduler_addresses, self.cluster_auth)).start()
        log.info("executor autoscaling on: %s", self.autoscale)

    def _kvs_address(self) -> str:
        """Every Anna routing address, comma-separated: the schedulers, executor nodes and
        clients fail over between them (anna_core.Client)."""
        return ",".join(self.kvs.routing_addresses)

    def _node_unresponsive(self) -> float:
        if self.unresponsive_timeout is not None:
            return self.unresponsive_timeout
        return self.function_time_limit + 60.0

    def _left(self, deadline: float) -> float:
        return max(0.1, deadline - time.monotonic())

    def wait_for_workers(self, expected: Any, address: Optional[str] = None,
                         timeout: float = 10.0, present: bool = True) -> None:
        """Wait until the scheduler at `address` sees every worker id in `expected` live
        (or, with present=False, none of them); `StartupError`/`TimeoutError` otherwise."""
        expected = set(expected)
        deadline = time.monotonic() + timeout
        with Client(address or self.address, timeout=max(1.0, timeout),
                    auth=self.client_auth or self.cluster_auth) as c:
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
        """A new `Client` that prefers scheduler number `scheduler` and fails over to the
        others (closed by `stop()`), authenticated as `client_auth` unless `auth=` is given."""
        n = len(self.scheduler_addresses)
        if self.auth and kwargs.get("auth") is None:
            if self.client_auth is None:
                raise KeyFileError(f"the key directory {self.key_dir} has no client key pair "
                                   f"(clients/NAME.key_secret): add one with `cloudburst keys "
                                   f"{self.key_dir} --add-client --client NAME` (and restart "
                                   f"the cluster), or pass auth=")
            kwargs["auth"] = self.client_auth
        c = Client([self.scheduler_addresses[(scheduler + i) % n] for i in range(n)], **kwargs)
        self._clients.append(c)
        return c

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
        if self.autoscaler is not None:
            self.autoscaler.stop()
            self.autoscaler = None
        self._watchdog.stop()
        if self._standby is not None:
            self._standby.stop()
        stop_all(self._nodes, timeout=10.0)
        stop_all(self._schedulers, timeout=5.0)
        if self.kvs is not None:
            self.kvs.stop()
            self.kvs = None
        shutil.rmtree(self._private_dir, ignore_errors=True)   # a given log_dir is kept
        if self.data_dir is not None:
            self.data_dir.close()
        self._finalizer.detach()
        self.started = False

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _restarted(cluster: "weakref.ref[LocalCluster]", p: ManagedProcess) -> None:
    c = cluster()
    if c is not None:
        c._on_restarted(p)
