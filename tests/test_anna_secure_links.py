"""Secured client links (anna_core/csrc/secure_link.hpp): a CURVE cluster's workers serve
keyed clients over their own TCP links after a key handshake, with every frame sealed.

Covers, against real node processes on loopback: the native transport and the Python client
use a secured link with the cluster's client key, and the key's role keeps its rights there
(a client key is refused the cluster's reserved keys exactly as over ZeroMQ, the cluster key
is not); an unknown key is refused with the ZAP handler's reason; a plain (unsealed) request
is never served; a client does not talk to a link server that cannot prove the worker's key
and falls back to ZeroMQ; tampered, replayed and oversized frames close the link while the
worker keeps serving others (any changed byte of a sealed frame, as a property); a handshake
left half done is closed within its deadline; the native load generator uses secured links
with a client's credentials.
"""
import time

import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st
from zmq.utils import z85

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from runtime.auth import CLUSTER, AuthConfig
from sealed_link import ImpostorLink, LinkPeer, connect, frame, keypair, read_frame
from waiting import poll_until

REQUEST_ID = anna_pb2.KeyResponse.DESCRIPTOR.fields_by_name["request_id"].number


@pytest.fixture(scope="module")
def cluster():
    c = anna_core.LocalCluster(memory_threads=1, client_links=True)
    c.start()
    yield c
    c.stop()


def creds(cluster, role="client"):
    auth = cluster.client_auth if role == "client" else AuthConfig(cluster.key_dir, CLUSTER)
    return auth.load()


def transport_for(credentials):
    return _core.ClientTransport(public_key=credentials.keypair.public,
                                 secret_key=credentials.keypair.secret,
                                 cluster_keys=[k for k, r in credentials.allowed.items()
                                               if r == CLUSTER])


def request(kind, key, reply_to, request_id, value=None):
    r = anna_pb2.KeyRequest(type=kind, response_address=reply_to, request_id=request_id)
    t = r.tuples.add(key=key)
    if value is not None:
        t.lattice_type = anna_pb2.LWW
        t.payload = _core.LWWLattice(time.time_ns(), value).serialize()
    return r.SerializeToString()


def exchange(transport, worker, payload, rid):
    raw = transport.exchange(worker, "", payload, rid, REQUEST_ID, 5.0)
    assert raw is not None, f"no answer to {rid}"
    return anna_pb2.KeyResponse.FromString(raw)


def link_and_key(cluster, key="k"):
    """The worker owning `key`, its advertised link and its server key (raw)."""
    t = transport_for(creds(cluster))
    try:
        worker = cluster.client().addresses(key)[0]
        answer = exchange(t, worker, request(anna_pb2.GET, key, t.address, "probe"), "probe")
        assert answer.link_address, "the CURVE worker advertises no link"
        return worker, answer.link_address, bytes.fromhex(worker.split("#k=")[1])
    finally:
        t.close()


def until_linked(transport, worker, key):
    """GETs of `key` until the transport sends them over its link to `worker` (the link is
    set up while the transport waits for answers, after the first answer advertises it)."""
    for i in range(50):
        exchange(transport, worker, request(anna_pb2.GET, key, transport.address, f"w{i}"),
                 f"w{i}")
        if transport.stats()["link_requests"] > 0:
            return
    raise AssertionError(f"the transport never used the link to {worker}")


def peer(cluster, link, server_key, role="client"):
    c = creds(cluster, role)
    return LinkPeer(link, server_key, z85.decode(c.keypair.public), z85.decode(c.keypair.secret))


def logged(cluster, text):
    """How many of the node's recent log lines contain `text`."""
    return cluster.log_tail("memory-0", 400).count(text)


# ---- the path -------------------------------------------------------------------------------

def test_keyed_clients_read_and_write_over_a_secured_link(cluster):
    client = cluster.client()
    values = {f"s-{i}": b"v%d" % i for i in range(20)}
    for key, value in values.items():
        client.put(key, value)
    for key, value in values.items():
        assert client.get(key) == value
    t = transport_for(creds(cluster))
    try:
        worker = client.addresses("s-1")[0]
        until_linked(t, worker, "s-1")
        before = t.stats()
        for i in range(10):
            got = exchange(t, worker, request(anna_pb2.GET, "s-1", t.address, f"g{i}"), f"g{i}")
            assert got.tuples[0].error == anna_pb2.NO_ERROR
        stats = t.stats()
        assert stats["links_open"] == 1 and stats["link_failures"] == 0
        assert stats["link_requests"] - before["link_requests"] == 10
        assert stats["link_answers"] == stats["link_requests"]
    finally:
        t.close()


def test_a_link_key_keeps_its_role_and_rights(cluster):
    """A client key may not write the cluster's reserved keys, over ZeroMQ or a link alike;
    the cluster key may, over a link too."""
    worker, link, server_key = link_and_key(cluster, "__cloudburst/link-test")
    t = transport_for(creds(cluster))
    try:
        put = lambda rid: request(anna_pb2.PUT, "__cloudburst/link-test", t.address, rid, b"x")
        over_zmq = exchange(t, worker, put("z"), "z")
        until_linked(t, worker, "__cloudburst/link-test")
        before = t.stats()["link_requests"]
        over_link = exchange(t, worker, put("l"), "l")
        assert t.stats()["link_requests"] == before + 1
        assert over_zmq.tuples[0].error == anna_pb2.NOT_PERMITTED
        assert over_link.tuples[0].error == over_zmq.tuples[0].error
        assert over_link.tuples[0].error_detail == over_zmq.tuples[0].error_detail
    finally:
        t.close()
    p = peer(cluster, link, server_key, role="cluster")
    try:
        assert p.handshake() is None
        p.send(request(anna_pb2.PUT, "__cloudburst/link-test", "tcp://127.0.0.1:1", "c", b"y"))
        answer = anna_pb2.KeyResponse.FromString(p.recv())
        assert answer.request_id == "c" and answer.tuples[0].error == anna_pb2.NO_ERROR
    finally:
        p.close()


# ---- refusals -------------------------------------------------------------------------------

def test_an_unknown_key_is_refused_as_by_the_zap_handler(cluster):
    cluster.client().put("u", b"still served")
    _, link, server_key = link_and_key(cluster, "u")
    stranger_public, stranger_secret = keypair()
    stranger = LinkPeer(link, server_key, stranger_public, stranger_secret)
    try:
        assert stranger.handshake() == "unknown public key"
        assert stranger.closed_by_worker()
    finally:
        stranger.close()
    poll_until(lambda: logged(cluster, "refused a link from key " + z85.encode(stranger_public)
                              .decode()) == 1, 5, "the refusal logged with the key")
    assert cluster.client().get("u") == b"still served"


def test_a_key_whose_role_the_kvs_does_not_admit_is_refused_as_over_zeromq(cluster):
    """The function key pair (every executor worker's) is valid in the cluster but not
    admitted by the KVS: refused at the link's handshake with the reason the node's ZAP
    handler gives the same key on the worker's CURVE socket."""
    cluster.client().put("f", b"v")
    worker, link, server_key = link_and_key(cluster, "f")
    pair = AuthConfig(cluster.key_dir, CLUSTER).function_keypair()
    p = LinkPeer(link, server_key, z85.decode(pair.public), z85.decode(pair.secret))
    try:
        link_reason = p.handshake()
    finally:
        p.close()
    ctx = zmq.Context()
    try:
        push = ctx.socket(zmq.PUSH)
        push.linger = 0
        push.curve_publickey, push.curve_secretkey = pair.public, pair.secret
        push.curve_serverkey = z85.encode(server_key)
        push.connect(worker.split("#")[0])
        push.send(b"x")
        zap_line = ": unknown public key " + pair.public.decode()
        poll_until(lambda: logged(cluster, zap_line) >= 1, 5, "the ZAP refusal logged")
        push.close()
    finally:
        ctx.term()
    assert link_reason == "unknown public key"   # the ZAP handler's reason, word for word
    assert logged(cluster, "refused a link from key " + pair.public.decode() + ": " + link_reason)


def test_a_plain_request_on_a_secured_link_is_never_served(cluster):
    cluster.client().put("p", b"v")
    _, link, _ = link_and_key(cluster, "p")
    with connect(link) as s:
        s.sendall(frame(request(anna_pb2.GET, "p", "tcp://127.0.0.1:1", "plain")))
        assert read_frame(s) is None          # closed: not a HELLO, and nothing answered


def test_a_wrong_server_key_gets_no_link(cluster):
    """A client holding a key the worker does not have: the worker cannot open its HELLO."""
    _, link, _ = link_and_key(cluster)
    wrong, _ = keypair()
    p = peer(cluster, link, wrong)
    try:
        assert p.handshake() == ""           # closed without a WELCOME
    finally:
        p.close()


def test_the_client_does_not_talk_to_a_link_that_cannot_prove_the_workers_key(cluster):
    """A fake worker (holding a cluster key, so its answers are admitted) advertises a link
    served by an impostor that does not hold the worker's secret key: the transport sends it
    no request and uses ZeroMQ instead."""
    impostor = ImpostorLink()
    ctx = zmq.Context()
    cluster_creds = creds(cluster, "cluster")
    worker_public, worker_secret = zmq.curve_keypair()
    pull = ctx.socket(zmq.PULL)
    pull.curve_server = True
    pull.curve_publickey, pull.curve_secretkey = worker_public, worker_secret
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    worker = "tcp://127.0.0.1:%d#k=%s" % (port, z85.decode(worker_public).hex())
    t = transport_for(creds(cluster))
    pushes = {}

    def answer_one(timeout_ms=5000):
        assert pull.poll(timeout_ms), "the fake worker got no request"
        req = anna_pb2.KeyRequest.FromString(pull.recv())
        reply_to = req.response_address
        if reply_to not in pushes:
            push = ctx.socket(zmq.PUSH)
            push.linger = 0
            push.curve_publickey = cluster_creds.keypair.public
            push.curve_secretkey = cluster_creds.keypair.secret
            push.curve_serverkey = z85.encode(bytes.fromhex(reply_to.split("#k=")[1]))
            push.connect(reply_to.split("#")[0])
            pushes[reply_to] = push
        resp = anna_pb2.KeyResponse(type=req.type, request_id=req.request_id, responder=worker,
                                    link_address=impostor.address)
        resp.tuples.add(key=req.tuples[0].key, error=anna_pb2.KEY_DNE)
        pushes[reply_to].send(resp.SerializeToString())

    try:
        import threading
        t1 = threading.Thread(target=answer_one)
        t1.start()
        assert exchange(t, worker, request(anna_pb2.GET, "x", t.address, "a"), "a")
        t1.join()
        server = threading.Thread(target=impostor.serve_one)
        server.start()
        t2 = threading.Thread(target=answer_one)
        t2.start()
        got = exchange(t, worker, request(anna_pb2.GET, "x", t.address, "b"), "b")
        t2.join()
        # The link is set up while the transport waits: wait until it gave up on it.
        poll_until(lambda: t.collect(["none"], REQUEST_ID, 0.05, 1) == [] and
                   t.stats()["link_failures"] == 1, timeout=5, what="the impostor's link dropped")
        server.join(10)
        assert got.request_id == "b"         # answered over ZeroMQ
        assert impostor.hellos == 1          # the transport did try the link...
        assert impostor.after_welcome == b""  # ...and sent nothing after the false WELCOME
        stats = t.stats()
        assert stats["link_failures"] == 1 and stats["link_requests"] == 0
    finally:
        t.close()
        for s in pushes.values():
            s.close()
        pull.close()
        ctx.term()
        impostor.close()


# ---- abuse of an open link: closed, and the worker serves the others ------------------------

@pytest.mark.parametrize("abuse", ["tampered", "replayed", "reordered", "oversized"])
def test_a_bad_frame_closes_the_link_and_the_worker_serves_others(cluster, abuse):
    cluster.client().put("s-2", b"v2")
    worker, link, server_key = link_and_key(cluster, "s-2")
    bystander = peer(cluster, link, server_key)
    p = peer(cluster, link, server_key)
    try:
        assert bystander.handshake() is None and p.handshake() is None
        get = lambda rid: request(anna_pb2.GET, "s-2", "tcp://127.0.0.1:1", rid)
        p.send(get("ok"))
        assert anna_pb2.KeyResponse.FromString(p.recv()).request_id == "ok"
        if abuse == "tampered":
            f = bytearray(p.frame_for(get("t")))
            f[-1] ^= 0x01
            p.sock.sendall(bytes(f))
        elif abuse == "replayed":
            f = p.frame_for(get("r"))
            p.sock.sendall(f)
            assert anna_pb2.KeyResponse.FromString(p.recv()).request_id == "r"
            p.sock.sendall(f)
        elif abuse == "reordered":
            first, second = p.frame_for(get("1")), p.frame_for(get("2"))
            p.sock.sendall(second + first)
        else:
            p.sock.sendall(b"\xf0\xff\xff\x7f" + b"x" * 1024)   # ~2 GiB declared
        assert p.recv() is None, "the worker answered after the bad frame"
        bystander.send(get("still"))
        assert anna_pb2.KeyResponse.FromString(bystander.recv()).request_id == "still"
        assert cluster.client().get("s-2") == b"v2"
    finally:
        p.close()
        bystander.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_changed_byte_of_a_sealed_frame_closes_the_link(cluster, data):
    """Whatever byte of a sealed request (counter or box) is changed, and however, the worker
    serves nothing from it and closes the link."""
    cluster.client().put("m", b"v")
    _, link, server_key = link_and_key(cluster, "m")
    p = peer(cluster, link, server_key)
    try:
        assert p.handshake() is None
        f = bytearray(p.frame_for(request(anna_pb2.GET, "m", "tcp://127.0.0.1:1", "x")))
        at = data.draw(st.integers(4, len(f) - 1), label="byte")      # after the length
        f[at] ^= data.draw(st.integers(1, 255), label="xor")
        p.sock.sendall(bytes(f))
        assert p.recv() is None
    finally:
        p.close()


def test_a_stalled_handshake_is_closed_within_its_deadline(cluster):
    cluster.client().put("h", b"v")
    _, link, server_key = link_and_key(cluster, "h")
    before = logged(cluster, "handshake not done within")
    with connect(link) as silent:                 # says nothing at all
        p = peer(cluster, link, server_key)
        try:
            p.sock.sendall(p.hello())              # HELLO, then never INITIATE
            assert read_frame(p.sock)[:4] == b"AL1W"
            started = time.monotonic()
            assert read_frame(p.sock, timeout=5.0) is None
            assert read_frame(silent, timeout=5.0) is None
            waited = time.monotonic() - started
            assert waited < 3.0, f"closed after {waited:.1f} s (deadline 1 s)"
        finally:
            p.close()
    poll_until(lambda: logged(cluster, "handshake not done within") >= before + 2, 5,
               "both stalled handshakes logged")
    assert cluster.client().get("h") == b"v"


def test_the_native_load_generator_uses_secured_links(cluster):
    client = cluster.client()
    owners = [client.addresses(f"k{i}")[0] for i in range(30)]
    auth = creds(cluster)
    result = _core.load_anna(owners, clients=4, duration_s=0.3, warmup_s=0.1, keys=30, auth=auth)
    assert result["errors"] == 0 and result["ops"] > 0
    assert result["links"] == len(set(owners))
    result = _core.load_anna(owners, clients=4, duration_s=0.3, warmup_s=0.1, keys=30, auth=auth,
                             links=False)
    assert result["errors"] == 0 and result["ops"] > 0 and result["links"] == 0
