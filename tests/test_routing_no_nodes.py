"""A routing that knows no node (one made again, before the nodes' heartbeats reach it) does
not make a lookup fail while another routing knows the nodes: within its startup grace it
answers ROUTING_NOT_READY, which the client asks again or elsewhere until the operation's
deadline; after it, NO_NODES, and the client asks the routings that have not answered
NO_NODES first, even one that was silent lately, and raises NoNodes only once every routing
said it (real processes: an Anna cluster, and routings no node ever joined). A routing
restarted while a client writes loses none of its writes."""
import contextlib
import signal
import sys
import threading
import time

import pytest

import anna_core
from anna_core import NoNodes
from runtime.process import ManagedProcess, stop_all, wait_all_ready
from waiting import poll_until


@pytest.fixture(scope="module")
def cluster_and_empty_routing(tmp_path_factory):
    logs = tmp_path_factory.mktemp("routing-no-nodes")
    cluster = anna_core.LocalCluster(memory_threads=1, auth=False, log_dir=str(logs))
    cluster.start()
    empty = ManagedProcess("empty-routing", [sys.executable, "-m", "anna_core.routing"],
                           str(logs)).spawn()
    try:
        wait_all_ready([empty], 30)
        yield cluster, empty.info["address"]
    finally:
        stop_all([empty], 10)
        cluster.stop()


@contextlib.contextmanager
def routing_silent(cluster, seconds):
    """The cluster's routing stopped (SIGSTOP) now and going on `seconds` later (or when the
    block ends, whichever is first)."""
    cluster.signal_routing(0, signal.SIGSTOP)
    resume = threading.Timer(seconds, cluster.signal_routing, (0, signal.SIGCONT))
    resume.start()
    try:
        yield
    finally:
        resume.cancel()
        cluster.signal_routing(0, signal.SIGCONT)


def test_a_routing_without_nodes_does_not_fail_a_lookup_another_can_answer(
        cluster_and_empty_routing):
    cluster, empty = cluster_and_empty_routing
    client = anna_core.Client([empty, cluster.routing_address], timeout=5)
    try:
        # the routing that knows the nodes stays silent past the client's routing timeout
        # (1 s), so the client suspects it and turns to the one without nodes
        with routing_silent(cluster, 1.5):
            client.put("after-a-silence", b"stored")
        assert client.get("after-a-silence") == b"stored"
    finally:
        client.close()


def test_a_routing_not_ready_yet_outlasts_the_other_being_silent_past_the_patience(
        cluster_and_empty_routing, tmp_path):
    """The rolling upgrade's NoNodes: routing-0 made again (its nodes' heartbeats have not
    reached it: a routing no node joins, within its startup grace) while routing-1 stays
    silent for 4 s, longer than the NO_NODES patience (3 s). Before ROUTING_NOT_READY the
    first routing said NO_NODES and the lookup gave up with NoNodes after 3 s."""
    cluster, _empty = cluster_and_empty_routing
    made_again = ManagedProcess("routing-made-again", [
        sys.executable, "-m", "anna_core.routing", "--startup-grace", "60"],
        str(tmp_path)).spawn()
    client = None
    try:
        wait_all_ready([made_again], 30)
        client = anna_core.Client([made_again.info["address"], cluster.routing_address],
                                  timeout=5)
        start = time.monotonic()
        with routing_silent(cluster, 4.0):
            client.put("after-a-long-silence", b"stored")
        assert time.monotonic() - start >= 3.5       # it waited for routing-1 to answer
        assert client.get("after-a-long-silence") == b"stored"
    finally:
        if client is not None:
            client.close()
        stop_all([made_again], 10)


def test_a_routing_restarted_while_a_client_writes_loses_no_write(tmp_path):
    with anna_core.LocalCluster(memory_threads=1, auth=False, log_dir=str(tmp_path)) as cluster:
        client = cluster.client(timeout=5)
        stop = threading.Event()
        written, failures = [], []

        def write():
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    client.put(f"restart/{i}", str(i).encode())   # a new key: a lookup
                    written.append(i)
                except Exception as e:  # noqa: BLE001 - every failure is reported below
                    failures.append(f"put {i}: {type(e).__name__}: {e}")
        writer = threading.Thread(target=write)
        writer.start()
        try:
            poll_until(lambda: len(written) >= 20, 30, "20 writes before the restart")
            cluster.restart_routing(0)
            before = len(written)
            poll_until(lambda: len(written) >= before + 20, 60, "20 writes after the restart")
        finally:
            stop.set()
            writer.join(30)
        assert failures == []
        reader = cluster.client(timeout=5)
        try:
            for i in written[::10]:
                assert reader.get(f"restart/{i}") == str(i).encode()
        finally:
            reader.close()
            client.close()


def test_no_nodes_from_every_routing_fails_within_a_few_seconds(cluster_and_empty_routing):
    _cluster, empty = cluster_and_empty_routing
    client = anna_core.Client([empty], timeout=5)
    try:
        start = time.monotonic()
        with pytest.raises(NoNodes, match="no KVS node is up"):
            client.put("nowhere", b"x")
        # NO_NODES_PATIENCE routing timeouts (3 s), not the operation's deadline (15 s)
        assert time.monotonic() - start < 6
    finally:
        client.close()


def test_no_nodes_from_one_routing_and_silence_from_the_other_is_no_nodes(
        cluster_and_empty_routing):
    """A routing that never answers must not turn a lookup every reachable routing answers
    NO_NODES into a Timeout at the operation's deadline (15 s)."""
    _cluster, empty = cluster_and_empty_routing
    import socket
    with socket.socket() as s:          # a port nothing listens on: a silent routing
        s.bind(("127.0.0.1", 0))
        silent = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    client = anna_core.Client([empty, silent], timeout=5)
    try:
        start = time.monotonic()
        with pytest.raises(NoNodes, match="no KVS node is up"):
            client.put("nowhere-either", b"x")
        assert time.monotonic() - start < 8     # patience and one silent wait, not 15 s
    finally:
        client.close()
