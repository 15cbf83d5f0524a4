"""A `LocalCluster`'s executor nodes: starting, adding, readying and removing them.

Contract: `ExecutorNodes` is a mixin of `LocalCluster` (cloudburst/local.py), which sets up
the state it works on (`_nodes` and `_nodes_lock`, `_node_seq`, `_ready_nodes`, `workers`,
`_standby`, `_watchdog`, `supervise`, `started`, `kvs`, the nodes' settings, and
`_kvs_address()`, `_left(deadline)`, `wait_for_workers`, `startup_timeout`). The
autoscaler's pool (`cloudburst/executor_spawner.py`) and fault tests use these.
- `reserve_executor_node_id()`: a fresh node id, never reused in this cluster;
  `executor_node_ids()`: the nodes whose process runs (started or starting).
- `spawn_executor_node(node_id=None)` starts a node process without waiting (the standby's
  spare when there is one: it starts at once); `executor_node_ready(node_id)` is True once
  its workers are up (they are then in `workers`, the node is supervised and the standby
  makes the next spare), False if it exited first, None while it starts.
- `add_executor_node(timeout=None)` does both and waits until every scheduler sees the
  node's workers (`StartupError` naming it otherwise).
- `remove_executor_node(node_id, timeout)` stops a node (SIGTERM, then SIGKILL) and forgets
  it and its workers; it is not restarted, and calls running on it fail (drain it first).
  `discard_executor_node` does so for a node that failed to start.
- `node_pid(node_id)` (KeyError if not in the cluster), `standby_pid()` (None without a
  spare).
- `_on_restarted(p)`: a supervised process is back; an executor node's new workers replace
  its old ones in `workers`.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import List, Optional

from runtime.process import ManagedProcess, wait_all_ready

__all__ = ["ExecutorNodes"]

log = logging.getLogger("cloudburst.local")      # the cluster's logger: same records as before


class ExecutorNodes:
    """The executor-node methods `LocalCluster` inherits; see the module contract."""

    def _node_config(self, node_id: str) -> str:
        from executor.config import NodeConfig
        return NodeConfig(node_id=node_id, kvs_address=self._kvs_address(),
                            scheduler_addresses=self.scheduler_addresses,
                            workers=self.executors_per_node,
                            heartbeat_period=self.heartbeat_period,
                            log_level=self.log_level, parent_pid=os.getpid(),
                            log_dir=self.log_dir, ipc_dir=self.ipc_dir,
                            function_time_limit=self.function_time_limit,
                            restart_workers=self.restart_workers,
                            unresponsive_timeout=self.unresponsive_timeout,
                          key_dir=self.key_dir, write_quorum=self.write_quorum).to_json()

    def _node_argv(self, config: str) -> List[str]:
        return [sys.executable, "-m", "executor", "--config", config]

    def _node_process(self, node_id: str) -> ManagedProcess:
        return ManagedProcess(node_id, self._node_argv(self._node_config(node_id)),
                              self.log_dir)

    def reserve_executor_node_id(self) -> str:
        """A fresh executor node id (never reused in this cluster)."""
        with self._nodes_lock:
            node_id = f"node{self._node_seq}"
            self._node_seq += 1
        return node_id

    def executor_node_ids(self) -> List[str]:
        """Executor nodes whose process runs (started or starting)."""
        with self._nodes_lock:
            return [p.name for p in self._nodes if p.running()]

    def spawn_executor_node(self, node_id: Optional[str] = None) -> str:
        """Start an executor node process without waiting for it (see
        `executor_node_ready`); returns its id."""
        if not self.started or self.kvs is None:
            raise RuntimeError("LocalCluster is not started")
        node_id = node_id or self.reserve_executor_node_id()
        with self._nodes_lock:
            if any(q.name == node_id for q in self._nodes):
                raise ValueError(f"executor node {node_id} already exists")
            config = self._node_config(node_id)
            p = None if self._standby is None else \
                self._standby.take(node_id, config, self._node_argv(config))
            started = p is not None                # the spare starts at once
            p = p or ManagedProcess(node_id, self._node_argv(config), self.log_dir)
            self._nodes.append(p)
        if not started:
            p.spawn()
        return node_id

    def _node(self, node_id: str) -> ManagedProcess:
        with self._nodes_lock:
            for p in self._nodes:
                if p.name == node_id:
                    return p
        raise KeyError(f"no executor node {node_id!r} in this cluster")

    def node_pid(self, node_id: str) -> int:
        """The process id of executor node `node_id` (KeyError if it is not in the cluster)."""
        return self._node(node_id).pid

    def standby_pid(self) -> Optional[int]:
        """The process id of the spare node waiting to be added, or None."""
        return None if self._standby is None else self._standby.spare_pid()

    def executor_node_ready(self, node_id: str) -> Optional[bool]:
        """True once the node's workers are up (they are then in `workers` and the node is
        supervised), False if it exited first, None while it starts."""
        p = self._node(node_id)
        state = p.read_ready()
        if state and node_id not in self._ready_nodes:
            with self._nodes_lock:
                self._ready_nodes.add(node_id)
                self.workers.extend(dict(w, node_id=node_id) for w in p.info["workers"])
                if self._standby is not None:    # the next spare, once this one serves
                    self._standby.replenish()
            if self.supervise:
                self._watchdog.watch([p])
        return state

    def add_executor_node(self, timeout: Optional[float] = None) -> str:
        """Start an executor node and wait until every scheduler sees its workers;
        returns its id (`StartupError` naming it otherwise)."""
        timeout = self.startup_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        node_id = self.spawn_executor_node()
        p = self._node(node_id)
        wait_all_ready([p], self._left(deadline))
        self.executor_node_ready(node_id)
        for address in self.scheduler_addresses:
            self.wait_for_workers({w["worker_id"] for w in p.info["workers"]}, address,
                                  self._left(deadline))
        return node_id

    def discard_executor_node(self, node_id: str) -> None:
        """Kill a node that failed to start and forget it."""
        self.remove_executor_node(node_id, timeout=2.0)

    def remove_executor_node(self, node_id: str, timeout: float = 15.0) -> None:
        """Stop executor node `node_id` (SIGTERM, then SIGKILL after `timeout`) and forget
        it; it is not restarted. Calls running on it fail: drain it first."""
        p = self._node(node_id)
        self._watchdog.forget(p.name)
        p.stop(timeout)
        with self._nodes_lock:
            self._nodes[:] = [q for q in self._nodes if q is not p]
            self.workers[:] = [w for w in self.workers if w["node_id"] != node_id]
            self._ready_nodes.discard(node_id)

    def _on_restarted(self, p: ManagedProcess) -> None:
        """A supervised process is back: an executor node's new workers replace its old."""
        if "workers" not in p.info:
            log.warning("%s restarted at %s", p.name, p.info.get("address"))
            return
        node_id = p.info["node_id"]
        fresh = [dict(w, node_id=node_id) for w in p.info["workers"]]
        with self._nodes_lock:        # the autoscaler's thread changes `workers` too
            self.workers[:] = [w for w in self.workers if w["node_id"] != node_id] + fresh
        log.warning("%s restarted with workers %s", p.name, [w["worker_id"] for w in fresh])
