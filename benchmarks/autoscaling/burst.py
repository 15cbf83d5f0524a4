"""A burst on an autoscaled cluster: does a node added during the burst take queued calls?

    python benchmarks/autoscaling/burst.py [--rounds 3] [--calls 12] [--function-seconds 2]

The scenario of `cloudburst local --autoscale --max-executors 2 --executors-per-node 1`:
`--calls` calls of a function sleeping `--function-seconds` are sent at once to a cluster
that starts with one executor node of one worker and may grow to `--max-nodes`. Each round
runs three clusters one after the other:
- **follows capacity**: the default; a call that finds every worker busy waits at the
  scheduler and goes to the first free worker, on any node, the added one too;
- **placed at once**: the previous placement (`LocalCluster(queue_calls=False)`): every
  call is placed at once on the least loaded worker and waits in that worker's queue;
- **static**: `--max-nodes` nodes from the start, no autoscaler (the best case).
Measured: the burst's duration (first send to last result), how many calls each node ran,
and the autoscaler's actions (seconds from the burst's start).

The cost of waiting at the scheduler: with `--noop-calls N`, each round also sends N calls
of a function that returns at once to a static cluster of one node with two workers, all at
once, with calls following capacity and placed at once, and measures the calls per second.
Every worker is busy all the time here, so each call waits in the queue and is placed one
`done` later, instead of waiting in a worker's socket. Writes
`<out>/autoscaling_burst.json`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

VARIANTS = ("follows capacity", "placed at once", "static")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def run(args: argparse.Namespace, variant: str) -> Dict[str, Any]:
    from cloudburst import LocalCluster
    from cloudburst.executor_policy import ExecutorPolicyConfig
    autoscale = None if variant == "static" else ExecutorPolicyConfig(
        min_nodes=1, max_nodes=args.max_nodes)
    nodes = args.max_nodes if variant == "static" else 1
    with LocalCluster(executor_nodes=nodes, executors_per_node=1, autoscale=autoscale,
                      queue_calls=variant != "placed at once") as cluster:
        cb = cluster.client()
        wait = args.function_seconds

        def burst(lib, i):
            import time
            time.sleep(wait)
            return lib.getid()

        cb.register(burst, "burst")
        cb.call("burst", -1, timeout=60).get(timeout=60)      # warm every path once
        start = time.monotonic()
        futures = [cb.call("burst", i, timeout=120) for i in range(args.calls)]
        ran_on = [f.get(timeout=120) for f in futures]
        took = time.monotonic() - start
        actions = []
        if cluster.autoscaler is not None:
            actions = [(type(a.action).__name__, round(a.at - start, 2))
                       for a in list(cluster.autoscaler.history)
                       if type(a.action).__name__ != "Note"]
        asked = [t for kind, t in actions if kind == "AddNodes"]
    per_node: Dict[str, int] = {}
    for wid in ran_on:
        node = wid.split(".")[0]
        per_node[node] = per_node.get(node, 0) + 1
    return {"variant": variant, "seconds": took, "per_node": per_node,
            "add_asked_s": asked[0] if asked else None, "actions": actions}


def saturated(args: argparse.Namespace, queue_calls: bool) -> float:
    """Calls per second of `--noop-calls` no-op calls sent at once (see the module doc)."""
    from cloudburst import LocalCluster
    with LocalCluster(executor_nodes=1, executors_per_node=2, queue_calls=queue_calls) as c:
        cb = c.client()

        work = args.noop_seconds

        def noop(lib, i):
            if work:
                import time
                time.sleep(work)
            return i

        cb.register(noop, "noop")
        for i in range(20):
            cb.call("noop", i).get(timeout=60)                # warm every path
        start = time.monotonic()
        futures = [cb.call("noop", i, timeout=120) for i in range(args.noop_calls)]
        for i, f in enumerate(futures):
            assert f.get(timeout=120) == i
        return args.noop_calls / (time.monotonic() - start)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip-burst", action="store_true", help="only the --noop-calls part")
    p.add_argument("--calls", type=int, default=12)
    p.add_argument("--function-seconds", type=float, default=2.0)
    p.add_argument("--max-nodes", type=int, default=2)
    p.add_argument("--noop-calls", type=int, default=0,
                   help="also measure the calls/s of this many no-op calls sent at once")
    p.add_argument("--noop-seconds", type=float, default=0.0,
                   help="with --noop-calls: the function sleeps this long instead (s)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = p.parse_args(argv)
    rounds = []
    for i in range(args.rounds):
        r: Dict[str, Any] = {}
        for variant in () if args.skip_burst else VARIANTS:
            r[variant] = run(args, variant)
            log(f"round {i + 1} {variant}: {r[variant]['seconds']:.2f} s, calls per node "
                f"{r[variant]['per_node']}, autoscaler {r[variant]['actions']}")
        if args.noop_calls:
            r["noop_calls_per_s"] = {"follows capacity": saturated(args, True),
                                     "placed at once": saturated(args, False)}
            log(f"round {i + 1} no-op calls/s: {r['noop_calls_per_s']}")
        rounds.append(r)
    summary: Dict[str, Any] = {v: statistics.median(r[v]["seconds"] for r in rounds)
                               for v in VARIANTS if not args.skip_burst}
    if args.noop_calls:
        summary["noop_calls_per_s"] = {
            v: statistics.median(r["noop_calls_per_s"][v] for r in rounds)
            for v in ("follows capacity", "placed at once")}
    log(f"median burst duration over {args.rounds} round(s): {json.dumps(summary)}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "autoscaling_burst" + ("_noop" if args.skip_burst else "")
                        + (f"_{args.noop_seconds:g}s" if args.noop_seconds else "") + ".json")
    with open(path, "w") as f:
        json.dump({"args": vars(args), "median_seconds": summary, "rounds": rounds}, f,
                  indent=1)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
