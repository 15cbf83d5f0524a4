"""The client's native request path (`_core.ClientTransport`, csrc/client_transport.hpp).

Covers bad input to the transport, answers above the size limit (dropped, counted, named by
the Timeout), a silent worker (a typed Timeout naming its address, within the deadline, with
the GIL released while waiting), a signal during a wait, and authentication: a client whose
key the cluster does not know is refused by the workers, and the client's own answer socket
refuses answers from anyone but the cluster's key (so a client that skipped CURVE would
accept forged answers, which the last test catches).
"""
import signal
import threading
import time

import pytest
import zmq

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from runtime.auth import AuthConfig, KeyPair, make_client, strip_key, write_keys
from runtime.framing import MAX_FRAME_BYTES, split_frames
from peers import AnsweringPeer
from waiting import poll_until

KEY_RESPONSE_ID = anna_pb2.KeyResponse.DESCRIPTOR.fields_by_name["request_id"].number


class FakeRouting(AnsweringPeer):
    """A routing that answers every address lookup with `addresses` (plain, loopback)."""

    def __init__(self, addresses):
        self.addresses = list(addresses)
        self.lookups = 0
        super().__init__(self._answer)

    def _answer(self, frames):
        kind, payload = split_frames(frames)
        if kind != "address":
            return None
        request = anna_pb2.KeyAddressRequest.FromString(payload)
        self.lookups += 1
        answer = anna_pb2.KeyAddressResponse(request_id=request.request_id)
        for key in request.keys:
            answer.addresses.add(key=key, addresses=self.addresses)
        return request.response_address, answer.SerializeToString()


@pytest.fixture
def silent_worker():
    """A bound socket that takes requests and never answers."""
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    pull.bind("tcp://127.0.0.1:*")
    yield pull.getsockopt_string(zmq.LAST_ENDPOINT)
    pull.close(0)
    context.term()


def answer_to(address, payload, *, curve=None):
    """Send `payload` as one frame to a client's answer socket; `curve` = (own KeyPair,
    server key Z85) to connect as a CURVE client, else plainly."""
    context = zmq.Context()
    s = context.socket(zmq.PUSH)
    s.setsockopt(zmq.LINGER, 500)
    if curve is not None:
        pair, server_key = curve
        s.setsockopt(zmq.CURVE_SERVERKEY, server_key)
        s.setsockopt(zmq.CURVE_PUBLICKEY, pair.public)
        s.setsockopt(zmq.CURVE_SECRETKEY, pair.secret)
    s.connect(strip_key(address))
    s.send(payload)
    s.close()                     # lingers until sent or refused
    context.term()


# ---- bad input ----------------------------------------------------------------------------

def test_bad_input_is_refused_with_a_clear_error_and_the_transport_keeps_serving():
    with pytest.raises(ValueError, match="IP address"):
        _core.ClientTransport("127.0.0.1:5", b"", b"", [])
    with pytest.raises(ValueError, match="max_answer_bytes"):
        _core.ClientTransport("127.0.0.1", b"", b"", [], 0)
    with pytest.raises(ValueError, match="without this client's own key pair"):
        _core.ClientTransport("127.0.0.1", b"", b"", [KeyPair.generate().public])
    pair = KeyPair.generate()
    with pytest.raises(ValueError):                  # not 40-character Z85 keys
        _core.ClientTransport("127.0.0.1", pair.public[:20], pair.secret, [pair.public])
    with pytest.raises(ValueError, match="no cluster key"):
        _core.ClientTransport("127.0.0.1", pair.public, pair.secret, [])
    t = _core.ClientTransport("127.0.0.1")
    try:
        for bad in ("", "nowhere", "tcp://host", "tcp://h:99999", "x" * 5000, "tcp://a b:1"):
            assert t.send(bad, "", b"payload") is False
        assert t.stats()["push_refused"] == 6
        started = time.monotonic()
        assert t.collect(["a"], KEY_RESPONSE_ID, float("nan"), 1) == []
        assert t.collect(["a"], KEY_RESPONSE_ID, -3.0, 1) == []
        assert time.monotonic() - started < 0.5
        # a payload that is not protobuf is dropped and counted; a good answer still arrives
        answer_to(t.address, b"\xff\xff\xff not protobuf")
        good = anna_pb2.KeyResponse(request_id="r1").SerializeToString()
        answer_to(t.address, good)
        assert t.collect(["r1"], KEY_RESPONSE_ID, 5.0, 1) == [("r1", good)]
        assert t.stats()["malformed"] == 1
    finally:
        t.close()
    assert t.send("tcp://127.0.0.1:1", "", b"x") is False           # closed: no raise
    assert t.collect(["r1"], KEY_RESPONSE_ID, 1.0, 1) == []


def test_find_field_reads_only_a_well_formed_top_level_field():
    payload = anna_pb2.KeyResponse(request_id="abc", responder="w",
                                   tuples=[anna_pb2.KeyTuple(key="k", payload=b"v")])
    raw = payload.SerializeToString()
    assert _core.find_field(raw, KEY_RESPONSE_ID) == b"abc"
    assert _core.find_field(raw, 99) is None
    for cut in range(1, len(raw)):                   # every truncation: no crash, no overread
        _core.find_field(raw[:cut], KEY_RESPONSE_ID)
    assert _core.find_field(b"\x1a\xff\xff\xff\xff\x0f", KEY_RESPONSE_ID) is None


def test_late_answers_to_other_requests_are_dropped_and_the_awaited_one_returned():
    t = _core.ClientTransport("127.0.0.1")
    try:
        late = anna_pb2.KeyResponse(request_id="retried-1").SerializeToString()
        wanted = anna_pb2.KeyResponse(request_id="r2").SerializeToString()
        answer_to(t.address, late)
        answer_to(t.address, wanted)
        answer_to(t.address, wanted)                      # answered twice: kept once
        assert t.collect(["r2", "r3"], KEY_RESPONSE_ID, 5.0, 1) == [("r2", wanted)]
        assert t.collect(["r3"], KEY_RESPONSE_ID, 0.3, 1) == []
        assert t.stats()["stale"] == 2                    # the late one and the duplicate
    finally:
        t.close()


# ---- bounded frames -----------------------------------------------------------------------

def test_an_answer_above_the_limit_is_dropped_counted_and_named():
    t = _core.ClientTransport("127.0.0.1", max_answer_bytes=1000)
    try:
        big = anna_pb2.KeyResponse(request_id="big", tuples=[anna_pb2.KeyTuple(
            key="k", payload=b"x" * 2000)]).SerializeToString()
        answer_to(t.address, big)
        assert t.collect(["big"], KEY_RESPONSE_ID, 1.0, 1) == []
        stats = t.stats()
        assert stats["oversize"] == 1 and stats["last_oversize_bytes"] == len(big)
        # a frame above the platform's frame limit: its sender is cut off before it is
        # buffered, and the transport keeps serving others
        huge = b"\x1a\x03bad" + b"x" * (MAX_FRAME_BYTES + 1)
        answer_to(t.address, huge)
        small = anna_pb2.KeyResponse(request_id="ok").SerializeToString()
        answer_to(t.address, small)
        assert t.collect(["ok"], KEY_RESPONSE_ID, 5.0, 1) == [("ok", small)]
        assert t.stats()["oversize"] == 1
    finally:
        t.close()


# ---- waits: typed, bounded, the GIL released, signals heard --------------------------------

def test_a_silent_worker_gives_a_typed_timeout_naming_it_within_the_deadline(silent_worker):
    routing = FakeRouting([silent_worker])
    progress = {"n": 0, "stop": False}

    def count():
        while not progress["stop"]:
            progress["n"] += 1

    counter = threading.Thread(target=count, daemon=True)
    try:
        with anna_core.Client(routing.address, timeout=0.4, retries=1) as kvs:
            counter.start()
            started = time.monotonic()
            with pytest.raises(anna_core.Timeout) as caught:
                kvs.get("k")
            elapsed = time.monotonic() - started
            ticks = progress["n"]
            progress["stop"] = True
            assert silent_worker in str(caught.value) and caught.value.address == silent_worker
            assert "GET 'k'" in str(caught.value)
            assert 0.7 <= elapsed < 0.8 + 1.0          # the deadline is timeout * (retries + 1)
            # the wait released the GIL: the other Python thread kept running
            assert ticks > 1000
            with pytest.raises(anna_core.Timeout, match=silent_worker):
                kvs.put_all("k", b"v")
    finally:
        progress["stop"] = True
        routing.close()


def test_a_signal_during_a_wait_reaches_the_caller(silent_worker):
    routing = FakeRouting([silent_worker])

    class Interrupted(Exception):
        pass

    def on_alarm(signum, frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        with anna_core.Client(routing.address, timeout=30.0, retries=0) as kvs:
            kvs.addresses("k")                         # the lookup is done: the wait is native
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            started = time.monotonic()
            with pytest.raises(Interrupted):
                kvs.get("k")
            assert time.monotonic() - started < 5.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        routing.close()


# ---- authentication -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def secure_cluster():
    with anna_core.LocalCluster(memory_threads=1, nodes=1, auth=True) as c:
        yield c


def test_a_client_with_keys_the_cluster_does_not_know_is_refused_by_the_workers(
        secure_cluster, tmp_path):
    with secure_cluster.client(timeout=2.0) as kvs:
        kvs.put("native-auth", b"v")
        worker = kvs.addresses("native-auth")[0]
    write_keys(str(tmp_path / "other"), ["mallory"])
    mallory = AuthConfig(str(tmp_path / "other"), "client:mallory")
    mallory_key = mallory.load().keypair.public.decode("ascii")
    with anna_core.Client(secure_cluster.routing_address, timeout=0.5, retries=0,
                          auth=mallory) as c:
        c._addresses[("native-auth", False)] = [worker]   # skip routing: ask the worker itself
        with pytest.raises(anna_core.Timeout) as caught:
            c.get("native-auth")
        assert caught.value.address == worker
    poll_until(lambda: mallory_key in secure_cluster.log_tail("memory-0", 200), timeout=10,
               what="the node logging the refused key")


def test_the_answer_socket_admits_only_the_clusters_key(secure_cluster, tmp_path):
    """Forged answers, plain or under a key that is not the cluster's, never reach a request;
    the cluster's own key does. A client that skipped CURVE on its answer socket fails this."""
    cluster_pair = KeyPair.load(f"{secure_cluster.key_dir}/cluster.key_secret")
    client_pair = secure_cluster.client_auth.load().keypair
    with secure_cluster.client(timeout=2.0) as kvs:
        assert "#k=" in kvs.response_address
        server_key = client_pair.public
        forged = anna_pb2.KeyResponse(request_id="forged").SerializeToString()
        answer_to(kvs.response_address, forged)                           # plain
        answer_to(kvs.response_address, forged, curve=(KeyPair.generate(), server_key))
        answer_to(kvs.response_address, forged, curve=(client_pair, server_key))
        assert kvs._collect({"forged": "x"}, time.monotonic() + 1.0) == {}
        genuine = anna_pb2.KeyResponse(request_id="genuine").SerializeToString()
        answer_to(kvs.response_address, genuine, curve=(cluster_pair, server_key))
        assert set(kvs._collect({"genuine": "x"}, time.monotonic() + 5.0)) == {"genuine"}
        kvs.put("after-forgery", b"ok")
        assert kvs.get("after-forgery") == b"ok"
