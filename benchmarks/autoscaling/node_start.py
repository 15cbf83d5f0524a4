"""How soon does an executor node added to a running cluster serve its first call?

    python benchmarks/autoscaling/node_start.py [--rounds 3] [--before PATH]

The scenario of the test of calls following capacity: a `LocalCluster` of one executor node
with one worker, `--calls` calls of a function sleeping 1 s sent at once, and a second node
added (`add_executor_node`) one second later. Measured: the time from `add` to the first
call that starts on the new node (the function records when it starts), from `add` to
`add_executor_node` returning (every scheduler sees the node's workers), and the whole
burst. Three ways, interleaved within each round, each in a process of its own:
- **before**: the code at `--before` (a checkout of the previous version, with its kernel
  and generated protobuf code built; skipped without it): the node starts its workers as
  `python -m executor.worker`, each importing everything again;
- **forked workers**: this checkout; the node forks its workers after its imports
  (`executor/prefork.py`);
- **standby**: this checkout with `LocalCluster(standby_node=True)`: a spare node, started
  ahead with its code imported and its workers forked, takes the new node's configuration
  (`cloudburst/standby.py`).
The machine's load average is recorded with every run (other processes share the cores).
Writes `<out>/autoscaling_node_start.json`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VARIANTS = ("before", "forked workers", "standby")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def slow(lib, seconds):
    import time
    started = time.time()
    time.sleep(seconds)
    return lib.getid(), started


def one(variant: str, calls: int) -> Dict[str, Any]:
    """One run in this process, on the checkout on `sys.path`."""
    import threading
    from cloudburst import LocalCluster
    options = {"standby_node": True} if variant == "standby" else {}
    with LocalCluster(executor_nodes=1, executors_per_node=1, **options) as cluster:
        cb = cluster.client()
        cb.register(slow, "slow")
        cb.call("slow", 0.0).get(timeout=60)
        first = {w["worker_id"] for w in cluster.workers}
        start = time.time()
        futures = [cb.call("slow", 1.0, timeout=120) for _ in range(calls)]
        time.sleep(1.0)    # the scenario: the node is added one second after the burst
        added: Dict[str, float] = {}
        add = time.time()
        adder = threading.Thread(target=lambda: (cluster.add_executor_node(),
                                                 added.update(t=time.time())))
        adder.start()
        ran = [f.get(timeout=120) for f in futures]
        end = time.time()
        adder.join(60)
        new = [t for w, t in ran if w not in first]
        return {"variant": variant, "load": os.getloadavg()[0],
                "add_to_first_call": (min(new) - add) if new else None,
                "add_to_ready": added.get("t", float("nan")) - add,
                "burst": end - start, "on_new_node": len(new)}


def spawn(variant: str, tree: str, calls: int) -> Optional[Dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", variant,
                           "--calls", str(calls)], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=300)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    log(f"{variant}: no result (exit {done.returncode}): {done.stderr[-2000:]}")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--before", help="a checkout of the previous version (built)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "figures"))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.one, args.calls)), flush=True)
        return
    variants = [v for v in VARIANTS if v != "before" or args.before]
    runs: List[Dict[str, Any]] = []
    for r in range(args.rounds):
        for variant in variants:
            tree = os.path.abspath(args.before) if variant == "before" else ROOT
            result = spawn(variant, tree, args.calls)
            if result is None:
                continue
            result["round"] = r + 1
            runs.append(result)
            first = result["add_to_first_call"]
            log(f"round {r + 1} {variant:15s} add -> first call on it "
                f"{'-' if first is None else f'{first:.2f} s'}, add -> ready "
                f"{result['add_to_ready']:.2f} s, burst {result['burst']:.2f} s, "
                f"{result['on_new_node']} of {args.calls} on it, load {result['load']:.1f}")
    print("\n| way | add -> first call on the new node, median (runs) | add -> ready | burst "
          "| calls on the new node | load average |\n|---|---|---|---|---|---|")
    for variant in variants:
        mine = [x for x in runs if x["variant"] == variant]
        if not mine:
            continue
        firsts = [x["add_to_first_call"] for x in mine if x["add_to_first_call"] is not None]
        med = statistics.median(firsts) if firsts else float("nan")
        print(f"| {variant} | **{med:.2f} s** ({', '.join(f'{x:.2f}' for x in firsts)}) | "
              f"{statistics.median(x['add_to_ready'] for x in mine):.2f} s | "
              f"{statistics.median(x['burst'] for x in mine):.2f} s | "
              f"{', '.join(str(x['on_new_node']) for x in mine)} | "
              f"{', '.join(format(x['load'], '.1f') for x in mine)} |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "autoscaling_node_start.json"), "w") as f:
        json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
