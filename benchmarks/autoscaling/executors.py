"""Executor autoscaling: a load spike of DAG calls, with and without the autoscaler.

    python benchmarks/autoscaling/executors.py [--rounds 1] [--provisioning-delay 0]

Each round runs three clusters one after the other on the same offered load: **autoscaled**
(`LocalCluster(autoscale=...)`, starting with `--start-nodes` executor nodes; a call that
finds every worker busy waits at the scheduler and goes to the first free worker, on any
node), **placed at once** (the same, with the previous placement, `queue_calls=False`: every
call is placed at once on the least loaded worker and waits in that worker's queue, so calls
queued before a node is added stay on the old nodes) and the **control**, a static cluster
of the starting size. The load is open-loop calls of a
two-function DAG (`a -> b`, each function sleeping `--function-seconds`: waiting, as an I/O
bound function does, so that extra nodes add capacity even on a 2-core machine), paced at
`--base-rate` calls/s, `--spike-rate` from `--spike-at` for `--spike-seconds`, then back at
the base rate until `--seconds` (long enough for the scale-in).

Measured per autoscaled run, from the spike's start: the **decision** (the first `AddNodes`
the autoscaler logged), **capacity serving** (the first sample in which a node added after the
spike runs a call), and **latency restored** (the start of the first second, from which on
until the spike ends, the p99 latency of the calls sent in each second is under
`--latency-target`). Per second: executor nodes, calls queued on the nodes, p50 and p99 by
send time. Every call must complete: `lost` counts calls that failed or never answered
(goal 0). Goals (the issue): decision within 6 s; with a provisioning delay of 0, latency
restored within 10 s; nothing lost during scale-in.

Writes `<out>/autoscaling_executors.json` (default `--out benchmarks/results`) and
`<figures>/autoscaling_executors.png` (default `--figures benchmarks/figures`; the last
round), `..._delay<S>` with a provisioning delay, and prints progress while it runs.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

DAG = "autoscale_ab"


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def rate_at(t: float, args: argparse.Namespace) -> float:
    """Offered calls/s at `t` seconds into the run."""
    spiking = args.spike_at <= t < args.spike_at + args.spike_seconds
    return args.spike_rate if spiking else args.base_rate


def percentile(values: List[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- one run ---------------------------------------------------------------------------------

class Load:
    """Open-loop calls of the DAG at the offered rate; a collector notes when each finishes."""

    def __init__(self, client: Any, args: argparse.Namespace, start: float) -> None:
        self.client, self.args, self.start = client, args, start
        self.sent: List[Tuple[float, Any]] = []          # (sent at, future), in order
        self.finished: Dict[int, Tuple[float, bool]] = {}  # index -> (finished at, ok)
        self.errors: List[str] = []
        self._lock = threading.Lock()
        self._sending_done = threading.Event()

    def send(self) -> None:
        end = self.start + self.args.seconds
        next_at = self.start
        i = 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if now < next_at:
                time.sleep(min(next_at - now, 0.05))     # pacing the offered load
                continue
            future = self.client.call_dag(DAG, {"a": [i]}, timeout=self.args.call_timeout)
            with self._lock:
                self.sent.append((now, future))
            i += 1
            next_at += 1.0 / rate_at(next_at - self.start, self.args)
        self._sending_done.set()

    def collect(self) -> None:
        """Until every sent call is finished (or past the call timeout after sending ends)."""
        pending: List[int] = []
        seen = 0
        give_up: Optional[float] = None
        while True:
            with self._lock:
                fresh = list(range(seen, len(self.sent)))
                seen = len(self.sent)
            pending.extend(fresh)
            if pending:
                self.sent[pending[0]][1].wait(0.02)     # reads every answer that arrived
            elif self._sending_done.is_set():
                return
            else:
                self._sending_done.wait(0.02)
            now = time.monotonic()
            still = []
            for j in pending:
                future = self.sent[j][1]
                if future.done():
                    try:
                        ok = future.get(0) == j * 2 + 1
                        if not ok:
                            self.errors.append(f"call {j}: wrong result")
                    except Exception as e:          # counted as lost, with why
                        ok = False
                        self.errors.append(f"call {j}: {type(e).__name__}: {e}")
                    self.finished[j] = (now, ok)
                else:
                    still.append(j)
            pending = still
            if self._sending_done.is_set() and give_up is None:
                give_up = now + self.args.call_timeout + 5
            if give_up is not None and now > give_up:
                for j in pending:
                    self.errors.append(f"call {j}: no answer")
                return


def monitor(cluster: Any, start: float, stop: threading.Event,
            out: List[Dict[str, Any]]) -> None:
    """Every 0.25 s: executor nodes and what the schedulers see queued and running."""
    from cloudburst.autoscaler import SchedulerLink, build_sample
    link = SchedulerLink(cluster.scheduler_addresses, cluster.cluster_auth)
    try:
        while not stop.wait(0.25):
            sample = build_sample(link.statuses())
            out.append({"t": time.monotonic() - start,
                        "nodes": len(cluster.executor_node_ids()),
                        "draining": sum(1 for n in sample.nodes if n.draining),
                        "queued": sum(n.queued for n in sample.nodes) + sample.backlog,
                        "running": sum(n.in_flight for n in sample.nodes),
                        "serving": sorted(n.node_id for n in sample.nodes
                                          if n.in_flight or n.utilisation > 0.05)})
    finally:
        link.close()


def run(args: argparse.Namespace, autoscale: bool, queue_calls: bool = True) -> Dict[str, Any]:
    from cloudburst import LocalCluster
    from cloudburst.executor_policy import ExecutorPolicyConfig
    name = ("autoscaled" if queue_calls else "placed at once") if autoscale else "control"
    config = ExecutorPolicyConfig(stable_window=args.stable_window,
                                  panic_window=args.panic_window, tick=args.tick,
                                  min_nodes=args.start_nodes, max_nodes=args.max_nodes)
    standby = {"auto": None, "on": True, "off": False}[args.standby]
    with LocalCluster(executor_nodes=args.start_nodes, executors_per_node=args.workers_per_node,
                      autoscale=config if autoscale else None,
                      provisioning_delay=args.provisioning_delay,
                      queue_calls=queue_calls, standby_node=standby) as cluster:
        client = cluster.client()
        wait = args.function_seconds

        def a(lib, x):
            import time
            time.sleep(wait)
            return x

        def b(lib, x):
            import time
            time.sleep(wait)
            return 2 * x + 1

        client.register(a, "a")
        client.register(b, "b")
        client.register_dag(DAG, ["a", "b"], [("a", "b")])
        client.call_dag(DAG, {"a": [0]}).get(timeout=30)           # warm every path once
        # an idle pause, so that what the warm-up and the start looked like to the autoscaler
        # (a cold first call) has left its windows before the load starts
        time.sleep(args.settle)
        start = time.monotonic()
        initial = set(cluster.executor_node_ids())
        load = Load(client, args, start)
        samples: List[Dict[str, Any]] = []
        stop = threading.Event()
        threads = [threading.Thread(target=load.send, daemon=True),
                   threading.Thread(target=load.collect, daemon=True),
                   threading.Thread(target=monitor, args=(cluster, start, stop, samples),
                                    daemon=True)]
        for t in threads:
            t.start()
        log(f"{name}: running {args.seconds:g} s (spike {args.base_rate:g} -> "
            f"{args.spike_rate:g} calls/s at {args.spike_at:g} s for {args.spike_seconds:g} s)")
        deadline = start + args.seconds + args.call_timeout + 30
        next_report = start + 5
        while threads[1].is_alive() and time.monotonic() < deadline:
            threads[1].join(0.5)
            if time.monotonic() >= next_report:
                next_report += 5
                last = samples[-1] if samples else {}
                log(f"{name}: t={time.monotonic() - start:5.1f} s  sent {len(load.sent)}  "
                    f"finished {len(load.finished)}  nodes {last.get('nodes', '?')}  "
                    f"queued {last.get('queued', '?')}")
        stop.set()
        threads[2].join(5)
        actions = []
        if autoscale and cluster.autoscaler is not None:
            actions = [{"t": a.at - start, "kind": type(a.action).__name__,
                        "reason": a.action.reason, "ok": a.ok, "error": a.error}
                       for a in cluster.autoscaler.history
                       if type(a.action).__name__ != "Note"]
    return summarize(name, args, load, samples, actions, initial)


def summarize(name: str, args: argparse.Namespace, load: Load, samples: List[Dict[str, Any]],
              actions: List[Dict[str, Any]], initial: set) -> Dict[str, Any]:
    calls = []
    for j, (sent_at, _) in enumerate(load.sent):
        done = load.finished.get(j)
        calls.append({"sent": sent_at - load.start,
                      "latency": None if done is None else done[0] - sent_at,
                      "ok": bool(done and done[1])})
    seconds = []
    for s in range(int(args.seconds)):
        lat = [c["latency"] for c in calls if s <= c["sent"] < s + 1 and c["ok"]]
        seconds.append({"t": s, "sent": sum(1 for c in calls if s <= c["sent"] < s + 1),
                        "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)})
    spike_end = args.spike_at + args.spike_seconds
    spike_lat = [c["latency"] for c in calls
                 if args.spike_at <= c["sent"] < spike_end and c["ok"]]
    result: Dict[str, Any] = {
        "run": name, "calls": len(calls), "lost": sum(1 for c in calls if not c["ok"]),
        "errors": load.errors[:20], "spike_p50": percentile(spike_lat, 0.5),
        "spike_p99": percentile(spike_lat, 0.99),
        "max_nodes": max((s["nodes"] for s in samples), default=None),
        "end_nodes": samples[-1]["nodes"] if samples else None,
        "seconds": seconds, "samples": samples, "actions": actions}
    adds = [a["t"] for a in actions if a["kind"] == "AddNodes" and a["t"] >= args.spike_at]
    result["decision_s"] = adds[0] - args.spike_at if adds else None
    serving = [s["t"] for s in samples if s["t"] >= args.spike_at
               and set(s["serving"]) - initial]
    result["capacity_s"] = serving[0] - args.spike_at if serving else None
    restored = None
    spike_seconds = [s for s in seconds if args.spike_at <= s["t"] < spike_end]
    for i, s in enumerate(spike_seconds):
        if all(x["p99"] is not None and x["p99"] <= args.latency_target
               for x in spike_seconds[i:]):
            restored = s["t"] - args.spike_at
            break
    result["restored_s"] = restored
    result["removed"] = sum(1 for a in actions if a["kind"] == "Remove")
    # nodes when the spike began: the autoscaler sometimes adds one at the very start
    before = [s["nodes"] for s in samples if s["t"] <= args.spike_at]
    result["nodes_at_spike"] = before[-1] if before else None
    return result


# ---- report ----------------------------------------------------------------------------------

def plot(rounds: List[Dict[str, Any]], args: argparse.Namespace, path: str,
         index: int = -1) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    auto = rounds[index]["autoscaled"]
    runs = [(auto, "-")] + [(rounds[index][k], style) for k, style in
                            (("placed at once", "-."), ("control", "--")) if k in rounds[index]]
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    ax = axes[0]
    for r, style in runs:
        ax.plot([s["t"] for s in r["samples"]], [s["nodes"] for s in r["samples"]], style,
                label=f"executor nodes ({r['run']})")
    ax.set_ylabel("executor nodes")
    rate = ax.twinx()
    rate.plot([s["t"] for s in auto["seconds"]], [s["sent"] for s in auto["seconds"]], ":",
              color="grey", label="offered calls/s", drawstyle="steps-post")
    rate.set_ylabel("calls/s sent")
    ax.legend(loc="upper left")
    ax = axes[1]
    for r, style in runs:
        ts = [s["t"] + 0.5 for s in r["seconds"] if s["p99"] is not None]
        ax.plot(ts, [s["p50"] for s in r["seconds"] if s["p99"] is not None], style,
                label=f"p50 {r['run']}")
        ax.plot(ts, [s["p99"] for s in r["seconds"] if s["p99"] is not None], style,
                label=f"p99 {r['run']}")
    ax.axhline(args.latency_target, color="red", linewidth=0.8, label="latency target")
    ax.set_yscale("log")
    ax.set_ylabel("latency (s), by send time")
    ax.legend(fontsize=7)
    ax = axes[2]
    for r, style in runs:
        ax.plot([s["t"] for s in r["samples"]], [s["queued"] for s in r["samples"]], style,
                label=f"calls queued ({r['run']})")
    ax.set_ylabel("calls queued (nodes + scheduler)")
    ax.set_xlabel("seconds since the load started")
    ax.legend(fontsize=7)
    for ax in axes:
        ax.axvspan(args.spike_at, args.spike_at + args.spike_seconds, color="orange", alpha=0.1)
        for key, colour in (("decision_s", "green"), ("capacity_s", "blue"),
                            ("restored_s", "purple")):
            if auto[key] is not None:
                ax.axvline(args.spike_at + auto[key], color=colour, linewidth=0.8)
    axes[0].set_title(f"executor autoscaling: spike {args.base_rate:g} -> {args.spike_rate:g} "
                      f"calls/s, provisioning delay {args.provisioning_delay:g} s "
                      f"(green: decision, blue: capacity serving, purple: latency restored)",
                      fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(rounds: List[Dict[str, Any]]) -> str:
    """Every round's spike p50 / p99 per way, with the medians (a markdown table)."""
    ways = [w for w in ("autoscaled", "placed at once", "control") if w in rounds[0]]
    names = {"autoscaled": "follows capacity", "placed at once": "placed at once (before)",
             "control": "static control"}

    def cell(r: Dict[str, Any], way: str) -> str:
        x = r[way]
        text = f"{fmt(x['spike_p50'])} / {fmt(x['spike_p99'])} s"
        if way != "control":
            text += f", nodes at the spike {x['nodes_at_spike']}, serving {fmt(x['capacity_s'])} s"
        return text

    lines = ["| round | " + " | ".join(names[w] + ": p50 / p99" for w in ways) + " |",
             "|---|" + "---|" * len(ways)]
    for i, r in enumerate(rounds):
        lines.append(f"| {i + 1} | " + " | ".join(cell(r, w) for w in ways) + " |")
    lines.append("| median | " + " | ".join(
        f"**{fmt(median([r[w]['spike_p50'] for r in rounds]))} / "
        f"{fmt(median([r[w]['spike_p99'] for r in rounds]))} s**" for w in ways) + " |")
    return "\n".join(lines)


def fmt(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def median(values: List[Optional[float]]) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds of (autoscaled, control); medians over rounds are reported")
    p.add_argument("--start-nodes", type=int, default=1,
                   help="executor nodes at the start (and the control's static size)")
    p.add_argument("--workers-per-node", type=int, default=2, help="workers per executor node")
    p.add_argument("--max-nodes", type=int, default=4, help="the autoscaler's upper bound")
    p.add_argument("--function-seconds", type=float, default=0.05,
                   help="each of the DAG's two functions sleeps this long (s)")
    p.add_argument("--base-rate", type=float, default=6.0, help="offered calls/s off the spike")
    p.add_argument("--spike-rate", type=float, default=30.0, help="offered calls/s in the spike")
    p.add_argument("--spike-at", type=float, default=10.0, help="when the spike starts (s)")
    p.add_argument("--spike-seconds", type=float, default=20.0, help="how long it lasts (s)")
    p.add_argument("--seconds", type=float, default=65.0,
                   help="length of each run (s); leave room after the spike for scale-in")
    p.add_argument("--latency-target", type=float, default=0.5,
                   help="p99 latency (s) that counts as restored")
    p.add_argument("--provisioning-delay", type=float, default=0.0,
                   help="seconds between the autoscaler asking for a node and its process "
                        "starting (stands in for a VM or pod boot)")
    p.add_argument("--stable-window", type=float, default=15.0,
                   help="the policy's stable window (s)")
    p.add_argument("--panic-window", type=float, default=1.5,
                   help="the policy's panic window (s)")
    p.add_argument("--tick", type=float, default=0.5, help="the autoscaler's sampling period (s)")
    p.add_argument("--call-timeout", type=float, default=60.0,
                   help="a call without an answer this long (s) counts as lost")
    p.add_argument("--settle", type=float, default=0.0,
                   help="seconds of idleness between the warm-up call and the load")
    p.add_argument("--standby", choices=("auto", "on", "off"), default="auto",
                   help="LocalCluster(standby_node=): a spare node started ahead (auto: on "
                        "with the autoscaler)")
    p.add_argument("--no-control", action="store_true", help="skip the static control runs")
    p.add_argument("--no-previous", action="store_true",
                   help="skip the autoscaled runs with the previous placement (calls placed "
                        "at once, queue_calls=False)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"),
                   help="directory for the JSON results")
    p.add_argument("--figures", default=os.path.join(ROOT, "benchmarks", "figures"),
                   help="directory for the PNG figure")
    p.add_argument("--tag", default="",
                   help="suffix of the output files' names (keeps another run's figure)")
    p.add_argument("--log-autoscaler", action="store_true",
                   help="print the autoscaler's INFO log (every decision with its reason)")
    p.add_argument("--replot", default=None, metavar="JSON",
                   help="only draw the figure of round --plot-round of a results file")
    p.add_argument("--plot-round", type=int, default=-1,
                   help="which round the figure shows (default: the last)")
    args = p.parse_args(argv)
    if args.replot:
        with open(args.replot) as f:
            saved = json.load(f)
        png = os.path.splitext(args.replot)[0] + ".png" if not args.figures else os.path.join(
            args.figures, os.path.basename(os.path.splitext(args.replot)[0]) + ".png")
        plot(saved["rounds"], argparse.Namespace(**saved["args"]), png, args.plot_round)
        log(f"wrote {png}")
        return 0
    if args.log_autoscaler:
        logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("cloudburst.autoscale").setLevel(logging.INFO)
    rounds = []
    for i in range(args.rounds):
        log(f"round {i + 1}/{args.rounds}")
        r = {"autoscaled": run(args, True)}
        if not args.no_previous:
            r["placed at once"] = run(args, True, queue_calls=False)
        if not args.no_control:
            r["control"] = run(args, False)
        for name, res in r.items():
            log(f"round {i + 1} {name}: decision {res['decision_s']} s, capacity "
                f"{res['capacity_s']} s, restored {res['restored_s']} s, spike p50 "
                f"{res['spike_p50']} p99 {res['spike_p99']}, nodes max {res['max_nodes']} "
                f"end {res['end_nodes']}, removed {res['removed']}, calls {res['calls']}, "
                f"lost {res['lost']}")
        rounds.append(r)
    summary = {k: median([r["autoscaled"][k] for r in rounds])
               for k in ("decision_s", "capacity_s", "restored_s", "spike_p50", "spike_p99")}
    summary["lost"] = sum(r[n]["lost"] for r in rounds for n in r)
    if not args.no_control:
        summary["control_spike_p50"] = median([r["control"]["spike_p50"] for r in rounds])
        summary["control_spike_p99"] = median([r["control"]["spike_p99"] for r in rounds])
        summary["control_restored_s"] = median([r["control"]["restored_s"] for r in rounds])
    if not args.no_previous:
        for k in ("capacity_s", "restored_s", "spike_p50", "spike_p99"):
            summary[f"at_once_{k}"] = median([r["placed at once"][k] for r in rounds])
    summary["max_nodes"] = [r["autoscaled"]["max_nodes"] for r in rounds]
    summary["end_nodes"] = [r["autoscaled"]["end_nodes"] for r in rounds]
    log(f"medians over {args.rounds} round(s): {json.dumps(summary)}")
    goals = {"decision within 6 s": (summary["decision_s"] or 1e9) <= 6,
             "no call lost": summary["lost"] == 0}
    if args.provisioning_delay == 0:
        goals["latency restored within 10 s"] = (summary["restored_s"] is not None
                                                 and summary["restored_s"] <= 10)
    for goal, met in goals.items():
        log(f"goal {goal}: {'met' if met else 'MISSED'}")
    print(table(rounds), flush=True)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.figures, exist_ok=True)
    # a run with a provisioning delay does not overwrite the figures of one without
    name = "autoscaling_executors" + (f"_delay{args.provisioning_delay:g}"
                                      if args.provisioning_delay else "") + \
        (f"_{args.tag}" if args.tag else "")
    path = os.path.join(args.out, f"{name}.json")
    with open(path, "w") as f:
        json.dump({"args": vars(args), "summary": summary, "goals": goals, "rounds": rounds},
                  f, indent=1)
    log(f"wrote {path}")
    png = os.path.join(args.figures, f"{name}.png")
    plot(rounds, args, png, args.plot_round)
    log(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
