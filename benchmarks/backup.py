"""Backup and restore throughput against a local S3-compatible server (moto_server).

Starts moto_server on a free loopback port, a LocalCluster (default: 2 memory nodes x 2
threads, so two replicas per key), loads `--keys` LWW keys of `--value-size` bytes in
batches, backs the cluster up (`anna_core.backup.backup`), and restores into a fresh cluster
of another size (1 node x 2 threads) with the default verification (every checksum first).
Keys/s and MB/s of both are printed and written to benchmarks/results/backup.json.

    python benchmarks/backup.py                       # 100k keys of 100 bytes
    python benchmarks/backup.py --keys 20000 --value-size 1000

moto keeps objects in memory in one Python process, so these figures are bounded by it as
much as by Anna; a real S3 endpoint has different (network) costs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import boto3                                        # noqa: E402

from anna_core import LocalCluster, LWWLattice     # noqa: E402
from anna_core.backup import _cluster_client, _Writer, backup, restore  # noqa: E402
from anna_core.backup_format import parse_location  # noqa: E402
from hydro_proto import anna_pb2                    # noqa: E402

RESULTS_DIR = os.path.join(HERE, "results")
BUCKET = "anna-bench"


def log(message: str) -> None:
    print(f"[backup] {message}", flush=True)


def start_moto() -> subprocess.Popen:
    """moto_server on a free loopback port, the AWS environment pointed at it."""
    exe = shutil.which("moto_server")
    if exe is None:
        sys.exit("moto_server not found: pip install 'moto[server]'")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    client = boto3.client("s3")
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            return proc
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                sys.exit("moto_server did not start")
            time.sleep(0.05)


def load(cluster: LocalCluster, keys: int, value_size: int) -> float:
    """Loads `keys` LWW keys in batches (the restore's batched writer); returns seconds."""
    started = time.monotonic()
    with _cluster_client(cluster.routing_addresses, cluster.cluster_auth, 5.0) as kvs:
        writer = _Writer(kvs, parse_location(f"s3://{BUCKET}/load"))
        value = b"x" * value_size
        for i in range(keys):
            lattice = LWWLattice(i + 1, value)
            writer.add(anna_pb2.KeyTuple(key=f"key/{i:08d}", lattice_type=anna_pb2.LWW,
                                         payload=lattice.serialize()), "load")
            if (i + 1) % 20000 == 0:
                log(f"  loaded {i + 1:,} keys")
        writer.flush()
    return time.monotonic() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--part-mb", type=float, default=16.0)
    p.add_argument("--verify", choices=("first", "each"), default="first",
                   help="the restore's verification (see `anna restore --help`)")
    args = p.parse_args()
    moto = start_moto()
    result: Dict[str, Any] = {"keys": args.keys, "value_size": args.value_size,
                              "source": f"{args.nodes} nodes x {args.threads} threads",
                              "target": "1 node x 2 threads", "part_mb": args.part_mb,
                              "verify": args.verify,
                              "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    url = f"s3://{BUCKET}/bench-{int(time.time())}"
    try:
        with LocalCluster(nodes=args.nodes, memory_threads=args.threads) as source:
            log(f"loading {args.keys:,} keys of {args.value_size} bytes into {result['source']}")
            result["load_s"] = round(load(source, args.keys, args.value_size), 2)
            log(f"backing up to {url}")
            b = backup(source.routing_addresses, url, auth=source.cluster_auth,
                       part_bytes=int(args.part_mb * (1 << 20)), progress=log)
        totals = b.manifest.totals
        result["backup"] = {"seconds": round(b.seconds, 2), "objects": totals["objects"],
                            "keys_stored": totals["keys"], "bytes": totals["bytes"],
                            "keys_per_s": round(totals["keys"] / b.seconds),
                            "mb_per_s": round(totals["bytes"] / 1e6 / b.seconds, 1)}
        with LocalCluster(nodes=1, memory_threads=2) as target:
            log("restoring into 1 node x 2 threads")
            r = restore(target.routing_addresses, url, auth=target.cluster_auth,
                        verify=args.verify, progress=log)
            with target.client() as kvs:
                assert kvs.get(f"key/{args.keys - 1:08d}") == b"x" * args.value_size
        result["restore"] = {"seconds": round(r.seconds, 2), "keys_merged": r.keys,
                             "bytes": r.bytes, "retried": r.retried,
                             "keys_per_s": round(r.keys / r.seconds),
                             "mb_per_s": round(r.bytes / 1e6 / r.seconds, 1)}
    finally:
        moto.terminate()
        moto.wait(10)
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, "backup.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    log(json.dumps(result, indent=1))
    log(f"written to {path}")


if __name__ == "__main__":
    main()
