"""A cached read inside a function vs reading straight from Anna, for 0.5-2 MB values.

    python benchmarks/cache.py [--reads 200] [--sizes 0.5,1,2] [--json PATH]

One LocalCluster (1 executor node, 1 worker, Unix sockets between the node cache and its
worker). For each value size, a function is called `--reads` times; inside it the same key is
read three ways and each read is timed with `time.perf_counter` in the function itself:
- `anna`: straight from the KVS with an `anna_core.Client` owned by the function (what a
  FaaS function without a cache does: a round trip to storage per read);
- `cached (lww)`: `lib.get(key)` through the node cache (warm: the key was read before);
- `cached (causal)`: the same key written causally, read inside a causal call
  (`consistency="causal"`, protocol CT: the read comes from the call's snapshot of the
  node's strict causal cut).
Every read is deserialized (the function gets the object), so all three pay the same
unpickling. Prints p50/p99 per way and the ratio anna/cached at p50 (goal: >= 5x).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def summary(samples: List[float]) -> Dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1e6
    return {"p50_us": round(pick(0.50), 1), "p99_us": round(pick(0.99), 1),
            "mean_us": round(statistics.mean(s) * 1e6, 1), "n": len(s)}


class DirectReader:
    """A stateful function: reads `key` from Anna directly and through `lib`, timing both."""

    def __init__(self, kvs_address: str, auth: Any = None) -> None:
        self.kvs_address = kvs_address
        self.auth = auth          # the benchmark's client identity (the cluster authenticates)
        self.kvs = None

    def run(self, lib: Any, key: str, causal_key: str, mode: str) -> Dict[str, float]:
        import time as _time

        import anna_core
        from faas.values import loads     # the decoding lib.get does (plain data)
        if self.kvs is None:
            self.kvs = anna_core.Client(self.kvs_address, timeout=10.0, auth=self.auth)
        out: Dict[str, float] = {}
        if mode == "lww":
            start = _time.perf_counter()
            obj = loads(self.kvs.get(key))
            out["anna"] = _time.perf_counter() - start
            start = _time.perf_counter()
            obj2 = lib.get(key)
            out["cached_lww"] = _time.perf_counter() - start
            assert len(obj) == len(obj2)
        else:
            start = _time.perf_counter()
            obj = lib.get(causal_key)
            out["cached_causal"] = _time.perf_counter() - start
            assert len(obj) > 0
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--sizes", default="0.5,1,2", help="value sizes in MB")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import cloudburst
    results: Dict[str, Any] = {"reads": args.reads, "sizes": {}}
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1,
                                 transport="ipc") as cluster:
        client = cluster.client()
        client.register((DirectReader, (cluster.kvs.routing_address, cluster.client_auth)),
                        "reader")
        for mb in [float(x) for x in args.sizes.split(",")]:
            size = int(mb * 1024 * 1024)
            key, causal_key = f"bench/cache/{mb}", f"bench/cache/causal/{mb}"
            payload = os.urandom(size)
            client.put(key, payload)
            client.put(causal_key, payload, consistency="causal")
            samples: Dict[str, List[float]] = {"anna": [], "cached_lww": [], "cached_causal": []}
            for i in range(args.reads + 20):
                t = client.call("reader", key, causal_key, "lww").get(timeout=30)
                c = client.call("reader", key, causal_key, "causal", consistency="causal",
                                protocol="ct").get(timeout=30)
                if i >= 20:  # the first calls warm the cache, the function and connections
                    for name, v in {**t, **c}.items():
                        samples[name].append(v)
            row = {name: summary(v) for name, v in samples.items()}
            row["anna_over_cached_lww"] = round(row["anna"]["p50_us"] / row["cached_lww"]["p50_us"], 2)
            row["anna_over_cached_causal"] = round(row["anna"]["p50_us"] / row["cached_causal"]["p50_us"], 2)
            results["sizes"][str(mb)] = row
            print(f"{mb:4} MB  anna p50 {row['anna']['p50_us']:8.0f} us  "
                  f"cached lww p50 {row['cached_lww']['p50_us']:7.0f} us "
                  f"({row['anna_over_cached_lww']}x)  cached causal p50 "
                  f"{row['cached_causal']['p50_us']:7.0f} us ({row['anna_over_cached_causal']}x)",
                  flush=True)
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
