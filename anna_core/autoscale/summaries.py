"""The monitor's data: what workers and clients report, and the summary the policy reads (pure).

Contract (dissertation 3.2.4: the monitor aggregates per-key statistics over all replicas
before the policy engine sees them):
- `WorkerReport`: one KVS worker thread's statistics for one monitoring period: requests
  served, its busy fraction (`occupancy`, 0..1), bytes stored and its capacity, the moments
  of its per-key access counts (`key_accesses` = sum, `accessed_keys` = how many keys had at
  least one access, `access_square_sum` = sum of squares) and three bounded lists of
  `KeyCount`: its hottest keys, its coldest keys (which may have 0 accesses), and `tracked`:
  the keys it holds whose replication differs from the default (so a replicated or demoted
  key is seen cooling down or heating up even when it is in neither of the other lists).
- `ClientReport`: one client's request count, mean and p99 latency (seconds) for the period,
  and optionally the mean latency of some keys it used (`key_latencies`).
- `summarize(workers, clients, period=..., members=..., overrides=..., ...)` returns a
  `Summary`. It never raises on report contents: bad values are clamped or dropped and named
  in `Summary.problems`. Everything it returns is bounded: at most `max_keys` keys (the
  hottest half and the coldest half), `max_keys_per_report` keys read from each list, and
  at most `max_keys` replication overrides.
  * Per tier (`TierSummary`): member node ids (from `members`, else from the reports), per
    node stats (mean occupancy over its threads), average / minimum / maximum node occupancy
    and the least occupied node, bytes stored vs capacity (`storage_fraction`, None when no
    capacity is known), mean capacity per node, the fewest threads any node has.
  * Per key (`KeySummary`): accesses summed over every report that lists it (its replicas),
    its size, its current replication vector (override, else the default) and the clients'
    mean latency for it if any reported one.
  * `access_mean`, `access_std`: over keys with at least one access, pooled from the
    workers' moments (each (worker, key) pair is one sample: exact when keys are not
    replicated; a replicated key counts once per replica).
  * `latency`: request-weighted mean of the clients' means, and the largest client p99 (an
    upper bound of the p99 over all requests); None without client reports.
  * `replicated`: overrides with more global replicas than the default in some tier (the
    keys whose replication node removal may have to reduce).
A report from a node that is not in `members` (it just left) is dropped; a second report of
the same (node, thread) replaces the first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import (Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union)

from ..config import DISK, MEMORY, Replication, tier_name

__all__ = ["KeyCount", "WorkerReport", "ClientReport", "NodeStats", "TierSummary",
           "KeySummary", "LatencySummary", "Summary", "summarize", "MAX_PROBLEMS"]

MAX_PROBLEMS = 20


@dataclass(frozen=True)
class KeyCount:
    """A key's access count in one worker's period, and its value's size (0: unknown)."""

    key: str
    accesses: int
    size: int = 0


@dataclass(frozen=True)
class WorkerReport:
    """One KVS worker thread's statistics for one monitoring period (see module contract)."""

    node_id: str
    tier: Union[str, int]
    thread: int = 0
    requests: int = 0
    occupancy: float = 0.0
    stored_bytes: int = 0
    capacity_bytes: int = 0
    key_accesses: int = 0
    accessed_keys: int = 0
    access_square_sum: float = 0.0
    hottest: Tuple[KeyCount, ...] = ()
    coldest: Tuple[KeyCount, ...] = ()
    tracked: Tuple[KeyCount, ...] = ()


@dataclass(frozen=True)
class ClientReport:
    """One client's latencies (seconds) over one monitoring period."""

    client_id: str
    requests: int
    mean_latency: float
    p99_latency: float
    key_latencies: Tuple[Tuple[str, float], ...] = ()


@dataclass(frozen=True)
class NodeStats:
    """One node's statistics: its threads' mean occupancy and their totals."""

    node_id: str
    threads: int
    occupancy: float
    stored_bytes: int
    capacity_bytes: int
    requests: int


@dataclass(frozen=True)
class TierSummary:
    """One tier in one period. Occupancy fields are None when no member reported;
    `stored_bytes` and `capacity_bytes` add up the nodes that report a capacity."""

    tier: str
    node_ids: Tuple[str, ...] = ()
    nodes: Tuple[NodeStats, ...] = ()
    avg_occupancy: Optional[float] = None
    min_occupancy: Optional[float] = None
    max_occupancy: Optional[float] = None
    least_occupied: Optional[str] = None
    stored_bytes: int = 0
    capacity_bytes: int = 0
    node_capacity_bytes: Optional[float] = None
    threads_per_node: int = 0
    requests: int = 0

    @property
    def node_count(self) -> int:
        """How many member nodes the tier has."""
        return len(self.node_ids)

    @property
    def storage_fraction(self) -> Optional[float]:
        """Bytes stored / capacity over the reporting nodes (None: no capacity known)."""
        if self.capacity_bytes <= 0:
            return None
        return self.stored_bytes / self.capacity_bytes

    def node(self, node_id: str) -> Optional[NodeStats]:
        """The stats of one reporting node, or None."""
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        return None


@dataclass(frozen=True)
class KeySummary:
    """One key: accesses over all reporting replicas, size, replication, client latency."""

    key: str
    accesses: int
    size: int
    replication: Replication
    latency: Optional[float] = None


@dataclass(frozen=True)
class LatencySummary:
    """Client latency over one period (seconds)."""

    clients: int
    requests: int
    mean: float
    p99: float

    def value(self, statistic: str) -> float:
        """The statistic the SLO is compared with: "mean" or "p99"."""
        return self.p99 if statistic == "p99" else self.mean


@dataclass(frozen=True)
class Summary:
    """What the policy engine reads each period (see the module contract)."""

    period: float
    memory: TierSummary = field(default_factory=lambda: TierSummary(MEMORY))
    disk: TierSummary = field(default_factory=lambda: TierSummary(DISK))
    keys: Tuple[KeySummary, ...] = ()
    access_mean: float = 0.0
    access_std: float = 0.0
    latency: Optional[LatencySummary] = None
    replicated: Tuple[Tuple[str, Replication], ...] = ()
    default_replication: Replication = Replication()
    problems: Tuple[str, ...] = ()

    def tier(self, tier: Union[str, int]) -> TierSummary:
        """The summary of tier `tier` ("memory"/"disk" or its number)."""
        return self.memory if tier_name(tier) == MEMORY else self.disk


def _count(value: object) -> int:
    """A non-negative int from a reported number (garbage -> 0)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0
    if not math.isfinite(number) or number < 0:
        return 0
    return int(number)


def _fraction(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    if not math.isfinite(number):
        return 0.0
    return min(1.0, max(0.0, number))


def _amount(value: object) -> float:
    """A finite non-negative float from a reported number (garbage -> 0.0)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0


def _seconds(value: object) -> Optional[float]:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


class _Problems:
    def __init__(self) -> None:
        self.items: List[str] = []
        self.dropped = 0

    def add(self, text: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(text)
        else:
            self.dropped += 1

    def result(self) -> Tuple[str, ...]:
        if self.dropped:
            return tuple(self.items) + (f"... and {self.dropped} more problems",)
        return tuple(self.items)


def _tier_summary(tier: str, node_ids: Sequence[str],
                  threads: Mapping[str, List[WorkerReport]]) -> TierSummary:
    nodes: List[NodeStats] = []
    for node_id in node_ids:
        reports = threads.get(node_id)
        if not reports:
            continue
        nodes.append(NodeStats(
            node_id=node_id, threads=len(reports),
            occupancy=sum(_fraction(r.occupancy) for r in reports) / len(reports),
            stored_bytes=sum(_count(r.stored_bytes) for r in reports),
            capacity_bytes=sum(_count(r.capacity_bytes) for r in reports),
            requests=sum(_count(r.requests) for r in reports)))
    if not nodes:
        return TierSummary(tier, tuple(node_ids))
    least = min(nodes, key=lambda n: (n.occupancy, n.node_id))
    with_capacity = [n for n in nodes if n.capacity_bytes > 0]
    return TierSummary(
        tier=tier, node_ids=tuple(node_ids), nodes=tuple(nodes),
        avg_occupancy=sum(n.occupancy for n in nodes) / len(nodes),
        min_occupancy=least.occupancy, max_occupancy=max(n.occupancy for n in nodes),
        least_occupied=least.node_id,
        stored_bytes=sum(n.stored_bytes for n in with_capacity),
        capacity_bytes=sum(n.capacity_bytes for n in with_capacity),
        node_capacity_bytes=(sum(n.capacity_bytes for n in with_capacity) / len(with_capacity)
                             if with_capacity else None),
        threads_per_node=min(n.threads for n in nodes),
        requests=sum(n.requests for n in nodes))


def _bounded(items: List[KeySummary], limit: int) -> Tuple[KeySummary, ...]:
    """The hottest half and the coldest half of `items` (sorted hottest first)."""
    if len(items) <= limit:
        return tuple(items)
    hot = (limit + 1) // 2
    return tuple(items[:hot] + items[len(items) - (limit - hot):])


def summarize(workers: Iterable[WorkerReport], clients: Iterable[ClientReport] = (), *,
              period: float,
              members: Optional[Mapping[str, Iterable[str]]] = None,
              overrides: Optional[Mapping[str, Replication]] = None,
              default_replication: Replication = Replication(),
              max_keys: int = 1000, max_keys_per_report: int = 100) -> Summary:
    """Summarise one period's reports for the policy engine (see the module contract).

    Args:
        workers: the workers' reports of this period.
        clients: the clients' latency reports of this period.
        period: the length of the period (s, > 0): accesses / period are rates.
        members: tier name -> member node ids (from routing's membership); None: the nodes
            that reported. A member that did not report counts as a node without stats.
        overrides: key -> replication vector for keys with an override (from routing).
        default_replication: the vector of keys without an override.
        max_keys: bound on the keys (and overrides) the summary keeps.
        max_keys_per_report: how many entries of each report's lists are read.
    """
    if not (period > 0 and math.isfinite(period)):
        raise ValueError(f"period must be a finite number > 0, got {period!r}")
    if max_keys < 2 or max_keys_per_report < 1:
        raise ValueError("max_keys must be >= 2 and max_keys_per_report >= 1")
    problems = _Problems()
    overrides = dict(overrides or {})

    # the members of each tier
    tier_nodes: Dict[str, List[str]] = {MEMORY: [], DISK: []}
    node_tier: Dict[str, str] = {}
    if members is not None:
        for tier, ids in members.items():
            try:
                name = tier_name(tier)
            except ValueError:
                problems.add(f"membership of unknown tier {tier!r} ignored")
                continue
            for node_id in ids:
                if node_id not in node_tier:
                    node_tier[node_id] = name
                    tier_nodes[name].append(node_id)

    # the latest report of each (node, thread)
    latest: Dict[Tuple[str, int], WorkerReport] = {}
    for report in workers:
        try:
            name = tier_name(report.tier)
        except (ValueError, TypeError):
            problems.add(f"report of {report.node_id!r} with unknown tier {report.tier!r} dropped")
            continue
        if members is not None:
            if report.node_id not in node_tier:
                problems.add(f"report of {report.node_id!r}, not a member, dropped")
                continue
            if node_tier[report.node_id] != name:
                problems.add(f"report of {report.node_id!r} names tier {name}, membership says "
                             f"{node_tier[report.node_id]}; dropped")
                continue
        elif report.node_id not in node_tier:
            node_tier[report.node_id] = name
            tier_nodes[name].append(report.node_id)
        elif node_tier[report.node_id] != name:
            problems.add(f"report of {report.node_id!r} names two tiers; the later dropped")
            continue
        latest[(report.node_id, _count(report.thread))] = report

    threads: Dict[str, List[WorkerReport]] = {}
    for (node_id, _thread), report in sorted(latest.items()):
        threads.setdefault(node_id, []).append(report)

    # per-key aggregation and the access moments
    accesses: Dict[str, int] = {}
    sizes: Dict[str, int] = {}
    samples = 0
    total = 0.0
    squares = 0.0
    for report in latest.values():
        listed: Dict[str, Tuple[int, int]] = {}
        for entries in (report.hottest, report.coldest, report.tracked):
            for entry in tuple(entries)[:max_keys_per_report]:
                if not isinstance(getattr(entry, "key", None), str):
                    problems.add(f"report of {report.node_id!r} lists a key that is not a str")
                    continue
                count, size = _count(entry.accesses), _count(entry.size)
                old = listed.get(entry.key, (0, 0))
                listed[entry.key] = (max(old[0], count), max(old[1], size))
        for key, (count, size) in listed.items():
            accesses[key] = accesses.get(key, 0) + count
            sizes[key] = max(sizes.get(key, 0), size)
        if _count(report.accessed_keys) > 0:
            samples += _count(report.accessed_keys)
            total += _count(report.key_accesses)
            squares += _amount(report.access_square_sum)
        else:   # no moments reported: its listed keys are the samples
            counts = [c for c, _ in listed.values() if c > 0]
            samples += len(counts)
            total += sum(counts)
            squares += sum(c * c for c in counts)
    mean = total / samples if samples else 0.0
    std = math.sqrt(max(0.0, squares / samples - mean * mean)) if samples else 0.0

    # client latency
    latency: Optional[LatencySummary] = None
    key_latency_sum: Dict[str, float] = {}
    key_latency_n: Dict[str, int] = {}
    weighted, requests, means, p99s = 0.0, 0, [], []
    for client in clients:
        m, p = _seconds(client.mean_latency), _seconds(client.p99_latency)
        if m is None or p is None:
            problems.add(f"latency report of {client.client_id!r} with invalid numbers dropped")
            continue
        n = _count(client.requests)
        weighted += m * n
        requests += n
        means.append(m)
        p99s.append(p)
        for item in tuple(client.key_latencies)[:max_keys_per_report]:
            try:
                key, value = item
            except (TypeError, ValueError):
                problems.add(f"latency report of {client.client_id!r} has a malformed key entry")
                continue
            seconds = _seconds(value)
            if isinstance(key, str) and seconds is not None and (
                    key in key_latency_sum or len(key_latency_sum) < max_keys):
                key_latency_sum[key] = key_latency_sum.get(key, 0.0) + seconds
                key_latency_n[key] = key_latency_n.get(key, 0) + 1
    if means:
        latency = LatencySummary(clients=len(means), requests=requests,
                                 mean=weighted / requests if requests else sum(means) / len(means),
                                 p99=max(p99s))

    keys = sorted((KeySummary(key=k, accesses=a, size=sizes.get(k, 0),
                              replication=overrides.get(k, default_replication),
                              latency=(key_latency_sum[k] / key_latency_n[k]
                                       if k in key_latency_sum else None))
                   for k, a in accesses.items()),
                  key=lambda s: (-s.accesses, s.key))

    def wider(r: Replication) -> bool:
        return (r.memory_global > default_replication.memory_global
                or r.disk_global > default_replication.disk_global)

    replicated = sorted(((k, r) for k, r in overrides.items() if wider(r)),
                        key=lambda kr: (-max(kr[1].memory_global, kr[1].disk_global), kr[0]))

    return Summary(period=float(period),
                   memory=_tier_summary(MEMORY, tier_nodes[MEMORY], threads),
                   disk=_tier_summary(DISK, tier_nodes[DISK], threads),
                   keys=_bounded(keys, max_keys), access_mean=mean, access_std=std,
                   latency=latency, replicated=tuple(replicated[:max_keys]),
                   default_replication=default_replication, problems=problems.result())
