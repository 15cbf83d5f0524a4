"""Latency of a two-function DAG whose first function's result goes to the second, on
another worker, by size: small values travel in the trigger; above 1 MiB (this code) they
go through the KVS by reference. Run it with this tree, then with an older tree on
PYTHONPATH, to compare (benchmarks/README.md, "Large values between a DAG's functions").

    PYTHONPATH=. python3 benchmarks/big_intermediates.py --calls 7
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cloudburst  # noqa: E402 - after the checkout's root is on the path

SIZES = {"1 KiB": 1 << 10, "512 KiB": 512 << 10, "5 MiB": 5 << 20, "20 MiB": 20 << 20}


def make(n):
    return b"m" * n


def measure(data):
    return len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=7, help="calls per size (median)")
    args = parser.parse_args()
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2,
                                 colocate_chains=False) as cluster:
        c = cluster.client(timeout=60)
        c.register(make, "make")
        c.register(measure, "measure")
        c.register_dag("make-measure", ["make", "measure"], [("make", "measure")])
        for name, size in SIZES.items():
            assert c.call_dag("make-measure", {"make": [size]}).get() == size   # warm-up
            took = []
            for _ in range(args.calls):
                start = time.perf_counter()
                assert c.call_dag("make-measure", {"make": [size]}).get() == size
                took.append(time.perf_counter() - start)
            print(f"{name:>8}: median {statistics.median(took) * 1000:7.1f} ms over "
                  f"{args.calls} calls (load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
