"""The load generator of the autoscaling benchmarks: phased, Zipf-skewed, paced, reporting latency.

A *schedule* is a list of `Phase`s (length, offered ops/s, Zipf exponent, which hotspot).
`run_load` starts `processes` generator processes of `threads` threads each; every thread is
an `anna_core.Client` created with `report_period=T`, so it publishes its request latencies
to the cluster's monitor exactly as an application's client does, and the policy compares
them with the SLO. Each thread offers its share of the phase's rate open-loop, as a Poisson process
(exponential gaps from a random start: threads paced in step would arrive in bursts that
queue at a rate-limited worker; a thread that falls behind catches up at most one second's
worth; it has one request in flight at a time,
so under overload the generator behaves like `processes x threads` closed-loop clients, as
the paper's 320 single-threaded clients did).

Keys: `keys` names `<prefix><i>`. A phase draws a rank from Zipf(`zipf`) over all keys and
maps it to a key through a fixed random permutation shifted by `hotspot x keys / 3`, so the
hot keys of two hotspots are different keys (largely non-overlapping, as in 3.5.5) and are
spread over the hash ring. `put_fraction` of the operations are PUTs of `value_size` bytes,
the rest GETs.

Clients re-ask routing for a key when a worker's answer says the key has more replicas than
they cached (`KeyTuple.replicas`). The figures in benchmarks/README.md were measured before
that existed; then, every thread re-asked routing for the addresses of its phase's
`refresh_keys` hottest keys every `refresh_period` seconds (0 keys: never), which is kept as an
option.

Every request's completion time, latency and outcome are recorded; `run_load` returns them
per second (ops, errors, mean / p50 / p99 latency, the phase). With `memory_addresses` (the
memory-tier workers' addresses), each GET also records whether a memory worker answered it
(the client's cached addresses for the key after the GET, which a redirect updates), giving a
per-second memory hit rate of the workload's own GETs. `slo_seconds` and
`violations` turn that series into the SLO figures the scripts report.
"""
from __future__ import annotations

import bisect
import math
import multiprocessing as mp
import random
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["Phase", "LoadSpec", "run_load", "key_name", "hot_keys", "slo_seconds",
           "violations", "log", "phase_at", "emulation", "prefill", "write_outputs",
           "monitor_series"]


def log(text: str) -> None:
    """Progress output: a timestamped line, flushed."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


@dataclass(frozen=True)
class Phase:
    """One stretch of the workload: `seconds` long, `rate` ops/s offered over all threads,
    keys drawn Zipf(`zipf`) around hotspot number `hotspot`."""

    name: str
    seconds: float
    rate: float
    zipf: float
    hotspot: int = 0


@dataclass(frozen=True)
class LoadSpec:
    """What every generator thread needs to know."""

    keys: int
    prefix: str = "k"
    value_size: int = 256
    put_fraction: float = 0.1
    refresh_keys: int = 10
    refresh_period: float = 1.5
    client_timeout: float = 2.0
    attempt_timeout: float = 0.2
    report_period: Optional[float] = 1.5
    warm: bool = True
    memory_addresses: Tuple[str, ...] = ()


def key_name(spec: LoadSpec, index: int) -> str:
    """The name of key number `index`."""
    return f"{spec.prefix}{index}"


def phase_at(schedule: Sequence[Phase], elapsed: float) -> Tuple[int, Optional[Phase]]:
    """The index and phase running `elapsed` seconds into the schedule ((len, None) after)."""
    start = 0.0
    for i, phase in enumerate(schedule):
        if elapsed < start + phase.seconds:
            return i, phase
        start += phase.seconds
    return len(schedule), None


class _Keys:
    """Zipf rank -> key index, per (exponent, hotspot), deterministic for a key count."""

    def __init__(self, n: int, seed: int = 7) -> None:
        self.n = n
        self.perm = list(range(n))
        random.Random(seed).shuffle(self.perm)
        self._cdfs: Dict[float, List[float]] = {}

    def cdf(self, s: float) -> List[float]:
        if s not in self._cdfs:
            weights = [1.0 / (i + 1) ** s for i in range(self.n)]
            total, acc, out = sum(weights), 0.0, []
            for w in weights:
                acc += w
                out.append(acc / total)
            out[-1] = 1.0
            self._cdfs[s] = out
        return self._cdfs[s]

    def index(self, rank: int, hotspot: int) -> int:
        return (self.perm[rank] + hotspot * (self.n // 3)) % self.n

    def draw(self, rng: random.Random, s: float, hotspot: int) -> int:
        return self.index(bisect.bisect_left(self.cdf(s), rng.random()), hotspot)


def hot_keys(spec: LoadSpec, phase: Phase, count: int) -> List[str]:
    """The `count` most popular keys of `phase`, hottest first."""
    keys = _Keys(spec.keys)
    return [key_name(spec, keys.index(r, phase.hotspot)) for r in range(min(count, spec.keys))]


class _Start:
    """The start signal a generator process's threads wait for, and their warm-up count."""

    def __init__(self, threads: int) -> None:
        self.at = 0.0
        self.go = threading.Event()
        self.warm = threading.Semaphore(0)
        self.threads = threads


def _thread(routing: Sequence[str], auth: Any, spec: LoadSpec, schedule: Sequence[Phase],
            start: _Start, share: float, seed: int, out: List[Tuple[float, float, bool]],
            stop: threading.Event) -> None:
    import anna_core
    memory = frozenset(spec.memory_addresses)
    client = anna_core.Client(list(routing), auth=auth, timeout=spec.client_timeout, retries=1,
                              attempt_timeout=spec.attempt_timeout,
                              report_period=spec.report_period)
    rng = random.Random(seed)
    keys = _Keys(spec.keys)
    value = b"v" * spec.value_size
    total = sum(p.seconds for p in schedule)
    current = -1
    try:
        # Warm the address cache (an application's client is long-lived): no first-touch
        # routing lookups inside the measured window. Lookups are not recorded latency.
        for k in range(spec.keys if spec.warm else 0):
            if stop.is_set():
                break
            client.addresses(key_name(spec, k))
        start.warm.release()
        while not start.go.wait(0.1):
            if stop.is_set():
                return
        start_at = start.at
        next_at = refresh_at = start_at
        while time.time() < start_at and not stop.is_set():   # all threads start together
            stop.wait(min(0.05, max(0.0, start_at - time.time())))
        while not stop.is_set():
            now = time.time()
            elapsed = now - start_at
            if elapsed >= total:
                break
            index, phase = phase_at(schedule, elapsed)
            if phase is None:
                break
            rate = phase.rate * share
            if index != current:   # a random first gap: threads must not fire in step
                current, refresh_at = index, now
                next_at = now + (rng.expovariate(rate) if rate > 0 else 0.0)
            if rate <= 0:
                stop.wait(0.05)
                continue
            if next_at > now:
                stop.wait(min(next_at - now, 0.5))
                if time.time() < next_at:
                    continue
            next_at = max(next_at, time.time() - 1.0) + rng.expovariate(rate)
            if spec.refresh_keys and time.time() >= refresh_at:
                refresh_at = time.time() + spec.refresh_period
                for r in range(min(spec.refresh_keys, spec.keys)):
                    try:
                        client.addresses(key_name(spec, keys.index(r, phase.hotspot)),
                                         refresh=True)
                    except anna_core.AnnaError:
                        break
            key = key_name(spec, keys.draw(rng, phase.zipf, phase.hotspot))
            begin = time.time()
            ok = True
            tier = -1         # 1: a GET served by a memory worker, 0: by another, -1: not a GET
            try:
                if rng.random() < spec.put_fraction:
                    client.put(key, value)
                else:
                    client.get(key)
                    if memory:   # the addresses that answered (a redirect updates them)
                        tier = int(all(a in memory for a in client.addresses(key)))
            except anna_core.KeyNotFound:
                pass
            except anna_core.AnnaError:
                ok = False
            end = time.time()
            out.append((end - start_at, end - begin, ok, tier))
    finally:
        client.close()


def _process(routing: Sequence[str], auth: Any, spec: LoadSpec, schedule: Sequence[Phase],
             threads: int, share: float, seed: int, conn: Any, warm_deadline: float) -> None:
    """One generator process: `threads` paced client threads. Says "ready" once every thread
    has warmed its client, receives the start time, runs, and sends back its records."""
    stop = threading.Event()
    start = _Start(threads)
    outs: List[List[Tuple[float, float, bool, int]]] = [[] for _ in range(threads)]
    workers = [threading.Thread(target=_thread, args=(routing, auth, spec, schedule, start,
                                                      share, seed * 1000 + i, outs[i], stop),
                                daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    try:
        give_up = time.monotonic() + warm_deadline
        for _ in range(threads):
            if not start.warm.acquire(timeout=max(0.1, give_up - time.monotonic())):
                raise RuntimeError(f"generator threads not warm within {warm_deadline:g} s")
        conn.send("ready")
        if not conn.poll(warm_deadline + 30):
            raise RuntimeError("no start time from the benchmark")
        start.at = float(conn.recv())
        start.go.set()
        total = sum(p.seconds for p in schedule)
        deadline = start.at + total + spec.client_timeout * 4 + 10
        for w in workers:
            w.join(max(0.1, deadline - time.time()))
    finally:
        stop.set()
    records = [r for o in outs for r in o]
    conn.send(records)
    conn.close()


def _per_second(records: Sequence[Tuple[float, float, bool, int]], schedule: Sequence[Phase]
                ) -> List[Dict[str, Any]]:
    seconds = int(math.ceil(sum(p.seconds for p in schedule)))
    buckets: List[List[Tuple[float, bool, int]]] = [[] for _ in range(seconds)]
    for done, latency, ok, tier in records:
        if 0 <= done < seconds:
            buckets[int(done)].append((latency, ok, tier))
    series = []
    for t, bucket in enumerate(buckets):
        lat = sorted(l for l, ok, _ in bucket if ok)
        gets = sum(1 for _, _, tier in bucket if tier >= 0)
        memory_gets = sum(1 for _, _, tier in bucket if tier == 1)
        _, phase = phase_at(schedule, t + 0.5)

        def q(x: float) -> Optional[float]:
            return round(lat[min(len(lat) - 1, int(x * len(lat)))] * 1e3, 3) if lat else None
        series.append({"t": t, "phase": phase.name if phase else None,
                       "offered": phase.rate if phase else 0.0, "ops": len(lat),
                       "errors": sum(1 for _, ok, _ in bucket if not ok),
                       "memory_get_share": round(memory_gets / gets, 4) if gets else None,
                       "mean_ms": round(statistics.fmean(lat) * 1e3, 3) if lat else None,
                       "p50_ms": q(0.5), "p99_ms": q(0.99)})
    return series


def run_load(routing: Sequence[str], auth: Any, spec: LoadSpec, schedule: Sequence[Phase],
             processes: int = 2, threads: int = 8,
             progress: Optional[Callable[[float], None]] = None,
             progress_every: float = 5.0, warm_deadline: float = 90.0) -> Dict[str, Any]:
    """Run `schedule` against the cluster at `routing`; returns {"series": per second,
    "start_wall": when second 0 began (time.time()), "schedule": the phases}.

    Every client first looks up the addresses of every key (`spec.warm`), within
    `warm_deadline` seconds; second 0 starts once all are warm. `progress(elapsed)` is
    called about every `progress_every` seconds while the load runs.
    Every generator process is stopped (terminated if it overstays its deadline) before
    this returns or raises."""
    ctx = mp.get_context("spawn")
    total = sum(p.seconds for p in schedule)
    share = 1.0 / (processes * threads)
    pipes, procs = [], []
    try:
        for i in range(processes):
            parent, child = ctx.Pipe(duplex=True)
            p = ctx.Process(target=_process, args=(list(routing), auth, spec, list(schedule),
                                                   threads, share, i + 1, child, warm_deadline),
                            daemon=True)
            p.start()
            child.close()
            pipes.append(parent)
            procs.append(p)
        for conn, p in zip(pipes, procs):   # every client warm before anyone starts
            if not conn.poll(warm_deadline + 30) or conn.recv() != "ready":
                raise RuntimeError(f"load generator {p.pid} was not ready within "
                                   f"{warm_deadline + 30:g} s")
        start_at = time.time() + 0.5
        for conn in pipes:
            conn.send(start_at)
        shown = -progress_every
        while time.time() < start_at + total:
            elapsed = time.time() - start_at
            if progress is not None and elapsed >= shown + progress_every:
                shown = elapsed
                progress(elapsed)
            time.sleep(0.25)
        records: List[Tuple[float, float, bool, int]] = []
        for conn, p in zip(pipes, procs):
            if not conn.poll(spec.client_timeout * 4 + 30):
                raise RuntimeError(f"load generator {p.pid} sent no results within its deadline")
            records.extend(conn.recv())
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join(5)
    return {"series": _per_second(records, schedule), "start_wall": start_at,
            "schedule": [asdict(p) for p in schedule]}


def slo_seconds(series: Sequence[Dict[str, Any]], slo_ms: float,
                skip: int = 0) -> Tuple[int, int]:
    """(seconds meeting the SLO, seconds with requests), from second `skip` on. A second
    meets it when its mean latency is at most `slo_ms` and no request failed."""
    met = total = 0
    for s in series[skip:]:
        if s["ops"] == 0 and s["errors"] == 0:
            continue
        total += 1
        if s["errors"] == 0 and s["mean_ms"] is not None and s["mean_ms"] <= slo_ms:
            met += 1
    return met, total


def violations(series: Sequence[Dict[str, Any]], slo_ms: float,
               skip: int = 0) -> List[Dict[str, Any]]:
    """Each maximal run of seconds over the SLO: start, length (s), worst mean latency as a
    multiple of the SLO, phase it began in."""
    out: List[Dict[str, Any]] = []
    run: Optional[Dict[str, Any]] = None
    for s in series[skip:]:
        if s["ops"] == 0 and s["errors"] == 0:
            continue
        bad = s["errors"] > 0 or s["mean_ms"] is None or s["mean_ms"] > slo_ms
        if bad:
            if run is None:
                run = {"start": s["t"], "seconds": 0, "worst_x_slo": 0.0, "errors": 0,
                       "phase": s["phase"]}
                out.append(run)
            run["seconds"] += 1
            run["errors"] += s["errors"]
            if s["mean_ms"] is not None:
                run["worst_x_slo"] = round(max(run["worst_x_slo"], s["mean_ms"] / slo_ms), 2)
        else:
            run = None
    return out


def emulation(service_rate: float = 0.0, memory_capacity_bytes: int = 0,
              disk_capacity_bytes: int = 0) -> Dict[str, Any]:
    """LocalCluster keyword arguments for capacity emulation (only the non-zero ones).
    Raises SystemExit naming what is missing when this tree's `ClusterConfig` has no such
    field (the kernel knobs `service_rate` / `capacity_bytes` are needed)."""
    import dataclasses
    from anna_core.config import ClusterConfig
    fields = {f.name for f in dataclasses.fields(ClusterConfig)}
    wanted = {"service_rate": service_rate, "memory_capacity_bytes": memory_capacity_bytes,
              "disk_capacity_bytes": disk_capacity_bytes}
    missing = [k for k, v in wanted.items() if v and k not in fields]
    if missing:
        raise SystemExit(f"this anna_core has no capacity emulation ({', '.join(missing)}); "
                         f"pass 0 to run without it (the figures then mean little on a small "
                         f"machine)")
    return {k: v for k, v in wanted.items() if v}


def prefill(cluster: Any, spec: LoadSpec, threads: int = 8, deadline: float = 120.0) -> None:
    """Write every key once (`value_size` bytes), from `threads` clients at once, within
    `deadline` seconds (RuntimeError otherwise)."""
    import anna_core
    value = b"v" * spec.value_size
    errors: List[BaseException] = []
    stop_at = time.monotonic() + deadline

    def part(i: int) -> None:
        client = anna_core.Client(cluster.routing_addresses, auth=cluster.client_auth,
                                  timeout=spec.client_timeout, retries=2)
        try:
            for k in range(i, spec.keys, threads):
                if time.monotonic() > stop_at:
                    raise RuntimeError(f"prefill of {spec.keys} keys passed {deadline:g} s")
                client.put(key_name(spec, k), value)
        except BaseException as e:   # noqa: BLE001 - re-raised below
            errors.append(e)
        finally:
            client.close()
    workers = [threading.Thread(target=part, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(max(0.1, stop_at - time.monotonic() + 5))
    if errors:
        raise errors[0]
    if any(w.is_alive() for w in workers):
        raise RuntimeError(f"prefill did not finish within {deadline:g} s")


def write_outputs(result: Dict[str, Any], name: str, results_dir: str, figures_dir: str,
                  plot: Callable[[Dict[str, Any], str], bool]) -> None:
    """JSON to `<results_dir>/<name>.json`, the figure to `<figures_dir>/<name>.png`."""
    import json
    import os
    os.makedirs(results_dir, exist_ok=True)
    os.makedirs(figures_dir, exist_ok=True)
    path = os.path.join(results_dir, name + ".json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    png = os.path.join(figures_dir, name + ".png")
    drawn = plot(result, png)
    log(f"wrote {path}" + (f" and {png}" if drawn else " (no matplotlib: no PNG)"))


def monitor_series(history: Sequence[Dict[str, Any]], start_wall: float, seconds: float,
                   period: float) -> List[Dict[str, Any]]:
    """The monitor's statuses of the measured window, compact: t (seconds into the load at
    the monitor's tick), memory / disk nodes then (members, pending, leaving), and from the
    period's reports: the clients' mean latency (ms) the policy saw and the share of GETs
    served by memory, with `window` = the seconds those reports cover. (Reporters write a
    quarter into each period and the monitor reads three quarters in, so a status at t
    covers about [t - 1.5 T, t - 0.5 T]; see anna_core/client_reports.py.) Also the actions."""
    out = []
    for s in history:
        t = s["time"] - start_wall
        if not -2.0 <= t <= seconds + 2.0:
            continue
        tiers = s["tiers"]
        lat = s.get("latency") or {}
        out.append({
            "t": round(t, 2),
            "window": [round(t - 1.5 * period, 2), round(t - 0.5 * period, 2)],
            "memory_nodes": len(tiers["memory"]["node_ids"]),
            "memory_pending": len(tiers["memory"]["pending"]),
            "memory_leaving": len(tiers["memory"]["leaving"]),
            "disk_nodes": len(tiers["disk"]["node_ids"]),
            "memory_min_occupancy": tiers["memory"]["min_occupancy"],
            "memory_max_occupancy": tiers["memory"]["max_occupancy"],
            "memory_storage_fraction": tiers["memory"]["storage_fraction"],
            "mean_ms": round(lat["mean"] * 1e3, 3) if lat.get("mean") is not None else None,
            "memory_get_share": s.get("memory_get_share"),
            "actions": list(s.get("actions", [])),
        })
    return out
