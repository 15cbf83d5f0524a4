"""Throughput of one client: many no-op calls in flight, then gathered; Cloudburst vs Ray.

    python benchmarks/throughput.py [--calls 2000] [--rounds 3] [--workers 2] [--no-ray]
                                    [--ray-venv DIR] [--json PATH] [--cloudburst-root DIR]

Each round, in one run on this machine, alternating the systems so that drift in the
machine's load hits both alike:
1. Cloudburst: a LocalCluster (Anna, one scheduler, one executor node with `--workers`
   workers, the defaults otherwise: authentication on, calls following capacity); one
   client sends `--calls` calls of a registered no-op function (`client.call`, each a
   `Future`), then gathers them all (`cloudburst.gather`); calls per second from the first
   send to the last result. A warm-up of 200 calls (serial, then in flight) comes first.
   Then the same with `Client(direct=True)` (`direct`): calls within the client's worker
   lease go straight to the leased worker, the rest through the scheduler as before.
2. Ray: the same on a local Ray (`ray.init(num_cpus=--workers)`): `f.remote()` `--calls`
   times, then `ray.get` of the list; the same warm-up. Ray is installed into its own venv
   as `benchmarks/composition.py` does (`--ray-venv`, default
   ~/.cache/cloudburst-bench/ray-venv, `ray==2.60.*` or the closest version pip finds).
Prints each round's figures with the load average, the median of the rounds for each
system, and the ratio of the medians (Cloudburst / Ray), and a JSON summary (`--json`).

`--cloudburst-root DIR` runs another checkout's Cloudburst (with its built kernel) in the
same rounds, e.g. the code before a change: its figures are reported as `before` (and
`before_direct` for its direct path).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CLOUDBURST_SCRIPT = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import cloudburst
calls, workers, direct = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "direct"
with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=workers) as cluster:
    client = cluster.client(direct=direct)
    client.register(lambda: None, "noop")
    for _ in range(100):
        client.call("noop").get(timeout=30)
    cloudburst.gather([client.call("noop") for _ in range(100)], timeout=60)
    start = time.perf_counter()
    futures = [client.call("noop", timeout=120) for _ in range(calls)]
    sent = time.perf_counter()
    values = cloudburst.gather(futures, timeout=120)
    took = time.perf_counter() - start
    assert values == [None] * calls
    print("CB_RESULT " + json.dumps({"seconds": took, "send_seconds": sent - start,
                                      "module": cloudburst.__file__}))
"""

RAY_SCRIPT = r"""
import json, sys, time, ray
calls, workers = int(sys.argv[1]), int(sys.argv[2])
ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
@ray.remote
def noop(): return None
for _ in range(100):
    ray.get(noop.remote())
ray.get([noop.remote() for _ in range(100)])
start = time.perf_counter()
refs = [noop.remote() for _ in range(calls)]
sent = time.perf_counter()
values = ray.get(refs)
took = time.perf_counter() - start
assert values == [None] * calls
print("RAY_RESULT " + json.dumps({"seconds": took, "send_seconds": sent - start,
                                   "version": ray.__version__}))
ray.shutdown()
"""


def _result(out: subprocess.CompletedProcess, tag: str) -> Dict:
    for line in out.stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise RuntimeError(f"{tag} run failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def run_cloudburst(root: str, calls: int, workers: int, direct: bool = False) -> Dict:
    """One fresh cluster of the checkout at `root`, in a process of its own; `direct`: the
    client uses the direct leased path."""
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", CLOUDBURST_SCRIPT, root, str(calls),
                          str(workers), "direct" if direct else "scheduler"],
                         capture_output=True, text=True, timeout=600, env=env,
                         cwd=root)   # `python -m` services import from their working directory
    data = _result(out, "CB_RESULT")
    if not data["module"].startswith(os.path.realpath(root)) and \
            not data["module"].startswith(root):
        raise RuntimeError(f"the run imported {data['module']}, not the checkout at {root}")
    return data


def run_ray(python: str, calls: int, workers: int, attempts: int = 3) -> Dict:
    """Ray's run; a Ray whose node timed out starting (a loaded machine) is started again,
    up to `attempts` times."""
    for attempt in range(attempts):
        out = subprocess.run([python, "-c", RAY_SCRIPT, str(calls), str(workers)],
                             capture_output=True, text=True, timeout=900)
        try:
            return _result(out, "RAY_RESULT")
        except RuntimeError:
            if attempt == attempts - 1:
                raise
            print(f"Ray failed (attempt {attempt + 1} of {attempts}); starting it again",
                  flush=True)
    raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--ray-venv", default=os.path.join(
        os.path.expanduser("~"), ".cache", "cloudburst-bench", "ray-venv"))
    parser.add_argument("--cloudburst-root", help="another checkout, measured as `before`")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()
    from composition import ray_python      # benchmarks/composition.py installs Ray
    python: Optional[str] = None if args.no_ray else ray_python(args.ray_venv)
    systems = {"cloudburst": lambda: run_cloudburst(ROOT, args.calls, args.workers),
               "direct": lambda: run_cloudburst(ROOT, args.calls, args.workers, True)}
    if args.cloudburst_root:
        before = os.path.abspath(args.cloudburst_root)
        systems["before"] = lambda: run_cloudburst(before, args.calls, args.workers)
        systems["before_direct"] = lambda: run_cloudburst(before, args.calls, args.workers,
                                                          True)
    if python is not None:
        systems["ray"] = lambda: run_ray(python, args.calls, args.workers)
    rates: Dict[str, List[float]] = {name: [] for name in systems}
    rounds = []
    version = None
    for r in range(args.rounds):
        row = {"load": round(os.getloadavg()[0], 2)}
        for name, run in systems.items():
            data = run()
            version = data.get("version", version)
            rates[name].append(args.calls / data["seconds"])
            row[name] = round(args.calls / data["seconds"])
        rounds.append(row)
        print(f"round {r + 1} (load {row['load']}): " + ", ".join(
            f"{name} {row[name]:,} calls/s" for name in systems), flush=True)
    summary: Dict = {"calls": args.calls, "workers": args.workers, "rounds": rounds,
                     "ray_version": version,
                     "median_calls_per_s": {n: round(statistics.median(v)) for n, v in rates.items()}}
    med = summary["median_calls_per_s"]
    if "ray" in med:
        for name in ("cloudburst", "direct", "before", "before_direct"):
            if name in med:
                summary[f"{name}_over_ray"] = round(med[name] / med["ray"], 2)
    print("median calls/s: " + ", ".join(f"{n} {v:,}" for n, v in med.items()) + "".join(
        f"; {n[:-9]} / Ray {summary[n]}x" for n in summary if n.endswith("_over_ray")))
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
