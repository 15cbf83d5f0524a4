"""State that survives: `LocalCluster(data_dir=D)` keeps functions, DAGs, keys and objects
across a clean stop and across a kill -9 of every process of the cluster; a client of a
stopped or restarted cluster gets a typed error naming the address, or reconnects."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import cloudburst
from cloudburst.data_dir import DataDir, DataDirInUse
from runtime.auth import AuthConfig

from process_tree import descendants
from waiting import poll_until


def add_one(lib, x):
    return lib.get("base") + x


def times_two(lib, x):
    return 2 * x


def check_everything_there(client, base, objects, functions=("add_one",),
                           dags=("pipeline",)):
    """The functions, DAGs and objects written before a restart are there and work."""
    listing = client.list()
    assert set(functions) <= set(listing.functions), listing
    assert set(dags) <= set(listing.dags), listing
    for key, value in objects.items():
        assert client.get(key) == value, key
    assert client.call("add_one", 1).get(timeout=20) == base + 1
    assert client.call_dag("pipeline", {"add_one": [2]}).get(timeout=20) == base + 2


def test_data_dir_lock_and_shape(tmp_path):
    data = str(tmp_path / "data")
    first = DataDir(data)
    assert first.open({"kvs_nodes": 1, "kvs_threads": 1}, "local") is False
    try:
        with pytest.raises(DataDirInUse, match="in use"):
            DataDir(data).open({"kvs_nodes": 1, "kvs_threads": 1}, "local")
    finally:
        first.close()
    with pytest.raises(ValueError, match="kvs_threads"):
        DataDir(data).open({"kvs_nodes": 1, "kvs_threads": 2}, "local")
    again = DataDir(data)
    assert again.open({"kvs_nodes": 1, "kvs_threads": 1}, "local") is True
    again.close()
    assert oct(os.stat(os.path.join(data, "keys")).st_mode & 0o777) == "0o700"
    with pytest.raises(ValueError, match="not both"):
        cloudburst.LocalCluster(data_dir=data, key_dir=os.path.join(data, "keys"))


@pytest.mark.slow
def test_client_of_a_stopped_or_restarted_cluster_gets_a_typed_error_naming_it(tmp_path):
    with cloudburst.LocalCluster(executors_per_node=1) as cluster:
        client = cloudburst.Client(cluster.address, timeout=10, auth=cluster.client_auth,
                                   failover_timeout=1.0)
        client.put("k", 1)
        client.register(times_two, "times_two")
        address = cluster.address
    try:      # the cluster's temporary key directory is gone with it
        assert not os.path.exists(cluster.key_dir)
        for attempt in (lambda: client.put("k", 2), lambda: client.get("k"),
                        lambda: client.call("times_two", 1).get()):
            started = time.monotonic()
            with pytest.raises(cloudburst.SchedulerUnavailable) as failed:
                attempt()
            assert address in str(failed.value)
            assert time.monotonic() - started < 4.0
        # a new cluster on the same port has new keys: the old client is told so at once,
        # naming the scheduler, instead of waiting on the old KVS address
        port = int(address.split("#")[0].rsplit(":", 1)[1])
        with cloudburst.LocalCluster(executors_per_node=1, port=port):
            started = time.monotonic()
            with pytest.raises(cloudburst.AuthenticationError) as failed:
                client.put("k", 3)
            assert f"127.0.0.1:{port}" in str(failed.value)
            assert time.monotonic() - started < 4.0
    finally:
        client.close()


_WRITER = textwrap.dedent("""
    import json, sys, time
    import cloudburst
    sys.path.insert(0, {tests!r})
    from test_persistence import check_everything_there, times_two
    cluster = cloudburst.LocalCluster(executors_per_node=1, data_dir={data!r}).start()
    c = cluster.client()
    check_everything_there(c, 40, {{"base": 40}})      # the clean stop kept it all
    c.put("base", 100)
    for i in range(50):
        c.put(f"obj{{i}}", i * i)
    c.register(times_two, "times_two")
    c.register_dag("doubling", ["times_two"])
    print(json.dumps({{"acked": True}}), flush=True)
    time.sleep(600)
""")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.slow
def test_restart_keeps_state_after_a_clean_stop_and_after_kill9_of_every_process(tmp_path):
    data = str(tmp_path / "data")
    # run 1: write, then stop cleanly; a client of ours outlives it
    with cloudburst.LocalCluster(executors_per_node=1, data_dir=data) as cluster:
        key_dir, address = cluster.key_dir, cluster.address
        c = cluster.client()
        c.put("base", 40)
        c.register(add_one, "add_one")
        c.register_dag("pipeline", ["add_one"])
        assert c.call("add_one", 1).get(timeout=20) == 41
        old = cloudburst.Client(address, timeout=10, auth=AuthConfig(key_dir, "client:local"))
    assert key_dir == os.path.join(data, "keys")
    cluster_key = open(os.path.join(key_dir, "cluster.key")).read()
    port = int(address.split("#")[0].rsplit(":", 1)[1])
    try:
        # run 2, in a process of its own: read run 1's state, write more, then every process
        # of the cluster is frozen and SIGKILLed the moment the last put_all was acknowledged
        script = _WRITER.format(tests=os.path.dirname(__file__), data=data)
        writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            line = writer.stdout.readline()
            if not line:
                raise AssertionError(f"the writer failed: {writer.stderr.read()[-3000:]}")
            assert json.loads(line) == {"acked": True}, line
            tree = descendants(writer.pid)
            assert len(tree) >= 5, tree    # launcher, routing, KVS node, scheduler, node, ...
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in tree:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            writer.wait(10)
            poll_until(lambda: not any(_alive(p) for p in tree), timeout=10,
                       what="every process of the killed cluster to be gone")
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait(5)
        # run 3, on run 1's port: everything acknowledged is there, with the same keys, and
        # run 1's client reconnects (to the scheduler, and to the KVS's new address)
        with cloudburst.LocalCluster(executors_per_node=1, data_dir=data, port=port) as cluster:
            assert cluster.key_dir == key_dir and cluster.address == address
            assert open(os.path.join(key_dir, "cluster.key")).read() == cluster_key
            check_everything_there(cluster.client(), 100,
                                   {"base": 100, **{f"obj{i}": i * i for i in range(50)}},
                                   ("add_one", "times_two"), ("pipeline", "doubling"))
            assert cluster.client().call_dag("doubling", {"times_two": [21]}).get(
                timeout=20) == 42
            started = time.monotonic()
            assert old.get("obj7") == 49
            assert old.call("add_one", 1).get(timeout=20) == 101
            assert time.monotonic() - started < 5.0
    finally:
        old.close()
