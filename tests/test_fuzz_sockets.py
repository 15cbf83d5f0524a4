"""Fuzzing every listening socket of a small real cluster (issue 11, "Bad input never kills
a service"), with authentication on (the default).

One LocalCluster (Anna routing and one KVS worker, a scheduler, an executor node with its
node cache and one worker). Every socket gets, for every message kind (`runtime.framing`
KIND_ORDER for Cloudburst sockets, ANNA_KINDS for Anna's): a valid kind with a garbage
payload, a valid protobuf of the kind's type with random field values (garbage and huge
ids, malformed and unreachable addresses), wrong frame counts, empty frames and unknown
kinds. The fuzzer holds the cluster's own key, so every message reaches its handler: that is
the strongest test of the handlers, and the same code serves a plain cluster (which is why
there is no plain run as well). Kinds that a cluster process could use to change the cluster
legitimately (membership, joins, heartbeats) get only malformed payloads from it.
Then the peers the cluster does not trust fuzz it too: a peer without keys and one with an
unknown key are refused at the handshake by every authenticated socket (nothing they send
is delivered); an authorized client's key is refused by the cluster-only sockets (worker,
node cache), and the scheduler drops every kind a client may not send, valid heartbeats
included, counting them. Then: a KVS put/get, a function call and a DAG call succeed, no
process died or was restarted, and no fake worker joined. Fixed seeds, bounded count; a few
seconds in all.
"""
import random

import shutil

import pytest
import zmq

from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import AuthConfig, parse_address, write_keys
from runtime.framing import ANNA_KINDS, KIND_ORDER, encode
from peers import Peer, handshake
from waiting import poll_until

import os
FUZZ_LOG_DIR = os.environ.get("FUZZ_LOG_DIR")   # keep the processes' logs there (debugging)
SEEDS = (1, 2)
PER_KIND = 3            # messages of each variant, per kind, per socket, per seed

CLOUDBURST_TYPES = {
    "register_fn": pb.RegisterFunction, "register_dag": pb.RegisterDag,
    "delete_dag": pb.NameRequest, "list": pb.NameRequest, "info": pb.NameRequest,
    "call": pb.Call, "where": pb.NameRequest, "heartbeat": pb.WorkerStatus,
    "keyset": pb.CacheKeySet, "done": pb.CallDone, "schedule": pb.Schedule,
    "trigger": pb.Trigger, "abort": pb.CallDone, "msg": pb.UserMessage,
    "cache_reply": pb.CacheResponse, "cache": pb.CacheRequest, "reply": pb.Reply,
    "accepted": pb.Accepted, "result": pb.CallResult, "causal_abort": pb.CausalAbort,
    "cancel": pb.NameRequest, "delete_fn": pb.NameRequest, "status": pb.NameRequest,
    "drain": pb.DrainRequest, "node_status": pb.NodeStatus, "fetch": pb.ResultRequest,
    "lease": pb.ClientLease, "values": pb.ValueKeys, "moved": pb.CallRef,
    "lease_worker": pb.LeaseRequest, "worker_lease": pb.WorkerLease, "direct": pb.Call,
    "direct_batch": pb.DirectBatch, "direct_results": pb.DirectResults,
}
ANNA_TYPES = {
    b"request": anna_pb2.KeyRequest, b"gossip": anna_pb2.KeyRequest,
    b"address": anna_pb2.KeyAddressRequest, b"replicate": anna_pb2.SetReplication,
    b"handoff": anna_pb2.KeyRequest, b"handoff_ack": anna_pb2.KeyResponse,
    b"fetch": anna_pb2.KeyRequest, b"fetched": anna_pb2.KeyResponse,
}
# Legitimate uses of these change membership or liveness; without authentication a valid
# one is a forgery, not a robustness bug: they get malformed payloads only.
NO_VALID = {"heartbeat", "keyset", b"membership", b"replication", b"join", b"heartbeat",
            b"leave"}

STRINGS = ("", "garbage", "tcp://", "tcp://127.0.0.2:1", "ipc://", "inproc://x", "x" * 70000,
           "tcp://127.0.0.1:0", "\x00\xff", "é" * 10, "127.0.0.1:80", "tcp://a b:1")


def random_string(rng):
    if rng.random() < 0.6:
        return rng.choice(STRINGS)
    return "".join(chr(rng.randrange(1, 0x250)) for _ in range(rng.randrange(0, 40)))


def random_scalar(rng, field):
    fd = field
    if fd.type == fd.TYPE_STRING:
        return random_string(rng)
    if fd.type == fd.TYPE_BYTES:
        return rng.randbytes(rng.choice((0, 1, 16, 3000)))
    if fd.type == fd.TYPE_BOOL:
        return rng.random() < 0.5
    if fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
        return rng.choice((0.0, -1.0, 1e30, 0.001, float("inf")))
    if fd.type == fd.TYPE_ENUM:
        values = [v.number for v in fd.enum_type.values]
        return rng.choice(values + [99])
    signed = fd.type in (fd.TYPE_INT32, fd.TYPE_INT64, fd.TYPE_SINT32, fd.TYPE_SINT64,
                         fd.TYPE_SFIXED32, fd.TYPE_SFIXED64)
    big = 2 ** 31 - 1 if fd.type in (fd.TYPE_INT32, fd.TYPE_SINT32, fd.TYPE_SFIXED32,
                                     fd.TYPE_UINT32, fd.TYPE_FIXED32) else 2 ** 63 - 1
    choices = [0, 1, 7, big] + ([-1, -big] if signed else [])
    return rng.choice(choices)


def fill(rng, message, depth=0):
    """Random values in `message`'s fields (nested messages to depth 2)."""
    for fd in message.DESCRIPTOR.fields:
        if rng.random() < 0.3:
            continue
        is_map = fd.message_type is not None and fd.message_type.GetOptions().map_entry
        if is_map:
            target = getattr(message, fd.name)
            value_fd = fd.message_type.fields_by_name["value"]
            for _ in range(rng.randrange(0, 3)):
                key = random_scalar(rng, fd.message_type.fields_by_name["key"])
                if value_fd.message_type is not None:
                    if depth < 2:
                        fill(rng, target[key], depth + 1)
                else:
                    target[key] = random_scalar(rng, value_fd)
        elif (fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED):
            target = getattr(message, fd.name)
            for _ in range(rng.randrange(0, 4)):
                if fd.message_type is not None:
                    if depth < 2:
                        fill(rng, target.add(), depth + 1)
                else:
                    target.append(random_scalar(rng, fd))
        elif fd.message_type is not None:
            if depth < 2:
                fill(rng, getattr(message, fd.name), depth + 1)
        else:
            setattr(message, fd.name, random_scalar(rng, fd))
    return message


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        if data and rng.random() < 0.7:
            data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
    return bytes(data)


def cloudburst_messages(rng, no_valid=NO_VALID):
    """(description, frames) for every Cloudburst kind and variant."""
    for code, kind in enumerate(KIND_ORDER, start=1):
        head = bytes([code])
        for _ in range(PER_KIND):
            yield kind, [head + rng.randbytes(rng.randrange(0, 200))]
            yield kind, [head]
            if kind not in no_valid:
                valid = fill(rng, CLOUDBURST_TYPES[kind]()).SerializeToString()
                yield kind, [head + valid]
                yield kind, [head + mutate(rng, valid)]
                yield kind, [head + valid, b"", rng.randbytes(10)]
    for _ in range(PER_KIND):
        yield "empty", [b""]
        yield "unknown code", [bytes([rng.choice((0, 200, 255))]) + rng.randbytes(20)]
        yield "frames", [b"", b"", b""]


def anna_messages(rng):
    """(description, frames) for every Anna kind and variant."""
    for kind in sorted(ANNA_KINDS):
        for _ in range(PER_KIND):
            yield kind, [kind, rng.randbytes(rng.randrange(0, 200))]
            yield kind, [kind, b""]
            yield kind, [kind]
            yield kind, [kind, b"", b""]
            if kind not in NO_VALID and kind in ANNA_TYPES:
                valid = fill(rng, ANNA_TYPES[kind]()).SerializeToString()
                yield kind, [kind, valid]
                yield kind, [kind, mutate(rng, valid)]
    for _ in range(PER_KIND):
        yield "empty", [b""]
        yield "unknown kind", [rng.randbytes(8), rng.randbytes(8)]
        yield "huge kind", [b"k" * 100000, b"x"]


@pytest.fixture(scope="module")
def cluster():
    import cloudburst
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1,
                                 heartbeat_timeout=3.0, log_dir=FUZZ_LOG_DIR) as c:
        yield c


def processes(cluster):
    """Every process of the cluster, with its pid: (name, pid)."""
    out = [(p.name, p.pid) for p in cluster._schedulers + cluster._nodes]
    out += [(p.name, p.pid) for p in cluster.kvs._processes]
    out += [(f"worker {w['worker_id']}", w["pid"]) for w in cluster.workers]
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def healthy(cluster, client, kvs):
    kvs.put("fuzz-health", b"ok")
    assert kvs.get("fuzz-health") == b"ok"
    assert client.call("fuzz_inc", 1).get(timeout=15) == 2
    assert client.call_dag("fuzz_chain", {"fuzz_inc": [1]}).get(timeout=15) == 4


def fuzz(peer, address, messages, seeds=SEEDS, sentinel=None, answers=None, name=""):
    """Send every message of `messages(rng)` for each seed to `address` from `peer`; then the
    sentinel, and wait (bounded) for its answer: everything sent before was handled."""
    s = peer.dial(address, linger_ms=5000, SNDHWM=100000)
    sent = 0
    for seed in seeds:
        rng = random.Random(f"{name}-{seed}")
        for _, frames in messages(rng):
            s.send_multipart(frames)
            sent += 1
    if sentinel is not None:
        s.send_multipart(sentinel)
        assert answers.poll(20000), f"the {name} did not answer after the fuzzing"
        answers.recv_multipart()
    return sent


def test_fuzzing_every_socket_leaves_every_service_serving(cluster, tmp_path):
    import cloudburst
    client = cloudburst.Client(cluster.scheduler_addresses[0], timeout=20,
                               auth=cluster.client_auth)
    client.register(lambda lib, x: x + 1, "fuzz_inc")
    client.register(lambda lib, x: x * 2, "fuzz_double")
    client.register_dag("fuzz_chain", ["fuzz_inc", "fuzz_double"], [("fuzz_inc", "fuzz_double")])
    kvs = cluster.kvs.client(timeout=5.0)
    healthy(cluster, client, kvs)
    before = processes(cluster)
    workers_before = set(client.executors())
    node_info = cluster._nodes[0].info
    targets = {
        "routing": (cluster.kvs.routing_address, anna_messages),
        "kvs worker": (cluster.kvs.worker_addresses()[0], anna_messages),
        "scheduler": (cluster.scheduler_addresses[0], cloudburst_messages),
        "node cache": (node_info["cache_address"], cloudburst_messages),
        "worker": (cluster.workers[0]["address"], cloudburst_messages),
    }
    member = Peer(cluster.cluster_auth)       # the cluster's key: every message is handled
    plain = Peer(context=member.ctx)          # answers from services that run plain (Anna,
    keyed_answers, keyed_here = member.bind()  # until the KVS authenticates)
    plain_answers, plain_here = plain.bind()

    def answer_socket(address):
        keyed = parse_address(address)[1] is not None
        return (keyed_answers, keyed_here) if keyed else (plain_answers, plain_here)

    def sentinel(name, address):
        """A last message the socket answers: once it is, everything sent before was handled."""
        here = answer_socket(address)[1]
        return {
            "routing": [b"address", anna_pb2.KeyAddressRequest(
                response_address=here, request_id="sentinel", keys=["k"]).SerializeToString()],
            "kvs worker": [b"request", anna_pb2.KeyRequest(
                type=anna_pb2.GET, response_address=here, request_id="sentinel",
                tuples=[anna_pb2.KeyTuple(key="fuzz-health")]).SerializeToString()],
            "scheduler": [encode("list", pb.NameRequest(request_id="sentinel",
                                                        response_address=here))],
            "node cache": [encode("cache", pb.CacheRequest(request_id="sentinel",
                                                           op=pb.CACHE_GET,
                                                           response_address=here))],
        }.get(name)

    sent = 0
    try:
        for name, (address, messages) in targets.items():
            sent += fuzz(member, address, messages, sentinel=sentinel(name, address),
                         answers=answer_socket(address)[0], name=name)
    finally:
        plain.close()
        member.close()
    assert sent > 2000
    healthy(cluster, client, kvs)

    # peers the cluster does not trust: refused at the handshake by every keyed socket
    stranger_dir = str(tmp_path / "stranger")
    write_keys(stranger_dir, ["stranger"])
    shutil.copy(f"{cluster.key_dir}/cluster.key", f"{stranger_dir}/cluster.key")
    keyed = {n: a for n, (a, _) in targets.items() if parse_address(a)[1] is not None}
    assert {"scheduler", "node cache", "worker"} <= set(keyed)
    for auth, refusal in ((None, "protocol"),
                          (AuthConfig(stranger_dir, "client:stranger"), "refused")):
        with Peer(auth) as outsider:
            for name, address in keyed.items():
                s, monitor = outsider.dial_monitored(
                    address if auth else parse_address(address)[0])
                rng = random.Random(f"outsider-{name}")
                for _, frames in cloudburst_messages(rng, no_valid=()):
                    try:        # queued until the handshake fails, then nowhere to go
                        s.send_multipart(frames, flags=zmq.NOBLOCK)
                    except zmq.Again:
                        pass
                assert handshake(monitor) == refusal, (name, auth)
    # an authorized client: cluster-only sockets refuse it; the scheduler drops what a
    # client may not send (valid heartbeats, results, schedules...) and counts it
    with Peer(cluster.client_auth) as mallory:
        for name in ("node cache", "worker"):
            s, monitor = mallory.dial_monitored(keyed[name])
            assert handshake(monitor) == "refused", name
        answers, here = mallory.bind()
        sent = fuzz(mallory, keyed["scheduler"], lambda rng: cloudburst_messages(rng, ()),
                    seeds=SEEDS[:1], name="scheduler-as-client", answers=answers,
                    sentinel=[encode("list", pb.NameRequest(request_id="sentinel",
                                                            response_address=here))])
        assert sent > 300
    dropped = {(d.role, d.kind) for d in client.status().dropped}
    assert {("client:local", k) for k in ("heartbeat", "done", "schedule", "result")} <= dropped
    healthy(cluster, client, kvs)
    dead = [(n, pid) for n, pid in before if not alive(pid)]
    assert not dead, f"processes died under fuzzing: {dead}"
    assert processes(cluster) == before, "a process was restarted under fuzzing"
    # and still healthy a heartbeat timeout later (nothing was declared dead meanwhile), with
    # no worker but the real ones
    poll_until(lambda: client.call("fuzz_inc", 2).get(timeout=15) == 3, 15,
               "a call after the fuzzing")
    assert set(client.executors()) == workers_before
    kvs.close()
    client.close()
