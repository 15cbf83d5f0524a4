"""An added executor node starts without a second interpreter start: its workers are forked
from the node after its imports and before it reads a key (executor/prefork.py), and a
`LocalCluster(standby_node=True)` keeps a spare node started ahead (cloudburst/standby.py).
Real processes; no timing is asserted (benchmarks/autoscaling/node_start.py measures it)."""
import glob
import os
import tempfile

import pytest

import anna_core
from faas.keys import worker_key
from cloudburst import LocalCluster
from cloudburst.faults import process_alive
from runtime.auth import AuthConfig
from waiting import poll_until


def busy_where(lib):
    import time
    time.sleep(0.2)            # the function's own work: it keeps its worker busy
    return lib.getid()


def ran_on(cb, cluster):
    """The workers a burst of calls ran on. Calls go back to the worker that ran the
    function last while it is free, so a burst that fills every worker's slots is what
    reaches a given worker."""
    burst = [cb.call("busy_where") for _ in range(4 * len(cluster.workers))]
    return {f.get(timeout=30) for f in burst}


def _stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


def _children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat(entry)[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError):
                continue
    return out


def _memory(pid):
    """Every private writable mapping of process `pid` (its heap, Python's arenas)."""
    out = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5].startswith("/")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                out.append(mem.read(end - start))
            except OSError:
                continue
    return b"".join(out)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(executor_nodes=1, executors_per_node=1, standby_node=True) as c:
        c.client().register(busy_where, "busy_where")
        yield c


def test_an_added_node_is_the_standby_and_its_workers_are_forked_children(cluster):
    node_id = cluster.add_executor_node()
    node_pid = cluster.node_pid(node_id)
    assert os.path.exists(os.path.join(cluster.log_dir, f"{node_id}.log"))
    assert b"--standby" in _cmdline(node_pid)
    workers = [w for w in cluster.workers if w["node_id"] == node_id]
    assert len(workers) == 1
    for w in workers:
        assert int(_stat(w["pid"])[1]) == node_pid           # the node's own children
        assert b"executor.worker" not in _cmdline(w["pid"])  # forked, not a new interpreter
    # it serves: calls reach its workers
    cb = cluster.client()
    ids = {w["worker_id"] for w in workers}
    poll_until(lambda: ids & ran_on(cb, cluster), 30.0,
               f"a call running on the added node {node_id}")
    # and the next spare waits: it replaced the one taken
    poll_until(cluster.standby_pid, 10.0, "a new standby node")


@pytest.mark.skipif(os.geteuid() != 0, reason="reading another process' memory needs root")
def test_a_forked_worker_holds_no_cluster_secret(cluster):
    """A worker is forked before its node reads a key: the cluster's secret key is in the
    node's memory (the search finds it there) and in none of its forked workers'."""
    secret = AuthConfig(cluster.key_dir).load().keypair.secret
    added = cluster.add_executor_node()
    for name in ("node0", added):                                  # both ways
        node_pid = cluster.node_pid(name)
        assert secret in _memory(node_pid), "the search does not find the key where it is"
        workers = [w for w in cluster.workers if w["node_id"] == name]
        assert workers
        for w in workers:
            assert int(_stat(w["pid"])[1]) == node_pid
            assert secret not in _memory(w["pid"]), f"worker {w['worker_id']} holds the secret"


def test_a_forked_worker_that_dies_is_started_again_the_usual_way(cluster):
    worker = next(w for w in cluster.workers if w["node_id"] == "node1")   # forked (above)
    admin = anna_core.Client(cluster.kvs.routing_address, auth=cluster.cluster_auth)
    key = worker_key(worker["worker_id"])
    try:
        before = admin.get(key)
        cluster.kill_worker(worker["worker_id"])
        cb = cluster.client()
        poll_until(lambda: worker["worker_id"] in ran_on(cb, cluster), 30.0,
                   f"a call on the restarted worker {worker['worker_id']}")
        # its directory entry (for `lib.send`) names the new process' address
        poll_until(lambda: admin.get(key) != before, 10.0,
                   f"the restarted worker {worker['worker_id']}'s new address published")
    finally:
        admin.close()


def test_stopping_the_cluster_leaves_no_standby_or_forked_worker(cluster):
    """(Runs last: it stops the module's cluster.)"""
    spare_pid = poll_until(cluster.standby_pid, 10.0, "the standby node")
    forked = poll_until(lambda: _children(spare_pid), 30.0, "the standby's forked workers")
    pids = [spare_pid, *forked] + [w["pid"] for w in cluster.workers]
    ids = [w["worker_id"] for w in cluster.workers if w["node_id"] != "node1"]  # not killed
    cluster.stop()
    poll_until(lambda: not any(process_alive(p) for p in pids), 10.0,
               "every process of the cluster gone")
    # a worker's scratch directory (its TMPDIR) goes when it stops, forked or not (one
    # killed with SIGKILL, node1's above, leaves its own)
    left = [d for i in ids for d in glob.glob(os.path.join(tempfile.gettempdir(),
                                                           f"cloudburst-{i}-*"))]
    assert not left, left


def test_a_forked_child_gone_before_its_start_is_replaced_by_a_new_process(tmp_path):
    """If the waiting child died (killed, out of memory), the worker starts the usual way."""
    import signal
    import sys
    from executor.prefork import Preforked, PreforkedProcess
    from runtime.process import wait_all_ready
    pool = Preforked.fork(1)
    if not len(pool):
        pytest.skip("this test process runs threads: nothing is forked")
    spare = pool.take()
    os.kill(spare.child.pid, signal.SIGKILL)
    spare.child.wait(10.0)
    p = PreforkedProcess("fallback", [sys.executable, "-c", "from runtime.process import "
                                      "announce_ready; announce_ready({'started': 'anew'})"],
                         str(tmp_path), spare)
    p.spawn()
    wait_all_ready([p], 30.0)
    assert p.info == {"started": "anew"} and p.pid != spare.child.pid
    p.stop(5.0)
