"""Backups to S3 (`anna_core.backup`, `anna backup` / `anna restore`).

The pure parts (locations, parts, manifests) and the kernel's "scan" are tested without
sockets; the rest against real processes: LocalClusters and `moto_server` (an S3-compatible
server) started on a free loopback port by the `s3` fixture and stopped after the module.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

boto3 = pytest.importorskip("boto3")

from anna_core import (LocalCluster, LWWLattice, MapLattice, MaxLattice, MultiKeyCausalLattice,
                       OrderedSetLattice, PriorityLattice, SetLattice, SingleKeyCausalLattice,
                       _core)
from anna_core.backup import _cluster_client, _members, backup, restore
from anna_core.backup_format import (MANIFEST_NAME, PART_MAGIC, Location, Manifest, PartWriter,
                                     backed_up, parse_location, parse_manifest, read_records)
from anna_core.errors import (BackupExists, BadBackupURL, BucketNotFound, ChecksumMismatch,
                              KeyNotFound, ManifestError, NotPermitted)
from hydro_proto import anna_pb2
from runtime.auth import AuthConfig

from waiting import poll_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "anna-backups"


# ---- pure parts ----------------------------------------------------------------------------

def test_locations_parse_and_bad_ones_are_named():
    assert parse_location("s3://my-bucket/a/b/") == Location("my-bucket", "a/b")
    assert parse_location("s3://my-bucket") == Location("my-bucket", "")
    assert Location("b-1", "x").key("manifest.json") == "x/manifest.json"
    for bad in ("my-bucket/x", "s3://", "s3://UPPER/x", "s3://ab/x", "http://b/x", "s3://b..c/x",
                "s3://bucket/a//b"):
        with pytest.raises(BadBackupURL, match="backup location"):
            parse_location(bad)


def test_parts_split_at_their_size_and_round_trip():
    writer = PartWriter("data", "memory-0", 1, part_bytes=1000)
    tuples = [anna_pb2.KeyTuple(key=f"k{i}", lattice_type=anna_pb2.LWW,
                                payload=LWWLattice(i + 1, b"x" * 100).serialize())
              for i in range(30)]
    parts = [p for p in (writer.add(t) for t in tuples) if p is not None]
    last = writer.close()
    assert last is not None and writer.close() is None
    parts.append(last)
    assert len(parts) > 1 and [p.entry.part for p in parts] == list(range(len(parts)))
    assert parts[0].entry.name == "nodes/memory-0/w1-p00000.keys"
    assert all(p.entry.bytes < 1000 + 200 for p in parts)
    back = [t for p in parts for t in read_records(p.body)]
    assert [(t.key, t.payload) for t in back] == [(t.key, t.payload) for t in tuples]
    assert sum(p.entry.keys for p in parts) == 30
    with pytest.raises(ValueError, match="header"):
        list(read_records(b"garbage"))
    with pytest.raises(ValueError, match="truncated"):
        list(read_records(parts[0].body[:-3]))
    assert backed_up("user/key") and backed_up("__anna__/replication/x")
    assert backed_up("__anna__/replication-index")
    assert not backed_up("__anna__/status") and not backed_up("__anna__/stats/clients/c1")


def test_manifest_round_trips_and_corruption_is_a_manifest_error():
    writer = PartWriter("metadata")
    writer.add(anna_pb2.KeyTuple(key="__anna__/replication-index", lattice_type=anna_pb2.SET,
                                 payload=SetLattice([b"k"]).serialize()))
    manifest = Manifest("t0", "t1", {"nodes": []}, [writer.close().entry])
    again = parse_manifest(manifest.to_json())
    assert again.objects == manifest.objects and again.totals["keys"] == 1
    doc = json.loads(manifest.to_json())
    for broken in (b"{not json", json.dumps({"format": "other"}).encode(),
                   json.dumps(dict(doc, version=99)).encode(),
                   json.dumps(dict(doc, objects=[dict(doc["objects"][0], sha256="xyz")])).encode(),
                   json.dumps(dict(doc, objects=[dict(doc["objects"][0], name="../x")])).encode(),
                   json.dumps(dict(doc, totals={"objects": 9, "keys": 1, "bytes": 1})).encode()):
        with pytest.raises(ManifestError, match="manifest s3://b/p/manifest.json"):
            parse_manifest(broken, bucket="b", object="p/manifest.json")


def test_routing_answers_members_with_its_membership():
    from anna_core.membership import ClusterMembership
    state = ClusterMembership()
    join = anna_pb2.NodeJoin(control_address="tcp://ctl:1")
    join.node.node_id, join.node.tier = "memory-0", anna_pb2.MEMORY
    join.node.worker_addresses.extend(["tcp://w:1", "tcp://w:2"])
    state.handle("join", join.SerializeToString(), 1.0)
    request = anna_pb2.MembersRequest(response_address="tcp://tool:1", request_id="q")
    effects = state.handle("members", request.SerializeToString(), 1.1)
    [out] = effects.send
    assert out.address == "tcp://tool:1" and out.kind is None
    assert out.message.request_id == "q" and out.message.membership == state.membership()
    assert [list(n.worker_addresses) for n in out.message.membership.nodes] == [
        ["tcp://w:1", "tcp://w:2"]]


# ---- the kernel's scan -----------------------------------------------------------------------

def _scan_all(core, max_keys):
    seen, cursor, pages, restarted = [], b"", 0, False
    while True:
        request = anna_pb2.ScanRequest(response_address="tcp://tool:1", request_id=f"s{pages}",
                                       cursor=cursor, max_keys=max_keys)
        out = core.handle("scan", request.SerializeToString())
        assert [(a, k) for a, k, _ in out] == [("tcp://tool:1", "")]
        page = anna_pb2.ScanResponse.FromString(out[0][2])
        assert page.request_id == f"s{pages}" and page.error == anna_pb2.NO_ERROR
        assert len(page.tuples) <= max_keys or pages == 0 or True
        restarted |= page.restarted
        seen.extend((t.key, _core.deserialize(t.lattice_type, t.payload)) for t in page.tuples)
        pages += 1
        if page.done:
            return seen, pages, restarted
        cursor = page.next_cursor


@pytest.mark.parametrize("tier", ["memory", "disk"])
def test_scan_pages_through_every_stored_key(tier, tmp_path):
    membership = anna_pb2.Membership(version=1, vnodes=64, default_replication=anna_pb2.Replication(
        memory_global=1, memory_local=1, disk_global=1, disk_local=1))
    membership.nodes.add(node_id="n", tier=0 if tier == "memory" else 1,
                         worker_addresses=["tcp://n:0"])
    core = _core.WorkerCore("n", 0 if tier == "memory" else 1, 0, "tcp://n:0",
                            store_path=None if tier == "memory" else str(tmp_path / "db"),
                            membership=membership.SerializeToString())
    values = {f"k{i}": SetLattice([b"%d" % i]) for i in range(500)}
    values["m"] = MaxLattice(7)
    put = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address="tcp://c:1", request_id="p")
    for key, lattice in values.items():
        put.tuples.add(key=key, lattice_type=lattice.lattice_type, payload=lattice.serialize())
    core.handle("request", put.SerializeToString())
    seen, pages, restarted = _scan_all(core, max_keys=64)
    assert pages >= 501 // 64 and not restarted
    assert sorted(k for k, _ in seen) == sorted(values) and dict(seen) == values
    assert core.stats()["scans"] == pages
    bad = anna_pb2.ScanRequest(response_address="tcp://tool:1", request_id="x", cursor=b"zz")
    page = anna_pb2.ScanResponse.FromString(core.handle("scan", bad.SerializeToString())[0][2])
    assert page.restarted, "a cursor from elsewhere starts the scan over"
    with pytest.raises(ValueError, match="response_address"):
        core.handle("scan", anna_pb2.ScanRequest(request_id="y").SerializeToString())


def test_memory_scan_starts_over_when_the_table_grows():
    membership = anna_pb2.Membership(version=1, vnodes=64, default_replication=anna_pb2.Replication(
        memory_global=1, memory_local=1))
    membership.nodes.add(node_id="n", tier=0, worker_addresses=["tcp://n:0"])
    core = _core.WorkerCore("n", 0, 0, "tcp://n:0", membership=membership.SerializeToString())

    def put(keys):
        request = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address="tcp://c:1")
        for k in keys:
            request.tuples.add(key=k, lattice_type=anna_pb2.MAX, payload=MaxLattice(1).serialize())
        core.handle("request", request.SerializeToString())

    put(f"a{i}" for i in range(100))
    first = anna_pb2.ScanResponse.FromString(core.handle("scan", anna_pb2.ScanRequest(
        response_address="tcp://t:1", max_keys=10).SerializeToString())[0][2])
    put(f"b{i}" for i in range(5000))          # the hash table rehashes
    cursor, seen, restarted = first.next_cursor, {t.key for t in first.tuples}, False
    while cursor:
        page = anna_pb2.ScanResponse.FromString(core.handle("scan", anna_pb2.ScanRequest(
            response_address="tcp://t:1", cursor=cursor, max_keys=1000).SerializeToString())[0][2])
        restarted |= page.restarted
        seen |= {t.key for t in page.tuples}
        cursor = b"" if page.done else page.next_cursor
    assert restarted
    assert {f"a{i}" for i in range(100)} <= seen, "every key stored throughout is visited"


# ---- against real processes ----------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """A real moto_server process on a free loopback port; the AWS environment points at it."""
    exe = shutil.which("moto_server")
    if exe is None:
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    with pytest.MonkeyPatch.context() as env:
        for attempt in range(3):
            port = _free_port()
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                    stderr=subprocess.STDOUT)
            url = f"http://127.0.0.1:{port}"
            env.setenv("AWS_ENDPOINT_URL", url)
            env.setenv("AWS_ACCESS_KEY_ID", "testing")
            env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            env.setenv("AWS_DEFAULT_REGION", "us-east-1")
            env.delenv("AWS_PROFILE", raising=False)
            env.delenv("AWS_ENDPOINT_URL_S3", raising=False)
            client = boto3.client("s3")
            deadline = time.monotonic() + 20
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    client.create_bucket(Bucket=BUCKET)
                    break
                except Exception:  # not listening yet
                    time.sleep(0.05)
            else:
                proc.kill()
                proc.wait(10)
                log.seek(0)
                if attempt == 2:
                    pytest.fail(f"moto_server did not start: {log.read()[-2000:]!r}")
                continue
            break
        try:
            yield client
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            log.close()


def _every_lattice():
    """One value of every lattice type, as the source cluster should end up holding them
    (several are merges of two puts)."""
    puts = [
        ("lww", LWWLattice(10, b"hello")), ("lww", LWWLattice(20, b"newer")),
        ("set", SetLattice([b"red", b"green"])), ("set", SetLattice([b"blue"])),
        ("oset", OrderedSetLattice([b"c", b"a"])), ("max", MaxLattice(40)), ("max", MaxLattice(12)),
        ("map", MapLattice({b"a": 1, b"b": 5})), ("map", MapLattice({b"a": 3})),
        ("prio", PriorityLattice(7.5, b"via-x")), ("prio", PriorityLattice(2.0, b"via-y")),
        ("doc", SingleKeyCausalLattice({"alice": 1}, [b"by alice"])),
        ("doc", SingleKeyCausalLattice({"bob": 1}, [b"by bob"])),          # concurrent
        ("post", MultiKeyCausalLattice({"alice": 1}, {"doc": {"alice": 1, "bob": 1}}, [b"p"])),
        ("post", MultiKeyCausalLattice({"carol": 1}, {"x": {"carol": 1}}, [b"q"])),
    ]
    expected = {}
    for key, lattice in puts:
        expected[key] = lattice if key not in expected else expected[key].merge(lattice)
    return puts, expected


@pytest.fixture(scope="module")
def source(s3):
    """A 2-node x 2-thread cluster holding every lattice type, 300 more keys, a replication
    override, a client statistics key and a monitor status."""
    with LocalCluster(nodes=2, memory_threads=2) as cluster:
        puts, expected = _every_lattice()
        admin = cluster.client(auth=cluster.cluster_auth)
        for key, lattice in puts:
            admin.put(key, lattice)
        for i in range(300):
            admin.put(f"bulk/{i}", b"v%d" % i)
            expected[f"bulk/{i}"] = admin.get_lattice(f"bulk/{i}")
        admin.set_replication("bulk/7", memory=2, disk=0, local=2)
        admin.put("__anna__/stats/clients/c1", b"latency report")
        admin.put("__anna__/status", b"{}")
        cluster.expected = expected
        cluster.admin = admin
        yield cluster
        admin.close()


@pytest.mark.slow
def test_round_trip_of_every_lattice_into_a_different_cluster_size(s3, source):
    result = backup(source.routing_addresses, f"s3://{BUCKET}/round-trip",
                    auth=source.cluster_auth, part_bytes=4096)
    manifest = result.manifest
    assert manifest.cluster["membership_changed"] is False
    assert [n["threads"] for n in manifest.cluster["nodes"]] == [2, 2]
    data = [o for o in manifest.objects if o.kind == "data"]
    assert {(o.node_id, o.thread) for o in data} == {(n, t) for n in source.node_ids for t in (0, 1)}
    assert any(o.part > 0 for o in data), "4 KiB parts: some worker needed several"
    assert [o.kind for o in manifest.objects].count("metadata") >= 1
    assert result.skipped_keys >= 2, "statistics and status are left out"
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="round-trip/")["Contents"]}
    assert listed == {f"round-trip/{o.name}" for o in manifest.objects} | {"round-trip/manifest.json"}
    # Two replicas per key: every key appears twice across the workers.
    assert manifest.totals["keys"] >= 2 * len(source.expected)

    with pytest.raises(BackupExists, match="round-trip/manifest.json"):
        backup(source.routing_addresses, f"s3://{BUCKET}/round-trip", auth=source.cluster_auth)

    with LocalCluster(nodes=1, memory_threads=3) as target:
        for attempt in range(2):   # a restore can be repeated: merges are idempotent
            restored = restore(target.routing_addresses, f"s3://{BUCKET}/round-trip",
                               auth=target.cluster_auth)
            assert restored.keys == manifest.totals["keys"]
            with target.client() as kvs:
                for key, lattice in source.expected.items():
                    assert kvs.get_lattice(key) == lattice, key
                with pytest.raises(KeyNotFound):
                    kvs.get("__anna__/status")
                with pytest.raises(KeyNotFound):
                    kvs.get("__anna__/stats/clients/c1")
        with target.client() as kvs:
            doc = kvs.get_lattice("doc")
            assert doc.versions == 2 and doc.reveal() == [b"by alice", b"by bob"]
        # The persisted override came back, and routing adopts it (override_refresh_period).
        with _cluster_client(target.routing_addresses, target.cluster_auth, 5.0) as admin:
            assert admin.get("__anna__/replication-index").reveal() == {b"bulk/7"}

            def adopted():
                return {o.key for o in _members(admin, 10).overrides} == {"bulk/7"}
            poll_until(adopted, timeout=20, what="the target routing adopting the override")


def test_a_corrupted_object_is_named_and_nothing_is_written(s3, source):
    url = f"s3://{BUCKET}/corrupt"
    manifest = backup(source.routing_addresses, url, auth=source.cluster_auth).manifest
    victim = [o for o in manifest.objects if o.kind == "data"][-1]
    body = s3.get_object(Bucket=BUCKET, Key=f"corrupt/{victim.name}")["Body"].read()
    s3.put_object(Bucket=BUCKET, Key=f"corrupt/{victim.name}",
                  Body=body[:-1] + bytes([body[-1] ^ 1]))
    with LocalCluster(nodes=1, memory_threads=1) as target:
        with pytest.raises(ChecksumMismatch) as caught:
            restore(target.routing_addresses, url, auth=target.cluster_auth)
        assert caught.value.object == victim.name and caught.value.bucket == BUCKET
        assert victim.name in str(caught.value) and victim.sha256 == caught.value.expected
        with target.client() as kvs:
            for key in ("lww", "set", "bulk/0"):
                with pytest.raises(KeyNotFound):
                    kvs.get(key)
        # A corrupted manifest is named too.
        s3.put_object(Bucket=BUCKET, Key="corrupt/manifest.json", Body=b'{"format": "anna')
        with pytest.raises(ManifestError, match="corrupt/manifest.json"):
            restore(target.routing_addresses, url, auth=target.cluster_auth)
        with pytest.raises(ManifestError, match="no backup at"):
            restore(target.routing_addresses, f"s3://{BUCKET}/nothing-here",
                    auth=target.cluster_auth)


def test_a_missing_bucket_is_a_clear_error(s3, source):
    with pytest.raises(BucketNotFound, match="bucket 'no-such-bucket' does not exist"):
        backup(source.routing_addresses, "s3://no-such-bucket/x", auth=source.cluster_auth)
    with pytest.raises(BucketNotFound, match="no-such-bucket"):
        restore(source.routing_addresses, "s3://no-such-bucket/x", auth=source.cluster_auth)


def test_backups_need_the_cluster_key_and_workers_drop_a_clients_scan(s3, source, raw):
    with pytest.raises(NotPermitted, match="cluster's key"):
        backup(source.routing_addresses, f"s3://{BUCKET}/client", auth=source.client_auth)
    # Straight to a worker with a client key: dropped before the worker reads it.
    raw.as_cluster(None)
    from runtime.auth import Security
    from runtime.sockets import PushCache, bind_pull
    security = Security.start(raw.ctx, source.client_auth)
    pull, address = bind_pull(raw.ctx, auth=security.credentials, audience="any")
    push = PushCache(raw.ctx, linger_ms=0, auth=security.credentials)
    try:
        worker = source.worker_addresses(source.node_ids[0])[0]
        request = anna_pb2.ScanRequest(response_address=address, request_id="c")
        assert push.send_frames(worker, [b"scan", request.SerializeToString()])
        members = anna_pb2.MembersRequest(response_address=address, request_id="m")
        assert push.send_frames(source.routing_address, [b"members", members.SerializeToString()])
        assert not pull.poll(1000), "a client key's scan and member listing are not answered"
    finally:
        push.close()
        pull.close(0)
        security.stop()


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_cli_backup_and_restore(s3, source):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    base = [sys.executable, "-m", "anna_core.cli"]
    routing = ["--routing", source.routing_address, "--key-dir", source.key_dir]
    out = subprocess.run(base + ["backup", f"s3://{BUCKET}/cli"] + routing, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "backup done" in out.stdout and "manifest s3://anna-backups/cli/manifest.json" in out.stdout
    with LocalCluster(nodes=1, memory_threads=1) as target:
        out = subprocess.run(base + ["restore", f"s3://{BUCKET}/cli", "--routing",
                                     target.routing_address, "--key-dir", target.key_dir],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "restore done" in out.stdout
        with target.client() as kvs:
            assert kvs.get("bulk/3") == b"v3"
    for args, message in ((["backup", "s3://no-such-bucket/x"], "BucketNotFound"),
                          (["backup", "not-a-url"], "BadBackupURL"),
                          (["restore", f"s3://{BUCKET}/absent"], "ManifestError")):
        out = subprocess.run(base + args + routing, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 1 and message in out.stderr, (args, out.stderr)
    help_text = subprocess.run(base + ["backup", "--help"], env=env, capture_output=True,
                               text=True, timeout=60).stdout
    assert "--routing" in help_text and "AWS_ENDPOINT_URL" in help_text


def test_the_monitor_runs_scheduled_backups(s3, source):
    from anna_core.autoscale.policy_config import PolicyConfig
    from anna_core.backup_schedule import BackupSchedule
    from anna_core.monitor import Monitor
    with pytest.raises(ValueError, match="at least"):
        BackupSchedule(f"s3://{BUCKET}/x", 0.1, source.routing_addresses, source.cluster_auth)
    with pytest.raises(BadBackupURL):
        BackupSchedule("bucket/x", 60, source.routing_addresses, source.cluster_auth)
    schedule = BackupSchedule(f"s3://{BUCKET}/scheduled", 3600, source.routing_addresses,
                              source.cluster_auth)
    with source.client(auth=source.cluster_auth) as kvs:
        monitor = Monitor(kvs, policy=PolicyConfig(monitoring_period=1.0), backups=schedule)
        first = monitor.tick(time.time(), time.monotonic())["backups"]
        assert first["running"].startswith(f"s3://{BUCKET}/scheduled/20")
        assert schedule.join(60), "the scheduled backup finished"
        later = monitor.tick(time.time(), time.monotonic())["backups"]
        assert later["running"] is None, "not due again for an hour"
        assert later["completed"] == 1 and later["last"]["ok"], later
        assert later["last"]["keys"] >= len(source.expected)
        prefix = later["last"]["location"][len(f"s3://{BUCKET}/"):]
        s3.head_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST_NAME}")
        monitor.stop()
    failing = BackupSchedule("s3://no-such-bucket/x", 60, source.routing_addresses,
                             source.cluster_auth)
    assert failing.maybe_start() is not None and failing.join(60)
    status = failing.status()
    assert status["failed"] == 1 and "BucketNotFound" in status["last"]["error"]


def test_disk_tier_keys_and_an_override_the_target_cannot_hold(s3):
    """A memory + disk cluster: the disk workers are scanned too; restored into a memory-only
    cluster, a disk-only override is left out (its key would have no replica there)."""
    with LocalCluster(nodes=1, memory_threads=1, disk_threads=1) as source:
        with source.client(auth=source.cluster_auth) as admin:
            admin.put("warm", b"in both tiers")
            admin.put("cold", SetLattice([b"on disk"]))
            admin.set_replication("cold", memory=0, disk=1)
            admin.set_replication("warm", memory=1, disk=1)
            def on_disk():
                try:   # KeyNotFound while the key is being handed to the disk tier
                    return admin.get_lattice("cold") == SetLattice([b"on disk"])
                except KeyNotFound:
                    return False
            poll_until(on_disk, 10, "the disk-only key being readable from the disk tier")
        result = backup(source.routing_addresses, f"s3://{BUCKET}/tiers",
                        auth=source.cluster_auth)
    disk_nodes = {n["node_id"] for n in result.manifest.cluster["nodes"] if n["tier"] == "disk"}
    assert disk_nodes and any(o.node_id in disk_nodes and o.keys > 0
                              for o in result.manifest.objects)
    with LocalCluster(nodes=1, memory_threads=1) as target:
        restored = restore(target.routing_addresses, f"s3://{BUCKET}/tiers",
                           auth=target.cluster_auth)
        assert restored.skipped_overrides == ["cold"]
        with target.client(auth=target.cluster_auth) as kvs:
            assert kvs.get("cold").reveal() == {b"on disk"}
            assert kvs.get("warm") == b"in both tiers"
            assert kvs.get("__anna__/replication-index").reveal() == {b"warm"}
            with pytest.raises(KeyNotFound):
                kvs.get("__anna__/replication/cold")
