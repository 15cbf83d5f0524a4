"""Anna kernel microbenchmark (dissertation Fig. 2.6, at this machine's scale).

No network: requests are pre-generated inside the process, update-only (LWW PUT), keys drawn
Zipf(4) (high contention: most updates hit one key). Each configuration runs the real worker
code path on pinned threads:

* replication 1: each key lives on one thread, so the hot key's owner does most of the work;
* full replication: every thread owns every key and gossips its merged changeset each epoch
  (merge-at-sender), so threads scale.

Prints 1 vs 2 threads for both (or the thread counts of --threads), as medians of --runs
runs, and the scaling ratio against 1 thread. Thread counts above the machine's cores are
oversubscribed (threads are pinned to core tid % cores): they show the design's overheads,
not its scaling.

    python benchmarks/kernel.py [--runs 5] [--seconds 2] [--zipf 4]
    python benchmarks/kernel.py --threads 1,2,4,8,16 --runs 3 --seconds 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from anna_core import _core  # noqa: E402 - after the checkout's root is on the path

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--zipf", type=float, default=4.0)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--max-threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--threads", default="",
                   help="comma-separated thread counts (default: 1 to --max-threads)")
    args = p.parse_args(argv)
    counts = ([int(t) for t in args.threads.split(",")] if args.threads
              else list(range(1, args.max_threads + 1)))
    if 1 not in counts:
        counts.insert(0, 1)  # the ratios are against one thread

    table: dict = {}
    for full in (False, True):
        name = "full replication" if full else "replication 1"
        for threads in counts:
            runs = []
            for run in range(args.runs):
                r = _core.bench_kernel(threads=threads, full_replication=full, zipf=args.zipf,
                                       keys=args.keys, seconds=args.seconds)
                runs.append(r["throughput"])
                print(f"[kernel] {name:16s} threads={threads} run {run + 1}/{args.runs}: "
                      f"{r['throughput']:,.0f} updates/s", flush=True)
            table[(name, threads)] = statistics.median(runs)

    print()
    print(f"kernel microbenchmark, update-only, Zipf {args.zipf}, {args.keys} keys, "
          f"median of {args.runs} x {args.seconds}s:")
    out = {}
    for name in ("replication 1", "full replication"):
        one = table[(name, 1)]
        row = f"  {name:16s}: 1 thread {one:>12,.0f}/s"
        out[name] = {"1": one}
        for threads in (c for c in counts if c != 1):
            t = table[(name, threads)]
            row += f"   {threads} threads {t:>12,.0f}/s ({t / one:.2f}x)"
            out[name][str(threads)] = t
        print(row)
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, "kernel.json"), "w") as f:
        json.dump({"zipf": args.zipf, "keys": args.keys, "cores": os.cpu_count(),
                   "load1": os.getloadavg()[0], "results": out}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
