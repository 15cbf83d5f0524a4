"""Links between processes on one host over a Unix-domain socket (anna_core/csrc/link.hpp,
unix_links.hpp): a link listener offers one next to its TCP port ("tcp://h:p|unix:PATH"), a
client on the same host uses it and any other uses TCP at once; the socket file lives in a
directory its user alone can reach and goes with its listener; the transport changes, the
security does not (secured links run the same handshake over it)."""
import os
import socket
import stat
import subprocess
import sys

import pytest
import zmq.utils.z85 as z85

import anna_core
from anna_core import _core
from anna_core.config import NodeConfig as AnnaNodeConfig
from executor.call_links import WorkerCallLinks
from executor.config import NodeConfig as ExecutorNodeConfig, WorkerConfig
from hydro_proto import anna_pb2
from runtime.config import help_of
from sealed_link import LinkPeer, connect, frame, keypair, read_frame
from test_anna_secure_links import creds, exchange, link_and_key, request, transport_for
from waiting import poll_until

MARK = "|unix:"


def unix_path(address):
    assert MARK in address, f"{address} names no Unix-domain socket"
    return address.split(MARK, 1)[1]


# ---- addresses and the socket directory -----------------------------------------------------

def test_a_link_address_names_its_tcp_port_and_may_name_its_unix_socket():
    assert _core.split_link_address("tcp://127.0.0.1:5") == ("127.0.0.1", 5, "")
    assert _core.split_link_address("tcp://10.0.0.2:6|unix:/tmp/anna-links-0/1-ab") == \
        ("10.0.0.2", 6, "/tmp/anna-links-0/1-ab")
    for bad in ("tcp://h:0", "tcp://h:1|unix:relative", "tcp://h:1|unix:",
                "tcp://h:1|unix:/" + "x" * 120, "unix:/tmp/x", "tcp://h|unix:/tmp/x",
                "tcp://h:1|unix:/a\0b", "tcp://h:1|tcp://h:2"):
        assert _core.split_link_address(bad) is None, bad


def test_the_socket_directory_is_private_and_one_someone_else_could_reach_is_refused(tmp_path):
    base = str(tmp_path)
    d, why = _core.unix_link_dir(base)
    assert (d, why) == (f"{base}/anna-links-{os.geteuid()}", "")
    st = os.lstat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert _core.unix_link_dir(base) == (d, "")                # found as made
    os.chmod(d, 0o755)                                         # readable by others
    assert _core.unix_link_dir(base)[0] == ""
    os.rmdir(d)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, d)                                   # a link to a private one
    refused, why = _core.unix_link_dir(base)
    assert refused == "" and "0700" in why
    if os.geteuid() == 0:                                      # another user's
        os.unlink(d)
        os.mkdir(d, 0o700)
        os.chown(d, 65534, 65534)
        assert _core.unix_link_dir(base)[0] == ""


def _bound(path, listen):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    if listen:
        s.listen(1)
    return s


def test_sweeping_removes_only_the_socket_files_of_listeners_that_are_gone(tmp_path):
    d = _core.unix_link_dir(str(tmp_path))[0]
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = _bound(f"{d}/{gone.pid}-aa", listen=False)          # its process gone, no listener
    left.close()
    # a listener under a gone pid's name (a process of another pid namespace): kept
    alive = _bound(f"{d}/{gone.pid}-bb", listen=True)
    # a running process' (not listening now, but its process may yet): kept
    running = _bound(f"{d}/{os.getppid()}-cc", listen=False)
    running.close()
    (tmp_path / d / "notes").write_text("not ours")
    try:
        assert _core.sweep_stale_links(d) == 1
        assert sorted(os.listdir(d)) == sorted([f"{gone.pid}-bb", f"{os.getppid()}-cc", "notes"])
    finally:
        alive.close()


# ---- the listener's file ---------------------------------------------------------------------

def test_the_socket_file_goes_with_its_listener_and_a_killed_ones_with_the_next_listener():
    server = _core.CallLinkServer("127.0.0.1", 1 << 20)
    path = unix_path(server.address)
    st = os.stat(os.path.dirname(path))
    assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    del server
    assert not os.path.exists(path)
    # a listener in a process killed outright leaves its file; a restart is not hindered
    # (a new name) and removes it
    code = ("import time; from anna_core import _core; s = _core.CallLinkServer('127.0.0.1', "
            "1 << 20); print(s.address, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=os.getcwd())
    try:
        killed = unix_path(p.stdout.readline().decode().strip())
    finally:
        p.kill()
        p.wait()
    assert os.path.exists(killed)
    server = _core.CallLinkServer("127.0.0.1", 1 << 20)
    assert not os.path.exists(killed)
    assert os.path.exists(unix_path(server.address)) and unix_path(server.address) != killed


# ---- the client's choice ---------------------------------------------------------------------

def _open(client, server, address):
    link, why = client.begin(address, "", 5.0)
    assert link, why

    def opened():
        server.service()
        return link in client.wait(0.01)[3]
    poll_until(opened, 5.0, "the link open")
    return link


def _echo(client, server, link):
    assert client.send(link, b"ping", 1.0)
    got = []

    def answered():
        for lk, payload, _ in server.service():
            server.send(lk, payload)
        got.extend(client.wait(0.01)[1])
        return got
    return poll_until(answered, 5.0, "the echo")


def test_a_client_uses_the_unix_socket_else_tcp_at_once_when_the_path_is_missing_or_refuses():
    server = _core.CallLinkServer("127.0.0.1", 1 << 20)
    client = _core.CallLinkClient()
    address, path = server.address, unix_path(server.address)
    link = _open(client, server, address)
    assert (client.unix_links, server.stats()["unix"], server.stats()["accepted"]) == (1, 1, 1)
    assert _echo(client, server, link) == [(link, b"ping")]
    client.close(link)
    # the path missing (another host, another pod): TCP, opened as fast as ever
    os.unlink(path)
    link = _open(client, server, address)
    assert (client.unix_links, server.stats()["unix"], server.stats()["accepted"]) == (0, 1, 2)
    assert _echo(client, server, link) == [(link, b"ping")]
    client.close(link)
    # a socket there that refuses connections: TCP too
    refusing = _bound(path, listen=False)
    try:
        link = _open(client, server, address)
        assert (client.unix_links, server.stats()["accepted"]) == (0, 3)
        assert _echo(client, server, link) == [(link, b"ping")]
    finally:
        refusing.close()


def test_a_client_uses_no_socket_in_a_directory_others_reach_nor_one_its_owner_does_not_serve(
        tmp_path):
    """A socket in a directory open to others (anyone could have put it there), or served by
    a process of another user than the directory's owner (SO_PEERCRED), is not the worker's:
    the client connects over TCP."""
    server = _core.CallLinkServer("127.0.0.1", 1 << 20)
    client = _core.CallLinkClient()
    tcp = server.address.split(MARK)[0]
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    directories = [shared]
    if os.geteuid() == 0:                     # a directory of another user, served by root
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        directories.append(theirs)
    for directory in directories:
        impostor = _bound(str(directory / "1-ab"), listen=True)
        try:
            link = _open(client, server, f"{tcp}{MARK}{directory}/1-ab")
            assert client.unix_links == 0 and server.stats()["unix"] == 0
            assert _echo(client, server, link) == [(link, b"ping")]
            client.close(link)
        finally:
            impostor.close()
    # the same socket in a private directory of its own user is used
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    listener = _bound(str(mine / "1-ab"), listen=True)
    try:
        link, why = client.begin(f"{tcp}{MARK}{mine}/1-ab", "", 5.0)
        assert link and client.unix_links == 1, why
    finally:
        listener.close()


def test_unix_links_off_offers_tcp_alone():
    links = WorkerCallLinks.open("127.0.0.1", None, "test: ", unix_links=False)
    assert MARK not in links.address and links.address.startswith("tcp://127.0.0.1:")
    assert MARK in WorkerCallLinks.open("127.0.0.1", None, "test: ").address
    assert ExecutorNodeConfig(node_id="n", kvs_address="tcp://k:1").unix_links is True
    assert WorkerConfig(worker_id="w", node_id="n", kvs_address="k", cache_address="c") \
        .unix_links is True
    assert AnnaNodeConfig(node_id="n").unix_links is True
    for cls in (ExecutorNodeConfig, WorkerConfig, AnnaNodeConfig):
        assert "Unix-domain" in help_of(cls, "unix_links")
    assert _core.parse_node_config('{"node_id": "n", "unix_links": false}')["unix_links"] is False
    with pytest.raises(ValueError, match="unix_links must be a boolean"):
        _core.parse_node_config('{"node_id": "n", "unix_links": 1}')


# ---- real processes: a KVS node and its clients -----------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    """A CURVE KVS node whose worker serves client links."""
    with anna_core.LocalCluster(memory_threads=1, client_links=True) as c:
        yield c


def _stranger_refused_over_the_unix_socket(link_address, server_key):
    """A key nobody admitted, over the listener's Unix-domain socket: refused at the
    handshake, as over TCP (a test that fails if the socket skipped the handshake)."""
    stranger = LinkPeer(link_address, server_key, *keypair(), unix=True)
    try:
        assert stranger.sock.family == socket.AF_UNIX
        assert stranger.handshake() == "unknown public key"
        assert stranger.closed_by_worker()
    finally:
        stranger.close()


def test_a_kvs_client_on_the_nodes_host_links_over_the_unix_socket(cluster):
    cluster.client().put("x", b"1")
    worker, link, _ = link_and_key(cluster, "x")
    path = unix_path(link)
    t = transport_for(creds(cluster))
    try:
        for i in range(50):
            exchange(t, worker, request(anna_pb2.GET, "x", t.address, f"u{i}"), f"u{i}")
            if t.stats()["link_requests"] >= 5:
                break
        stats = t.stats()
        assert stats["link_requests"] >= 5 and stats["link_answers"] == stats["link_requests"]
        assert stats["links_open"] == 1 and stats["links_unix"] == 1
        assert stats["link_failures"] == 0
    finally:
        t.close()
    assert os.path.exists(path)


def test_over_the_unix_socket_an_unknown_key_is_refused_at_the_handshake(cluster):
    cluster.client().put("k", b"v")
    _, link, server_key = link_and_key(cluster, "k")
    _stranger_refused_over_the_unix_socket(link, server_key)
    c = creds(cluster)
    admitted = LinkPeer(link, server_key, z85.decode(c.keypair.public),
                        z85.decode(c.keypair.secret), unix=True)
    try:
        assert admitted.handshake() is None
        admitted.send(request(anna_pb2.GET, "k", "tcp://127.0.0.1:1", "ok"))
        assert anna_pb2.KeyResponse.FromString(admitted.recv()).request_id == "ok"
    finally:
        admitted.close()


def test_over_the_unix_socket_a_plain_request_on_a_secured_link_is_never_served(cluster):
    cluster.client().put("p", b"v")
    _, link, _ = link_and_key(cluster, "p")
    with connect(link, unix=True) as s:
        s.sendall(frame(request(anna_pb2.GET, "p", "tcp://127.0.0.1:1", "plain")))
        assert read_frame(s) is None          # closed: not a HELLO, and nothing answered


def test_a_node_stopped_removes_its_socket_files_and_unix_links_off_offers_none():
    with anna_core.LocalCluster(memory_threads=1, client_links=True, auth=False) as c:
        c.client().put("a", b"1")
        t = _core.ClientTransport()
        try:
            worker = c.client().addresses("a")[0]
            answer = exchange(t, worker, request(anna_pb2.GET, "a", t.address, "q"), "q")
            path = unix_path(answer.link_address)
        finally:
            t.close()
        assert os.path.exists(path)
    assert not os.path.exists(path)
    with anna_core.LocalCluster(memory_threads=1, client_links=True, auth=False,
                                unix_links=False) as c:
        c.client().put("a", b"1")
        t = _core.ClientTransport()
        try:
            worker = c.client().addresses("a")[0]
            answer = exchange(t, worker, request(anna_pb2.GET, "a", t.address, "q"), "q")
            assert answer.link_address.startswith("tcp://")
            assert MARK not in answer.link_address
        finally:
            t.close()


# ---- real processes: executor workers and a Cloudburst client ---------------------------------

def test_a_cloudburst_client_calls_a_worker_on_its_host_over_the_unix_socket_secured_alike():
    from cloudburst import LocalCluster as CloudburstCluster
    from runtime.auth import parse_address
    from test_call_links import _linked, _link_stats, inc
    from test_direct_calls import RawClient
    with CloudburstCluster(executor_nodes=1, executors_per_node=1) as c:     # CURVE on
        cb = c.client(direct=True)
        cb.register(inc, "inc")
        _linked(cb, "inc", lambda: cb.call("inc", 0).get(10))
        before = _link_stats(cb)
        assert [cb.call("inc", i).get(10) for i in range(10)] == list(range(1, 11))
        after = _link_stats(cb)
        assert after["unix"] == after["open"] == 1
        assert after["results"] - before["results"] == 10
        raw = RawClient(c)
        try:
            lease = raw.lease("inc")
            path = unix_path(lease.link_address)
            server_key = z85.decode(parse_address(lease.worker_address)[1])
            _stranger_refused_over_the_unix_socket(lease.link_address, server_key)
        finally:
            raw.close()
        assert os.path.exists(path)
        cb.close()
    assert not os.path.exists(path)               # the worker's stop removed its file
