"""TCC end to end, judged by `hydrocache.checker`: every protocol's read sets are snapshots and
its writes atomically visible; the same workload with LWW shows violations (the control that
proves the check can fail).

A LocalCluster with 2 executor nodes x 2 workers (chains spread over workers, so a DAG's
functions run on both nodes). Concurrent client threads run `hydrocache.history` workloads
(every value carries application-level clocks) on linear and V-shaped 3-function DAGs over a
small, very skewed keyspace, so caches keep holding versions older than what other nodes
have read and written.
"""
from __future__ import annotations

import random
import threading
import uuid
from typing import Any, Dict, List

import pytest

import cloudburst
from cloudburst import Reference
from hydrocache.checker import check
from benchmarks.tcc_workload import initial_value, read_step, transaction, write_step

KEYS = 8


def zipf_keys(rng: random.Random, prefix: str, n: int, s: float = 1.5) -> List[str]:
    weights = [1.0 / (i + 1) ** s for i in range(KEYS)]
    return [f"{prefix}{i}" for i in rng.choices(range(KEYS), weights, k=n)]


def _workload_cluster(**options: Any) -> Any:
    c = cloudburst.LocalCluster(executor_nodes=2, executors_per_node=2, colocate_chains=False,
                                **options)
    c.start()
    client = c.client()
    client.register(read_step, "r1")
    client.register(read_step, "r2")
    client.register(write_step, "w")
    client.register_dag("linear", ["r1", "r2", "w"], [("r1", "r2"), ("r2", "w")])
    client.register_dag("vee", ["r1", "r2", "w"], [("r1", "w"), ("r2", "w")])
    return c


@pytest.fixture(scope="module")
def cluster():
    c = _workload_cluster()
    try:
        yield c
    finally:
        c.stop()


def run(cluster: Any, mode: str, dag: str, calls: int, threads: int = 3,
        stop_at_violation: bool = False, protocols: bool = False) -> Dict[str, Any]:
    causal = mode != "lww"
    prefix = f"{mode}-{dag}-{uuid.uuid4().hex[:4]}/"
    setup = cluster.client()
    for i in range(KEYS):
        setup.put(f"{prefix}{i}", initial_value(f"{prefix}{i}"),
                  consistency="causal" if causal else "lww")
    history: List[Any] = []
    errors: List[str] = []
    used: List[str] = []           # the protocol each causal result came from
    lock = threading.Lock()
    found = threading.Event()

    def client_thread(t: int) -> None:
        rng = random.Random(hash((mode, dag, t)))
        client = cluster.client()
        for n in range(calls):
            if stop_at_violation and found.is_set():
                return
            ks = zipf_keys(rng, prefix, 6)
            args = {f: [Reference(k, concurrent=True) if causal else Reference(k)
                        for k in ks[2 * i:2 * i + 2]] for i, f in enumerate(["r1", "r2", "w"])}
            args["w"].append(rng.randrange(1000))
            kwargs = {"consistency": "causal", "protocol": mode} if causal else {}
            try:
                future = client.call_dag(dag, args, timeout=20, **kwargs)
                result = future.get(timeout=25)
            except cloudburst.errors.Aborted as e:      # OPT may run out of retries
                with lock:
                    errors.append(f"aborted: {e}")
                continue
            with lock:
                if protocols and future.causal is not None:
                    used.append(future.causal.protocol)
                history.append(transaction(result, f"{t}/{n}"))
                if stop_at_violation and n % 10 == 9 and check(history):
                    found.set()

    workers = [threading.Thread(target=client_thread, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not any(w.is_alive() for w in workers), "client threads did not finish"
    return {"history": history, "violations": check(history), "errors": errors,
            "protocols": used}


@pytest.mark.parametrize("dag", ["linear", "vee"])
@pytest.mark.parametrize("protocol", ["ct", "opt", "con", "hb"])
def test_every_protocol_reads_snapshots_and_writes_atomically(cluster, protocol, dag):
    out = run(cluster, protocol, dag, calls=25)
    assert out["violations"] == [], out["violations"][:3]
    assert len(out["history"]) >= (60 if protocol != "opt" else 30), out["errors"][:3]
    if protocol != "opt":
        assert out["errors"] == []
    # the workload really contends: many transactions wrote keys others then read
    written = {w.key for t in out["history"] for w in t.writes}
    assert len(written) >= 3


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_hb_without_its_snapshot_round_stays_causal():
    """HB whose snapshot round is taken only after its OPT attempt aborted (the lazy mode the
    scheduler picks for a DAG whose OPT seldom aborts): OPT's validation and CON's snapshot
    on the fallback keep every read set a snapshot; the fallback really ran."""
    c = _workload_cluster(hb_snapshot="on_abort")
    used: List[str] = []
    try:
        for dag in ("linear", "vee"):
            out = run(c, "hb", dag, calls=20, threads=4, protocols=True)
            assert out["violations"] == [], out["violations"][:3]
            assert out["errors"] == [] and len(out["history"]) == 80
            used += out["protocols"]
    finally:
        c.stop()
    assert used.count("con") >= 2, used        # the fallback ran


def test_lww_control_shows_violations(cluster):
    """The same workload without causal consistency: read sets that are not snapshots."""
    violations = []
    for dag in ("linear", "vee"):
        out = run(cluster, "lww", dag, calls=150, threads=3, stop_at_violation=True)
        violations += out["violations"]
        if violations:
            break
    assert violations, "LWW never broke TCC: the checker or the workload cannot fail"
    assert {v.kind for v in violations} & {"not_a_snapshot", "atomic_visibility",
                                            "non_repeatable_read"}


@pytest.mark.parametrize("protocol", ["ct", "opt"])
def test_a_dependency_that_never_arrives_times_out_naming_the_stage(cluster, protocol):
    """b depends on a version of a that Anna never receives: the call fails with Timeout
    naming the local cut update and the missing dependency, within the call's deadline."""
    import anna_core
    from hydrocache.version import Version
    p = uuid.uuid4().hex[:6]
    kvs = cluster.kvs.client()
    try:
        from faas.values import dumps
        kvs.put(f"{p}b", Version.new(f"{p}b", {"w": 1}, {f"{p}a": {"w": 7}}, [dumps(1)]).lattice)
    finally:
        kvs.close()
    client = cluster.client()
    client.register(lambda lib, x: x, "ident")
    with pytest.raises(cloudburst.errors.Timeout, match=f"local cut update.*{p}a"):
        client.call("ident", Reference(f"{p}b"), consistency="causal", protocol=protocol,
                    timeout=1.0).get(timeout=10)


@pytest.mark.parametrize("protocol", ["ct", "opt", "con", "hb"])
def test_unknown_read_sets_are_explored_and_stay_snapshots(cluster, protocol):
    """Functions read keys named only at run time (lib.get), so the scheduler knows no read
    set; the protocols explore it (4.3.6) and every read set is still a snapshot."""
    from benchmarks.tcc_workload import lookup_step, lookup_write_step
    client = cluster.client()
    client.register(lookup_step, "l1")
    client.register(lookup_step, "l2")
    client.register(lookup_write_step, "lw")
    client.register_dag("lookup", ["l1", "l2", "lw"], [("l1", "l2"), ("l2", "lw")])
    prefix = f"u-{protocol}-{uuid.uuid4().hex[:4]}/"
    for i in range(KEYS):
        client.put(f"{prefix}{i}", initial_value(f"{prefix}{i}"), consistency="causal")
    history, errors = [], []
    lock = threading.Lock()

    def client_thread(t: int) -> None:
        rng = random.Random(t)
        c = cluster.client()
        for n in range(15):
            ks = zipf_keys(rng, prefix, 6)
            args = {"l1": ks[0:2], "l2": ks[2:4], "lw": ks[4:6] + [rng.randrange(1000)]}
            try:
                result = c.call_dag("lookup", args, consistency="causal", protocol=protocol,
                                    timeout=20).get(timeout=25)
            except cloudburst.errors.Aborted as e:
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                history.append(transaction(result, f"{t}/{n}"))

    threads = [threading.Thread(target=client_thread, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert check(history) == []
    assert len(history) >= 30, errors[:3]
    # every function really read through lib.get (6 keys per call)
    assert all(len(t.reads) == 6 for t in history)


def test_reading_a_causal_key_outside_a_causal_call_is_a_clear_error(cluster):
    client = cluster.client()
    key = f"causal-only-{uuid.uuid4().hex[:6]}"
    client.put(key, 1, consistency="causal")
    client.register(lambda lib, k: lib.get(k), "plain_get")
    with pytest.raises(cloudburst.errors.ExecutionError, match="causal value"):
        client.call("plain_get", key).get(timeout=10)
    assert client.call("plain_get", key, consistency="causal").get(timeout=10) == 1


def test_con_calls_load_their_workers_while_their_snapshot_is_built(cluster):
    """Concurrent CON calls spread over idle workers: a call counts as load from placement on,
    not only once its snapshot is ready (then every call would pick the same idle worker)."""
    client = cluster.client()
    key = f"load-{uuid.uuid4().hex[:6]}"
    client.put(key, 0, consistency="causal")

    def busy(lib, x):
        import time
        time.sleep(0.3)          # the workload: keep the worker busy
        return lib.getid()

    client.register(busy, "busy")
    futures = [client.call("busy", Reference(key), consistency="causal", protocol="con")
               for _ in range(4)]
    workers = [f.get(timeout=20) for f in futures]
    assert len(set(workers)) == 4, workers
