"""Per-worker statistics in the kernel (anna_core/DESIGN.md "Statistics"): `Node.take_report()`.

A real `_core.Node` runs in this process, authenticated with the cluster's keys; the test talks
to its worker over loopback from its own ZeroMQ context with the cluster key (as routing or a
client would), batching many tuples per KeyRequest. Every wait has a deadline.
"""
import time

import pytest
import zmq

from anna_core import _core
from anna_core.autoscale.summaries import KeyCount, WorkerReport, summarize
from anna_core.config import NodeConfig
from hydro_proto import anna_pb2
from runtime.auth import AuthConfig, write_keys
from runtime.sockets import PushCache, bind_pull
from waiting import poll_until

DEADLINE = 10.0
GOSSIP_MS = 20
REPORT_FIELDS = {"node_id", "tier", "thread", "requests", "gets", "puts", "deletes",
                 "occupancy", "busy_ns", "period_ns", "stored_bytes", "stored_keys",
                 "key_accesses", "accessed_keys", "access_square_sum", "access_mean", "exact",
                 "top_k", "hottest", "coldest", "tracked", "capacity_bytes"}
LWW_OVERHEAD = 8  # a memory worker's LWW value size: payload + the 8-byte timestamp


@pytest.fixture(scope="module")
def cluster_keys(tmp_path_factory):
    key_dir = str(tmp_path_factory.mktemp("keys"))
    write_keys(key_dir, ["alice"])
    return AuthConfig(key_dir).load()


class Sender:
    """The cluster's identity on its own context: pushes requests, reads the answers."""

    def __init__(self, credentials):
        from runtime.auth import Authenticator
        self.context = zmq.Context()
        self.authenticator = Authenticator(self.context, credentials).start()
        self.pull, self.address = bind_pull(self.context, auth=credentials)
        self.push = PushCache(self.context, linger_ms=0, auth=credentials)
        self.sequence = 0

    def send(self, worker, kind, message):
        assert self.push.send_kind(worker, kind, message)

    def submit(self, worker, rtype, keys, value=b"v"):
        """Send one KeyRequest with a tuple per key; returns its request id."""
        self.sequence += 1
        rid = f"r{self.sequence}"
        req = anna_pb2.KeyRequest(type=rtype, request_id=rid, response_address=self.address)
        for key in keys:
            t = req.tuples.add(key=key, lattice_type=anna_pb2.LWW)
            if rtype == anna_pb2.PUT:
                t.payload = _core.LWWLattice(time.time_ns(), value).serialize()
        self.send(worker, "request", req)
        return rid

    def collect(self, ids, timeout=DEADLINE):
        """Wait for the answers to every request id in `ids`; returns them by id."""
        pending, got = set(ids), {}
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            assert left > 0, f"{len(pending)} requests unanswered within {timeout:g} s"
            if self.pull.poll(int(left * 1000) + 1):
                response = anna_pb2.KeyResponse.FromString(self.pull.recv())
                if response.request_id in pending:
                    pending.discard(response.request_id)
                    got[response.request_id] = response
        return got

    def request(self, worker, rtype, keys, value=b"v"):
        response = self.collect([self.submit(worker, rtype, keys, value)])
        (answer,) = response.values()
        for t in answer.tuples:
            assert t.error in (anna_pb2.NO_ERROR, anna_pb2.KEY_DNE), t
        return answer

    def close(self):
        self.push.close()
        self.pull.close(0)
        self.authenticator.stop()
        self.context.term()


def start(credentials, tmp_path=None, **kw):
    kw.setdefault("threads", 1)
    config = NodeConfig(node_id="stats-n1", pin_threads=False, gossip_period_ms=GOSSIP_MS, **kw)
    node = _core.Node(config.kernel_json(credentials))
    node.start()
    return node


def deliver_membership(node, sender):
    membership = anna_pb2.Membership(
        version=1, vnodes=64,
        nodes=[anna_pb2.NodeInfo(node_id=node.node_id, tier=node.tier,
                                 worker_addresses=list(node.worker_addresses()))],
        default_replication=anna_pb2.Replication(
            memory_global=1 if node.tier == 0 else 0, memory_local=1,
            disk_global=1 if node.tier == 1 else 0, disk_local=1))
    for address in node.worker_addresses():
        sender.send(address, "membership", membership)
    poll_until(lambda: all(s["membership_version"] >= 1 for s in node.stats()), DEADLINE,
               "membership applied by every worker")


@pytest.fixture
def sender(cluster_keys):
    s = Sender(cluster_keys)
    yield s
    s.close()


@pytest.fixture
def running(cluster_keys, sender):
    made = []

    def make(**kw):
        node = start(cluster_keys, **kw)
        made.append(node)
        deliver_membership(node, sender)
        node.take_report(timeout_ms=int(DEADLINE * 1000))  # a clean period
        return node, node.worker_addresses()[0]

    yield make
    for node in made:
        node.stop()


def report(node):
    (r,) = node.take_report(timeout_ms=int(DEADLINE * 1000))
    return r


def test_a_skewed_workload_puts_the_hot_key_on_top_with_its_count(running, sender):
    node, worker = running()
    sender.request(worker, anna_pb2.PUT, ["hot"] * 30 + [f"cold-{i}" for i in range(20)])
    sender.request(worker, anna_pb2.GET, ["hot"] * 20 + ["cold-0"])
    sender.request(worker, anna_pb2.DELETE, ["cold-1"])
    r = report(node)
    assert set(r) == REPORT_FIELDS
    assert (r["node_id"], r["tier"], r["thread"]) == ("stats-n1", "memory", 0)
    assert r["hottest"][0] == {"key": "hot", "accesses": 50, "size": 1 + LWW_OVERHEAD}
    assert r["hottest"][1] == {"key": "cold-0", "accesses": 2, "size": 1 + LWW_OVERHEAD}
    assert (r["puts"], r["gets"], r["deletes"]) == (50, 21, 1)
    assert r["requests"] == r["key_accesses"] == 72
    assert r["accessed_keys"] == 21 and r["exact"] is True
    assert r["access_square_sum"] == 50 ** 2 + 2 ** 2 + 2 ** 2 + 18
    assert r["access_mean"] == pytest.approx(72 / 21)
    # Every stored key was accessed: no 0-count keys; the deleted key is not stored (size 0).
    assert len(r["coldest"]) == 21 and r["coldest"][0]["accesses"] == 1
    assert {k["key"]: k["size"] for k in r["coldest"]}["cold-1"] == 0
    assert r["stored_keys"] == 20  # 21 put, one deleted


def test_the_top_k_stays_bounded_under_many_distinct_keys(running, sender):
    node, worker = running(stats_top_k=50)
    keys = []
    for i in range(2000):
        keys.append(f"k-{i}")
        if i % 5 == 0:
            keys.append("hot")  # 400 accesses, spread over the stream
    ids = [sender.submit(worker, anna_pb2.GET, keys[j:j + 200]) for j in range(0, len(keys), 200)]
    sender.collect(ids)
    r = report(node)
    assert r["top_k"] == 50 and r["exact"] is False
    assert len(r["hottest"]) <= 50 and len(r["coldest"]) <= 50
    assert r["hottest"][0]["key"] == "hot"
    assert 400 <= r["hottest"][0]["accesses"] <= 400 + 2400 // 50  # Space-Saving's bound
    assert r["key_accesses"] == 2400
    assert 2001 * 0.85 <= r["accessed_keys"] <= 2001 * 1.15  # HyperLogLog estimate


def test_occupancy_is_a_fraction_and_higher_under_load(running, sender):
    node, worker = running()
    time.sleep(0.3)
    idle = report(node)
    deadline = time.monotonic() + 0.6
    ids = []
    while time.monotonic() < deadline:
        ids.append(sender.submit(worker, anna_pb2.PUT, [f"load-{len(ids) % 50}-{i}" for i in range(100)],
                                 value=b"x" * 100))
        if len(ids) % 20 == 0:
            sender.collect(ids)
            ids = []
    sender.collect(ids)
    loaded = report(node)
    for r in (idle, loaded):
        assert 0.0 <= r["occupancy"] <= 1.0
        assert r["period_ns"] > 0 and 0 <= r["busy_ns"] <= r["period_ns"]
    assert idle["period_ns"] >= 0.25e9
    assert loaded["occupancy"] > idle["occupancy"]
    assert loaded["puts"] > 0 and idle["puts"] == 0


def test_stored_bytes_grow_with_puts_and_shrink_with_deletes(running, sender):
    node, worker = running()
    before = report(node)["stored_bytes"]
    sender.request(worker, anna_pb2.PUT, [f"big-{i}" for i in range(100)], value=b"b" * 1000)
    grown = report(node)["stored_bytes"]
    assert grown - before >= 100 * 1000
    sender.request(worker, anna_pb2.DELETE, [f"big-{i}" for i in range(50)])
    assert report(node)["stored_bytes"] <= grown - 50 * 1000


def test_disk_store_reports_bytes(cluster_keys, sender, tmp_path):
    node = start(cluster_keys, tier="disk", data_dir=str(tmp_path / "data"))
    try:
        deliver_membership(node, sender)
        worker = node.worker_addresses()[0]
        sender.request(worker, anna_pb2.PUT, [f"d-{i}" for i in range(100)], value=b"d" * 1000)
        r = report(node)
        assert r["tier"] == "disk" and r["puts"] == 100
        assert r["stored_bytes"] > 0
    finally:
        node.stop()


def test_a_replication_override_is_tracked(running, sender):
    node, worker = running()
    sender.request(worker, anna_pb2.PUT, ["replicated"])
    # Another tier's replication differs from the default; the memory placement is unchanged.
    update = anna_pb2.ReplicationUpdate(overrides=[anna_pb2.KeyReplication(
        key="replicated", replication=anna_pb2.Replication(
            memory_global=1, memory_local=1, disk_global=1, disk_local=1))])
    sender.send(worker, "replication", update)
    sender.request(worker, anna_pb2.GET, ["replicated"] * 3)

    def tracked():
        r = report(node)
        return [k for k in r["tracked"] if k["key"] == "replicated"]

    (entry,) = poll_until(tracked, DEADLINE, "the override in the report's tracked list")
    assert entry["accesses"] >= 0


def test_a_report_resets_the_period(running, sender):
    node, worker = running()
    sender.request(worker, anna_pb2.PUT, ["a", "b", "a"])
    first = report(node)
    assert first["key_accesses"] == 3
    second = report(node)
    assert (second["requests"], second["key_accesses"], second["accessed_keys"]) == (0, 0, 0)
    assert second["hottest"] == []
    # Stored and not accessed this period: the coldest of all, with count 0.
    assert sorted(second["coldest"], key=lambda k: k["key"]) == [
        {"key": "a", "accesses": 0, "size": 1 + LWW_OVERHEAD},
        {"key": "b", "accesses": 0, "size": 1 + LWW_OVERHEAD}]
    assert second["access_square_sum"] == 0 and second["puts"] == 0
    assert second["stored_bytes"] == first["stored_bytes"]  # state, not a period counter
    # The cumulative counters (published each epoch) are untouched by reports.
    poll_until(lambda: sum(s["tuples"] for s in node.stats()) >= 3, DEADLINE,
               "the cumulative tuple counter published")


def test_the_monitor_core_reads_the_report(running, sender):
    node, worker = running()
    sender.request(worker, anna_pb2.PUT, ["hot"] * 10 + ["warm"] * 3 + ["cool"])
    r = report(node)
    fields = {f: r[f] for f in WorkerReport.__dataclass_fields__ if f not in
              ("hottest", "coldest", "tracked")}
    lists = {f: tuple(KeyCount(**k) for k in r[f]) for f in ("hottest", "coldest", "tracked")}
    summary = summarize([WorkerReport(**fields, **lists)], period=1.0,
                        members={"memory": ["stats-n1"]})
    assert summary.keys[0].key == "hot" and summary.keys[0].accesses == 10
    assert summary.memory.requests == 14


def test_take_report_needs_a_running_node(cluster_keys):
    node = start(cluster_keys)
    node.stop()
    with pytest.raises(RuntimeError):
        node.take_report(timeout_ms=100)


# ---- capacity emulation, capacity_bytes, key sizes, never-accessed keys

def _send_singles(sender, worker, n):
    """n one-tuple GETs sent back to back, then every answer; returns the elapsed seconds."""
    began = time.monotonic()
    ids = [sender.submit(worker, anna_pb2.GET, [f"paced-{i}"]) for i in range(n)]
    sender.collect(ids, timeout=DEADLINE + 2 * n / RATE)
    return time.monotonic() - began


RATE = 200.0


def test_service_rate_paces_requests_and_counts_as_busy(running, sender):
    n = 200
    bound = (n - 1) / RATE  # the first request is served at once, each next 1/RATE later
    node, worker = running(service_rate=RATE)
    elapsed = _send_singles(sender, worker, n)
    r = report(node)
    assert r["requests"] == n
    assert elapsed >= 0.95 * bound, f"{n} requests at {RATE:g}/s took {elapsed:.3f} s < {bound:.3f} s"
    assert r["period_ns"] >= 0.95 * bound * 1e9
    assert r["occupancy"] > 0.8, r["occupancy"]  # the emulated service time is busy time
    # The worker never serves faster than the rate over the period.
    assert r["requests"] <= RATE * r["period_ns"] / 1e9 + 1


def test_service_rate_zero_does_not_pace(running, sender):
    n = 200
    node, worker = running()  # service_rate 0: unlimited
    elapsed = _send_singles(sender, worker, n)
    assert report(node)["requests"] == n
    assert elapsed < 0.5 * (n - 1) / RATE, elapsed  # well under the paced run's lower bound


def test_a_paced_worker_still_runs_epochs_and_stops_promptly(cluster_keys, sender):
    node = start(cluster_keys, service_rate=0.5)  # 2 s per request
    try:
        deliver_membership(node, sender)
        worker = node.worker_addresses()[0]
        sender.request(worker, anna_pb2.PUT, ["slow"])  # served at once; the worker is busy 2 s
        began = time.monotonic()
        (r,) = node.take_report(timeout_ms=int(DEADLINE * 1000))
        assert time.monotonic() - began < 1.0  # reports are not held up by the emulated time
        assert r["puts"] == 1
        began = time.monotonic()
        node.stop()
        assert time.monotonic() - began < 1.0  # stop does not wait out the emulated time
    finally:
        node.stop()


def test_capacity_bytes_is_split_over_the_threads(running, sender):
    node, _ = running(threads=2, capacity_bytes=1001)
    reports = node.take_report(timeout_ms=int(DEADLINE * 1000))
    assert [r["capacity_bytes"] for r in reports] == [501, 500]
    assert sum(r["capacity_bytes"] for r in reports) == 1001
    assert _core.parse_node_config(NodeConfig(node_id="m", capacity_bytes=7).kernel_json())[
        "capacity_bytes"] == 7
    node2, _ = running()
    assert report(node2)["capacity_bytes"] == 0  # default: unknown


def test_key_sizes_are_the_stored_value_sizes(running, sender):
    node, worker = running()
    sizes = {f"sz-{n}": n for n in (1, 10, 1000, 5000)}
    for key, n in sizes.items():
        sender.request(worker, anna_pb2.PUT, [key], value=b"s" * n)
    sender.request(worker, anna_pb2.GET, ["missing"])  # accessed, not stored
    r = report(node)
    hottest = {k["key"]: k["size"] for k in r["hottest"]}
    assert hottest == {**{k: n + LWW_OVERHEAD for k, n in sizes.items()}, "missing": 0}
    assert {k["key"]: k["size"] for k in r["coldest"]} == hottest


def test_a_stored_key_never_accessed_is_coldest_with_count_0(running, sender):
    node, worker = running()
    sender.request(worker, anna_pb2.PUT, ["idle", "busy"], value=b"i" * 50)
    report(node)  # a new period: nothing accessed yet
    sender.request(worker, anna_pb2.GET, ["busy"] * 3)
    r = report(node)
    assert r["coldest"] == [{"key": "idle", "accesses": 0, "size": 50 + LWW_OVERHEAD},
                            {"key": "busy", "accesses": 3, "size": 50 + LWW_OVERHEAD}]
    assert r["hottest"] == [{"key": "busy", "accesses": 3, "size": 50 + LWW_OVERHEAD}]


def test_the_never_accessed_sample_is_bounded_and_rotates(running, sender):
    node, worker = running()
    keys = [f"many-{i}" for i in range(1000)]
    sender.collect([sender.submit(worker, anna_pb2.PUT, keys[j:j + 200])
                    for j in range(0, len(keys), 200)])
    report(node)
    seen = set()
    for _ in range(12):
        r = report(node)
        assert len(r["coldest"]) == 100  # kReportKeys
        assert all(k["accesses"] == 0 and k["size"] == 1 + LWW_OVERHEAD for k in r["coldest"])
        seen.update(k["key"] for k in r["coldest"])
    assert len(seen) > 300, len(seen)  # a rotating cursor, not the same first keys each time


def test_disk_store_reports_sizes_and_never_accessed_keys(cluster_keys, sender, tmp_path):
    node = start(cluster_keys, tier="disk", data_dir=str(tmp_path / "data"))
    try:
        deliver_membership(node, sender)
        worker = node.worker_addresses()[0]
        sender.request(worker, anna_pb2.PUT, ["d-hot", "d-idle"], value=b"d" * 1000)
        report(node)
        sender.request(worker, anna_pb2.GET, ["d-hot"])
        r = report(node)
        (hot,) = r["hottest"]
        assert hot["key"] == "d-hot" and 1000 <= hot["size"] < 1100  # the encoded record
        assert [(k["key"], k["accesses"]) for k in r["coldest"]] == [("d-idle", 0), ("d-hot", 1)]
        assert r["coldest"][0]["size"] == hot["size"]
    finally:
        node.stop()


@pytest.mark.parametrize("knob,bad", [("service_rate", -1), ("service_rate", float("nan")),
                                      ("service_rate", float("inf")), ("service_rate", "fast"),
                                      ("service_rate", True), ("service_rate", 1e-6),
                                      ("capacity_bytes", -1), ("capacity_bytes", 1.5),
                                      ("capacity_bytes", True), ("capacity_bytes", 1 << 63)])
def test_bad_capacity_knobs_are_refused(knob, bad):
    with pytest.raises(ValueError, match=knob):
        NodeConfig(node_id="m", **{knob: bad})


@pytest.mark.parametrize("knob,bad", [("service_rate", -1), ("service_rate", "1"),
                                      ("service_rate", 1e-6), ("capacity_bytes", -1),
                                      ("capacity_bytes", 1.5)])
def test_the_kernel_refuses_bad_capacity_knobs(knob, bad):
    with pytest.raises(ValueError, match=knob):
        _core.Node({"node_id": "m", knob: bad})


def test_the_clusters_metadata_keys_are_not_counted_as_workload(running, sender):
    node, worker = running()
    sender.request(worker, anna_pb2.PUT, ["__anna__/status"] * 5 + ["user"])
    sender.request(worker, anna_pb2.GET, ["__anna__/stats/workers/1", "user"])
    r = report(node)
    assert (r["puts"], r["gets"], r["requests"]) == (1, 1, 2)
    assert [k["key"] for k in r["hottest"]] == ["user"]


def test_the_clusters_metadata_bytes_are_not_counted_as_stored_workload(running, sender):
    """Reports, statuses and persisted replication live in the memory tier; sizing the tier
    for them would make the policy demote workload keys to make room for bookkeeping."""
    node, worker = running()
    sender.request(worker, anna_pb2.PUT, ["user"], value=b"u" * 1000)
    alone = report(node)["stored_bytes"]
    assert 1000 <= alone < 1100
    sender.request(worker, anna_pb2.PUT, [f"__anna__/stats/workers/{i}" for i in range(20)],
                   value=b"m" * 5000)
    assert report(node)["stored_bytes"] == alone
    sender.request(worker, anna_pb2.PUT, ["user-2"], value=b"v" * 1000)
    assert report(node)["stored_bytes"] > alone
