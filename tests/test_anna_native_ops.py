"""A single-key request in one native call (`ClientTransport.key_request`, csrc/client_ops.hpp).

Covers what the C++ builds (the bytes a worker parses: type, key, LWW value, timestamp,
response address and request id), what it decodes (the tuple for the key, the response's
own error when there is none, an LWW value revealed only when it parses, garbage treated as
no answer), bad input from the caller and from the server (typed errors, the worker keeps
serving), and dead servers on both transports (a typed Timeout within the deadline): over
ZeroMQ with CURVE, and over a client link whose node is killed.
"""
import time

import pytest

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from runtime.framing import split_frames

from peers import AnsweringPeer
from test_anna_native_client import FakeRouting

ERROR, LATTICE_TYPE, PAYLOAD, REVEALED, REPLICAS, ADDRESSES, ERROR_DETAIL, RESPONDER = range(8)


class FakeWorker(AnsweringPeer):
    """A worker socket that records each KeyRequest and answers it with `answer(request)`
    (bytes, or None for no answer)."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        super().__init__(self._answer)

    def _answer(self, frames):
        # a request of one frame has its kind implied (csrc/push_cache.hpp)
        payload = frames[0] if len(frames) == 1 else split_frames(frames)[1]
        request = anna_pb2.KeyRequest.FromString(payload)
        self.requests.append(request)
        reply = self.answer(request)
        return None if reply is None else (request.response_address, reply)


def response(request, *tuples, error=anna_pb2.NO_ERROR, responder="tcp://127.0.0.1:1"):
    r = anna_pb2.KeyResponse(type=request.type, request_id=request.request_id, error=error,
                             responder=responder)
    r.tuples.extend(tuples)
    return r.SerializeToString()


def lww(timestamp, value):
    return _core.LWWLattice(timestamp, value).serialize()


@pytest.fixture
def fake():
    made = []

    def make(answer):
        made.append(FakeWorker(answer))
        return made[-1]
    yield make
    for worker in made:
        worker.close()


def test_the_request_built_in_cpp_is_the_one_python_built(fake):
    worker = fake(lambda r: response(r, anna_pb2.KeyTuple(key=r.tuples[0].key)))
    t = _core.ClientTransport()
    try:
        got = t.key_request(worker.address, anna_pb2.PUT, "k", "id-1", 2.0, payload=b"v" * 10,
                            lww_at=123)
        assert got is not None and got[ERROR] == anna_pb2.NO_ERROR
        assert got[RESPONDER] == "tcp://127.0.0.1:1"
        t.key_request(worker.address, anna_pb2.DELETE, "k", "id-2", 2.0, timestamp=77)
        t.key_request(worker.address, anna_pb2.PUT, "s", "id-3", 2.0,
                      lattice_type=anna_pb2.SET, payload=_core.SetLattice({b"a"}).serialize())
        put, delete, put_set = worker.requests
        expected = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address=t.address,
                                       request_id="id-1")
        expected.tuples.add(key="k", lattice_type=anna_pb2.LWW, payload=lww(123, b"v" * 10))
        assert put == expected
        assert anna_pb2.LWWValue.FromString(put.tuples[0].payload) == \
            anna_pb2.LWWValue(timestamp=123, value=b"v" * 10)
        assert delete.type == anna_pb2.DELETE and delete.tuples[0].timestamp == 77
        assert delete.tuples[0].payload == b"" and delete.request_id == "id-2"
        assert put_set.tuples[0].lattice_type == anna_pb2.SET
        assert _core.deserialize(anna_pb2.SET, put_set.tuples[0].payload).reveal() == {b"a"}
        # the LWW payload stays within the bound the client checks before wrapping
        assert len(put.tuples[0].payload) <= _core.lww_payload_bound(10)
    finally:
        t.close()


def test_an_answer_that_comes_while_the_client_asks_routing_is_kept_for_its_wait(fake):
    """The client's single-key attempt gave up waiting (key_request), asks routing (another
    wait), then waits again for the same request (key_wait): an answer that came during the
    routing wait is kept for it, not dropped as stale."""
    import zmq
    from waiting import poll_until
    worker = fake(lambda r: None)                 # answers nothing itself
    t = _core.ClientTransport()
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 500)
    push.connect(t.address)
    try:
        assert t.key_request(worker.address, anna_pb2.GET, "k", "slow", 0.05) is None
        poll_until(lambda: worker.requests, timeout=5, what="the request reaching the worker")
        late = anna_pb2.KeyResponse(type=anna_pb2.GET, request_id="slow",
                                    responder="tcp://127.0.0.1:1")
        late.tuples.add(key="k", lattice_type=anna_pb2.LWW, payload=lww(5, b"late"))
        push.send(late.SerializeToString())
        push.send(anna_pb2.KeyResponse(request_id="lookup").SerializeToString())
        kvs_id = anna_pb2.KeyResponse.DESCRIPTOR.fields_by_name["request_id"].number
        assert [i for i, _ in t.collect(["lookup"], kvs_id, 5.0, 1)] == ["lookup"]
        got = t.key_wait("slow", "k", 2.0, reveal=True)
        assert got is not None and got[ERROR] == anna_pb2.NO_ERROR and got[PAYLOAD] == b"late"
        assert t.stats()["stale"] == 0
    finally:
        t.close()
        push.close()
        context.term()


def test_answers_are_decoded_for_the_key_asked(fake):
    def answer(r):
        key = r.tuples[0].key
        if key == "lww":
            return response(r, anna_pb2.KeyTuple(key="other", payload=b"no"),
                            anna_pb2.KeyTuple(key="lww", lattice_type=anna_pb2.LWW,
                                              payload=lww(5, b"value"), replicas=3))
        if key == "moved":
            return response(r, anna_pb2.KeyTuple(key="moved", error=anna_pb2.WRONG_OWNER,
                                                 addresses=["tcp://a:1", "tcp://b:2"]))
        if key == "rejected":
            return response(r, error=anna_pb2.LATTICE_MISMATCH)
        if key == "empty":
            return response(r)
        if key == "full":
            return response(r, anna_pb2.KeyTuple(key="full", error=anna_pb2.DISK_FULL,
                                                 error_detail="node d worker 0: disk full"))
        if key == "bad-lww":
            return response(r, anna_pb2.KeyTuple(key="bad-lww", lattice_type=anna_pb2.LWW,
                                                 payload=b"\xff\xff\xff"))
        return b"\xff\xfe not protobuf"
    worker = fake(answer)
    t = _core.ClientTransport()
    try:
        def ask(key, reveal, timeout=2.0):
            return t.key_request(worker.address, anna_pb2.GET, key, f"id-{key}-{reveal}",
                                 timeout, reveal=reveal)
        got = ask("lww", True)
        assert got[ERROR] == anna_pb2.NO_ERROR and got[REVEALED] and got[PAYLOAD] == b"value"
        assert got[REPLICAS] == 3 and got[LATTICE_TYPE] == anna_pb2.LWW
        got = ask("lww", False)
        assert not got[REVEALED] and got[PAYLOAD] == lww(5, b"value")
        got = ask("moved", True)
        assert got[ERROR] == anna_pb2.WRONG_OWNER and got[ADDRESSES] == ["tcp://a:1", "tcp://b:2"]
        assert ask("rejected", True)[ERROR] == anna_pb2.LATTICE_MISMATCH
        assert ask("empty", True)[ERROR] == anna_pb2.MALFORMED      # no tuple, no error
        got = ask("full", True)
        assert got[ERROR] == anna_pb2.DISK_FULL
        assert got[ERROR_DETAIL] == "node d worker 0: disk full"
        got = ask("bad-lww", True)                                  # left for the codec to refuse
        assert got[ERROR] == anna_pb2.NO_ERROR and not got[REVEALED]
        started = time.monotonic()
        assert ask("garbage", True, 0.3) is None                    # not a KeyResponse
        assert time.monotonic() - started < 0.3 + 1.0
    finally:
        t.close()


def test_the_client_turns_server_answers_into_typed_errors(fake):
    def answer(r):
        key = r.tuples[0].key
        if key == "bad-lww":
            return response(r, anna_pb2.KeyTuple(key=key, lattice_type=anna_pb2.LWW,
                                                 payload=b"\xff\xff\xff"))
        if key == "full":
            return response(r, anna_pb2.KeyTuple(key=key, error=anna_pb2.DISK_FULL,
                                                 error_detail="node d worker 0: disk full"))
        if key == "missing":
            return response(r, anna_pb2.KeyTuple(key=key, error=anna_pb2.KEY_DNE))
        return b"garbage"
    worker = fake(answer)
    routing = FakeRouting([worker.address])
    try:
        with anna_core.Client(routing.address, timeout=0.3, retries=1) as kvs:
            with pytest.raises(anna_core.MalformedRequest, match="bad-lww"):
                kvs.get("bad-lww")
            with pytest.raises(anna_core.DiskFull, match="disk full") as caught:
                kvs.put("full", b"v")
            assert caught.value.detail == "node d worker 0: disk full"
            with pytest.raises(anna_core.KeyNotFound):
                kvs.get("missing")
            assert kvs.delete("missing") > 0                 # deleting a missing key is fine
            started = time.monotonic()
            with pytest.raises(anna_core.Timeout, match="garbage"):
                kvs.get("garbage")                           # garbage is no answer
            assert time.monotonic() - started < 0.6 + 1.0
    finally:
        routing.close()


def test_bad_input_is_refused_and_the_transport_keeps_serving(fake):
    worker = fake(lambda r: response(r, anna_pb2.KeyTuple(key=r.tuples[0].key)))
    t = _core.ClientTransport()
    try:
        started = time.monotonic()
        assert t.key_request("not an address", anna_pb2.GET, "k", "x", 5.0) is None
        assert t.key_request("tcp://127.0.0.1:1#k=short", anna_pb2.GET, "k", "x", 5.0) is None
        assert time.monotonic() - started < 1.0                      # not sent: no wait
        with pytest.raises(TypeError):
            t.key_request(worker.address, anna_pb2.GET, "k", "x", "soon")
        with pytest.raises(TypeError):
            t.key_request(worker.address, anna_pb2.PUT, "k", "x", 1.0, lww_at=-1)
        assert t.key_request(worker.address, anna_pb2.GET, "k", "x", float("nan")) is None
        assert t.key_request(worker.address, anna_pb2.GET, "k", "ok", 2.0)[ERROR] == 0
    finally:
        t.close()
    assert t.key_request(worker.address, anna_pb2.GET, "k", "closed", 1.0) is None
    assert t.key_wait("closed", "k", 1.0) is None


def test_a_real_worker_refuses_bad_requests_typed_and_keeps_serving():
    with anna_core.LocalCluster(memory_threads=1, nodes=1, auth=False, warn_auth_off=False) as c:
        with c.client(timeout=2.0) as kvs:
            kvs.put("k", b"v")
            worker = kvs.addresses("k")[0]
            t = _core.ClientTransport()
            try:
                got = t.key_request(worker, 99, "k", "unknown-type", 2.0)
                assert got[ERROR] == anna_pb2.MALFORMED
                got = t.key_request(worker, anna_pb2.PUT, "k", "unknown-lattice", 2.0,
                                    lattice_type=42, payload=b"x")
                assert got[ERROR] == anna_pb2.UNKNOWN_LATTICE
                got = t.key_request(worker, anna_pb2.PUT, "k", "bad-payload", 2.0,
                                    lattice_type=anna_pb2.SET, payload=b"\xff\xff")
                assert got[ERROR] == anna_pb2.MALFORMED
            finally:
                t.close()
            with pytest.raises(anna_core.LatticeTypeMismatch):
                kvs.put("k", _core.SetLattice({b"a"}))
            assert kvs.get("k") == b"v"                               # still serving
            assert isinstance(kvs.get_lattice("k"), _core.LWWLattice)
            big = b"x" * (kvs.max_value_bytes - 4)                   # past the LWW bound
            with pytest.raises(anna_core.ValueTooLarge):
                kvs.put("big", big)


def test_a_dead_node_behind_a_link_gives_a_typed_timeout_within_the_deadline():
    with anna_core.LocalCluster(memory_threads=1, nodes=1, auth=False, warn_auth_off=False,
                                client_links=True) as c:
        with c.client(timeout=0.4, retries=1) as kvs:
            for i in range(5):
                kvs.put(f"k{i}", b"v")
                assert kvs.get(f"k{i}") == b"v"
            assert kvs._transport.stats()["link_answers"] > 0        # served over the link
            c.kill_node(c.node_ids[0])
            for op in (lambda: kvs.get("k1"), lambda: kvs.put("k2", b"w")):
                started = time.monotonic()
                with pytest.raises((anna_core.Timeout, anna_core.NoNodes)):
                    op()
                assert time.monotonic() - started < 0.8 + 1.5


@pytest.mark.parametrize("links", [False, True], ids=["zeromq", "secured-link"])
def test_a_dead_node_over_curve_gives_a_typed_timeout_within_the_deadline(links):
    with anna_core.LocalCluster(memory_threads=1, nodes=1, auth=True, client_links=links) as c:
        with c.client(timeout=0.4, retries=1) as kvs:
            kvs.put("k", b"v")
            assert kvs.get("k") == b"v"
            kvs.delete("k")
            with pytest.raises(anna_core.KeyNotFound):
                kvs.get("k")
            # without links every request goes over ZeroMQ/CURVE; with them, over a secured link
            assert kvs._transport.stats()["links_open"] == (1 if links else 0)
            c.kill_node(c.node_ids[0])
            started = time.monotonic()
            with pytest.raises(anna_core.Timeout) as caught:
                kvs.get("k")
            assert time.monotonic() - started < 0.8 + 1.5
            assert "GET 'k'" in str(caught.value)
