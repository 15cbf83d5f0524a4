"""Authentication of every Cloudburst socket (ZeroMQ CURVE), on by default, on real processes.

One default `LocalCluster` (fresh keys, a client named "local"). Peers that are not the
cluster's are played by raw sockets: a peer without keys, a peer with a key the cluster does
not know, and an authorized client that misbehaves (sends the scheduler what only workers and
nodes send, or dials a worker's or node cache's socket). Each is refused at the handshake or
has its messages dropped, the refusals are logged and counted, and the cluster keeps serving
an authorized client throughout. Then `LocalCluster(auth=False)` works and warns.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import time

import pytest
import zmq

import anna_core
import cloudburst
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import (AuthConfig, AuthenticationRequired, KeyFileError, parse_address,
                          strip_key, write_keys)
from runtime.framing import encode, parse
from faas.keys import worker_key
from runtime.sockets import PushCache
from cloudburst.pickling import dumps_function
from faas.values import dumps, encode_args
from scheduler.admission import CLIENT_KINDS
from scheduler.stats import CallStats, render_prometheus
from peers import Peer, handshake
from waiting import poll_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def unknown_key(cluster, tmp_path):
    """A client identity whose key the cluster never authorized (with the real cluster.key)."""
    key_dir = str(tmp_path / "mallory")
    write_keys(key_dir, ["mallory"])
    shutil.copy(os.path.join(cluster.key_dir, "cluster.key"), os.path.join(key_dir, "cluster.key"))
    return AuthConfig(key_dir, "client:mallory")


def read_logs(cluster, prefix):
    out = []
    for name in sorted(os.listdir(cluster.log_dir)):
        if name.startswith(prefix) and name.endswith(".log"):
            with open(os.path.join(cluster.log_dir, name), errors="replace") as f:
                out.append(f.read())
    return "\n".join(out)


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as c:
        c.client().register(lambda lib, x: x + 1, "auth_inc")
        yield c


def test_the_default_cluster_authenticates_every_address(cluster):
    assert cluster.auth and cluster.key_dir and os.path.isdir(cluster.key_dir)
    assert cluster.client_auth == AuthConfig(cluster.key_dir, "client:local")
    node = cluster._nodes[0].info
    for address in [*cluster.scheduler_addresses, node["cache_address"],
                    *(w["address"] for w in cluster.workers)]:
        assert parse_address(address)[1] is not None, address
    # the KVS shares the key directory: its addresses carry the key, a keyless client fails
    assert cluster.kvs.key_dir == cluster.key_dir
    for address in [cluster.kvs.routing_address, *cluster.kvs.worker_addresses()]:
        assert parse_address(address)[1] is not None, address
    with pytest.raises(AuthenticationRequired):
        anna_core.Client(cluster.kvs.routing_address)
    client = cluster.client()
    assert parse_address(client.response_address)[1] is not None
    client.put("auth-object", {"a": 1})                     # through the KVS, authenticated
    assert client.get("auth-object") == {"a": 1}
    status = client.status()
    assert status.auth and "authentication on" in cloudburst.status.format_status(status)
    assert client.call("auth_inc", 1).get(timeout=10) == 2


def test_clients_without_a_known_key_are_refused_and_the_cluster_keeps_serving(cluster, tmp_path):
    # the keyed address and no keys: refused before anything is sent
    start = time.monotonic()
    with pytest.raises(cloudburst.AuthenticationRequired, match="requires authentication"):
        cloudburst.Client(cluster.address, timeout=20)
    assert time.monotonic() - start < 1.0
    # the bare endpoint and no keys: the handshake fails (no CURVE), seen at once
    start = time.monotonic()
    with pytest.raises(cloudburst.AuthenticationRequired, match="requires authentication"):
        cloudburst.Client(strip_key(cluster.address), timeout=20)
    assert time.monotonic() - start < 5.0
    # a key the cluster does not know: refused at the handshake, seen at once
    start = time.monotonic()
    with pytest.raises(cloudburst.AuthenticationError, match="refused this client's key"):
        cloudburst.Client(cluster.address, timeout=20, auth=unknown_key(cluster, tmp_path))
    assert time.monotonic() - start < 5.0
    # the scheduler logged both refusals (the unknown key with the peer's address; the
    # peer without CURVE is refused by ZeroMQ before any key is seen, and logged by the
    # scheduler's monitor, which ZeroMQ 4.3 does not tell the peer's address)
    poll_until(lambda: "unknown public key" in read_logs(cluster, "scheduler")
               and "the cluster requires authentication" in read_logs(cluster, "scheduler"),
               10, "the scheduler's log of the refusals")
    assert re.search(r"refused a connection from 127\.0\.0\.1: unknown public key",
                     read_logs(cluster, "scheduler"))
    client = cluster.client()
    assert client.status().refused_connections >= 2
    assert client.call("auth_inc", 41).get(timeout=10) == 42


def test_register_from_an_unauthenticated_peer_is_refused(cluster, tmp_path):
    client = cluster.client()
    client.register(lambda lib, x: x + 1, "auth_victim")
    evil = pb.RegisterFunction(request_id="evil", response_address="tcp://127.0.0.1:1",
                               function=pb.FunctionRecord(
                                   name="auth_victim",
                                   body=dumps_function(lambda lib, x: "pwned", ())))
    peers = [Peer(), Peer(unknown_key(cluster, tmp_path))]
    try:
        plain, plain_monitor = peers[0].dial_monitored(strip_key(cluster.address))
        stranger, stranger_monitor = peers[1].dial_monitored(cluster.address)
        for s in (plain, stranger):
            try:   # queued, never delivered; or, if the handshake already failed, no pipe
                s.send(encode("register_fn", evil), zmq.NOBLOCK)
            except zmq.Again:
                pass
        assert handshake(plain_monitor) == "protocol"
        assert handshake(stranger_monitor) == "refused"
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:           # whatever arrived was handled by now
            assert client.call("auth_victim", 1).get(timeout=10) == 2
    finally:
        for p in peers:
            p.close()


def test_a_client_key_cannot_pose_as_a_worker_or_forge_results(cluster):
    client = cluster.client()
    mallory = Peer(cluster.client_auth)       # an authorized client that misbehaves
    fake, fake_address = mallory.bind()      # its own socket, admitting the cluster
    push = PushCache(mallory.ctx, auth=mallory.creds)
    try:
        futures = []
        for i in range(20):
            last = futures[-1].request_id if futures else "none"
            forged = [
                ("heartbeat", pb.WorkerStatus(worker_id="fake-worker", node_id="fake-node",
                                              address=fake_address, cache_address=fake_address,
                                              control_address=fake_address)),
                ("keyset", pb.CacheKeySet(node_id="fake-node", keys=["auth-key"])),
                ("done", pb.CallDone(call_ids=[last], call_id=last)),
                ("result", pb.CallResult(request_id=last, status=pb.OK, value=dumps(-1))),
                ("schedule", pb.Schedule(call_id=last, function="auth_inc",
                                         response_address=fake_address)),
                ("causal_abort", pb.CausalAbort(call_id=last, attempt_id=last)),
                ("cache_reply", pb.CacheResponse(request_id=last)),
            ]
            for kind, message in forged:
                assert push.send(cluster.address, kind, message)
            futures.append(client.call("auth_inc", i))
            # a forged result straight to the caller: its answer socket is cluster-only
            push.send(client.response_address, "result", pb.CallResult(
                request_id=futures[-1].request_id, status=pb.OK, value=dumps(-1)))
        assert [f.get(timeout=20) for f in futures] == [i + 1 for i in range(20)]
        assert "fake-worker" not in client.executors()
        assert not fake.poll(500), "the scheduler sent the fake worker something"
        status = client.status()
        dropped = {(d.role, d.kind): d.count for d in status.dropped}
        for kind in ("heartbeat", "keyset", "done", "result", "schedule", "causal_abort",
                     "cache_reply"):
            assert dropped.get(("client:local", kind), 0) >= 20, (kind, dropped)
        log_text = read_logs(cluster, "scheduler")
        assert "dropped a 'heartbeat' message from client:local" in log_text
        assert len(re.findall(r"dropped a 'heartbeat' message", log_text)) < 5   # rate-limited
        assert client.call("auth_inc", 100).get(timeout=10) == 101
    finally:
        push.close()
        mallory.close()


def test_a_client_key_is_refused_by_every_cluster_only_socket(cluster):
    client = cluster.client()
    node = cluster._nodes[0].info
    targets = {"worker": cluster.workers[0]["address"], "node cache": node["cache_address"],
               "a client's answer socket": client.response_address}
    mallory, member = Peer(cluster.client_auth), Peer(cluster.cluster_auth)
    try:
        for name, address in targets.items():
            s, monitor = mallory.dial_monitored(address)
            try:   # never delivered (NOBLOCK: once the handshake failed there is no pipe)
                s.send(encode("abort", pb.CallDone(call_id="x")), zmq.NOBLOCK)
            except zmq.Again:
                pass
            assert handshake(monitor) == "refused", name
            # the same socket admits the cluster's key
            assert handshake(member.dial_monitored(address)[1]) == "ok", name
        # workers and node caches admit the cluster and functions (executor workers); a
        # worker knows no client key at all
        poll_until(lambda: "unknown public key" in read_logs(cluster, "worker-"),
                   10, "the worker's log of the refusal")
        assert "client:local key on a socket for cluster and function keys" in \
            read_logs(cluster, "node0")
        assert client.call("auth_inc", 5).get(timeout=10) == 6
    finally:
        mallory.close()
        member.close()


def test_a_client_cannot_use_the_kvs_to_redirect_the_cluster(cluster):
    """The worker directory lives in the KVS, which refuses a client key's writes there; a
    worker sends `lib.send` messages only to addresses carrying the function key (even an
    entry written with the cluster's key, say by mistake), and a call cannot make its sink
    write into Cloudburst's own keys."""
    client = cluster.client()
    with Peer(cluster.client_auth) as mallory:
        trap, trap_address = mallory.bind()        # a server of mallory's, with its own key
        kvs = cluster.kvs.client()
        with pytest.raises(anna_core.NotPermitted, match="__cloudburst/"):
            kvs.put_all(worker_key("ghost"), trap_address.encode())
        admin = anna_core.Client(cluster.kvs.routing_address, auth=cluster.cluster_auth)
        try:
            admin.put_all(worker_key("ghost"), trap_address.encode())
        finally:
            admin.close()
        client.register(lambda lib, x: lib.send("ghost", b"secret") or x, "auth_sender")
        with pytest.raises(cloudburst.ExecutionError, match="not a cluster address"):
            client.call("auth_sender", 1).get(timeout=10)
        assert not trap.poll(300), "a worker sent a user message to a client's server"
        # a call whose sink would write the worker directory is refused by the scheduler
        answers, here = mallory.bind()
        call = pb.Call(request_id="evil-call", response_address=here, function="auth_inc",
                       output_key=worker_key("victim"), timeout=5)
        call.args["auth_inc"].CopyFrom(encode_args((1,)))
        mallory.dial(cluster.address).send(encode("call", call))
        assert answers.poll(10000), "no answer to the call"
        result = pb.CallResult.FromString(parse(answers.recv())[1])
        assert result.status == pb.BAD_REQUEST and "reserved" in result.message
    assert client.call("auth_inc", 2).get(timeout=10) == 3


def test_client_kinds_are_exactly_what_the_client_sends():
    source = ""
    for module in ("client.py", "channel.py", "leases.py"):   # the lease thread sends for its client
        with open(os.path.join(ROOT, "cloudburst", module)) as f:
            source += f.read()
    sent = set(re.findall(r'(?:self|client)\._(?:ask|send)\(\s*"(\w+)"', source))
    assert sent == set(CLIENT_KINDS)


def test_metrics_count_refusals_and_drops():
    text = render_prometheus(CallStats(), [], "s", dropped={("client:a", "heartbeat"): 3},
                             refused_connections=2)
    assert 'cloudburst_refused_connections_total{scheduler="s"} 2' in text
    assert ('cloudburst_dropped_messages_total{scheduler="s",role="client:a",'
            'kind="heartbeat"} 3') in text
    assert "refused_connections" not in render_prometheus(CallStats(), [], "s")


def test_a_key_dir_without_the_cluster_keys_is_refused_at_once(tmp_path):
    with pytest.raises(KeyFileError, match="cluster.key"):
        cloudburst.LocalCluster(key_dir=str(tmp_path))
    write_keys(str(tmp_path / "k"))                     # the cluster's pair, no client
    c = cloudburst.LocalCluster(key_dir=str(tmp_path / "k"))
    try:
        assert c.client_auth is None and c.cluster_auth.identity == "cluster"
    finally:
        c.stop()
    with pytest.raises(ValueError, match="auth=False"):
        cloudburst.LocalCluster(auth=False, key_dir=str(tmp_path / "k"))


def test_a_cluster_without_auth_works_and_warns_loudly(caplog):
    with caplog.at_level(logging.WARNING):
        with cloudburst.LocalCluster(executors_per_node=1, auth=False) as c:
            assert "authentication is OFF: anyone who can reach these ports can" in caplog.text
            # once, for the whole stack (Anna under it does not warn again)
            assert caplog.text.lower().count("authentication is off") == 1, caplog.text
            assert c.key_dir is None and c.client_auth is None
            assert "#k=" not in c.address
            with cloudburst.Client(c.address, timeout=10) as client:
                client.register(lambda lib, x: x * 2, "auth_double")
                assert client.call("auth_double", 4).get(timeout=10) == 8
                assert not client.status().auth


@pytest.mark.parametrize("module,config", [
    ("scheduler", {"kvs_address": "tcp://127.0.0.1:1"}),
    ("executor", {"node_id": "n", "kvs_address": "tcp://127.0.0.1:1"}),
])
def test_a_service_with_a_bad_key_dir_exits_naming_the_file(module, config, tmp_path):
    import json
    import subprocess
    import sys
    config = dict(config, key_dir=str(tmp_path / "none"))
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", module, "--config", json.dumps(config)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot start" in done.stderr and "cluster.key" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_worker_without_its_function_keys_exits_saying_so():
    """A worker reads its keys from its node over stdin (never a key directory)."""
    import json
    import subprocess
    import sys
    config = {"worker_id": "w", "node_id": "n", "kvs_address": "tcp://127.0.0.1:1",
              "cache_address": "tcp://127.0.0.1:2", "auth": True}
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", "executor.worker", "--config",
                           json.dumps(config)], input="{not keys", capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot start" in done.stderr and "function keys" in done.stderr
    assert "Traceback" not in done.stderr
