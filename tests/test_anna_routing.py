"""The routing service as a real process, driven with raw pyzmq.

Stand-in "workers" are PULL sockets of this test (they only need to receive what routing
broadcasts); routing's answers are checked against a `_core.ClusterMap` built independently
here, and malformed input must not stop it from answering afterwards.
"""
import contextlib
import json
import os
import subprocess
import sys
import uuid

import pytest
import zmq

from anna_core import _core
from anna_core.routing import replication_metadata_key
from hydro_proto import anna_pb2
from waiting import poll_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_MS = 5000


@contextlib.contextmanager
def running_routing(tmp_path, startup_grace):
    """A routing process: (process, address, ready file)."""
    ready = tmp_path / "routing.ready"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "anna_core.routing", "--default-replication", "1,1,1,1",
                             "--ready-file", str(ready), "--log-level", "info",
                             "--startup-grace", str(startup_grace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        line = proc.stdout.readline()  # the READY line; EOF if the process died
        assert line.startswith("READY "), f"routing did not start: {proc.stderr.read()}"
        address = json.loads(line.split(" ", 1)[1])["address"]
        yield proc, address, ready
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def routing(tmp_path):
    """A routing that answers NO_NODES from the start when it knows no node (grace 0)."""
    with running_routing(tmp_path, 0) as r:
        yield r


class Peer:
    """A test-side endpoint: one PULL socket for answers, PUSH to routing."""

    def __init__(self, routing_address):
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.bind("tcp://127.0.0.1:*")
        self.address = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(routing_address)
        self.workers = {}

    def worker(self):
        s = self.ctx.socket(zmq.PULL)
        s.setsockopt(zmq.LINGER, 0)
        s.bind("tcp://127.0.0.1:*")
        address = s.getsockopt_string(zmq.LAST_ENDPOINT)
        self.workers[address] = s
        return address

    def send(self, kind, message):
        self.push.send_multipart([kind, message.SerializeToString()])

    def recv(self, message_type):
        assert self.pull.poll(TIMEOUT_MS), "no answer from routing within the deadline"
        return message_type.FromString(self.pull.recv())

    def worker_recv(self, address):
        s = self.workers[address]
        assert s.poll(TIMEOUT_MS), f"worker {address} got nothing within the deadline"
        return s.recv_multipart()

    def join(self, node_id, tier, addresses):
        join = anna_pb2.NodeJoin(control_address=self.address)
        join.node.node_id = node_id
        join.node.tier = tier
        join.node.worker_addresses.extend(addresses)
        self.send(b"join", join)
        return self.recv(anna_pb2.Membership)

    def lookup(self, keys, all_tiers=False):
        request = anna_pb2.KeyAddressRequest(keys=keys, response_address=self.address,
                                             request_id=uuid.uuid4().hex, all_tiers=all_tiers)
        self.send(b"address", request)
        response = self.recv(anna_pb2.KeyAddressResponse)
        assert response.request_id == request.request_id
        return response

    def close(self):
        for s in self.workers.values():
            s.close(0)
        self.pull.close(0)
        self.push.close(0)
        self.ctx.term()


@pytest.fixture
def peer(routing):
    p = Peer(routing[1])
    yield p
    p.close()


def test_the_ready_file_waits_for_a_member(routing, peer):
    """A readiness probe must not count a routing with no member ready: it would answer
    every lookup NO_NODES (a routing pod made again, before the nodes' heartbeats)."""
    _proc, address, ready = routing
    assert peer.lookup(["k"]).error == anna_pb2.NO_NODES   # it serves, and knows no node
    assert not ready.exists()
    peer.join("memory-0", anna_pb2.MEMORY, [peer.worker()])
    poll_until(ready.exists, 5, "the routing's ready file after a join")
    assert json.loads(ready.read_text())["address"] == address


def test_a_routing_in_its_startup_grace_is_not_ready_until_a_node_joins(tmp_path):
    """A routing made again must not tell clients "no node" before the nodes' heartbeats
    found it: within its startup grace it says it is not ready."""
    with running_routing(tmp_path, 60) as (_proc, address, _ready):
        peer = Peer(address)
        try:
            assert peer.lookup(["k"]).error == anna_pb2.ROUTING_NOT_READY
            worker = peer.worker()
            peer.join("memory-0", anna_pb2.MEMORY, [worker])
            response = peer.lookup(["k"])
            assert response.error == anna_pb2.NO_ERROR
            assert list(response.addresses[0].addresses) == [worker]
        finally:
            peer.close()


def test_no_nodes_is_an_error_answer(peer):
    response = peer.lookup(["k"])
    assert response.error == anna_pb2.NO_NODES


def test_join_broadcasts_membership_and_acks(peer):
    m0 = [peer.worker(), peer.worker()]
    ack = peer.join("memory-0", anna_pb2.MEMORY, m0)
    assert [n.node_id for n in ack.nodes] == ["memory-0"] and ack.version >= 1
    for address in m0:
        kind, payload = peer.worker_recv(address)
        assert kind == b"membership"
        assert anna_pb2.Membership.FromString(payload).version == ack.version
    d0 = [peer.worker()]
    ack2 = peer.join("disk-0", anna_pb2.DISK, d0)
    assert ack2.version > ack.version
    assert sorted(n.node_id for n in ack2.nodes) == ["disk-0", "memory-0"]
    # Every worker (old and new) learns the new membership.
    for address in m0 + d0:
        frames = peer.worker_recv(address)
        while anna_pb2.Membership.FromString(frames[1]).version < ack2.version:
            frames = peer.worker_recv(address)


def test_answers_agree_with_an_independent_cluster_map(peer):
    nodes = {"memory-0": (0, [peer.worker(), peer.worker()]),
             "memory-1": (0, [peer.worker()]),
             "disk-0": (1, [peer.worker(), peer.worker()])}
    for node_id, (tier, addresses) in nodes.items():
        peer.join(node_id, tier, addresses)
    cm = _core.ClusterMap(default_replication=(1, 1, 1, 1), vnodes=64)
    for node_id, (tier, addresses) in nodes.items():
        cm.add_node(node_id, tier, addresses)
    keys = [f"key-{i}" for i in range(200)]
    for all_tiers in (False, True):
        response = peer.lookup(keys, all_tiers=all_tiers)
        assert response.error == anna_pb2.NO_ERROR
        got = {a.key: list(a.addresses) for a in response.addresses}
        assert got == {k: cm.addresses(k, all_tiers) for k in keys}
    # Keys spread over every memory worker.
    owners = {a for k in keys for a in cm.addresses(k)}
    assert owners == set(nodes["memory-0"][1] + nodes["memory-1"][1])


def test_rejoin_replaces_the_node(peer):
    first = [peer.worker()]
    peer.join("memory-0", 0, first)
    second = [peer.worker()]
    ack = peer.join("memory-0", 0, second)
    assert [list(n.worker_addresses) for n in ack.nodes] == [second]
    assert list(peer.lookup(["k"]).addresses[0].addresses) == second


def test_replicate_updates_broadcasts_and_persists(peer):
    m = [peer.worker()]
    d = [peer.worker()]
    peer.join("memory-0", 0, m)
    peer.join("disk-0", 1, d)
    for address in m + d:  # drain the membership broadcasts
        while peer.workers[address].poll(200):
            peer.workers[address].recv_multipart()
    request = anna_pb2.SetReplication(response_address=peer.address, request_id="r1")
    request.replications.add(key="hot", replication=anna_pb2.Replication(
        memory_global=0, memory_local=1, disk_global=1, disk_local=1))
    peer.send(b"replicate", request)
    response = peer.recv(anna_pb2.KeyAddressResponse)
    assert response.request_id == "r1"
    assert list(response.addresses[0].addresses) == d  # no memory replica: disk answers
    # Workers get the ReplicationUpdate; the metadata key is PUT (LWW) into the KVS.
    seen_update = False
    meta_puts = []
    for address in m + d:
        while peer.workers[address].poll(1000):
            frames = peer.workers[address].recv_multipart()
            # A client's request may come as one frame, its kind implied (anna_core/DESIGN.md).
            kind, payload = (b"request", frames[0]) if len(frames) == 1 else frames
            if kind == b"replication":
                update = anna_pb2.ReplicationUpdate.FromString(payload)
                assert update.overrides[0].key == "hot"
                seen_update = True
            elif kind == b"request":
                meta_puts.append(anna_pb2.KeyRequest.FromString(payload))
    assert seen_update
    assert meta_puts, "routing did not store the override in the KVS"
    t = meta_puts[0].tuples[0]
    assert meta_puts[0].type == anna_pb2.PUT and t.key == replication_metadata_key("hot")
    stored = _core.deserialize(t.lattice_type, t.payload)
    assert isinstance(stored, _core.LWWLattice)
    assert anna_pb2.Replication.FromString(stored.reveal()).disk_global == 1
    # A node joining later learns the override in its Membership.
    ack = peer.join("memory-1", 0, [peer.worker()])
    assert [o.key for o in ack.overrides] == ["hot"]


def test_malformed_frames_do_not_stop_routing(routing, peer):
    proc, _, _ = routing
    peer.push.send_multipart([b"address"])                            # one frame
    peer.push.send_multipart([b"address", b"\xff\xff\xff", b"x"])    # three frames
    peer.push.send_multipart([b"nonsense", b""])                      # unknown kind
    peer.push.send_multipart([b"address", b"\x0a\xff\xff\xff\xff"])  # truncated payload
    peer.push.send_multipart([b"join", b"\x12"])                      # truncated join
    peer.push.send_multipart([b"replicate", os.urandom(64)])
    assert peer.lookup(["k"]).error == anna_pb2.NO_NODES  # still answering
    assert proc.poll() is None
