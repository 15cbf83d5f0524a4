"""Large values' lifetimes: a DAG's large intermediate results travel by reference and are
deleted when the call is over; actor method arguments are sized like a function's; a killed
client's by-reference argument is deleted when its lease runs out; a `Future` argument
follows its producer when that runs again elsewhere. The pure parts directly (with
hypothesis), then real processes."""
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from hypothesis import given, settings, strategies as st

import cloudburst
from executor.big_intermediates import ByReference, by_reference, resolve, store
from executor.references import FunctionError
from hydro_proto import cloudburst_pb2 as pb
from faas.keys import VALUES_PREFIX, intermediate_key
from scheduler.results import ResultHolders
from scheduler.values import ValueKeys
from waiting import poll_until

MiB = 1 << 20


# ---- the pure parts ----

def test_value_keys_are_deleted_at_the_end_of_their_call_or_past_its_deadline():
    v = ValueKeys()
    assert v.add("c1", ["__values/c1/a", "user-key"], until=10.0) == []
    assert v.add("c1", ["__values/c1#r1/f"], until=12.0) == []
    assert v.add("c2", ["__values/c2/b"], until=5.0) == []
    assert len(v) == 3
    assert v.end("c1") == ["__values/c1#r1/f", "__values/c1/a"]     # never "user-key"
    assert v.end("c1") == []
    assert v.expire(4.0) == [] and v.expire(6.0) == ["__values/c2/b"] and len(v) == 0
    # a report arriving after its call ended is deleted at once
    assert v.add("c3", ["__values/c3/f"], until=9.0, live=False) == ["__values/c3/f"]
    assert len(v) == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "end", "expire"]), st.integers(0, 5),
                          st.integers(0, 3), st.floats(0, 20)), max_size=40),
       st.integers(1, 6))
def test_value_keys_every_key_added_is_deleted_once_and_the_table_is_bounded(ops, bound):
    v = ValueKeys(max_keys=bound)
    added, deleted = set(), []
    now = 0.0
    for n, (op, call, key, t) in enumerate(ops):
        caller = f"c{call}"
        if op == "add":
            k = f"{VALUES_PREFIX}{caller}/{key}-{n}"     # every key is new (names are unique)
            added.add(k)
            deleted += v.add(caller, [k], until=now + t)
        elif op == "end":
            deleted += v.end(caller)
        else:
            now += t
            deleted += v.expire(now)
        assert len(v) <= bound
    deleted += v.expire(float("inf"))
    assert sorted(deleted) == sorted(added)        # each one, once, in the end


def test_a_retried_producer_moves_its_holder_and_names_the_consumers_to_tell():
    r = ResultHolders()
    assert r.placed("p", "A", 0.0) == []
    consumer = pb.Call(request_id="c")
    consumer.args["g"].args.add().call.call_id = "p"
    assert r.stamp(consumer, 1.0) == [] and consumer.args["g"].args[0].call.holder == "A"
    r.watch(consumer, {"g": "W"})
    assert r.placed("p", "A", 2.0) == []           # the same holder: nobody to tell
    assert r.placed("p", "B", 3.0) == ["W"]        # a retry elsewhere: the consumer's worker
    assert r.holder("p", 4.0) == "B"


class FakeCache:
    def __init__(self):
        self.data, self.session = {}, "the caller's"
        self.sessions = []

    def put(self, key, value):
        self.sessions.append(self.session)
        self.data[key] = bytes(value)

    def get(self, keys):
        self.sessions.append(self.session)
        return {k: self.data.get(k) for k in keys}


class FakePush:
    def __init__(self):
        self.sent = []

    def send(self, address, kind, message):
        self.sent.append((address, kind, message))


def test_a_large_result_goes_downstream_by_reference_only_to_other_workers():
    s = pb.Schedule(call_id="c1", function="f", targets=["g"], scheduler_address="S")
    s.locations["g"] = "other"
    assert by_reference(s, 2 * MiB, "here")
    assert not by_reference(s, MiB, "here")                  # small: inline
    s.locations["g"] = "here"
    assert not by_reference(s, 2 * MiB, "here")              # the same worker: no message
    s.locations["g"] = "other"
    s.consistency = pb.CAUSAL
    assert not by_reference(s, 2 * MiB, "here")              # causal: inline
    s.consistency = pb.LWW
    cache, push = FakeCache(), FakePush()
    key = store(cache, push, s, b"v" * (2 * MiB), "function 'f'")
    assert key == intermediate_key("c1", "f") == f"{VALUES_PREFIX}c1/f"
    assert push.sent[0][:2] == ("S", "values") and list(push.sent[0][2].keys) == [key]
    args = resolve(cache, [b"own", ByReference(key, "f")], "function 'g'")
    assert args == [b"own", b"v" * (2 * MiB)]
    assert cache.sessions == [None, None] and cache.session == "the caller's"
    with pytest.raises(FunctionError, match=r"'f'.*__values/c9/f.*holds nothing"):
        resolve(cache, [ByReference("__values/c9/f", "f")], "function 'g'")


# ---- real processes ----

def make(n):
    return b"m" * n


def measure(lib, token, data):
    deadline = time.monotonic() + 20      # waits for the test to look at the KVS
    while lib.get(token, default=None) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(data)


def hold(lib, token, data):
    deadline = time.monotonic() + 30
    while lib.get(token, default=None) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(data)


def produce_once(lib, marker, delay):
    import os
    import signal
    if lib.get(marker, default=None) is None:
        lib.put(marker, 1)
        time.sleep(delay)                          # a consumer is placed meanwhile
        os.kill(os.getpid(), signal.SIGKILL)       # the worker dies mid-call, once
    return "produced"


class Sizer:
    def size(self, data, extra=b""):
        return len(data) + len(extra)


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=3,
                                 colocate_chains=False) as cluster:
        c = cluster.client(timeout=40)
        c.register(make, "make")
        c.register(measure, "measure")
        c.register(hold, "hold")
        c.register(produce_once, "produce-once")
        c.register(lambda lib, x: f"got {x}", "consume")
        c.register_dag("make-measure", ["make", "measure"], [("make", "measure")])
        c.register(lambda lib, x: f"tail {x}", "tail")
        c.register_dag("produce-then-tail", ["produce-once", "tail"],
                       [("produce-once", "tail")])
        yield cluster


@pytest.fixture(scope="module")
def client(cluster):
    return cluster.client(timeout=40)


@pytest.fixture(scope="module")
def observer(cluster):
    """Looks at the KVS without a session (what it reads must not change the calls')."""
    return cluster.client(session=False)


@pytest.fixture
def live(client):
    """Tests here kill workers; their node restarts them. Each starts with all three live."""
    poll_until(lambda: len(client.executors()) == 3, 30, "every worker being live")
    return client


def stored(observer, key):
    try:
        observer.get(key)
        return True
    except cloudburst.ObjectNotFound:
        return False


def test_a_5_mib_value_between_dag_functions_goes_by_reference_and_is_deleted_after(
        live, observer):
    client = live
    token = f"go-{uuid.uuid4().hex[:8]}"
    future = client.call_dag("make-measure", {"make": [5 * MiB], "measure": [token]})
    key = intermediate_key(future.request_id, "make")
    poll_until(lambda: stored(observer, key), 15, f"the value being in the KVS under {key}")
    client.put(token, 1)
    assert future.get() == 5 * MiB
    poll_until(lambda: not stored(observer, key), 10, f"{key} being deleted")


def test_a_value_above_64_mib_between_dag_functions_fails_naming_the_function(live):
    client = live
    started = time.monotonic()
    with pytest.raises(cloudburst.ValueTooLarge) as e:
        client.call_dag("make-measure", {"make": [70 * MiB], "measure": ["unused"]}).get()
    assert "'make'" in str(e.value) and "64 MiB" in str(e.value)
    assert time.monotonic() - started < 15
    token = f"go-{uuid.uuid4().hex[:8]}"
    client.put(token, 1)
    assert client.call_dag("make-measure", {"make": [3], "measure": [token]}).get() == 3


def test_actor_method_arguments_are_sized_like_a_functions(live):
    client = live
    actor = client.actor(Sizer)
    assert actor.size(b"a" * (5 * MiB), extra=b"b" * (3 * MiB)).get() == 8 * MiB
    for args, kwargs, what in [((b"a" * (70 * MiB),), {}, "argument 0"),
                               ((b"a",), {"extra": b"b" * (70 * MiB)},
                                "keyword argument 'extra'")]:
        started = time.monotonic()
        with pytest.raises(cloudburst.ValueTooLarge, match=rf"{what} of .*size.*64 MiB"):
            actor.size(*args, **kwargs)
        assert time.monotonic() - started < 5       # refused before anything was sent
    assert actor.size(b"abc").get() == 3              # the actor serves on


KILLED_CLIENT = textwrap.dedent("""
    import sys, cloudburst, cloudburst.big_values as big_values
    address, key_dir, name, token = sys.argv[1:5]
    make_key = big_values.value_key
    def spy(owner):                       # tells the test which key the argument went under
        key = make_key(owner)
        print(key, flush=True)
        return key
    big_values.value_key = spy
    auth = cloudburst.AuthConfig(key_dir, name) if key_dir else None
    c = cloudburst.Client(address, auth=auth, lease_ttl=1.0)
    future = c.call("hold", token, b"x" * (3 << 20))
    print("called", flush=True)
    future.get(timeout=120)               # killed while waiting here
""")


def test_a_killed_clients_big_argument_is_deleted_when_its_lease_runs_out(cluster, live,
                                                                        observer):
    token = f"go-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, cluster.address, cluster.key_dir or "",
         cluster.client_auth.identity if cluster.client_auth else "", token],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ), text=True)
    try:
        key = proc.stdout.readline().strip()
        assert key.startswith(VALUES_PREFIX), proc.stderr.read()
        assert proc.stdout.readline().strip() == "called"
        assert stored(observer, key)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed = time.monotonic()
        poll_until(lambda: not stored(observer, key), 10,
                   f"the killed client's argument {key} being deleted")
        assert time.monotonic() - killed < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_future_of_a_producer_that_ran_again_elsewhere_reaches_its_consumer(live):
    client = live
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    producer = client.call("produce-once", marker, 1.0)
    consumer = client.call("consume", producer, timeout=20)   # placed before the death
    assert consumer.get() == "got produced"
    assert producer.get() == "produced"


def test_a_future_of_a_dag_that_ran_again_reaches_its_consumer(live):
    """The producer is a DAG whose source's worker dies once: the whole DAG runs again, and
    the consumer gets the retry's result."""
    client = live
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    producer = client.call_dag("produce-then-tail", {"produce-once": [marker, 1.0]})
    consumer = client.call("consume", producer, timeout=20)
    assert consumer.get() == "got tail produced"
    assert producer.get() == "tail produced"
