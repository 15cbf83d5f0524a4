"""No peer can make a process buffer more than one 16 MiB frame before it authenticates, and
values up to the KVS's maximum still travel (as several frames), on real processes.

- A peer with no key opens a TCP connection to a CURVE socket, sends a ZMTP greeting
  announcing CURVE, then a frame header declaring 240 MiB (and, for the KVS worker, 64 MiB:
  under its old per-frame limit), and streams bytes. ZeroMQ applies
  the socket's frame limit (16 MiB) from the handshake on, so a scheduler and a KVS worker
  disconnect it at the header: their resident memory grows by far less than 16 MiB plus
  slack, and they keep serving.
- A 64 MiB value (the KVS's default maximum) is put and read back through the KVS client
  (the kernel and the client send and join it in 16 MiB frames), and a call with a 40 MiB
  argument returning a 40 MiB result completes (the call and the result travel in several
  frames from the client to the scheduler, the worker and back).
Loopback only; a few seconds each.
"""
import socket
import struct
import threading
import time

import pytest

import cloudburst
from runtime.auth import parse_address

MiB = 1 << 20
MAX_FRAME_BYTES = 16 * MiB        # runtime.framing.MAX_FRAME_BYTES, the kernel's kMaxFrameBytes
DECLARED = 240 * MiB
SLACK = 8 * MiB


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def greeting(mechanism=b"CURVE"):
    """A ZMTP 3.0 greeting: signature, version 3.0, mechanism, as-server 0, filler."""
    return (b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + mechanism.ljust(20, b"\x00")
            + b"\x00" + b"\x00" * 31)


class RssPeak(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, rss_bytes(pid), threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            self.done.wait(0.01)

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def stream_without_key(address, pid, declared=DECLARED, timeout=20.0):
    """Greet `address` as a keyless CURVE client, declare a `declared`-byte frame and stream
    up to that many bytes until the peer closes; (bytes sent, RSS growth of `pid`)."""
    host, port = parse_address(address)[0][len("tcp://"):].rsplit(":", 1)
    before = rss_bytes(pid)
    peak = RssPeak(pid)
    peak.start()
    sent = 0
    s = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        s.sendall(greeting())
        s.recv(64)                                        # the server's greeting (or less)
        # a long frame (flags 0x02) of `declared` bytes, where the handshake's HELLO belongs
        s.sendall(b"\x02" + struct.pack(">Q", declared))
        chunk = b"\x00" * MiB
        deadline = time.monotonic() + timeout
        while sent < declared and time.monotonic() < deadline:
            try:
                sent += s.send(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            except socket.timeout:
                break
    finally:
        s.close()
        time.sleep(0.2)                                   # the last RSS samples
        growth = peak.stop() - before
    return sent, growth


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = cloudburst.Client(cluster.scheduler_addresses[0], timeout=60, auth=cluster.client_auth)
    c.register(lambda lib, x: x + 1, "inc")
    yield c
    c.close()


def test_the_frame_limit_is_16_mib():
    from runtime import framing, sockets
    from scheduler.config import SchedulerConfig
    assert framing.MAX_FRAME_BYTES == sockets.DEFAULT_MAX_FRAME_BYTES == MAX_FRAME_BYTES
    kvs = "tcp://127.0.0.1:1"
    assert SchedulerConfig(kvs_address=kvs).max_frame_bytes == MAX_FRAME_BYTES
    with pytest.raises(ValueError, match="max_frame_bytes"):
        SchedulerConfig(kvs_address=kvs, max_frame_bytes=MAX_FRAME_BYTES + 1)


@pytest.mark.parametrize("sizes", [[0], [5, 0], [1 << 20], ["P-1", "P", "P+1", 7],
                                   ["2P", 0, "3P+5"]])
def test_large_frames_travel_in_parts_under_the_limit_and_are_joined_again(sizes):
    from runtime.framing import PART_BYTES, split, unsplit
    n = {"P-1": PART_BYTES - 1, "P": PART_BYTES, "P+1": PART_BYTES + 1, "2P": 2 * PART_BYTES,
         "3P+5": 3 * PART_BYTES + 5}
    logical = [bytes([i + 1]) * n.get(size, size) for i, size in enumerate(sizes)]
    wire = [part for frame in logical for part in split(frame)]
    assert all(len(part) < MAX_FRAME_BYTES for part in wire)
    assert [bytes(f) for f in unsplit(wire)] == logical


def test_a_keyless_240_mib_frame_costs_a_scheduler_no_memory(cluster, client):
    pid = cluster._schedulers[0].pid
    sent, growth = stream_without_key(cluster.scheduler_addresses[0], pid)
    assert growth < MAX_FRAME_BYTES + SLACK, \
        f"the scheduler grew by {growth / MiB:.0f} MiB ({sent / MiB:.0f} MiB streamed)"
    assert sent < DECLARED                                   # it hung up on us
    assert client.call("inc", 1).get(timeout=30) == 2


# 240 MiB as in the scheduler's case, and 64 MiB: under the kernel's old per-frame limit
# (max_value_bytes + 8 MiB), which is what let a keyless peer fill a worker's memory.
@pytest.mark.parametrize("declared", [DECLARED, 64 * MiB], ids=["240MiB", "64MiB"])
def test_a_keyless_large_frame_costs_a_kvs_worker_no_memory(cluster, declared):
    kvs = cluster.kvs
    node = kvs.node_ids[0]
    pid = kvs._node(node).pid
    sent, growth = stream_without_key(kvs.worker_addresses(node)[0], pid, declared)
    assert growth < MAX_FRAME_BYTES + SLACK, \
        f"the KVS node grew by {growth / MiB:.0f} MiB ({sent / MiB:.0f} MiB streamed)"
    assert sent < declared
    with kvs.client(timeout=10) as c:
        c.put("after-the-stream", b"v")
        assert c.get("after-the-stream") == b"v"


def test_a_64_mib_value_round_trips_through_the_kvs(cluster):
    value = bytes(range(256)) * ((64 * MiB - 1024) // 256)   # the lattice adds a few bytes
    with cluster.kvs.client(timeout=30) as c:
        c.put("big", value)
        assert c.get("big") == value


@pytest.mark.slow
def test_a_call_with_a_40_mib_argument_and_result_completes(client):
    client.register(lambda lib, data: data[::-1], "reverse")
    data = bytes(range(256)) * (40 * MiB // 256)
    assert client.call("reverse", data).get(timeout=60) == data[::-1]


def test_a_function_reads_a_40_mib_value_through_its_node_cache(client):
    data = bytes(range(256)) * (40 * MiB // 256)
    client.put("big-object", data)
    client.register(lambda lib, key: (len(lib.get(key)), lib.get(key)[-3:]), "measure")
    assert client.call("measure", "big-object").get(timeout=60) == (len(data), data[-3:])
