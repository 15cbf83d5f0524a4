"""Context switches per call, per process: where a warm call's wake-ups go.

    python benchmarks/switches.py [--calls 500] [--mode dag|burst] [--direct] [--root DIR]

Starts a LocalCluster (1 executor node, 2 workers), warms the `increment -> square` DAG
(`--mode dag`: serial warm calls) or a no-op function (`--mode burst`: `--calls` calls in
flight, then gathered), and counts the context switches (voluntary and involuntary, summed
over every thread, from `/proc/<pid>/task/*/status`) of each process of the cluster and of
the client, before and after `--calls` calls. Prints per call: scheduler, node, workers,
client, KVS, total, and the CPU time of each (user + system, from psutil). These counts
depend little on the machine's load, unlike times.

`--root DIR` runs another checkout (e.g. the code before a change) in a child process.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _switches(pid: int) -> Tuple[int, int]:
    vol = invol = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
        except OSError:
            pass
    return vol, invol


def _role(cmdline: List[str], parent_role: str) -> str:
    module = cmdline[cmdline.index("-m") + 1] if "-m" in cmdline else ""
    if module == "scheduler":
        return "scheduler"
    if module.startswith("executor"):
        # workers are forked from (or started by) their node
        return "workers" if parent_role == "node" or module == "executor.worker" else "node"
    return "kvs"


def _snapshot() -> Dict[str, List[float]]:
    import psutil
    me = psutil.Process()
    out: Dict[str, List[float]] = {}
    roles = {me.pid: "client"}
    procs = [(me, "client")] + [(p, None) for p in me.children(recursive=True)]
    for p, role in procs:
        try:
            role = role or _role(p.cmdline(), roles.get(p.ppid(), ""))
            roles[p.pid] = role
            vol, invol = _switches(p.pid)
            cpu = p.cpu_times()
        except Exception:
            continue
        acc = out.setdefault(role, [0, 0, 0.0])
        acc[0] += vol
        acc[1] += invol
        acc[2] += cpu.user + cpu.system
    return out


def measure(calls: int, mode: str, direct: bool) -> Dict[str, Dict[str, float]]:
    import cloudburst
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as cluster:
        client = cluster.client(direct=direct)
        if mode == "dag":
            client.register(lambda lib, x: x + 1, "increment")
            client.register(lambda lib, x: x * x, "square")
            client.register_dag("composition", ["increment", "square"], [("increment", "square")])
            run = lambda n: [client.call_dag("composition", {"increment": [i]}).get(timeout=10)
                             for i in range(n)]
        else:
            client.register(lambda: None, "noop")
            run = lambda n: cloudburst.gather([client.call("noop", timeout=120)
                                               for _ in range(n)], timeout=120)
        if mode == "burst":       # serial first: a direct client's lease is held by then
            for _ in range(100):
                client.call("noop").get(timeout=30)
        run(200)
        before = _snapshot()
        start = time.perf_counter()
        run(calls)
        took = time.perf_counter() - start
        after = _snapshot()
    out = {}
    total = [0.0, 0.0, 0.0]
    for role, (v, i, cpu) in after.items():
        b = before.get(role, [0, 0, 0.0])
        row = [(v - b[0]) / calls, (i - b[1]) / calls, (cpu - b[2]) * 1e6 / calls]
        out[role] = {"vol": round(row[0], 2), "invol": round(row[1], 2), "cpu_us": round(row[2])}
        total = [t + r for t, r in zip(total, row)]
    out["total"] = {"vol": round(total[0], 2), "invol": round(total[1], 2),
                    "cpu_us": round(total[2])}
    out["wall_us_per_call"] = round(took * 1e6 / calls)
    out["load"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--mode", choices=["dag", "burst"], default="dag")
    parser.add_argument("--direct", action="store_true")
    parser.add_argument("--root", help="another checkout, run in a child process")
    args = parser.parse_args()
    if args.root:
        argv = [sys.executable, os.path.join(ROOT, "benchmarks", "switches.py"),
                "--calls", str(args.calls), "--mode", args.mode] + \
            (["--direct"] if args.direct else [])
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.root), SWITCHES_ROOT=args.root)
        # cwd: the cluster's `python -m` services import from their working directory
        subprocess.run(argv, env=env, check=True, cwd=os.path.abspath(args.root))
        return
    sys.path.insert(0, os.environ.get("SWITCHES_ROOT", ROOT))
    print(json.dumps(measure(args.calls, args.mode, args.direct)))


if __name__ == "__main__":
    main()
