"""How reports travel through Anna: metadata keys, encoding, and the clients' latency recorder (pure).

Contract (dissertation 3.2.4: "each storage server and client reports its statistics to the
KVS itself"; the monitor reads them back):
- Time is cut into *buckets* of one monitoring period T: bucket b covers wall-clock seconds
  [b·T, (b+1)·T) (`bucket_of(wall, period)`). Wall clock, because reporters and the monitor
  are different processes, possibly on different machines; they only need clocks within a
  fraction of T of each other.
- Every reporter adds one element per period to the SetLattice of the bucket it reports in:
  nodes to `worker_reports_key(b)`, clients to `client_reports_key(b)`. A set merges by union,
  so concurrent reporters never overwrite each other and the monitor reads a whole period's
  reports with one GET. The monitor deletes buckets it has read (`expired_buckets`), so the
  keys stay bounded while a monitor runs; reporters run only when monitoring is on.
- An element is compact JSON: `encode_node_report(...)` holds one node's per-thread report
  dicts (the kernel's `Node.take_report()`), `encode_client_report(...)` one `ClientReport`.
  Each carries its reporter's id and a sequence number, so a report read twice (the monitor
  reads the current and the previous bucket, to catch reports that arrive late) counts once.
- `decode_*` never raise on content: a bad element (not JSON, wrong shape, over
  `MAX_REPORT_BYTES`) is skipped and named in the returned problems. Keys under the metadata
  prefix `__anna__/` are dropped from the key lists: they are the cluster's bookkeeping (these
  very reports among them), not workload, and must never be replicated or moved by policy.
- `STATUS_KEY` holds the monitor's latest status (JSON, LWW) for `anna status`.
- `LatencyRecorder` is a client's bounded record of request latencies for the current period:
  count, mean, p99 (from at most `max_samples` samples, reservoir-sampled with a seeded
  generator), and the mean latency of its most-used keys (at most `max_keys` tracked).
  `take(client_id, seq)` returns the period's `ClientReport` (None when idle) and starts a
  new period.
"""
from __future__ import annotations

import json
import math
import random
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from .summaries import ClientReport, KeyCount, WorkerReport

__all__ = ["METADATA_PREFIX", "STATS_PREFIX", "STATUS_KEY", "MAX_REPORT_BYTES",
           "bucket_of", "worker_reports_key", "client_reports_key", "expired_buckets",
           "encode_node_report", "decode_node_reports", "encode_client_report",
           "decode_client_reports", "is_metadata_key", "LatencyRecorder"]

METADATA_PREFIX = "__anna__/"
STATS_PREFIX = METADATA_PREFIX + "stats/"
STATUS_KEY = METADATA_PREFIX + "status"
MAX_REPORT_BYTES = 4 * 1024 * 1024     # one element; a node's report is a few tens of KB
MAX_KEYS_PER_LIST = 1000               # entries read from each of a report's key lists


def bucket_of(wall: float, period: float) -> int:
    """The bucket (period number since the epoch) wall-clock time `wall` falls in."""
    if not (period > 0 and math.isfinite(period)):
        raise ValueError(f"period must be a finite number > 0, got {period!r}")
    return int(wall // period)


def worker_reports_key(bucket: int) -> str:
    """The SetLattice key holding the nodes' reports of `bucket`."""
    return f"{STATS_PREFIX}workers/{bucket}"


def client_reports_key(bucket: int) -> str:
    """The SetLattice key holding the clients' latency reports of `bucket`."""
    return f"{STATS_PREFIX}clients/{bucket}"


def expired_buckets(current: int, last_deleted: Optional[int], keep: int = 2) -> List[int]:
    """Buckets the monitor may delete at bucket `current`: everything older than the `keep`
    most recent ones, from just after `last_deleted` (at most 16 at once, so a monitor
    that was stopped for long does not spend a period deleting)."""
    newest_old = current - keep
    first = newest_old - 15 if last_deleted is None else max(last_deleted + 1, newest_old - 15)
    return list(range(first, newest_old + 1))


def is_metadata_key(key: str) -> bool:
    """Whether `key` is the cluster's own bookkeeping (never moved or replicated by policy)."""
    return key.startswith(METADATA_PREFIX)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def encode_node_report(node_id: str, tier: str, seq: int, wall: float,
                       workers: Sequence[Mapping[str, Any]]) -> bytes:
    """One node's report element: its threads' `take_report()` dicts."""
    return _dumps({"kind": "node", "reporter": node_id, "tier": tier, "seq": seq,
                   "time": wall, "workers": [dict(w) for w in workers]})


def encode_client_report(report: ClientReport, seq: int, wall: float) -> bytes:
    """One client's report element."""
    return _dumps({"kind": "client", "reporter": report.client_id, "seq": seq, "time": wall,
                   "requests": report.requests, "mean": report.mean_latency,
                   "p99": report.p99_latency,
                   "keys": [[k, v] for k, v in report.key_latencies]})


def _load(element: bytes, kind: str, problems: List[str]) -> Optional[Dict[str, Any]]:
    if len(element) > MAX_REPORT_BYTES:
        problems.append(f"a {kind} report of {len(element)} bytes is over the "
                        f"{MAX_REPORT_BYTES}-byte bound; skipped")
        return None
    try:
        value = json.loads(element)
    except (ValueError, UnicodeDecodeError) as e:
        problems.append(f"a {kind} report is not JSON ({e}); skipped")
        return None
    if not isinstance(value, dict) or value.get("kind") != kind \
            or not isinstance(value.get("reporter"), str) or not isinstance(value.get("seq"), int):
        problems.append(f"a {kind} report has the wrong shape; skipped")
        return None
    return value


def _new_reports(elements: Iterable[bytes], kind: str, seen: Optional[set],
                 problems: List[str]) -> Iterator[Dict[str, Any]]:
    """The parsed elements of `kind` not yet in `seen` (by reporter and sequence number)."""
    for element in elements:
        value = _load(element, kind, problems)
        if value is None:
            continue
        ident = (kind, value["reporter"], value["seq"])
        if seen is not None:
            if ident in seen:
                continue
            seen.add(ident)
        yield value


def _key_counts(entries: Any) -> Tuple[KeyCount, ...]:
    out: List[KeyCount] = []
    if not isinstance(entries, list):
        return ()
    for e in entries[:MAX_KEYS_PER_LIST]:
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            continue
        if is_metadata_key(e["key"]):
            continue
        accesses, size = e.get("accesses", 0), e.get("size", 0)
        if isinstance(accesses, bool) or not isinstance(accesses, int) or accesses < 0:
            continue
        out.append(KeyCount(e["key"], accesses, size if isinstance(size, int) and size >= 0
                            else 0))
    return tuple(out)


def _worker(node_id: str, tier: str, w: Mapping[str, Any]) -> WorkerReport:
    def number(name: str, default: float = 0) -> Any:
        v = w.get(name, default)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else default

    return WorkerReport(node_id=node_id, tier=tier, thread=int(number("thread")),
                        requests=int(number("requests")), occupancy=float(number("occupancy")),
                        stored_bytes=int(number("stored_bytes")),
                        capacity_bytes=int(number("capacity_bytes")),
                        key_accesses=int(number("key_accesses")),
                        accessed_keys=int(number("accessed_keys")),
                        access_square_sum=float(number("access_square_sum")),
                        hottest=_key_counts(w.get("hottest")),
                        coldest=_key_counts(w.get("coldest")),
                        tracked=_key_counts(w.get("tracked")))


def decode_node_reports(elements: Iterable[bytes], seen: Optional[set] = None
                        ) -> Tuple[List[WorkerReport], List[Dict[str, Any]], List[str]]:
    """Worker reports from node report elements, skipping (reporter, seq) pairs in `seen`
    (and adding the new ones to it). Returns (worker reports, the raw per-thread dicts with
    their node's tier, problems)."""
    reports: List[WorkerReport] = []
    raw: List[Dict[str, Any]] = []
    problems: List[str] = []
    for value in _new_reports(elements, "node", seen, problems):
        tier = value.get("tier")
        workers = value.get("workers")
        if tier not in ("memory", "disk") or not isinstance(workers, list):
            problems.append(f"node {value['reporter']!r}: report without tier or workers; "
                            f"skipped")
            continue
        for w in workers:
            if isinstance(w, dict):
                reports.append(_worker(value["reporter"], tier, w))
                raw.append({**w, "node_id": value["reporter"], "tier": tier})
    return reports, raw, problems


def decode_client_reports(elements: Iterable[bytes], seen: Optional[set] = None
                          ) -> Tuple[List[ClientReport], List[str]]:
    """Client reports from report elements (see `decode_node_reports` for `seen`)."""
    reports: List[ClientReport] = []
    problems: List[str] = []
    for value in _new_reports(elements, "client", seen, problems):
        try:
            keys = tuple((str(k), float(v)) for k, v in value.get("keys", [])[:MAX_KEYS_PER_LIST]
                         if not is_metadata_key(str(k)))
            reports.append(ClientReport(value["reporter"], int(value["requests"]),
                                        float(value["mean"]), float(value["p99"]), keys))
        except (TypeError, ValueError, KeyError) as e:
            problems.append(f"client {value['reporter']!r}: bad report ({e}); skipped")
    return reports, problems


class LatencyRecorder:
    """A client's latencies over one monitoring period, bounded (see the module contract)."""

    def __init__(self, max_samples: int = 2048, max_keys: int = 256, report_keys: int = 32,
                 seed: int = 0) -> None:
        if max_samples < 1 or max_keys < 0 or report_keys < 0:
            raise ValueError("max_samples must be >= 1, max_keys and report_keys >= 0")
        self.max_samples = max_samples
        self.max_keys = max_keys
        self.report_keys = report_keys
        self._random = random.Random(seed)
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        self.total = 0.0
        self._samples: List[float] = []
        self._keys: Dict[str, List[float]] = {}   # key -> [sum, count]

    def record(self, seconds: float, key: Optional[str] = None) -> None:
        """One request that took `seconds` (for `key`, when given)."""
        if not (seconds >= 0 and math.isfinite(seconds)):
            return
        self.count += 1
        self.total += seconds
        if len(self._samples) < self.max_samples:
            self._samples.append(seconds)
        else:   # reservoir sampling: every request equally likely to be kept
            slot = self._random.randrange(self.count)
            if slot < self.max_samples:
                self._samples[slot] = seconds
        if key is not None and not is_metadata_key(key):
            entry = self._keys.get(key)
            if entry is not None:
                entry[0] += seconds
                entry[1] += 1
            elif len(self._keys) < self.max_keys:
                self._keys[key] = [seconds, 1]

    def take(self, client_id: str) -> Optional[ClientReport]:
        """The period's report (None when no request was recorded); starts a new period."""
        if self.count == 0:
            return None
        samples = sorted(self._samples)
        p99 = samples[min(len(samples) - 1, math.ceil(0.99 * len(samples)) - 1)]
        busiest = sorted(self._keys.items(), key=lambda kv: -kv[1][1])[:self.report_keys]
        report = ClientReport(client_id, self.count, self.total / self.count, p99,
                              tuple((k, s / n) for k, (s, n) in busiest))
        self._reset()
        return report
