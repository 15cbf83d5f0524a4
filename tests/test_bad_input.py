"""Bad input never kills a service, and sizes are bounded (issue 11), on real processes:
- a 512 MiB frame to a KVS worker disconnects the sender; the worker's memory stays put and
  it keeps answering;
- a CacheRequest with response_address="garbage" to an executor node's cache socket is
  dropped; the node and its workers keep serving calls;
- DAGs: at most `max_dag_functions` functions (256); a DAG at the limit registers and its
  call completes, one over is refused with InvalidDag naming the limit, and nothing the
  scheduler does per DAG recurses.
"""
import mmap
import sys

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

import anna_core
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import Security, make_client, parse_address
from faas.errors import InvalidDag
from runtime.framing import encode
from scheduler.dag import DEFAULT_MAX_DAG_FUNCTIONS, Dag, validate
from scheduler.policy import dag_relations
from scheduler.schedule import build_schedules
from peers import Peer
from waiting import poll_until

MiB = 1 << 20


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def send_and_wait_for_disconnect(address, frames, timeout=20.0, auth=None):
    """Send `frames` (not copied) to `address` (with `auth`'s keys); return once the peer
    has disconnected us."""
    ctx = zmq.Context()
    security = Security.start(ctx, auth)
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RECONNECT_IVL, 10000)       # no reconnect (and resend) meanwhile
    monitor = s.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    endpoint, key = parse_address(address)
    try:
        if security is not None and key is not None:
            make_client(s, security.credentials, key)
        s.connect(endpoint)
        s.send_multipart(frames, copy=False)
        assert monitor.poll(int(timeout * 1000)), \
            f"{address} did not disconnect the sender of an oversized frame"
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
    finally:
        s.disable_monitor()
        monitor.close(0)
        s.close(0)
        if security is not None:
            security.stop()
        ctx.term()


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_512_mib_frame_to_a_kvs_worker_is_refused_and_costs_it_no_memory():
    with anna_core.LocalCluster(memory_threads=1, nodes=1) as cluster:
        client = cluster.client(timeout=5.0)
        client.put("k", b"v")
        node = cluster.node_ids[0]
        pid = cluster._node(node).pid
        before = rss_bytes(pid)
        # anonymous pages never written: the test process does not hold 512 MiB either
        big = mmap.mmap(-1, 512 * MiB)
        try:
            send_and_wait_for_disconnect(cluster.worker_addresses(node)[0],
                                         [b"request", memoryview(big)],
                                         auth=cluster.client_auth)
        finally:
            big.close()
        assert client.get("k") == b"v"
        client.put("k2", b"v2")
        assert client.get("k2") == b"v2"
        assert rss_bytes(pid) < before + 100 * MiB
        client.close()


# ---- DAGs (pure) ----

def chain(n, name="chain"):
    fns = [f"f{i}" for i in range(n)]
    return Dag.create(name, fns, [(fns[i], fns[i + 1]) for i in range(n - 1)])


def test_a_dag_over_the_limit_is_refused_naming_the_limit():
    assert DEFAULT_MAX_DAG_FUNCTIONS == 256
    at_limit = chain(256)
    validate(at_limit, set(at_limit.functions))
    for n in (257, 1000):
        big = chain(n)
        with pytest.raises(InvalidDag, match=f"{n} functions; a DAG may have at most 256"):
            validate(big, set(big.functions))
    with pytest.raises(InvalidDag, match="at most 10"):
        validate(chain(11), {f"f{i}" for i in range(11)}, max_functions=10)


def test_dag_algorithms_do_not_recurse():
    dag = chain(2000)          # past the limit, to show no algorithm depends on it
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        validate(dag, set(dag.functions), max_functions=5000)
        concurrent, neighbours = dag_relations(dag)
        call = pb.Call(request_id="c", response_address="tcp://127.0.0.1:1")
        placement = {f: "w" for f in dag.functions}
        schedules = build_schedules(call, dag, placement, {"w": "tcp://127.0.0.1:2"},
                                    {f: "v" for f in dag.functions}, "tcp://127.0.0.1:3", 10)
    finally:
        sys.setrecursionlimit(limit)
    assert concurrent["f0"] == set() and neighbours["f1"] == {"f0", "f2"}
    assert len(schedules) == 2000 and not any(s.forward for _, s in schedules)


def test_dag_relations_of_a_diamond():
    dag = Dag.create("d", ["a", "b", "c", "d"], [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    concurrent, neighbours = dag_relations(dag)
    assert concurrent == {"a": set(), "b": {"c"}, "c": {"b"}, "d": set()}
    assert neighbours["a"] == {"b", "c"} and neighbours["d"] == {"b", "c"}


# ---- real cluster ----

@pytest.fixture(scope="module")
def cluster():
    import cloudburst
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    import cloudburst
    c = cloudburst.Client(cluster.scheduler_addresses[0], timeout=30, auth=cluster.client_auth)
    c.register(lambda lib, x: x + 1, "inc")
    yield c
    c.close()


def test_a_garbage_response_address_does_not_kill_the_node_cache(cluster, client):
    node = cluster._nodes[0]
    cache_address = node.info["cache_address"]
    peer = Peer(cluster.cluster_auth)       # a cluster-only socket: sent with the cluster's key
    s = peer.dial(cache_address, linger_ms=1000)
    # a GET of no keys is a hit, answered on the node's loop thread (the reproduction);
    # a miss and a PUT are answered from the fetch threads
    for op, keys in ((pb.CACHE_GET, []), (pb.CACHE_GET, ["some-key"]), (pb.CACHE_PUT, ["k"])):
        request = pb.CacheRequest(request_id="evil", response_address="garbage", op=op,
                                  keys=keys)
        if op == pb.CACHE_PUT:
            request.values.append(b"v")
        s.send(encode("cache", request))
    peer.close()
    for i in range(5):
        assert client.call("inc", i).get(timeout=10) == i + 1
    assert node.running()
    poll_until(lambda: "garbage" in open(f"{cluster.log_dir}/{node.name}.log").read(), 5,
               "the node logging the refused address")


def test_a_dag_at_the_limit_runs_and_one_over_is_refused(client):
    n = DEFAULT_MAX_DAG_FUNCTIONS
    for i in range(n + 1):
        client.register(lambda lib, x=0: x + 1, f"link{i}")
    fns = [f"link{i}" for i in range(n)]
    client.register_dag("longest", fns, [(fns[i], fns[i + 1]) for i in range(n - 1)])
    assert client.call_dag("longest", {"link0": [0]}).get(timeout=60) == n
    fns.append(f"link{n}")
    with pytest.raises(InvalidDag, match=f"{n + 1} functions; a DAG may have at most {n}"):
        client.register_dag("too-long", fns, [(fns[i], fns[i + 1]) for i in range(n)])
