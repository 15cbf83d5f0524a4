"""The monitor's status: what it saw and decided in one period, as JSON and as text (pure).

Contract:
- `build_status(summary, ...)` turns one period's `Summary` plus the decisions taken into a
  JSON-ready dict: per tier the nodes (occupancy, bytes stored, capacity, requests), the
  average/least/largest occupancy, memory use against capacity, nodes pending and leaving;
  the clients' latency against the SLO; the share of GETs served by the memory tier; the
  hottest keys with their replication; this period's actions with their reasons and the most
  recent earlier ones; why the policy held back (notes); the report problems. Bounded: at
  most `max_keys` keys and `max_decisions` decisions.
- `format_status(status, now_wall)` renders it for a terminal (`anna status`), saying how old
  it is.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ..config import DISK, MEMORY
from .summaries import Summary, TierSummary
from .words import amount, ms as fmt_seconds

__all__ = ["build_status", "format_status", "memory_get_share"]


def memory_get_share(raw_workers: Iterable[Mapping[str, Any]]) -> Optional[float]:
    """The fraction of GETs of the period that memory-tier workers served (None: no GETs)."""
    memory = total = 0
    for w in raw_workers:
        gets = w.get("gets", 0)
        if not isinstance(gets, int) or isinstance(gets, bool) or gets < 0:
            continue
        total += gets
        if w.get("tier") == MEMORY:
            memory += gets
    return memory / total if total else None


def _tier(t: TierSummary, pending: Sequence[str], leaving: Sequence[str]) -> Dict[str, Any]:
    return {"nodes": [{"node_id": n.node_id, "threads": n.threads,
                       "occupancy": round(n.occupancy, 4), "stored_bytes": n.stored_bytes,
                       "capacity_bytes": n.capacity_bytes, "requests": n.requests}
                      for n in t.nodes],
            "node_ids": list(t.node_ids), "avg_occupancy": t.avg_occupancy,
            "min_occupancy": t.min_occupancy, "max_occupancy": t.max_occupancy,
            "stored_bytes": t.stored_bytes, "capacity_bytes": t.capacity_bytes,
            "storage_fraction": t.storage_fraction, "requests": t.requests,
            "pending": list(pending), "leaving": list(leaving)}


def build_status(summary: Summary, *, wall: float, bucket: int, slo: float, statistic: str,
                 raw_workers: Sequence[Mapping[str, Any]] = (),
                 actions: Sequence[str] = (), recent: Sequence[Mapping[str, Any]] = (),
                 pending: Optional[Mapping[str, Sequence[str]]] = None,
                 leaving: Optional[Mapping[str, Sequence[str]]] = None,
                 grace_until: Optional[float] = None, autoscaling: bool = False,
                 problems: Sequence[str] = (), notes: Sequence[str] = (), max_keys: int = 10,
                 max_decisions: int = 20) -> Dict[str, Any]:
    """One period's status (see the module contract); `actions` are this period's reasons,
    `recent` earlier {"time", "action"} entries, `grace_until` seconds from now."""
    pending = pending or {}
    leaving = leaving or {}
    latency = None
    if summary.latency is not None:
        observed = summary.latency.value(statistic)
        latency = {"mean": summary.latency.mean, "p99": summary.latency.p99,
                   "clients": summary.latency.clients, "requests": summary.latency.requests,
                   "observed": observed, "over_slo": observed > slo}
    hot = sorted(summary.keys, key=lambda k: -k.accesses)[:max_keys]
    return {
        "time": wall, "bucket": bucket, "period": summary.period, "autoscaling": autoscaling,
        "slo": slo, "statistic": statistic, "latency": latency,
        "tiers": {t: _tier(summary.tier(t), pending.get(t, ()), leaving.get(t, ()))
                  for t in (MEMORY, DISK)},
        "memory_get_share": memory_get_share(raw_workers),
        "access_mean": summary.access_mean, "access_std": summary.access_std,
        "hot_keys": [{"key": k.key, "accesses": k.accesses, "size": k.size,
                      "replication": list(k.replication.as_tuple())} for k in hot],
        "replicated": len(summary.replicated),
        "actions": list(actions)[:max_decisions],
        "notes": list(notes)[:max_decisions],
        "recent": list(recent)[-max_decisions:],
        "grace_remaining": grace_until,
        "problems": list(problems)[:max_decisions] + list(summary.problems)[:max_decisions],
    }


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def format_status(status: Mapping[str, Any], now_wall: Optional[float] = None) -> str:
    """`status` (from `build_status`) as lines for a terminal."""
    now_wall = time.time() if now_wall is None else now_wall
    age = now_wall - float(status.get("time", now_wall))
    lines: List[str] = [
        f"Anna monitor status ({age:.1f} s old; period {status.get('period', 0):g} s; "
        f"autoscaling {'on' if status.get('autoscaling') else 'off'})"]
    lat = status.get("latency")
    slo = float(status.get("slo", 0))
    if lat:
        lines.append(f"latency: mean {fmt_seconds(lat['mean'])}, p99 {fmt_seconds(lat['p99'])} "
                     f"from {lat['clients']} client(s), {lat['requests']} requests; SLO "
                     f"{fmt_seconds(slo)} on the {status.get('statistic')} "
                     f"({'VIOLATED' if lat['over_slo'] else 'met'})")
    else:
        lines.append(f"latency: no client reports (SLO {fmt_seconds(slo)})")
    share = status.get("memory_get_share")
    if share is not None:
        lines.append(f"GETs served by memory: {_pct(share)}")
    for tier, t in status.get("tiers", {}).items():
        if not t["node_ids"] and not t["pending"]:
            continue
        cap = f" of {amount(t['capacity_bytes'])} ({_pct(t['storage_fraction'])})" \
            if t.get("capacity_bytes") else ""
        lines.append(f"{tier} tier: {len(t['node_ids'])} node(s), occupancy avg "
                     f"{_pct(t['avg_occupancy'])} min {_pct(t['min_occupancy'])} max "
                     f"{_pct(t['max_occupancy'])}, stored {amount(t['stored_bytes'])}{cap}"
                     + (f", pending {', '.join(t['pending'])}" if t["pending"] else "")
                     + (f", leaving {', '.join(t['leaving'])}" if t["leaving"] else ""))
        for n in t["nodes"]:
            lines.append(f"  {n['node_id']:<12} occupancy {_pct(n['occupancy']):>5}  "
                         f"requests {n['requests']:>8}  stored {amount(n['stored_bytes'])}")
    keys = status.get("hot_keys") or []
    if keys:
        lines.append("hottest keys: " + ", ".join(
            f"{k['key']} ({k['accesses']}, r={k['replication'][0]}/{k['replication'][2]})"
            for k in keys[:5]))
    if status.get("grace_remaining"):
        lines.append(f"grace period: {status['grace_remaining']:.1f} s left")
    for a in status.get("actions", []):
        lines.append(f"decided now: {a}")
    for n in status.get("notes", [])[:5]:
        lines.append(f"held back: {n}")
    for r in reversed(status.get("recent", [])[-5:]):
        lines.append(f"earlier ({now_wall - r['time']:.0f} s ago): {r['action']}")
    for p in status.get("problems", [])[:5]:
        lines.append(f"problem: {p}")
    return "\n".join(lines)
