"""CURVE authentication in the Anna kernel and the node process (anna_core/DESIGN.md
"Authentication").

A real `_core.Node` runs in this process with the cluster's keys; the test talks to its
workers over loopback from its own ZeroMQ context (as another process would), with the
cluster key, an authorized client key (alice), an unknown key or no CURVE at all. Membership
is delivered the way routing does: a `membership` message to every worker. Refusals are
observed through the node's counters (`Node.stats()`) and its log lines on stderr; every wait
has a deadline.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import zmq

from anna_core import _core
from anna_core.config import NodeConfig
from hydro_proto import anna_pb2
from runtime.auth import (AuthConfig, Authenticator, Credentials, KeyPair, parse_address,
                          strip_key, write_keys)
from runtime.sockets import PushCache, bind_pull
from waiting import poll_until

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEADLINE = 10.0          # seconds for anything the node should do
GOSSIP_MS = 20           # short epochs: stats and gossip are published every epoch


@pytest.fixture
def keys(tmp_path):
    key_dir = str(tmp_path / "keys")
    write_keys(key_dir, ["alice"])
    cluster = AuthConfig(key_dir).load()
    alice = AuthConfig(key_dir, "client:alice").load()
    mallory = Credentials(KeyPair.generate(), "client:mallory", dict(alice.allowed))
    return {"dir": key_dir, "cluster": cluster, "alice": alice, "mallory": mallory}


class Peer:
    """One party talking to the node: its own context (with a ZAP handler when it has
    credentials), a response socket and pushes."""

    def __init__(self, credentials=None):
        self.context = zmq.Context()
        self.authenticator = None
        if credentials is not None:
            self.authenticator = Authenticator(self.context, credentials).start()
        self.credentials = credentials
        self.pull, self.address = bind_pull(self.context, auth=credentials)
        self.push = PushCache(self.context, linger_ms=0, auth=credentials)
        self.sequence = 0

    def send(self, address, kind, message):
        return self.push.send_kind(address, kind, message)

    def request(self, worker, rtype, key, payload=None, *, response_address=None,
                expect_answer=True, timeout=DEADLINE):
        """Send one KeyRequest to `worker` and return the KeyResponse (None if
        `expect_answer` is False)."""
        self.sequence += 1
        rid = f"r{self.sequence}"
        tuple_ = anna_pb2.KeyTuple(key=key, lattice_type=anna_pb2.LWW)
        if payload is not None:
            tuple_.payload = payload
        req = anna_pb2.KeyRequest(type=rtype, tuples=[tuple_], request_id=rid,
                                  response_address=response_address or self.address)
        assert self.send(worker, "request", req)
        if not expect_answer:
            return None
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self.pull.poll(int(left * 1000) + 1):
                response = anna_pb2.KeyResponse.FromString(self.pull.recv())
                if response.request_id == rid:
                    return response
        raise AssertionError(f"no answer to {rid} from {worker} within {timeout:g} s")

    def nothing_arrives(self, ms=300):
        return self.pull.poll(ms) == 0

    def close(self):
        self.push.close()
        self.pull.close(0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.term()


@pytest.fixture
def peers():
    made = []

    def make(credentials=None):
        made.append(Peer(credentials))
        return made[-1]

    yield make
    for p in reversed(made):
        p.close()


def lww(value: bytes, ts: int = None) -> bytes:
    return _core.LWWLattice(ts or time.time_ns(), value).serialize()


def start_node(keys, threads=1, node_id="n1"):
    config = NodeConfig(node_id=node_id, threads=threads, pin_threads=False,
                        gossip_period_ms=GOSSIP_MS)
    node = _core.Node(config.kernel_json(keys["cluster"] if keys else None))
    node.start()
    return node


def membership(node, version=1, memory_local=1):
    return anna_pb2.Membership(
        version=version, vnodes=64,
        nodes=[anna_pb2.NodeInfo(node_id=node.node_id, tier=anna_pb2.MEMORY,
                                 worker_addresses=list(node.worker_addresses()))],
        default_replication=anna_pb2.Replication(memory_global=1, memory_local=memory_local,
                                                 disk_global=0, disk_local=1))


def deliver(node, sender, message):
    """Membership to every worker, as routing broadcasts it; waits until all applied it."""
    for address in node.worker_addresses():
        assert sender.send(address, "membership", message)
    poll_until(lambda: all(s["membership_version"] >= message.version for s in node.stats()),
               DEADLINE, f"membership version {message.version} applied by every worker")


def owner(node, key, memory_local=1):
    cm = _core.ClusterMap(default_replication=(1, memory_local, 0, 1), vnodes=64)
    cm.add_node(node.node_id, 0, list(node.worker_addresses()))
    return cm.responsible(key, 0)[0]


def total(node, counter):
    return sum(s[counter] for s in node.stats())


@pytest.fixture
def node(keys, peers):
    n = start_node(keys)
    deliver(n, peers(keys["cluster"]), membership(n))
    yield n
    n.stop()


# --- the happy paths -------------------------------------------------------------------------

def test_worker_addresses_carry_the_server_key_and_parse_config_hides_the_secret(keys, node):
    (address,) = node.worker_addresses()
    endpoint, key = parse_address(address)
    assert endpoint.startswith("tcp://127.0.0.1:") and key == keys["cluster"].keypair.public
    assert node.auth and {"auth_dropped", "auth_refused", "push_refused"} <= set(node.stats()[0])
    parsed = _core.parse_node_config(NodeConfig(node_id="x").kernel_json(keys["cluster"]))
    assert parsed["curve"] is True and "curve_secret_key" not in parsed
    assert parsed["curve_admitted"] == {k.decode(): r for k, r in keys["cluster"].allowed.items()
                                        if r != "function"}     # the KVS never admits it


def test_a_client_key_puts_and_gets_through_the_keyed_address(keys, node, peers):
    alice = peers(keys["alice"])
    assert parse_address(alice.address)[1] == keys["alice"].keypair.public   # a CURVE server
    worker = owner(node, "greeting")
    put = alice.request(worker, anna_pb2.PUT, "greeting", lww(b"hello"))
    assert put.error == anna_pb2.NO_ERROR and put.tuples[0].error == anna_pb2.NO_ERROR
    got = alice.request(worker, anna_pb2.GET, "greeting")
    assert _core.deserialize(anna_pb2.LWW, got.tuples[0].payload).reveal() == b"hello"
    # DELETE is a request too: allowed for an authorized client.
    gone = alice.request(worker, anna_pb2.DELETE, "greeting")
    assert gone.tuples[0].error == anna_pb2.NO_ERROR
    assert alice.request(worker, anna_pb2.GET, "greeting").tuples[0].error == anna_pb2.KEY_DNE
    assert total(node, "auth_dropped") == 0 and total(node, "push_refused") == 0


def test_the_cluster_key_may_gossip_and_change_membership(keys, node, peers):
    cluster = peers(keys["cluster"])
    worker = owner(node, "g")
    gossip = anna_pb2.KeyRequest(type=anna_pb2.PUT, tuples=[anna_pb2.KeyTuple(
        key="g", lattice_type=anna_pb2.LWW, payload=lww(b"from a replica"))])
    assert cluster.send(worker, "gossip", gossip)
    poll_until(lambda: total(node, "gossip_in") >= 1, DEADLINE, "the gossip counted")
    got = cluster.request(worker, anna_pb2.GET, "g")
    assert _core.deserialize(anna_pb2.LWW, got.tuples[0].payload).reveal() == b"from a replica"
    deliver(node, cluster, membership(node, version=2))
    assert total(node, "auth_dropped") == 0


def test_own_workers_reach_each_other_over_inproc_with_auth_on(keys, peers):
    """With two replicas on one node, a PUT on one worker reaches the other by gossip over
    inproc: ZeroMQ runs no CURVE handshake there, and the worker treats a message without a
    ZAP User-Id (only its own process can send one) as the cluster's."""
    n = start_node(keys, threads=2)
    try:
        deliver(n, peers(keys["cluster"]), membership(n, memory_local=2))
        alice = peers(keys["alice"])
        first, second = n.worker_addresses()
        assert alice.request(first, anna_pb2.PUT, "both", lww(b"v")).tuples[0].error == 0

        def replicated():
            got = alice.request(second, anna_pb2.GET, "both")
            return got.tuples[0].error == anna_pb2.NO_ERROR and got
        got = poll_until(replicated, DEADLINE, "the PUT gossiped to the second worker")
        assert _core.deserialize(anna_pb2.LWW, got.tuples[0].payload).reveal() == b"v"
        poll_until(lambda: total(n, "gossip_in") >= 1, DEADLINE, "the gossip counted")
        assert total(n, "auth_dropped") == 0
        # Four handshakes: the cluster peer's and alice's, one per worker each. The gossip
        # between the workers went over inproc, without one.
        assert n.stats()[0]["auth_accepted"] == 4
    finally:
        n.stop()


# --- refusals -----------------------------------------------------------------------------------

CLUSTER_ONLY = ("membership", "gossip", "replication", "handoff", "handoff_ack", "fetch",
                "fetched")


def test_cluster_only_kinds_from_a_client_are_dropped_and_the_node_keeps_serving(
        keys, node, peers, capfd):
    alice = peers(keys["alice"])
    worker = owner(node, "k")
    before = node.stats()[0]
    put_k = anna_pb2.KeyRequest(type=anna_pb2.PUT, request_id="h1", response_address=alice.address,
                                tuples=[anna_pb2.KeyTuple(key="k", lattice_type=anna_pb2.LWW,
                                                          payload=lww(b"forged"))])
    forged = {
        "membership": anna_pb2.Membership(version=99),              # would empty the ring
        "gossip": put_k, "handoff": put_k,
        "replication": anna_pb2.ReplicationUpdate(overrides=[anna_pb2.KeyReplication(
            key="k", replication=anna_pb2.Replication(memory_global=0))]),
        "handoff_ack": anna_pb2.KeyResponse(request_id="h1"),
        "fetch": anna_pb2.KeyRequest(type=anna_pb2.GET, request_id="f1",
                                     response_address=alice.address,
                                     tuples=[anna_pb2.KeyTuple(key="k")]),
        "fetched": anna_pb2.KeyResponse(request_id="f1"),
    }
    assert set(forged) == set(CLUSTER_ONLY)
    for kind, message in forged.items():
        assert alice.send(worker, kind, message)
    poll_until(lambda: total(node, "auth_dropped") == len(CLUSTER_ONLY), DEADLINE,
               "every cluster-only message from alice dropped")
    after = node.stats()[0]
    assert after["membership_version"] == before["membership_version"] == 1
    assert (after["gossip_in"], after["handoff_in"]) == (before["gossip_in"], before["handoff_in"])
    assert alice.nothing_arrives()                      # no fetched, no handoff_ack
    # still serving alice's requests, and the forged value never landed
    assert alice.request(worker, anna_pb2.GET, "k").tuples[0].error == anna_pb2.KEY_DNE
    assert alice.request(worker, anna_pb2.PUT, "k", lww(b"real")).tuples[0].error == 0
    err = capfd.readouterr().err
    for kind in CLUSTER_ONLY:
        assert f"dropped a '{kind}' message from client:alice at 127.0.0.1" in err
    assert total(node, "dropped") == 0                  # not counted as malformed


def test_an_unknown_key_is_refused_at_the_handshake_and_logged_with_its_address(
        keys, node, peers, capfd):
    mallory = peers(keys["mallory"])
    worker = owner(node, "k")
    requests = total(node, "requests")
    mallory.request(worker, anna_pb2.PUT, "k", lww(b"x"), expect_answer=False)
    poll_until(lambda: node.stats()[0]["auth_refused"] >= 1, DEADLINE, "the refusal counted")
    err = capfd.readouterr().err
    key = keys["mallory"].keypair.public.decode()
    assert f"refused a connection from 127.0.0.1: unknown public key {key}" in err
    # Nothing was processed; an admitted client is still served.
    alice = peers(keys["alice"])
    assert alice.request(worker, anna_pb2.GET, "k").tuples[0].error == anna_pb2.KEY_DNE
    poll_until(lambda: total(node, "requests") == requests + 1, DEADLINE, "alice's GET counted")
    assert mallory.nothing_arrives()


def test_a_plain_peer_is_refused_at_the_handshake(keys, node, peers, capfd):
    plain = peers(None)
    worker = owner(node, "k")
    endpoint = strip_key(worker)
    requests = total(node, "requests")
    raw = plain.context.socket(zmq.PUSH)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(endpoint)
    try:
        req = anna_pb2.KeyRequest(type=anna_pb2.PUT, request_id="p", response_address=plain.address,
                                  tuples=[anna_pb2.KeyTuple(key="k", lattice_type=anna_pb2.LWW,
                                                            payload=lww(b"plain"))])
        raw.send_multipart([b"request", req.SerializeToString()], flags=zmq.NOBLOCK)
        poll_until(lambda: node.stats()[0]["auth_refused"] >= 1, DEADLINE, "the refusal counted")
    finally:
        raw.close(0)
    # libzmq reports either the mechanism mismatch or, when the plain peer noticed first and
    # hung up, a failure without detail; either way the line names the refusing endpoint.
    line = next(l for l in capfd.readouterr().err.splitlines() if "refused a connection" in l)
    assert f"refused a connection on {endpoint}: " in line and "without CURVE" in line
    alice = peers(keys["alice"])
    assert alice.request(worker, anna_pb2.GET, "k").tuples[0].error == anna_pb2.KEY_DNE
    poll_until(lambda: total(node, "requests") == requests + 1, DEADLINE, "alice's GET counted")
    assert plain.nothing_arrives()


def test_with_auth_on_a_worker_refuses_to_push_to_a_keyless_address(keys, node, peers, capfd):
    alice = peers(keys["alice"])
    plain = peers(None)                          # a plain response socket: no key in its address
    worker = owner(node, "k")
    alice.request(worker, anna_pb2.GET, "k", response_address=plain.address, expect_answer=False)
    poll_until(lambda: total(node, "push_refused") == 1, DEADLINE, "the push refused")
    assert plain.nothing_arrives()
    assert f"not sending to '{plain.address}': it carries no server key" in capfd.readouterr().err
    assert alice.request(worker, anna_pb2.GET, "k").tuples[0].error == anna_pb2.KEY_DNE


def test_plain_node_is_unchanged(peers):
    """Without keys: plain addresses, plain peers served, no User-Id checks."""
    n = start_node(None)
    try:
        plain = peers(None)
        deliver(n, plain, membership(n))
        (worker,) = n.worker_addresses()
        assert parse_address(worker)[1] is None and not n.auth
        assert plain.request(worker, anna_pb2.PUT, "k", lww(b"v")).tuples[0].error == 0
        assert total(n, "auth_refused") == 0 and total(n, "auth_dropped") == 0
    finally:
        n.stop()


# --- configuration ---------------------------------------------------------------------------

def test_kernel_config_checks_the_keys_and_never_quotes_the_secret(keys):
    good = json.loads(NodeConfig(node_id="x").kernel_json(keys["cluster"]))
    secret = good["curve_secret_key"]
    bad = [
        {**good, "curve_public_key": keys["alice"].keypair.public.decode()},   # not its pair
        {**good, "curve_secret_key": "short"},
        {**good, "curve_admitted": {}},
        {**good, "curve_admitted": {good["curve_public_key"]: "admin"}},
        {**good, "curve_admitted": {"nope": "cluster"}},
        {**good, "curve_admitted": {good["curve_public_key"]: 1}},
        {"node_id": "x", "curve_admitted": good["curve_admitted"]},            # no secret
    ]
    for config in bad:
        with pytest.raises(ValueError) as e:
            _core.parse_node_config(json.dumps(config))
        assert secret not in str(e.value)


def test_node_config_carries_key_dir_not_keys(keys):
    c = NodeConfig(node_id="x", key_dir=keys["dir"])
    assert json.loads(c.to_json())["key_dir"] == keys["dir"]
    assert NodeConfig.from_json(c.to_json()) == c
    kernel = json.loads(c.kernel_json(keys["cluster"]))
    assert "key_dir" not in kernel and kernel["curve_public_key"]
    assert "key_dir" not in json.loads(NodeConfig(node_id="x").to_json())
    with pytest.raises(ValueError, match="key_dir, not keys"):
        NodeConfig.from_json(json.dumps({**kernel}))


# --- the load generator --------------------------------------------------------------------

def test_load_anna_runs_authenticated(keys, node):
    owners = [owner(node, f"k{i}") for i in range(20)]
    result = _core.load_anna(owners, clients=2, duration_s=0.3, warmup_s=0.05, keys=20,
                             auth=keys["alice"])
    assert result["ops"] > 0 and result["errors"] == 0
    with pytest.raises(ValueError, match="CURVE server"):
        _core.load_anna(owners, clients=1, duration_s=0.1, keys=20)


# --- the node process ------------------------------------------------------------------------

def test_the_node_process_loads_key_dir_and_talks_to_routing_over_curve(keys, peers, tmp_path):
    """A stand-in for routing (cluster key, CURVE server) gets the node's join from the
    node's own CURVE pushes, answers on the node's keyed control socket, and gets
    heartbeats; the secret never appears on the node's command line."""
    routing = peers(keys["cluster"])
    ready = tmp_path / "ready.json"
    config = NodeConfig(node_id="pn", pin_threads=False, gossip_period_ms=GOSSIP_MS,
                        key_dir=keys["dir"])
    argv = [sys.executable, "-m", "anna_core.node", "--config", config.to_json(),
            "--routing", routing.address, "--ready-file", str(ready),
            "--heartbeat-period", "0.2", "--join-timeout", str(DEADLINE)]
    assert keys["cluster"].keypair.secret.decode() not in " ".join(argv)
    proc = subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def next_message(kind_wanted):
            deadline = time.monotonic() + DEADLINE
            while (left := deadline - time.monotonic()) > 0:
                if routing.pull.poll(int(left * 1000) + 1):
                    kind, payload = routing.pull.recv_multipart()
                    if kind.decode() == kind_wanted:
                        return payload
            raise AssertionError(f"no {kind_wanted} from the node within {DEADLINE:g} s")
        join = anna_pb2.NodeJoin.FromString(next_message("join"))
        (worker,) = join.node.worker_addresses
        assert parse_address(worker)[1] == keys["cluster"].keypair.public
        assert parse_address(join.control_address)[1] == keys["cluster"].keypair.public
        ack = anna_pb2.Membership(version=1, vnodes=64, nodes=[join.node],
                                  default_replication=anna_pb2.Replication(
                                      memory_global=1, memory_local=1, disk_local=1))
        assert routing.push.send_frame(join.control_address, ack.SerializeToString())
        poll_until(ready.exists, DEADLINE, "the node ready")
        heartbeat = anna_pb2.NodeHeartbeat.FromString(next_message("heartbeat"))
        assert heartbeat.node.node_id == "pn"
        # A client key cannot reach the node's control socket (cluster audience).
        alice = peers(keys["alice"])
        assert alice.push.send_frame(join.control_address, b"x")
        # (the refusal is logged by the node; read below once it has exited)
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert keys["cluster"].keypair.secret not in f.read()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert b"client:alice key on a cluster-only socket" in err


def test_the_node_process_refuses_a_keyless_routing_address_with_auth_on(keys, tmp_path):
    config = NodeConfig(node_id="pk", pin_threads=False, key_dir=keys["dir"])
    proc = subprocess.run([sys.executable, "-m", "anna_core.node", "--config", config.to_json(),
                           "--routing", "tcp://127.0.0.1:5"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": REPO}, capture_output=True,
                          timeout=DEADLINE * 3)
    assert proc.returncode == 2 and b"carry no server key" in proc.stderr
    missing = NodeConfig(node_id="pk", pin_threads=False, key_dir=str(tmp_path / "nowhere"))
    proc = subprocess.run([sys.executable, "-m", "anna_core.node", "--config", missing.to_json(),
                           "--routing", "tcp://127.0.0.1:5"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": REPO}, capture_output=True,
                          timeout=DEADLINE * 3)
    assert proc.returncode == 2 and b"cluster.key" in proc.stderr
