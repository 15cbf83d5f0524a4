"""CPU of a node cache's causal binds (HB's and OPT's CAUSAL_BIND), in this process, without a cluster.

    python benchmarks/bind_cpu.py [--dags 300] [--rounds 7] [--value-bytes 25000] [--root CHECKOUT]

Builds one `hydrocache.node_cache.NodeCache` of the checkout at `--root` (default: this one)
and exposes `--keys` keys in its cut, each version with a 4-entry clock, dependencies on the
five keys before it and two values (`--value-bytes` in all). Each DAG is three binds of one
attempt, as a linear HB DAG whose functions all run at this cache makes them: a source binding
two of the DAG's six keys, a function binding two more with the source's answer as its
upstream context, and the sink binding the last two with that function's answer. Every bind
carries the caller's session (a causal floor for each of the six keys) and asks for its
versions to be carried (the sink does not); the attempt is released after the sink. Prints the
process CPU microseconds per DAG (three binds), the median of `--rounds` rounds of `--dags`.
What it leaves out: sockets and CURVE, other caches (nothing is fetched from another holder),
Anna (the cut is filled once), and the cold CPU caches of a busy machine, which make the same
Python slower in a cluster (`benchmarks/mtcc.py --throughput` has those).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dags", type=int, default=300, help="DAGs (three binds each) per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keys", type=int, default=30)
    parser.add_argument("--value-bytes", type=int, default=25000)
    parser.add_argument("--root", default=os.getcwd(), help="the checkout to measure")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    for package in ("hydro_proto", "hydrocache"):
        if not os.path.isdir(os.path.join(root, package)):
            raise SystemExit(f"bind_cpu: {root} has no {package}/ (hydro_proto is built by "
                             f"`python3 setup.py build_ext --inplace` there)")
    sys.path.insert(0, root)
    from hydro_proto import cloudburst_pb2 as pb
    import hydrocache
    from hydrocache.node_cache import NodeCache
    from hydrocache.version import Version
    if not os.path.abspath(hydrocache.__file__).startswith(root + os.sep):
        raise SystemExit(f"bind_cpu: imported {hydrocache.__file__}, not the checkout {root}")

    now = 1.0
    node = NodeCache("n0", "tcp://n0")
    versions = {}
    for i in range(args.keys):
        key = f"k{i:03d}"
        deps = {d: versions[d].vc for d in list(versions)[-5:]}
        big = args.value_bytes * 4 // 5
        v = Version.new(key, {f"w{j}": 10 + i + j for j in range(4)}, deps,
                        [bytes([65 + i % 26]) * big, b"y" * (args.value_bytes - big)])
        versions[key] = v
        node.on_fetched(key, v.lattice, now)
    if len(node.cut) != args.keys:
        raise SystemExit(f"only {len(node.cut)} of {args.keys} keys were exposed")
    step = max(1, args.keys // 6)
    dag = [f"k{i:03d}" for i in range(step // 2, args.keys, step)][:6]
    session = pb.Session()
    for k in dag:
        session.keys.add(key=k, timestamp=5).vc.update({f"w{j}": 3 for j in range(4)})
    ids = itertools.count()

    def bind(attempt, keys, upstream=None, carry=True):
        req = pb.CacheRequest(op=pb.CAUSAL_BIND, attempt_id=attempt, keys=keys, dag_keys=dag,
                              dag_keys_known=True, carry_versions=carry,
                              request_id=f"r{next(ids)}", response_address="tcp://w",
                              timeout=5.0)
        if upstream is not None:
            req.upstreams.append(upstream)
        req.session.CopyFrom(session)
        response = node.handle(req, now).replies[0].response
        if response.status != pb.OK or response.abort:
            raise SystemExit(f"bind failed: {response.message or response.abort_reason}")
        return response.context

    def one_dag():
        attempt = f"c{next(ids)}#0"
        up = bind(attempt, dag[:2])
        up = bind(attempt, dag[2:4], up)
        bind(attempt, dag[4:], up, carry=False)
        node.handle(pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id=attempt, timeout=0.001),
                    now)
        node.sweep(now)

    for _ in range(args.dags):         # warm-up
        one_dag()
    rounds = []
    for _ in range(args.rounds):
        start = time.process_time()
        for _ in range(args.dags):
            one_dag()
        rounds.append((time.process_time() - start) / args.dags * 1e6)
    print(json.dumps({"root": args.root, "dags": args.dags, "rounds_us_per_dag":
                      [round(r, 1) for r in rounds],
                      "us_per_dag": round(statistics.median(rounds), 1)}))


if __name__ == "__main__":
    main()
