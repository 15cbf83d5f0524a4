"""Client links (anna_core/csrc/link.hpp): plaintext KVS workers serving clients over their own
TCP connections, without ZeroMQ's I/O threads.

Covers: a worker with `client_links` advertises its link in its answers, the native transport
then sends requests over it and gets the answers back on it (and the Python client reads and
writes correctly through it); an authenticating cluster offers only a secured link (a plain
request on it is never served); abuse of a link (a frame above the limit, bytes that are not a request, a
flood of connections beyond the bound) closes or refuses that connection only, the worker
keeps serving, and a client whose link was refused still gets its answers over ZeroMQ; the
native load generator uses the links when asked and only then.
"""
import os
import shutil
import socket
import subprocess
import struct
import time

import pytest

import anna_core
from anna_core import _core
from anna_core.errors import KeyNotFound
from hydro_proto import anna_pb2
from sealed_link import connect, frame, read_frame     # a link's 4-byte length framing
from waiting import poll_until

REQUEST_ID = anna_pb2.KeyResponse.DESCRIPTOR.fields_by_name["request_id"].number


@pytest.fixture(scope="module")
def plain_cluster():
    cluster = anna_core.LocalCluster(memory_threads=2, auth=False, warn_auth_off=False,
                                     client_links=True)
    cluster.start()
    yield cluster
    cluster.stop()


def get_request(key, reply_to, request_id):
    request = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=reply_to,
                                  request_id=request_id)
    request.tuples.add(key=key)
    return request.SerializeToString()


def first_answer(transport, cluster, key, request_id="r0"):
    """One GET for `key` from the worker that owns it, over ZeroMQ: (worker, answer)."""
    worker = cluster.client().addresses(key)[0]
    raw = transport.exchange(worker, "", get_request(key, transport.address, request_id),
                             request_id, REQUEST_ID, 5.0)
    assert raw is not None, f"no answer from {worker}"
    return worker, anna_pb2.KeyResponse.FromString(raw)


# ---- the path ------------------------------------------------------------------------------

def test_a_worker_advertises_its_link_and_the_transport_uses_it(plain_cluster):
    client = plain_cluster.client()
    client.put("a", b"1")
    transport = _core.ClientTransport()
    try:
        worker, answer = first_answer(transport, plain_cluster, "a")
        assert answer.responder == worker
        assert answer.link_address.startswith("tcp://127.0.0.1:")
        assert answer.link_address != worker
        # The next request starts the link and goes over ZeroMQ; the link carries requests
        # once the worker has answered its probe on it.
        for i in range(50):
            rid = f"z{i}"
            assert transport.exchange(worker, "", get_request("a", transport.address, rid), rid,
                                      REQUEST_ID, 5.0) is not None
            if transport.stats()["link_requests"] > 0:
                break
        assert transport.stats()["link_requests"] > 0, "the link was never used"
        before = transport.stats()
        for i in range(20):
            rid = f"l{i}"
            raw = transport.exchange(worker, "", get_request("a", transport.address, rid), rid,
                                     REQUEST_ID, 5.0)
            got = anna_pb2.KeyResponse.FromString(raw)
            assert got.request_id == rid and got.tuples[0].error == anna_pb2.NO_ERROR
            assert not got.link_address        # answers on the link do not advertise again
        stats = transport.stats()
        assert stats["links_open"] == 1
        assert stats["link_requests"] - before["link_requests"] == 20
        assert stats["link_answers"] - before["link_answers"] == 20
        assert stats["link_failures"] == 0
    finally:
        transport.close()


def test_the_python_client_reads_and_writes_through_links(plain_cluster):
    client = plain_cluster.client()
    values = {f"key-{i}": (b"%d" % i) * (i + 1) for i in range(40)}
    for key, value in values.items():
        client.put(key, value)
    for _ in range(2):
        for key, value in values.items():
            assert client.get(key) == value
    client.delete("key-0")
    with pytest.raises(KeyNotFound):
        client.get("key-0")
    assert client.get_all("key-3") == values["key-3"]


def test_an_authenticated_cluster_offers_only_a_secured_link():
    """With CURVE the link is secured (tests/test_anna_secure_links.py): a plain request on
    it is never served, and a keyed transport uses it only after the key handshake."""
    cluster = anna_core.LocalCluster(memory_threads=1, client_links=True)
    cluster.start()
    try:
        client = cluster.client()
        client.put("s", b"secret")
        assert client.get("s") == b"secret"
        auth = cluster.client_auth.load()
        transport = _core.ClientTransport(public_key=auth.keypair.public,
                                          secret_key=auth.keypair.secret,
                                          cluster_keys=[k for k, role in auth.allowed.items()
                                                        if role == "cluster"])
        try:
            worker, answer = first_answer(transport, cluster, "s")
            assert "#k=" in worker                 # a CURVE worker
            assert answer.link_address             # with a link next to it...
            with connect(answer.link_address) as s:
                s.sendall(frame(get_request("s", transport.address, "plain")))
                assert read_frame(s) is None        # ...that serves no plain request
            for i in range(50):                    # until the handshake is done
                assert transport.exchange(worker, "", get_request("s", transport.address, f"c{i}"),
                                          f"c{i}", REQUEST_ID, 5.0) is not None
                if transport.stats()["link_requests"] >= 5:
                    break
            assert transport.stats()["link_requests"] >= 5
        finally:
            transport.close()
    finally:
        cluster.stop()


# ---- abuse: the link is closed or refused, the worker keeps serving -------------------------

def link_of(cluster, key):
    transport = _core.ClientTransport()
    try:
        worker, answer = first_answer(transport, cluster, key)
        return worker, answer.link_address
    finally:
        transport.close()


def test_a_frame_above_the_limit_closes_that_link_and_the_worker_keeps_serving(plain_cluster):
    client = plain_cluster.client()
    client.put("big", b"ok")
    _, link = link_of(plain_cluster, "big")
    with connect(link) as s:
        s.sendall(struct.pack("<I", 0xFFFFFFF0))      # declares ~4 GiB: above the worker's limit
        s.sendall(b"x" * 1024)
        assert read_frame(s) is None                   # closed by the worker, not answered
    assert client.get("big") == b"ok"


def test_bytes_that_are_not_a_request_are_dropped_and_the_link_keeps_serving(plain_cluster):
    client = plain_cluster.client()
    client.put("g", b"fine")
    worker, link = link_of(plain_cluster, "g")
    transport = _core.ClientTransport()              # only its address, for the deferred path
    try:
        with connect(link) as s:
            s.sendall(frame(b"\xff\xff\xff not protobuf"))
            s.sendall(frame(get_request("g", transport.address, "after-garbage")))
            answer = anna_pb2.KeyResponse.FromString(read_frame(s))
            assert answer.request_id == "after-garbage"
            assert answer.tuples[0].error == anna_pb2.NO_ERROR
    finally:
        transport.close()
    assert client.get("g") == b"fine"


def test_connections_beyond_the_bound_are_refused_and_clients_fall_back_to_zeromq(plain_cluster):
    client = plain_cluster.client()
    client.put("f", b"v")
    worker, link = link_of(plain_cluster, "f")
    hogs = []
    try:
        # Fill the worker's link table (256 a worker), then one more: refused (closed at once).
        for _ in range(256):
            hogs.append(connect(link))
        def refused():
            extra = connect(link)
            try:
                return read_frame(extra, 2.0) is None
            except socket.timeout:
                return False
            finally:
                extra.close()
        poll_until(refused, timeout=10, what="a connection beyond the bound was refused")
        transport = _core.ClientTransport()
        try:
            # Its link is refused (closed before it is ready): no request is written on it,
            # and they all go over ZeroMQ.
            rid = "x0"
            assert transport.exchange(worker, "", get_request("f", transport.address, rid), rid,
                                      REQUEST_ID, 5.0) is not None      # learns the link
            started = time.monotonic()
            for i in range(1, 5):
                rid = f"x{i}"
                raw = transport.exchange(worker, "", get_request("f", transport.address, rid),
                                         rid, REQUEST_ID, 5.0)
                assert raw is not None, f"request {i} was not answered"
                assert anna_pb2.KeyResponse.FromString(raw).request_id == rid
            assert time.monotonic() - started < 5
            poll_until(lambda: transport.collect(["none"], REQUEST_ID, 0.05, 1) == [] and
                       transport.stats()["link_failures"] == 1, timeout=5,
                       what="the refused link seen closed")
            stats = transport.stats()
            assert stats["link_failures"] == 1          # tried once, then not for a while
            assert stats["links_open"] == 0 and stats["link_requests"] == 0
        finally:
            transport.close()
    finally:
        for h in hogs:
            h.close()
    assert client.get("f") == b"v"


def test_the_node_option_is_a_boolean_and_on_by_default():
    from anna_core.config import ClusterConfig, NodeConfig
    assert _core.parse_node_config('{"node_id": "n"}')["client_links"] is True
    assert _core.parse_node_config('{"node_id": "n", "client_links": false}')["client_links"] is False
    assert NodeConfig(node_id="n").client_links is True and ClusterConfig().client_links is True
    with pytest.raises(ValueError, match="client_links must be a boolean"):
        _core.parse_node_config('{"node_id": "n", "client_links": "yes"}')


def test_the_native_load_generator_uses_the_links(plain_cluster):
    client = plain_cluster.client()
    owners = [client.addresses(f"k{i}")[0] for i in range(50)]
    result = _core.load_anna(owners, clients=4, duration_s=0.3, warmup_s=0.1, keys=50)
    assert result["errors"] == 0 and result["ops"] > 0
    assert result["links"] == len(set(owners))
    result = _core.load_anna(owners, clients=4, duration_s=0.3, warmup_s=0.1, keys=50,
                             links=False)
    assert result["errors"] == 0 and result["ops"] > 0 and result["links"] == 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux prlimit")
def test_a_full_descriptor_table_refuses_links_instead_of_spinning():
    cluster = anna_core.LocalCluster(memory_threads=1, auth=False, warn_auth_off=False,
                                     client_links=True)
    cluster.start()
    hogs = []
    try:
        client = cluster.client()
        client.put("e", b"v")
        assert client.get("e") == b"v"              # its sockets exist before the limit
        _, link = link_of(cluster, "e")
        pid = cluster.node_pid("memory-0")
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={in_use + 4}:{in_use + 4}"],
                       check=True)
        for _ in range(20):                          # beyond what the node can accept
            hogs.append(connect(link))
        poll_until(lambda: "cannot accept client links" in cluster.log_tail("memory-0", 50),
                   timeout=10, what="the worker pausing its accepts")
        before = cpu_seconds(pid)
        started = time.monotonic()
        assert client.get("e") == b"v"               # still served
        time.sleep(1.0)                              # measuring idle CPU over a window
        used = cpu_seconds(pid) - before
        assert used < 0.25 * (time.monotonic() - started), f"the node used {used:.2f} s of CPU"
    finally:
        for h in hogs:
            h.close()
        cluster.stop()
