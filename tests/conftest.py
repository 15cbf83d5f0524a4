"""Shared test fixtures: raw pyzmq access to Anna workers, bypassing the client."""
import uuid

import pytest
import zmq

from anna_core import _core
from hydro_proto import anna_pb2
from runtime.auth import AuthConfig, Security
from runtime.sockets import PushCache, bind_pull

TIMEOUT_MS = 5000


class Raw:
    """Raw pyzmq access to a worker: [kind][payload] in, single-frame answers back.

    Speaks plainly until `as_cluster(key_dir)` gives it the cluster's own identity (every
    LocalCluster authenticates by default, and raw frames of every kind are the cluster's)."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.security = None
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.bind("tcp://127.0.0.1:*")
        self.address = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        self.push = PushCache(self.ctx, linger_ms=0)

    def as_cluster(self, key_dir):
        """Use the cluster identity of `key_dir` (None: stay plain); returns self."""
        if key_dir is None:
            return self
        self.push.close()
        self.pull.close(0)
        self.security = Security.start(self.ctx, AuthConfig(key_dir))
        self.pull, self.address = bind_pull(self.ctx, auth=self.security.credentials)
        self.push = PushCache(self.ctx, linger_ms=0, auth=self.security.credentials)
        return self

    def send(self, address, frames):
        assert self.push.send_frames(address, frames), f"could not send to {address}"

    def request(self, address, req_type, tuples):
        request = anna_pb2.KeyRequest(type=req_type, response_address=self.address,
                                      request_id=uuid.uuid4().hex)
        request.tuples.extend(tuples)
        self.send(address, [b"request", request.SerializeToString()])
        while True:
            assert self.pull.poll(TIMEOUT_MS), f"no answer from {address} within the deadline"
            response = anna_pb2.KeyResponse.FromString(self.pull.recv())
            if response.request_id == request.request_id:
                return response

    def put(self, address, key, lattice):
        """PUT `lattice` straight to one worker; the answer's KeyTuple."""
        return self.request(address, anna_pb2.PUT, [anna_pb2.KeyTuple(
            key=key, lattice_type=lattice.lattice_type, payload=lattice.serialize())]).tuples[0]

    def get(self, address, key):
        """GET from one worker; the lattice, or None if that replica answered with an error."""
        t = self.request(address, anna_pb2.GET, [anna_pb2.KeyTuple(key=key)]).tuples[0]
        if t.error != anna_pb2.NO_ERROR:
            return None
        return _core.deserialize(t.lattice_type, t.payload)

    def close(self):
        self.push.close()
        self.pull.close(0)
        if self.security is not None:
            self.security.stop()
        self.ctx.term()


@pytest.fixture
def raw():
    r = Raw()
    yield r
    r.close()


# ---- the Kubernetes fast tier: a control plane per tests/test_k8s_*.py module --------------
# (per module, not per session: in a whole-suite run it stops once its module is done)

K8S_REASON = ("the Kubernetes control plane is not built; run scripts/test_k8s.sh (builds it "
              "with scripts/k8s/build.sh, 10-20 min the first time on 2 cores, cached after) "
              "to run this tier")


@pytest.fixture(scope="module")
def cp():
    """A started local control plane (tests/k8s_controlplane.py: kube-apiserver with RBAC, kwok)."""
    import os
    k8s_controlplane = pytest.importorskip("k8s_controlplane")
    bin_dir = k8s_controlplane.find_binaries()
    if bin_dir is None:
        if os.environ.get("CLOUDBURST_K8S_REQUIRED"):
            pytest.fail(K8S_REASON)
        pytest.skip(K8S_REASON)
    plane = k8s_controlplane.ControlPlane(bin_dir)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def ns(cp):
    """A fresh namespace, deleted afterwards."""
    import uuid
    from kubernetes import client
    name = f"t-{uuid.uuid4().hex[:8]}"
    cp.create_namespace(name)
    yield name
    client.CoreV1Api(cp.api_client()).delete_namespace(name, _request_timeout=10)
