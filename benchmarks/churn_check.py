"""The churn benchmark's judges: acknowledged writes lost, and TCC violations per keyspace segment.

Contract (pure: no sockets, no clocks; `benchmarks/churn.py` feeds them what it recorded):
- A write is a record of `benchmarks.tcc_workload` (`{"key", "vc", "deps", ...}`): its
  application clock `vc` holds a fresh `tx/<id>` entry of its own plus the merge of every
  version of the key its writer read. So a version `v` of the key *includes* write `w` exactly
  when `supersedes(v.vc, w.vc)` (Definition 4 on the application's clocks, which the system
  never sees: a version the system merged away by its own clocks does not count).
- `lost_writes(acked, final)`: `acked` is the acknowledged writes (`(txid, record)`: the call
  that wrote it returned its result to the client), `final` maps each key to the versions
  stored at the end (every concurrent version). A write is **lost** when no final version of
  its key includes it. Returns counts, per-key losses, the lost writes' txids
  (`lost_txids`) and a few samples.
- `replica_gaps(acked, replicas)`: the same test against each replica's own versions
  (`{key: [[versions of replica 1], [versions of replica 2], ...]}`): how many acknowledged
  writes some replica does not include (not lost while another replica has them, but one
  crash away from it).
- `segment_of(key)` / `check_by_segment(transactions)`: the workload never reads across
  keyspace segments (`churn/<run>/<mode>/<segment>/<i>`), so causal pasts never cross them
  and `hydrocache.checker.check` runs per segment (bounded cost) with the same verdicts as
  over the whole history. Returns violations by kind, plus samples.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

from hydrocache.checker import Transaction, Violation, check
from hydrocache.vclock import supersedes

__all__ = ["lost_writes", "replica_gaps", "segment_of", "check_by_segment", "includes"]

SAMPLES = 5


def includes(versions: Sequence[Mapping[str, Any]], write: Mapping[str, Any]) -> bool:
    """Whether some version in `versions` includes `write` (its clock supersedes the write's)."""
    return any(supersedes(v["vc"], write["vc"]) for v in versions)


def lost_writes(acked: Iterable[Tuple[str, Mapping[str, Any]]],
                final: Mapping[str, Sequence[Mapping[str, Any]]]) -> Dict[str, Any]:
    """Acknowledged writes that no final version of their key includes (see the contract)."""
    n = 0
    lost: List[Tuple[str, Mapping[str, Any]]] = []
    for txid, w in acked:
        n += 1
        if not includes(final.get(w["key"], ()), w):
            lost.append((txid, w))
    by_key: Dict[str, int] = {}
    for _, w in lost:
        by_key[w["key"]] = by_key.get(w["key"], 0) + 1
    return {"acknowledged": n, "lost": len(lost),
            "lost_keys": len(by_key),
            "lost_by_key": dict(sorted(by_key.items(), key=lambda kv: -kv[1])[:SAMPLES]),
            "lost_txids": [txid for txid, _ in lost],
            "sample": [f"{txid}: {w['key']} vc={dict(w['vc'])} not included by "
                       f"{[dict(v['vc']) for v in final.get(w['key'], ())]}"[:400]
                       for txid, w in lost[:SAMPLES]]}


def replica_gaps(acked: Iterable[Tuple[str, Mapping[str, Any]]],
                 replicas: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]]) -> Dict[str, Any]:
    """Acknowledged writes some replica of their key does not include (see the contract)."""
    gaps = 0
    keys = set()
    for _, w in acked:
        copies = replicas.get(w["key"], ())
        if not copies or any(not includes(versions, w) for versions in copies):
            gaps += 1
            keys.add(w["key"])
    return {"not_on_every_replica": gaps, "keys": len(keys)}


def segment_of(key: str) -> str:
    """The keyspace segment of a workload key `churn/<run>/<mode>/<segment>/<i>`."""
    return key.rsplit("/", 1)[0]


def check_by_segment(transactions: Iterable[Transaction]) -> Dict[str, Any]:
    """`hydrocache.checker.check` per keyspace segment; violations by kind and samples."""
    groups: Dict[str, List[Transaction]] = {}
    for t in transactions:
        keys = {o.key for o in t.reads} | {o.key for o in t.writes}
        segments = {segment_of(k) for k in keys}
        if len(segments) > 1:
            raise ValueError(f"transaction {t.txid} spans keyspace segments {sorted(segments)}: "
                             "the per-segment check would miss causal links between them")
        groups.setdefault(next(iter(segments), ""), []).append(t)
    found: List[Violation] = []
    for txs in groups.values():
        found.extend(check(txs))
    kinds: Dict[str, int] = {}
    for v in found:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
    return {"total": len(found), "by_kind": kinds,
            "transactions": sum(len(t) for t in groups.values()),
            "transactions_with_violation": len({v.txid for v in found}),
            "sample": [f"{v.kind} in {v.txid}: {v.detail}"[:300] for v in found[:SAMPLES]]}
