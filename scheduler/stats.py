"""What a scheduler saw of its calls, per function or DAG: counts, errors, latency (pure).

Contract:
- `CallStats.started(call_id, name, now)` when the scheduler places a call;
  `finished(call_id, ok, now)` when a worker reports it done (or failed), or the scheduler
  gives up on it. The latency is the time between the two as this scheduler saw it (the
  workers' reports are batched within a few milliseconds). A call finished twice, or never
  started here, is ignored.
- Memory is bounded: at most `max_pending` calls are tracked in flight (the oldest is
  forgotten, counted in `forgotten`), and percentiles come from each name's last `recent`
  latencies. `expire(now, horizon)` forgets calls in flight for longer than `horizon`.
- `summaries()` gives, per name: calls finished, errors, p50 and p99 of the recent latencies,
  calls in flight. `render_prometheus(...)` writes everything in the Prometheus text format
  (version 0.0.4): counters, a latency histogram per name, gauges for workers and executor
  nodes (how many, which are draining, calls outstanding on each), and, when the
  scheduler authenticates, the connections refused at the handshake and the messages dropped
  per (sender role, kind). Every series carries a `scheduler` label: the scheduler's
  endpoint without the public key its address carries (`tcp://10.0.0.5:5000`), short and
  readable, and still unique per scheduler.
No clocks are read here: every method takes `now`.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

from runtime.auth import strip_key

__all__ = ["CallStats", "NameStats", "Summary", "WorkerGauge", "BUCKETS", "render_prometheus"]

# latency histogram bucket bounds, in seconds
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
           60.0)


@dataclass
class NameStats:
    calls: int = 0
    errors: int = 0
    latency_sum: float = 0.0
    buckets: List[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    recent: Deque[float] = field(default_factory=collections.deque)


class Summary(NamedTuple):
    name: str
    calls: int
    errors: int
    p50: Optional[float]
    p99: Optional[float]
    in_flight: int


class WorkerGauge(NamedTuple):
    worker_id: str
    node_id: str
    utilization: float
    outstanding: int


def _percentile(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class CallStats:
    """Per-name call statistics of one scheduler; see the module contract."""

    def __init__(self, max_pending: int = 100_000, recent: int = 1024) -> None:
        self.max_pending = max_pending
        self.recent = recent
        self._pending: Dict[str, Tuple[str, float]] = {}   # call id -> (name, started)
        self._names: Dict[str, NameStats] = {}
        self.forgotten = 0

    def started(self, call_id: str, name: str, now: float) -> None:
        if len(self._pending) >= self.max_pending:
            self._pending.pop(next(iter(self._pending)))
            self.forgotten += 1
        self._pending[call_id] = (name, now)

    def finished(self, call_id: str, ok: bool, now: float) -> None:
        entry = self._pending.pop(call_id, None)
        if entry is None:
            return
        name, started = entry
        self.record(name, ok, now - started)

    def record(self, name: str, ok: bool, latency: float) -> None:
        """Count one finished call of `name` that this scheduler did not see start (a direct
        call under a worker lease, reported by its client afterwards)."""
        s = self._names.setdefault(name, NameStats(recent=collections.deque(maxlen=self.recent)))
        latency = max(0.0, latency)
        s.calls += 1
        s.errors += 0 if ok else 1
        s.latency_sum += latency
        for i, bound in enumerate(BUCKETS):
            if latency <= bound:
                s.buckets[i] += 1
        s.recent.append(latency)

    def expire(self, now: float, horizon: float) -> int:
        """Forget calls in flight for longer than `horizon` s; returns how many."""
        old = [cid for cid, (_, started) in self._pending.items() if now - started > horizon]
        for cid in old:
            del self._pending[cid]
        self.forgotten += len(old)
        return len(old)

    def in_flight(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for name, _ in self._pending.values():
            out[name] = out.get(name, 0) + 1
        return out

    def names(self) -> Dict[str, NameStats]:
        return self._names

    def summaries(self) -> List[Summary]:
        flying = self.in_flight()
        out = []
        for name in sorted(set(self._names) | set(flying)):
            s = self._names.get(name, NameStats())
            recent = list(s.recent)
            out.append(Summary(name, s.calls, s.errors, _percentile(recent, 0.5),
                               _percentile(recent, 0.99), flying.get(name, 0)))
        return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prometheus(stats: CallStats, workers: Iterable[WorkerGauge],
                      scheduler: str, dropped: Mapping[Tuple[str, str], int] = {},
                      refused_connections: Optional[int] = None,
                      nodes: Iterable[Any] = ()) -> str:
    """The Prometheus text exposition of `stats` and `workers` (see the module contract)."""
    sched = f'scheduler="{_label(strip_key(scheduler))}"'
    lines = [
        "# HELP cloudburst_calls_total Calls finished, by function or DAG.",
        "# TYPE cloudburst_calls_total counter",
    ]
    names = stats.names()
    for name, s in sorted(names.items()):
        lines.append(f'cloudburst_calls_total{{{sched},function="{_label(name)}"}} {s.calls}')
    lines += ["# HELP cloudburst_call_errors_total Calls that failed, by function or DAG.",
              "# TYPE cloudburst_call_errors_total counter"]
    for name, s in sorted(names.items()):
        lines.append(f'cloudburst_call_errors_total{{{sched},function="{_label(name)}"}} '
                     f'{s.errors}')
    lines += ["# HELP cloudburst_call_latency_seconds Call latency as the scheduler saw it.",
              "# TYPE cloudburst_call_latency_seconds histogram"]
    for name, s in sorted(names.items()):
        labels = f'{sched},function="{_label(name)}"'
        for bound, count in zip(BUCKETS, s.buckets):
            lines.append(f'cloudburst_call_latency_seconds_bucket{{{labels},le="{bound:g}"}} '
                         f'{count}')
        lines.append(f'cloudburst_call_latency_seconds_bucket{{{labels},le="+Inf"}} {s.calls}')
        lines.append(f"cloudburst_call_latency_seconds_sum{{{labels}}} {s.latency_sum:.6f}")
        lines.append(f"cloudburst_call_latency_seconds_count{{{labels}}} {s.calls}")
    lines += ["# HELP cloudburst_calls_in_flight Calls placed and not yet finished.",
              "# TYPE cloudburst_calls_in_flight gauge",
              f"cloudburst_calls_in_flight{{{sched}}} {sum(stats.in_flight().values())}"]
    workers = list(workers)
    lines += ["# HELP cloudburst_workers_live Executor workers this scheduler sees live.",
              "# TYPE cloudburst_workers_live gauge",
              f"cloudburst_workers_live{{{sched}}} {len(workers)}",
              "# HELP cloudburst_worker_utilization Busy fraction a worker last reported.",
              "# TYPE cloudburst_worker_utilization gauge"]
    for w in workers:
        lines.append(f'cloudburst_worker_utilization{{{sched},worker="{_label(w.worker_id)}",'
                     f'node="{_label(w.node_id)}"}} {w.utilization:.4f}')
    lines += ["# HELP cloudburst_worker_outstanding_calls Calls placed on a worker, unfinished.",
              "# TYPE cloudburst_worker_outstanding_calls gauge"]
    for w in workers:
        lines.append(f'cloudburst_worker_outstanding_calls{{{sched},'
                     f'worker="{_label(w.worker_id)}",node="{_label(w.node_id)}"}} '
                     f'{w.outstanding}')
    nodes = list(nodes)      # scheduler.membership.NodeView
    lines += ["# HELP cloudburst_executor_nodes Executor nodes with live workers.",
              "# TYPE cloudburst_executor_nodes gauge",
              f"cloudburst_executor_nodes{{{sched}}} {len(nodes)}",
              "# HELP cloudburst_executor_nodes_draining Executor nodes this scheduler places "
              "no new call on.",
              "# TYPE cloudburst_executor_nodes_draining gauge",
              f"cloudburst_executor_nodes_draining{{{sched}}} "
              f"{sum(1 for n in nodes if n.draining)}",
              "# HELP cloudburst_executor_node_draining 1 if the node is draining.",
              "# TYPE cloudburst_executor_node_draining gauge"]
    for n in nodes:
        lines.append(f'cloudburst_executor_node_draining{{{sched},node="{_label(n.node_id)}"}} '
                     f'{int(n.draining)}')
    lines += ["# HELP cloudburst_executor_node_outstanding_calls Calls this scheduler placed on "
              "the node, unfinished.",
              "# TYPE cloudburst_executor_node_outstanding_calls gauge"]
    for n in nodes:
        lines.append(f'cloudburst_executor_node_outstanding_calls{{{sched},'
                     f'node="{_label(n.node_id)}"}} {n.outstanding}')
    if refused_connections is not None:
        lines += ["# HELP cloudburst_refused_connections_total Connections the authentication "
                  "refused at the handshake.",
                  "# TYPE cloudburst_refused_connections_total counter",
                  f"cloudburst_refused_connections_total{{{sched}}} {refused_connections}"]
        lines += ["# HELP cloudburst_dropped_messages_total Messages dropped because their "
                  "sender's role may not send their kind.",
                  "# TYPE cloudburst_dropped_messages_total counter"]
        for (role, kind), n in sorted(dropped.items()):
            lines.append(f'cloudburst_dropped_messages_total{{{sched},role="{_label(role)}",'
                         f'kind="{_label(kind)}"}} {n}')
    return "\n".join(lines) + "\n"
