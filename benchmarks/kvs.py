"""YCSB-like closed-loop benchmark: Anna against Redis 7, in the same run, on this machine.

Two views, each printed with the Anna/Redis ratio:

* server capacity: a native (C++) closed-loop load generator on each side, so the client is
  not the bottleneck. Both sides use the same generator code (anna_core/csrc/loadgen.cpp): the
  same clients, keys, Zipf skew, read/write mix and value size; only the protocol differs
  (ZMQ + protobuf to Anna's workers, RESP over TCP to Redis).
* what a Python user sees: `anna_core.Client` against `redis-py` with hiredis, one client,
  serial requests, same workload.

Redis runs with persistence off (`--save "" --appendonly no`), as Anna's memory tier.

    python benchmarks/kvs.py                   # defaults: 50 clients, Zipf 1.0, 50% reads
    python benchmarks/kvs.py --clients 50 --zipf 1.5 --read-ratio 0.9 --threads 2
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import zmq

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def log(message: str) -> None:
    print(f"[kvs] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throwaway redis-server on a free loopback port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("redis-server not found: run scripts/install.sh")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="kvs-bench-redis-")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not become ready within 10 s")
            time.sleep(0.05)

    def version(self) -> str:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
        return out.stdout.split()[2].removeprefix("v=") if out.returncode == 0 else "?"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def key_addresses(routing_address: str, keys: int, timeout_s: float = 10.0,
                  auth=None) -> list[str]:
    """Ask routing (in batches) which worker owns each key 'k<i>' (with `auth`, an
    `AuthConfig`, over CURVE as that identity)."""
    from runtime.auth import Security, credentials_of
    from runtime.sockets import PushCache, bind_pull
    ctx = zmq.Context()
    security = Security.start(ctx, auth)
    pull, response_address = bind_pull(ctx, auth=credentials_of(security))
    push = PushCache(ctx, linger_ms=0, auth=credentials_of(security))
    owners: list[str] = []
    try:
        for start in range(0, keys, 2000):
            request = anna_pb2.KeyAddressRequest(
                keys=[f"k{i}" for i in range(start, min(keys, start + 2000))],
                response_address=response_address, request_id=uuid.uuid4().hex)
            push.send_kind(routing_address, "address", request)
            if not pull.poll(int(timeout_s * 1000)):
                raise TimeoutError("routing did not answer an address lookup")
            response = anna_pb2.KeyAddressResponse.FromString(pull.recv())
            by_key = {a.key: a.addresses for a in response.addresses}
            for i in range(start, min(keys, start + 2000)):
                addresses = by_key.get(f"k{i}")
                if not addresses:
                    raise RuntimeError(f"routing returned no address for k{i}")
                owners.append(addresses[0])
    finally:
        push.close()
        pull.close(0)
        if security is not None:
            security.stop()
        ctx.term()
    return owners


def python_view(get, put, keys: int, zipf_weights, read_ratio: float, value: bytes,
                ops: int, seed: int) -> dict:
    rng = random.Random(seed)
    population = range(keys)
    chosen = rng.choices(population, weights=zipf_weights, k=ops)
    # Steady state: every key touched once first, so Anna's client has the key's address
    # cached (as a long-running client would) and neither side measures a cold miss.
    for i in set(chosen):
        put(f"k{i}", value)
    latencies = []
    start = time.perf_counter()
    for i in chosen:
        key = f"k{i}"
        t0 = time.perf_counter()
        if rng.random() < read_ratio:
            get(key)
        else:
            put(key, value)
        latencies.append((time.perf_counter() - t0) * 1e6)
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {"ops": ops, "throughput": ops / elapsed,
            "p50_us": latencies[len(latencies) // 2],
            "p99_us": latencies[int(len(latencies) * 0.99)]}


def fmt(row: dict) -> str:
    return (f"{row['throughput']:>10,.0f} ops/s   p50 {row['p50_us']:>8.1f} us   "
            f"p99 {row['p99_us']:>8.1f} us")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=3, help="runs per side; medians are reported")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--read-ratio", type=float, default=0.5)
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=2, help="Anna memory worker threads")
    p.add_argument("--python-ops", type=int, default=5000)
    p.add_argument("--skip-python", action="store_true")
    args = p.parse_args(argv)

    workload = dict(clients=args.clients, duration_s=args.duration, warmup_s=args.warmup,
                    keys=args.keys, zipf=args.zipf, read_ratio=args.read_ratio,
                    value_size=args.value_size)
    log(f"workload: {workload}, anna threads={args.threads}, runs={args.runs}")
    results: dict = {"workload": workload, "anna_threads": args.threads, "machine_cores": os.cpu_count()}

    redis = RedisServer()
    log(f"redis-server {redis.version()} on port {redis.port}")
    try:
        with anna_core.LocalCluster(memory_threads=args.threads, nodes=1) as cluster:
            owners = key_addresses(cluster.routing_address, args.keys, auth=cluster.client_auth)
            log(f"anna cluster up at {cluster.routing_address}; {len(set(owners))} workers own the keys")
            # Authenticated, as every cluster is by default (benchmarks/auth_cost.py compares).
            client_credentials = cluster.client_auth.load() if cluster.client_auth else None
            anna_runs, redis_runs = [], []
            for run in range(args.runs):
                # Alternate sides so machine noise hits both alike.
                redis_runs.append(_core.load_redis("127.0.0.1", redis.port, seed=run + 1, **workload))
                log(f"run {run + 1}/{args.runs} redis: {fmt(redis_runs[-1])}")
                anna_runs.append(_core.load_anna(owners, seed=run + 1, auth=client_credentials,
                                                 **workload))
                log(f"run {run + 1}/{args.runs} anna : {fmt(anna_runs[-1])}")
            for name, runs in (("anna", anna_runs), ("redis", redis_runs)):
                results[f"capacity_{name}"] = {
                    k: statistics.median(r[k] for r in runs) for k in ("throughput", "p50_us", "p99_us")}
                results[f"capacity_{name}"]["errors"] = sum(r["errors"] for r in runs)
            ratio = results["capacity_anna"]["throughput"] / results["capacity_redis"]["throughput"]
            results["capacity_ratio"] = ratio

            if not args.skip_python:
                import redis as redis_py
                weights = [1.0 / (k + 1) ** args.zipf for k in range(args.keys)]
                value = b"x" * args.value_size
                kvs = cluster.client()
                rc = redis_py.Redis(host="127.0.0.1", port=redis.port)
                results["python_anna"] = python_view(kvs.get, kvs.put, args.keys, weights,
                                                     args.read_ratio, value, args.python_ops, 7)
                log(f"python anna_core.Client : {fmt(results['python_anna'])}")
                results["python_redis"] = python_view(rc.get, rc.set, args.keys, weights,
                                                      args.read_ratio, value, args.python_ops, 7)
                log(f"python redis-py+hiredis: {fmt(results['python_redis'])}")
                results["python_ratio_p50"] = results["python_redis"]["p50_us"] / results["python_anna"]["p50_us"]
                kvs.close()
    finally:
        redis.stop()

    print()
    print(f"server capacity, {args.clients} clients, Zipf {args.zipf}, {int(args.read_ratio * 100)}% reads, "
          f"{args.value_size} B values (median of {args.runs}):")
    print(f"  anna  ({args.threads} threads): {fmt(results['capacity_anna'])}")
    print(f"  redis 7          : {fmt(results['capacity_redis'])}")
    print(f"  anna / redis throughput: {results['capacity_ratio']:.2f}x")
    if "python_anna" in results:
        print("what a Python user sees (1 client, serial):")
        print(f"  anna_core.Client : {fmt(results['python_anna'])}")
        print(f"  redis-py+hiredis : {fmt(results['python_redis'])}")
        print(f"  redis p50 / anna p50: {results['python_ratio_p50']:.2f}x")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    out = os.path.join(RESULTS_DIR, "kvs.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
