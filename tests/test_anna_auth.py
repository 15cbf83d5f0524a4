"""An authenticated Anna cluster refuses strangers and keeps cluster messages to the cluster.

Each attack below once worked against a plain cluster (a forged join misrouted reads, a forged
membership or replication change made every key unreachable, raw DELETEs removed keys). Here
the cluster runs with its default CURVE keys; every attacker either holds no key the cluster
admits (refused at the handshake) or holds an authorized *client* key (its cluster-only
messages are dropped). After each, the cluster still serves every key with its own value.
"""
from __future__ import annotations

import os
import time

import pytest
import zmq

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from runtime.auth import AuthConfig, AuthenticationRequired, Security, strip_key, write_keys
from runtime.sockets import PushCache, bind_pull
from waiting import poll_until

KEYS = [f"auth-{i}" for i in range(200)]


@pytest.fixture(scope="module")
def cluster():
    with anna_core.LocalCluster(memory_threads=2, nodes=2, auth=True) as c:
        kvs = c.client()
        for k in KEYS:
            kvs.put_all(k, k.encode())
        yield c


def all_keys_intact(cluster) -> None:
    """Every key reads back its own value, from a fresh authorized client."""
    with cluster.client(timeout=2.0) as kvs:
        wrong = [k for k in KEYS if kvs.get(k) != k.encode()]
    assert not wrong, f"{len(wrong)} keys read back wrong, e.g. {wrong[:3]}"


class Peer:
    """Someone who can reach the cluster's ports: a context, optionally keys, a PULL socket
    for anything the cluster might send back, and a PushCache."""

    def __init__(self, auth: AuthConfig = None) -> None:
        self.context = zmq.Context()
        self.security = Security.start(self.context, auth)
        credentials = None if self.security is None else self.security.credentials
        self.pull, self.address = bind_pull(self.context, auth=credentials)
        self.push = PushCache(self.context, linger_ms=1000, auth=credentials)

    def send(self, address: str, kind: str, message) -> None:
        if self.security is None:
            # a stranger connects plainly; once the server has refused the handshake ZeroMQ
            # may not even queue the message (the send then reports it dropped)
            self.push.send_kind(strip_key(address), kind, message)
            return
        assert self.push.send_kind(address, kind, message)

    def received_anything(self, within: float) -> bool:
        return bool(self.pull.poll(int(within * 1000)))

    def close(self) -> None:
        self.push.close()
        self.pull.close(0)
        if self.security is not None:
            self.security.stop()
        self.context.term()


def log_of(cluster, name: str) -> str:
    with open(os.path.join(cluster.log_dir, f"{name}.log"), errors="replace") as f:
        return f.read()


def test_addresses_carry_the_cluster_key_and_authorized_clients_are_served(cluster):
    assert "#k=" in cluster.routing_address
    assert all("#k=" in a for n in cluster.node_ids for a in cluster.worker_addresses(n))
    all_keys_intact(cluster)


def test_a_client_without_keys_is_told_the_cluster_requires_authentication(cluster):
    with pytest.raises(AuthenticationRequired, match="requires authentication"):
        anna_core.Client(cluster.routing_address)


def test_peers_without_an_admitted_key_are_refused_and_logged(cluster, tmp_path):
    # no key at all: a plain client of the bare endpoint gets no answer
    with anna_core.Client(strip_key(cluster.routing_address), timeout=0.5, retries=0) as plain:
        with pytest.raises(anna_core.Timeout):
            plain.get(KEYS[0])
    # a key pair from another key directory (unknown to this cluster)
    write_keys(str(tmp_path / "other"), ["mallory"])
    mallory = AuthConfig(str(tmp_path / "other"), "client:mallory")
    with anna_core.Client(cluster.routing_address, timeout=0.5, retries=0, auth=mallory) as c:
        with pytest.raises(anna_core.Timeout):
            c.get(KEYS[0])
    poll_until(lambda: "refused a connection from" in log_of(cluster, "routing"), timeout=10,
               what="routing logging the refused peers")
    # raw DELETEs from a stranger straight to every worker: refused, every key stays
    stranger = Peer()
    try:
        for node in cluster.node_ids:
            for address in cluster.worker_addresses(node):
                request = anna_pb2.KeyRequest(type=anna_pb2.DELETE, request_id="x",
                                              response_address=stranger.address,
                                              tuples=[anna_pb2.KeyTuple(key=k) for k in KEYS])
                stranger.send(address, "request", request)
        assert not stranger.received_anything(within=1.0)
    finally:
        stranger.close()
    all_keys_intact(cluster)


def test_a_client_key_cannot_send_cluster_messages(cluster):
    """A forged join, membership, replication change, gossip and hand-off from an authorized
    client key are all dropped; the cluster's own key still changes replication."""
    attacker = Peer(cluster.client_auth)
    try:
        evil = anna_pb2.NodeInfo(node_id="evil", tier=anna_pb2.MEMORY,
                                 worker_addresses=[attacker.address])
        for routing in cluster.routing_addresses:
            attacker.send(routing, "join", anna_pb2.NodeJoin(node=evil,
                                                            control_address=attacker.address))
            attacker.send(routing, "heartbeat", anna_pb2.NodeHeartbeat(
                node=evil, control_address=attacker.address, membership_version=1))
            zero = anna_pb2.SetReplication(response_address=attacker.address, request_id="r")
            for k in KEYS[:20]:
                zero.replications.add(key=k, replication=anna_pb2.Replication())
            attacker.send(routing, "replicate", zero)
        takeover = anna_pb2.Membership(version=10 ** 9, nodes=[evil])
        forged = anna_pb2.KeyRequest(type=anna_pb2.PUT, request_id="g",
                                     response_address=attacker.address)
        for k in KEYS[:20]:
            forged.tuples.add().CopyFrom(anna_core.wire.lattice_to_tuple(
                k, _core.LWWLattice(2 ** 62, b"forged")))
        for node in cluster.node_ids:
            for address in cluster.worker_addresses(node):
                attacker.send(address, "membership", takeover)
                attacker.send(address, "replication", anna_pb2.ReplicationUpdate(
                    overrides=[anna_pb2.KeyReplication(key=k, replication=anna_pb2.Replication())
                               for k in KEYS[:20]]))
                attacker.send(address, "gossip", forged)
                attacker.send(address, "handoff", forged)
        poll_until(lambda: "dropped a 'join' message from client:local" in log_of(cluster,
                                                                                 "routing"),
                   timeout=10, what="routing logging the dropped join")
        assert not attacker.received_anything(within=1.0), \
            "the cluster sent the attacker something (a membership, a request)"
    finally:
        attacker.close()
    all_keys_intact(cluster)
    with cluster.client() as kvs:
        with pytest.raises(anna_core.NotPermitted, match="reserved to the cluster's key"):
            kvs.set_replication(KEYS[0], memory=1, disk=0)
    with cluster.client(auth=AuthConfig(cluster.key_dir, "cluster")) as admin:
        assert len(admin.set_replication(KEYS[1], memory=1, disk=0)) >= 1
    all_keys_intact(cluster)


def test_auth_off_is_said_loudly(caplog):
    import logging
    caplog.set_level(logging.WARNING, logger="anna.cluster")
    with anna_core.LocalCluster(auth=False) as c:
        assert "#k=" not in c.routing_address
        with c.client() as kvs:
            kvs.put("plain", b"1")
            assert kvs.get("plain") == b"1"
    assert "AUTHENTICATION IS OFF" in caplog.text


def test_a_client_key_may_not_write_the_clusters_metadata_keys(cluster):
    """Keys under __anna__/ (persisted replication, statistics, the monitor's status) are the
    cluster's: a client key may read them and write only its own latency reports."""
    from anna_core.membership import replication_metadata_key
    forged_override = replication_metadata_key(KEYS[2])
    with cluster.client() as kvs:
        for key in (forged_override, "__anna__/status", "__anna__/stats/workers/1"):
            with pytest.raises(anna_core.NotPermitted, match="__anna__/"):
                kvs.put(key, b"forged")
            with pytest.raises(anna_core.NotPermitted):
                kvs.delete(key)
        kvs.put("__anna__/stats/clients/1", anna_core.SetLattice([b"a report"]))
        assert kvs.get("__anna__/stats/clients/1").reveal() == {b"a report"}
    with cluster.client(auth=AuthConfig(cluster.key_dir, "cluster")) as admin:
        admin.put("__anna__/status", b"{}")
        assert admin.get("__anna__/status") == b"{}"
        admin.delete("__anna__/status")
