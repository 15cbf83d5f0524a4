"""Every socket cache is bounded and every address is checked (issue 11, "Bounded everything").

Unit tests of `runtime.sockets.PushCache`, then real processes: thousands of requests, each
naming a different response address, to a KVS worker and to a scheduler leave their open
descriptors bounded, and both still answer. Each test is bounded in time (well under 30 s).
"""
import logging
import os
import time
import uuid

import pytest
import zmq

import anna_core
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import KeyPair, format_address
from runtime.framing import encode
from runtime.sockets import PushCache, bind_pull
from peers import Peer
from waiting import poll_until

# Valid addresses nobody listens on: our services bind 127.0.0.1 only, so 127.0.0.2 refuses.
def nowhere(i):
    return f"tcp://127.0.0.2:{20000 + i}"


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---- PushCache (unit) ----

def test_push_cache_closes_the_least_recently_used_socket_beyond_its_maximum():
    ctx = zmq.Context()
    pull, address = bind_pull(ctx)
    push = PushCache(ctx, linger_ms=0, max_sockets=4)
    try:
        for i in range(50):
            push.send_frame(nowhere(i), b"x")
            push.send_frame(address, b"keep")      # used every time: never the LRU
        assert len(push) == 4
        assert push.evictions == 47
        got = [pull.recv() for _ in range(50)]
        assert got == [b"keep"] * 50
    finally:
        push.close()
        pull.close(0)
        ctx.term()


def test_caches_of_one_context_share_its_socket_budget():
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 160)            # before the first socket: a budget of 32
    caches = [PushCache(ctx, linger_ms=0, max_sockets=1000) for _ in range(3)]
    try:
        for i in range(300):
            assert caches[i % 3].send_frame(nowhere(i), b"x")
        assert sum(len(c) for c in caches) <= 160 - 128
    finally:
        for c in caches:
            c.close()
        ctx.term()


@pytest.mark.parametrize("address", ["garbage", "", "127.0.0.1:5", "tcp://host", "tcp://h:0",
                                     "tcp://h:99999", "tcp://a b:1", "ipc://", "x" * 5000,
                                     "tcp://127.0.0.1:5\n"])
def test_a_malformed_address_is_refused_logged_and_never_raised(address, caplog):
    ctx = zmq.Context()
    push = PushCache(ctx, linger_ms=0)
    try:
        with caplog.at_level(logging.WARNING, logger="runtime.sockets"):
            assert push.send(address, "reply", pb.Reply(request_id="r")) is False
            assert push.send_kind(address, "request", anna_pb2.KeyRequest()) is False
            assert push.send_frame(address, b"x") is False
            assert push.send_frames(address, [b"x"]) is False
            assert push.send_with_frames(address, "cache_reply", pb.CacheResponse(), [b"v"]) \
                is False
        assert len(push) == 0 and push.refused == 5
        assert repr(address)[:40] in caplog.text
    finally:
        push.close()
        ctx.term()


# ---- real processes ----

def _flood_kvs(cluster, worker, addresses, key):
    """GETs of `key` to `worker` as the cluster's client, each answered to one of
    `addresses` (given a key: an authenticated worker refuses keyless ones unopened)."""
    server_key = KeyPair.generate().public
    with Peer(cluster.client_auth) as peer:
        s = peer.dial(worker, linger_ms=2000)
        for i, response in enumerate(addresses):
            request = anna_pb2.KeyRequest(type=anna_pb2.GET,
                                          response_address=format_address(response, server_key),
                                          request_id=f"flood-{i}")
            request.tuples.add(key=key)
            s.send_multipart([b"request", request.SerializeToString()])


def test_a_kvs_worker_answering_thousands_of_response_addresses_keeps_its_descriptors():
    with anna_core.LocalCluster(memory_threads=1, nodes=1) as cluster:
        client = cluster.client(timeout=5.0)
        client.put("k", b"v")
        node = cluster.node_ids[0]
        pid = cluster._node(node).pid
        worker = cluster.worker_addresses(node)[0]
        before = open_fds(pid)
        start = time.monotonic()
        _flood_kvs(cluster, worker, [nowhere(i) for i in range(3000)], "k")
        # the flood is answered (the worker's stats count it) before we look at descriptors
        poll_until(lambda: client.get("k") == b"v" and open_fds(pid) < before + 2 * 1024 + 64,
                   20, "the worker answering with bounded descriptors")
        assert time.monotonic() - start < 25
        keys = [f"key-{i}" for i in range(50)]
        for k in keys:
            client.put(k, k.encode())
        assert [client.get(k) for k in keys] == [k.encode() for k in keys]
        assert open_fds(pid) < before + 2 * 1024 + 64
        client.close()


def test_a_kvs_worker_with_a_small_socket_maximum_stays_within_it():
    with anna_core.LocalCluster(memory_threads=1, nodes=1, max_push_sockets=32) as cluster:
        client = cluster.client(timeout=5.0)
        client.put("k", b"v")
        node = cluster.node_ids[0]
        pid = cluster._node(node).pid
        before = open_fds(pid)
        _flood_kvs(cluster, cluster.worker_addresses(node)[0], [nowhere(i) for i in range(2000)],
                   "k")
        # the last request of the flood is answered once this get is (one worker, in order);
        # at most 32 sockets open and 32 closed ones lingering (a descriptor or two each)
        assert client.get("k") == b"v"
        assert open_fds(pid) <= before + 4 * 32 + 16
        poll_until(lambda: open_fds(pid) <= before + 2 * 32 + 16, 5,
                   "the lingering sockets closing")
        client.close()


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_scheduler_serving_thousands_of_short_lived_clients_still_serves_a_new_one():
    import cloudburst
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
        address = cluster.scheduler_addresses[0]
        auth = cluster.client_auth
        pid = cluster._schedulers[0].pid
        first = cloudburst.Client(address, timeout=10, auth=auth)
        first.register(lambda lib, x: x + 1, "inc")
        assert first.call("inc", 1).get(timeout=10) == 2
        before = open_fds(pid)
        start = time.monotonic()
        # what 3,000 short-lived clients look like to a scheduler: each asks once, from its
        # own response address (with a key: an authenticated scheduler refuses keyless ones
        # without opening a socket), and is gone
        key = KeyPair.generate().public
        with Peer(auth) as peer:
            s = peer.dial(address, linger_ms=2000)
            for i in range(3000):
                s.send(encode("list", pb.NameRequest(request_id=f"r{i}",
                                                     response_address=format_address(
                                                         nowhere(i), key))))
        for _ in range(20):                       # and some real ones, opened and closed
            c = cloudburst.Client(address, timeout=10, auth=auth)
            assert "inc" in c.list().functions
            c.close()
        fresh = cloudburst.Client(address, timeout=10, auth=auth)
        assert fresh.call("inc", 41).get(timeout=10) == 42
        assert open_fds(pid) < before + 2 * 512 + 64
        assert time.monotonic() - start < 30
        fresh.close()
        first.close()


# ---- descriptor limits ----

def test_the_socket_budget_leaves_the_reserve_and_what_is_open():
    from hypothesis import given, settings, strategies as st
    from runtime.limits import FDS_PER_SOCKET, MIN_SOCKETS, reserve, socket_budget

    @settings(deadline=None)
    @given(st.integers(64, 1 << 20), st.integers(0, 1 << 20), st.integers(0, 1 << 20))
    def check(limit, in_use, claimed):
        n = socket_budget(limit, in_use, claimed)
        assert n >= MIN_SOCKETS
        if n > MIN_SOCKETS:
            assert in_use + claimed + reserve(limit) + FDS_PER_SOCKET * n <= limit
    check()
    assert socket_budget(1024, 40) == (1024 - 40 - 256) // 2


def test_the_ceiling_on_open_descriptors_stays_below_the_limit_with_room_left():
    from hypothesis import given, settings, strategies as st
    from runtime.limits import (FDS_PER_SOCKET, descriptor_ceiling, reserve, socket_budget,
                                sockets_openable)

    @settings(deadline=None)
    @given(st.integers(64, 1 << 20), st.integers(0, 1 << 20))
    def check(limit, open_now):
        n = sockets_openable(limit, open_now)
        assert n >= 0
        if n:
            assert open_now + FDS_PER_SOCKET * n <= descriptor_ceiling(limit) < limit
        # a cache holding its whole budget still has room for sockets being released
        budget = socket_budget(limit, 0)
        if budget * FDS_PER_SOCKET <= limit - reserve(limit):
            assert sockets_openable(limit, budget * FDS_PER_SOCKET) >= reserve(limit) // 4 // 2
    check()
    assert descriptor_ceiling(1024) == 1024 - 128


def test_descriptors_taken_after_the_cache_was_sized_do_not_run_the_process_out():
    """What the budget does not count (here pipes; in a flood, sockets closed but not yet
    released by ZeroMQ's threads) makes the cache close its own sockets and wait: the process
    stays about its ceiling, below its limit, and the sends go through
    (tests/descriptor_hog.py). Before the ceiling, the process ran out of descriptors and
    dropped its sends as "Too many open files"."""
    import json
    import resource
    import socket
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    listeners = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(4096)
            listeners.append(s)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(here), here]),
                   PORTS=",".join(str(s.getsockname()[1]) for s in listeners), HOG="170",
                   SENDS="400")
        out = subprocess.run([sys.executable, "-m", "descriptor_hog"], cwd=here, env=env,
                             capture_output=True, text=True, timeout=60,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                   (256, 256)))
    finally:
        for s in listeners:
            s.close()
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["limit"] == 256 and result["hog"] == 170
    # the ceiling is 256 less half the reserve (224); connections ZeroMQ's I/O thread opens
    # after the cache looked, and sockets it has not yet released, add some (up to 250 seen
    # on a loaded machine), never up to the limit: the process never ran out
    assert result["peak"] < result["limit"], result
    assert "Too many open files" not in out.stderr
    # a send is refused only when ZeroMQ did not release a closed socket within 0.5 s (a
    # heavily loaded machine): nearly all go through
    assert result["refused"] <= 400 // 10, (result, out.stderr[-1000:])


def test_the_kernel_sizes_its_socket_caches_to_fit_with_their_lingering_sockets():
    from hypothesis import given, settings, strategies as st
    import json
    from anna_core import _core

    @settings(deadline=None)
    @given(st.integers(1, 8), st.integers(1, 4096), st.integers(256, 1 << 20),
           st.integers(0, 4096))
    def check(threads, wanted, limit, in_use):
        config = json.dumps({"node_id": "n", "threads": threads, "max_push_sockets": wanted})
        fit = _core.push_sockets_for(config, limit, in_use)
        assert min(wanted, 16) <= fit <= wanted
        if fit > 16:
            assert threads * _core.push_cache_descriptors(fit) \
                <= limit - in_use - max(64, limit // 4)
    check()
    # open and lingering sockets, a mailbox and a connection each
    assert _core.push_cache_descriptors(100) == 2 * (100 + 25)


def test_a_service_raises_its_soft_descriptor_limit_to_the_hard_one():
    import resource
    import subprocess
    import sys
    code = ("from runtime.limits import raise_descriptor_limit; import resource; "
            "print(raise_descriptor_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, check=True,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                               (256, 1024)))
    assert out.stdout.split() == ["1024", "1024", "1024"]


def test_lingering_sockets_count_against_the_context_budget():
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, 160)            # before the first socket: a budget of 32
    cache = PushCache(ctx, linger_ms=2000, evict_linger_ms=2000, max_sockets=1000)
    before = open_fds(os.getpid())
    peak = before
    try:
        for i in range(300):
            assert cache.send_frame(nowhere(i), b"x")     # never refused by the context
            peak = max(peak, open_fds(os.getpid()))
        # the cache holds about 32 sockets, open and lingering, at any moment. ZeroMQ's reaper
        # thread frees a closed socket's descriptors asynchronously (late under load), so the
        # peak is only checked to be far below one socket per send, and the tight bound once
        # the reaper has caught up
        assert peak <= before + 300, f"{peak - before} descriptors for 300 sends"
        poll_until(lambda: open_fds(os.getpid()) <= before + 2 * 32 + 40, timeout=10,
                   what="the descriptors of the cache's 32 sockets at most")
    finally:
        cache.close()
        ctx.term()


@pytest.mark.slow
def test_a_flood_of_response_addresses_at_a_1024_descriptor_limit():
    """Routing, a KVS node and a scheduler started with a HARD limit of 1,024 descriptors
    (so raising the soft limit cannot hide anything) each get 3,000 requests naming distinct
    response addresses whose listeners never speak (tests/descriptor_flood.py). None runs out
    of descriptors, and each answers new peers throughout."""
    import json
    import resource
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(here), here]))
    out = subprocess.run([sys.executable, "-m", "descriptor_flood"], cwd=here, env=env,
                         capture_output=True, text=True, timeout=240,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                               (1024, 1024)))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["driver_limits"] == [1024, 1024]
    assert result["alive"] == {"routing": True, "kvs": True, "scheduler": True}
    assert result["emfile_lines"] == []
    for flood in result["floods"]:
        name = flood["service"]
        assert flood["limits"] == ["1024", "1024"], name
        assert flood["peak_fds"] < 1000, f"{name} reached {flood['peak_fds']} descriptors"
        assert flood["probe_failures"] == [], (name, flood["probe_failures"])
        assert len(flood["probe_seconds"]) >= 3, name          # probed during the flood
