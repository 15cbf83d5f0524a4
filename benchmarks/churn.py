"""Causal DAGs under churn: no TCC violation and no acknowledged write lost, or how many.

    python benchmarks/churn.py [--dags 10000] [--modes lww,ct,opt,con,hb] [--quick]
        [--faults stall,kill-kvs,...] [--clients 6] [--keys 30] [--json PATH] ...
    python benchmarks/churn.py --help          # every option
    python benchmarks/churn.py --report results.json   # the README table of a run

One `cloudburst.LocalCluster` (3 KVS nodes with 2 replicas of every key, one scheduler, 3
executor nodes x 2 workers, Unix sockets, `colocate_chains=False`), reused by every mode in
turn; a mode listed again runs as "<mode>-2" ("-3"...) on keys of its own and has its own
entry in the summary (deleting a causal key does not restart its causal history: the node
caches and other keys' dependencies keep its deleted versions, so a run on keys an earlier
run wrote and deleted would read them beside the new first versions). Per mode, `--clients` threads (each its own Client) issue sequential DAG calls
`churn_r -> churn_w` of `benchmarks/tcc_workload.py` (`read_step`, then the sink
`write_step`, which writes one of the keys it read with a fresh application clock entry),
each function given two `Reference(key, concurrent=True)` drawn from a Zipf over the current
keyspace segment (`--keys` keys, a new segment every `--segment-dags` DAGs, so application
clocks stay small and the checker runs per segment; during a stall every DAG stays on the
stalled writers' segment). Modes: "ct", "opt", "con", "hb"
(causal calls with that protocol) and "lww" (the control: the same workload as plain LWW
calls over LWW keys; it must show violations and lost writes).

The faults are applied by `benchmarks/churn_faults.py`, the checks by
`benchmarks/churn_judge.py` and `benchmarks/churn_check.py`.

Faults, at evenly spread points of the mode's progress (`--faults`, in order; the writers run
until every fault was applied and `--dags` DAGs were issued):
- `stall`: one slow DAG per worker (`churn_r -> churn_slow_w` on the segment's two hottest
  keys; the sink sleeps `--slow` s after reading, then writes); once they run, the executor
  node reporting the most running functions is stopped (SIGSTOP) for `--stall` s, longer
  than the heartbeat timeout, so the scheduler fails its calls while the other writers go on
  writing those keys; then SIGCONT.
- `kill-executor`: SIGKILL of an executor node process (the cluster's supervisor restarts
  it with new workers; the fault waits until every worker is live again).
- `kill-kvs`: SIGKILL of a KVS node (routing drops it after its heartbeat timeout).
- `join-kvs`: a KVS node joins (`add_node`, returns once it has joined).
- `leave-kvs`: a KVS node leaves gracefully (hands its keys off first).
A KVS fault that would leave fewer running KVS nodes than replicas is skipped (recorded).
When `--abandon-after` calls on one segment time out (a read waiting for a dependency that
never reaches Anna), the writers move on to the next segment (`segments_abandoned`).
After each mode the KVS is brought back to `--kvs-nodes` nodes and, once checked, the
mode's keys are deleted.

Checks, per mode, after its writers stopped and the cluster settled:
- **TCC**: `hydrocache.checker.check` over every acknowledged DAG's recorded transaction
  (`tcc_workload.transaction`), per keyspace segment (`benchmarks/churn_check.py`).
- **Lost writes**: every key written is read from every KVS replica (`get_replicas`; polled
  until the replicas agree, or `--settle` s); an acknowledged write is lost when no stored
  version of its key includes it by the application's clocks (`churn_check.lost_writes`:
  present, or superseded by a version whose writer read it). Writes some replica lacks are
  counted too (`not_on_every_replica`). Lost writes are attributed to the fault whose window
  (its start - 1 s to its end + 5 s) holds their acknowledgement, if any.

Output: progress lines on stderr; the JSON summary on stdout (and `--json PATH`): per mode
DAGs issued and acknowledged, errors by type, acknowledged writes, lost, violations by kind,
aborts and gave-up (OPT/HB: `Aborted` after the retry budget), faults with their times
(seconds since the mode started) and outcomes, throughput (acknowledged DAGs/s) and latency;
then a verdict per mode (causal: 0 violations, 0 lost, every fault applied, no segment
abandoned, within `--mode-timeout`; LWW: some violations). The exit
status is 1 when a verdict fails. Every wait has a deadline (`--call-timeout`,
`--mode-timeout`, `--settle`, the cluster's own).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.churn_faults import FAULTS, Faults, restore, run_faults  # noqa: E402
from benchmarks.churn_judge import judge, markdown, verdict  # noqa: E402

MODES = ["lww", "ct", "opt", "con", "hb"]
DEFAULT_FAULTS = "stall,kill-kvs,stall,join-kvs,kill-executor,stall,leave-kvs,join-kvs,stall"
READ, WRITE, SLOW_WRITE = "churn_r", "churn_w", "churn_slow_w"
DAG, SLOW_DAG = "churn_rw", "churn_slow"
DELETE_BUDGET = 60.0          # seconds deleting a mode's keys may take; the rest stay


def slow_write_step(lib: Any, *args: Any) -> Dict[str, Any]:
    """`write_step` after sleeping (the float argument, in seconds) between its reads and its
    write: a writer that works a while on what it read."""
    from benchmarks.tcc_workload import write_step
    delay = next((a for a in args if isinstance(a, float)), 0.0)
    time.sleep(delay)      # the workload itself: the function is busy after reading
    return write_step(lib, *[a for a in args if not isinstance(a, float)])


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S ") + message, file=sys.stderr, flush=True)


# ---- one mode's run ----
class Run:
    """One mode's state: the keyspace segments, the DAG counter, what was recorded."""

    def __init__(self, mode: str, args: argparse.Namespace, run_id: str, dags: int,
                 name: str = "") -> None:
        self.mode, self.args, self.dags = mode, args, dags
        # the run's own name (`mode_names`): its keys, txids and log lines carry it, so a
        # mode run twice on one cluster never writes the keys its first run wrote (and deleted)
        self.name = name or mode
        self.causal = mode != "lww"
        self.call_kw = {"consistency": "causal", "protocol": mode} if self.causal else {}
        self.run_id = run_id
        self.first_segments = max(1, -(-dags // args.segment_dags))   # written before the run
        self.written = 0          # segments 0..written-1 hold their keys' first versions
        self._grow = threading.Lock()
        self.start = time.monotonic()
        self.deadline = self.start + args.mode_timeout
        self.issued = 0           # DAGs issued
        self.offset = 0           # segment index = DAGs issued + offset (abandoned segments)
        self.timeouts: Dict[int, int] = {}    # segment -> calls that timed out
        self.abandoned: List[int] = []
        self.cond = threading.Condition()
        self.completed = 0
        self.faults_done = threading.Event()
        self.records: List[Dict[str, Any]] = []       # one per call (incl. slow DAGs)
        self.results: List[Tuple[str, Any, float]] = []   # acknowledged: (txid, result, t)
        self.faults: List[Dict[str, Any]] = []
        self.truncated = False
        self.pinned: Optional[int] = None   # the segment DAGs use during a stall ...
        self.pin_left = 0                    # ... for at most this many more DAGs
        self.run_s = 0.0          # seconds the writers ran
        self.keyspace_s = 0.0     # seconds writing the keyspace's first versions

    def now(self) -> float:
        return round(time.monotonic() - self.start, 3)

    def next_index(self) -> Optional[int]:
        """The next DAG's index (which picks its segment), or None when the writers should
        stop: `dags` DAGs issued and every fault applied, or the mode's time is up."""
        if time.monotonic() > self.deadline:
            self.truncated = True
            return None
        with self.cond:
            if self.issued >= self.dags and self.faults_done.is_set():
                return None
            self.issued += 1
            return self.issued - 1 + self.offset

    def keys(self, segment: int) -> List[str]:
        return [f"churn/{self.run_id}/{self.name}/{segment}/{i}" for i in range(self.args.keys)]

    def segment(self, i: int) -> int:
        """DAG `i`'s keyspace segment: by its index, or during a stall the stalled writers'
        one (for at most `--segment-dags` DAGs, which bounds the checker's work)."""
        with self.cond:
            if self.pinned is not None and self.pin_left > 0:
                self.pin_left -= 1
                return self.pinned
        return i // self.args.segment_dags

    def pin(self, segment: Optional[int]) -> None:
        with self.cond:
            self.pinned, self.pin_left = segment, self.args.segment_dags

    def ready_segment(self, segment: int, client: Any) -> int:
        """`segment` once its keys are written (DAGs issued past `--dags` while faults are
        still due need new segments, written here by the first writer to reach one); the
        last written segment if writing fails."""
        if segment < self.written:
            return segment
        with self._grow:
            while self.written <= segment:
                try:
                    write_segment(client, self, self.written)
                except Exception as e:     # e.g. the KVS in a fault: use what exists
                    log(f"[{self.name}] writing keyspace segment {self.written} failed "
                        f"({type(e).__name__}: {e}); DAGs stay on segment {self.written - 1}")
                    return self.written - 1
                self.written += 1
        return segment

    def record(self, record: Dict[str, Any], txid: str, value: Any) -> None:
        with self.cond:
            self.records.append(record)
            seg = record.get("segment")
            if record["error"] is not None and record["error"][0] == "Timeout" and seg is not None:
                # reads that time out (e.g. a dependency that never reaches Anna) would stall
                # every writer on this segment: after `--abandon-after`, move on to the next
                self.timeouts[seg] = self.timeouts.get(seg, 0) + 1
                current = (self.issued + self.offset) // self.args.segment_dags
                if self.timeouts[seg] >= self.args.abandon_after and seg == current \
                        and seg not in self.abandoned:
                    self.abandoned.append(seg)
                    self.offset += (seg + 1) * self.args.segment_dags - (self.issued + self.offset)
                    log(f"[{self.name}] segment {seg} abandoned after {self.timeouts[seg]} "
                        f"timed-out calls")
            if record["error"] is None:
                self.results.append((txid, value, self.now()))
            self.completed += 1
            self.cond.notify_all()

    def wait_progress(self, target: int) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.completed >= target,
                                      max(0.0, self.deadline - time.monotonic()))


def call_once(client: Any, run: Run, dag: str, args: Dict[str, List[Any]], txid: str,
              timeout: float, segment: int) -> Dict[str, Any]:
    """One DAG call, recorded in `run` (errors too); returns its record, never raises."""
    from benchmarks.mtcc import error_of
    record: Dict[str, Any] = {"error": None, "protocol": None, "aborts": 0, "dag": dag,
                              "segment": segment}
    start = time.perf_counter()
    value = None
    try:
        fut = client.call_dag(dag, args, timeout=timeout, **run.call_kw)
        value = fut.get(timeout=timeout + 5)
        if fut.causal is not None:
            record.update(protocol=fut.causal.protocol, aborts=fut.causal.aborts)
    except Exception as e:    # counted by type, not fatal
        record["error"] = error_of(e)
    record["latency"] = time.perf_counter() - start
    run.record(record, txid, value)
    return record


def writer(client: Any, cid: int, run: Run) -> None:
    from benchmarks.mtcc import Zipf
    from cloudburst import Reference
    rng = random.Random(f"{run.args.seed}/{run.mode}/{cid}")
    zipf = Zipf(run.args.keys, run.args.zipf, rng)
    n = 0
    while True:
        i = run.next_index()
        if i is None:
            return
        seg = run.ready_segment(run.segment(i), client)
        keys = run.keys(seg)
        refs = lambda: [Reference(keys[zipf.sample()], concurrent=run.causal) for _ in range(2)]
        args = {READ: refs(), WRITE: refs() + [rng.randrange(1 << 30)]}
        call_once(client, run, DAG, args, f"{run.name}/{seg}/{cid}/{n}", run.args.call_timeout,
                  seg)
        n += 1


# ---- the cluster side ----
def setup_functions(client: Any) -> None:
    from benchmarks.tcc_workload import read_step, write_step
    client.register(read_step, READ)
    client.register(write_step, WRITE)
    client.register(slow_write_step, SLOW_WRITE)
    client.register_dag(DAG, [READ, WRITE], [(READ, WRITE)])
    client.register_dag(SLOW_DAG, [READ, SLOW_WRITE], [(READ, SLOW_WRITE)])


def write_segment(client: Any, run: Run, segment: int) -> None:
    """The first version of every key of one keyspace segment."""
    from benchmarks.tcc_workload import initial_value
    for k in run.keys(segment):
        client.put(k, initial_value(k), consistency="causal" if run.causal else "lww")


def write_keyspace(clients: Sequence[Any], pool: ThreadPoolExecutor, run: Run) -> None:
    """The segments `--dags` DAGs need, written by every client in parallel."""
    n = run.first_segments
    jobs = [pool.submit(lambda j: [write_segment(clients[j], run, s)
                                   for s in range(j, n, len(clients))], j)
            for j in range(min(n, len(clients)))]
    for f in jobs:
        f.result(timeout=run.args.mode_timeout)
    run.written = n


def delete_keyspace(clients: Sequence[Any], run: Run) -> Dict[str, Any]:
    """Delete the mode's keys, so the next mode's KVS joins and leaves hand off as much data
    as this one's did (not every earlier mode's too)."""
    keys = [k for seg in range(run.written) for k in run.keys(seg)]
    t0 = time.monotonic()
    deadline = t0 + DELETE_BUDGET

    def delete(j: int) -> int:
        failed = 0
        for k in keys[j::len(clients)]:
            if time.monotonic() >= deadline:
                failed += 1
                continue
            try:
                clients[j].delete(k)
            except Exception:       # counted: a key left behind only costs hand-off time
                failed += 1
        return failed
    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        failed = sum(pool.map(delete, range(len(clients))))
    return {"keys_deleted": len(keys) - failed, "failed": failed,
            "seconds": round(time.monotonic() - t0, 1)}


def progress(run: Run, futures: Sequence[Any], dags: int) -> None:
    """A progress line on stderr every `--progress` s until the writers are done."""
    last = 0
    period = run.args.progress
    while not all(f.done() for f in futures):
        wait(futures, timeout=period)
        done = run.completed
        errs: Dict[str, int] = {}
        with run.cond:
            for r in run.records:
                if r["error"] is not None:
                    errs[r["error"][0]] = errs.get(r["error"][0], 0) + 1
        log(f"[{run.name}] {done}/{dags} DAGs {(done - last) / period:6.1f}/s "
            f"errors {errs or 0} faults {len(run.faults)}/{len(run.args.faults)}")
        last = done


def mode_names(modes: Sequence[str]) -> List[str]:
    """Each run's name: its mode, then "<mode>-2", "<mode>-3"... for a mode run again (a
    name picks the run's keys and its entry in the summary, so two runs of one mode neither
    share keys nor hide each other's figures)."""
    seen: Dict[str, int] = {}
    names = []
    for m in modes:
        seen[m] = seen.get(m, 0) + 1
        names.append(m if seen[m] == 1 else f"{m}-{seen[m]}")
    return names


def run_mode(cluster: Any, clients: Sequence[Any], admin: Any, anna: Any, mode: str,
             args: argparse.Namespace, run_id: str, name: str = "") -> Dict[str, Any]:
    dags = args.lww_dags if mode == "lww" else args.dags
    run = Run(mode, args, run_id, dags, name)
    name = run.name
    workers = args.nodes * args.executors
    with ThreadPoolExecutor(max_workers=len(clients) + workers + 2) as pool:
        t0 = time.monotonic()
        write_keyspace(clients, pool, run)
        run.keyspace_s = time.monotonic() - t0
        log(f"[{name}] {run.written * args.keys} keys written in {run.keyspace_s:.1f} s; "
            f"{dags} DAGs from {len(clients)} clients, faults {args.faults}")
        run.start = time.monotonic()
        run.deadline = run.start + args.mode_timeout

        def slow_dag(seg: int, j: int) -> "Future[Dict[str, Any]]":
            """Slow writer `j` of a stall on segment `seg`'s two hottest keys."""
            from cloudburst import Reference
            refs = lambda: [Reference(k, concurrent=run.causal) for k in run.keys(seg)[:2]]
            dag_args = {READ: refs(), SLOW_WRITE: refs() + [random.randrange(1 << 30),
                                                            float(args.slow)]}
            return pool.submit(call_once, admin, run, SLOW_DAG, dag_args,
                               f"{name}/{seg}/slow/{run.now()}/{j}", args.call_timeout, seg)

        faulter = threading.Thread(target=run_faults,
                                   args=(Faults(cluster, admin, run, slow_dag), args.faults,
                                         log),
                                   name="faults", daemon=True)
        faulter.start()
        futures = [pool.submit(writer, c, i, run) for i, c in enumerate(clients)]
        try:
            progress(run, futures, dags)
        except BaseException:      # e.g. Ctrl-C: the writers finish their call and return
            run.deadline = 0.0
            raise
        for f in futures:
            f.result()
        run.run_s = time.monotonic() - run.start
        faulter.join(max(1.0, args.call_timeout * 2 + args.stall + args.recovery_timeout))
        if faulter.is_alive():
            run.faults.append({"fault": "?", "error": "the fault thread did not finish"})
    restored = restore(cluster, admin, args)
    log(f"[{name}] writers done in {run.run_s:.1f} s; reading back and checking")
    out = judge(run, anna, SLOW_DAG)
    out["restored"] = restored
    out["cleanup"] = delete_keyspace(clients, run)
    out["verdict"] = verdict(mode, out)
    log(f"[{name}] {out['acknowledged']}/{out['dags']} DAGs acknowledged, "
        f"{out['throughput_dags_per_s']}/s; writes acknowledged {out['acknowledged_writes']}, "
        f"lost {out['lost_writes']['lost']} {out['lost_writes']['by_fault'] or ''}; "
        f"violations {out['violations']['total']} {out['violations']['by_kind'] or ''}; "
        f"{out['verdict']}")
    return out


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--dags", type=int, default=10000, help="DAG calls per causal protocol (default 10000)")
    a("--lww-dags", type=int, help="DAG calls of the LWW control (default: --dags / 5)")
    a("--modes", default=",".join(MODES), help="modes in order, of " + ",".join(MODES))
    a("--faults", default=DEFAULT_FAULTS,
      help=f"faults in order, spread evenly over each mode's DAGs, of {','.join(FAULTS)} "
           f"('none': no fault; default {DEFAULT_FAULTS})")
    a("--clients", type=int, default=6, help="client threads, each its own Client")
    a("--keys", type=int, default=30, help="keys per keyspace segment")
    a("--segment-dags", type=int, default=100,
      help="DAGs per keyspace segment (the checker's cost grows fast with it)")
    a("--zipf", type=float, default=1.0, help="Zipf exponent of the keys' popularity")
    a("--nodes", type=int, default=3, help="executor nodes (each has a node cache)")
    a("--executors", type=int, default=2, help="executor workers per node")
    a("--kvs-nodes", type=int, default=3, help="KVS nodes at the start of every mode")
    a("--replicas", type=int, default=2, help="KVS replicas of every key (at least 2 stay)")
    a("--stall", type=float, default=3.0, help="seconds an executor node is stopped (SIGSTOP)")
    a("--slow", type=float, default=1.0,
      help="seconds a slow writer sleeps between its reads and its write")
    a("--heartbeat-timeout", type=float, default=1.5,
      help="seconds of silence before a scheduler declares a worker dead")
    a("--max-retries", type=int, default=20, help="OPT/HB aborted attempts retried")
    a("--call-timeout", type=float, default=20.0, help="deadline of one DAG call (s)")
    a("--mode-timeout", type=float, default=600.0,
      help="seconds one mode may issue DAGs; past it the mode stops and is marked truncated")
    a("--abandon-after", type=int, default=3,
      help="timed-out calls after which the writers leave a keyspace segment for the next")
    a("--recovery-timeout", type=float, default=60.0,
      help="seconds to wait for executor workers to be live again after a kill")
    a("--settle", type=float, default=20.0,
      help="seconds to poll the KVS replicas of every written key until they agree")
    a("--progress", type=float, default=5.0, help="seconds between progress lines (stderr)")
    a("--seed", type=int, default=1, help="the workload's random seed")
    a("--log-dir", help="keep every process' log here (default: a temporary directory)")
    a("--quick", action="store_true",
      help="smoke run: 200 DAGs per mode (LWW too)")
    a("--json", help="also write the JSON summary here")
    a("--report", metavar="JSON",
      help="print the README table of an earlier run's JSON summary and exit")
    args = p.parse_args(argv)
    if args.quick:
        args.dags, args.lww_dags = min(args.dags, 200), min(args.lww_dags or 200, 200)
    if args.lww_dags is None:
        args.lww_dags = max(1, args.dags // 5)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.faults = [] if args.faults.strip() == "none" else [
        f.strip() for f in args.faults.split(",") if f.strip()]
    bad = [m for m in args.modes if m not in MODES] + [f for f in args.faults if f not in FAULTS]
    if bad:
        p.error(f"unknown modes/faults {bad} (modes: {MODES}, faults: {FAULTS})")
    if args.replicas < 2 or args.kvs_nodes < args.replicas + 1:
        p.error("--replicas must be >= 2 and --kvs-nodes >= replicas + 1 (a node is killed)")
    if args.stall <= args.heartbeat_timeout:
        p.error("--stall must exceed --heartbeat-timeout (the stall is a failure to detect)")
    if min(args.dags, args.lww_dags, args.keys, args.segment_dags, args.clients) < 1:
        p.error("--dags, --lww-dags, --keys, --segment-dags and --clients must be >= 1")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.report:
        with open(args.report) as f:
            print(markdown(json.load(f)))
        return 0
    import cloudburst
    run_id = time.strftime("%H%M%S")
    out: Dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                    "loadavg_start": [round(x, 2) for x in os.getloadavg()]},
        "config": {k: v for k, v in vars(args).items() if k not in ("json",)},
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "modes": {}}
    t0 = time.monotonic()
    with cloudburst.LocalCluster(executor_nodes=args.nodes, executors_per_node=args.executors,
                                 transport="ipc", colocate_chains=False,
                                 max_causal_retries=args.max_retries,
                                 kvs_nodes=args.kvs_nodes,
                                 kvs_replication=(args.replicas, 1, 0, 1),
                                 heartbeat_timeout=args.heartbeat_timeout,
                                 log_dir=args.log_dir) as cluster:
        log(f"cluster up in {time.monotonic() - t0:.1f} s: {args.kvs_nodes} KVS nodes x "
            f"{args.replicas} replicas, {args.nodes} executor nodes x {args.executors} workers")
        clients = [cluster.client(timeout=args.call_timeout) for _ in range(args.clients)]
        admin = cluster.client(timeout=args.call_timeout)
        anna = cluster.kvs.client(timeout=5.0)
        setup_functions(admin)
        for mode, name in zip(args.modes, mode_names(args.modes)):
            out["modes"][name] = run_mode(cluster, clients, admin, anna, mode, args, run_id,
                                          name)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    out["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    out["verdicts"] = {m: r["verdict"] for m, r in out["modes"].items()}
    text = json.dumps(out)
    print(text)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    failed = [m for m, v in out["verdicts"].items() if not v.startswith("ok")]
    log(f"done in {out['wall_s']} s; verdicts {out['verdicts']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
