"""The Python client's own cost per request: how much of a get/put is Python, against the
checkout at --before, in the same rounds.

For each mode ("off": plaintext with client links, "on": CURVE with secured client links) one Anna cluster is started
from this checkout, and each round runs, one after the other, this checkout's
`anna_core.Client` and the --before checkout's, each in a process started in its own
checkout (its packages and kernel build), serial 50/50 get/put of 256-byte values over 200
keys. Each reports:

* p50 of a request (µs),
* the Python side (µs per request): the request's wall time minus the time spent inside the
  client transport's one native call per request (`key_request`; in a checkout without it,
  `exchange`). It is measured by wrapping that call, so it includes the wrapper's own cost
  (well under a µs) and what Python does around the call: the client's decisions, building
  the request and decoding the answer where these are Python's;
* the client process's CPU per request (all its threads).

Medians over --rounds; the 1-minute load average is printed with every round.

    python benchmarks/kvs_client_cost.py --before /path/to/main-checkout --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

try:
    import anna_core
except ImportError:     # a checkout that is not installed: use this one
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import anna_core

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvs import run_in_checkout  # noqa: E402  (benchmarks/kvs.py: runs another checkout)

# Runs in a process started in one checkout: connects that checkout's client to the cluster
# and measures (see the module docstring). Instrumentation only: it wraps the client's
# transport call to time it.
RUNNER = r"""
import json, resource, sys, time
import anna_core
from runtime.auth import AuthConfig
a = json.loads(sys.argv[1])
auth = AuthConfig(*a["auth"]) if a["auth"] else None
kvs = anna_core.Client(a["routing"], auth=auth)
value = b"x" * 256
for i in range(200):
    kvs.put(f"k{i}", value)
inside = [0.0]
pc = time.perf_counter
transport = kvs._transport
if hasattr(transport, "key_request"):
    real = transport.key_request
    def timed(*args):
        t0 = pc(); r = real(*args); inside[0] += pc() - t0; return r
    transport.key_request = timed
else:
    class Timed:
        def __init__(self, native): self.native = native
        def exchange(self, *args):
            t0 = pc(); r = self.native.exchange(*args); inside[0] += pc() - t0; return r
        def __getattr__(self, name): return getattr(self.native, name)
    transport._native = Timed(transport._native)
n = a["ops"]
lat = []
usage0 = resource.getrusage(resource.RUSAGE_SELF)
for j in range(n):
    key = f"k{j % 200}"
    t0 = pc()
    if j & 1:
        kvs.get(key)
    else:
        kvs.put(key, value)
    lat.append(pc() - t0)
usage1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
python_side = (sum(lat) - inside[0]) * 1e6 / n
lat.sort()
kvs.close()
print(json.dumps({"p50_us": lat[n // 2] * 1e6, "python_us_per_op": python_side,
                  "client_cpu_us_per_op": cpu * 1e6 / n, "anna_core": anna_core.__file__}))
"""


def run_client(root: str, cluster, ops: int) -> dict:
    auth = cluster.client_auth
    spec = {"routing": cluster.routing_address, "ops": ops,
            "auth": [auth.key_dir, auth.identity] if auth is not None else None}
    result = run_in_checkout(root, [RUNNER, json.dumps(spec)])
    result["load1"] = os.getloadavg()[0]
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, metavar="DIR",
                   help="a built checkout whose client is the 'before' side")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ops", type=int, default=5000)
    p.add_argument("--modes", default="off,on", help="off (plaintext, links on), on (CURVE, secured links on)")
    args = p.parse_args(argv)
    sides = {"after": REPO_ROOT, "before": os.path.abspath(args.before)}
    summary = {}
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        with anna_core.LocalCluster(memory_threads=2, nodes=1, auth=(mode == "on"),
                                    warn_auth_off=False, client_links=True) as c:
            runs: dict = {side: [] for side in sides}
            for r in range(args.rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for side in order:
                    runs[side].append(run_client(sides[side], c, args.ops))
                line = ", ".join(f"{side} p50 {runs[side][-1]['p50_us']:.1f} us python "
                                 f"{runs[side][-1]['python_us_per_op']:.1f} us cpu "
                                 f"{runs[side][-1]['client_cpu_us_per_op']:.1f} us"
                                 for side in sides)
                print(f"[cost] {mode} round {r + 1}: {line}  load {runs['after'][-1]['load1']:.2f}",
                      flush=True)
            summary[mode] = {side: {k: statistics.median(x[k] for x in rs)
                                    for k in ("p50_us", "python_us_per_op",
                                              "client_cpu_us_per_op")}
                             for side, rs in runs.items()}
            summary[mode]["runs"] = runs
    for mode, s in summary.items():
        for side in sides:
            m = s[side]
            print(f"{mode:3s} {side:6s}: p50 {m['p50_us']:7.1f} us   python side "
                  f"{m['python_us_per_op']:5.1f} us/op   client CPU "
                  f"{m['client_cpu_us_per_op']:6.1f} "
                  f"us/op (medians of {args.rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
