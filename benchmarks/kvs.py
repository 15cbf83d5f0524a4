"""YCSB-like closed-loop benchmark: Anna against Redis 7, in the same run, on this machine.

Two views, each printed with the Anna/Redis ratio:

* server capacity: a native (C++) closed-loop load generator on each side, so the client is
  not the bottleneck. Both sides use the same generator code (anna_core/csrc/loadgen.cpp): the
  same clients, keys, Zipf skew, read/write mix and value size; only the protocol differs
  (ZMQ + protobuf to Anna's workers, RESP over TCP to Redis).
* what a Python user sees: `anna_core.Client` against `redis-py` with hiredis, one client,
  serial requests, same workload.

* the round-trip floor: the same native generators with one client, i.e. what any client of
  that transport pays per request, whatever its language.

Redis runs with persistence off (`--save "" --appendonly no`), as Anna's memory tier.
Anna's nodes serve clients over their workers' own TCP links (`--links on`, the default;
`NodeConfig.client_links`; with CURVE, secured links: a key handshake, then every frame
sealed), and its worker threads are not pinned to cores (`--pin
off`, the default), as Redis's thread is not. A client on the node's host (both views here)
reaches those links over a Unix-domain socket (`--unix-links on`, the default;
`NodeConfig.unix_links`); so in plaintext the Python view also measures redis-py over
Redis's own Unix-domain socket (`python_redis_unix`, `python_ratio_p50_unix`), like with
like; Redis's socket has no TLS, so with security on only TCP is compared. The native
generator's Redis side stays on TCP: for server capacity like with like, `--unix-links off`.

Security is compared like for like (`--security`): "on" is Anna with CURVE (its default: every
socket encrypted, every peer authenticated by key) against Redis with TLS on every connection
and client certificates required (mutual TLS, a throwaway CA made with `openssl`); "off" is
both in plaintext; "mixed" (not a fair comparison, kept to compare with older figures) is
Anna with CURVE against Redis in plaintext. Each round runs every mode, Redis then Anna, so machine noise hits both
alike; the load average is recorded with every run.

    python benchmarks/kvs.py                   # defaults: 50 clients, Zipf 1.0, 50% reads
    python benchmarks/kvs.py --clients 50 --zipf 1.5 --read-ratio 0.9 --threads 2
    python benchmarks/kvs.py --security on --runs 5
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import zmq

try:
    import anna_core
except ImportError:     # run from a checkout that is not installed: use the checkout's
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import anna_core
from anna_core import _core
from hydro_proto import anna_pb2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
import bench_security  # noqa: E402  (stdlib only: the throwaway CA for Redis's TLS)

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def log(message: str) -> None:
    print(f"[kvs] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throwaway redis-server on a free loopback port; with `tls`, TLS only (no plaintext
    port) and client certificates required."""

    def __init__(self, tls: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("redis-server not found: run scripts/install.sh")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="kvs-bench-redis-")
        self.tls = bench_security.TlsFiles.create(self.dir) if tls else None
        ports = ["--port", str(self.port)]
        if self.tls is not None:
            ports = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", self.tls.cert,
                     "--tls-key-file", self.tls.key, "--tls-ca-cert-file", self.tls.ca,
                     "--tls-auth-clients", "yes"]
        # plaintext: a Unix-domain socket too (only this user can reach it)
        self.unix_path = "" if tls else os.path.join(self.dir, "redis.sock")
        if self.unix_path:
            ports += ["--unixsocket", self.unix_path, "--unixsocketperm", "700"]
        self.proc = subprocess.Popen(
            [binary, *ports, "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                with self._connect() as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not become ready within 10 s")
            time.sleep(0.05)

    def _connect(self) -> socket.socket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=1)
        if self.tls is None:
            return raw
        import ssl
        context = ssl.create_default_context(cafile=self.tls.ca)
        context.load_cert_chain(self.tls.cert, self.tls.key)
        return context.wrap_socket(raw, server_hostname="127.0.0.1")

    def load_args(self) -> dict:
        """The TLS arguments of `_core.load_redis` for this server."""
        if self.tls is None:
            return {}
        return {"tls_ca": self.tls.ca, "tls_cert": self.tls.cert, "tls_key": self.tls.key}

    def python_client(self, unix: bool = False):
        """A redis-py client (hiredis parser when installed) for this server (`unix`: over
        its Unix-domain socket, plaintext servers only)."""
        import redis as redis_py
        if unix:
            return redis_py.Redis(unix_socket_path=self.unix_path)
        if self.tls is None:
            return redis_py.Redis(host="127.0.0.1", port=self.port)
        return redis_py.Redis(host="127.0.0.1", port=self.port, ssl=True,
                              ssl_ca_certs=self.tls.ca, ssl_certfile=self.tls.cert,
                              ssl_keyfile=self.tls.key)

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
    cpu0 = self_cpu_seconds()
    for i in chosen:
        key = f"k{i}"
        t0 = time.perf_counter()
        if rng.random() < read_ratio:
            get(key)
        else:
            put(key, value)
        latencies.append((time.perf_counter() - t0) * 1e6)
    elapsed = time.perf_counter() - start
    cpu = self_cpu_seconds() - cpu0
    latencies.sort()
    # the client process' CPU per request (all its threads: Python's and ZeroMQ's), which
    # depends far less on the machine's load than latency does
    return {"ops": ops, "throughput": ops / elapsed, "client_cpu_us_per_op": cpu * 1e6 / ops,
            "p50_us": latencies[len(latencies) // 2],
            "p99_us": latencies[int(len(latencies) * 0.99)]}


# Runs `python_view` with one checkout's anna_core.Client, in a process started in that
# checkout so that its packages, and its kernel build, are the ones imported. With --before,
# this checkout's client runs so too, so that both are measured alike (the benchmark's own
# process also holds the clusters' log readers, which would count in its CPU).
BEFORE_RUNNER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("kvs_bench", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
a = json.loads(sys.argv[2])
import anna_core
from runtime.auth import AuthConfig
auth = AuthConfig(*a["auth"]) if a["auth"] else None
kvs = anna_core.Client(a["routing"], auth=auth)
weights = [1.0 / (k + 1) ** a["zipf"] for k in range(a["keys"])]
r = bench.python_view(kvs.get, kvs.put, a["keys"], weights, a["read_ratio"],
                      b"x" * a["value_size"], a["ops"], a["seed"])
kvs.close()
print(json.dumps(dict(r, anna_core=anna_core.__file__)))
"""


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_view_of(root: str, cluster, args, seed: int) -> dict:
    """`python_view` with the anna_core.Client of the checkout at `root`, against `cluster`."""
    auth = cluster.client_auth
    spec = {"routing": cluster.routing_address,
            "auth": [auth.key_dir, auth.identity] if auth is not None else None,
            "zipf": args.zipf, "keys": args.keys, "read_ratio": args.read_ratio,
            "value_size": args.value_size, "ops": args.python_ops, "seed": seed}
    return run_in_checkout(root, [BEFORE_RUNNER, os.path.abspath(__file__), json.dumps(spec)])


def run_in_checkout(root: str, code_and_args: "list[str]") -> dict:
    """Run `python -c CODE ARGS...` with the checkout at `root` first on the path; its last
    stdout line is a JSON object naming the `anna_core` it imported, which must be root's."""
    out = subprocess.run([sys.executable, "-c", *code_and_args], cwd=root,
                         env=dict(os.environ, PYTHONPATH=root), capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"the client of {root} failed: {out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result.pop("anna_core").startswith(os.path.abspath(root)):
        raise RuntimeError(f"the client did not import anna_core from {root}")
    return result


def fmt(row: dict) -> str:
    text = (f"{row['throughput']:>10,.0f} ops/s   p50 {row['p50_us']:>8.1f} us   "
            f"p99 {row['p99_us']:>8.1f} us")
    if "server_cpu_us_per_op" in row:
        text += (f"   CPU/op server {row['server_cpu_us_per_op']:5.1f} us, "
                 f"generator {row['client_cpu_us_per_op']:5.1f} us")
    return text


MODES = {"on": "Anna CURVE vs Redis TLS (mutual)", "off": "both plaintext",
         "mixed": "Anna CURVE vs Redis plaintext (unlike security)"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu_seconds() -> float:
    """CPU time of this process: the load generator's thread and its ZeroMQ I/O threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def costed(server_pid: int, load, **kwargs) -> dict:
    """Runs `load(**kwargs)` and adds the CPU time the server and the generator spent per
    operation (whole run, prefill and warm-up included: a cost, not a rate) and the 1-minute
    load average: on a shared machine throughput follows the CPU share a side gets, while CPU
    per operation does not."""
    server0, client0 = cpu_seconds(server_pid), self_cpu_seconds()
    result = load(**kwargs)
    server1, client1 = cpu_seconds(server_pid), self_cpu_seconds()
    total_ops = result["ops"] * (1 + kwargs["warmup_s"] / kwargs["duration_s"]) + kwargs["keys"]
    result["server_cpu_us_per_op"] = (server1 - server0) * 1e6 / max(total_ops, 1)
    result["client_cpu_us_per_op"] = (client1 - client0) * 1e6 / max(total_ops, 1)
    result["load1"] = os.getloadavg()[0]
    return result


def median_of(runs: list) -> dict:
    keys = ("throughput", "p50_us", "p99_us", "server_cpu_us_per_op", "client_cpu_us_per_op")
    out = {k: statistics.median(r[k] for r in runs) for k in keys if k in runs[0]}
    out["errors"] = sum(r["errors"] for r in runs)
    out["runs"] = [{k: r[k] for k in (*keys, "load1") if k in r} for r in runs]
    return out


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
    p.add_argument("--security", default="on,off",
                   help="comma-separated modes: on (Anna CURVE vs Redis TLS), off (both "
                        "plaintext), mixed (Anna CURVE vs Redis plaintext); default on,off")
    p.add_argument("--links", choices=("on", "off"), default="on",
                   help="Anna nodes serve clients over their workers' own TCP links "
                        "(NodeConfig.client_links; secured with CURVE), which anna_core.Client "
                        "and the native generator then use; off: every request over ZeroMQ "
                        "(default on)")
    p.add_argument("--unix-links", choices=("on", "off"), default="on",
                   help="clients on the node's host reach its links over a Unix-domain socket "
                        "(NodeConfig.unix_links); off: over TCP (default on)")
    p.add_argument("--pin", choices=("on", "off"), default="off",
                   help="pin Anna's worker threads to cores (NodeConfig.pin_threads). Default "
                        "off, as Redis runs: on a machine shared with other work a pinned "
                        "thread waits for its own core while the other one is idle")
    p.add_argument("--python-ops", type=int, default=5000)
    p.add_argument("--floor-duration", type=float, default=2.0,
                   help="seconds of the one-client native round-trip floor per run (0: skip)")
    p.add_argument("--skip-python", action="store_true")
    p.add_argument("--before", metavar="DIR",
                   help="also measure the Python client of the checkout at DIR (built, with "
                        "its hydro_proto and kernel) against the same clusters, in the same "
                        "rounds; this checkout's client then runs in a process of its own "
                        "too, so both are measured alike")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "kvs.json"))
    args = p.parse_args(argv)

    workload = dict(clients=args.clients, duration_s=args.duration, warmup_s=args.warmup,
                    keys=args.keys, zipf=args.zipf, read_ratio=args.read_ratio,
                    value_size=args.value_size)
    # One client over the first 1,000 keys: its prefill is serial, and a latency floor does
    # not need the whole key space.
    floor_workload = dict(workload, clients=1, duration_s=args.floor_duration,
                          warmup_s=min(args.warmup, 0.5), keys=min(args.keys, 1000))
    modes = [m.strip() for m in args.security.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        p.error(f"--security: unknown mode(s) {unknown}; choose from {sorted(MODES)}")
    log(f"workload: {workload}, anna threads={args.threads}, runs={args.runs}, modes={modes}, "
        f"links={args.links}, pin={args.pin}")
    results: dict = {"workload": workload, "anna_threads": args.threads, "links": args.links,
                     "pin": args.pin,
                     "machine_cores": os.cpu_count(), "modes": {}}

    servers: dict = {}
    clusters: dict = {}
    try:
        for mode in modes:
            servers[mode] = RedisServer(tls=(mode == "on"))
            cluster = anna_core.LocalCluster(memory_threads=args.threads, nodes=1,
                                             auth=(mode != "off"), warn_auth_off=False,
                                             client_links=(args.links == "on"),
                                             unix_links=(args.unix_links == "on"),
                                             pin_threads=(args.pin == "on"))
            cluster.start()
            clusters[mode] = cluster
            log(f"{mode}: redis-server {servers[mode].version()} on port {servers[mode].port}"
                f"{' (TLS)' if mode == 'on' else ''}; anna at {cluster.routing_address}")
        owners = {m: key_addresses(c.routing_address, args.keys, auth=c.client_auth)
                  for m, c in clusters.items()}
        credentials = {m: (c.client_auth.load() if c.client_auth else None)
                       for m, c in clusters.items()}
        runs: dict = {m: {"anna": [], "redis": [], "anna_floor": [], "redis_floor": []}
                      for m in modes}

        def measured(result: dict) -> dict:
            result["load1"] = os.getloadavg()[0]
            return result

        for run in range(args.runs):
            for mode in modes:
                # Redis then Anna, every mode in each round: noise hits both sides alike.
                redis_pid, anna_pid = servers[mode].proc.pid, clusters[mode].node_pid("memory-0")
                redis_load = dict(host="127.0.0.1", port=servers[mode].port, seed=run + 1,
                                  **servers[mode].load_args())
                anna_load = dict(seed=run + 1, auth=credentials[mode],
                                 links=(args.links == "on"))
                r = costed(redis_pid, _core.load_redis, **redis_load, **workload)
                runs[mode]["redis"].append(r)
                log(f"run {run + 1}/{args.runs} {mode:3s} redis: {fmt(r)}  load {r['load1']:.2f}")
                r = costed(anna_pid, _core.load_anna, key_addresses=owners[mode], **anna_load,
                           **workload)
                runs[mode]["anna"].append(r)
                log(f"run {run + 1}/{args.runs} {mode:3s} anna : {fmt(r)}  load {r['load1']:.2f}")
                if args.floor_duration > 0:
                    r = costed(redis_pid, _core.load_redis, **redis_load, **floor_workload)
                    runs[mode]["redis_floor"].append(r)
                    r = costed(anna_pid, _core.load_anna,
                               key_addresses=owners[mode][:floor_workload["keys"]], **anna_load,
                               **floor_workload)
                    runs[mode]["anna_floor"].append(r)
                    log(f"run {run + 1}/{args.runs} {mode:3s} 1-client floor p50: anna "
                        f"{runs[mode]['anna_floor'][-1]['p50_us']:.1f} us, redis "
                        f"{runs[mode]['redis_floor'][-1]['p50_us']:.1f} us")

        for mode in modes:
            out: dict = {"description": MODES[mode]}
            for side, side_runs in runs[mode].items():
                if side_runs:
                    out[side] = median_of(side_runs)
            out["capacity_ratio"] = out["anna"]["throughput"] / out["redis"]["throughput"]
            out["capacity_ratios"] = [a["throughput"] / r["throughput"]
                                      for a, r in zip(runs[mode]["anna"], runs[mode]["redis"])]
            # Operations per server CPU-second, Anna's over Redis's (per-core efficiency).
            out["cpu_efficiency_ratio"] = (out["redis"]["server_cpu_us_per_op"]
                                           / out["anna"]["server_cpu_us_per_op"])
            if not args.skip_python:
                weights = [1.0 / (k + 1) ** args.zipf for k in range(args.keys)]
                value = b"x" * args.value_size
                kvs = clusters[mode].client()
                rc = servers[mode].python_client()
                ru = servers[mode].python_client(unix=True) if servers[mode].unix_path else None
                pa, pr, pb, pu = [], [], [], []
                for run in range(args.runs):
                    pr.append(measured(python_view(rc.get, rc.set, args.keys, weights,
                                                   args.read_ratio, value, args.python_ops, 7 + run)))
                    if ru is not None:
                        pu.append(measured(python_view(ru.get, ru.set, args.keys, weights,
                                                       args.read_ratio, value, args.python_ops,
                                                       7 + run)))
                    if args.before:
                        pa.append(measured(python_view_of(REPO_ROOT, clusters[mode], args,
                                                          7 + run)))
                        pb.append(measured(python_view_of(args.before, clusters[mode], args,
                                                          7 + run)))
                    else:
                        pa.append(measured(python_view(kvs.get, kvs.put, args.keys, weights,
                                                       args.read_ratio, value, args.python_ops,
                                                       7 + run)))
                    log(f"run {run + 1}/{args.runs} {mode:3s} python p50: anna_core.Client "
                        f"{pa[-1]['p50_us']:.1f} us, redis-py {pr[-1]['p50_us']:.1f} us"
                        + (f", before {pb[-1]['p50_us']:.1f} us" if pb else "")
                        + (f", redis-py unix {pu[-1]['p50_us']:.1f} us" if pu else "")
                        + f"; client CPU/op anna {pa[-1]['client_cpu_us_per_op']:.1f} us, "
                          f"redis-py {pr[-1]['client_cpu_us_per_op']:.1f} us"
                        + (f", before {pb[-1]['client_cpu_us_per_op']:.1f} us" if pb else "")
                        + f"  load {pa[-1]['load1']:.2f}")
                kvs.close()
                rc.close()
                if ru is not None:
                    ru.close()
                sides = [("python_anna", pa), ("python_redis", pr)]
                if pb:
                    sides.append(("python_anna_before", pb))
                if pu:
                    sides.append(("python_redis_unix", pu))
                for name, side_runs in sides:
                    for r in side_runs:
                        r["errors"] = 0
                    out[name] = median_of(side_runs)
                out["python_ratio_p50"] = out["python_redis"]["p50_us"] / out["python_anna"]["p50_us"]
                if pb:
                    out["python_before_ratio_p50"] = (out["python_redis"]["p50_us"]
                                                      / out["python_anna_before"]["p50_us"])
                if pu:
                    out["python_ratio_p50_unix"] = (out["python_redis_unix"]["p50_us"]
                                                    / out["python_anna"]["p50_us"])
                    if pb:
                        out["python_before_ratio_p50_unix"] = (
                            out["python_redis_unix"]["p50_us"]
                            / out["python_anna_before"]["p50_us"])
            results["modes"][mode] = out
    finally:
        for cluster in clusters.values():
            cluster.stop()
        for server in servers.values():
            server.stop()

    print()
    print(f"{args.clients} clients, Zipf {args.zipf}, {int(args.read_ratio * 100)}% reads, "
          f"{args.value_size} B values, Anna {args.threads} worker threads, median of {args.runs}:")
    for mode, out in results["modes"].items():
        print(f"security {mode} ({out['description']}):")
        print(f"  server capacity  anna : {fmt(out['anna'])}")
        print(f"                   redis: {fmt(out['redis'])}")
        print(f"  anna / redis throughput: {out['capacity_ratio']:.2f}x "
              f"(per run: {', '.join(f'{r:.2f}' for r in out['capacity_ratios'])})")
        print(f"  anna / redis operations per server CPU-second: "
              f"{out['cpu_efficiency_ratio']:.2f}x")
        if "anna_floor" in out:
            print(f"  1-client native round trip p50: anna {out['anna_floor']['p50_us']:.1f} us, "
                  f"redis {out['redis_floor']['p50_us']:.1f} us")
        if "python_anna" in out:
            print(f"  python (1 client, serial) anna_core.Client: {fmt(out['python_anna'])}")
            print(f"                            redis-py+hiredis: {fmt(out['python_redis'])}")
            print(f"  redis p50 / anna p50: {out['python_ratio_p50']:.2f}x")
            print(f"  client process CPU per request: anna "
                  f"{out['python_anna']['client_cpu_us_per_op']:.1f} us, redis-py "
                  f"{out['python_redis']['client_cpu_us_per_op']:.1f} us"
                  + (f", before {out['python_anna_before']['client_cpu_us_per_op']:.1f} us"
                     if "python_anna_before" in out else ""))
            if "python_anna_before" in out:
                print(f"  before (--before)         anna_core.Client: "
                      f"{fmt(out['python_anna_before'])}")
                print(f"  redis p50 / before p50: {out['python_before_ratio_p50']:.2f}x")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
