"""What an actor's method call costs next to a plain function call, on one LocalCluster.

    python benchmarks/actors.py [--calls 200] [--runs 3]

Per run: `calls` sequential round trips of a plain function `incr(lib, x)` and of an actor's
`incr(x)` (each waits for its result before the next), then `calls` actor calls sent at once
(pipelined: they run one at a time on the instance) and gathered. Prints p50/p99 of the round
trips in ms and the pipelined calls per second, per run and the median over runs.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cloudburst  # noqa: E402


class Counter:
    def __init__(self):
        self.n = 0

    def incr(self, by):
        self.n += by
        return self.n


def incr(lib, by):
    return by + 1


def _pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def one_run(cb, calls):
    plain, actor = [], []
    counter = cb.actor(Counter)
    for _ in range(20):                       # warm both paths
        cb.call("incr", 1).get(timeout=30)
        counter.incr(1).get(timeout=30)
    for _ in range(calls):
        t = time.perf_counter()
        cb.call("incr", 1).get(timeout=30)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        counter.incr(1).get(timeout=30)
        actor.append(time.perf_counter() - t)
    t = time.perf_counter()
    cloudburst.gather([counter.incr(1) for _ in range(calls)], timeout=120)
    rate = calls / (time.perf_counter() - t)
    counter.kill()
    return {"plain_p50": _pct(plain, 0.5), "plain_p99": _pct(plain, 0.99),
            "actor_p50": _pct(actor, 0.5), "actor_p99": _pct(actor, 0.99),
            "pipelined_per_s": rate}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as cluster:
        cb = cluster.client(timeout=60)
        cb.register(incr, "incr")
        results = []
        for i in range(args.runs):
            r = one_run(cb, args.calls)
            results.append(r)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()))
        print("median: " + ", ".join(f"{k} {statistics.median(r[k] for r in results):.1f}"
                                     for k in results[0]))
        print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
