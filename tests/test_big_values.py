"""Big values: arguments and results above a threshold travel through the KVS by reference;
above the KVS's maximum value size a call fails with `ValueTooLarge` naming the function and
the limit (an argument before anything is sent, a result at the worker), never with
`Timeout` or `SchedulerUnavailable`."""
import time

import pytest

import cloudburst
from cloudburst.arguments import encode
from cloudburst.big_values import Courier
from executor.big_results import result_fields
from executor.permissions import refusal
from hydro_proto import cloudburst_pb2 as pb
from faas.keys import VALUES_PREFIX
from faas.values import BY_REFERENCE_BYTES, loads, too_large, transport

MiB = 1 << 20


class FakeStore:
    def __init__(self):
        self.data = {}
        self.deleted = []

    def put_bytes(self, key, data):
        self.data[key] = bytes(data)

    def get_bytes(self, key):
        return self.data.get(key)

    def delete_bytes(self, key):
        self.deleted.append(key)
        self.data.pop(key, None)


class FakeCache:
    def __init__(self):
        self.puts = []

    def put(self, key, value):
        self.puts.append((key, len(value)))


def test_transport_by_size():
    limit = 64 * MiB
    assert transport(10, limit) == "inline"
    assert transport(BY_REFERENCE_BYTES, limit) == "inline"
    assert transport(BY_REFERENCE_BYTES + 1, limit) == "reference"
    assert transport(limit, limit) == "reference"
    assert transport(limit + 1, limit) == "too_large"
    e = too_large("argument 0 of function 'f'", 300 * MiB, limit)
    assert isinstance(e, cloudburst.ValueTooLarge) and isinstance(e, ValueError)
    assert "'f'" in str(e) and "64 MiB" in str(e) and "300.0 MiB" in str(e)


def test_courier_stores_large_arguments_and_refuses_too_large_ones_before_storing_any():
    store = FakeStore()
    courier = Courier(lambda: store, 4 * MiB, "client-x")
    big = b"b" * (2 * MiB)
    arglist = encode([1, big, cloudburst.Reference("k")], {"extra": big})
    stored = courier.externalize("f", arglist)
    kinds = [a.WhichOneof("kind") for a in arglist.args]
    assert kinds == ["value", "reference", "reference"]
    assert arglist.args[1].objects and arglist.args[1].reference == stored[0]
    assert arglist.kwargs["extra"].reference == stored[1] and len(stored) == 2
    assert all(k.startswith(VALUES_PREFIX + "client-x/") for k in stored)
    assert loads(store.data[stored[0]], objects=True) == big
    assert arglist.args[2].reference == "k" and "k" not in store.data
    # a causal call keeps them inline
    arglist = encode([big], {})
    assert courier.externalize("f", arglist, by_reference=False) == []
    assert arglist.args[0].WhichOneof("kind") == "value"
    # one argument too large: nothing is stored, not even the large one before it
    before = dict(store.data)
    with pytest.raises(cloudburst.ValueTooLarge, match=r"argument 1 of function 'f'.*4 MiB"):
        courier.externalize("f", encode([big, b"x" * (5 * MiB)], {}))
    with pytest.raises(cloudburst.ValueTooLarge, match=r"keyword argument 'y' of function 'f'"):
        courier.externalize("f", encode([big], {"y": b"x" * (5 * MiB)}))
    assert store.data == before
    # argument keys are released; a result read by reference is deleted once read
    courier.release(stored)
    assert stored[0] in store.deleted and stored[0] not in store.data
    store.data["__values/c1/r"] = b"result"
    assert courier.take("__values/c1/r", "the result") == b"result"
    assert "__values/c1/r" in store.deleted
    with pytest.raises(cloudburst.ObjectNotFound, match="the result"):
        courier.take("__values/c1/r", "the result")


def test_results_by_size_at_the_worker():
    cache = FakeCache()
    sink = pb.Schedule(call_id="c1", function="make", sink=True)
    assert result_fields(cache, sink, b"small", "function 'make'", 4 * MiB) == {"value": b"small"}
    fields = result_fields(cache, sink, b"x" * (2 * MiB), "function 'make'", 4 * MiB)
    assert fields["value_key"].startswith(VALUES_PREFIX + "c1/")
    assert cache.puts == [(fields["value_key"], 2 * MiB)]
    # a function's key: the node cache lets a function write it
    assert refusal(pb.CacheRequest(op=pb.CACHE_PUT, keys=[fields["value_key"]])) is None
    middle = pb.Schedule(call_id="c1", function="make", sink=False)
    assert result_fields(cache, middle, b"x" * (2 * MiB), "function 'make'", 4 * MiB) == {}
    with pytest.raises(cloudburst.ValueTooLarge,
                       match=r"the result of function 'make' is 5.0 MiB.*4 MiB"):
        result_fields(cache, middle, b"x" * (5 * MiB), "function 'make'", 4 * MiB)


def size_of(lib, data):
    return len(data)


def make(lib, n):
    return b"r" * n


@pytest.fixture(scope="module")
def client():
    with cloudburst.LocalCluster(executors_per_node=1) as cluster:
        c = cluster.client()
        c.register(size_of, "size_of")
        c.register(make, "make")
        yield c


def test_a_2_mb_argument_and_result_travel_by_reference(client):
    assert client.call("size_of", b"a" * (2 * MiB)).get(timeout=30) == 2 * MiB
    future = client.call("make", 2 * MiB)
    value = future.get(timeout=30)
    assert len(value) == 2 * MiB and value[:1] == b"r"
    assert future.get() == value            # read once from the KVS, kept by the future


def test_a_20_mb_argument_and_result_travel_by_reference(client):
    assert client.call("size_of", b"a" * (20 * MiB)).get(timeout=60) == 20 * MiB
    value = client.call("make", 20 * MiB).get(timeout=60)
    assert len(value) == 20 * MiB and value[:1] == b"r"


def test_a_300_mb_result_gets_value_too_large_naming_the_function_and_the_limit(client):
    started = time.monotonic()
    with pytest.raises(cloudburst.ValueTooLarge) as e:
        client.call("make", 300 * MiB).get(timeout=60)
    assert "'make'" in str(e.value) and "64 MiB" in str(e.value)
    assert time.monotonic() - started < 15.0
    assert client.call("make", 3).get(timeout=20) == b"rrr"    # the worker serves on


def test_a_100_mb_argument_is_refused_before_anything_is_sent(client):
    before = {f.name: f.calls + f.in_flight for f in client.status().functions}.get("size_of", 0)
    started = time.monotonic()
    with pytest.raises(cloudburst.ValueTooLarge,
                       match=r"argument 0 of function 'size_of'.*64 MiB"):
        client.call("size_of", b"a" * (100 * MiB))
    assert time.monotonic() - started < 5.0
    after = {f.name: f.calls + f.in_flight for f in client.status().functions}.get("size_of", 0)
    assert after == before
