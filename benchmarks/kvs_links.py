"""What a client link saves one Python client of a CURVE cluster, per request: context switches
and CPU of the client process and of the node process, and the p50, with secured client links
(NodeConfig.client_links) against the same cluster without them (every request over
ZeroMQ/CURVE), in interleaved rounds.

Two one-node clusters with authentication are started from this checkout, one with links and
one without. Each round runs, on each in turn, `--ops` serial requests of `anna_core.Client`
(half GET, half PUT of `--value-size` bytes, over 200 keys written first). Context switches
are the sum over every thread of the process (voluntary and involuntary, /proc/PID/task/*/
status); CPU is user + system time (/proc/PID/stat, in clock ticks, so read it as a rough
figure for short rounds). Medians over `--rounds`; the 1-minute load average is printed with
every round.

    python benchmarks/kvs_links.py --rounds 3 --ops 3000
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

try:
    import anna_core
except ImportError:     # a checkout that is not installed: use this one
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import anna_core

MODES = ("zeromq", "links")


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of `pid` so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if "ctxt_switches" in line:
                        total += int(line.split()[1])
        except FileNotFoundError:   # a thread that ended meanwhile
            continue
    return total


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(cluster, ops: int, value_size: int, seed: int) -> dict:
    client = cluster.client()
    try:
        keys = [f"k{i}" for i in range(200)]
        for key in keys:                       # the keys exist, and the links are open
            client.put(key, b"x" * value_size)
        for key in keys:
            client.get(key)
        me, node = os.getpid(), cluster.node_pid("memory-0")
        cs0, ncs0, cpu0, ncpu0 = (context_switches(me), context_switches(node), cpu_seconds(me),
                                  cpu_seconds(node))
        rng, value, latencies = random.Random(seed), b"y" * value_size, []
        for i in range(ops):
            key = keys[rng.randrange(len(keys))]
            started = time.perf_counter()
            if i % 2:
                client.get(key)
            else:
                client.put(key, value)
            latencies.append(time.perf_counter() - started)
        cs1, ncs1, cpu1, ncpu1 = (context_switches(me), context_switches(node), cpu_seconds(me),
                                  cpu_seconds(node))
    finally:
        client.close()
    return {"p50_us": statistics.median(latencies) * 1e6,
            "client_switches": (cs1 - cs0) / ops, "node_switches": (ncs1 - ncs0) / ops,
            "client_cpu_us": (cpu1 - cpu0) / ops * 1e6, "node_cpu_us": (ncpu1 - ncpu0) / ops * 1e6,
            "load1": os.getloadavg()[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--value-size", type=int, default=256)
    args = p.parse_args(argv)
    clusters = {m: anna_core.LocalCluster(memory_threads=2, client_links=(m == "links"))
                for m in MODES}
    results: dict = {m: [] for m in MODES}
    try:
        for cluster in clusters.values():
            cluster.start()
        for round_ in range(args.rounds):
            for mode in MODES:
                r = one_round(clusters[mode], args.ops, args.value_size, seed=round_)
                results[mode].append(r)
                print(f"round {round_ + 1}/{args.rounds} {mode:7s}: p50 {r['p50_us']:.1f} us, "
                      f"switches/request client {r['client_switches']:.2f} node "
                      f"{r['node_switches']:.2f}, CPU/request client {r['client_cpu_us']:.0f} us "
                      f"node {r['node_cpu_us']:.0f} us  load {r['load1']:.2f}", flush=True)
    finally:
        for cluster in clusters.values():
            cluster.stop()
    print(f"\nmedians of {args.rounds} rounds, {args.ops} serial requests each (CURVE cluster):")
    for mode in MODES:
        med = {k: statistics.median(r[k] for r in results[mode]) for k in results[mode][0]}
        print(f"  {mode:7s}: p50 {med['p50_us']:.1f} us, switches/request client "
              f"{med['client_switches']:.2f} node {med['node_switches']:.2f}, CPU/request "
              f"client {med['client_cpu_us']:.0f} us node {med['node_cpu_us']:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
