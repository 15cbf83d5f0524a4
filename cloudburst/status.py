"""What a scheduler reports about the cluster: `Client.status()` and `cloudburst status`.

Contract: `ClusterStatus` lists the executor workers the scheduler sees live (node, busy
fraction, calls placed and unfinished, restarts) and, per function or DAG, the calls this
scheduler placed: finished, failed, p50/p99 latency over recent calls (seconds, as the
scheduler saw them), in flight. `format_status` renders it as the text `cloudburst status`
prints. Statistics are per scheduler: with several, ask each. `auth` says whether the
scheduler authenticates; `refused_connections` counts the connections its authentication
refused at the handshake, and `dropped` the messages of kinds their sender's role may not
send (a client posing as a worker), per (role, kind).
"""
from __future__ import annotations

import json
from typing import List, NamedTuple, Optional

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["ClusterStatus", "WorkerStatus", "FunctionStatus", "Dropped", "format_status"]


class WorkerStatus(NamedTuple):
    worker_id: str
    node_id: str
    utilization: float
    outstanding: int
    restarts: int


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


class ClusterStatus(NamedTuple):
    scheduler: str
    kvs_address: str
    workers: List[WorkerStatus]
    functions: List[FunctionStatus]
    metrics_address: str
    auth: bool = False
    refused_connections: int = 0
    dropped: List[Dropped] = []

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
                                 w.restarts) for w in reply.workers],
                   [FunctionStatus(f.name, f.calls, f.errors, f.p50 if f.calls else None,
                                   f.p99 if f.calls else None, f.in_flight)
                    for f in reply.function_stats],
                   reply.metrics_address, bool(security.get("auth", False)),
                   int(security.get("refused_connections", 0)), dropped)


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
        lines.append(f"  {'worker':<28} {'node':<10} {'busy':>6} {'calls':>6} {'restarts':>9}")
        for w in status.workers:
            lines.append(f"  {w.worker_id:<28} {w.node_id:<10} {w.utilization:>6.0%} "
                         f"{w.outstanding:>6} {w.restarts:>9}")
    lines.append(f"\ncalls through this scheduler ({len(status.functions)} function(s)/DAG(s))")
    if status.functions:
        lines.append(f"  {'name':<28} {'calls':>7} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} "
                     f"{'running':>8}")
        for f in status.functions:
            lines.append(f"  {f.name:<28} {f.calls:>7} {f.errors:>7} {_ms(f.p50):>8} "
                         f"{_ms(f.p99):>8} {f.in_flight:>8}")
    return "\n".join(lines)
