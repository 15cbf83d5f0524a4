"""HydroCache's MTCC protocols compared (dissertation 4.4.2: Fig. 4.2, Tables 4.1-4.2).

    python benchmarks/mtcc.py [--quick] [--calls 100] [--clients 6] [--keys 1000]
        [--zipfs 1.0,1.25,1.5] [--modes lww,ct,opt,con,hb] [--topologies linear,v]
        [--nodes 3] [--executors 2] [--warmup 10] [--kvs-nodes 1] [--write-quorum all]
        [--json PATH] [--png PATH] [--duration SECONDS]
    python benchmarks/mtcc.py --throughput          # closed-loop causal throughput (see below)
    python benchmarks/mtcc.py --report benchmarks/results/mtcc.json   # README tables of a run

One LocalCluster (Anna with `--kvs-nodes` nodes, two replicas per key from two nodes on, node
caches acknowledging a write once `--write-quorum` replicas hold it; one scheduler, `--nodes`
executor nodes x `--executors` workers, Unix sockets, `colocate_chains=False` so a DAG's
functions spread over the nodes). Two DAGs of three
functions: linear `r1 -> r2 -> w` and V-shaped `(r1, r2) -> w`, where `r1`/`r2` are
`hydrocache.history.read_step` and the sink `w` is `hydrocache.history.write_step` (it writes
one of the keys it read, chosen by an int seed argument). Every function gets two `Reference`
arguments drawn from a seeded Zipf distribution over the keyspace (`Reference(key,
concurrent=True)` in causal mode, so a function sees every concurrent version).

Modes: "lww" (the control: plain LWW calls over LWW keys), and causal calls with protocol
"ct", "opt", "con", "hb". For each (topology, zipf) every mode runs in turn (interleaved, so a
ratio compares runs minutes apart) on a fresh keyspace of its own (`--keys` keys written with
`hydrocache.history.initial_value`; fresh per cell because the workload's application clocks
grow with every write to a key), pre-warmed into every node's cache, then `--clients` threads,
each with its own Client, issue `--warmup` unmeasured calls and `--calls` measured sequential
calls (client-side latency, perf_counter). `--put-probe N` first times N puts of a causal
version straight to Anna with write quorum "one" and "all" (alternating blocks): the cost of
the quorum per written key, without the rest of a call around it.

Per cell: p50/p99 latency of the calls that succeeded; errors by type (a call that raises is
counted, with sampled messages); the protocol each result came from (HB: OPT with metadata
only = stats protocol "opt" and remote_fetches == 0, OPT with data fetch, CON); OPT's share of
calls aborted at least once and its most retries; the checker's violations
(`hydrocache.checker.check` over the history built from every call's result, warm-up
included, with `hydrocache.history.transaction`). Then HB/LWW p50 ratios per zipf against the
goals (<= 1.3x at Zipf 1.0, <= 1.6x at Zipf 1.5), a PNG like Fig. 4.2 (bars p50, whiskers
p99; only when matplotlib is importable), and a JSON summary (printed; also `--json PATH`).

Throughput (`--duration S`): each client thread calls in a closed loop for S seconds after its
warm-up instead of a fixed count; a cell then also reports DAGs/s (successful calls over the
measured seconds) and, for causal modes, the aborts per DAG. Every cell reports the CPU
milliseconds per successful DAG of this process and every process below it (the cluster), over
the measured calls: steadier than time on a shared machine. `--throughput` is the preset of
that workload: 8 client threads, 2 executor nodes x 2 workers, 30 keys per cell, Zipf 1.5,
linear DAG, 20 s per mode, every mode (LWW in the same run), and prints each mode's
throughput over LWW's (goal: HB >= 0.6x; OPT gives up on no DAG); an explicit flag overrides
the preset's value, e.g. `--throughput --zipfs 1.0` for OPT's aborts at Zipf 1 (goal < 5 %).
The CPU per DAG is also split by role (clients, scheduler, node, worker, kvs).
`--root DIR` runs the cluster from the code at DIR (an earlier checkout: "before" figures).
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODES = ["lww", "ct", "opt", "con", "hb"]
TOPOLOGIES = ["linear", "v"]
GOALS = {1.0: 1.3, 1.5: 1.6}          # HB p50 / LWW p50 at most this
THROUGHPUT_GOAL = 0.6                  # HB DAGs/s over LWW DAGs/s at least this
PAPER_RATIOS = {1.0: 1.62, 1.5: 2.0}   # what the dissertation measured
FUNCTIONS = ("mtcc_r1", "mtcc_r2", "mtcc_w")
DAGS = {"linear": ("mtcc_linear", [("mtcc_r1", "mtcc_r2"), ("mtcc_r2", "mtcc_w")]),
        "v": ("mtcc_v", [("mtcc_r1", "mtcc_w"), ("mtcc_r2", "mtcc_w")])}
TOUCH = "mtcc_touch"                   # a single read_step, to pre-warm the caches
SAMPLED_MESSAGES = 3


# ---- pure pieces ----
class Zipf:
    """Seeded Zipf sampler over ranks 0..n-1: P(rank i) proportional to 1 / (i + 1) ** s."""

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        if n < 1:
            raise ValueError("Zipf needs at least one item")
        self.n, self.s, self.rng = n, s, rng
        self.cdf: List[float] = []
        total = 0.0
        for i in range(n):
            total += 1.0 / (i + 1) ** s
            self.cdf.append(total)
        self.total = total

    def sample(self) -> int:
        return min(self.n - 1, bisect.bisect_left(self.cdf, self.rng.random() * self.total))

    def probability(self, rank: int) -> float:
        return (1.0 / (rank + 1) ** self.s) / self.total


def summary(samples: Sequence[float]) -> Dict[str, float]:
    """p50/p99/mean in µs of latencies in seconds (empty -> n 0, None figures)."""
    if not samples:
        return {"p50_us": None, "p99_us": None, "mean_us": None, "n": 0}
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1e6
    return {"p50_us": round(pick(0.50), 1), "p99_us": round(pick(0.99), 1),
            "mean_us": round(statistics.mean(s) * 1e6, 1), "n": len(s)}


def cell_keys(mode: str, topology: str, zipf: float, n: int) -> List[str]:
    return [f"mtcc/{mode}/{topology}/z{zipf:g}/{i}" for i in range(n)]


def call_args(topology: str, keys: Sequence[str], zipf: Zipf, causal: bool,
              rng: random.Random) -> Dict[str, List[Any]]:
    """One call's arguments: two Zipf-drawn References per function, the sink also a seed."""
    from cloudburst import Reference

    def refs() -> List[Any]:
        return [Reference(keys[zipf.sample()], concurrent=causal) for _ in range(2)]
    r1, r2, w = FUNCTIONS
    return {r1: refs(), r2: refs(), w: refs() + [rng.randrange(1 << 30)]}


def history_of(results: Sequence[Tuple[str, Any]]) -> List[Any]:
    """Checker transactions from (txid, sink result) pairs."""
    from benchmarks.tcc_workload import transaction
    return [transaction(r, txid) for txid, r in results]


def violations_by_kind(history: Sequence[Any]) -> Dict[str, Any]:
    from hydrocache.checker import check
    found = check(history)
    kinds: Dict[str, int] = {}
    for v in found:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
    txs = {v.txid for v in found}
    return {"total": len(found), "by_kind": kinds, "transactions": len(history),
            "transactions_with_violation": len(txs),
            "sample": [f"{v.kind}: {v.detail}"[:300] for v in found[:SAMPLED_MESSAGES]]}


def tally_errors(records: Sequence[Dict[str, Any]], samples_per_kind: int,
                 length: int = 400) -> "tuple[Dict[str, int], Dict[str, List[str]]]":
    """Failed call records counted by error kind, with the first messages of each kind."""
    errors: Dict[str, int] = {}
    samples: Dict[str, List[str]] = {}
    for r in records:
        if r["error"] is not None:
            kind, message = r["error"]
            errors[kind] = errors.get(kind, 0) + 1
            if len(samples.setdefault(kind, [])) < samples_per_kind:
                samples[kind].append(message[:length])
    return errors, samples


def classify(records: Sequence[Dict[str, Any]], mode: str) -> Dict[str, Any]:
    """A cell's figures from its measured call records (see `run_calls`)."""
    ok = [r for r in records if r["error"] is None]
    out: Dict[str, Any] = {"calls": len(records), "ok": len(ok),
                           "latency": summary([r["latency"] for r in ok])}
    errors, out["error_samples"] = tally_errors(records, SAMPLED_MESSAGES)
    out["errors"] = errors
    if mode == "lww":
        return out
    protocols: Dict[str, int] = {}
    for r in ok:
        protocols[r["protocol"] or "?"] = protocols.get(r["protocol"] or "?", 0) + 1
    out["result_protocols"] = protocols
    n = len(ok)
    share = lambda c: round(100.0 * c / n, 1) if n else None
    meta = sum(1 for r in ok if r["protocol"] == "opt" and r["remote_fetches"] == 0)
    fetch = sum(1 for r in ok if r["protocol"] == "opt" and r["remote_fetches"] > 0)
    con = sum(1 for r in ok if r["protocol"] == "con")
    out["remote_fetch_share_pct"] = share(sum(1 for r in ok if r["remote_fetches"] > 0))
    if mode == "hb":
        out["hb_shares_pct"] = {"opt_metadata_only": share(meta), "opt_data_fetch": share(fetch),
                                "con": share(con)}
    aborted = [r for r in ok if r["aborts"] > 0]
    gave_up = errors.get("Aborted", 0)
    total = n + gave_up
    out["aborts"] = {
        "aborted_at_least_once_pct": round(100.0 * (len(aborted) + gave_up) / total, 1)
        if total else None,
        "max_retries": max((r["aborts"] for r in ok), default=0),
        "gave_up": gave_up,
        "total_aborts": sum(r["aborts"] for r in ok)}
    return out


def ratios(cells: Dict[str, Dict[str, Dict[str, Any]]], num: str = "hb",
           den: str = "lww") -> Dict[str, Dict[str, Optional[float]]]:
    """p50(num) / p50(den) per topology and zipf."""
    out: Dict[str, Dict[str, Optional[float]]] = {}
    for topo, by_zipf in cells.items():
        for z, by_mode in by_zipf.items():
            a = by_mode.get(num, {}).get("latency", {}).get("p50_us")
            b = by_mode.get(den, {}).get("latency", {}).get("p50_us")
            out.setdefault(topo, {})[z] = round(a / b, 2) if a and b else None
    return out


def throughput_ratios(cells: Dict[str, Dict[str, Dict[str, Any]]]
                      ) -> Dict[str, Dict[str, Dict[str, Optional[float]]]]:
    """DAGs/s of each mode over LWW's, per topology and zipf (throughput runs)."""
    out: Dict[str, Dict[str, Dict[str, Optional[float]]]] = {}
    for topo, by_zipf in cells.items():
        for z, by_mode in by_zipf.items():
            base = by_mode.get("lww", {}).get("dags_per_s")
            out.setdefault(topo, {})[z] = {
                m: (round(c["dags_per_s"] / base, 2) if base and c.get("dags_per_s") else None)
                for m, c in by_mode.items()}
    return out


def goal_verdicts(hb_over_lww: Dict[str, Dict[str, Optional[float]]]) -> Dict[str, Dict[str, str]]:
    out: Dict[str, Dict[str, str]] = {}
    for topo, by_zipf in hb_over_lww.items():
        for z, r in by_zipf.items():
            goal = GOALS.get(float(z))
            if goal is None:
                continue
            verdict = "n/a" if r is None else ("met" if r <= goal else "missed")
            out.setdefault(topo, {})[z] = f"{verdict} ({r}x vs goal <= {goal}x; paper " \
                                          f"{PAPER_RATIOS[float(z)]}x)"
    return out


# ---- the cluster side ----
def error_of(e: BaseException) -> Tuple[str, str]:
    return type(e).__name__, str(e).split("\n\nRemote traceback:")[0] + (
        "" if not getattr(e, "remote_traceback", "") else
        " | " + e.remote_traceback.strip().splitlines()[-1])   # type: ignore[attr-defined]


def setup_functions(client: Any) -> None:
    from benchmarks.tcc_workload import read_step, write_step
    r1, r2, w = FUNCTIONS
    client.register(read_step, r1)
    client.register(read_step, r2)
    client.register(write_step, w)
    client.register(read_step, TOUCH)
    for name, connections in DAGS.values():
        client.register_dag(name, list(FUNCTIONS), connections)


def write_keyspace(client: Any, keys: Sequence[str], causal: bool) -> None:
    from benchmarks.tcc_workload import initial_value
    for k in keys:
        client.put(k, initial_value(k), consistency="causal" if causal else "lww")


def prewarm(clients: Sequence[Any], pool: ThreadPoolExecutor, keys: Sequence[str], mode: str,
            nodes: int, workers: int, timeout: float, batch: int = 50,
            rounds: int = 3) -> Dict[str, Any]:
    """Bring every key into every node's cache: each batch of keys is read by `workers`
    single-function calls at once, shared over the clients (the scheduler's back-off spreads
    concurrent calls over the workers), then the scheduler's view of the caches is checked and missing keys re-read.
    Causal keys are read with OPT (a single function never aborts): OPT's attempt starts at
    once, so the scheduler counts its load; a CON call counts none while its snapshot is built,
    and concurrent CON calls all follow data locality to the same node."""
    from cloudburst import Reference
    causal = mode != "lww"
    todo = list(keys)
    coverage = 0.0
    errors = 0
    for _ in range(rounds):
        for i in range(0, len(todo), batch):
            refs = [Reference(k, concurrent=causal) for k in todo[i:i + batch]]

            def touch(c: Any) -> bool:
                try:
                    kw = {"consistency": "causal", "protocol": "opt"} if causal else {}
                    c.call(TOUCH, *refs, timeout=timeout, **kw).get(timeout=timeout)
                    return True
                except Exception:
                    return False
            callers = [clients[j % len(clients)] for j in range(max(workers, len(clients)))]
            errors += sum(1 for ok in pool.map(touch, callers) if not ok)
        time.sleep(0.6)   # the nodes report their key sets every few heartbeats
        todo = [k for k in keys if len(set(clients[0].cached_at(k))) < nodes]
        coverage = round(100.0 * (len(keys) - len(todo)) / len(keys), 1)
        if not todo:
            break
    return {"coverage_pct": coverage, "errors": errors}


def run_calls(client: Any, cid: int, topology: str, mode: str, keys: Sequence[str],
              zipf_s: float, warmup: int, calls: int, seed: int, timeout: float,
              barrier: threading.Barrier, duration: Optional[float] = None
              ) -> Tuple[List[Dict[str, Any]], List[Tuple[str, Any]]]:
    """One client thread's calls: (measured records, (txid, result) of every call). With a
    `duration`, the measured calls go on in a closed loop until that many seconds have passed
    since the barrier instead of stopping after `calls`."""
    rng = random.Random(f"{seed}/{topology}/{zipf_s}/{cid}")   # the same stream in every mode
    zipf = Zipf(len(keys), zipf_s, rng)
    dag = DAGS[topology][0]
    causal = mode != "lww"
    kw = {"consistency": "causal", "protocol": mode} if causal else {}
    records: List[Dict[str, Any]] = []
    results: List[Tuple[str, Any]] = []
    end = None
    i = 0
    while (i < warmup + calls) if duration is None else (end is None or time.perf_counter() < end):
        if i == warmup:
            barrier.wait()
            end = time.perf_counter() + duration if duration is not None else None
        args = call_args(topology, keys, zipf, causal, rng)
        record: Dict[str, Any] = {"error": None, "protocol": None, "aborts": 0,
                                  "remote_fetches": 0}
        start = time.perf_counter()
        try:
            fut = client.call_dag(dag, args, timeout=timeout, **kw)
            value = fut.get(timeout=timeout + 5)
            record["latency"] = time.perf_counter() - start
            if fut.causal is not None:
                record.update(protocol=fut.causal.protocol, aborts=fut.causal.aborts,
                              remote_fetches=fut.causal.remote_fetches)
            results.append((f"{topology}/{zipf_s}/{mode}/{cid}/{i}", value))
        except Exception as e:   # counted, not fatal
            record["latency"] = time.perf_counter() - start
            record["error"] = error_of(e)
        if i >= warmup:
            records.append(record)
        i += 1
    return records, results


def put_cost(kvs: Any, n: int, keys: int = 50, block: int = 50) -> Dict[str, Any]:
    """What the write quorum costs one written key: latency of `n` puts of a one-version causal
    lattice (what a commit writes) per quorum, "one" and "all" in alternating blocks over the
    same `keys` keys (their placements cached by a first, unmeasured pass)."""
    import anna_core
    samples: Dict[str, List[float]] = {"one": [], "all": []}
    for q in samples:
        for i in range(keys):
            kvs.put(f"mtcc/put/{i}", anna_core.MultiKeyCausalLattice({"p": 1}, {}, [b"w"]),
                    quorum=q)
    for start in range(0, n, block):
        for q, out in samples.items():
            for i in range(start, min(n, start + block)):
                lattice = anna_core.MultiKeyCausalLattice({"p": i + 2}, {}, [b"w" * 64])
                t = time.perf_counter()
                kvs.put(f"mtcc/put/{i % keys}", lattice, quorum=q)
                out.append(time.perf_counter() - t)
    return {q: summary(out) for q, out in samples.items()}


def tree_cpu_by_role() -> Dict[str, float]:
    """User and system CPU seconds of this process ("clients") and of every process below it
    (the cluster), by role: "scheduler", "node" (an executor node with its cache), "worker"
    (an executor worker), "kvs" (Anna) and "other"; from /proc (Linux)."""
    stats: Dict[int, Tuple[int, float, str]] = {}     # pid -> (parent, CPU seconds, command)
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read(200).replace(b"\0", b" ").decode(errors="replace")
        except OSError:                        # gone meanwhile
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick,
                             command)
    mine = {os.getpid()}
    grew = True
    while grew:
        below = {pid for pid, (parent, _, _) in stats.items() if parent in mine} - mine
        grew = bool(below)
        mine |= below
    out: Dict[str, float] = {}
    for pid in mine:
        if pid not in stats:
            continue
        parent, cpu, command = stats[pid]
        if pid == os.getpid():
            role = "clients"
        elif "-m scheduler" in command:
            role = "scheduler"
        elif "-m executor" in command:
            role = "worker" if "-m executor" in stats.get(parent, (0, 0.0, ""))[2] else "node"
        elif "anna_core" in command:
            role = "kvs"
        else:
            role = "other"
        out[role] = out.get(role, 0.0) + cpu
    return out


def tree_cpu_seconds() -> float:
    """User and system CPU seconds of this process and every process below it (the cluster),
    from /proc (Linux)."""
    return sum(tree_cpu_by_role().values())


def run_cell(clients: Sequence[Any], pool: ThreadPoolExecutor, topology: str, zipf_s: float,
             mode: str, args: argparse.Namespace) -> Dict[str, Any]:
    keys = cell_keys(mode, topology, zipf_s, args.keys)
    t0 = time.perf_counter()
    write_keyspace(clients[0], keys, causal=mode != "lww")
    warm = prewarm(clients, pool, keys, mode, args.nodes, args.nodes * args.executors,
                   args.call_timeout)
    t1 = time.perf_counter()
    cpu: List[Dict[str, float]] = []     # CPU seconds of this process and the cluster's, by
    barrier = threading.Barrier(len(clients),  # role, at the start of the measured calls
                                action=lambda: cpu.append(tree_cpu_by_role()))
    futures = [pool.submit(run_calls, c, i, topology, mode, keys, zipf_s, args.warmup,
                           args.calls, args.seed, args.call_timeout, barrier, args.duration)
               for i, c in enumerate(clients)]
    records: List[Dict[str, Any]] = []
    results: List[Tuple[str, Any]] = []
    for f in futures:
        rec, res = f.result()
        records.extend(rec)
        results.extend(res)
    t2 = time.perf_counter()
    by_role = tree_cpu_by_role()
    cpu_used = {r: c - cpu[0].get(r, 0.0) for r, c in by_role.items()} if cpu else None
    out = classify(records, mode)
    if cpu_used is not None and out["ok"]:
        # every process of the run (clients, scheduler, nodes and their workers, Anna) over
        # the measured calls: steadier than time on a shared machine
        out["cpu_ms_per_dag"] = round(1000 * sum(cpu_used.values()) / out["ok"], 2)
        out["cpu_ms_per_dag_by_role"] = {r: round(1000 * c / out["ok"], 2)
                                         for r, c in sorted(cpu_used.items())}
    if args.duration is not None:
        out["dags_per_s"] = round(out["ok"] / (t2 - t1), 1)
        if mode != "lww":
            out["aborts_per_dag"] = round(out["aborts"]["total_aborts"] / out["ok"], 3) \
                if out["ok"] else None
    t3 = time.perf_counter()
    if mode == "lww" and args.duration is not None:
        # The control's history over a few keys is thousands of concurrent versions per key,
        # which the checker's quadratic maxima take minutes over; only the causal modes must be 0.
        out["violations"] = {"total": 0, "by_kind": {}, "transactions": 0,
                             "transactions_with_violation": 0, "sample": [],
                             "skipped": "LWW control not checked in throughput runs"}
    else:
        out["violations"] = violations_by_kind(history_of(results))
    out["check_s"] = round(time.perf_counter() - t3, 2)
    out["prewarm"] = dict(warm, seconds=round(t1 - t0, 2))
    out["run_s"] = round(t2 - t1, 2)
    return out


def progress_line(n: int, total: int, topology: str, zipf_s: float, mode: str,
                  cell: Dict[str, Any]) -> str:
    lat = cell["latency"]
    ms = lambda us: "   -   " if us is None else f"{us / 1000:7.2f}"
    parts = [f"[{n:2d}/{total}] {topology:6s} zipf={zipf_s:<4g} {mode:3s}: "
             f"p50 {ms(lat['p50_us'])} ms  p99 {ms(lat['p99_us'])} ms  "
             f"ok {cell['ok']}/{cell['calls']}"]
    if "dags_per_s" in cell:
        parts.append(f"{cell['dags_per_s']} DAGs/s" + (
            f" ({cell['aborts_per_dag']} aborts/DAG)" if "aborts_per_dag" in cell else ""))
    if "cpu_ms_per_dag" in cell:
        parts.append(f"{cell['cpu_ms_per_dag']} ms CPU/DAG (" + ", ".join(
            f"{r} {ms}" for r, ms in cell.get("cpu_ms_per_dag_by_role", {}).items()) + ")")
    if cell["errors"]:
        parts.append("errors " + ",".join(f"{k}={v}" for k, v in cell["errors"].items()))
    if "hb_shares_pct" in cell:
        s = cell["hb_shares_pct"]
        parts.append(f"OPT-meta {s['opt_metadata_only']}% OPT-fetch {s['opt_data_fetch']}% "
                     f"CON {s['con']}%")
    if mode == "opt":
        a = cell["aborts"]
        parts.append(f"aborted>=1 {a['aborted_at_least_once_pct']}% max retries "
                     f"{a['max_retries']} gave up {a['gave_up']}")
    v = cell["violations"]
    if v.get("skipped"):
        parts.append("violations not checked (LWW control)")
    else:
        parts.append(f"violations {v['total']}" + (f" {v['by_kind']}" if v["total"] else ""))
    parts.append(f"(warm {cell['prewarm']['coverage_pct']}% in {cell['prewarm']['seconds']} s, "
                 f"run {cell['run_s']} s)")
    return "  ".join(parts)


def plot(cells: Dict[str, Dict[str, Dict[str, Any]]], modes: Sequence[str], path: str,
         title: str = "") -> bool:
    """Fig. 4.2: per topology a panel, per zipf a group, per mode a bar (p50) with a p99
    whisker. False when matplotlib is not importable."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    topologies = list(cells)
    fig, axes = plt.subplots(1, len(topologies), figsize=(6.5 * len(topologies), 4.2),
                             squeeze=False)
    colors = {"lww": "#bbbbbb", "ct": "#4c72b0", "opt": "#dd8452", "con": "#55a868",
              "hb": "#c44e52"}
    width = 0.8 / len(modes)
    for ax, topo in zip(axes[0], topologies):
        zipfs = list(cells[topo])
        for j, mode in enumerate(modes):
            xs, p50, up = [], [], []
            for i, z in enumerate(zipfs):
                lat = cells[topo][z].get(mode, {}).get("latency", {})
                if lat.get("p50_us") is None:
                    continue
                xs.append(i - 0.4 + width * (j + 0.5))
                p50.append(lat["p50_us"] / 1000)
                up.append((lat["p99_us"] - lat["p50_us"]) / 1000)
            ax.bar(xs, p50, width, yerr=[[0] * len(up), up], capsize=3,
                   color=colors.get(mode, None), label=mode.upper(),
                   hatch="//" if mode == "lww" else None, edgecolor="black", linewidth=0.5)
        ax.set_xticks(range(len(zipfs)))
        ax.set_xticklabels([f"Zipf {z}" for z in zipfs])
        ax.set_ylabel("latency (ms): bar p50, whisker p99")
        ax.set_title({"linear": "(a) linear DAG", "v": "(b) V-shaped DAG"}.get(topo, topo))
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def markdown(results: Dict[str, Any]) -> str:
    """The README tables of a run's JSON summary (`--report PATH`)."""
    cells = results["cells"]
    modes = [m for m in MODES if any(m in bm for bz in cells.values() for bm in bz.values())]
    ms = lambda us: "-" if us is None else f"{us / 1000:.1f}"
    out: List[str] = []
    for topo, by_zipf in cells.items():
        out.append(f"**{'Linear' if topo == 'linear' else 'V-shaped'} DAG**, p50 / p99 ms "
                   "(errors in brackets):\n")
        out.append("| Zipf | " + " | ".join(m.upper() for m in modes) + " | HB / LWW p50 |")
        out.append("|---" * (len(modes) + 2) + "|")
        for z, by_mode in by_zipf.items():
            row = []
            for m in modes:
                c = by_mode.get(m)
                if c is None:
                    row.append("")
                    continue
                err = sum(c["errors"].values())
                row.append(f"{ms(c['latency']['p50_us'])} / {ms(c['latency']['p99_us'])}"
                           + (f" [{err}]" if err else ""))
            r = results.get("hb_over_lww_p50", {}).get(topo, {}).get(z)
            out.append(f"| {z} | " + " | ".join(row) + f" | {'-' if r is None else f'{r}x'} |")
        out.append("")
    out.append("**HB subroutines** (share of successful HB calls; Tables 4.1-4.2):\n")
    out.append("| DAG | Zipf | OPT metadata only | OPT data fetch | CON |")
    out.append("|---|---|---|---|---|")
    for topo, by_zipf in cells.items():
        for z, by_mode in by_zipf.items():
            s = by_mode.get("hb", {}).get("hb_shares_pct")
            if s:
                out.append(f"| {topo} | {z} | {s['opt_metadata_only']}% | {s['opt_data_fetch']}% "
                           f"| {s['con']}% |")
    out.append("")
    out.append("**OPT aborts**:\n")
    out.append("| DAG | Zipf | aborted at least once | max retries | gave up (Aborted) |")
    out.append("|---|---|---|---|---|")
    for topo, by_zipf in cells.items():
        for z, by_mode in by_zipf.items():
            a = by_mode.get("opt", {}).get("aborts")
            if a:
                out.append(f"| {topo} | {z} | {a['aborted_at_least_once_pct']}% | "
                           f"{a['max_retries']} | {a['gave_up']} |")
    out.append("")
    out.append("**Checker violations** (all cells of a mode, warm-up calls included):\n")
    out.append("| mode | transactions | violations | by kind |")
    out.append("|---|---|---|---|")
    for m, v in results.get("violations_by_mode", {}).items():
        kinds = ", ".join(f"{k} {n}" for k, n in v.items() if k not in ("total", "transactions"))
        out.append(f"| {m.upper()} | {v['transactions']} | {v['total']} | {kinds or '-'} |")
    return "\n".join(out)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, help="executor nodes (each has a cache)")
    p.add_argument("--executors", type=int, default=2, help="executor workers per node")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--zipfs", default="1.0,1.25,1.5")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--topologies", default=",".join(TOPOLOGIES))
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--calls", type=int, default=100, help="measured calls per client per cell")
    p.add_argument("--warmup", type=int, default=10, help="unmeasured calls per client per cell")
    p.add_argument("--max-retries", type=int, default=20,
                   help="OPT attempts the scheduler retries before Aborted")
    p.add_argument("--call-timeout", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kvs-nodes", type=int, default=1,
                   help="Anna nodes (two or more keep two replicas of every key)")
    p.add_argument("--put-probe", type=int, default=0, metavar="N",
                   help="first time N puts of a causal version with write quorum one and all")
    p.add_argument("--write-quorum", default="all",
                   help="replicas that hold a node cache's write (causal commit, lib.put) "
                        "before it is acknowledged: all (default), one, or a number")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: zipf 1.0 only, 20 calls, 3 warm-up calls, 200 keys")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="closed loop: each client calls for S seconds (throughput)")
    p.add_argument("--throughput", action="store_true",
                   help="preset: 8 clients, 2 nodes, 30 keys, Zipf 1.5, linear, 20 s per mode")
    p.add_argument("--root", metavar="DIR",
                   help="run the cluster (and this script's imports) from the code at DIR, "
                        "e.g. a checkout of an earlier commit, for before/after figures")
    p.add_argument("--json", help="also write the summary here")
    p.add_argument("--report", metavar="JSON",
                   help="print the README tables of an earlier run's summary and exit")
    p.add_argument("--png", default=os.path.join(ROOT, "benchmarks", "results", "mtcc.png"))
    args = p.parse_args(argv)
    if args.root:
        # the cluster's processes inherit PYTHONPATH; this process imports from DIR too
        root = os.path.abspath(args.root)
        sys.path.insert(0, root)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [root] + [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d])
        # paths given relative to where the script was started, before `enter_root` moves
        args.json = args.json and os.path.abspath(args.json)
        args.png = args.png and os.path.abspath(args.png)
        args.report = args.report and os.path.abspath(args.report)
    args.zipfs = [float(z) for z in args.zipfs.split(",") if z]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.topologies = [t.strip() for t in args.topologies.split(",") if t.strip()]
    from anna_core.config import check_write_quorum
    try:
        args.write_quorum = check_write_quorum(args.write_quorum)
    except ValueError as e:
        p.error(str(e))
    if args.throughput:
        explicit = set(a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:]))
        preset = {"--clients": ("clients", 8), "--nodes": ("nodes", 2),
                  "--keys": ("keys", 30), "--zipfs": ("zipfs", [1.5]),
                  "--topologies": ("topologies", ["linear"]), "--duration": ("duration", 20.0),
                  "--warmup": ("warmup", 5)}
        for flag, (name, value) in preset.items():
            if flag not in explicit:
                setattr(args, name, value)
    if args.quick:
        args.zipfs, args.calls, args.warmup = args.zipfs[:1], 20, 3
        args.keys = min(args.keys, 200)
    bad = [m for m in args.modes if m not in MODES] + [t for t in args.topologies
                                                       if t not in TOPOLOGIES]
    if bad:
        p.error(f"unknown modes/topologies {bad} (modes: {MODES}, topologies: {TOPOLOGIES})")
    return args


def enter_root(args: argparse.Namespace) -> None:
    """With `--root`, work from DIR: `python -m` puts its working directory ahead of
    PYTHONPATH on a child's sys.path, so a cluster started from another checkout would
    import that checkout's code, not DIR's."""
    if args.root:
        os.chdir(args.root)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    enter_root(args)
    if args.report:
        with open(args.report) as f:
            results = json.load(f)
        print(markdown(results))
        return results
    import cloudburst

    results: Dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                    "loadavg_start": [round(x, 2) for x in os.getloadavg()]},
        "config": {k: getattr(args, k) for k in ("root", "nodes", "executors", "keys", "zipfs", "modes",
                                                 "topologies", "clients", "calls", "warmup",
                                                 "max_retries", "seed", "quick",
                                                 "kvs_nodes", "write_quorum", "put_probe",
                                                 "duration")},
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    cells: Dict[str, Dict[str, Dict[str, Any]]] = {}
    total = len(args.topologies) * len(args.zipfs) * len(args.modes)
    t_start = time.perf_counter()
    print(f"MTCC benchmark: {args.nodes} nodes x {args.executors} executors, {args.clients} "
          f"clients x {args.calls} calls (+{args.warmup} warm-up), {args.keys} keys, zipfs "
          f"{args.zipfs}, modes {args.modes}, topologies {args.topologies}, {args.kvs_nodes} "
          f"Anna node(s), write quorum {args.write_quorum}", flush=True)
    with cloudburst.LocalCluster(executor_nodes=args.nodes, executors_per_node=args.executors,
                                 transport="ipc", colocate_chains=False,
                                 max_causal_retries=args.max_retries,
                                 kvs_nodes=args.kvs_nodes,
                                 write_quorum=args.write_quorum) as cluster:
        clients = [cluster.client(timeout=args.call_timeout) for _ in range(args.clients)]
        setup_functions(clients[0])
        if args.put_probe:
            results["put_cost"] = put_cost(cluster.kvs.client(auth=cluster.cluster_auth),
                                           args.put_probe)
            print(f"one causal-version put, by write quorum ({args.put_probe} each): "
                  f"{json.dumps(results['put_cost'])}", flush=True)
        with ThreadPoolExecutor(max_workers=max(args.clients,
                                                args.nodes * args.executors)) as pool:
            n = 0
            for topo in args.topologies:
                for z in args.zipfs:
                    for mode in args.modes:
                        n += 1
                        cell = run_cell(clients, pool, topo, z, mode, args)
                        cells.setdefault(topo, {}).setdefault(f"{z:g}", {})[mode] = cell
                        print(progress_line(n, total, topo, z, mode, cell), flush=True)
    results["cells"] = cells
    results["wall_s"] = round(time.perf_counter() - t_start, 1)
    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    viol: Dict[str, Dict[str, int]] = {}
    for by_zipf in cells.values():
        for by_mode in by_zipf.values():
            for mode, cell in by_mode.items():
                v = viol.setdefault(mode, {"total": 0, "transactions": 0})
                v["total"] += cell["violations"]["total"]
                v["transactions"] += cell["violations"]["transactions"]
                for kind, c in cell["violations"]["by_kind"].items():
                    v[kind] = v.get(kind, 0) + c
    results["violations_by_mode"] = viol
    if "hb" in args.modes and "lww" in args.modes:
        results["hb_over_lww_p50"] = ratios(cells)
        results["goals"] = goal_verdicts(results["hb_over_lww_p50"])
    if args.duration is not None and "lww" in args.modes:
        results["throughput_over_lww"] = throughput_ratios(cells)
        print(f"DAGs/s over LWW's: {json.dumps(results['throughput_over_lww'])} "
              f"(goal: HB >= {THROUGHPUT_GOAL}x)")
    for other in ("ct", "opt", "con"):
        if "hb" in args.modes and other in args.modes:
            results[f"hb_over_{other}_p50"] = ratios(cells, "hb", other)
    title = (f"MTCC protocols: {args.nodes} nodes x {args.executors} executors, {args.clients} "
             f"clients x {args.calls} calls, {args.keys} keys ({results['started']})")
    results["png"] = args.png if plot(cells, args.modes, args.png, title) else None
    print(f"violations per mode: {json.dumps(viol)}")
    if "hb_over_lww_p50" in results:
        print(f"HB/LWW p50: {json.dumps(results['hb_over_lww_p50'])}")
        for topo, verdicts in results["goals"].items():
            for z, v in verdicts.items():
                print(f"  {topo} zipf {z}: {v}")
    print("figure: " + (results["png"] or "not written (matplotlib is not importable)"))
    print(json.dumps(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
