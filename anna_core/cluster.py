"""`LocalCluster`: a whole Anna cluster as real processes on this machine (loopback, free ports).

Contract:
- `start()` (or entering the context manager) spawns `routers` routing processes
  (`sys.executable -m anna_core.routing`) and then the KVS nodes
  (`sys.executable -m anna_core.node`): `nodes` memory-tier nodes with `memory_threads`
  threads each and, if `disk_threads > 0`, `nodes` disk-tier nodes with `disk_threads` threads.
  Every process binds `tcp://127.0.0.1:*` and announces its bound addresses to the launcher
  (`runtime.process`); `start()` returns when every process is ready, or raises
  `StartupError` naming the process and quoting the tail of its log (exit, or no readiness
  before `startup_timeout`). Each process logs to `<log_dir>/<name>.log`.
- Node ids are stable ("memory-0", "disk-0", ...), and a disk node keeps its data under
  `<data_dir>/<node_id>/<thread_id>` (the kernel's layout), so a new cluster with the same
  shape on the same `data_dir` finds the same data.
  With `data_dir=None` a temporary directory is used and removed on `stop()`.
- Default replication: memory_global=1 if there are memory nodes else 0, disk_global=1 if
  there are disk nodes else 0, locals 1 (or the `replication` given).
- `stop()` closes the clients it handed out, stops every node at once (SIGINT: no leave,
  no hand-off) and then routing (SIGTERM), SIGKILL after `stop_timeout`. Children also
  stop by themselves if this process dies (`--parent-pid`).
- Changing one node: `add_node` (a new node joins), `remove_node` (graceful leave: SIGTERM,
  the node hands its keys off and exits 0; `LeaveFailed` otherwise), `kill_node` (SIGKILL:
  routing's failure detector removes it after `heartbeat_timeout`), `stop_node` (stop at
  once without leaving), `start_node` / `restart_node` (same id, config and data_dir: a disk
  node finds its data and joins again with its new worker addresses). `spawn_node` starts a
  new node without waiting and `node_ready` says, without blocking, whether it has joined
  (what a non-blocking cluster manager builds on; `add_node` is the two with a wait).
- Routing: `routing_addresses` (all), `routing_address` (the first); `stop_routing(i)`,
  `start_routing(i)` (same port), `restart_routing(i)`, `signal_routing(i, signum)`; a started routing recovers the
  membership from the nodes' heartbeats and the overrides from the KVS.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import weakref
from typing import Any, Dict, List, Optional, Sequence

from runtime.auth import AuthConfig, CLIENT_PREFIX, CLUSTER, strip_key, write_keys
from runtime.process import ManagedProcess, StartupError, stop_all, wait_all_ready

from .client import Client
from .config import DISK, MEMORY, ClusterConfig, NodeConfig, Replication, RoutingConfig
from .errors import LeaveFailed

log = logging.getLogger("anna.cluster")

# The client key a LocalCluster writes for its own `client()`s.
LOCAL_CLIENT = "local"
AUTH_OFF_WARNING = ("AUTHENTICATION IS OFF: this cluster's sockets are plain; anyone who can "
                    "reach its ports can read, overwrite and delete every key and change its "
                    "membership. Leave auth on (the default) outside a benchmark.")


def default_client_auth(key_dir: str) -> AuthConfig:
    """The identity a cluster's `client()` uses: the client "local" if its key is in
    `key_dir`, else the first client key there, else the cluster's own identity."""
    clients = os.path.join(key_dir, "clients")
    names = sorted(e[:-len(".key_secret")] for e in os.listdir(clients)
                   if e.endswith(".key_secret")) if os.path.isdir(clients) else []
    if LOCAL_CLIENT in names:
        return AuthConfig(key_dir, CLIENT_PREFIX + LOCAL_CLIENT)
    return AuthConfig(key_dir, CLIENT_PREFIX + names[0]) if names else AuthConfig(key_dir, CLUSTER)


def _stop_now(processes: Sequence[ManagedProcess], timeout: float) -> None:
    """SIGINT every running node (stop without leaving; SIGTERM means "leave"), SIGKILL after
    `timeout`, reap."""
    stop_all(processes, timeout, signal.SIGINT)


__all__ = ["LocalCluster"]


def _kill_all(processes: List[ManagedProcess], tmp: str) -> None:
    """Last-resort cleanup when a LocalCluster is garbage-collected without stop()."""
    stop_all(processes, timeout=0.0)
    shutil.rmtree(tmp, ignore_errors=True)


class LocalCluster:
    """Routing plus KVS nodes as real local processes; a context manager.

    Args:
        memory_threads: worker threads per memory-tier node (0 = no memory tier).
        disk_threads: worker threads per disk-tier node (0 = no disk tier).
        nodes: nodes per tier that has threads.
        log_dir: where each process logs (`<name>.log`); kept after `stop()` when given,
            else temporary.
        data_dir: where disk nodes keep their data (`<data_dir>/<node_id>/<thread_id>`);
            temporary if None.
        gossip_period_ms: the workers' epoch length.
        replication: default replication vector (`Replication`, 4-tuple or dict).
        routers: routing processes (default 1); nodes and clients use all of them.
        heartbeat_period: seconds between node heartbeats (default 1.0).
        heartbeat_timeout: seconds of silence after which routing removes a node (default 3.0).
        fault_tolerance: k, for k+1 replicas of every key in each tier that has nodes
            (needs `nodes` >= k+1; not together with `replication`).
        Further keyword arguments are `ClusterConfig` fields (leave_timeout, max_value_bytes,
        handoff_window_ms, disk_sync ("interval", "always" or "none": when disk nodes fsync
        their write-ahead log; NodeConfig.disk_sync), disk_sync_interval_ms, ip, pin_threads, startup_timeout, stop_timeout, vnodes, log_level,
        and autoscaling:
            autoscale (True, an `anna_core.autoscale.PolicyConfig`, or a dict of its knobs with the
            rest derived from this cluster), monitor (report and
            summarise without acting), provisioning_delay). With either on, `monitor` is the
            running `anna_core.monitor.Monitor` and `manager` its cluster manager.
    """

    def __init__(self, memory_threads: int = 1, disk_threads: int = 0, nodes: int = 1,
                 data_dir: Optional[str] = None, gossip_period_ms: int = 100,
                 replication: Any = None, log_dir: Optional[str] = None,
                 **options: Any) -> None:
        self.config = ClusterConfig(memory_threads=memory_threads, disk_threads=disk_threads,
                                    nodes=nodes, data_dir=data_dir,
                                    gossip_period_ms=gossip_period_ms, replication=replication,
                                    **options)
        self.replication: Replication = self.config.effective_replication()
        self._tmp = tempfile.mkdtemp(prefix="anna-local-")
        self.log_dir = log_dir or os.path.join(self._tmp, "logs")   # kept after stop if given
        os.makedirs(self.log_dir, exist_ok=True)
        self.data_dir = self.config.data_dir or os.path.join(self._tmp, "data")
        self.key_dir: Optional[str] = None
        self.client_auth: Optional[AuthConfig] = None
        if self.config.auth:
            self.key_dir = self.config.key_dir or os.path.join(self._tmp, "keys")
            if self.config.key_dir is None:
                write_keys(self.key_dir, [LOCAL_CLIENT])
            self.client_auth = default_client_auth(self.key_dir)
        elif self.config.warn_auth_off:
            log.warning(AUTH_OFF_WARNING)
        self.routing_address: Optional[str] = None
        self.routing_addresses: List[str] = []
        self._routers: List[ManagedProcess] = []
        self._routing_ports: List[int] = []
        self._nodes: Dict[str, ManagedProcess] = {}
        self._clients: List[Client] = []
        self._node_configs: Dict[str, NodeConfig] = {}
        self._processes: List[ManagedProcess] = []
        self._finalizer = weakref.finalize(self, _kill_all, self._processes, self._tmp)
        self.policy = self._policy()
        self.monitor: Optional[Any] = None          # anna_core.monitor.Monitor when on
        self.manager: Optional[Any] = None          # its pool manager (pools.local.LocalPool) when autoscaling
        self.started = False
        self.stopped = False

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> "LocalCluster":
        """Start routing and every node; returns when all are ready (StartupError if not)."""
        if self.started:
            return self
        if self.stopped:
            raise RuntimeError("a stopped LocalCluster cannot be started again; make a new one "
                               "(on the same data_dir to keep disk data)")
        self.started = True
        try:
            self._routers = [self._make_routing(i, 0) for i in range(self.config.routers)]
            for p in self._routers:
                self._spawn(p)
            wait_all_ready(self._routers, self.config.startup_timeout)
            self.routing_addresses = [p.info["address"] for p in self._routers]
            self._routing_ports = [int(strip_key(a).rsplit(":", 1)[1])
                                   for a in self.routing_addresses]
            self.routing_address = self.routing_addresses[0]
            new = []
            for i in range(self.config.memory_nodes):
                new.append(self._make_node(MEMORY, i, self.config.memory_threads))
            for i in range(self.config.disk_nodes):
                new.append(self._make_node(DISK, i, self.config.disk_threads))
            for p in new:
                self._spawn(p)
            wait_all_ready(new, self.config.startup_timeout)
            if self.policy is not None:
                self._start_monitor()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close handed-out clients, stop every process (SIGTERM, then SIGKILL). Idempotent."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor.kvs.close()
            self.monitor = None
        if self.manager is not None:
            self.manager.close()
            self.manager = None
        for c in self._clients:
            c.close()
        self._clients.clear()
        _stop_now(list(self._nodes.values()), self.config.stop_timeout)
        stop_all(self._routers, self.config.stop_timeout)
        self.started = False
        self.stopped = True
        self._finalizer.detach()
        shutil.rmtree(self._tmp, ignore_errors=True)  # logs, and data if data_dir was None

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- use ----------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> Client:
        """A new `Client` of this cluster (closed by `stop()`); kwargs go to `Client`."""
        if self.routing_address is None:
            raise RuntimeError("LocalCluster is not started; use `with LocalCluster(...)` "
                               "or call start()")
        kwargs.setdefault("auth", self.client_auth)
        kwargs.setdefault("max_value_bytes", self.config.max_value_bytes)
        if self.policy is not None:   # the monitor compares the clients' latency with the SLO
            kwargs.setdefault("report_period", self.policy.monitoring_period)
        c = Client(self.routing_addresses, ip=self.config.ip, **kwargs)
        self._clients.append(c)
        return c

    @property
    def cluster_auth(self) -> Optional[AuthConfig]:
        """The cluster's own identity (None with auth off): for operators' clients, e.g. one
        that changes replication (`client(auth=cluster.cluster_auth)`)."""
        return AuthConfig(self.key_dir, CLUSTER) if self.key_dir else None

    @property
    def node_ids(self) -> List[str]:
        """The ids of every node, memory tier first."""
        return list(self._nodes)

    def worker_addresses(self, node_id: Optional[str] = None) -> List[str]:
        """The request addresses of one node's workers, or of every running node's."""
        if node_id is not None:
            return list(self._node(node_id).info.get("worker_addresses", []))
        return [a for p in self._nodes.values() if p.running()
                for a in p.info.get("worker_addresses", [])]

    def tier_of(self, node_id: str) -> str:
        """"memory" or "disk"."""
        return self._node_configs[node_id].tier

    def is_running(self, node_id: str) -> bool:
        """Whether the node's process is alive."""
        return self._node(node_id).running()

    def node_pid(self, node_id: str) -> int:
        """The operating-system process id of a running node (benchmarks read its CPU time)."""
        return self._node(node_id).pid

    def signal_routing(self, index: int, signum: int) -> None:
        """Send `signum` to routing `index` (tests pause one with SIGSTOP and SIGCONT, to play
        a routing that handles a message later than the others)."""
        self._routers[index].signal(signum)

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last log lines of "routing" (the first), "routing-<i>" or a node id."""
        if name == "routing":
            name = self._routers[0].name if self._routers else name
        for p in self._routers:
            if p.name == name:
                return p.log_tail(lines)
        return self._node(name).log_tail(lines)

    # ---- changing nodes -------------------------------------------------------------------

    def stop_node(self, node_id: str, *, kill: bool = False) -> None:
        """Stop one node at once, without leaving (SIGINT), or SIGKILL it with `kill=True`.
        Routing removes it after `heartbeat_timeout` unless it starts again before."""
        if kill:
            self.kill_node(node_id)
        else:
            _stop_now([self._node(node_id)], self.config.stop_timeout)

    def kill_node(self, node_id: str) -> None:
        """SIGKILL one node (a crash: no leave, no hand-off) and reap it."""
        p = self._node(node_id)
        p.signal(signal.SIGKILL)
        if p.proc is not None:
            p.proc.wait(timeout=self.config.stop_timeout)
        p.close_pipe()

    def remove_node(self, node_id: str, timeout: Optional[float] = None) -> None:
        """Graceful leave: SIGTERM; the node leaves the ring, hands every key and
        subscription to its new owners and exits. Returns once it exited with status 0.

        Raises `LeaveFailed` naming the node, its exit status and its log's tail if it exits
        otherwise, or if it has not exited within `timeout` seconds (default: the cluster's
        `leave_timeout` plus 10 s; the node is then killed).
        """
        p = self._node(node_id)
        if not p.running():
            raise LeaveFailed(f"node {node_id} is not running", node_id=node_id,
                              status=p.returncode)
        if timeout is None:
            timeout = self.config.leave_timeout + 10.0
        p.signal(signal.SIGTERM)
        try:
            status = p.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait(5)
            p.close_pipe()
            raise LeaveFailed(f"node {node_id} did not leave within {timeout:g} s (killed); "
                              f"its log ({p.log_path}) ends:\n{p.log_tail()}",
                              node_id=node_id, status=None) from None
        p.close_pipe()
        if status != 0:
            raise LeaveFailed(f"node {node_id} left with exit status {status}; its log "
                              f"({p.log_path}) ends:\n{p.log_tail()}", node_id=node_id,
                              status=status)

    def stop_routing(self, index: int = 0, *, kill: bool = True) -> None:
        """Stop routing `index`: SIGKILL (a crash), or SIGTERM with `kill=False`."""
        p = self._routers[index]
        if kill:
            p.signal(signal.SIGKILL)
            if p.proc is not None:
                p.proc.wait(self.config.stop_timeout)
            p.close_pipe()
        else:
            stop_all([p], self.config.stop_timeout)

    def start_routing(self, index: int = 0) -> str:
        """Start stopped routing `index` again on its port; returns its address when ready.
        It rebuilds the membership from the nodes' heartbeats (recovery phase) and reloads
        the replication overrides from the KVS."""
        p = self._routers[index]
        if p.running():
            raise RuntimeError(f"{p.name} is already running")
        p.argv = self._make_routing(index, self._routing_ports[index]).argv
        self._spawn(p)
        wait_all_ready([p], self.config.startup_timeout)
        return p.info["address"]

    def restart_routing(self, index: int = 0, *, kill: bool = True) -> str:
        """`stop_routing(index, kill=kill)` then `start_routing(index)` (same port)."""
        self.stop_routing(index, kill=kill)
        return self.start_routing(index)

    def start_node(self, node_id: str) -> List[str]:
        """Start a stopped node again (same id, config and data); returns its new addresses."""
        p = self._node(node_id)
        if p.running():
            raise RuntimeError(f"node {node_id} is already running")
        self._spawn(p)
        wait_all_ready([p], self.config.startup_timeout)
        return list(p.info["worker_addresses"])

    def restart_node(self, node_id: str, *, kill: bool = False) -> List[str]:
        """Stop and start one node; returns its new worker addresses."""
        self.stop_node(node_id, kill=kill)
        return self.start_node(node_id)

    def add_node(self, tier: str = MEMORY, threads: Optional[int] = None,
                 routing: Optional[Sequence[str]] = None) -> str:
        """Start one more node in `tier`; returns its id once it has joined. `routing`: the
        routing addresses it is given (default all; fewer plays a node that cannot reach
        every routing yet, as a pod whose name for one does not resolve)."""
        node_id = self.spawn_node(tier, threads, routing=routing)
        wait_all_ready([self._nodes[node_id]], self.config.startup_timeout)
        return node_id

    def spawn_node(self, tier: str = MEMORY, threads: Optional[int] = None,
                   node_id: Optional[str] = None,
                   routing: Optional[Sequence[str]] = None) -> str:
        """Start one more node in `tier` without waiting for it; returns its id at once.
        `node_ready(node_id)` tells when it has joined. `node_id` (default "<tier>-<i>", the
        next free index) must not name a node this cluster already has."""
        if not self.started:
            raise RuntimeError("LocalCluster is not started")
        if node_id is None:
            index = sum(1 for p in self._nodes.values()
                        if self._node_configs[p.name].tier == tier)
            while f"{tier}-{index}" in self._nodes:
                index += 1
            node_id = f"{tier}-{index}"
        elif node_id in self._nodes:
            raise ValueError(f"node id {node_id!r} is already used in this cluster")
        if threads is None:
            threads = self.config.memory_threads if tier == MEMORY else self.config.disk_threads
        p = self._make_node(tier, 0, max(1, threads), node_id=node_id, routing=routing)
        self._spawn(p)
        return p.name

    def node_ready(self, node_id: str) -> Optional[bool]:
        """Without blocking: True once the node announced it joined, False if it exited
        before that (`log_tail(node_id)` says why), None while it is starting."""
        return self._node(node_id).read_ready()

    # ---- internals ----------------------------------------------------------------------

    def _policy(self) -> Optional[Any]:
        """The monitor's PolicyConfig (None: no monitor)."""
        from .autoscale.policy_config import PolicyConfig
        chosen = self.config.autoscale
        if isinstance(chosen, PolicyConfig):
            return chosen
        if chosen is True or isinstance(chosen, dict) or self.config.monitor:
            # fault tolerance and the minimums follow this cluster's replication
            r = self.replication
            k = max(r.memory_global, r.disk_global) - 1
            return PolicyConfig(**{"fault_tolerance": max(0, k),
                                   "min_memory_nodes": max(1, r.memory_global),
                                   "min_disk_nodes": r.disk_global if self.config.disk_nodes
                                   else 0,
                                   **(chosen if isinstance(chosen, dict) else {})})
        if chosen not in (False, None):
            raise ValueError(f"autoscale must be True, False, an "
                             f"anna_core.autoscale.PolicyConfig or a dict of its knobs, got "
                             f"{chosen!r}")
        return None

    def _start_monitor(self) -> None:
        from .autoscale.spawner import local_pool
        from .monitor import Monitor
        autoscaling = self.config.autoscale not in (False, None)
        if autoscaling:
            self.manager = local_pool(self, self.config.provisioning_delay)
        kvs = Client(self.routing_addresses, ip=self.config.ip, auth=self.cluster_auth,
                     timeout=2.0, retries=1, max_value_bytes=self.config.max_value_bytes)
        self.monitor = Monitor(kvs, policy=self.policy, manager=self.manager,
                               autoscale=autoscaling,
                               default_replication=self.replication).start()

    def _node(self, node_id: str) -> ManagedProcess:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"no node {node_id!r} in this cluster; nodes: {self.node_ids}") from None

    def _make_node(self, tier: str, index: int, threads: int, node_id: Optional[str] = None,
                   routing: Optional[Sequence[str]] = None) -> ManagedProcess:
        node_id = node_id or f"{tier}-{index}"
        # The kernel keeps a disk worker's RocksDB at <data_dir>/<node_id>/<thread_id>.
        data_dir = self.data_dir if tier == DISK else None
        if data_dir:
            try:
                os.makedirs(data_dir, exist_ok=True)
            except OSError as e:
                raise StartupError(f"{node_id}: cannot create data directory {data_dir}: {e}",
                                   node_id) from None
        config = NodeConfig(node_id=node_id, tier=tier, threads=threads, ip=self.config.ip,
                            data_dir=data_dir, gossip_period_ms=self.config.gossip_period_ms,
                            max_value_bytes=self.config.max_value_bytes,
                            max_push_sockets=self.config.max_push_sockets,
                            push_handshake_ms=self.config.push_handshake_ms,
                            handoff_window_ms=self.config.handoff_window_ms,
                            pin_threads=self.config.effective_pin_threads(),
                            log_level=self.config.log_level,
                            key_dir=self.key_dir,
                            service_rate=self.config.service_rate,
                            client_links=self.config.client_links,
                            unix_links=self.config.unix_links,
                            disk_sync=self.config.disk_sync,
                            disk_sync_interval_ms=self.config.disk_sync_interval_ms,
                            capacity_bytes=(self.config.memory_capacity_bytes if tier == MEMORY
                                            else self.config.disk_capacity_bytes),
                            routing=list(routing or self.routing_addresses),
                            heartbeat_period=self.config.heartbeat_period,
                            leave_timeout=self.config.leave_timeout,
                            report_period=(self.policy.monitoring_period
                                           if self.policy is not None else None),
                            parent_pid=os.getpid())
        p = ManagedProcess(node_id, [sys.executable, "-m", "anna_core.node", "--config",
                                     config.to_json()], self.log_dir)
        self._nodes[node_id] = p
        self._node_configs[node_id] = config
        return p

    def _make_routing(self, index: int, port: int) -> ManagedProcess:
        config = RoutingConfig(ip=self.config.ip, port=port,
                               default_replication=self.replication, vnodes=self.config.vnodes,
                               log_level=self.config.log_level,
                               heartbeat_period=self.config.heartbeat_period,
                               heartbeat_timeout=self.config.heartbeat_timeout,
                               key_dir=self.key_dir, parent_pid=os.getpid())
        name = "routing" if index == 0 else f"routing-{index}"
        return ManagedProcess(name, [sys.executable, "-m", "anna_core.routing", "--config",
                                     config.to_json()], self.log_dir)

    def _spawn(self, p: ManagedProcess) -> None:
        p.spawn()
        if p not in self._processes:
            self._processes.append(p)
