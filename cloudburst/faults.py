"""Fault injection for a `LocalCluster`: kill or signal its processes, for fault tests.

Contract: `FaultInjection` is a mixin of `LocalCluster` (which holds the processes it acts
on: `_nodes`, `_node(node_id)`, `_schedulers` and `workers`). `kill_node` SIGKILLs an
executor node and returns once its workers died with it; `signal_node` sends a signal to a
node and its workers (SIGSTOP / SIGCONT: a stalled node; SIGKILL: a crashed one);
`kill_scheduler` and `kill_worker` SIGKILL one scheduler or one worker process;
`signal_scheduler` sends a signal to one scheduler (SIGSTOP / SIGCONT: a stalled one). They touch
only processes the cluster started.
"""
from __future__ import annotations

import json
import os
import signal
import time
from typing import List

__all__ = ["FaultInjection", "process_alive"]


class FaultInjection:
    """The fault-injection methods `LocalCluster` inherits; see the module contract."""

    def kill_node(self, node: int = 0, timeout: float = 10.0) -> int:
        """SIGKILL executor node number `node` (its node cache) and return its pid once its
        workers have died with it (PR_SET_PDEATHSIG), so that no call reaches them after this
        returns. `RuntimeError` names the workers still running after `timeout` seconds."""
        p = self._nodes[node]
        pid = p.pid
        node_id = p.info.get("node_id") if p.info else None
        workers = [w["pid"] for w in self.workers if node_id and w.get("node_id") == node_id]
        workers += _children(pid)        # workers the node restarted since (new processes)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while True:
            alive = [w for w in workers if process_alive(w)]
            if not alive:
                return pid
            if time.monotonic() > deadline:
                raise RuntimeError(f"executor node {node_id} killed, but its workers {alive} "
                                   f"still run after {timeout} s")
            time.sleep(0.01)

    def signal_node(self, node_id: str, sig: int, workers: bool = True) -> List[int]:
        """Send `sig` to executor node `node_id`'s process and (with `workers`) to its worker
        processes, the node first; returns the pids signalled. SIGSTOP then SIGCONT stalls the
        node (past `heartbeat_timeout` the schedulers fail the calls placed on it); SIGKILL
        crashes it (the supervisor restarts it, with new workers). `KeyError` names an
        unknown node, `ProcessLookupError` one whose process is not running."""
        p = self._node(node_id)
        if not p.running():
            raise ProcessLookupError(f"executor node {node_id!r} is not running")
        pids = [p.pid]
        if workers:
            pids += [w["pid"] for w in self.workers if w.get("node_id") == node_id]
        for pid in pids:
            os.kill(pid, sig)
        return pids

    def signal_scheduler(self, scheduler: int, sig: int) -> int:
        """Send `sig` to scheduler number `scheduler` (SIGSTOP then SIGCONT: a stalled
        scheduler); returns its pid."""
        pid = self._schedulers[scheduler].pid
        os.kill(pid, sig)
        return pid

    def kill_scheduler(self, scheduler: int = 0) -> int:
        """SIGKILL scheduler number `scheduler`; returns its pid."""
        pid = self._schedulers[scheduler].pid
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_worker(self, worker_id: str) -> None:
        """SIGKILL one executor worker process (the one running now: a worker its node
        restarted under the same id is a new process, the node's child)."""
        for w in self.workers:
            if w["worker_id"] == worker_id:
                os.kill(self._current_worker_pid(w), signal.SIGKILL)
                return
        raise KeyError(f"no worker {worker_id!r} in this cluster")

    def _current_worker_pid(self, w: dict) -> int:
        if process_alive(w["pid"]):
            return w["pid"]
        node = next((p.pid for p in self._nodes
                     if p.info and p.info.get("node_id") == w.get("node_id")), None)
        needle = json.dumps({"worker_id": w["worker_id"]})[1:-1].encode()
        for child in (_children(node) if node is not None else []):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if needle in f.read() and process_alive(child):
                        return child
            except OSError:
                continue
        raise ProcessLookupError(f"worker {w['worker_id']} has no live process (its node "
                                 f"{w.get('node_id')} has not restarted it yet)")


def _children(pid: int) -> List[int]:
    """The live processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return [c for c in out if process_alive(c)]


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
