"""The churn benchmark's verdicts (`benchmarks/churn.py`): read a mode's keys back, judge it.

Contract:
- `read_back(anna, keys, settle, replicas)` reads every key from every KVS replica
  (`anna_core.Client.get_replicas`), polling until the replicas agree or `settle` s have
  passed; keys still unanswered `READ_BUDGET` s later are `keys_unread` (reported, not
  judged). Returns each key's merged versions and each replica's own.
- `judge(run, anna, slow_dag)` turns a finished mode's records (`benchmarks.churn.Run`) into
  its figures: DAGs, errors by type, acknowledged writes, lost writes
  (`churn_check.lost_writes` over what `read_back` found, each blamed on the fault around its
  acknowledgement by `blame`), replica gaps, TCC violations (`churn_check.check_by_segment`),
  aborts, gave-up, throughput, latency and the timings of each step.
- `verdict(mode, figures)`: "ok..." or "FAILED: <reasons>". Causal modes need 0 violations,
  0 lost writes, every write judged, every fault applied, no abandoned segment, and the
  mode finished in its time. The LWW control needs violations.
- `markdown(summary)`: the README table of a run's JSON summary.
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Sequence

__all__ = ["read_back", "judge", "verdict", "markdown", "blame", "decode_versions"]

FAULT_WINDOW = (1.0, 5.0)     # seconds before a fault's start / after its end it is blamed for
READ_BUDGET = 120.0           # seconds past `settle` reading back may take; the rest is unread


def decode_versions(lattice: Any) -> List[Dict[str, Any]]:
    """The records a replica's lattice holds (every concurrent version of a causal key)."""
    from faas.values import CAUSAL_LATTICES, loads
    values = lattice.reveal() if lattice.lattice_type in CAUSAL_LATTICES else [lattice.reveal()]
    return [loads(v) for v in values]


def read_back(anna: Any, keys: Sequence[str], settle: float,
              replicas: int) -> Dict[str, Any]:
    """Every key's versions on every replica, polled until the replicas agree (or `settle` s;
    keys not read within `READ_BUDGET` s more are `keys_unread`):
    {"final": {key: merged versions}, "replicas": {key: [versions per replica]}, ...}."""
    final: Dict[str, List[Dict[str, Any]]] = {}
    per_replica: Dict[str, List[List[Dict[str, Any]]]] = {}
    errors: Dict[str, int] = {}
    pending = set(keys)
    start = time.monotonic()
    deadline = start + settle
    passes = 0
    hard = deadline + READ_BUDGET      # even a KVS node that answers nothing ends it
    while pending:
        passes += 1
        for key in sorted(pending):
            if time.monotonic() >= hard:
                break
            try:
                answers = anna.get_replicas(key)
            except Exception as e:     # counted; the key is read again next pass
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                continue
            merged = None
            copies = []
            for _, lattice in answers:
                copies.append(decode_versions(lattice))
                merged = lattice if merged is None else merged.merge(lattice)
            per_replica[key] = copies
            final[key] = decode_versions(merged) if merged is not None else []
            clocks = [sorted(json.dumps(v["vc"], sort_keys=True) for v in c) for c in copies]
            if len(copies) >= replicas and all(c == clocks[0] for c in clocks):
                pending.discard(key)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.2)    # replicas converge by gossip; polled within `settle`
    return {"final": final, "replicas": per_replica,
            "settle_s": round(time.monotonic() - start, 2), "passes": passes,
            "keys": len(keys), "keys_unsettled": len(pending),
            "keys_unread": sorted(set(keys) - set(final)),
            "keys_with_fewer_replicas": sum(1 for k in keys
                                            if len(per_replica.get(k, ())) < replicas),
            "read_errors": errors}


def blame(lost_times: Sequence[float], faults: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """Lost writes per fault whose window holds their acknowledgement time."""
    out: Dict[str, int] = {}
    for t in lost_times:
        who = "no fault"
        for j, f in enumerate(faults):
            if "t" in f and f["t"] - FAULT_WINDOW[0] <= t <= f.get("end", f["t"]) + FAULT_WINDOW[1]:
                who = f"{j + 1}:{f['fault']}"
                break
        out[who] = out.get(who, 0) + 1
    return out


def judge(run: Any, anna: Any, slow_dag: str) -> Dict[str, Any]:
    """A mode's figures and verdict inputs from what its run recorded (see the contract)."""
    from benchmarks.churn_check import check_by_segment, lost_writes, replica_gaps
    from benchmarks.mtcc import summary, tally_errors
    from benchmarks.tcc_workload import transaction
    records = run.records
    ok = [r for r in records if r["error"] is None]
    errors, samples = tally_errors(records, 3, 300)
    acked = [(txid, res["write"]) for txid, res, _ in run.results if res.get("write")]
    when = {txid: t for txid, _, t in run.results}
    t0 = time.perf_counter()
    back = read_back(anna, sorted({w["key"] for _, w in acked}), run.args.settle,
                     run.args.replicas)
    unread = set(back["keys_unread"])      # never answered: not judged, but reported
    lost = lost_writes([(t, w) for t, w in acked if w["key"] not in unread], back["final"])
    lost["writes_unread"] = sum(1 for _, w in acked if w["key"] in unread)
    lost["by_fault"] = blame([when[txid] for txid in lost.pop("lost_txids")], run.faults)
    gaps = replica_gaps(acked, back["replicas"])
    t1 = time.perf_counter()
    violations = check_by_segment(transaction(res, txid) for txid, res, _ in run.results)
    t2 = time.perf_counter()
    protocols: Dict[str, int] = {}
    for r in ok:
        if r["protocol"]:
            protocols[r["protocol"]] = protocols.get(r["protocol"], 0) + 1
    run_s = max(1e-9, run.run_s)
    return {
        "dags": len(records), "acknowledged": len(ok),
        "slow_dags": sum(1 for r in records if r["dag"] == slow_dag),
        "errors": errors, "error_samples": samples,
        "acknowledged_writes": len(acked), "lost_writes": lost, "replicas": dict(
            gaps, keys_unsettled=back["keys_unsettled"], settle_s=back["settle_s"],
            keys_with_fewer_replicas=back["keys_with_fewer_replicas"],
            read_errors=back["read_errors"]),
        "violations": violations,
        "aborts": {"total": sum(r["aborts"] for r in ok),
                   "calls_aborted_at_least_once": sum(1 for r in ok if r["aborts"] > 0),
                   "max_retries": max((r["aborts"] for r in ok), default=0)},
        "gave_up": errors.get("Aborted", 0),
        "result_protocols": protocols,
        "faults": run.faults, "truncated": run.truncated,
        "segments_abandoned": run.abandoned,
        "run_s": round(run.run_s, 1), "throughput_dags_per_s": round(len(ok) / run_s, 1),
        "latency": summary([r["latency"] for r in ok]),
        "keyspace_s": round(run.keyspace_s, 1),
        "read_back_s": round(t1 - t0, 1), "check_s": round(t2 - t1, 1)}


def verdict(mode: str, m: Dict[str, Any]) -> str:
    if mode == "lww":
        return ("ok: the control shows violations" if m["violations"]["total"] > 0 else
                "FAILED: the LWW control shows no violation (the checker saw nothing)")
    bad = []
    if m["violations"]["total"]:
        bad.append(f"{m['violations']['total']} TCC violations")
    if m["lost_writes"]["writes_unread"]:
        bad.append(f"{m['lost_writes']['writes_unread']} acknowledged writes not judged "
                   f"(their keys could not be read back)")
    if m["lost_writes"]["lost"]:
        bad.append(f"{m['lost_writes']['lost']} of {m['acknowledged_writes']} acknowledged "
                   f"writes lost")
    if any("error" in f or "skipped" in f for f in m["faults"]):
        bad.append("a fault was not applied")
    if m["segments_abandoned"]:
        bad.append(f"{len(m['segments_abandoned'])} keyspace segments abandoned after "
                   f"timed-out calls")
    if m["truncated"]:
        bad.append("the mode ran out of time")
    return "ok" if not bad else "FAILED: " + ", ".join(bad)


def markdown(summary: Dict[str, Any]) -> str:
    """The README table of a run's JSON summary (`--report PATH`)."""
    rows = ["| mode | DAGs (acknowledged) | writes acknowledged | lost (by fault) | "
            "TCC violations (by kind) | aborts / gave up | DAGs/s | p50 / p99 ms | verdict |",
            "|---|---|---|---|---|---|---|---|---|"]
    ms = lambda us: "-" if us is None else f"{us / 1000:.0f}"
    for mode, m in summary["modes"].items():
        lost, v = m["lost_writes"], m["violations"]
        by_fault = ", ".join(f"{k} {n}" for k, n in lost.get("by_fault", {}).items())
        kinds = ", ".join(f"{k} {n}" for k, n in v["by_kind"].items())
        rows.append(
            f"| {mode.upper()} | {m['dags']:,} ({m['acknowledged']:,}) | "
            f"{m['acknowledged_writes']:,} | **{lost['lost']}**"
            + (f" ({by_fault})" if by_fault else "") + f" | **{v['total']}**"
            + (f" ({kinds})" if kinds else "") + f" | {m['aborts']['total']} / {m['gave_up']} | "
            f"{m['throughput_dags_per_s']} | {ms(m['latency']['p50_us'])} / "
            f"{ms(m['latency']['p99_us'])} | {m['verdict']} |")
    return "\n".join(rows)
