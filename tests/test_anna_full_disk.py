"""The disk tier on a full disk, on real processes and a real (small) filesystem.

A 32 MiB filesystem is mounted for the disk node's data: a tmpfs, and ext4 on a loop-mounted
image (root only; skipped otherwise, with the reason). Filled with puts, the store refuses writes with `DiskFull` naming the node, the
worker and the directory; every acknowledged key reads back; deletes work and their space
comes back, so puts succeed again. Killed and restarted while the filesystem is full (the
rest filled by a file, as another program would), the node serves every acknowledged key;
with not even room to open for writing it opens read-only and recovers once space is freed.

Every loop is bounded and every wait has a deadline; the mount is removed in the fixture.
"""
import errno
import gc
import os
import shutil
import subprocess
import time

import pytest

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from waiting import poll_until

FS_BYTES = 32 << 20
VALUE_BYTES = 64 << 10
MAX_PUTS = FS_BYTES // VALUE_BYTES + 64   # more than can fit: the loop must hit DiskFull
NOISE = os.urandom(VALUE_BYTES)           # values must not compress (RocksDB uses Snappy)


def _mount(args, what):
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot {what} for the full-disk test: {done.stderr.strip()}")


@pytest.fixture(params=["tmpfs", "ext4"])
def small_disk(request, tmp_path):
    """A 32 MiB filesystem at tmp_path/disk: a tmpfs, or ext4 on a loop-mounted image file
    (a real disk filesystem: block allocation, a journal); unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the full-disk test needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    if request.param == "tmpfs":
        _mount(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES},mode=0755", "tmpfs",
                str(mount)], "mount a tmpfs")
    else:
        if shutil.which("mkfs.ext4") is None:
            pytest.skip("mkfs.ext4 is not installed (e2fsprogs)")
        image = tmp_path / "disk.img"
        with open(image, "wb") as f:
            f.truncate(FS_BYTES)
        # -m 0: no blocks reserved for root (the test runs as root and would use them).
        _mount(["mkfs.ext4", "-q", "-m", "0", "-F", str(image)], "make an ext4 image")
        _mount(["mount", "-o", "loop", str(image), str(mount)], "loop-mount an ext4 image")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_to(path, filler, leave):
    """Append to `filler` until at most `leave` bytes are free on path's filesystem, or
    until not even 4 KiB can be written there."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = 1 << 20
        for _ in range(FS_BYTES // 4096 + 64):          # bounded: the filesystem's pages
            gap = free_bytes(path) - leave
            if gap <= 0:
                return
            try:
                os.write(fd, b"\0" * min(gap, chunk))
            except OSError as e:
                if e.errno != errno.ENOSPC or chunk == 4096:
                    if e.errno == errno.ENOSPC:
                        return
                    raise
                chunk = 4096                             # ext4 keeps a little for itself
    finally:
        os.close(fd)


def value_of(key):
    return key.encode() + NOISE[len(key):]


def put_until_full(kvs, prefix):
    """Put distinct keys until the store refuses; returns (acknowledged keys, the error)."""
    acked = []
    for i in range(MAX_PUTS):
        key = f"{prefix}-{i}"
        try:
            kvs.put(key, value_of(key))
        except anna_core.DiskFull as e:
            return acked, e
        acked.append(key)
    raise AssertionError(f"{MAX_PUTS} puts of {VALUE_BYTES} bytes fit on a "
                         f"{FS_BYTES}-byte filesystem without a DiskFull")


def assert_all_read_back(kvs, keys):
    wrong = [k for k in keys if kvs.get(k) != value_of(k)]
    assert not wrong, f"{len(wrong)} acknowledged keys did not read back, e.g. {wrong[:3]}"


def put_succeeds(kvs, key):
    try:
        kvs.put(key, value_of(key))
        return True
    except anna_core.DiskFull:
        return False


def deletes(kvs, keys):
    """Delete `keys`; False if the store refused (DiskFull: still read-only)."""
    try:
        for key in keys:
            kvs.delete(key)
        return True
    except anna_core.DiskFull:
        return False


@pytest.mark.slow
def test_full_disk_refuses_puts_keeps_reads_and_deletes_and_survives_restarts(small_disk):
    data_dir = small_disk
    store_dir = str(data_dir / "disk-0" / "0")
    filler = data_dir / "filler"
    with anna_core.LocalCluster(memory_threads=0, disk_threads=1, data_dir=str(data_dir),
                                pin_threads=False,
                                log_dir=str(data_dir.parent / "logs")) as cluster:
        kvs = cluster.client(timeout=5.0)   # a full disk under a loaded machine is slow

        # 1. Fill the store: puts are refused with a typed error naming what and where.
        acked, error = put_until_full(kvs, "a")
        assert len(acked) > 100, "the store refused writes long before the disk was full"
        assert isinstance(error, anna_core.StoreFailed)
        message = str(error)
        assert "disk full" in message and "node disk-0 worker 0" in message, message
        assert store_dir in message and cluster.worker_addresses("disk-0")[0] in message
        assert free_bytes(data_dir) > 0   # refused before the filesystem itself ran out
        assert_all_read_back(kvs, acked)

        # 2. Deletes work on the full store, and their space comes back for new puts.
        deleted, acked = acked[: len(acked) // 2], acked[len(acked) // 2:]
        for key in deleted:
            kvs.delete(key)
        for key in deleted[:5]:
            with pytest.raises(anna_core.KeyNotFound):
                kvs.get(key)
        poll_until(lambda: put_succeeds(kvs, "after-deletes"), 10.0,
                   "a put succeeding after deleting half the keys")
        acked.append("after-deletes")

        # 3. Full again, and the rest of the filesystem taken by another file; kill -9 and
        #    restart: the node opens (its reserve file gives it room) and serves every key.
        more, _ = put_until_full(kvs, "b")
        acked += more
        fill_to(data_dir, filler, 0)
        assert free_bytes(data_dir) < 256 << 10
        cluster.restart_node("disk-0", kill=True)
        kvs = cluster.client(timeout=5.0)   # a full disk under a loaded machine is slow
        assert_all_read_back(kvs, acked)
        # Whatever the restart freed (compaction scratch files of the killed process), take
        # it but 2 MiB: the store is full for writes, not for its own deletes.
        fill_to(data_dir, filler, 2 << 20)
        with pytest.raises(anna_core.DiskFull) as info:
            kvs.put("refused", value_of("refused"))
        assert "node disk-0 worker 0" in str(info.value)
        kvs.delete(acked.pop())
        assert_all_read_back(kvs, acked)

        # 4. Not a page left and no reserve: the node still starts (read-only) and serves
        #    reads; writes, deletes included, say why they are refused.
        cluster.stop_node("disk-0")     # a clean stop: no files left for the open to clear
        fill_to(data_dir, filler, 0)
        cluster.start_node("disk-0")
        kvs = cluster.client(timeout=5.0)   # a full disk under a loaded machine is slow
        assert_all_read_back(kvs, acked)
        with pytest.raises(anna_core.DiskFull) as info:
            kvs.put("refused", value_of("refused"))
        with pytest.raises(anna_core.DiskFull) as info:
            kvs.delete(acked[0])
        assert "read-only" in str(info.value) and store_dir in str(info.value)

        # 5. The other file removed: the store reopens for writing by itself (deletes work),
        #    but is as full as before the file came; deleting data makes room for puts.
        filler.unlink()
        poll_until(lambda: deletes(kvs, acked[:1]), 10.0,
                   "a delete succeeding once the filler file was removed")
        acked.pop(0)
        assert deletes(kvs, acked[: len(acked) // 2])
        acked = acked[len(acked) // 2:]
        poll_until(lambda: put_succeeds(kvs, "after-freeing"), 10.0,
                   "a put succeeding after removing the filler file and deleting data")
        assert_all_read_back(kvs, acked + ["after-freeing"])
        assert cluster.is_running("disk-0")
        assert "Assertion" not in cluster.log_tail("disk-0", 200)


# ---- RocksDB itself running out of space (another program took it between two checks)

def _request(req_type, tuples):
    r = anna_pb2.KeyRequest(type=req_type, response_address="tcp://client:1", request_id="r")
    r.tuples.extend(tuples)
    return r.SerializeToString()


def _answer(core, req_type, tuple_):
    out = core.handle("request", _request(req_type, [tuple_]))
    return anna_pb2.KeyResponse.FromString(out[0][2]).tuples[0]


def test_rocksdb_out_of_space_anyway_loses_nothing_and_recovers(small_disk):
    """The store checks free space at most every 50 ms when far from its floor; take all of it
    inside that window and the next writes reach RocksDB with no room. They fail with
    DISK_FULL (no abort), the store reopens itself, every acknowledged key survives, deletes
    work, and writes resume once space is freed."""
    m = anna_pb2.Membership(version=1, vnodes=64, default_replication=anna_pb2.Replication(
        memory_global=0, memory_local=1, disk_global=1, disk_local=1))
    m.nodes.add(node_id="d", tier=1, worker_addresses=["tcp://d:0"])
    store = str(small_disk / "d" / "0")
    filler = small_disk / "filler"
    big = 1 << 20

    def new_core():
        return _core.WorkerCore("d", 1, 0, "tcp://d:0", store_path=store,
                                membership=m.SerializeToString())

    def put(core, key):
        lattice = _core.LWWLattice(time.time_ns(), key.encode() * (big // len(key)))
        return _answer(core, anna_pb2.PUT, anna_pb2.KeyTuple(
            key=key, lattice_type=lattice.lattice_type, payload=lattice.serialize()))

    def read(core, key):
        t = _answer(core, anna_pb2.GET, anna_pb2.KeyTuple(key=key))
        if t.error != anna_pb2.NO_ERROR:
            return None
        return _core.deserialize(t.lattice_type, t.payload).reveal()

    core = new_core()
    acked, hit = [], None
    for attempt in range(5):
        time.sleep(0.06)                       # the next put measures: plenty of room
        key = f"warm-{attempt}"
        assert put(core, key).error == anna_pb2.NO_ERROR
        acked.append(key)
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, max(free_bytes(small_disk) - (64 << 10), 4096))
        finally:
            os.close(fd)
        fill_to(small_disk, filler, 0)
        for i in range(4):
            key = f"k-{attempt}-{i}"
            t = put(core, key)
            if t.error == anna_pb2.NO_ERROR:
                acked.append(key)
                continue
            assert t.error == anna_pb2.DISK_FULL, t
            if "RocksDB" in t.error_detail:
                hit = t.error_detail
            break
        if hit:
            break
        filler.unlink()                      # the store's own check won: free space, retry
        poll_until(lambda: put(core, "probe").error == anna_pb2.NO_ERROR, 5.0,
                   "puts accepted again after removing the filler")
        acked.append("probe")
    if not hit:
        pytest.skip("could not take the space inside the store's 50 ms check window")
    assert "node d worker 0: disk full: RocksDB" in hit and store in hit

    def value_ok(key):
        return read(core, key) == key.encode() * (big // len(key))

    assert all(value_ok(k) for k in acked), "an acknowledged key was lost"
    # Deletes work (the store reopens RocksDB first, at most once a second).
    gone = acked.pop(0)
    poll_until(lambda: _answer(core, anna_pb2.DELETE, anna_pb2.KeyTuple(key=gone)).error
               in (anna_pb2.NO_ERROR, anna_pb2.KEY_DNE) and read(core, gone) is None,
               5.0, "a delete succeeding after RocksDB ran out of space")
    filler.unlink()
    poll_until(lambda: put(core, "after").error == anna_pb2.NO_ERROR, 5.0,
               "a put succeeding once space was freed")
    acked.append("after")
    del core
    gc.collect()
    core = new_core()                        # and all of it survives a reopen
    assert all(value_ok(k) for k in acked), "an acknowledged key was lost across a reopen"
    assert read(core, gone) is None
