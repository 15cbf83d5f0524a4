"""Function composition latency: Cloudburst vs Ray vs a bare ZeroMQ 4-hop round trip.

    python benchmarks/composition.py [--calls 1000] [--no-ray] [--ray-venv DIR]

In one run on this machine:
1. Cloudburst: the 2-function DAG `increment -> square` on a LocalCluster (1 executor node,
   2 workers), `--calls` serial warm calls; p50/p99. Twice: with the default policy, which
   puts a chain's functions on one worker (client -> scheduler -> worker -> client; the
   result passes between the functions without a socket), and with `colocate_chains=False`,
   so the two functions run in different worker processes and the result crosses
   client -> scheduler -> worker -> worker -> client (4 hops, like the reference below).
2. Ray: the same chain (`square.remote(increment.remote(x))`, `ray.get`) on a local Ray
   (`ray.init(num_cpus=2)`), installed by this script into its own venv (`--ray-venv`,
   default ~/.cache/cloudburst-bench/ray-venv; `pip install ray==2.60.*`, or the closest
   version pip finds); p50/p99 and the ratio Ray/Cloudburst.
3. Reference: a bare pyzmq 4-hop round trip (client -> 3 relay processes -> client, PUSH/PULL
   over loopback), the floor for any Python design with this many hops; ratio
   Cloudburst/bare.
Prints one line per system and a JSON summary (also written with `--json PATH`).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def summary(samples: List[float]) -> Dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1e6
    return {"p50_us": round(pick(0.50), 1), "p99_us": round(pick(0.99), 1),
            "mean_us": round(statistics.mean(s) * 1e6, 1), "n": len(s)}


# ---- Cloudburst ----
def bench_cloudburst(calls: int, workers: int, transport: str = "tcp",
                     colocate: bool = True, **options) -> Dict[str, float]:
    """p50/p99 of a two-function DAG call; `options` go to `cloudburst.LocalCluster`."""
    import cloudburst
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=workers,
                                 transport=transport, colocate_chains=colocate,
                                 **options) as cluster:
        client = cluster.client()
        client.register(lambda lib, x: x + 1, "increment")
        client.register(lambda lib, x: x * x, "square")
        client.register_dag("composition", ["increment", "square"], [("increment", "square")])
        for i in range(200):
            assert client.call_dag("composition", {"increment": [i]}).get(timeout=10) == (i + 1) ** 2
        samples = []
        for i in range(calls):
            start = time.perf_counter()
            value = client.call_dag("composition", {"increment": [i]}).get(timeout=10)
            samples.append(time.perf_counter() - start)
            assert value == (i + 1) ** 2
    return summary(samples)


# ---- bare ZeroMQ 4-hop ----
def _relay(inp: str, out: str) -> None:
    import zmq
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind(inp)
    push.connect(out)
    while True:
        frames = pull.recv_multipart()
        push.send_multipart(frames)
        if frames[0] == b"stop":
            return


def bench_zmq(calls: int) -> Dict[str, float]:
    import zmq
    ctx = zmq.Context()
    socks, addrs = [], []
    for _ in range(4):  # reserve free ports by binding, then hand them over
        s = ctx.socket(zmq.PULL)
        port = s.bind_to_random_port("tcp://127.0.0.1")
        socks.append(s)
        addrs.append(f"tcp://127.0.0.1:{port}")
    for s in socks[:3]:
        s.close(0)
    pull = socks[3]
    procs = [mp.get_context("spawn").Process(target=_relay, args=(addrs[i], addrs[i + 1]))
             for i in range(3)]
    for p in procs:
        p.start()
    push = ctx.socket(zmq.PUSH)
    push.connect(addrs[0])
    msg = [b"trigger", b"x" * 64]
    deadline = time.monotonic() + 30
    while not pull.poll(100):  # relays are starting; resend until the ring is up
        push.send_multipart(msg)
        assert time.monotonic() < deadline, "zmq relays did not start"
    while pull.poll(200):
        pull.recv_multipart()
    for _ in range(200):
        push.send_multipart(msg)
        pull.recv_multipart()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        push.send_multipart(msg)
        pull.recv_multipart()
        samples.append(time.perf_counter() - start)
    push.send_multipart([b"stop", b""])
    pull.poll(5000)
    for p in procs:
        p.join(10)
    ctx.destroy(0)
    return summary(samples)


# ---- Ray (in its own venv) ----
RAY_SCRIPT = r"""
import json, sys, time, ray
calls = int(sys.argv[1])
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
@ray.remote
def increment(x): return x + 1
@ray.remote
def square(x): return x * x
for i in range(200):
    assert ray.get(square.remote(increment.remote(i))) == (i + 1) ** 2
samples = []
for i in range(calls):
    t = time.perf_counter()
    v = ray.get(square.remote(increment.remote(i)))
    samples.append(time.perf_counter() - t)
    assert v == (i + 1) ** 2
print("RAY_RESULT " + json.dumps({"samples": samples, "version": ray.__version__}))
ray.shutdown()
"""


def ray_python(venv: str) -> str:
    python = os.path.join(venv, "bin", "python")
    ok = os.path.exists(python) and subprocess.run(
        [python, "-c", "import ray"], capture_output=True).returncode == 0
    if not ok:
        print(f"installing Ray into {venv} (first run only) ...", flush=True)
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        pip = [python, "-m", "pip", "install", "-q"]
        if subprocess.run(pip + ["ray==2.60.*"]).returncode != 0:
            subprocess.check_call(pip + ["ray"])  # the closest version pip can find
    return python


def bench_ray(calls: int, venv: str) -> Dict[str, float]:
    python = ray_python(venv)
    out = subprocess.run([python, "-c", RAY_SCRIPT, str(calls)], capture_output=True, text=True,
                         timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("RAY_RESULT "):
            data = json.loads(line[len("RAY_RESULT "):])
            return dict(summary(data["samples"]), version=data["version"])
    raise RuntimeError(f"Ray benchmark failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="Cloudburst workers on the node")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--ray-venv", default=os.path.join(
        os.path.expanduser("~"), ".cache", "cloudburst-bench", "ray-venv"))
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()

    results: Dict[str, Dict] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    results["zmq_4hop"] = bench_zmq(args.calls)
    print(f"bare pyzmq 4-hop round trip : p50 {results['zmq_4hop']['p50_us']:8.1f} us   "
          f"p99 {results['zmq_4hop']['p99_us']:8.1f} us", flush=True)
    results["cloudburst"] = bench_cloudburst(args.calls, args.workers)
    print(f"Cloudburst increment->square: p50 {results['cloudburst']['p50_us']:8.1f} us   "
          f"p99 {results['cloudburst']['p99_us']:8.1f} us   (default: chain on one worker)",
          flush=True)
    results["cloudburst_spread"] = bench_cloudburst(args.calls, args.workers, colocate=False)
    print(f"Cloudburst, 2 worker procs  : p50 {results['cloudburst_spread']['p50_us']:8.1f} us   "
          f"p99 {results['cloudburst_spread']['p99_us']:8.1f} us   (worker -> worker hop)",
          flush=True)
    if not args.no_ray:
        results["ray"] = bench_ray(args.calls, args.ray_venv)
        print(f"Ray {results['ray']['version']} same chain      : p50 {results['ray']['p50_us']:8.1f} us   "
              f"p99 {results['ray']['p99_us']:8.1f} us", flush=True)
        results["ray_over_cloudburst_p50"] = round(results["ray"]["p50_us"] / results["cloudburst"]["p50_us"], 2)
        results["ray_over_cloudburst_spread_p50"] = round(
            results["ray"]["p50_us"] / results["cloudburst_spread"]["p50_us"], 2)
        print(f"Ray p50 / Cloudburst p50     : {results['ray_over_cloudburst_p50']}x "
              f"(spread: {results['ray_over_cloudburst_spread_p50']}x)")
    results["cloudburst_over_zmq_p50"] = round(results["cloudburst"]["p50_us"] / results["zmq_4hop"]["p50_us"], 2)
    results["cloudburst_spread_over_zmq_p50"] = round(
        results["cloudburst_spread"]["p50_us"] / results["zmq_4hop"]["p50_us"], 2)
    print(f"Cloudburst p50 / bare 4-hop  : {results['cloudburst_over_zmq_p50']}x "
          f"(spread: {results['cloudburst_spread_over_zmq_p50']}x)")
    print(json.dumps(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
