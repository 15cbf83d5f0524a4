"""What a data directory costs: `Client.put` latency on a `LocalCluster` in memory against one
with `data_dir=` (the KVS's disk tier: RocksDB, a write acknowledged once in its write-ahead
log) under each `disk_sync` mode (when that log is fsynced: "none", "interval" (the
default), "always"), and how long a restart takes to serve again.

    python benchmarks/durable_state.py [--runs 3] [--puts 200] [--sizes 100,65536,1048576]
                                       [--modes memory,none,interval,always]

Each run starts one cluster per mode in turn (in `--modes` order), warms up, then times
`--puts` puts of each size from one client (each put returns once every replica acknowledged
it, `put_all`). Prints per run the p50 and p99 in ms, then the median over the runs of each
p50 and its ratio to memory's; and the seconds from `LocalCluster(data_dir=)` start to a
first successful `get` of a key written before a clean stop (the restart's cost).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cloudburst  # noqa: E402


def put_latencies(client: cloudburst.Client, size: int, puts: int) -> List[float]:
    value = b"v" * size
    for i in range(20):                      # warm up: routing lookups, sockets
        client.put(f"warm{i}", value)
    out = []
    for i in range(puts):
        started = time.perf_counter()
        client.put(f"k{size}-{i % 50}", value)
        out.append((time.perf_counter() - started) * 1000.0)
    return out


def one_run(sizes: List[int], puts: int, modes: List[str]) -> Dict[str, Dict[int, List[float]]]:
    out: Dict[str, Dict[int, List[float]]] = {}
    data = tempfile.mkdtemp(prefix="durable-bench-")
    try:
        for mode in modes:
            options = {} if mode == "memory" else {"data_dir": data, "disk_sync": mode}
            with cloudburst.LocalCluster(executors_per_node=1, **options) as cluster:
                client = cluster.client()
                out[mode] = {size: put_latencies(client, size, puts) for size in sizes}
        started = time.perf_counter()
        with cloudburst.LocalCluster(executors_per_node=1, data_dir=data) as cluster:
            cluster.client().get("warm0")
            out["restart_s"] = {0: [time.perf_counter() - started]}
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return out


def pct(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--puts", type=int, default=200)
    parser.add_argument("--sizes", default="100,65536,1048576")
    parser.add_argument("--modes", default="memory,none,interval,always",
                        help="memory, and disk_sync modes of a data directory")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    p50s: Dict[str, Dict[int, List[float]]] = {mode: {} for mode in modes}
    restarts: List[float] = []
    for run in range(args.runs):
        print(f"run {run + 1}: load average {os.getloadavg()[0]:.1f}", flush=True)
        result = one_run(sizes, args.puts, modes)
        restarts.append(result["restart_s"][0][0])
        for mode in modes:
            for size in sizes:
                lat = result[mode][size]
                p50s[mode].setdefault(size, []).append(pct(lat, 0.5))
                print(f"run {run + 1} {mode:>8} {size:>8} B: p50 {pct(lat, 0.5):6.2f} ms  "
                      f"p99 {pct(lat, 0.99):6.2f} ms", flush=True)
        print(f"run {run + 1} restart on the data dir to a first get: {restarts[-1]:.1f} s",
              flush=True)
    for size in sizes:
        for mode in modes:
            print(f"    {size} B {mode}: p50 of each run "
                  + "/".join(f"{v:.2f}" for v in p50s[mode][size]))
    print(f"\nmedian of the runs' p50 (ms), and its ratio to {modes[0]}'s:")
    print(f"{'size':>9} " + " ".join(f"{mode:>16}" for mode in modes))
    for size in sizes:
        base = statistics.median(p50s[modes[0]][size])
        cells = [f"{statistics.median(p50s[m][size]):7.2f} "
                 f"({statistics.median(p50s[m][size]) / base:4.1f}x)" for m in modes]
        print(f"{size:>9} " + " ".join(f"{c:>16}" for c in cells))
    print(f"restart to a first get: median {statistics.median(restarts):.1f} s "
          f"({', '.join(f'{r:.1f}' for r in restarts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
