"""Anna's response to a changing workload (dissertation 3.5.4, Fig. 3.6), autoscaled vs static.

    python benchmarks/autoscaling/changing_workload.py            # ~11 minutes
    python benchmarks/autoscaling/changing_workload.py --quick    # smoke run, under a minute

A memory-tier cluster of `--start-nodes` nodes (one worker thread each, one replica per key)
serves four phases of load: light load, a Zipf 2 hotspot, a Zipf 0.5 load spike well past the
starting cluster's capacity, then light load again. The same load runs twice in one
invocation: against an autoscaled cluster (the monitor runs the policy engine and adds and
removes nodes through the local cluster manager, each new node starting
`--provisioning-delay` seconds late, standing in for a VM boot) and against a static cluster
of the starting size (the control: the same monitor and SLO with elasticity, selective
replication and tiering switched off).

Capacity emulation: on a two-core machine extra node processes add no real capacity, so each
worker thread serves at most `--service-rate` requests/s (the kernel's `service_rate`); the
phases' loads are fractions of the starting cluster's emulated capacity (start nodes x service
rate). The SLO is on the clients' mean latency; the default, 10 ms, is about ten times the
unloaded latency and is met while no worker runs above ~75 % of its emulated capacity.

Reported, per run: the share of seconds whose mean client latency met the SLO (and of
monitoring periods, the policy's own view, whose clients' mean latency met it), every
violation (start, length, worst multiple of the SLO), the memory nodes over time and their
cost in node-seconds (nodes requested count from the request: a booting VM is billed), and the
policy's actions with their reasons. Writes `benchmarks/results/changing_workload.json` and
`benchmarks/figures/changing_workload.png`.

Policy knobs that differ from `PolicyConfig()`'s local defaults (and why) are listed under
`--help` for `--compute-bounds`, `--min-nodes` and `--max-latency-ratio`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from load import (LoadSpec, Phase, emulation, log, monitor_series, phase_at,  # noqa: E402
                  prefill, run_load, slo_seconds, violations, write_outputs)

NAME = "changing_workload"


def schedule(args: argparse.Namespace) -> List[Phase]:
    """The four phases, rates as fractions of the starting cluster's emulated capacity."""
    capacity = args.start_nodes * args.service_rate if args.service_rate else args.capacity
    return [Phase("light", args.light_seconds, args.light_load * capacity, args.light_zipf),
            Phase("hotspot (Zipf 2)", args.hotspot_seconds, args.hotspot_load * capacity,
                  args.hotspot_zipf),
            Phase("spike (Zipf 0.5)", args.spike_seconds, args.spike_load * capacity,
                  args.spike_zipf),
            Phase("light again", args.end_seconds, args.light_load * capacity, args.light_zipf)]


def policy(args: argparse.Namespace) -> Any:
    """The autoscaled run's PolicyConfig: the local defaults except the knobs named."""
    from anna_core.autoscale import PolicyConfig
    return PolicyConfig(latency_slo=args.slo_ms / 1e3, compute_bounds=tuple(args.compute_bounds),
                        min_memory_nodes=args.min_nodes or args.start_nodes,
                        max_nodes=args.max_nodes, max_latency_ratio=args.max_latency_ratio,
                        hot_key_min_accesses=args.hot_key_min_accesses,
                        grace_period=args.grace_period,
                        monitoring_period=args.period)


def run(args: argparse.Namespace, autoscaled: bool, phases: Sequence[Phase]) -> Dict[str, Any]:
    """One run (autoscaled or the static control) of the whole schedule."""
    import anna_core
    name = "autoscaled" if autoscaled else "static"
    spec = LoadSpec(keys=args.keys, prefix="cw-", value_size=args.value_size,
                    put_fraction=args.put_fraction, refresh_keys=args.refresh_keys,
                    refresh_period=args.period, report_period=args.period,
                    attempt_timeout=args.attempt_timeout)
    config = policy(args)
    if not autoscaled:   # the control: the same monitor and SLO, every mechanism off
        config = config.with_(elasticity=False, selective_replication=False, tiering=False)
    options: Dict[str, Any] = dict(autoscale=config)
    options.update(emulation(args.service_rate))
    log(f"{name} run: {args.start_nodes} memory nodes"
        + (f", service rate {args.service_rate:g}/s per worker" if args.service_rate else
           ", no capacity emulation"))
    with anna_core.LocalCluster(memory_threads=1, nodes=args.start_nodes, fault_tolerance=0,
                                pin_threads=False, provisioning_delay=args.provisioning_delay,
                                stop_timeout=20, **options) as cluster:
        prefill(cluster, spec)
        total = sum(p.seconds for p in phases)

        def progress(elapsed: float) -> None:
            _, phase = phase_at(phases, elapsed)
            status = cluster.monitor.latest or {}
            memory = status.get("tiers", {}).get("memory", {})
            lat = status.get("latency") or {}
            log(f"  {name} t={elapsed:5.1f}s {phase.name if phase else 'end':<18} "
                f"offered {phase.rate if phase else 0:6.0f}/s  memory nodes "
                f"{len(memory.get('node_ids', []))}"
                + (f" (+{len(memory['pending'])} pending)" if memory.get("pending") else "")
                + (f"  mean latency {lat['mean'] * 1e3:6.2f} ms" if lat.get("mean") else ""))
            for action in status.get("actions", [])[:3]:
                log(f"    policy: {action}")
        out = run_load(cluster.routing_addresses, cluster.client_auth, spec, phases,
                       args.processes, args.threads, progress)
        history = monitor_series(list(cluster.monitor.history), out["start_wall"], total,
                                 args.period)
    series = out["series"]
    met, seconds = slo_seconds(series, args.slo_ms, skip=args.warmup)
    node_seconds = _node_seconds(history, total, args.start_nodes, args.period)
    periods = [h["mean_ms"] for h in history
               if h["window"][0] >= args.warmup and h["window"][1] <= total
               and h["mean_ms"] is not None]
    result = {"run": name, "series": series, "monitor": history,
              "slo_met_seconds": met, "measured_seconds": seconds,
              "slo_attainment": round(met / seconds, 4) if seconds else None,
              "violations": violations(series, args.slo_ms, skip=args.warmup),
              "slo_attainment_periods": round(sum(1 for m in periods if m <= args.slo_ms)
                                              / len(periods), 4) if periods else None,
              "node_seconds": node_seconds,
              "max_memory_nodes": max((h["memory_nodes"] + h["memory_pending"]
                                       for h in history), default=args.start_nodes),
              "errors": sum(s["errors"] for s in series),
              "actions": [{"t": h["t"], "action": a} for h in history for a in h["actions"]]}
    log(f"{name}: {summary_line(result, args)}")
    return result


def _node_seconds(history: Sequence[Dict[str, Any]], total: float, start: int,
                  period: float) -> float:
    """Memory node-seconds over the window: members plus nodes requested but not joined,
    each monitor period held until the next (the start size before the first)."""
    points = sorted((h["t"], h["memory_nodes"] + h["memory_pending"]) for h in history
                    if 0 <= h["t"] <= total)
    cost, t_prev, n_prev = 0.0, 0.0, start
    for t, n in points:
        cost += (t - t_prev) * n_prev
        t_prev, n_prev = t, n
    cost += (total - t_prev) * n_prev
    return round(cost, 1)


def summary_line(r: Dict[str, Any], args: argparse.Namespace) -> str:
    """One line: attainment, violations, cost, peak nodes, failed requests."""
    v = r["violations"]
    worst = max((x["worst_x_slo"] for x in v), default=0)
    longest = max((x["seconds"] for x in v), default=0)
    return (f"SLO {args.slo_ms:g} ms met {r['slo_met_seconds']}/{r['measured_seconds']} s "
            f"({100 * (r['slo_attainment'] or 0):.1f} %; monitoring periods "
            f"{100 * (r['slo_attainment_periods'] or 0):.1f} %); {len(v)} violation(s), longest "
            f"{longest} s, worst {worst:.1f}x SLO; {r['node_seconds']:.0f} node-seconds, peak "
            f"{r['max_memory_nodes']} memory nodes; {r['errors']} failed requests")


def plot(result: Dict[str, Any], path: str) -> bool:
    """Latency against the SLO, throughput, and memory nodes over time, both runs."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    slo = result["args"]["slo_ms"]
    colors = {"autoscaled": "tab:blue", "static": "tab:orange"}
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for name, r in result["runs"].items():
        s = r["series"]
        ax1.plot([x["t"] for x in s], [x["mean_ms"] for x in s], color=colors[name],
                 label=f"{name}: SLO met {100 * (r['slo_attainment'] or 0):.0f} % of seconds")
        ax2.plot([x["t"] for x in s], [x["ops"] for x in s], color=colors[name], label=name)
        h = r["monitor"]
        ax3.step([x["t"] for x in h], [x["memory_nodes"] + x["memory_pending"] for x in h],
                 where="post", color=colors[name],
                 label=f"{name}: {r['node_seconds']:.0f} node-seconds")
    first = next(iter(result["runs"].values()))["series"]
    ax2.plot([x["t"] for x in first], [x["offered"] for x in first], "k:", label="offered")
    ax1.axhline(slo, color="red", linestyle="--", label=f"SLO {slo:g} ms")
    ax1.set_yscale("log")
    ax1.set_ylabel("mean latency per second (ms)")
    ax2.set_ylabel("ops/s")
    ax3.set_ylabel("memory nodes (incl. requested)")
    ax3.set_ylim(0, max(r["max_memory_nodes"] for r in result["runs"].values()) + 1)
    ax3.set_xlabel("seconds")
    start = 0.0
    for p in result["schedule"]:
        for ax in (ax1, ax2, ax3):
            ax.axvline(start, color="grey", linewidth=0.5)
        ax1.text(start + 1, 0.97, p["name"], fontsize=8, va="top",
                 transform=ax1.get_xaxis_transform())
        start += p["seconds"]
    for ax in (ax1, ax2, ax3):
        ax.legend(fontsize=8, loc="lower left")
    ax1.set_title("Response to a changing workload (cf. dissertation Fig. 3.6)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run (short phases, both runs in under a minute); its "
                        "figures mean nothing")
    p.add_argument("--start-nodes", type=int, default=3, help="memory nodes at the start "
                   "(and the static control's size)")
    p.add_argument("--service-rate", type=float, default=200.0,
                   help="capacity emulation: requests/s each worker thread serves at most "
                        "(0: off)")
    p.add_argument("--capacity", type=float, default=600.0,
                   help="without --service-rate: the starting cluster's capacity the loads "
                        "are fractions of (ops/s)")
    p.add_argument("--slo-ms", type=float, default=10.0,
                   help="latency SLO on the clients' mean latency (ms). Unloaded requests take "
                        "~1 ms here; a rate-limited worker queues them (M/D/1), so 10 ms (two "
                        "service times at 200/s) is met up to ~75 %% utilisation")
    p.add_argument("--light-load", type=float, default=0.25,
                   help="light phases: offered load as a fraction of the starting capacity")
    p.add_argument("--hotspot-load", type=float, default=0.45,
                   help="hotspot phase: offered load, fraction of the starting capacity (the "
                        "hottest key alone then exceeds one node's capacity)")
    p.add_argument("--spike-load", type=float, default=1.5,
                   help="spike phase: offered load, fraction of the starting capacity")
    p.add_argument("--light-zipf", type=float, default=0.5, help="light phases: Zipf exponent")
    p.add_argument("--hotspot-zipf", type=float, default=2.0, help="hotspot: Zipf exponent")
    p.add_argument("--spike-zipf", type=float, default=0.5, help="spike: Zipf exponent")
    p.add_argument("--light-seconds", type=float, default=30.0, help="first light phase (s)")
    p.add_argument("--hotspot-seconds", type=float, default=60.0, help="hotspot phase (s)")
    p.add_argument("--spike-seconds", type=float, default=120.0, help="spike phase (s)")
    p.add_argument("--end-seconds", type=float, default=90.0, help="last light phase (s)")
    p.add_argument("--warmup", type=int, default=2,
                   help="first seconds left out of the SLO figures")
    p.add_argument("--provisioning-delay", type=float, default=5.0,
                   help="seconds before a requested node starts (a VM boot)")
    p.add_argument("--period", type=float, default=1.5,
                   help="monitoring period T (s); PolicyConfig's local default")
    p.add_argument("--grace-period", type=float, default=12.0,
                   help="policy grace period after a node change (s); the local default")
    p.add_argument("--compute-bounds", type=float, nargs=2, default=[0.15, 0.6],
                   metavar=("C_LOWER", "C_UPPER"),
                   help="(C_lower, C_upper) on memory nodes' busy fraction. The paper's (0.05, "
                        "0.20) were tuned for network-bound EC2 nodes; with emulated service "
                        "the busy fraction is the utilisation, and the SLO holds up to ~0.75. "
                        "Under the Zipf 2 hotspot the nodes without the hottest key still serve "
                        "the next keys at 0.2-0.4, and while the first extra replica drains the "
                        "backlog every node briefly reads ~0.55: C_upper 0.6 reads both as skew "
                        "(replicate), where 0.3 and 0.5 added nodes in trial runs (hotspot 0.55). Light load "
                        "spread over the spike's nodes runs at ~0.1 (C_lower 0.15 lets nodes go)")
    p.add_argument("--min-nodes", type=int, default=0,
                   help="the policy's min_memory_nodes (0: --start-nodes, so scale-in stops at "
                        "the starting size and cost is compared with the same floor)")
    p.add_argument("--max-nodes", type=int, default=10, help="budget in nodes (max_nodes)")
    p.add_argument("--max-latency-ratio", type=float, default=3.0,
                   help="c: caps observed/SLO when sizing additions (paper and local default "
                        "1.5). The generator's clients are closed-loop under overload, so their "
                        "latency saturates near clients / throughput and observed/SLO "
                        "understates an overload: in a trial run c = 2 met the spike in two "
                        "additions a grace period apart (about 35 s over the SLO), c = 3 in one")
    p.add_argument("--hot-key-min-accesses", type=int, default=30,
                   help="a key with fewer accesses in a period is never hot (local default 10). "
                        "At 900 ops/s the Zipf 0.5 spike's top keys get ~15 accesses a period "
                        "and were replicated to most nodes on the floor alone")
    p.add_argument("--keys", type=int, default=1000, help="distinct keys")
    p.add_argument("--value-size", type=int, default=64, help="bytes per value")
    p.add_argument("--put-fraction", type=float, default=0.1, help="share of PUTs")
    p.add_argument("--processes", type=int, default=2, help="load generator processes")
    p.add_argument("--threads", type=int, default=10,
                   help="client threads per generator process (each one request in flight)")
    p.add_argument("--refresh-keys", type=int, default=10,
                   help="hottest keys whose addresses each client re-asks routing every period "
                        "(what the figures used before clients learned of new replicas; see load.py)")
    p.add_argument("--attempt-timeout", type=float, default=0.2,
                   help="seconds a client waits for a replica before asking routing again "
                        "(a request sent to a node that is leaving is lost)")
    p.add_argument("--control", choices=["yes", "no"], default="yes",
                   help="also run the static control")
    p.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"),
                   help="directory for the JSON")
    p.add_argument("--figures", default=os.path.join(ROOT, "benchmarks", "figures"),
                   help="directory for the PNG")
    args = p.parse_args(argv)
    if args.quick:
        args.light_seconds, args.hotspot_seconds = 5.0, 8.0
        args.spike_seconds, args.end_seconds = 8.0, 5.0
        args.keys, args.threads, args.grace_period = 300, 4, 4.0
        args.provisioning_delay = 1.0
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(argv)
    phases = schedule(args)
    log("phases: " + "; ".join(f"{p.name} {p.seconds:g} s at {p.rate:.0f} ops/s"
                               for p in phases))
    started = time.time()
    runs = {"autoscaled": run(args, True, phases)}
    if args.control == "yes":
        runs["static"] = run(args, False, phases)
    result = {"experiment": NAME, "args": vars(args),
              "schedule": [p.__dict__ for p in phases], "runs": runs,
              "wall_seconds": round(time.time() - started, 1)}
    if "static" in runs:
        a, s = runs["autoscaled"], runs["static"]
        result["cost_ratio"] = round(a["node_seconds"] / s["node_seconds"], 3) \
            if s["node_seconds"] else None
        log(f"cost: autoscaled {a['node_seconds']:.0f} vs static {s['node_seconds']:.0f} "
            f"node-seconds ({result['cost_ratio']}x)")
    for name, r in runs.items():
        log(f"{name:>10}: {summary_line(r, args)}")
        for v in r["violations"]:
            log(f"            violation at t={v['start']} s ({v['phase']}): {v['seconds']} s, "
                f"worst {v['worst_x_slo']:.1f}x SLO")
    write_outputs(result, NAME + ("_quick" if args.quick else ""), args.results,
                  args.figures, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
