"""A node's graceful leave (`anna_core.node_control.leave_cluster`) against a routing whose
view lags: unit tests with a scripted routing and worker on loopback sockets (no cluster).

The leave is done only when the workers applied the acknowledged version, hand nothing off
any more AND no longer find their node in the map: a routing that still names the node may
re-broadcast a membership above the acknowledgement, and a worker that applied it holds its
keys again. The leaving node then sends the leave again and passes a newer acknowledgement
on to its workers.
"""
import threading

import zmq

from anna_core.config import NodeConfig
from anna_core.node_control import leave_cluster, worker_progress
from hydro_proto import anna_pb2
from runtime.sockets import bind_pull


class ScriptedRouting(threading.Thread):
    """Acknowledges each NodeLeave with a Membership without the node, one version higher
    each time (its view moves on: it re-broadcast above a rival)."""

    def __init__(self, context, first_version: int) -> None:
        super().__init__(daemon=True)
        self.socket, self.address = bind_pull(context)
        self.context = context
        self.version = first_version
        self.leaves = 0
        self.stop = threading.Event()

    def run(self) -> None:
        push = self.context.socket(zmq.PUSH)
        push.linger = 0
        try:
            while not self.stop.is_set():
                if not self.socket.poll(50):
                    continue
                kind, payload = self.socket.recv_multipart()
                if kind != b"leave":
                    continue
                leave = anna_pb2.NodeLeave.FromString(payload)
                self.leaves += 1
                ack = anna_pb2.Membership(version=self.version)
                ack.nodes.add(node_id="memory-1", tier=anna_pb2.MEMORY,
                              worker_addresses=["tcp://127.0.0.1:1"])
                self.version += 1
                push.connect(leave.control_address)
                push.send(ack.SerializeToString())
        finally:
            push.close(0)
            self.socket.close(0)


def test_the_leave_waits_while_the_map_names_the_node_and_passes_a_newer_ack_on():
    context = zmq.Context()
    routing = ScriptedRouting(context, first_version=5)
    routing.start()
    worker, worker_address = bind_pull(context)
    # The worker's map in force: version 6, re-broadcast by a lagging routing that still
    # names this node; nothing is pending (it holds its keys again).
    state = {"version": 6, "member": True, "forwarded": []}

    def stats():
        while worker.poll(0):
            kind, payload = worker.recv_multipart()
            assert kind == b"membership"
            m = anna_pb2.Membership.FromString(payload)
            state["forwarded"].append(m.version)
            if m.version >= state["version"]:
                state["version"] = m.version
                state["member"] = any(n.node_id == "memory-0" for n in m.nodes)
        return [{"membership_version": state["version"], "handoff_pending": 0,
                 "member": state["member"]}]

    config = NodeConfig(node_id="memory-0", tier="memory", routing=[routing.address])
    try:
        outcome = leave_cluster(context, config, [routing.address], stats, timeout=10.0,
                                retry=0.1, ack_grace=0.1, poll=0.02,
                                worker_addresses=[worker_address])
        assert outcome.ok and outcome.status == 0, outcome
        # It did not stop at the first ack (version 5 <= 6 applied, nothing pending): it
        # sent the leave again and passed the newer ack (7) on to its worker.
        assert routing.leaves >= 2 and state["forwarded"] and state["forwarded"][-1] >= 7
        assert not state["member"]
    finally:
        routing.stop.set()
        routing.join(5)
        worker.close(0)
        context.term()


def test_worker_progress_reports_whether_a_map_still_names_the_node():
    base = {"membership_version": 3, "handoff_pending": 0}
    assert worker_progress([dict(base, member=False), dict(base, member=True)]).member
    assert not worker_progress([dict(base, member=False)]).member
    assert not worker_progress([base]).member         # a kernel that does not say
    assert worker_progress([{"requests": 1}]).supported is False
