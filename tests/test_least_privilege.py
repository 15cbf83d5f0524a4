"""User code holds no cluster secret, acts with a function's rights, and the registry belongs
to the schedulers (docs/SECURITY.md, "Threat model").

Pure checks first (the node cache's refusals, who workers run as, the key hand-off, which
audience admits which role), then one authenticated `LocalCluster` with real processes:
- a registered function hunts for the cluster's secret key (its command line, environment,
  the key files, its parent's /proc entries) and returns what it found: nothing usable;
- a function's `lib.put("__anna__/x")` and a raw cache write under `__cloudburst/` are
  refused with `NotPermitted` naming the key;
- a client's raw Anna PUT under `__cloudburst/` is refused by the KVS;
- junk registry records (written with the cluster key, as corruption would) make `call`,
  `register` of a DAG and `list` fail at once with `CorruptRecord` naming the key, while
  `register` of a function keeps working and heals its record.
"""
from __future__ import annotations

import os
import time

import pytest
import zmq

import anna_core
import cloudburst
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import (CLUSTER, FUNCTION, AuthConfig, Authenticator, KeyFileError, KeyPair,
                          decode_handoff, encode_handoff, function_credentials, make_client,
                          make_server, write_keys)
from faas.keys import FUNCTIONS_INDEX, function_key
from executor.permissions import refusal
from executor.privilege import WorkerIdentity, landlock_abi, resolve_identity
from waiting import poll_until


# ---- pure ----------------------------------------------------------------------------------

def test_a_function_may_write_only_outside_the_clusters_namespaces():
    assert refusal(pb.CacheRequest(op=pb.CACHE_GET, keys=["__anna__/x", "__cloudburst/fn/f"])) \
        is None                                                     # reads are free
    assert refusal(pb.CacheRequest(op=pb.CACHE_PUT, keys=["mine"], values=[b"v"])) is None
    for key in ("__anna__/x", "__anna__/stats/clients/1", "__cloudburst/fn/f",
                "__cloudburst/worker/w"):
        why = refusal(pb.CacheRequest(op=pb.CACHE_PUT, keys=[key], values=[b"v"]))
        assert why is not None and repr(key) in why
        commit = pb.CacheRequest(op=pb.CAUSAL_COMMIT, keys=["innocent"])
        commit.writes.append(anna_pb2.KeyTuple(key=key).SerializeToString())
        assert repr(key) in refusal(commit)           # the key inside the write counts
    for op in (pb.CAUSAL_SNAPSHOT, pb.CAUSAL_FETCH, pb.CAUSAL_RELEASE, pb.CAUSAL_TEMP_GET,
               pb.CAUSAL_GC_REPORT, pb.CAUSAL_GC_APPLY, 99):
        assert "may not send" in refusal(pb.CacheRequest(op=op))


def test_who_workers_run_as():
    class Entry:
        def __init__(self, uid, gid):
            self.pw_uid, self.pw_gid = uid, gid

    users = {"nobody": Entry(65534, 65534), "worker": Entry(1500, 1600), "root": Entry(0, 0)}
    lookup = users.__getitem__
    by_uid = {e.pw_uid: e for e in users.values()}.__getitem__
    assert resolve_identity(None, 0, lookup, by_uid) == WorkerIdentity(65534, 65534)
    assert resolve_identity("worker", 0, lookup, by_uid) == WorkerIdentity(1500, 1600)
    assert resolve_identity("1500", 0, lookup, by_uid) == WorkerIdentity(1500, 1600)
    assert resolve_identity("", 0, lookup, by_uid) == WorkerIdentity()      # opted out
    assert resolve_identity(None, 1000, lookup, by_uid) == WorkerIdentity()  # cannot switch
    with pytest.raises(ValueError, match="needs the executor node to run as root"):
        resolve_identity("worker", 1000, lookup, by_uid)
    with pytest.raises(ValueError, match="is root"):
        resolve_identity("root", 0, lookup, by_uid)
    with pytest.raises(ValueError, match="not a user"):
        resolve_identity("ghost", 0, lookup, by_uid)


@pytest.fixture
def searchable_dir():
    """A fresh directory every user may search (pytest's own are mode 0700)."""
    import pathlib
    import shutil
    import tempfile
    path = tempfile.mkdtemp(prefix="lp-")
    try:
        yield pathlib.Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_workers_switch_uid_only_where_they_can_run(searchable_dir):
    from executor.privilege import reachable, worker_ipc_dir
    tmp_path = searchable_dir
    closed, open_ = tmp_path / "closed", tmp_path / "open"
    (closed / "bin").mkdir(parents=True)
    (open_ / "bin").mkdir(parents=True)
    os.chmod(tmp_path, 0o711)
    os.chmod(closed, 0o700)
    os.chmod(open_, 0o755)
    assert reachable([str(open_ / "bin")], 65534, 65534) is None
    assert reachable([str(closed / "bin")], 65534, 65534) == str(closed)
    assert reachable([str(closed / "bin")], os.stat(closed).st_uid, 0) is None   # its owner
    if os.geteuid() == 0:           # a node's workers get a socket directory of their own
        own = worker_ipc_dir(str(open_), "n0", WorkerIdentity(65534, 65534))
        assert os.stat(own).st_uid == 65534 and os.stat(own).st_mode & 0o777 == 0o700
        with pytest.raises(ValueError, match="cannot reach"):
            worker_ipc_dir(str(closed), "n0", WorkerIdentity(65534, 65534))
    assert worker_ipc_dir(str(closed), "n0", WorkerIdentity()) == str(closed)


def test_the_function_keys_handed_over_hold_no_cluster_secret(tmp_path):
    write_keys(str(tmp_path), ["c"])
    auth = AuthConfig(str(tmp_path))
    cluster = auth.load()
    creds = function_credentials(cluster.keypair.public, auth.function_keypair())
    data = encode_handoff(creds, hide=[str(tmp_path)])
    assert cluster.keypair.secret not in data and cluster.keypair.public in data
    back, hide = decode_handoff(data)
    assert hide == [str(tmp_path)]
    assert back.role == FUNCTION and back.keypair == creds.keypair
    assert back.allowed == {cluster.keypair.public: CLUSTER, creds.keypair.public: FUNCTION}
    with pytest.raises(ValueError):
        encode_handoff(cluster)                 # the cluster's own credentials never go
    with pytest.raises(KeyFileError):
        decode_handoff(b"{not json")
    # a key directory made before the function pair existed: named, with the fix
    os.remove(tmp_path / "function.key_secret")
    with pytest.raises(KeyFileError, match="--add-client"):
        auth.function_keypair()
    write_keys(str(tmp_path), ["d"], add_clients=True)
    assert auth.function_keypair().secret


def _handshake(server_audience, client_pair, cluster_dir):
    """Whether a CURVE client with `client_pair` gets a message through to a server of
    `server_audience` run by the cluster of `cluster_dir`."""
    ctx = zmq.Context()
    creds = AuthConfig(cluster_dir).load()
    auth = Authenticator(ctx, creds).start()
    try:
        pull = ctx.socket(zmq.PULL)
        make_server(pull, creds, server_audience)
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        make_client(push, function_credentials(creds.keypair.public, client_pair),
                    creds.keypair.public)
        push.connect(f"tcp://127.0.0.1:{port}")
        push.send(b"x")
        ok = bool(pull.poll(1500))
        push.close(0)
        pull.close(0)
        return ok
    finally:
        auth.stop()
        ctx.term()


def test_audiences_admit_a_function_key_only_where_workers_send(tmp_path):
    write_keys(str(tmp_path), ["c"])
    function_pair = AuthConfig(str(tmp_path)).function_keypair()
    assert _handshake("function", function_pair, str(tmp_path))     # node caches, workers
    assert _handshake("all", function_pair, str(tmp_path))          # schedulers
    assert not _handshake("cluster", function_pair, str(tmp_path))  # cluster-only sockets
    assert not _handshake("any", function_pair, str(tmp_path))      # the KVS and routing


class _Frame:
    """A received frame as `runtime.auth.role_of` reads it: its sender's role."""

    def __init__(self, role):
        self.role = role

    def get(self, prop):
        return self.role


def test_a_scheduler_takes_from_a_function_only_what_workers_send():
    from scheduler.admission import Admission
    admission = Admission("s", security=object())
    beat = pb.WorkerStatus(worker_id="w", address="tcp://127.0.0.1:1").SerializeToString()
    fn = _Frame(FUNCTION)
    assert admission.admits(fn, "heartbeat", beat)
    assert admission.admits(fn, "done") and admission.admits(fn, "causal_abort")
    for forged in (pb.WorkerStatus(worker_id="w", exited=True),     # a node's: a worker died
                   pb.WorkerStatus(worker_id="w")):                  # a node's: vouching
        assert not admission.admits(fn, "heartbeat", forged.SerializeToString())
    for kind in ("register_fn", "call", "list", "keyset", "node_status", "drain", "schedule"):
        assert not admission.admits(fn, kind), kind
    assert not admission.admits(_Frame("client:c"), "heartbeat", beat)
    assert admission.admits(_Frame(CLUSTER), "keyset")
    assert admission.dropped[(FUNCTION, "heartbeat (a node's)")] == 2


# ---- real processes ------------------------------------------------------------------------

def hunt_for_the_cluster_key(lib):
    """What a malicious function tries: every path that led to the cluster's secret key."""
    import json
    import os as os_
    found = {"uid": os_.getuid(), "read": {}, "refused": []}

    def read(path):
        try:
            with open(path, "rb") as f:
                data = f.read(1 << 20)
            found["read"][path] = data.decode("latin-1")
            return data
        except OSError as e:
            found["refused"].append(f"{path}: {e.__class__.__name__}")
            return b""

    key_dirs = set()
    for pid in ("self", str(os_.getppid())):
        for part in read(f"/proc/{pid}/cmdline").split(b"\0"):
            try:
                config = json.loads(part)
            except ValueError:
                continue
            if isinstance(config, dict) and config.get("key_dir"):
                key_dirs.add(config["key_dir"])
        environ = read(f"/proc/{pid}/environ")
        for entry in environ.split(b"\0"):
            if b"KEY" in entry.upper():
                key_dirs.add(entry.split(b"=", 1)[-1].decode("latin-1"))
        read(f"/proc/{pid}/maps")
    try:                                  # the node's memory holds the cluster's secret
        parent = os_.getppid()
        with open(f"/proc/{parent}/maps") as f:
            regions = [line.split()[0] for line in f if "[heap]" in line]
        with open(f"/proc/{parent}/mem", "rb") as f:
            for region in regions:
                start, end = (int(x, 16) for x in region.split("-"))
                f.seek(start)
                found["read"][f"/proc/{parent}/mem"] = f.read(end - start).decode("latin-1")
    except OSError as e:
        found["refused"].append(f"/proc/ppid/mem: {e.__class__.__name__}")
    try:
        os_.kill(os_.getppid(), 0)        # could it stop its node?
        found["signal_node"] = True
    except OSError:
        found["signal_node"] = False
    for name, value in os_.environ.items():
        found["read"]["env:" + name] = value
    for d in key_dirs:
        for name in ("cluster.key_secret", "function.key_secret"):
            read(os_.path.join(d, name))
        try:
            for sub in os_.listdir(os_.path.join(d, "clients")):
                read(os_.path.join(d, "clients", sub))
        except OSError as e:
            found["refused"].append(f"{d}/clients: {e.__class__.__name__}")
    found["key_dirs"] = sorted(key_dirs)
    return found


def write_reserved(lib, key, raw):
    """lib.put of a reserved key (or, with `raw`, a cache request bypassing lib's own check)."""
    try:
        if raw:
            lib._worker.cache.put(key, b"junk")
        else:
            lib.put(key, "pwned")
    except Exception as e:
        return [type(e).__name__, str(e)]
    return ["written", ""]


def forge_a_drain(lib):
    """What only the cluster may send: drain this node, at its cache and at the schedulers."""
    import time as time_
    from hydro_proto import cloudburst_pb2 as pb_
    worker = lib._worker
    drain = pb_.DrainRequest(node_id=worker.config.node_id, draining=True,
                             epoch=time_.time_ns())
    for address in [worker.config.cache_address, *worker.config.scheduler_addresses]:
        worker._push.send(address, "drain", drain)
    return worker.config.node_id


def use_a_temporary_file(lib):
    import tempfile
    with tempfile.NamedTemporaryFile("w+") as f:
        f.write("scratch")
        f.flush()
        f.seek(0)
        return f.read()


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as c:
        client = c.client()
        client.register(hunt_for_the_cluster_key, "hunt")
        client.register(write_reserved, "write_reserved")
        client.register(lambda lib, x: x + 1, "lp_inc")
        client.register(use_a_temporary_file, "lp_tmp")
        client.register(forge_a_drain, "lp_drain")
        yield c


def test_a_client_without_the_function_key_is_told_at_once(cluster, tmp_path):
    import shutil
    key_dir = tmp_path / "keys"
    (key_dir / "clients").mkdir(parents=True)
    shutil.copy(os.path.join(cluster.key_dir, "cluster.key"), key_dir)
    for name in ("local.key", "local.key_secret"):
        shutil.copy(os.path.join(cluster.key_dir, "clients", name), key_dir / "clients")
    with pytest.raises(KeyFileError, match="function.key"):
        cloudburst.Client(cluster.address, auth=AuthConfig(str(key_dir), "client:local"))


def test_a_function_finds_no_cluster_secret(cluster):
    secret = AuthConfig(cluster.key_dir).load().keypair.secret.decode()
    found = cluster.client().call("hunt").get(timeout=30)
    everything = repr(found)
    assert secret not in everything, "a function read the cluster's secret key"
    assert not any(p.endswith("cluster.key_secret") for p in found["read"]), found["read"]
    # the node's memory and environment are out of reach (another uid, or no capabilities)
    assert not any(p.endswith("/mem") for p in found["read"]), sorted(found["read"])
    assert not any(p.endswith("/environ") and "/proc/self/" not in p
                   for p in found["read"]), sorted(found["read"])
    assert any(r.startswith("/proc/ppid/mem") for r in found["refused"])
    assert any("cluster.key_secret" in r for r in found["refused"]) or not found["key_dirs"]
    if found["uid"] != os.geteuid() or landlock_abi() >= 6:
        assert not found["signal_node"]


def test_a_function_still_uses_temporary_files(cluster):
    assert cluster.client().call("lp_tmp").get(timeout=30) == "scratch"


def test_a_function_cannot_write_the_clusters_keys(cluster):
    client = cluster.client()
    for key, raw in (("__anna__/x", False), ("__cloudburst/fn/lp_inc", True),
                     ("__cloudburst/worker/evil", True)):
        kind, message = client.call("write_reserved", key, raw).get(timeout=30)
        assert kind == "NotPermitted" and repr(key) in message, (key, kind, message)
    admin = anna_core.Client(cluster.kvs.routing_address, auth=cluster.cluster_auth)
    try:
        with pytest.raises(anna_core.KeyNotFound):
            admin.get("__anna__/x")
        with pytest.raises(anna_core.KeyNotFound):
            admin.get("__cloudburst/worker/evil")
    finally:
        admin.close()
    assert client.call("lp_inc", 1).get(timeout=10) == 2


def test_a_function_cannot_send_what_only_the_cluster_sends(cluster):
    client = cluster.client()
    node = client.call("lp_drain").get(timeout=30)
    deadline = time.monotonic() + 1.5      # long past a heartbeat period (0.2 s)
    while time.monotonic() < deadline:     # whatever arrived was handled by now
        status = client.status()
        assert not any(n.draining or n.node_draining for n in status.nodes
                       if n.node_id == node), status.nodes
    assert any(d.role == "function" and d.kind == "drain" for d in status.dropped), \
        status.dropped
    assert client.call("lp_inc", 3).get(timeout=10) == 4


def test_a_client_cannot_write_the_registry(cluster):
    kvs = anna_core.Client(cluster.kvs.routing_address, auth=cluster.client_auth)
    try:
        for key in (function_key("lp_inc"), FUNCTIONS_INDEX, "__cloudburst/worker/x"):
            with pytest.raises(anna_core.NotPermitted, match="__cloudburst/"):
                kvs.put(key, b"junk")
            with pytest.raises(anna_core.NotPermitted):
                kvs.delete(key)
    finally:
        kvs.close()
    assert cluster.client().call("lp_inc", 2).get(timeout=10) == 3


def test_junk_in_the_registry_is_a_typed_error_naming_the_key(cluster):
    client = cluster.client()
    admin = anna_core.Client(cluster.kvs.routing_address, auth=cluster.cluster_auth)
    try:
        # a record nobody registered, and one a scheduler already caches, both damaged
        client.register(lambda lib: 1, "lp_damaged")
        assert client.call("lp_damaged").get(timeout=10) == 1
        for name in ("lp_junk", "lp_damaged"):
            admin.put_all(function_key(name), b"\x08\x96\x01junk")
        start = time.monotonic()
        with pytest.raises(cloudburst.CorruptRecord, match="__cloudburst/fn/lp_junk"):
            client.call("lp_junk").get(timeout=20)
        assert time.monotonic() - start < 5.0

        def damaged_seen():
            try:
                client.call("lp_damaged").get(timeout=20)
            except cloudburst.CorruptRecord as e:
                return "__cloudburst/fn/lp_damaged" in str(e)
            return False
        poll_until(damaged_seen, 10, "the scheduler seeing the damaged record")
        with pytest.raises(cloudburst.CorruptRecord, match="lp_junk"):
            client.register_dag("lp_dag", ["lp_inc", "lp_junk"], [("lp_inc", "lp_junk")])
        # registering again heals the record
        client.register(lambda lib: 2, "lp_junk")
        assert client.call("lp_junk").get(timeout=10) == 2

        # a damaged index: list names it at once; register still works
        admin.delete(FUNCTIONS_INDEX)
        admin.put_all(FUNCTIONS_INDEX, b"junk")
        start = time.monotonic()
        with pytest.raises(cloudburst.CorruptRecord, match="__cloudburst/index/functions"):
            client.list()
        assert time.monotonic() - start < 5.0
        client.register(lambda lib, x: x * 3, "lp_after")
        assert client.call("lp_after", 2).get(timeout=10) == 6
    finally:
        try:
            admin.delete(FUNCTIONS_INDEX)
            admin.put_all(FUNCTIONS_INDEX, anna_core.SetLattice([b"lp_inc"]))
        finally:
            admin.close()
