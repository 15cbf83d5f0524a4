"""What authentication costs: the KVS and DAG benchmarks with CURVE on and off, same run.

Every socket of a cluster is a CURVE server or client by default (ZeroMQ's CurveZMQ: a
handshake per connection, then every message encrypted and authenticated). This benchmark
runs, in interleaved rounds so the machine's noise hits both sides alike:

* the KVS benchmark (benchmarks/kvs.py): the native closed-loop load generator against one
  Anna node (server capacity), and one serial `anna_core.Client` (what a Python user sees);
* the DAG benchmark (benchmarks/composition.py): a two-function DAG call's latency through
  a scheduler and an executor.

Each round starts fresh clusters with `auth=True` and `auth=False`; medians over rounds and
the on/off ratios are printed and written to benchmarks/results/auth_cost.json.

    python benchmarks/auth_cost.py                 # 3 rounds
    python benchmarks/auth_cost.py --rounds 5 --duration 5 --calls 1000
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import anna_core                                   # noqa: E402
from anna_core import _core                        # noqa: E402
from composition import bench_cloudburst           # noqa: E402
from kvs import fmt, key_addresses, python_view    # noqa: E402

RESULTS_DIR = os.path.join(HERE, "results")


def log(message: str) -> None:
    print(f"[auth-cost] {message}", flush=True)


def loadgen_credentials(cluster: "anna_core.LocalCluster") -> Dict[str, Any]:
    """The load generator's keyword arguments for a client identity of `cluster`."""
    return {} if cluster.client_auth is None else {"auth": cluster.client_auth.load()}


def kvs_round(auth: bool, args: argparse.Namespace, seed: int) -> Dict[str, Any]:
    workload = dict(clients=args.clients, duration_s=args.duration, warmup_s=args.warmup,
                    keys=args.keys, zipf=args.zipf, read_ratio=args.read_ratio,
                    value_size=args.value_size)
    with anna_core.LocalCluster(memory_threads=args.threads, nodes=1, auth=auth) as cluster:
        owners = key_addresses(cluster.routing_address, args.keys, auth=cluster.client_auth)
        capacity = _core.load_anna(owners, seed=seed, **workload, **loadgen_credentials(cluster))
        weights = [1.0 / (k + 1) ** args.zipf for k in range(args.keys)]
        with cluster.client() as kvs:
            python = python_view(kvs.get, kvs.put, args.keys, weights, args.read_ratio,
                                 b"x" * args.value_size, args.python_ops, seed)
    return {"capacity": capacity, "python": python}


def median_of(rows: List[Dict[str, float]], field: str) -> float:
    return statistics.median(r[field] for r in rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--clients", type=int, default=50, help="load generator clients")
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds per KVS run")
    p.add_argument("--warmup", type=float, default=1.0, help="KVS warm-up seconds per run")
    p.add_argument("--keys", type=int, default=100_000, help="KVS key space")
    p.add_argument("--zipf", type=float, default=1.0, help="KVS key skew")
    p.add_argument("--read-ratio", type=float, default=0.5, help="KVS share of reads")
    p.add_argument("--value-size", type=int, default=256, help="KVS value bytes")
    p.add_argument("--threads", type=int, default=2, help="Anna memory worker threads")
    p.add_argument("--python-ops", type=int, default=3000, help="serial Python client ops")
    p.add_argument("--calls", type=int, default=600, help="DAG calls per round and side")
    args = p.parse_args(argv)

    runs: Dict[str, Dict[str, List[Dict[str, float]]]] = {
        side: {"capacity": [], "python": [], "dag": []} for side in ("on", "off")}
    started = time.monotonic()
    for r in range(args.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for auth in order:
            side = "on" if auth else "off"
            kvs = kvs_round(auth, args, seed=r + 1)
            runs[side]["capacity"].append(kvs["capacity"])
            runs[side]["python"].append(kvs["python"])
            log(f"round {r + 1}/{args.rounds} auth {side:>3}: capacity {fmt(kvs['capacity'])}")
            log(f"round {r + 1}/{args.rounds} auth {side:>3}: python   {fmt(kvs['python'])}")
            dag = bench_cloudburst(args.calls, 1, auth=auth)
            runs[side]["dag"].append(dag)
            log(f"round {r + 1}/{args.rounds} auth {side:>3}: DAG p50 {dag['p50_us']:.1f} us, "
                f"p99 {dag['p99_us']:.1f} us  ({time.monotonic() - started:.0f} s so far)")

    summary: Dict[str, Any] = {"rounds": args.rounds, "machine_cores": os.cpu_count(),
                               "workload": vars(args)}
    for side in ("on", "off"):
        summary[side] = {
            "kvs_throughput": median_of(runs[side]["capacity"], "throughput"),
            "kvs_p50_us": median_of(runs[side]["capacity"], "p50_us"),
            "kvs_p99_us": median_of(runs[side]["capacity"], "p99_us"),
            "kvs_errors": sum(r["errors"] for r in runs[side]["capacity"]),
            "python_p50_us": median_of(runs[side]["python"], "p50_us"),
            "python_p99_us": median_of(runs[side]["python"], "p99_us"),
            "dag_p50_us": median_of(runs[side]["dag"], "p50_us"),
            "dag_p99_us": median_of(runs[side]["dag"], "p99_us"),
        }
    on, off = summary["on"], summary["off"]
    summary["ratios"] = {
        "kvs_throughput_on_over_off": on["kvs_throughput"] / off["kvs_throughput"],
        "kvs_p50_on_over_off": on["kvs_p50_us"] / off["kvs_p50_us"],
        "python_p50_on_over_off": on["python_p50_us"] / off["python_p50_us"],
        "dag_p50_on_over_off": on["dag_p50_us"] / off["dag_p50_us"],
    }
    ratios = summary["ratios"]
    print()
    print(f"medians of {args.rounds} interleaved rounds     auth on      auth off   on/off")
    print(f"KVS capacity (ops/s, {args.clients} clients) {on['kvs_throughput']:>12,.0f}  "
          f"{off['kvs_throughput']:>12,.0f}   {ratios['kvs_throughput_on_over_off']:.2f}x")
    print(f"KVS capacity p50 (us)            {on['kvs_p50_us']:>12.1f}  {off['kvs_p50_us']:>12.1f}"
          f"   {ratios['kvs_p50_on_over_off']:.2f}x")
    print(f"Python client p50 (us)           {on['python_p50_us']:>12.1f}  "
          f"{off['python_p50_us']:>12.1f}   {ratios['python_p50_on_over_off']:.2f}x")
    print(f"DAG call p50 (us)                {on['dag_p50_us']:>12.1f}  {off['dag_p50_us']:>12.1f}"
          f"   {ratios['dag_p50_on_over_off']:.2f}x")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    out = os.path.join(RESULTS_DIR, "auth_cost.json")
    with open(out, "w") as f:
        json.dump({"summary": summary, "runs": runs}, f, indent=2)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
