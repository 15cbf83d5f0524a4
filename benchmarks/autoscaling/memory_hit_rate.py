"""Memory-tier hit rate under a moving hotspot (dissertation 3.5.5, Fig. 3.7), tiering vs static.

    python benchmarks/autoscaling/memory_hit_rate.py            # ~14 minutes
    python benchmarks/autoscaling/memory_hit_rate.py --quick    # smoke run, under a minute

A memory tier too small for the data set over a disk tier: one memory node of
`--memory-capacity` bytes and one disk node, `--keys` keys of `--value-size` bytes (several
times the memory tier's capacity). Autoscaling is off (elasticity, hot-key replication) and
tiering on, as in the paper: the question is only how quickly Anna finds the hot data.

Where the keys start: every key is written with the default placement (one memory and one
disk replica), so right after loading the memory tier holds all of it, far over its
capacity. The policy demotes the coldest keys under that pressure (Algorithm 1's LRU
fallback: above S_upper the coldest memory keys go, whatever their rate) until the tier is
under its target occupancy; the script waits for that (with a deadline), then starts the
load. The load is a steady `--rate` ops/s around one hotspot; after `--phase-seconds` the
hotspot moves to a largely non-overlapping set of keys, and again after as long. Hot disk
keys are promoted while they fit; once memory is at its target, a hotter disk key is promoted
by demoting colder memory keys to make room.

Runs, in one invocation: for each Zipf exponent of `--zipfs` (default 2, highly skewed, and 1,
moderately skewed), tiering on and a control with tiering switched off right after the same
initial demotion (the memory tier keeps whatever that left: a static placement). The y-axis
is the share of the workload's GETs that memory-tier workers answered, per second, as the
generator's clients see it (the address that answered each GET). The workers' own count
(the monitor status's `memory_get_share`, per monitoring period) is in the JSON too
(`phases_workers`); it also counts the cluster's metadata GETs on the memory tier. Writes `benchmarks/results/memory_hit_rate.json`
and `benchmarks/figures/memory_hit_rate.png`.
"""
from __future__ import annotations

import argparse
import dataclasses
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
                  prefill, run_load, write_outputs)

NAME = "memory_hit_rate"


def policy(args: argparse.Namespace) -> Any:
    """Tiering only: elasticity and hot-key replication off (3.5.5), local defaults else."""
    from anna_core.autoscale import PolicyConfig
    return PolicyConfig(elasticity=False, selective_replication=False, min_disk_nodes=1,
                        monitoring_period=args.period, max_key_actions=args.max_key_actions)


def wait_for_fit(cluster: Any, target: float, deadline: float, label: str) -> float:
    """Wait (at most `deadline` s) until the monitor reports the memory tier at or under
    `target` of its capacity; returns the seconds it took."""
    began = time.monotonic()
    # only statuses whose reports were all written after this call (the data loaded):
    # reporters write a quarter into a period, the monitor reads three quarters in
    fresh_after = time.time() + 1.5 * cluster.monitor.period
    shown = began
    last = None
    while time.monotonic() - began < deadline:
        status = cluster.monitor.latest or {}
        fraction = status.get("tiers", {}).get("memory", {}).get("storage_fraction")
        if fraction is not None and status.get("time", 0) > fresh_after:
            last = fraction
            if fraction <= target:
                return time.monotonic() - began
        if time.monotonic() - shown >= 5:
            shown = time.monotonic()
            log(f"  {label}: memory tier at "
                + (f"{100 * last:.0f} %" if last is not None else "? %")
                + f" of its capacity, demoting down to {100 * target:.0f} %")
        time.sleep(0.25)
    raise RuntimeError(f"{label}: the memory tier did not come under {100 * target:.0f} % of "
                       f"its capacity within {deadline:g} s (last seen "
                       f"{'?' if last is None else f'{100 * last:.0f} %'})")


def run(args: argparse.Namespace, zipf: float, tiering: bool) -> Dict[str, Any]:
    """One run: load, demote to fit, then the moving hotspot; tiering on or switched off."""
    import anna_core
    label = f"Zipf {zipf:g}, tiering {'on' if tiering else 'off'}"
    spec = LoadSpec(keys=args.keys, prefix="hr-", value_size=args.value_size,
                    put_fraction=args.put_fraction, refresh_keys=0,
                    report_period=args.period)
    phases = [Phase(f"hotspot {h + 1}", args.phase_seconds, args.rate, zipf, hotspot=h)
              for h in range(args.hotspots)]
    config = policy(args)
    log(f"{label}: 1 memory node ({args.memory_capacity} bytes) + 1 disk node, "
        f"{args.keys} keys x {args.value_size} bytes")
    with anna_core.LocalCluster(memory_threads=1, disk_threads=1, nodes=1, fault_tolerance=0,
                                pin_threads=False, autoscale=config, stop_timeout=20,
                                **emulation(0, args.memory_capacity)) as cluster:
        prefill(cluster, spec)
        fit = wait_for_fit(cluster, config.memory_target_occupancy, args.fit_deadline, label)
        demoted = sum(1 for r in cluster.monitor.overrides.values() if r.memory_global == 0)
        log(f"  {label}: memory under its target after {fit:.1f} s ({demoted} keys demoted)")
        if not tiering:   # from here on a static placement: nothing promoted or demoted
            cluster.monitor.engine.config = config.with_(tiering=False)
        spec = dataclasses.replace(spec, memory_addresses=tuple(
            a for n in cluster.node_ids if cluster.tier_of(n) == "memory"
            for a in cluster.worker_addresses(n)))
        total = sum(p.seconds for p in phases)

        def progress(elapsed: float) -> None:
            _, phase = phase_at(phases, elapsed)
            status = cluster.monitor.latest or {}
            share = status.get("memory_get_share")
            memory = status.get("tiers", {}).get("memory", {})
            moved = [a for a in status.get("actions", []) if a.startswith(("promote", "demote"))]
            log(f"  {label} t={elapsed:5.1f}s {phase.name if phase else 'end':<10} GETs from "
                f"memory {'-' if share is None else f'{100 * share:3.0f} %'}, memory at "
                f"{100 * (memory.get('storage_fraction') or 0):.0f} % of capacity, "
                f"{len(moved)} keys moved this period")
        out = run_load(cluster.routing_addresses, cluster.client_auth, spec, phases,
                       args.processes, args.threads, progress)
        history = monitor_series(list(cluster.monitor.history), out["start_wall"], total,
                                 args.period)
    resident = args.keys - demoted
    weights = [1.0 / (i + 1) ** zipf for i in range(args.keys)]
    ideal = sum(weights[:resident]) / sum(weights)
    log(f"  {label}: {resident} keys fit in memory; holding the {resident} hottest would serve "
        f"{100 * ideal:.0f} % of GETs from memory")
    result = {"zipf": zipf, "tiering": tiering, "fit_seconds": round(fit, 1),
              "resident_keys": resident, "ideal_share": round(ideal, 4),
              "demoted_before_load": demoted, "series": out["series"], "monitor": history,
              "errors": sum(s["errors"] for s in out["series"]),
              "phases": analyse(out["series"], phases, args.reach),
              "phases_workers": analyse_workers(history, phases, args.reach)}
    for p in result["phases"]:
        log(f"  {label} {p['phase']}: {_phase_line(p, args.reach)}")
    return result


def analyse(series: Sequence[Dict[str, Any]], phases: Sequence[Phase],
            reach: float) -> List[Dict[str, Any]]:
    """Per hotspot, from the workload's own GETs second by second: when the memory share
    first reached `reach`, and 90 % of the phase's level (seconds from the move to the end
    of the first second that did), the median share over the phase's second half (its
    level), and the largest."""
    out = []
    start = 0.0
    for p in phases:
        points = [(s["t"] + 1 - start, s["memory_get_share"]) for s in series
                  if start <= s["t"] < start + p.seconds and s["memory_get_share"] is not None]
        second_half = [v for t, v in points if t > p.seconds / 2]
        median = statistics.median(second_half) if second_half else None
        first = next((t for t, v in points if v >= reach), None)
        stable = None if median is None else next((t for t, v in points if v >= 0.9 * median),
                                                  None)
        out.append({"phase": p.name, "start": start,
                    "seconds_to_reach": first,
                    "seconds_to_90pct_of_median": stable,
                    "median_second_half": round(median, 4) if median is not None else None,
                    "max": round(max((v for _, v in points), default=0.0), 4),
                    "first_second": points[0][1] if points else None})
        start += p.seconds
    return out


def analyse_workers(history: Sequence[Dict[str, Any]], phases: Sequence[Phase],
            reach: float) -> List[Dict[str, Any]]:
    """As `analyse`, from the workers' reports (the monitor's `memory_get_share`, which also
    counts the cluster's own metadata GETs on the memory tier: the monitor's reads, and
    bursts of reads of the replication overrides every few periods, which make it swing
    between periods). Per hotspot, over the monitoring periods whose reports cover only that hotspot: when
    the memory share first reached `reach`, and 90 % of the phase's level (seconds from the
    move to the end of the first period that did; the first period wholly after a move ends
    2.25-3.75 s after it, so nothing shorter can be seen), the median share over the phase's
    second half (its level), and the largest."""
    out = []
    start = 0.0
    for p in phases:
        end = start + p.seconds
        points = [(h["window"][1] - start, h["memory_get_share"]) for h in history
                  if h["window"][0] >= start - 0.01 and h["window"][1] <= end + 0.01
                  and h["memory_get_share"] is not None]
        second_half = [s for t, s in points if t >= p.seconds / 2]
        median = statistics.median(second_half) if second_half else None
        first = next((t for t, s in points if s >= reach), None)
        stable = None if median is None else \
            next((t for t, s in points if s >= 0.9 * median), None)
        out.append({"phase": p.name, "start": start,
                    "seconds_to_reach": round(first, 1) if first is not None else None,
                    "seconds_to_90pct_of_median": round(stable, 1) if stable is not None
                    else None,
                    "median_second_half": round(median, 4) if median is not None else None,
                    "max": round(max((s for _, s in points), default=0.0), 4),
                    "first_period": round(points[0][1], 4) if points else None})
        start = end
    return out


def _phase_line(p: Dict[str, Any], reach: float) -> str:
    reached = (f"reached {100 * reach:.0f} % after {p['seconds_to_reach']:.1f} s"
               if p["seconds_to_reach"] is not None else f"never reached {100 * reach:.0f} %")
    median = p["median_second_half"]
    stable = p.get("seconds_to_90pct_of_median")
    return (f"{reached}; median over the second half "
            f"{'-' if median is None else f'{100 * median:.0f} %'}"
            + (f" (90 % of it after {stable:.1f} s)" if stable is not None else "")
            + f", max {100 * p['max']:.0f} %")


def plot(result: Dict[str, Any], path: str) -> bool:
    """Memory share of GETs over time, one line per run, hotspot moves marked."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    colors = {2.0: "tab:green", 1.0: "tab:blue"}
    fig, ax = plt.subplots(figsize=(10, 4.8))
    for r in result["runs"]:
        series = r["series"]
        color = colors.get(r["zipf"], None)
        ax.plot([x["t"] + 0.5 for x in series],
                [100 * x["memory_get_share"] if x["memory_get_share"] is not None else None
                 for x in series], color=color, linestyle="-" if r["tiering"] else ":",
                label=f"Zipf {r['zipf']:g}, " + ("tiering" if r["tiering"]
                                                 else "static placement (control)"))
    start = 0.0
    for i in range(result["args"]["hotspots"]):
        ax.axvline(start, color="grey", linewidth=0.5)
        ax.text(start + 1, 3, f"hotspot {i + 1}", fontsize=8)
        start += result["args"]["phase_seconds"]
    ax.set_ylim(0, 105)
    ax.set_xlabel("seconds (the workload's GETs, per second)")
    ax.set_ylabel("GETs served by the memory tier (%)")
    ax.set_title("Memory-tier hit rate with a moving hotspot (cf. dissertation Fig. 3.7)")
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run (Zipf 2 only, few keys, short phases); its figures mean "
                        "nothing")
    p.add_argument("--zipfs", type=float, nargs="+", default=[2.0, 1.0],
                   help="Zipf exponents, one tiered and one control run each")
    p.add_argument("--keys", type=int, default=500, help="distinct keys")
    p.add_argument("--value-size", type=int, default=8192,
                   help="bytes per value")
    p.add_argument("--memory-capacity", type=int, default=1024 * 1024,
                   help="the memory node's capacity in bytes (the data set is --keys x "
                        "--value-size)")
    p.add_argument("--rate", type=float, default=300.0, help="offered ops/s")
    p.add_argument("--put-fraction", type=float, default=0.1, help="share of PUTs")
    p.add_argument("--hotspots", type=int, default=3, help="hotspots (moves + 1)")
    p.add_argument("--phase-seconds", type=float, default=60.0, help="seconds per hotspot (the paper: 5 minutes)")
    p.add_argument("--reach", type=float, default=0.9,
                   help="report the seconds until the memory share first reaches this")
    p.add_argument("--period", type=float, default=1.5,
                   help="monitoring period T (s); PolicyConfig's local default")
    p.add_argument("--max-key-actions", type=int, default=100,
                   help="promotions/demotions per monitoring period (PolicyConfig default)")
    p.add_argument("--fit-deadline", type=float, default=180.0,
                   help="seconds the initial demotion may take before the run fails")
    p.add_argument("--processes", type=int, default=1, help="load generator processes")
    p.add_argument("--threads", type=int, default=6,
                   help="client threads per generator process")
    p.add_argument("--control", choices=["yes", "no"], default="yes",
                   help="also run each Zipf exponent with tiering switched off")
    p.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "results"),
                   help="directory for the JSON")
    p.add_argument("--figures", default=os.path.join(ROOT, "benchmarks", "figures"),
                   help="directory for the PNG")
    args = p.parse_args(argv)
    if args.quick:
        args.zipfs, args.keys, args.phase_seconds = [2.0], 150, 5.0
        args.memory_capacity = 512 * 1024
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(argv)
    started = time.time()
    runs = []
    for zipf in args.zipfs:
        runs.append(run(args, zipf, True))
        if args.control == "yes":
            runs.append(run(args, zipf, False))
    result = {"experiment": NAME, "args": vars(args), "runs": runs,
              "wall_seconds": round(time.time() - started, 1)}
    for r in runs:
        log(f"Zipf {r['zipf']:g}, tiering {'on ' if r['tiering'] else 'off'}: "
            f"initial demotion {r['fit_seconds']:.0f} s; {r['resident_keys']} keys fit in "
            f"memory (the best placement serves {100 * r['ideal_share']:.0f} % of GETs); "
            f"{r['errors']} failed requests")
        for p in r["phases"]:
            log(f"    {p['phase']}: {_phase_line(p, args.reach)}")
    write_outputs(result, NAME + ("_quick" if args.quick else ""), args.results,
                  args.figures, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
