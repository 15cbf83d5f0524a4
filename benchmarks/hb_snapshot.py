"""HB with its snapshot round at the start of every call, against HB that takes it only when
OPT aborts, and OPT, in short alternating bursts: what the snapshot policy buys.

    python benchmarks/hb_snapshot.py [--rounds 4] [--burst 8] [--clients 8] [--keys 30]
        [--zipf 1.5] [--json PATH]

Two `LocalCluster`s run side by side, each 2 executor nodes x 2 workers with one Anna node
(`mtcc.py --throughput`'s shape, chains spread over the nodes): one whose schedulers take HB's
snapshot round at the start of every call (`hb_snapshot="always"`, the protocol as written)
and one with the default policy (`"adaptive"`: the round only after an OPT abort, for a DAG
whose OPT attempts seldom abort). Each round runs four bursts of `--burst` seconds in turn:
LWW (the control), HB on the first cluster, HB on the second, OPT on the second; `--clients` threads call the
linear DAG `r1 -> r2 -> w` of `benchmarks/mtcc.py` back to back (Zipf `--zipf` over `--keys`
keys per burst kind). Short alternating bursts put the same machine load on each kind, which
separate runs minutes apart on a shared machine do not. Each kind's DAGs/s, p50 and CPU ms per
DAG (its cluster's processes over the burst; the clients are not counted) are printed per
round, with their
medians; a warm-up burst per kind comes first (the adaptive cluster's policy learns there).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.mtcc import DAGS, Zipf, call_args, setup_functions, write_keyspace  # noqa: E402


def process_cpu(pids: List[int]) -> float:
    """CPU seconds of `pids` and every process below them, from /proc (Linux)."""
    stats: Dict[int, Any] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    mine = set(pids)
    while True:
        below = {p for p, (parent, _) in stats.items() if parent in mine} - mine
        if not below:
            break
        mine |= below
    return sum(stats[p][1] for p in mine if p in stats)


def direct_children() -> set:
    """The pids whose parent is this process."""
    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        out.add(int(entry))
            except OSError:
                continue
    return out


def burst(clients: List[Any], keys: List[str], protocol: str, seconds: float, zipf_s: float,
          seed: str, cluster_pids: List[int]) -> Dict[str, Any]:
    """`clients` threads call the linear DAG for `seconds`; DAGs/s, p50, errors, CPU/DAG."""
    dag = DAGS["linear"][0]
    lat: List[float] = []
    errors: List[str] = []
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def loop(i: int, client: Any) -> None:
        rng = random.Random(f"{seed}/{i}")
        zipf = Zipf(len(keys), zipf_s, rng)
        while time.perf_counter() < end:
            args = call_args("linear", keys, zipf, protocol != "lww", rng)
            kw = {} if protocol == "lww" else {"consistency": "causal", "protocol": protocol}
            t = time.perf_counter()
            try:
                client.call_dag(dag, args, timeout=30, **kw).get(timeout=35)
                with lock:
                    lat.append(time.perf_counter() - t)
            except Exception as e:   # counted, not fatal
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")

    cpu0 = process_cpu(cluster_pids)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(i, c)) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    wall = time.perf_counter() - t0
    cpu = process_cpu(cluster_pids) - cpu0
    return {"dags_per_s": round(len(lat) / wall, 1),
            "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
            "cpu_ms_per_dag": round(1000 * cpu / len(lat), 2) if lat else None,
            "ok": len(lat), "errors": len(errors), "error_samples": errors[:3]}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--burst", type=float, default=8.0, help="seconds per burst")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--keys", type=int, default=30)
    p.add_argument("--zipf", type=float, default=1.5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import cloudburst

    kinds = [("lww", "adaptive", "lww"), ("hb_always", "always", "hb"),
             ("hb_adaptive", "adaptive", "hb"), ("opt", "adaptive", "opt")]
    clusters: Dict[str, Any] = {}
    try:
        pids: Dict[str, List[int]] = {}
        for mode in ("always", "adaptive"):
            known = direct_children()
            c = cloudburst.LocalCluster(executor_nodes=2, executors_per_node=2,
                                        transport="ipc", colocate_chains=False,
                                        max_causal_retries=20, hb_snapshot=mode)
            clusters[mode] = c
            c.start()
            pids[mode] = sorted(direct_children() - known)   # this cluster's processes
        clients = {m: [c.client(timeout=35) for _ in range(args.clients)]
                   for m, c in clusters.items()}
        for m in clusters:
            setup_functions(clients[m][0])
        keys = {name: [f"hbs/{name}/{i}" for i in range(args.keys)] for name, _, _ in kinds}
        for name, mode, _ in kinds:
            write_keyspace(clients[mode][0], keys[name], causal=name != "lww")
        out: Dict[str, Any] = {"config": vars(args), "loadavg_start": os.getloadavg(),
                               "rounds": []}
        for r in range(args.rounds + 1):            # round 0: warm-up, not counted
            row = {}
            for name, mode, protocol in kinds:
                row[name] = burst(clients[mode], keys[name], protocol, args.burst, args.zipf,
                                  f"{r}/{name}", pids[mode])
            row["loadavg"] = os.getloadavg()[0]
            print(f"round {r}{' (warm-up)' if r == 0 else ''}: " + "  ".join(
                f"{n} {row[n]['dags_per_s']} DAGs/s p50 {row[n]['p50_ms']} ms "
                f"{row[n]['cpu_ms_per_dag']} ms CPU/DAG err {row[n]['errors']}"
                for n, _, _ in kinds) + f"  load {row['loadavg']:.1f}", flush=True)
            if r:
                out["rounds"].append(row)
        out["medians"] = {n: {k: statistics.median(row[n][k] for row in out["rounds"])
                              for k in ("dags_per_s", "p50_ms", "cpu_ms_per_dag")}
                          for n, _, _ in kinds}
        for n, _, _ in kinds:       # each round's ratio to the LWW burst just before it
            out["medians"][n]["over_lww"] = round(statistics.median(
                row[n]["dags_per_s"] / row["lww"]["dags_per_s"] for row in out["rounds"]), 2)
        out["loadavg_end"] = os.getloadavg()
        print(json.dumps(out["medians"]))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        for c in clusters.values():
            c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
