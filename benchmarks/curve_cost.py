"""What ZeroMQ CURVE costs on the platform's sockets: plain vs CURVE, between two processes
over loopback, with the platform's own `bind_pull` / `PushCache` / `Authenticator`.

Contract: `python3 benchmarks/curve_cost.py [--python PY ...] [--runs R] [--round-trips N]
[--stream N] [--json FILE]` measures, for each interpreter (default: this one; pass another
to compare a pyzmq built differently, e.g. against Debian's libzmq in a venv), and for each
of plain and CURVE at 64 B and 64 KB:
  - the round trip (A PUSH -> B PULL, B PUSH -> A PULL), median over N, R runs;
  - one-way throughput (N messages streamed, then one round trip to drain), R runs.
It prints a table of the medians over runs and the CURVE/plain ratios, then one JSON object
(also written to FILE if given). Each measurement runs in fresh processes; nothing is shared
with the installed services. Needs only pyzmq (the repository root goes on sys.path).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SIZES = (64, 64 * 1024)


def _setup(mode: str, key_dir: str):
    import zmq
    from runtime.auth import AuthConfig, Authenticator
    context = zmq.Context()
    credentials = AuthConfig(key_dir).load() if mode == "curve" else None
    authenticator = Authenticator(context, credentials).start() if credentials else None
    return context, credentials, authenticator


def echo(mode: str, key_dir: str, reply_to: str) -> None:
    """The far side: bind, print the address, echo every frame tagged b'r' back."""
    from runtime.sockets import PushCache, bind_pull
    context, credentials, _ = _setup(mode, key_dir)
    pull, address = bind_pull(context, auth=credentials)
    push = PushCache(context, auth=credentials)
    print(address, flush=True)
    while True:
        frame = pull.recv(copy=False)
        tag = frame.buffer[:1].tobytes()
        if tag == b"q":
            return
        if tag == b"r":
            push.send_frame(reply_to, frame.bytes)


def measure(mode: str, key_dir: str, round_trips: int, stream: int) -> Dict[str, float]:
    """One run, in this process, against a fresh echo process: per size, the median round
    trip (µs) and the one-way rate (messages/s)."""
    from runtime.sockets import PushCache, bind_pull
    context, credentials, authenticator = _setup(mode, key_dir)
    pull, address = bind_pull(context, auth=credentials)
    far = subprocess.Popen([sys.executable, __file__, "--echo", mode, key_dir, address],
                           stdout=subprocess.PIPE, text=True)
    try:
        far_address = far.stdout.readline().strip()
        push = PushCache(context, auth=credentials)
        out: Dict[str, float] = {}
        for size in SIZES:
            ping = b"r" + b"x" * (size - 1)
            streamed = b"s" + b"x" * (size - 1)
            for _ in range(50):                          # connect, handshake, warm up
                push.send_frame(far_address, ping)
                pull.recv()
            times: List[float] = []
            for _ in range(round_trips):
                t = time.perf_counter()
                push.send_frame(far_address, ping)
                pull.recv()
                times.append(time.perf_counter() - t)
            out[f"rtt_us_{size}"] = statistics.median(times) * 1e6
            sock = push.socket(far_address)
            t = time.perf_counter()
            for _ in range(stream):
                sock.send(streamed)                      # blocking: measure, never drop
            sock.send(ping)
            pull.recv()
            out[f"msgs_per_s_{size}"] = stream / (time.perf_counter() - t)
        push.send_frame(far_address, b"q")
        far.wait(10)
        push.close()
        return out
    finally:
        if far.poll() is None:
            far.kill()
        pull.close(0)
        if authenticator:
            authenticator.stop()
        context.term()


def run_interpreter(python: str, runs: int, round_trips: int, stream: int) -> Dict:
    """Every run of both modes under `python` (each run a fresh pair of processes)."""
    from runtime.auth import write_keys
    with tempfile.TemporaryDirectory() as key_dir:
        write_keys(key_dir)
        info = json.loads(subprocess.check_output(
            [python, "-c", "import zmq, json, os; print(json.dumps({'pyzmq': zmq.__version__, "
                           "'libzmq': zmq.zmq_version(), 'bundled': os.path.isdir(os.path.join("
                           "os.path.dirname(os.path.dirname(zmq.__file__)), 'pyzmq.libs'))}))"]))
        results: Dict[str, List[Dict[str, float]]] = {"plain": [], "curve": []}
        for _ in range(runs):
            for mode in ("plain", "curve"):
                line = subprocess.check_output(
                    [python, __file__, "--measure", mode, key_dir, str(round_trips),
                     str(stream)], cwd=ROOT, text=True).strip().splitlines()[-1]
                results[mode].append(json.loads(line))
    summary = {}
    for mode, rows in results.items():
        summary[mode] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    summary["ratio"] = {
        k: (summary["curve"][k] / summary["plain"][k] if k.startswith("rtt")
            else summary["plain"][k] / summary["curve"][k]) for k in summary["plain"]}
    return {"python": python, **info, "runs": runs, "round_trips": round_trips,
            "stream": stream, "median": summary, "all": results}


def table(report: Dict) -> str:
    lines = [f"{'pyzmq build':<44} {'size':>6} {'RTT plain':>10} {'RTT CURVE':>10} {'x':>5}"
             f" {'msg/s plain':>12} {'msg/s CURVE':>12} {'x':>5}"]
    for r in report["results"]:
        name = (f"pyzmq {r['pyzmq']}, " + ("wheel's bundled" if r["bundled"] else "system")
                + f" libzmq {r['libzmq']}")
        m = r["median"]
        for size in SIZES:
            lines.append(
                f"{name[:44]:<44} {('64 B' if size == 64 else '64 KB'):>6} "
                f"{m['plain'][f'rtt_us_{size}']:>8.0f}µs {m['curve'][f'rtt_us_{size}']:>8.0f}µs "
                f"{m['ratio'][f'rtt_us_{size}']:>5.1f} {m['plain'][f'msgs_per_s_{size}']:>12,.0f} "
                f"{m['curve'][f'msgs_per_s_{size}']:>12,.0f} {m['ratio'][f'msgs_per_s_{size}']:>5.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--echo":
        echo(*argv[1:4])
        return 0
    if argv and argv[0] == "--measure":
        print(json.dumps(measure(argv[1], argv[2], int(argv[3]), int(argv[4]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", action="append", default=None,
                        help="interpreter to measure (repeatable; default: this one)")
    parser.add_argument("--runs", type=int, default=5, help="runs per mode (fresh processes)")
    parser.add_argument("--round-trips", type=int, default=2000, help="round trips per run")
    parser.add_argument("--stream", type=int, default=20000,
                        help="messages per one-way throughput run")
    parser.add_argument("--json", default=None, help="also write the JSON report here")
    args = parser.parse_args(argv)
    pythons = args.python or [sys.executable]
    report = {"host_cpus": os.cpu_count(), "results": [
        run_interpreter(p, args.runs, args.round_trips, args.stream) for p in pythons]}
    print(table(report))
    for r in report["results"]:
        r.pop("all")
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
