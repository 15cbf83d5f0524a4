"""What a scheduler reports about the cluster: `Client.status()` and `cloudburst status`.

Contract: `ClusterStatus` lists the executor workers the scheduler sees live (node, busy
fraction, calls unfinished there, restarts, calls placed there) and, per function or DAG,
the calls this scheduler placed: finished, failed, p50/p99 latency over recent calls
(seconds, as the scheduler saw them), in flight. `format_status` renders it as the text
`cloudburst status` prints; its `calls` columns count calls placed (finished or not), and
`unfinished` / `running` those not finished yet. Statistics are per scheduler: with several, ask each. `auth` says whether the
scheduler authenticates; `refused_connections` counts the connections its authentication
refused at the handshake, and `dropped` the messages of kinds their sender's role may not
send (a client posing as a worker), per (role, kind). `nodes` lists the executor nodes
(`ExecutorNodeStatus`: workers, busy fraction, whether this scheduler treats the node as
draining and places nothing new there, calls it placed there unfinished, and what the node
itself last reported); `backlog` counts calls waiting at the schedulers for a free worker
(or held because no worker was known yet). `actors` lists the actors the scheduler knows
(`ActorStatus`: id, class, worker and node, its calls this scheduler sent and that are
unfinished (running or queued), times re-created after its worker died and its
`max_restarts`, and why it ended), live ones first; `format_status` shows the live ones and
counts the ended.
"""
from __future__ import annotations

import json
from typing import List, NamedTuple, Optional

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["ClusterStatus", "WorkerStatus", "FunctionStatus", "Dropped", "ExecutorNodeStatus",
           "ActorStatus", "format_status"]


class WorkerStatus(NamedTuple):
    worker_id: str
    node_id: str
    utilization: float
    outstanding: int        # calls placed on it, unfinished
    restarts: int
    placed: int = 0         # calls this scheduler placed on it, finished or not


class FunctionStatus(NamedTuple):
    name: str
    calls: int
    errors: int
    p50: Optional[float]
    p99: Optional[float]
    in_flight: int


class Dropped(NamedTuple):
    """Messages a scheduler dropped because their sender's role may not send their kind."""
    role: str
    kind: str
    count: int


class ExecutorNodeStatus(NamedTuple):
    """One executor node as a scheduler sees it (executor autoscaling reads this)."""
    node_id: str
    workers: int
    utilization: float
    draining: bool          # this scheduler places no new call on it
    drain_epoch: int
    outstanding: int        # calls this scheduler placed on it, unfinished
    running: int            # the node's last report: functions running
    queued: int             # the node's last report: invocations waiting
    node_draining: bool     # the node's last report: draining


class ActorStatus(NamedTuple):
    """One actor as a scheduler sees it."""
    actor_id: str
    class_name: str
    worker_id: str
    node_id: str            # "" once it ended
    calls: int              # its calls this scheduler sent, unfinished (running or queued)
    restarts: int           # times re-created after its worker died
    max_restarts: int       # -1: without limit
    dead: str               # why it ended ("" while it lives)


class ClusterStatus(NamedTuple):
    scheduler: str
    kvs_address: str
    workers: List[WorkerStatus]
    functions: List[FunctionStatus]
    metrics_address: str
    auth: bool = False
    refused_connections: int = 0
    dropped: List[Dropped] = []
    nodes: List[ExecutorNodeStatus] = []
    backlog: int = 0
    actors: List[ActorStatus] = []

    @classmethod
    def from_reply(cls, scheduler: str, reply: "pb.Reply") -> "ClusterStatus":
        try:        # the scheduler's authentication counters travel as JSON in `message`
            security = json.loads(reply.message) if reply.message else {}
            dropped = [Dropped(str(d["role"]), str(d["kind"]), int(d["count"]))
                       for d in security.get("dropped", [])]
        except (ValueError, TypeError, KeyError, AttributeError):
            security, dropped = {}, []
        return cls(scheduler, reply.kvs_address,
                   [WorkerStatus(w.worker_id, w.node_id, w.utilization, w.outstanding,
                                 w.restarts, w.placed) for w in reply.workers],
                   [FunctionStatus(f.name, f.calls, f.errors, f.p50 if f.calls else None,
                                   f.p99 if f.calls else None, f.in_flight)
                    for f in reply.function_stats],
                   reply.metrics_address, bool(security.get("auth", False)),
                   int(security.get("refused_connections", 0)), dropped,
                   [ExecutorNodeStatus(n.node_id, n.workers, n.utilization, n.draining,
                                       n.drain_epoch, n.outstanding, n.running, n.queued,
                                       n.node_draining) for n in reply.executor_nodes],
                   reply.backlog,
                   [ActorStatus(a.actor_id, a.class_name, a.worker_id, a.node_id, a.calls,
                                a.restarts, a.max_restarts, a.dead) for a in reply.actors])


def _ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def format_status(status: ClusterStatus) -> str:
    lines = [f"scheduler {status.scheduler}   KVS {status.kvs_address}"
             + (f"   metrics {status.metrics_address}/metrics" if status.metrics_address else "")]
    if status.auth:
        dropped = sum(d.count for d in status.dropped)
        lines.append(f"authentication on: {status.refused_connections} connection(s) refused, "
                     f"{dropped} message(s) dropped"
                     + "".join(f"\n  dropped {d.count} {d.kind!r} from {d.role}"
                               for d in status.dropped))
    else:
        lines.append("authentication OFF")
    nodes = sorted({w.node_id for w in status.workers})
    lines.append(f"\n{len(status.workers)} live worker(s) on {len(nodes)} node(s)")
    if status.workers:
        lines.append(f"  {'worker':<28} {'node':<10} {'busy':>6} {'calls':>6} "
                     f"{'unfinished':>10} {'restarts':>9}")
        for w in status.workers:
            lines.append(f"  {w.worker_id:<28} {w.node_id:<10} {w.utilization:>6.0%} "
                         f"{w.placed:>6} {w.outstanding:>10} {w.restarts:>9}")
    draining = [n for n in status.nodes if n.draining]
    lines.append(f"\n{len(status.nodes)} executor node(s), {len(draining)} draining"
                 + (f", {status.backlog} call(s) waiting for a worker" if status.backlog else ""))
    if status.nodes:
        lines.append(f"  {'node':<10} {'workers':>7} {'busy':>6} {'unfinished':>10} "
                     f"{'running':>8} {'queued':>7}  state")
        for n in status.nodes:
            state = "draining" if n.draining else "active"
            lines.append(f"  {n.node_id:<10} {n.workers:>7} {n.utilization:>6.0%} "
                         f"{n.outstanding:>10} {n.running:>8} {n.queued:>7}  {state}")
    live = [a for a in status.actors if not a.dead]
    ended = len(status.actors) - len(live)
    lines.append(f"\n{len(live)} live actor(s)" + (f", {ended} ended" if ended else ""))
    if live:
        lines.append(f"  {'actor':<40} {'class':<16} {'worker':<28} {'node':<10} "
                     f"{'calls':>6} {'restarts':>9}")
        for a in live:
            limit = "inf" if a.max_restarts < 0 else str(a.max_restarts)
            lines.append(f"  {a.actor_id:<40} {a.class_name:<16} {a.worker_id:<28} "
                         f"{a.node_id:<10} {a.calls:>6} {f'{a.restarts}/{limit}':>9}")
    lines.append(f"\ncalls through this scheduler ({len(status.functions)} function(s)/DAG(s))")
    if status.functions:
        lines.append(f"  {'name':<28} {'calls':>7} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} "
                     f"{'running':>8}")
        for f in status.functions:          # calls placed: finished, and still running
            lines.append(f"  {f.name:<28} {f.calls + f.in_flight:>7} {f.errors:>7} "
                         f"{_ms(f.p50):>8} {_ms(f.p99):>8} {f.in_flight:>8}")
    return "\n".join(lines)
