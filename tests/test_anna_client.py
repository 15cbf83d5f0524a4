"""The client against a real one-node cluster (routing + KVS node processes on loopback).

Covers every lattice type's put/get/delete, the LWW bytes convenience, typed errors
(including ones only reachable with raw frames), malformed input to a worker, WRONG_OWNER
redirects, subscriptions and replication changes.
"""
import uuid

import pytest
import zmq

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2

MAX_VALUE = 4096


@pytest.fixture(scope="module")
def cluster():
    with anna_core.LocalCluster(memory_threads=2, nodes=1, max_value_bytes=MAX_VALUE,
                                gossip_period_ms=50) as c:
        yield c


@pytest.fixture
def kvs(cluster):
    client = cluster.client(timeout=3.0)
    yield client
    client.close()


def fresh(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


LATTICE_PAIRS = {
    "lww": (lambda: _core.LWWLattice(1, b"old"), lambda: _core.LWWLattice(2, b"new")),
    "set": (lambda: _core.SetLattice([b"a", b"b"]), lambda: _core.SetLattice([b"c"])),
    "ordered_set": (lambda: _core.OrderedSetLattice([b"z", b"a"]),
                    lambda: _core.OrderedSetLattice([b"m"])),
    "max": (lambda: _core.MaxLattice(7), lambda: _core.MaxLattice(3)),
    "map": (lambda: _core.MapLattice({b"x": 1, b"y": 9}), lambda: _core.MapLattice({b"x": 4})),
    "priority": (lambda: _core.PriorityLattice(5.0, b"slow"),
                 lambda: _core.PriorityLattice(1.5, b"fast")),
    "single_causal": (lambda: _core.SingleKeyCausalLattice({"a": 1}, [b"va"]),
                      lambda: _core.SingleKeyCausalLattice({"b": 1}, [b"vb"])),
    "multi_causal": (lambda: _core.MultiKeyCausalLattice({"a": 1}, {"d": {"a": 1}}, [b"va"]),
                     lambda: _core.MultiKeyCausalLattice({"b": 2}, {"e": {"b": 1}}, [b"vb"])),
}


@pytest.mark.parametrize("name", sorted(LATTICE_PAIRS))
def test_put_get_delete_every_lattice(kvs, name):
    make_a, make_b = LATTICE_PAIRS[name]
    key = fresh(name)
    kvs.put(key, make_a())
    assert kvs.get_lattice(key) == make_a()
    kvs.put(key, make_b())
    assert kvs.get_lattice(key) == make_a().merge(make_b())
    kvs.delete(key)
    with pytest.raises(anna_core.KeyNotFound):
        kvs.get(key)


def test_lww_bytes_convenience(kvs):
    key = fresh("lww")
    kvs.put(key, b"first")
    assert kvs.get(key) == b"first"
    first = kvs.get_lattice(key)
    kvs.put(key, b"second")  # the same client's later write always wins
    assert kvs.get(key) == b"second"
    assert kvs.get_lattice(key).timestamp > first.timestamp
    kvs.put(key, bytearray(b"third"))
    assert kvs.get(key) == b"third"
    with pytest.raises(TypeError):
        kvs.put(key, "a str is not bytes")


def test_missing_key_is_key_not_found(kvs):
    key = fresh("missing")
    with pytest.raises(anna_core.KeyNotFound) as info:
        kvs.get(key)
    assert isinstance(info.value, KeyError) and info.value.key == key
    assert key in str(info.value)
    kvs.delete(key)  # deleting a missing key is not an error


def test_lattice_type_mismatch(kvs):
    key = fresh("mismatch")
    kvs.put(key, _core.SetLattice([b"a"]))
    with pytest.raises(anna_core.LatticeTypeMismatch) as info:
        kvs.put(key, _core.MaxLattice(1))
    assert info.value.key == key
    assert kvs.get(key).reveal() == {b"a"}


def test_value_too_large(kvs):
    key = fresh("big")
    with pytest.raises(anna_core.ValueTooLarge) as info:
        kvs.put(key, b"x" * (MAX_VALUE * 2))
    assert key in str(info.value) and "limit" in str(info.value)   # refused before sending
    # a client that believes the limit is higher: the worker refuses it with the same error
    with anna_core.Client(kvs.routing_addresses, auth=kvs.auth,
                          max_value_bytes=MAX_VALUE * 4) as optimist:
        with pytest.raises(anna_core.ValueTooLarge) as info:
            optimist.put(key, b"x" * (MAX_VALUE * 2))
        assert key in str(info.value) and info.value.address
    kvs.put(key, b"x" * 100)  # a small value still goes through
    assert kvs.get(key) == b"x" * 100


def test_unknown_lattice_and_malformed_payload_get_error_answers(cluster, kvs, raw):
    raw = raw.as_cluster(cluster.key_dir)
    key = fresh("raw")
    address = kvs.addresses(key)[0]
    bad_type = anna_pb2.KeyTuple(key=key, lattice_type=42, payload=b"")
    response = raw.request(address, anna_pb2.PUT, [bad_type])
    assert response.tuples[0].error == anna_pb2.UNKNOWN_LATTICE
    bad_payload = anna_pb2.KeyTuple(key=key, lattice_type=anna_pb2.SET, payload=b"\x0a\xff\xff")
    response = raw.request(address, anna_pb2.PUT, [bad_payload])
    assert response.tuples[0].error == anna_pb2.MALFORMED
    with pytest.raises(anna_core.KeyNotFound):
        kvs.get(key)


def test_malformed_frames_do_not_crash_a_worker(cluster, kvs, raw):
    raw = raw.as_cluster(cluster.key_dir)
    workers = cluster.worker_addresses()
    for address in workers:
        raw.send(address, [b"request"])                              # one frame
        raw.send(address, [b"request", b"\x08\x01", b"extra"])       # three frames
        raw.send(address, [b"bogus-kind", b""])                      # unknown kind
        raw.send(address, [b"request", b"\x12\xff\xff\xff\x0f"])     # truncated payload
        raw.send(address, [b"gossip", b"\xff" * 7])
        raw.send(address, [b"membership", b"\x12\x05abc"])
        raw.send(address, [b"replication", b"\x0a"])
    # Every worker still answers.
    for address in workers:
        response = raw.request(address, anna_pb2.GET, [anna_pb2.KeyTuple(key=fresh("probe"))])
        assert response.tuples[0].error in (anna_pb2.KEY_DNE, anna_pb2.WRONG_OWNER)
    assert cluster.is_running("memory-0")
    key = fresh("after")
    kvs.put(key, b"ok")
    assert kvs.get(key) == b"ok"


def test_a_one_frame_request_is_a_request(cluster, kvs, raw):
    """A client request may omit its kind frame ([payload] alone): the worker answers it as a
    request. (anna_core.Client sends its requests so: one CURVE box less per request.)"""
    raw = raw.as_cluster(cluster.key_dir)
    key = fresh("oneframe")
    address = kvs.addresses(key)[0]
    assert raw.put(address, key, _core.LWWLattice(1, b"v")).error == anna_pb2.NO_ERROR
    request = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=raw.address,
                                  request_id="one-frame",
                                  tuples=[anna_pb2.KeyTuple(key=key)])
    raw.send(address, [request.SerializeToString()])
    assert raw.pull.poll(5000), "a one-frame request got no answer"
    response = anna_pb2.KeyResponse.FromString(raw.pull.recv())
    assert response.request_id == "one-frame"
    assert response.tuples[0].error == anna_pb2.NO_ERROR
    assert _core.deserialize(response.tuples[0].lattice_type,
                             response.tuples[0].payload).reveal() == b"v"


def test_wrong_owner_answer_and_client_refresh(cluster, kvs, raw):
    raw = raw.as_cluster(cluster.key_dir)
    workers = cluster.worker_addresses("memory-0")
    assert len(workers) == 2
    key = fresh("owner")
    owner = kvs.addresses(key)[0]
    other = next(a for a in workers if a != owner)
    response = raw.request(other, anna_pb2.GET, [anna_pb2.KeyTuple(key=key)])
    assert response.tuples[0].error == anna_pb2.WRONG_OWNER
    assert list(response.tuples[0].addresses) == [owner]
    # A client whose cache points at the wrong worker follows the redirect.
    kvs.put(key, b"v")
    kvs._addresses[(key, False)] = [other]  # poison the cache deliberately
    assert kvs.get(key) == b"v"
    assert kvs.addresses(key) == [owner]


def test_subscription_receives_update(kvs):
    key = fresh("sub")
    with kvs.subscription(key) as sub:
        kvs.put(key, _core.SetLattice([b"hello"]))
        update = sub.next(timeout=5.0)
        assert update.key == key
        assert update.lattice.reveal() == {b"hello"}
        kvs.delete(key)
        deleted = sub.next(timeout=5.0)
        while deleted.lattice is not None:  # a second UPDATE of the PUT epoch
            deleted = sub.next(timeout=5.0)
        assert deleted.value is None  # deletions are pushed as value-less updates


def test_subscribe_with_own_listener(kvs):
    key = fresh("sub2")
    with anna_core.Subscription() as plain, pytest.raises(ValueError, match="authenticated"):
        kvs.subscribe(key, plain.address)         # the workers would refuse to push there
    with anna_core.Subscription(auth=kvs.auth) as listener:
        kvs.subscribe(key, listener.address)
        kvs.put(key, b"v1")
        update = listener.next(timeout=5.0)
        assert (update.key, update.value) == (key, b"v1")
        kvs.unsubscribe(key, listener.address)
        with pytest.raises(anna_core.Timeout) as info:
            listener.next(timeout=0.05)
        assert "UPDATE" in info.value.stage


def test_set_replication_to_both_threads(cluster, kvs, raw):
    raw = raw.as_cluster(cluster.key_dir)
    key = fresh("hot")
    with cluster.client(auth=cluster.cluster_auth) as operator:    # placement: cluster key
        addresses = operator.set_replication(key, memory=1, disk=0, local=2)
    assert len(addresses) == 2
    kvs.put_all(key, _core.SetLattice([b"everywhere"]))
    for address in addresses:
        response = raw.request(address, anna_pb2.GET, [anna_pb2.KeyTuple(key=key)])
        t = response.tuples[0]
        assert t.error == anna_pb2.NO_ERROR, f"{address}: {t.error}"
        assert _core.deserialize(t.lattice_type, t.payload).reveal() == {b"everywhere"}
    assert kvs.get_all(key).reveal() == {b"everywhere"}
    # The override is stored in the KVS itself as LWW metadata.
    meta = kvs.get(f"__anna__/replication/{key}")
    assert anna_pb2.Replication.FromString(meta).memory_local == 2


def test_timeout_names_the_stage():
    dead = zmq.Context.instance().socket(zmq.PULL)
    dead.bind("tcp://127.0.0.1:*")  # a "routing" that never answers
    address = dead.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        with anna_core.Client(address, timeout=0.2, retries=1) as client:
            with pytest.raises(anna_core.Timeout) as info:
                client.get("k")
            assert "routing lookup" in info.value.stage and address in str(info.value)
    finally:
        dead.close(0)


def test_context_manager_closes(cluster):
    with cluster.client() as client:
        key = fresh("cm")
        client.put(key, b"v")
    assert client.closed


def test_closing_a_client_closes_its_subscriptions(cluster):
    client = cluster.client(timeout=3.0)
    sub = client.subscription(fresh("closing"))
    client.close()  # must not hang on the shared ZMQ context
    assert client.closed
    sub.close()  # idempotent


def test_a_subscription_closes_through_its_client_s_public_interface():
    """Closing a `Subscription` made for a client unsubscribes its keys and tells the client
    through `unsubscribe` and `subscription_closed` only (no private member of the client)."""
    from anna_core.subscription import Subscription

    class PublicOnly:
        __slots__ = ("closed", "calls")

        def __init__(self):
            self.closed, self.calls = False, []

        def unsubscribe(self, key, address):
            self.calls.append(("unsubscribe", key, address))

        def subscription_closed(self, sub):
            self.calls.append(("closed", sub))

    client = PublicOnly()
    sub = Subscription(client=client, keys=("a", "b"))
    address = sub.address
    sub.close()
    sub.close()       # idempotent: the client is told once
    assert client.calls == [("unsubscribe", "a", address), ("unsubscribe", "b", address),
                            ("closed", sub)]

