"""Cloudburst on a real LocalCluster: Anna, two schedulers, two executor nodes, real processes.

Every wait has a deadline; nothing sleeps in place of synchronisation (conditions are polled).
"""
import asyncio
import threading
import time
import uuid

import pytest

import cloudburst
from cloudburst import Reference
from cloudburst.errors import (DagNotFound, ExecutionError, FunctionNotFound, InvalidDag,
                               ObjectNotFound, Timeout)
from waiting import poll_until


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=2, executors_per_node=2, schedulers=2) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = cluster.client(timeout=20)
    c.register(lambda lib, x: x + 1, "increment")
    c.register(lambda lib, x: x * x, "square")
    return c


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_single_function_call(client):
    assert client.call("increment", 41).get(timeout=10) == 42


def test_chain(client):
    name = unique("chain")
    client.register_dag(name, ["increment", "square"], [("increment", "square")])
    assert client.call_dag(name, {"increment": [3]}).get(timeout=10) == 16
    assert name in client.list().dags
    assert {"increment", "square"} <= set(client.list().functions)


def test_fan_out_fan_in_argument_order(client):
    client.register(lambda lib, x: x, "src")
    client.register(lambda lib, x: ("left", x + 1), "left")
    client.register(lambda lib, x: ("right", x * 10), "right")
    client.register(lambda lib, tag, a, b: (tag, a, b), "join")
    name = unique("fan")
    # registration order of the connections into `join`: right first, then left
    client.register_dag(name, ["src", "left", "right", "join"],
                        [("src", "left"), ("src", "right"), ("right", "join"), ("left", "join")])
    got = client.call_dag(name, {"src": [5], "join": ["own-arg"]}).get(timeout=10)
    assert got == ("own-arg", ("right", 50), ("left", 6))


def test_output_key_stores_the_sink_result(client):
    name = unique("out")
    client.register_dag(name, ["increment", "square"], [("increment", "square")])
    key = unique("result")
    assert client.call_dag(name, {"increment": [4]}, output_key=key).get(timeout=10) == 25
    assert client.get(key) == 25


class Counter:
    def __init__(self, start):
        self.n = start

    def run(self, lib, step):
        self.n += step
        return lib.getid(), self.n


def test_stateful_class_keeps_state_per_worker(client):
    client.register((Counter, (100,)), "counter")
    seen = {}
    for _ in range(8):
        wid, n = client.call("counter", 5).get(timeout=10)
        seen.setdefault(wid, []).append(n)
    for values in seen.values():
        assert values == list(range(105, 105 + 5 * len(values), 5))


def test_references_and_lib_get_put(client):
    key = unique("arr")
    client.put(key, [1, 2, 3, 4])

    def total(lib, xs, scale):
        lib.put(f"{scale}-last", sum(xs))
        return sum(xs) * scale, lib.get(f"{scale}-last"), lib.get(["missing-key"], default=None)

    client.register(total, "total")
    assert client.call("total", Reference(key), 2).get(timeout=10) == (20, 10, {"missing-key": None})
    # a new value reaches the executor nodes' caches through Anna's pushes
    client.put(key, [10])
    poll_until(lambda: client.call("total", Reference(key), 1).get(timeout=10)[0] == 10,
         what="updated reference seen by the executor")


def test_missing_reference_is_an_execution_error_naming_the_key(client):
    key = unique("nothing")
    with pytest.raises(ExecutionError, match=key):
        client.call("total", Reference(key), 1).get(timeout=10)
    with pytest.raises(ObjectNotFound):
        client.get(key)


def test_send_recv_between_running_functions(client):
    key = unique("rx")

    def receiver(lib, key):
        lib.put(key, lib.getid())
        return lib.recv(timeout=15)

    def sender(lib, dest, payload):
        lib.send(dest, payload)
        return lib.getid()

    client.register(receiver, "receiver")
    client.register(sender, "sender")
    rx = client.call("receiver", key)
    dest = poll_until(lambda: _try_get(client, key), what="receiver id published")
    sender_id = client.call("sender", dest, b"hello").get(timeout=10)
    assert sender_id != dest
    assert rx.get(timeout=20) == [(sender_id, b"hello")]


def _try_get(client, key):
    try:
        return client.get(key)
    except ObjectNotFound:
        return None


def test_two_schedulers_share_the_registry(cluster):
    a, b = cluster.client(0, timeout=20), cluster.client(1, timeout=20)
    assert a.address != b.address
    fn, dag = unique("double"), unique("shared")
    a.register(lambda lib, x: 2 * x, fn)
    a.register_dag(dag, [fn])
    assert b.call(fn, 21).get(timeout=10) == 42
    assert b.call_dag(dag, {fn: [4]}).get(timeout=10) == 8
    assert dag in b.list().dags
    a.delete_dag(dag)

    def deleted_at_b():
        try:
            b.call_dag(dag, {fn: [1]}).get(timeout=10)
            return False
        except DagNotFound:
            return True
    poll_until(deleted_at_b, what="deletion visible at the other scheduler")
    assert dag not in b.list().dags


def test_eight_threads_of_one_hundred_concurrent_calls(client):
    name = unique("conc")
    client.register_dag(name, ["increment", "square"], [("increment", "square")])
    errors, counts = [], []

    def run(t):
        try:
            futures = [(i, client.call_dag(name, {"increment": [t * 1000 + i]})) for i in range(100)]
            ok = 0
            for i, f in futures:
                assert f.get(timeout=60) == (t * 1000 + i + 1) ** 2
                ok += 1
            counts.append(ok)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors[:3]
    assert counts == [100] * 8


# ---- typed errors: each raised where it should be, never a hang ----

def test_function_not_found(client):
    with pytest.raises(FunctionNotFound, match="no-such-fn"):
        client.call("no-such-fn", 1).get(timeout=10)


def test_dag_not_found(client):
    with pytest.raises(DagNotFound, match="no-such-dag"):
        client.call_dag("no-such-dag", {}).get(timeout=10)
    with pytest.raises(DagNotFound, match="no-such-dag"):
        client.delete_dag("no-such-dag")


@pytest.mark.parametrize("functions,connections,reason", [
    (["increment", "not-registered"], [("increment", "not-registered")], "not registered"),
    (["increment", "square"], [("increment", "square"), ("square", "increment")], "cycle"),
    (["increment", "square"], [], "sinks"),
])
def test_invalid_dag(client, functions, connections, reason):
    name = unique("bad")
    with pytest.raises(InvalidDag, match=reason):
        client.register_dag(name, functions, connections)
    assert name not in client.list().dags


def test_execution_error_carries_the_remote_traceback(client):
    def boom(lib, x):
        raise ValueError(f"boom {x}")

    client.register(boom, "boom")
    name = unique("boomdag")
    client.register_dag(name, ["increment", "boom"], [("increment", "boom")])
    with pytest.raises(ExecutionError) as info:
        client.call_dag(name, {"increment": [1]}).get(timeout=10)
    assert "boom 2" in str(info.value) and "'boom'" in str(info.value)
    assert "Traceback" in info.value.remote_traceback and "ValueError" in info.value.remote_traceback
    assert client.call("increment", 1).get(timeout=10) == 2  # the worker goes on


def test_timeout_names_the_stage(client):
    def slow(lib, seconds):
        import time as t
        t.sleep(seconds)
        return "late"

    client.register(slow, "slow")
    future = client.call("slow", 1.0)
    start = time.monotonic()
    with pytest.raises(Timeout) as info:
        future.get(timeout=0.2)
    assert time.monotonic() - start < 2
    assert "result of call of function 'slow'" in str(info.value) and "placed" in str(info.value)
    assert future.get(timeout=10) == "late"   # a timed-out get can be retried


def test_unknown_scheduler_is_a_timeout_not_a_hang():
    import zmq
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    try:
        start = time.monotonic()
        with pytest.raises(Timeout, match="scheduler"):
            cloudburst.Client(f"tcp://127.0.0.1:{port}", timeout=0.5)
        assert time.monotonic() - start < 5
    finally:
        s.close(0)
        ctx.term()


def test_unsupported_consistency_is_rejected(client):
    with pytest.raises(ValueError, match="strong"):
        client.call_dag("whatever", {}, consistency="strong")
    with pytest.raises(ValueError, match="protocol"):
        client.call_dag("whatever", {}, consistency="lww", protocol="hb")
    with pytest.raises(ValueError, match="protocol"):
        client.call_dag("whatever", {}, consistency="causal", protocol="2pc")


def test_ipc_transport_cluster_runs_a_chain():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2, transport="ipc") as cluster:
        assert cluster.address.startswith("ipc://")
        c = cluster.client(timeout=20)
        c.register(lambda lib, x: x + 1, "inc")
        c.register(lambda lib, x: x * x, "sq")
        c.register_dag("chain", ["inc", "sq"], [("inc", "sq")])
        assert c.call_dag("chain", {"inc": [2]}).get(timeout=10) == 9
        c.put("k", 5)
        assert c.call("sq", Reference("k")).get(timeout=10) == 25


def test_calls_follow_cached_data_to_its_node(cluster, client):
    """Locality: once a node cache holds a referenced key (and has reported it), calls that
    reference the key run on that node."""
    key = unique("local")
    client.put(key, list(range(1000)))
    client.register(lambda lib, xs: lib.getid(), "where_am_i")
    node_of = {w["worker_id"]: w["node_id"] for w in cluster.workers}
    assert client.cached_at(key) == []
    first = node_of[client.call("where_am_i", Reference(key)).get(timeout=10)]
    poll_until(lambda: client.cached_at(key) == [first], what=f"{first} reporting that it caches {key}")
    for _ in range(10):
        assert node_of[client.call("where_am_i", Reference(key)).get(timeout=10)] == first


def test_stalled_fan_in_times_out_at_the_executor_naming_the_missing_upstream(client):
    def nap(lib, seconds):
        import time as t
        t.sleep(seconds)
        return seconds

    client.register(nap, "nap")
    client.register(lambda lib, x: x, "quick")
    client.register(lambda lib, a, b: a + b, "both")
    name = unique("stall")
    client.register_dag(name, ["quick", "nap", "both"], [("quick", "both"), ("nap", "both")])
    start = time.monotonic()
    with pytest.raises(Timeout) as info:
        client.call_dag(name, {"quick": [1], "nap": [1.5]}, timeout=0.5).get(timeout=10)
    # at once, or (if the fan-in shares nap's worker) as soon as that worker is free again
    assert time.monotonic() - start < 4
    assert "'nap'" in str(info.value) and "'both'" in str(info.value)


def test_reregistering_a_function_replaces_it_on_the_workers(client):
    name = unique("versioned")
    client.register(lambda lib: "first", name)
    for _ in range(4):  # reach every worker's function cache
        assert client.call(name).get(timeout=10) == "first"
    client.register(lambda lib: "second", name)
    for _ in range(4):
        assert client.call(name).get(timeout=10) == "second"


def test_register_rejects_what_cannot_run(client):
    class NoRun:
        pass

    with pytest.raises(TypeError, match="run"):
        client.register((NoRun, ()), "norun")
    with pytest.raises(TypeError):
        client.register(42, "not-a-function")
    with pytest.raises(ValueError):
        client.put("__cloudburst/fn/x", 1)


def test_register_checks_where_lib_is(client):
    with pytest.raises(cloudburst.InvalidFunction, match=r"'libsecond'.*not its first"):
        client.register(lambda x, lib: 1, "libsecond")
    client.register(lambda *args: len(args), "varargs")      # no `lib`: only the arguments
    assert client.call("varargs", 1, 2).get(timeout=10) == 2


def test_decorator_map_gather_wait_and_await(client):
    @client.function
    def triple(lib, x):
        return 3 * x

    @client.function(name="add-two")
    def add(lib, x, y):
        return x + y

    assert triple.name == "triple" and add.name == "add-two" and triple.local(None, 2) == 6
    assert triple(5).get(timeout=10) == 15
    assert triple.map(range(20)) == [3 * i for i in range(20)]
    assert client.map("add-two", [1, 2, 3], [10, 20, 30]) == [11, 22, 33]
    futures = [add(i, i) for i in range(5)]
    done, pending = cloudburst.wait(futures, timeout=10)
    assert len(done) == 5 and pending == []
    assert cloudburst.gather(futures) == [0, 2, 4, 6, 8]
    assert futures[0].result() == 0

    async def main():
        return await asyncio.gather(triple(1), triple(2), add(3, 4))

    assert asyncio.run(main()) == [3, 6, 7]


def test_map_raises_the_first_error_in_order(client):
    @client.function
    def invert(lib, x):
        return 1 / x

    with pytest.raises(cloudburst.ExecutionError, match="ZeroDivisionError"):
        invert.map([1, 0, 2])


def test_a_bare_host_port_address_is_refused_with_the_expected_form():
    with pytest.raises(ValueError, match=r"expected 'tcp://host:port'.*did you mean 'tcp://127.0.0.1:41153'"):
        cloudburst.Client("127.0.0.1:41153")


def test_printed_output_reaches_the_caller_bounded_and_never_blocks_the_worker(client):
    def chatty(lib, n):
        import sys
        print("starting", n)
        sys.stderr.write("to stderr\n")
        sys.stdout.write("x" * n)             # far more than any pipe buffer
        return n

    def shout(lib, n):
        print("sink got", n)
        return n + 1

    client.register(chatty, "chatty")
    client.register(shout, "shout")
    client.register_dag("chatty-shout", ["chatty", "shout"], [("chatty", "shout")])
    ten_mb = 10 * 1024 * 1024
    future = client.call("chatty", ten_mb, timeout=60)
    assert future.get(timeout=60) == ten_mb
    logs = future.logs()
    assert logs.startswith("[... ") and "earlier characters dropped" in logs
    assert len(logs) < 70 * 1024 and logs.rstrip().endswith("x")
    # the same workers keep running calls afterwards
    assert client.map("chatty", [1, 2, 3, 4]) == [1, 2, 3, 4]
    dag = client.call_dag("chatty-shout", {"chatty": [3]})
    assert dag.get(timeout=10) == 4
    text = dag.logs()
    assert text.index("[chatty]\nstarting 3\n") < text.index("[shout]\nsink got 3\n")
    assert "to stderr\n" in text

    def fails(lib):
        print("about to fail")
        raise RuntimeError("boom")

    client.register(fails, "fails")
    failed = client.call("fails")
    with pytest.raises(cloudburst.ExecutionError, match="boom"):
        failed.get(timeout=10)
    assert "[fails]\nabout to fail\n" in failed.logs()


def test_client_lattice_puts_merge_on_the_server_and_delete_removes_keys(client):
    import anna_core
    key = unique("counter")

    def increment(n):
        for _ in range(n):        # a grow-only counter: one map entry per increment
            client.put(key, anna_core.MapLattice({uuid.uuid4().bytes: 1}))

    threads = [threading.Thread(target=increment, args=(25,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    counter = client.get(key)
    assert isinstance(counter, anna_core.MapLattice) and sum(counter.reveal().values()) == 200
    tags = unique("tags")
    client.put(tags, anna_core.SetLattice([b"a"]))
    client.put(tags, anna_core.SetLattice([b"b"]))
    assert client.get(tags).reveal() == {b"a", b"b"}
    with pytest.raises(ValueError, match="lattice is merged as it is"):
        client.put(tags, anna_core.SetLattice([b"c"]), consistency="causal")
    client.delete(tags)
    client.delete(tags)                               # deleting a missing key is fine
    with pytest.raises(cloudburst.ObjectNotFound):
        client.get(tags)


def test_delete_function(client):
    name = unique("doomed")
    client.register(lambda lib: "here", name)
    client.register_dag(name + "-dag", [name])
    assert client.call(name).get(timeout=10) == "here"
    client.delete_function(name)
    assert name not in client.list().functions
    with pytest.raises(FunctionNotFound):
        client.call(name).get(timeout=10)
    with pytest.raises(FunctionNotFound):
        client.delete_function(name)


def test_a_module_executors_lack_is_named_with_the_fix_or_shipped_by_value(client):
    import sys
    import types
    ghost = types.ModuleType(unique("ghostmod").replace("-", "_"))
    exec("def shout(text):\n    return text.upper() + '!'\n", ghost.__dict__)
    sys.modules[ghost.__name__] = ghost
    try:
        def greet(lib, who):
            return ghost.shout(f"hello {who}")

        name = unique("greet")
        client.register(greet, name)
        with pytest.raises(ExecutionError, match=rf"needs module '{ghost.__name__}'.*"
                                                 rf"modules=\[{ghost.__name__}\]"):
            client.call(name, "bob").get(timeout=10)
        client.register(greet, name, modules=[ghost])
        assert client.call(name, "bob").get(timeout=10) == "HELLO BOB!"
    finally:
        del sys.modules[ghost.__name__]


def test_functions_merge_lattices_and_read_them_back_merged(client):
    import anna_core
    key = unique("visitors")

    def visit(lib, key, who):
        lib.put(key, anna_core.SetLattice([who.encode()]))
        return sorted(v.decode() for v in lib.get(key).reveal())

    client.register(visit, "visit")
    futures = [client.call("visit", key, f"user{i}") for i in range(12)]   # concurrent calls
    assert all(f"user{i}" in r for i, r in enumerate(cloudburst.gather(futures, timeout=30)))
    assert client.get(key).reveal() == {f"user{i}".encode() for i in range(12)}

    def in_causal_call(lib):
        lib.put(unique("x"), anna_core.SetLattice([b"a"]))

    client.register(in_causal_call, "lattice-in-causal")
    with pytest.raises(ExecutionError, match="put lattices outside causal calls"):
        client.call("lattice-in-causal", consistency="causal").get(timeout=10)


def test_a_deleted_key_leaves_the_node_caches(client):
    key = unique("ephemeral")
    client.put(key, "here")
    client.register(lambda lib, k: lib.get(k, default="gone"), "peek")
    assert client.call("peek", key).get(timeout=10) == "here"      # now cached at the node
    client.delete(key)
    poll_until(lambda: client.call("peek", key).get(timeout=10) == "gone", 10,
               "the node caches dropping the deleted key")
