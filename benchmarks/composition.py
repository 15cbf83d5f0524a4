"""Function composition latency: Cloudburst vs Ray vs a bare ZeroMQ 4-hop round trip.

    python benchmarks/composition.py [--calls 1000] [--security on,off] [--no-ray]
                                     [--ray-venv DIR]

Security is compared like for like (`--security`, comma-separated modes, default `on,off`):
- `on`: Cloudburst with authentication, its default (CURVE on every socket, every peer
  authenticated by key), against Ray with TLS on all its gRPC channels (`RAY_USE_TLS=1`,
  mutual: every Ray process presents a certificate of a throwaway CA made for the run with
  `openssl` and deleted after it);
- `off`: both in plaintext (`cloudburst.LocalCluster(auth=False)`, Ray's default);
- `mixed`: Cloudburst CURVE against Ray plaintext, the only comparison made before (unlike
  security; kept to compare with older figures).
Every Ray run checks what it ran with: after its timed calls it opens a TLS handshake to its
GCS, its raylet and every port of the workers that ran a task, and the run fails
(`bench_security.SecurityMismatch`) unless all speak TLS when the mode asks for it and none
does otherwise; every Cloudburst run checks its cluster's `auth` the same way.

In one run on this machine, for each mode:
1. Cloudburst: the 2-function DAG `increment -> square` on a LocalCluster (1 executor node,
   2 workers), `--calls` serial warm calls; p50/p99. Three times: with the default policy
   and `Client(direct=False)` (`chain`), which puts a chain's functions on one worker
   (client -> scheduler -> worker -> client; the result passes between the functions
   without a socket); with `colocate_chains=False` (`spread`), so the two functions run in
   different worker processes and the result crosses client -> scheduler -> worker ->
   worker -> client (4 hops, like the reference below); and with `Client(direct=True)`
   (`direct`, the client's default): the client holds a worker lease (granted by the
   scheduler) and sends each call straight to the leased worker (client -> worker ->
   client, 2 hops; the scheduler hears of the calls afterwards, batched).
2. Ray: the same chain (`square.remote(increment.remote(x))`, `ray.get`) on a local Ray
   (`ray.init(num_cpus=2)`), installed by this script into its own venv (`--ray-venv`,
   default ~/.cache/cloudburst-bench/ray-venv; `pip install ray==2.60.*`, or the closest
   version pip finds); p50/p99 and the ratios Ray/Cloudburst.
3. Reference (once, not per mode): a bare pyzmq 4-hop round trip (client -> 3 relay
   processes -> client, PUSH/PULL over loopback, plaintext), the floor for any Python design
   with this many hops; ratios Cloudburst/bare.
Prints one block per mode and a JSON summary (also written with `--json PATH`).

    python benchmarks/composition.py --rounds 3 [--before DIR] [--calls 1000] [--security on,off]

Rounds on a shared machine: each round runs, for each mode in turn, the steps above for
this checkout (this script without Ray, in a process of its own), then with `--before DIR`
the same for another checkout (e.g. the code before a change, with its built kernel:
measured by this checkout's harness, which imports that checkout's code), then Ray; so the
checkouts, the modes and Ray alternate and see the same drift in the machine's load. Prints
each round's p50s and ratios with the load average, then, per mode, the medians over the
rounds of the p50s and of each round's Ray / Cloudburst ratio, and a JSON summary (under
`modes`).

    python benchmarks/composition.py --direct-ab [--calls 600] [--spread]

The direct leased path against the scheduler's, on one LocalCluster (1 executor node, 2
workers; `--spread`: `colocate_chains=False`): two clients, one with `direct=True`, call the
`increment -> square` DAG in alternating blocks of 50 calls, so drift in the machine's load
hits both alike; p50 of each and their ratio.

    python benchmarks/composition.py --session-cost [--calls 300] [--runs 3]

The cost of read-your-writes and monotonic reads (the client's session, on by default), on
and off in the same run on one LocalCluster (1 executor node, 2 workers), calls interleaved
in blocks so drift hits both alike; median over `--runs` runs of each run's p50/p99, and
of each run's on/off ratio of p50s (the robust figure on a shared machine):
- `dag`: the `increment -> square` DAG by a client whose session holds 1 key;
- `dag_full_session`: the same by a client whose session is full (1,024 keys: every call
  carries 1,024 floors to the scheduler and on to each function);
- `read_after_put`: `put(k, i)` then a call whose function does `lib.get(k)` (call latency
  only): with the session on, the node cache re-reads `k` from the KVS because its copy is
  older than the put; with it off, the call reads the older copy (`stale` counts those).
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
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import bench_security  # noqa: E402  (benchmarks/, stdlib only)


def summary(samples: List[float]) -> Dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1e6
    return {"p50_us": round(pick(0.50), 1), "p99_us": round(pick(0.99), 1),
            "mean_us": round(statistics.mean(s) * 1e6, 1), "n": len(s)}


# ---- Cloudburst ----
def bench_cloudburst(calls: int, workers: int, transport: str = "tcp",
                     colocate: bool = True, direct: bool = False, auth: bool = True,
                     **options) -> Dict[str, float]:
    """p50/p99 of a two-function DAG call; `options` go to `cloudburst.LocalCluster`;
    `direct`: the client sends its calls on the direct leased path; `auth`: CURVE on every
    socket (the default) or the whole cluster in plaintext."""
    import cloudburst
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=workers,
                                 transport=transport, colocate_chains=colocate,
                                 auth=auth, **options) as cluster:
        if cluster.auth != auth:
            raise bench_security.SecurityMismatch(
                f"asked for auth={auth}, the cluster runs auth={cluster.auth}")
        client = cluster.client(direct=direct)
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


def bench_direct_ab(calls: int, spread: bool = False, block: int = 50) -> Dict[str, Dict]:
    """See the module docstring (`--direct-ab`)."""
    import cloudburst
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2,
                                 colocate_chains=not spread) as cluster:
        clients = {"scheduler": cluster.client(direct=False), "direct": cluster.client(direct=True)}
        c = clients["scheduler"]
        c.register(lambda lib, x: x + 1, "increment")
        c.register(lambda lib, x: x * x, "square")
        c.register_dag("composition", ["increment", "square"], [("increment", "square")])
        for client in clients.values():
            for i in range(100):
                client.call_dag("composition", {"increment": [i]}).get(timeout=10)
        samples: Dict[str, List[float]] = {name: [] for name in clients}
        while len(samples["direct"]) < calls:
            for name, client in clients.items():
                for i in range(block):
                    start = time.perf_counter()
                    client.call_dag("composition", {"increment": [i]}).get(timeout=10)
                    samples[name].append(time.perf_counter() - start)
        out = {name: summary(s) for name, s in samples.items()}
        out["direct_over_scheduler_p50"] = round(
            out["direct"]["p50_us"] / out["scheduler"]["p50_us"], 2)
        out["leases"] = clients["direct"].worker_leases
        out["load"] = round(os.getloadavg()[0], 2)
    return out


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
import json, os, sys, time, ray
calls = int(sys.argv[1])
sys.path.insert(0, sys.argv[2])          # benchmarks/, for bench_security
import bench_security
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
probe = bench_security.probe_this_ray(ray)
print("RAY_RESULT " + json.dumps({"samples": samples, "version": ray.__version__,
                                  "tls_probe": probe}))
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


def ray_env(tls: bool, directory: str) -> Dict[str, str]:
    """The environment of a Ray run: with `tls`, a fresh CA and certificate in `directory`
    and Ray's TLS variables; without, the TLS variables removed (Ray's default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_TLS_")
           and k != "RAY_USE_TLS"}
    if tls:
        files = bench_security.TlsFiles.create(directory, bench_security.host_addresses())
        env.update(bench_security.ray_tls_env(files))
    return env


def bench_ray(calls: int, venv: str, attempts: int = 3, tls: bool = False) -> Dict[str, float]:
    """Ray's p50/p99, with TLS on its gRPC channels if `tls` (a throwaway CA, removed after
    the run); a Ray whose node timed out starting (a loaded machine) is started again, up to
    `attempts` times. RuntimeError if Ray's servers do not speak TLS as asked (each run
    probes them with a handshake)."""
    import tempfile
    python = ray_python(venv)
    for attempt in range(attempts):
        with tempfile.TemporaryDirectory(prefix="ray-tls-") as certs:
            out = subprocess.run([python, "-c", RAY_SCRIPT, str(calls), HERE],
                                 capture_output=True, text=True, timeout=900,
                                 env=ray_env(tls, certs))
        for line in out.stdout.splitlines():
            if line.startswith("RAY_RESULT "):
                data = json.loads(line[len("RAY_RESULT "):])
                bench_security.check_probe(data["tls_probe"], tls)
                return dict(summary(data["samples"]), version=data["version"], tls=tls,
                            tls_probe=data["tls_probe"])
        print(f"Ray failed (attempt {attempt + 1} of {attempts}): "
              f"{out.stderr.strip().splitlines()[-1:] or out.stdout[-200:]}", flush=True)
    raise RuntimeError(f"Ray benchmark failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


# ---- the cost of the session (read-your-writes) ----
def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def bench_session(calls: int, runs: int, block: int = 25) -> Dict[str, Dict]:
    """Session on vs off, interleaved, in one cluster; see the module docstring."""
    import cloudburst
    out: Dict[str, Dict] = {}
    per_run: Dict[str, List[Dict[str, float]]] = {}
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as cluster:
        on, off = cluster.client(), cluster.client(session=False)
        full = cluster.client()
        on.register(lambda lib, x: x + 1, "increment")
        on.register(lambda lib, x: x * x, "square")
        on.register(lambda lib, key: lib.get(key), "read")
        on.register_dag("composition", ["increment", "square"], [("increment", "square")])
        on.put("bench-one", 0)
        for i in range(1024):
            full.put(f"bench-floor-{i}", i)
        assert len(full.session) == 1024
        for c in (on, off, full):
            for i in range(100):
                assert c.call_dag("composition", {"increment": [i]}).get(timeout=10) == (i + 1) ** 2
        key = "bench-cfg"
        on.put(key, 0)
        for _ in range(50):
            on.call("read", key).get(timeout=10)
        version = 0
        for run in range(runs):
            samples: Dict[str, List[float]] = {n: [] for n in (
                "dag_on", "dag_off", "dag_full_session", "read_after_put_on",
                "read_after_put_off")}
            stale = {"on": 0, "off": 0}
            for start in range(0, calls, block):
                n = min(block, calls - start)
                for i in range(n):
                    samples["dag_on"].append(_timed(lambda: on.call_dag(
                        "composition", {"increment": [i]}).get(timeout=10)))
                for i in range(n):
                    samples["dag_off"].append(_timed(lambda: off.call_dag(
                        "composition", {"increment": [i]}).get(timeout=10)))
                for i in range(n):
                    samples["dag_full_session"].append(_timed(lambda: full.call_dag(
                        "composition", {"increment": [i]}).get(timeout=10)))
                for mode, client in (("on", on), ("off", off)):
                    for _ in range(n):
                        version += 1
                        client.put(key, version)
                        got: List[int] = []
                        samples[f"read_after_put_{mode}"].append(_timed(
                            lambda: got.append(client.call("read", key).get(timeout=10))))
                        stale[mode] += got[0] < version
            row = {name: summary(v) for name, v in samples.items()}
            row["stale_on"], row["stale_off"] = stale["on"], stale["off"]
            # within one run both sides saw the same load: their ratio is the robust figure
            for name, a, b in (("ratio_dag", "dag_on", "dag_off"),
                               ("ratio_dag_full_session", "dag_full_session", "dag_off"),
                               ("ratio_read_after_put", "read_after_put_on",
                                "read_after_put_off")):
                row[name] = round(row[a]["p50_us"] / row[b]["p50_us"], 3)
            for name, v in row.items():
                per_run.setdefault(name, []).append(v)
            print(f"  run {run + 1}: " + ", ".join(
                f"{n} p50 {row[n]['p50_us']:.0f} us" for n in samples) +
                f"; stale reads on {stale['on']}/{calls}, off {stale['off']}/{calls}",
                flush=True)
    for name, rows in per_run.items():
        if isinstance(rows[0], dict):
            out[name] = {"p50_us": round(statistics.median(r["p50_us"] for r in rows), 1),
                         "p99_us": round(statistics.median(r["p99_us"] for r in rows), 1),
                         "runs": len(rows), "calls": rows[0]["n"]}
        else:
            out[name] = {"median": statistics.median(rows), "runs": rows}
    return out


def _one_round(root: str, calls: int, workers: int, mode: str) -> Dict:
    """The plain run of this script (no Ray) in security `mode`, in a process of its own,
    importing Cloudburst from checkout `root` (this one or another, e.g. the code before a
    change: the harness is the same, only the code under test differs). Returns its
    figures for `mode` and the bare 4-hop reference."""
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, os.path.join(HERE, "composition.py"),
                        "--no-ray", "--calls", str(calls), "--workers", str(workers),
                        "--security", mode, "--import-root", root, "--json", out.name],
                       check=True, capture_output=True, timeout=900,
                       env=dict(os.environ, PYTHONPATH=root),
                       cwd=root)   # `python -m` services import from their working directory
        with open(out.name) as f:
            result = json.load(f)
    return dict(result["modes"][mode], zmq_4hop=result["zmq_4hop"], module=result["module"])


def _medians(per: Dict[str, List[Dict]], ray: List[Dict]) -> Dict:
    """Medians over the rounds of one security mode: each checkout's p50s, and of each
    round's Ray / Cloudburst ratio (a round without Ray is left out of the ratios)."""
    med = statistics.median
    out: Dict = {}
    paired = {name: [x for x in rows if not x.get("no_ray")] for name, rows in per.items()}
    for name, rows in per.items():
        o = out[name] = {shape: med(x[key]["p50_us"] for x in rows)
                         for shape, key in (("chain_p50_us", "cloudburst"),
                                            ("spread_p50_us", "cloudburst_spread"),
                                            ("direct_p50_us", "cloudburst_direct"),
                                            ("bare_4hop_p50_us", "zmq_4hop"))}
        o["runs"] = [{k: x[k]["p50_us"] for k in ("cloudburst", "cloudburst_spread",
                                                  "cloudburst_direct", "zmq_4hop")}
                     for x in rows]
        for shape, key in (("chain", "cloudburst"), ("spread", "cloudburst_spread"),
                           ("direct", "cloudburst_direct")):
            ratios = [y["p50_us"] / x[key]["p50_us"] for x, y in zip(paired[name], ray)]
            if ratios:
                o[f"ray_over_{shape}"] = round(med(ratios), 2)
                o[f"ray_over_{shape}_runs"] = [round(r, 2) for r in ratios]
    if ray:
        out["ray"] = {"p50_us": med(y["p50_us"] for y in ray), "version": ray[0]["version"],
                      "tls": ray[0]["tls"], "runs": [y["p50_us"] for y in ray],
                      "tls_probe": ray[-1]["tls_probe"]}
    return out


def rounds(args: argparse.Namespace, modes: List[str]) -> Dict:
    """See the module docstring (`--rounds`)."""
    roots = {"cloudburst": ROOT}
    if args.before:
        roots["before"] = os.path.abspath(args.before)
    per = {mode: {name: [] for name in roots} for mode in modes}
    ray: Dict[str, List[Dict]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        for mode in modes:
            load = round(os.getloadavg()[0], 2)
            line = [f"round {r + 1} security {mode} (load {load})"]
            for name, root in roots.items():
                res = _one_round(root, args.calls, args.workers, mode)
                res["load"] = load
                per[mode][name].append(res)
                line.append(f"{name}: direct {res['cloudburst_direct']['p50_us']:.0f} / chain "
                            f"{res['cloudburst']['p50_us']:.0f} / spread "
                            f"{res['cloudburst_spread']['p50_us']:.0f} us (bare 4-hop "
                            f"{res['zmq_4hop']['p50_us']:.0f})")
            if not args.no_ray:
                try:
                    y = bench_ray(args.calls, args.ray_venv, tls=bench_security.ray_tls(mode))
                except RuntimeError:      # Ray could not start on this loaded machine
                    for name in roots:    # this round's figures are not paired with Ray's
                        per[mode][name][-1]["no_ray"] = True
                    line.append("Ray did not start in this round")
                    print("; ".join(line), flush=True)
                    continue
                y["load"] = round(os.getloadavg()[0], 2)
                ray[mode].append(y)
                line.append(f"Ray{' TLS' if y['tls'] else ''} {y['p50_us']:.0f} us (load after "
                            f"{y['load']}); Ray/direct " + ", ".join(
                                f"{name} {y['p50_us'] / per[mode][name][-1]['cloudburst_direct']['p50_us']:.2f}x"
                                for name in roots) + "; Ray/chain " + ", ".join(
                                f"{name} {y['p50_us'] / per[mode][name][-1]['cloudburst']['p50_us']:.2f}x"
                                for name in roots))
            print("; ".join(line), flush=True)
    out: Dict = {"rounds": args.rounds, "calls": args.calls, "modes": {}}
    for mode in modes:
        o = out["modes"][mode] = dict(_medians(per[mode], ray[mode]),
                                      description=bench_security.MODES[mode],
                                      loads=[x["load"] for x in per[mode]["cloudburst"]])
        for name in roots:
            m = o[name]
            print(f"security {mode} ({o['description']}), {name}: median p50 direct "
                  f"{m['direct_p50_us']:.0f} us, chain {m['chain_p50_us']:.0f} us, spread "
                  f"{m['spread_p50_us']:.0f} us" + (
                      f"; median Ray/Cloudburst direct {m['ray_over_direct']}x, chain "
                      f"{m['ray_over_chain']}x, spread {m['ray_over_spread']}x"
                      if "ray_over_direct" in m else ""))
        if "ray" in o:
            print(f"security {mode}: Ray {o['ray']['version']} median p50 "
                  f"{o['ray']['p50_us']:.0f} us (TLS {'on' if o['ray']['tls'] else 'off'}, "
                  f"probed: {o['ray']['tls_probe']})")
    return out


def parse_args(argv: Optional[List[str]] = None) -> Tuple[argparse.Namespace, List[str]]:
    """This script's arguments and its security modes (`--security`, checked)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per measurement")
    parser.add_argument("--workers", type=int, default=2, help="Cloudburst workers on the node")
    bench_security.add_peer_arguments(parser)
    parser.add_argument("--json", help="also write the summary here")
    parser.add_argument("--session-cost", action="store_true",
                        help="only measure read-your-writes on vs off (module docstring)")
    parser.add_argument("--runs", type=int, default=3, help="runs of --session-cost")
    parser.add_argument("--rounds", type=int, default=0,
                        help="alternate this checkout, --before and Ray, in every security "
                             "mode, for this many rounds")
    parser.add_argument("--before", metavar="DIR",
                        help="with --rounds: another checkout (built), measured as `before` "
                             "by this script's harness")
    parser.add_argument("--import-root", metavar="DIR", help=argparse.SUPPRESS)  # --rounds' own
    parser.add_argument("--direct-ab", action="store_true",
                        help="only the direct path against the scheduler's, interleaved "
                             "(authentication on)")
    parser.add_argument("--spread", action="store_true",
                        help="with --direct-ab: the DAG's functions on two workers")
    return bench_security.parse_with_modes(parser, argv)


def main() -> None:
    args, modes = parse_args()
    if args.import_root:        # measure another checkout's code with this harness
        sys.path.insert(0, os.path.abspath(args.import_root))
    if args.direct_ab:
        result = bench_direct_ab(args.calls, args.spread)
        print(f"load {result['load']}: scheduler's path p50 "
              f"{result['scheduler']['p50_us']:.0f} us, direct p50 "
              f"{result['direct']['p50_us']:.0f} us, direct / scheduler's "
              f"{result['direct_over_scheduler_p50']}")
        print(json.dumps(result))
        return
    if args.rounds:
        result = rounds(args, modes)
        print(json.dumps(result))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=2)
        return
    if args.session_cost:
        result = bench_session(args.calls, args.runs)
        for name in ("dag", "read_after_put"):
            a, b = result[f"{name}_on"], result[f"{name}_off"]
            print(f"{name:15s}: session on p50 {a['p50_us']:8.1f} us p99 {a['p99_us']:8.1f} us"
                  f" | off p50 {b['p50_us']:8.1f} us p99 {b['p99_us']:8.1f} us"
                  f" | on/off p50 {a['p50_us'] / b['p50_us']:.2f}x")
        f = result["dag_full_session"]
        print(f"dag, 1,024-key session: p50 {f['p50_us']:8.1f} us p99 {f['p99_us']:8.1f} us")
        print("median of the runs' p50 ratios (on/off, same run): " + ", ".join(
            f"{n[6:]} {result[n]['median']:.2f}x" for n in (
                "ratio_dag", "ratio_dag_full_session", "ratio_read_after_put")))
        print(json.dumps(result))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=2)
        return

    import cloudburst
    root = os.path.abspath(args.import_root or ROOT)
    if not os.path.realpath(cloudburst.__file__).startswith(os.path.realpath(root)):
        raise RuntimeError(f"imported {cloudburst.__file__}, not the checkout at {root}")
    results: Dict = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                     "module": cloudburst.__file__, "load": round(os.getloadavg()[0], 2),
                     "modes": {}}
    results["zmq_4hop"] = bench_zmq(args.calls)
    print(f"bare pyzmq 4-hop round trip : p50 {results['zmq_4hop']['p50_us']:8.1f} us   "
          f"p99 {results['zmq_4hop']['p99_us']:8.1f} us", flush=True)
    for mode in modes:
        auth = bench_security.cloudburst_auth(mode)
        print(f"security {mode} ({bench_security.MODES[mode]}):", flush=True)
        res = results["modes"][mode] = {"description": bench_security.MODES[mode]}
        for key, label, options in (
                ("cloudburst", "chain on one worker", {}),
                ("cloudburst_spread", "2 worker procs", {"colocate": False}),
                ("cloudburst_direct", "direct (leased)", {"direct": True})):
            res[key] = bench_cloudburst(args.calls, args.workers, auth=auth, **options)
            print(f"  Cloudburst, {label:20s}: p50 {res[key]['p50_us']:8.1f} us   "
                  f"p99 {res[key]['p99_us']:8.1f} us   (CURVE {'on' if auth else 'off'})",
                  flush=True)
        if not args.no_ray:
            ray = res["ray"] = bench_ray(args.calls, args.ray_venv,
                                         tls=bench_security.ray_tls(mode))
            print(f"  Ray {ray['version']} same chain{' (TLS)' if ray['tls'] else ''}: p50 "
                  f"{ray['p50_us']:8.1f} us   p99 {ray['p99_us']:8.1f} us", flush=True)
            for key, name in (("cloudburst", "chain"), ("cloudburst_spread", "spread"),
                              ("cloudburst_direct", "direct")):
                res[f"ray_over_{name}_p50"] = round(ray["p50_us"] / res[key]["p50_us"], 2)
            print(f"  Ray p50 / Cloudburst p50: direct {res['ray_over_direct_p50']}x, chain "
                  f"{res['ray_over_chain_p50']}x, spread {res['ray_over_spread_p50']}x")
        for key, name in (("cloudburst", "chain"), ("cloudburst_spread", "spread"),
                          ("cloudburst_direct", "direct")):
            res[f"{name}_over_zmq_p50"] = round(res[key]["p50_us"] / results["zmq_4hop"]["p50_us"], 2)
        print(f"  Cloudburst p50 / bare 4-hop: direct {res['direct_over_zmq_p50']}x, chain "
              f"{res['chain_over_zmq_p50']}x, spread {res['spread_over_zmq_p50']}x")
    print(json.dumps(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
