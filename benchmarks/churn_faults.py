"""The churn benchmark's faults (`benchmarks/churn.py`): what each does to a LocalCluster.

Contract: `Faults(cluster, client, run, slow_dag).apply(name)` applies one fault to a running
`cloudburst.LocalCluster` through its public methods and returns what it did (a JSON-able
dict: the node, its pid, durations, or why it was skipped); `run_faults` applies a schedule
at evenly spread points of a run's progress and records each entry, with its start and end
times, in `run.faults`. `restore` brings the KVS back to its starting size. Every wait has a
deadline (`wait_for` polls other processes' state until one). The faults:
- `stall`: `slow_dag(segment, j)` issues one slow writer per worker on the segment's hottest
  keys, then the executor node that reports the most running functions gets SIGSTOP for
  `args.stall` s (past the heartbeat timeout), then SIGCONT; the run's writers stay on that
  segment meanwhile (`run.pin`).
- `kill-executor`: SIGKILL of an executor node (in turn); waits until every worker is live
  again (the cluster's supervisor restarts the node with new workers).
- `kill-kvs` / `leave-kvs`: SIGKILL / graceful leave of the oldest running KVS node, skipped
  when fewer than `args.replicas` nodes would remain; `join-kvs`: a node joins.
"""
from __future__ import annotations

import signal
import time
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Sequence

__all__ = ["Faults", "run_faults", "restore", "wait_for", "FAULTS"]

FAULTS = ["stall", "kill-kvs", "kill-executor", "join-kvs", "leave-kvs"]


class Faults:
    """Applies the fault schedule to the cluster; each fault returns what it did."""

    def __init__(self, cluster: Any, client: Any, run: Any,
                 slow_dag: Callable[[int, int], "Future[Dict[str, Any]]"]) -> None:
        self.cluster, self.client, self.run, self.slow_dag = cluster, client, run, slow_dag
        self.args = run.args
        self.kills = 0

    def apply(self, name: str) -> Dict[str, Any]:
        return {"stall": self.stall, "kill-executor": self.kill_executor,
                "kill-kvs": self.kill_kvs, "join-kvs": self.join_kvs,
                "leave-kvs": self.leave_kvs}[name]()

    def _workers(self) -> int:
        return self.args.nodes * self.args.executors

    def stall(self) -> Dict[str, Any]:
        run = self.run
        # the writers stay on the slow writers' keys until the stall is over
        seg = min(run.segment(run.completed), run.written - 1)
        run.pin(seg)
        try:
            futures = [self.slow_dag(seg, j) for j in range(self._workers())]
            # give the slow sinks time to be placed and to read (a fraction of their sleep)
            time.sleep(min(0.5, self.args.slow / 3))
            nodes = {n.node_id: n.running for n in self.client.status().nodes}
            live = self.cluster.executor_node_ids()
            target = max(live, key=lambda n: (nodes.get(n, 0), n))
            pid = self.cluster.signal_node(target, signal.SIGSTOP)[0]   # the node and its workers
            stopped = run.now()
            try:
                time.sleep(self.args.stall)       # the fault's length
            finally:
                self.cluster.signal_node(target, signal.SIGCONT)
            deadline = time.monotonic() + self.args.call_timeout + 10
            # each slow call has its own deadline and returns its record, never raises
            records = [f.result(timeout=max(0.1, deadline - time.monotonic()))
                       for f in futures]
        finally:
            run.pin(None)
        return {"node": target, "pid": pid, "running_on_node": nodes.get(target, 0),
                "stopped_at": stopped, "stopped_s": self.args.stall,
                "slow_dags": len(futures),
                "slow_dags_acknowledged": sum(1 for r in records if r["error"] is None)}

    def kill_executor(self) -> Dict[str, Any]:
        live = sorted(self.cluster.executor_node_ids())
        target = live[self.kills % len(live)]
        self.kills += 1
        old = {w["worker_id"] for w in self.cluster.workers if w["node_id"] == target}
        pid = self.cluster.signal_node(target, signal.SIGKILL, workers=False)[0]
        t0 = time.monotonic()
        recovered = wait_for(lambda: self._full(old), self.args.recovery_timeout)
        return {"node": target, "pid": pid, "recovered": recovered,
                "recovery_s": round(time.monotonic() - t0, 2)}

    def _full(self, gone: set) -> bool:
        live = set(self.client.executors())
        return len(live) >= self._workers() and not (gone & live)

    def _running_kvs(self) -> List[str]:
        kvs = self.cluster.kvs
        return [n for n in kvs.node_ids if kvs.is_running(n)]

    def kill_kvs(self) -> Dict[str, Any]:
        running = self._running_kvs()
        if len(running) - 1 < self.args.replicas:
            return {"skipped": f"only {len(running)} KVS nodes run; {self.args.replicas} "
                               f"replicas must stay"}
        victim = running[0]
        self.cluster.kvs.kill_node(victim)
        return {"node": victim, "running_after": len(running) - 1}

    def join_kvs(self) -> Dict[str, Any]:
        t0 = time.monotonic()
        node = self.cluster.kvs.add_node()
        return {"node": node, "joined_s": round(time.monotonic() - t0, 2),
                "running_after": len(self._running_kvs())}

    def leave_kvs(self) -> Dict[str, Any]:
        running = self._running_kvs()
        if len(running) - 1 < self.args.replicas:
            return {"skipped": f"only {len(running)} KVS nodes run; {self.args.replicas} "
                               f"replicas must stay"}
        victim = running[0]
        t0 = time.monotonic()
        self.cluster.kvs.remove_node(victim)
        return {"node": victim, "left_s": round(time.monotonic() - t0, 2),
                "running_after": len(running) - 1}


def wait_for(condition: Any, timeout: float, interval: float = 0.1) -> bool:
    """Poll `condition` (state of other processes) until true or `timeout`; never raises."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return True
        except Exception:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def run_faults(faults: Faults, names: Sequence[str], log: Callable[[str], None]) -> None:
    run = faults.run
    try:
        for j, name in enumerate(names):
            at = int(run.dags * (j + 1) / (len(names) + 1))
            if not run.wait_progress(at):
                run.faults.append({"fault": name, "skipped": "the mode's time ran out"})
                continue
            entry: Dict[str, Any] = {"fault": name, "at_dags": run.completed, "t": run.now()}
            log(f"[{run.name}] fault {j + 1}/{len(names)}: {name} at {entry['t']:.1f} s "
                f"({run.completed} DAGs done)")
            try:
                entry.update(faults.apply(name))
            except Exception as e:
                entry["error"] = f"{type(e).__name__}: {e}"[:400]
                log(f"[{run.name}] fault {name} failed: {entry['error']}")
            entry["end"] = run.now()
            run.faults.append(entry)
    finally:
        run.faults_done.set()




def restore(cluster: Any, client: Any, args: Any) -> Dict[str, Any]:
    """Bring the KVS back to `--kvs-nodes` running nodes and wait for every executor worker."""
    kvs = cluster.kvs
    added = []
    while sum(1 for n in kvs.node_ids if kvs.is_running(n)) < args.kvs_nodes:
        added.append(kvs.add_node())
    full = wait_for(lambda: len(client.executors()) >= args.nodes * args.executors,
                    args.recovery_timeout)
    return {"kvs_added": added, "executors_full": full}
