"""CPU per call per process on the direct leased path, optionally with py-spy profiles.

    python benchmarks/hotpath_cpu.py [--mode burst|dag] [--calls N] [--repeat K]
                                     [--profile DIR] [--rate HZ] [--top N] [--root CHECKOUT]
                                     [--security on|off]

Starts a LocalCluster (1 executor node, 2 workers; CURVE on, or `--security off` plaintext) of
the checkout at `--root` (default: this
one) in this process, warms it, then runs one measured phase with `Client(direct=True)`:
- `burst` (P7's shape): `--calls` no-op `call`s in flight, then `gather`;
- `dag` (P1's shape): `--calls` serial warm calls of the `increment -> square` DAG.
It reads each process's CPU time (user + system, from psutil) before and after the phase
and prints, per process (the client, i.e. this process, and each service process of the
cluster, named by its command line), the CPU microseconds per call, and the phase's wall
time; `main_thread_cpu_us_per_call`: the same for each process's main thread alone (a
service's Python loop, without ZeroMQ's I/O threads or its helper threads). `--repeat K`
runs the phase K times (their calls add up). With `--profile DIR` it runs `py-spy record --nonblocking` (`--rate` samples per second) on every one of those
processes during the phase and writes one collapsed-stack file per process into DIR (for
any flame graph tool); the summary then lists, per process, the `--top N` frames with the
most own samples and the most inclusive ones. py-spy counts a thread waiting inside
ZeroMQ's C code (`poll`, `recv`) as busy, so read those frames as waits.
`leases` in the summary: the client's worker leases after the phase (empty: they were
revoked or lapsed, and its calls went through the scheduler).
Prints a JSON summary (also written with `--json PATH`).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List


def _name(p) -> str:
    try:
        cmd = p.cmdline()
    except Exception:
        return f"pid{p.pid}"
    for i, part in enumerate(cmd):
        if part == "-m" and i + 1 < len(cmd):
            return cmd[i + 1].split(".")[-1]
    return os.path.basename(cmd[0]) if cmd else f"pid{p.pid}"


def _cpu(procs) -> Dict[int, float]:
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except Exception:
            pass
    return out


def _main_thread_cpu(procs) -> Dict[int, float]:
    """Each process's main thread's CPU seconds (its thread id is the pid): a service's
    Python loop, without ZeroMQ's I/O threads (CURVE) or its own helper threads."""
    out = {}
    for p in procs:
        try:
            for t in p.threads():
                if t.id == p.pid:
                    out[p.pid] = t.user_time + t.system_time
        except Exception:
            pass
    return out


def _top(collapsed: str, n: int) -> List[List]:
    """The n frames with the most own samples, and the n with the most inclusive ones."""
    own, incl, total = collections.Counter(), collections.Counter(), 0
    with open(collapsed) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            try:
                c = int(count)
            except ValueError:
                continue
            frames = stack.split(";")
            total += c
            own[frames[-1]] += c
            for fr in set(frames):
                incl[fr] += c
    pct = lambda c: round(100.0 * c / max(1, total), 1)
    return [[f, pct(c)] for f, c in own.most_common(n)], \
        [[f, pct(c)] for f, c in incl.most_common(3 * n)], total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["burst", "dag"], default="burst")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--profile", help="write py-spy profiles of every process here")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    ap.add_argument("--repeat", type=int, default=1, help="measured phases (burst mode)")
    ap.add_argument("--security", choices=["on", "off"], default="on",
                    help="on: CURVE on every socket (the default); off: the whole cluster in "
                         "plaintext")
    ap.add_argument("--json")
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    os.chdir(args.root)
    import psutil
    import cloudburst

    me = psutil.Process()
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2,
                                 auth=(args.security == "on")) as cluster:
        client = cluster.client(direct=True)
        if args.mode == "burst":
            client.register(lambda: None, "noop")
            for _ in range(100):
                client.call("noop").get(timeout=30)
            cloudburst.gather([client.call("noop") for _ in range(100)], timeout=60)
        else:
            client.register(lambda lib, x: x + 1, "increment")
            client.register(lambda lib, x: x * x, "square")
            client.register_dag("composition", ["increment", "square"],
                                [("increment", "square")])
            for i in range(200):
                client.call_dag("composition", {"increment": [i]}).get(timeout=10)
        procs = [me] + me.children(recursive=True)
        names = {p.pid: ("client" if p.pid == me.pid else _name(p)) for p in procs}
        spies = []
        if args.profile:
            os.makedirs(args.profile, exist_ok=True)
            for p in procs:
                base = os.path.join(args.profile, f"{args.mode}-{names[p.pid]}-{p.pid}")
                spies.append(subprocess.Popen(
                    ["py-spy", "record", "--nonblocking", "-r", str(args.rate), "-p", str(p.pid),
                     "-f", "raw", "-o", f"{base}.txt"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.0)
        load = os.getloadavg()[0]
        before = _cpu(procs)
        before_main = _main_thread_cpu(procs)
        start = time.perf_counter()
        n = 0
        for _ in range(args.repeat):
            if args.mode == "burst":
                futures = [client.call("noop", timeout=120) for _ in range(args.calls)]
                assert cloudburst.gather(futures, timeout=120) == [None] * args.calls
            else:
                for i in range(args.calls):
                    assert client.call_dag("composition", {"increment": [i]}).get(
                        timeout=10) == (i + 1) ** 2
            n += args.calls
        wall = time.perf_counter() - start
        after = _cpu(procs)
        after_main = _main_thread_cpu(procs)
        for s in spies:
            s.send_signal(signal.SIGINT)
        for s in spies:
            try:
                s.wait(20)
            except subprocess.TimeoutExpired:
                s.kill()
        leases = client.worker_leases
    per: Dict[str, float] = {}
    for pid, t in after.items():
        used = t - before.get(pid, t)
        if used > 0.001:
            per[f"{names[pid]}[{pid}]"] = round(1e6 * used / n, 1)
    main: Dict[str, float] = {}
    for pid, t in after_main.items():
        used = t - before_main.get(pid, t)
        if used > 0.001:
            main[f"{names[pid]}[{pid}]"] = round(1e6 * used / n, 1)
    out = {"mode": args.mode, "calls": n, "wall_s": round(wall, 3),
           "calls_per_s": round(n / wall, 1), "us_per_call": round(1e6 * wall / n, 1),
           "cpu_us_per_call": per, "cpu_us_per_call_total": round(sum(per.values()), 1),
           "main_thread_cpu_us_per_call": main,
           "load": round(load, 2), "leases": leases, "root": args.root,
           "security": args.security}
    if args.profile:
        out["top"] = {}
        for p in procs:
            raw = os.path.join(args.profile, f"{args.mode}-{names[p.pid]}-{p.pid}.txt")
            if os.path.exists(raw):
                own, incl, total = _top(raw, args.top)
                out["top"][f"{names[p.pid]}[{p.pid}]"] = {"samples": total, "own": own,
                                                          "inclusive": incl}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
