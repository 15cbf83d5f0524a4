"""Throughput of one client: many no-op calls in flight, then gathered; Cloudburst vs Ray.

    python benchmarks/throughput.py [--calls 2000] [--rounds 3] [--workers 2]
                                    [--security on,off] [--no-ray] [--ray-venv DIR]
                                    [--json PATH] [--cloudburst-root DIR]

Security is compared like for like (`--security`, comma-separated modes, default `on,off`),
as in `benchmarks/composition.py` (`benchmarks/bench_security.py`): `on` is Cloudburst with
authentication (CURVE on every socket, its default) against Ray with TLS on all its gRPC
channels (`RAY_USE_TLS=1`, mutual, a throwaway CA made with `openssl` for each Ray run);
`off` is both in plaintext (`LocalCluster(auth=False)`, Ray's default); `mixed` is
Cloudburst CURVE against Ray plaintext (unlike security, the comparison made before). Each
Ray run probes its GCS, raylet and task workers with a TLS handshake and fails unless they
speak TLS exactly when the mode asks for it; each Cloudburst run checks its cluster's
`auth`.

Each round runs, for each mode in turn, every system once, alternating the systems and the
modes so that drift in the machine's load hits all alike:
1. Cloudburst (`cloudburst`): a LocalCluster (Anna, one scheduler, one executor node with
   `--workers` workers, the defaults otherwise: calls following capacity; authentication
   as the mode says); one client with `Client(direct=False)` sends `--calls` calls of a
   registered no-op function (`client.call`, each a `Future`), then gathers them all
   (`cloudburst.gather`); calls per second from the first send to the last result. A
   warm-up of 200 calls (serial, then in flight) comes first. Then the same with
   `Client(direct=True)` (`direct`, the client's default): calls within the client's worker
   lease go straight to the leased worker, the rest through the scheduler.
2. Ray: the same on a local Ray (`ray.init(num_cpus=--workers)`): `f.remote()` `--calls`
   times, then `ray.get` of the list; the same warm-up. Ray is installed into its own venv
   as `benchmarks/composition.py` does (`--ray-venv`, default
   ~/.cache/cloudburst-bench/ray-venv, `ray==2.60.*` or the closest version pip finds).
Prints each round's figures with the load average and each system's ratio to Ray in that
round; then per mode the median of the rounds for each system, the ratio of the medians
(Cloudburst / Ray) and the median of the rounds' ratios; and a JSON summary (`--json`,
under `modes`).

`--cloudburst-root DIR` runs another checkout's Cloudburst (with its built kernel) in the
same rounds, e.g. the code before a change, through this script's embedded driver (which
passes `auth`, so an older checkout runs in every mode): its figures are reported as
`before` and `before_direct`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import bench_security  # noqa: E402  (benchmarks/, stdlib only)
from composition import ray_env, ray_python  # noqa: E402  (composition.py installs Ray)

CLOUDBURST_SCRIPT = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import cloudburst
calls, workers, direct = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "direct"
auth = sys.argv[5] == "auth"
with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=workers, auth=auth) as cluster:
    assert cluster.auth == auth, (cluster.auth, auth)
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
                                      "module": cloudburst.__file__, "auth": cluster.auth}))
"""

RAY_SCRIPT = r"""
import json, os, sys, time, ray
calls, workers = int(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, sys.argv[3])          # benchmarks/, for bench_security
import bench_security
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
probe = bench_security.probe_this_ray(ray)
print("RAY_RESULT " + json.dumps({"seconds": took, "send_seconds": sent - start,
                                   "version": ray.__version__, "tls_probe": probe}))
ray.shutdown()
"""


def _result(out: subprocess.CompletedProcess, tag: str) -> Dict:
    for line in out.stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    raise RuntimeError(f"{tag} run failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def run_cloudburst(root: str, calls: int, workers: int, direct: bool = False,
                   auth: bool = True) -> Dict:
    """One fresh cluster of the checkout at `root`, in a process of its own; `direct`: the
    client uses the direct leased path; `auth`: CURVE on every socket (the default), or
    the whole cluster in plaintext."""
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", CLOUDBURST_SCRIPT, root, str(calls),
                          str(workers), "direct" if direct else "scheduler",
                          "auth" if auth else "plain"],
                         capture_output=True, text=True, timeout=600, env=env,
                         cwd=root)   # `python -m` services import from their working directory
    data = _result(out, "CB_RESULT")
    if data["auth"] != auth:
        raise bench_security.SecurityMismatch(f"asked for auth={auth}, the cluster at {root} "
                                              f"ran auth={data['auth']}")
    if not data["module"].startswith(os.path.realpath(root)) and \
            not data["module"].startswith(root):
        raise RuntimeError(f"the run imported {data['module']}, not the checkout at {root}")
    return data


def run_ray(python: str, calls: int, workers: int, attempts: int = 3,
            tls: bool = False) -> Dict:
    """Ray's run, with TLS on its gRPC channels if `tls` (a throwaway CA, removed after the
    run); a Ray whose node timed out starting (a loaded machine) is started again, up to
    `attempts` times. SecurityMismatch if Ray's servers do not speak TLS as asked."""
    for attempt in range(attempts):
        with tempfile.TemporaryDirectory(prefix="ray-tls-") as certs:
            out = subprocess.run([python, "-c", RAY_SCRIPT, str(calls), str(workers), HERE],
                                 capture_output=True, text=True, timeout=900,
                                 env=ray_env(tls, certs))
        try:
            data = _result(out, "RAY_RESULT")
            bench_security.check_probe(data["tls_probe"], tls)
            return dict(data, tls=tls)
        except RuntimeError:
            if attempt == attempts - 1:
                raise
            print(f"Ray failed (attempt {attempt + 1} of {attempts}); starting it again",
                  flush=True)
    raise AssertionError("unreachable")


def parse_args(argv: Optional[List[str]] = None):
    """This script's arguments and its security modes (`--security`, checked)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="calls in flight per run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds; each runs every system in every security mode")
    parser.add_argument("--workers", type=int, default=2,
                        help="Cloudburst workers on the node, and Ray's num_cpus")
    bench_security.add_peer_arguments(parser)
    parser.add_argument("--cloudburst-root", metavar="DIR",
                        help="another checkout (built), measured as `before` in the same rounds")
    parser.add_argument("--json", help="also write the summary here")
    return bench_security.parse_with_modes(parser, argv)


def systems_of(args, modes: List[str], python: Optional[str]) -> Dict[str, Dict[str, Callable]]:
    """For each mode, the runs of one round, in the order they run."""
    out: Dict[str, Dict[str, Callable]] = {}
    roots = {"": ROOT}
    if args.cloudburst_root:
        roots["before"] = os.path.abspath(args.cloudburst_root)
    for mode in modes:
        auth = bench_security.cloudburst_auth(mode)
        runs: Dict[str, Callable] = {}
        for prefix, root in roots.items():
            runs[prefix or "cloudburst"] = (lambda root=root, auth=auth: run_cloudburst(
                root, args.calls, args.workers, False, auth))
            runs[f"{prefix}_direct" if prefix else "direct"] = (
                lambda root=root, auth=auth: run_cloudburst(root, args.calls, args.workers,
                                                            True, auth))
        if python is not None:
            runs["ray"] = (lambda tls=bench_security.ray_tls(mode): run_ray(
                python, args.calls, args.workers, tls=tls))
        out[mode] = runs
    return out


def main() -> None:
    args, modes = parse_args()
    python: Optional[str] = None if args.no_ray else ray_python(args.ray_venv)
    systems = systems_of(args, modes, python)
    rates = {mode: {name: [] for name in runs} for mode, runs in systems.items()}
    rounds: Dict[str, List[Dict]] = {mode: [] for mode in modes}
    version = None
    probes: Dict[str, Dict] = {}
    for r in range(args.rounds):
        for mode, runs in systems.items():
            row = {"load": round(os.getloadavg()[0], 2)}
            for name, run in runs.items():
                data = run()
                version = data.get("version", version)
                if "tls_probe" in data:
                    probes[mode] = data["tls_probe"]
                rates[mode][name].append(args.calls / data["seconds"])
                row[name] = round(args.calls / data["seconds"])
            rounds[mode].append(row)
            print(f"round {r + 1} security {mode} (load {row['load']}): " + ", ".join(
                f"{name} {row[name]:,} calls/s" for name in runs) + "".join(
                f"; {name} / Ray {row[name] / row['ray']:.2f}x" for name in runs
                if name != "ray" and "ray" in row), flush=True)
    summary: Dict = {"calls": args.calls, "workers": args.workers, "ray_version": version,
                     "modes": {}}
    for mode in modes:
        med = {n: round(statistics.median(v)) for n, v in rates[mode].items()}
        out = summary["modes"][mode] = {"description": bench_security.MODES[mode],
                                        "rounds": rounds[mode], "median_calls_per_s": med}
        if "ray" in med:
            out["ray_tls"] = bench_security.ray_tls(mode)
            out["ray_tls_probe"] = probes.get(mode)
            for name in med:
                if name != "ray":
                    # the ratio of the medians, and the median of each round's ratio
                    out[f"{name}_over_ray"] = round(med[name] / med["ray"], 2)
                    out[f"{name}_over_ray_per_round"] = round(statistics.median(
                        row[name] / row["ray"] for row in rounds[mode]), 2)
        print(f"security {mode} ({out['description']}): median calls/s " + ", ".join(
            f"{n} {v:,}" for n, v in med.items()) + "".join(
            f"; {n} / Ray {out[f'{n}_over_ray']}x (per round {out[f'{n}_over_ray_per_round']}x)"
            for n in med if f"{n}_over_ray" in out))
        if "ray" in med:
            print(f"security {mode}: Ray TLS {'on' if out['ray_tls'] else 'off'}, probed: "
                  f"{out['ray_tls_probe']}")
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
