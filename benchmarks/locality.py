"""What the node cache saves: summing 10 referenced arrays, cold cache vs hot cache.

    python benchmarks/locality.py [--trials 5] [--sizes 80K,800K,8M,80M]

For each total size (80 KB to 80 MB, split over 10 arrays of float64), each trial stores 10
fresh arrays with `Client.put`, then calls `total(lib, *arrays)` with 10 `Reference`s twice:
- cold: the executor node's cache has never seen the keys; each is fetched from Anna (and
  subscribed) by the node cache, then handed to the worker;
- hot: the same call again; the node cache answers from memory, Anna is not asked.
Reports the median end-to-end call latency of each and the ratio. One executor node with one
worker, so both calls run on the same node. Uses numpy if installed, else `array('d')`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

UNITS = {"K": 1000, "M": 1000 * 1000}


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * UNITS[text[-1]]) if text[-1] in UNITS else int(text)


def make_array(n_bytes: int, seed: int):
    n = max(1, n_bytes // 8)
    try:
        import numpy as np
        return np.random.default_rng(seed).random(n)
    except ImportError:
        from array import array
        return array("d", (float((seed + i) % 97) for i in range(n)))


def total(lib, *arrays):
    return float(sum(float(a.sum()) if hasattr(a, "sum") else float(sum(a)) for a in arrays))


def main() -> None:
    import cloudburst

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--sizes", default="80K,800K,8M,80M", help="total bytes per call")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    results: List[Dict] = []
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        client = cluster.client(timeout=120)
        client.register(total, "total")
        client.call("total", [1.0]).get()  # warm the function cache
        print(f"{'total size':>12} {'cold p50 ms':>12} {'hot p50 ms':>11} {'cold/hot':>9}")
        for size in sizes:
            cold, hot = [], []
            for trial in range(args.trials):
                keys = [f"locality-{uuid.uuid4().hex[:8]}-{i}" for i in range(10)]
                expected = 0.0
                for i, key in enumerate(keys):
                    arr = make_array(size // 10, seed=trial * 10 + i)
                    expected += float(sum(arr)) if not hasattr(arr, "sum") else float(arr.sum())
                    client.put(key, arr)
                # arrays are objects, written by this script: it asks for them as such
                refs = [cloudburst.Reference(k, objects=True) for k in keys]
                for bucket in (cold, hot):
                    start = time.perf_counter()
                    value = client.call("total", *refs).get()
                    bucket.append(time.perf_counter() - start)
                    assert abs(value - expected) <= 1e-6 * max(1.0, abs(expected)), (value, expected)
            row = {"total_bytes": size, "cold_p50_ms": round(statistics.median(cold) * 1e3, 2),
                   "hot_p50_ms": round(statistics.median(hot) * 1e3, 2)}
            row["cold_over_hot"] = round(row["cold_p50_ms"] / row["hot_p50_ms"], 2)
            results.append(row)
            print(f"{size / 1e6:>10.2f}MB {row['cold_p50_ms']:>12.2f} {row['hot_p50_ms']:>11.2f} "
                  f"{row['cold_over_hot']:>8.2f}x", flush=True)
    print(json.dumps(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
