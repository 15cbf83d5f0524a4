"""Client links when a worker is out of descriptors (anna_core/DESIGN.md "Client links").

A client's kernel completes a TCP connection into the worker's listen backlog whether or not
the worker can accept it. A worker at its descriptor limit cannot, so a request written on such
a connection would wait for its whole deadline. Covers, against a real node whose descriptor
limit is lowered under it (plain and secured links): a client that learned the worker's link
before the limit still gets every answer within its deadline (over ZeroMQ), because it writes
no request on a link the worker has not shown it serves, and the worker refuses the
connections it cannot accept instead of leaving them in its backlog.
"""
import os
import resource

import pytest

import anna_core
from anna_core import _core
from hydro_proto import anna_pb2
from runtime.auth import CLUSTER
from sealed_link import connect
from waiting import poll_until

REQUEST_ID = anna_pb2.KeyResponse.DESCRIPTOR.fields_by_name["request_id"].number


def advertised_link(cluster, key):
    """The link address the worker owning `key` advertises, read by a transport of its own."""
    keys = {}
    if cluster.client_auth is not None:
        c = cluster.client_auth.load()
        keys = dict(public_key=c.keypair.public, secret_key=c.keypair.secret,
                    cluster_keys=[k for k, r in c.allowed.items() if r == CLUSTER])
    t = _core.ClientTransport(**keys)
    try:
        worker = cluster.client().addresses(key)[0]
        r = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=t.address, request_id="a")
        r.tuples.add(key=key)
        raw = t.exchange(worker, "", r.SerializeToString(), "a", REQUEST_ID, 5.0)
        assert raw is not None, f"no answer from {worker}"
        link = anna_pb2.KeyResponse.FromString(raw).link_address
        assert link, "the worker advertises no link"
        return link
    finally:
        t.close()


@pytest.mark.parametrize("auth", [False, True], ids=["plain", "secured"])
def test_a_worker_out_of_descriptors_holds_no_request_on_a_link(auth):
    cluster = anna_core.LocalCluster(memory_threads=1, auth=auth, warn_auth_off=False,
                                     client_links=True)
    cluster.start()
    hogs = []
    try:
        link = advertised_link(cluster, "d")
        # A client whose sockets to the worker exist, and which has learned the worker's link
        # (the put's answer advertises it) but not connected it yet.
        client = cluster.client(timeout=1.0, retries=0)
        client.put("d", b"v")
        pid = cluster.node_pid("memory-0")
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 4, in_use + 4))
        for _ in range(20):                    # beyond what the node can accept
            hogs.append(connect(link))
        poll_until(lambda: "cannot accept client links" in cluster.log_tail("memory-0", 50),
                   timeout=10, what="the worker running out of descriptors for links")
        # Each within the client's 1 s deadline: none waits on a connection the worker
        # cannot accept (before, the first waited until its deadline and raised Timeout).
        for _ in range(5):
            assert client.get("d") == b"v"
        client.put("d", b"w")
        assert client.get("d") == b"w"
    finally:
        for h in hogs:
            h.close()
        cluster.stop()
