"""Elasticity: Anna's throughput and latency, second by second, while nodes fail, join and leave.

    python benchmarks/elasticity.py failure [--nodes 4] [--replicas 3] [--seconds 40]
    python benchmarks/elasticity.py scale   [--start-nodes 2] [--add 2] [--seconds 45]
    python benchmarks/elasticity.py all

Two experiments from the dissertation, each run next to a control run with the same load and
no membership change, in the same invocation:

* **failure** (Fig. 3.8): `--nodes` memory nodes, `--replicas` replicas per key, a steady load at
  `--load` (default 70 %) of the capacity measured at the start of the run. At `--kill-at` one
  node is killed with SIGKILL; at `--replace-at` a new node joins. The paper kept at least 80 %
  of peak throughput during the failure.
* **scale** (Fig. 2.9): `--start-nodes` nodes and 1 replica; the offered load triples at
  `--spike-at`, `--add` nodes join while it is high, the load drops back at `--drop-at`, and
  the added nodes leave gracefully (their keys handed to the remaining nodes) afterwards.

Load: `--generators` processes, each an `anna_core.Client` issuing 50 % GETs and 50 % PUTs of
`--value-size` bytes over `--keys` keys drawn Zipf(`--zipf`), paced open-loop at its share of
the offered rate (a generator that falls behind catches up, at most one second's worth). Every
operation's completion time, latency and outcome are recorded; per second the script reports
throughput, p50/p99 latency and errors. After the run, every key is read back and compared with
its last acknowledged write (`lost` counts keys whose acknowledged value is gone).

Writes `<out>/elasticity_<experiment>.json` and `.png` (default `--out benchmarks/results`),
and prints progress while it runs. On a 2-core machine the generators and the nodes share the
same two cores, so adding nodes cannot add capacity here; what the scale run shows is that
joins and leaves under load cost neither availability nor data.
"""
from __future__ import annotations

import argparse
import bisect
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

Rate = List[Tuple[float, float]]        # (from second, offered ops/s), sorted by second


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ---- load ------------------------------------------------------------------------------------

def zipf_cdf(n: int, s: float) -> List[float]:
    weights = [1.0 / (i + 1) ** s for i in range(n)]
    total, acc, cdf = sum(weights), 0.0, []
    for w in weights:
        acc += w
        cdf.append(acc / total)
    return cdf


def key_name(i: int) -> str:
    return f"elastic-{i}"


def generator(routing: str, index: int, start_at: float, seconds: float, rate: Rate,
              keys: int, zipf: float, value_size: int, timeout: float, attempt: float,
              conn: Any, auth: Any = None) -> None:
    """One load process: paced GET/PUT mix; sends back its records and last acked writes."""
    import anna_core
    client = anna_core.Client(routing, timeout=timeout, retries=1, attempt_timeout=attempt,
                              auth=auth)
    rng = random.Random(1000 + index)
    cdf = zipf_cdf(keys, zipf)
    records: List[Tuple[float, float, bool]] = []      # (completion s, latency s, ok)
    acked: Dict[str, Tuple[bytes, float]] = {}   # key -> last acknowledged write, when (s)
    attempted: Dict[str, bytes] = {}      # key -> its last write, acknowledged or not
    seq = 0
    while time.time() < start_at:
        time.sleep(min(0.01, max(0.0, start_at - time.time())))
    t0 = start_at
    next_at = time.time()
    try:
        while True:
            now = time.time()
            elapsed = now - t0
            if elapsed >= seconds:
                break
            offered = [r for s, r in rate if s <= elapsed][-1]
            if offered > 0:
                if next_at > now:
                    time.sleep(next_at - now)
                next_at = max(next_at, time.time() - 1.0) + 1.0 / offered
            key = key_name(bisect.bisect_left(cdf, rng.random()))
            begin = time.time()
            ok = True
            try:
                if rng.random() < 0.5:
                    client.get(key)
                else:
                    seq += 1
                    value = f"{index}:{seq}:".encode().ljust(value_size, b"x")
                    attempted[key] = value
                    client.put(key, value)
                    acked[key] = (value, time.time() - t0)
            except anna_core.KeyNotFound:
                pass                  # not written yet by anyone: a correct answer
            except anna_core.AnnaError:
                ok = False
            end = time.time()
            records.append((end - t0, end - begin, ok))
    finally:
        client.close()
    conn.send((records, acked, attempted))
    conn.close()


def run_load(routing: str, generators: int, seconds: float, rate: Rate, args: Any,
             events: Sequence[Tuple[float, str, Any]] = (), auth: Any = None) -> Dict[str, Any]:
    """Run the generators for `seconds`, performing `events` (second, label, action) on
    schedule; returns the per-second series, the events' actual times and every acked write."""
    ctx = mp.get_context("spawn")
    start_at = time.time() + 3.0 + 0.5 * generators         # time for the processes to start
    per_gen = [(s, r / generators) for s, r in rate]
    pipes, procs = [], []
    for i in range(generators):
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=generator, args=(routing, i, start_at, seconds, per_gen,
                                                args.keys, args.zipf, args.value_size,
                                                args.client_timeout, args.attempt_timeout,
                                                child, auth), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    happened: List[Dict[str, Any]] = []

    def timeline() -> None:
        for at, label, action in events:
            delay = start_at + at - time.time()
            if delay > 0:
                time.sleep(delay)
            began = time.time() - start_at
            log(f"t={began:5.1f}s  {label}")
            try:
                detail = action()
                error = None
            except Exception as e:                       # recorded and shown in the plot
                detail, error = None, f"{type(e).__name__}: {e}"
                log(f"        {label} failed: {error}")
            happened.append({"label": label, "at": round(began, 2),
                             "done": round(time.time() - start_at, 2), "detail": detail,
                             "error": error})

    runner = threading.Thread(target=timeline, daemon=True)
    runner.start()
    shown = 0
    while time.time() < start_at + seconds:
        elapsed = time.time() - start_at
        if elapsed >= shown + 5:
            shown = int(elapsed // 5) * 5
            log(f"t={shown:3d}s of {seconds:g}s")
        time.sleep(0.25)
    records: List[Tuple[float, float, bool]] = []
    writes: Dict[str, List[Tuple[bytes, bytes, float]]] = {}
    for conn, p in zip(pipes, procs):
        if not conn.poll(60 + args.client_timeout * 4):
            raise RuntimeError(f"load generator {p.pid} sent no results within its deadline")
        part, acked, attempted = conn.recv()
        records.extend(part)
        for key, (value, when) in acked.items():
            writes.setdefault(key, []).append((value, attempted.get(key, value), when))
        p.join(10)
    runner.join(max(1.0, start_at + seconds + 120 - time.time()))
    return {"series": per_second(records, seconds), "events": happened, "acked": writes}


def per_second(records: Sequence[Tuple[float, float, bool]], seconds: float) -> List[Dict]:
    buckets: List[List[Tuple[float, bool]]] = [[] for _ in range(int(seconds) + 1)]
    for done, latency, ok in records:
        if 0 <= done < len(buckets):
            buckets[int(done)].append((latency, ok))
    series = []
    for second, bucket in enumerate(buckets[:int(seconds)]):
        lat = sorted(l for l, ok in bucket if ok)
        pick = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6, 1)) \
            if lat else (lambda q: None)
        series.append({"t": second, "ops": len(lat), "errors": sum(1 for _, ok in bucket if not ok),
                       "p50_us": pick(0.50), "p99_us": pick(0.99)})
    return series


def capacity(routing: str, args: Any, auth: Any = None) -> float:
    """Closed-loop throughput of the generators against this cluster (ops/s, median second)."""
    out = run_load(routing, args.generators, 6.0, [(0.0, 0.0)], args, auth=auth)
    ops = [s["ops"] for s in out["series"][2:]]
    return float(statistics.median(ops)) if ops else 0.0


def check_acked(cluster: Any, writes: Dict[str, List[Tuple[bytes, bytes, float]]]) -> Dict[str, Any]:
    """Read back every key some generator wrote with an acknowledgement. Last writer wins, so
    the value must be one generator's last acknowledged write, or its last attempted one (a
    write that timed out may still have landed). `lost`: the key is gone; `stale`: it holds
    an older value than that (`stale_acked_at`: when, in the run, the newest acknowledged
    write of each stale key was acknowledged)."""
    import anna_core
    client = cluster.client(timeout=2.0, retries=2)
    lost = stale = 0
    stale_at: List[float] = []
    for key, candidates in writes.items():
        allowed = {v for value, last, _ in candidates for v in (value, last)}
        try:
            got = client.get(key)
        except anna_core.KeyNotFound:
            lost += 1
            continue
        if got not in allowed:
            stale += 1
            stale_at.append(round(max(when for _, _, when in candidates), 3))
    return {"keys": len(writes), "lost": lost, "stale": stale, "stale_acked_at": stale_at}


# ---- experiments --------------------------------------------------------------------------

def _cluster(args: Any, nodes: int, replicas: int) -> Any:
    import anna_core
    return anna_core.LocalCluster(memory_threads=1, nodes=nodes,
                                  replication=(replicas, 1, 0, 1), pin_threads=False)


def _prefill(cluster: Any, keys: int) -> None:
    client = cluster.client(timeout=2.0)
    for i in range(keys):
        client.put(key_name(i), b"prefill")


def experiment_failure(args: Any) -> Dict[str, Any]:
    runs: Dict[str, Any] = {}
    for name in ("control", "failure"):
        log(f"failure experiment, {name} run: {args.nodes} nodes, {args.replicas} replicas")
        with _cluster(args, args.nodes, args.replicas) as cluster:
            _prefill(cluster, args.keys)
            peak = capacity(cluster.routing_address, args, auth=cluster.client_auth)
            offered = args.load * peak
            log(f"capacity {peak:.0f} ops/s; offering {offered:.0f} ops/s")
            events = []
            if name == "failure":
                victim = cluster.node_ids[-1]
                events = [(args.kill_at, f"kill -9 {victim}", lambda: cluster.kill_node(victim)),
                          (args.replace_at, "replacement joins", lambda: cluster.add_node())]
            out = run_load(cluster.routing_address, args.generators, args.seconds,
                           [(0.0, offered)], args, events, auth=cluster.client_auth)
            out["check"] = check_acked(cluster, out.pop("acked"))
            out.update(capacity=peak, offered=offered)
            log(f"{name}: {summary_line(out, args)}")
            runs[name] = out
    return {"experiment": "failure", "args": vars(args), "runs": runs}


def experiment_scale(args: Any) -> Dict[str, Any]:
    runs: Dict[str, Any] = {}
    for name in ("control", "scale"):
        log(f"scale experiment, {name} run: {args.start_nodes} nodes, 1 replica")
        with _cluster(args, args.start_nodes, 1) as cluster:
            _prefill(cluster, args.keys)
            peak = capacity(cluster.routing_address, args, auth=cluster.client_auth)
            base = args.load * peak / 3
            rate = [(0.0, base), (args.spike_at, 3 * base), (args.drop_at, base)]
            log(f"capacity {peak:.0f} ops/s; offering {base:.0f}, then {3 * base:.0f}, "
                f"then {base:.0f} ops/s")
            events = []
            if name == "scale":
                added: List[str] = []

                def add() -> str:
                    added.append(cluster.add_node())
                    return added[-1]

                def remove() -> Optional[str]:
                    node = added.pop()
                    cluster.remove_node(node)
                    return node

                gap = (args.drop_at - args.spike_at - 4) / max(1, args.add)
                for i in range(args.add):
                    events.append((args.spike_at + 2 + i * gap, f"node joins ({i + 1})", add))
                for i in range(args.add):
                    events.append((args.drop_at + 3 + i * 4, f"node leaves ({i + 1})", remove))
            out = run_load(cluster.routing_address, args.generators, args.seconds, rate, args,
                           events, auth=cluster.client_auth)
            out["check"] = check_acked(cluster, out.pop("acked"))
            out.update(capacity=peak, offered=rate)
            log(f"{name}: {summary_line(out, args)}")
            runs[name] = out
    return {"experiment": "scale", "args": vars(args), "runs": runs}


# ---- reporting ----------------------------------------------------------------------------

def offered_at(out: Dict[str, Any], second: float) -> float:
    offered = out["offered"]
    if isinstance(offered, (int, float)):
        return float(offered)
    return [r for start, r in offered if start <= second][-1]


def summary_line(out: Dict[str, Any], args: Any) -> str:
    """Worst second against the offered load (the first 2 s are warm-up), failures, check."""
    series = out["series"][2:]
    ratios = [s["ops"] / max(1.0, offered_at(out, s["t"])) for s in series]
    worst = min(range(len(ratios)), key=ratios.__getitem__) if ratios else None
    errors = sum(s["errors"] for s in out["series"])
    p99 = sorted(s["p99_us"] for s in series if s["p99_us"] is not None)
    return (f"median {statistics.median(ratios) * 100 if ratios else 0:.0f} % of offered, "
            f"worst second t={series[worst]['t'] if worst is not None else '-'} at "
            f"{ratios[worst] * 100 if worst is not None else 0:.0f} %, "
            f"median p99 {statistics.median(p99) / 1000 if p99 else 0:.2f} ms, "
            f"{errors} failed ops, check {out['check']}")


def plot(result: Dict[str, Any], path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    runs = result["runs"]
    fig, (ax_t, ax_l) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    styles = {"control": dict(color="#999999", lw=1.2, ls="--")}
    # failure: throughput over the offered load (1.0 = keeping up); scale: ops/s, since the
    # offered load itself changes
    relative = result["experiment"] == "failure"
    top = 0.0
    for name, run in runs.items():
        style = styles.get(name, dict(color="#c44e52", lw=1.8))
        t = [s["t"] for s in run["series"]]
        y = [s["ops"] / max(1.0, offered_at(run, s["t"])) if relative else s["ops"]
             for s in run["series"]]
        top = max([top] + y)
        ax_t.plot(t, y, label=name, **style)
        if name != "control":
            ax_l.plot(t, [(s["p50_us"] or float("nan")) / 1000 for s in run["series"]],
                      label=f"{name} p50", color="#4c72b0")
            ax_l.plot(t, [(s["p99_us"] or float("nan")) / 1000 for s in run["series"]],
                      label=f"{name} p99", color="#dd8452")
            for e in run["events"]:
                for ax in (ax_t, ax_l):
                    ax.axvline(e["at"], color="black", lw=0.8, ls=":")
                ax_t.annotate(e["label"], (e["at"], 0.03 * top if top else 0.03), rotation=90,
                              fontsize=8, va="bottom", ha="right")
        else:
            ax_l.plot(t, [(s["p99_us"] or float("nan")) / 1000 for s in run["series"]],
                      label="control p99", **style)
    if relative:
        ax_t.set_ylabel("throughput / offered load")
        ax_t.set_ylim(0, max(1.3, top * 1.05))
        ax_t.axhline(0.9, color="#55a868", lw=0.8, ls="-.")
    else:
        ax_t.set_ylabel("throughput (ops/s)")
        ax_t.set_ylim(0, top * 1.15 if top else 1)
    ax_t.legend(loc="lower right", fontsize=8)
    ax_l.set_ylabel("latency (ms)")
    ax_l.set_yscale("log")
    ax_l.set_xlabel("seconds")
    ax_l.legend(loc="upper right", fontsize=8)
    title = {"failure": "Node failure under steady load (dissertation Fig. 3.8)",
             "scale": "Scale-out and scale-in under a load spike (dissertation Fig. 2.9)"}
    ax_t.set_title(title.get(result["experiment"], result["experiment"]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("experiment", choices=["failure", "scale", "all"], help="what to run")
    p.add_argument("--nodes", type=int, default=4, help="failure: memory nodes")
    p.add_argument("--replicas", type=int, default=3, help="failure: replicas per key")
    p.add_argument("--kill-at", type=float, default=10.0, help="failure: second of the kill")
    p.add_argument("--replace-at", type=float, default=25.0,
                   help="failure: second the replacement node starts joining")
    p.add_argument("--start-nodes", type=int, default=2, help="scale: nodes at the start")
    p.add_argument("--add", type=int, default=2, help="scale: nodes added during the spike")
    p.add_argument("--spike-at", type=float, default=8.0, help="scale: the load triples here")
    p.add_argument("--drop-at", type=float, default=28.0, help="scale: the load drops here")
    p.add_argument("--seconds", type=float, default=None,
                   help="measured seconds per run (failure 40, scale 45)")
    p.add_argument("--load", type=float, default=0.7,
                   help="offered load as a fraction of the measured capacity (scale: at the "
                        "spike)")
    p.add_argument("--generators", type=int, default=3, help="load processes")
    p.add_argument("--keys", type=int, default=2000, help="distinct keys")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of key popularity")
    p.add_argument("--value-size", type=int, default=256, help="bytes per PUT")
    p.add_argument("--client-timeout", type=float, default=1.0,
                   help="a generator's client timeout (its deadline is twice this)")
    p.add_argument("--attempt-timeout", type=float, default=0.1,
                   help="seconds a generator waits for one replica before trying another")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"),
                   help="directory for the JSON and PNG files")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    todo = ["failure", "scale"] if args.experiment == "all" else [args.experiment]
    asked_seconds = args.seconds
    for name in todo:
        args.seconds = asked_seconds or (40.0 if name == "failure" else 45.0)
        result = (experiment_failure if name == "failure" else experiment_scale)(args)
        base = os.path.join(args.out, f"elasticity_{name}")
        with open(base + ".json", "w") as f:
            json.dump(result, f, indent=1)
        drawn = plot(result, base + ".png")
        log(f"wrote {base}.json" + (f" and {base}.png" if drawn else " (no matplotlib: no PNG)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
