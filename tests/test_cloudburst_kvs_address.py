"""`cloudburst.Client(kvs_address=...)`: a client outside the cluster's network reads and
writes objects through a KVS address it reaches, instead of the one the scheduler reports
(e.g. a Kubernetes Service name that only cluster DNS resolves; scripts/k8s/real_e2e.py)."""
import socket

import pytest

import cloudburst
from anna_core.errors import Timeout


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as c:
        yield c


def test_default_is_the_schedulers_kvs_address(cluster):
    c = cluster.client(timeout=20)
    assert c.kvs_address.startswith("tcp://127.0.0.1:")
    c.put("kvs-address/default", 1)
    assert c.get("kvs-address/default") == 1


def test_an_explicit_kvs_address_is_used_for_objects(cluster):
    reported = cluster.client(timeout=20).kvs_address
    # the same routing under another name: reachable, but not the string the scheduler gave
    other = reported.replace("tcp://127.0.0.1:", "tcp://localhost:")
    assert other != reported
    c = cluster.client(timeout=20, kvs_address=other)
    assert c.kvs_address == other
    c.put("kvs-address/explicit", {"a": 2})
    assert c.get("kvs-address/explicit") == {"a": 2}
    # a function reading it in the cluster sees the same object (one KVS)
    c.register(lambda lib, key: lib.get(key), "read")
    assert c.call("read", "kvs-address/explicit").get(timeout=20) == {"a": 2}


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_an_unreachable_kvs_address_fails_objects_only(cluster):
    """The override really is what objects go through: a dead port times out put, while
    calls (through the scheduler) still work."""
    reported = cluster.client(timeout=20).kvs_address
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    key = reported.split("#", 1)[1]
    c = cluster.client(timeout=20, kvs_address=f"tcp://127.0.0.1:{dead_port}#{key}")
    c.register(lambda lib, x: x + 1, "inc")
    assert c.call("inc", 1).get(timeout=20) == 2
    with pytest.raises(Timeout):
        c.put("kvs-address/dead", 3)
