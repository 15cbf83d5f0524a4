"""Connections follow a stable host name to the address it has now.

In Kubernetes, routing and the schedulers are StatefulSet pods reached by stable names
(`anna-routing-0.anna-routing-pods`); a pod made again keeps its name and gets a new address,
while the old one vanishes without an answer (its network namespace is gone, SYNs to it are
dropped) and the cluster's DNS may still give it for a few seconds. ZeroMQ resolves the name
again at every connection attempt, but an attempt to the vanished address used to wait out the
kernel's SYN retries (about two minutes), so Anna nodes kept heartbeating a routing that was
not there (the new one knew no node) and clients reached neither scheduler once both had been
replaced.

Here the name moves between two loopback addresses (a private /etc/hosts for the sending
process only), and its old address becomes a black hole just as the sender reconnects: each of
the platform's connecting sockets (`tests/moving_name.py` names them) must reach the new
address within a few seconds of the name pointing there.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from anna_core import Client
from anna_core.config import NodeConfig, RoutingConfig
from anna_core.errors import NoNodes, Timeout

from moving_name import (KINDS, BlackHole, MovingName, can_move_names, in_namespace,
                         syn_sent_to)
from waiting import poll_until

pytestmark = pytest.mark.skipif(bool(can_move_names()), reason=can_move_names() or "-")

OLD, NEW = "127.0.0.2", "127.0.0.3"
NAME = "sched-0.moving.test"
# From the name pointing at the new address to a message arriving there: one given-up
# attempt (1 s) and a reconnect, with room for a loaded machine. Without the bound on
# connection attempts it takes about two minutes.
FOLLOW_WITHIN = 8.0


def _pull(context: zmq.Context, ip: str, port: int = 0) -> zmq.Socket:
    s = context.socket(zmq.PULL)
    s.setsockopt(zmq.LINGER, 0)
    s.bind(f"tcp://{ip}:{port}" if port else f"tcp://{ip}:*")
    return s


def _received(s: zmq.Socket):
    """Some message that arrived on `s`, or None."""
    return s.recv_multipart(zmq.NOBLOCK) if s.poll(0) else None


def _black_hole(ip: str, port: int):
    """A BlackHole at (ip, port), or None while the port is still bound (ZeroMQ closes a
    socket in its own thread)."""
    try:
        return BlackHole(ip, port)
    except OSError:
        return None


@pytest.mark.parametrize("kind", KINDS)
def test_a_connection_follows_its_name_to_a_new_address(kind, tmp_path):
    context = zmq.Context()
    old = _pull(context, OLD)
    port = int(old.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
    new = _pull(context, NEW, port)         # the same port, as a pod made again
    name = MovingName(tmp_path, NAME)
    name.point(OLD)
    here = str(Path(__file__).resolve().parent / "moving_name.py")
    sender = subprocess.Popen(in_namespace(name.path, [sys.executable, here, kind,
                                                        f"tcp://{NAME}:{port}"]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    hole = None
    try:
        poll_until(lambda: _received(old), 15, f"the {kind} sender reaching {NAME} at {OLD}")
        # the pod goes: its process first (the connection drops), then its address (SYNs to
        # it are dropped unanswered); the name still points there while the sender
        # reconnects, as a cluster's DNS does for a few seconds
        old.close()
        hole = poll_until(lambda: _black_hole(OLD, port), 5,
                          f"{OLD}:{port} free once the old socket closed")
        poll_until(lambda: syn_sent_to(OLD, port), 10,
                   f"the {kind} sender trying to reconnect to the vanished {OLD}:{port}")
        name.point(NEW)
        poll_until(lambda: _received(new), FOLLOW_WITHIN,
                   f"the {kind} sender following {NAME} to {NEW} (still trying {OLD}: "
                   f"{syn_sent_to(OLD, port)})")
    finally:
        sender.kill()
        out, err = sender.communicate(timeout=10)
        if hole is not None:
            hole.close()
        new.close()
        if not old.closed:
            old.close()
        context.term()
    assert b"SENDING" in out, err.decode(errors="replace")[-2000:]


def _routing(ip: str, port: int) -> subprocess.Popen:
    config = RoutingConfig(ip=ip, port=port, parent_pid=os.getpid())
    return subprocess.Popen([sys.executable, "-m", "anna_core.routing", "--config",
                             config.to_json()], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _serves(routing: str):
    """Addresses routing `routing` gives for a key (it knows a node), or None."""
    try:
        with Client(routing, timeout=0.5, retries=0) as kvs:
            return kvs.addresses("any-key", refresh=True)
    except (NoNodes, Timeout):
        return None


def test_a_routing_made_again_at_a_new_address_hears_its_nodes(tmp_path):
    """The real-cluster symptom: a routing pod made again (same name, new address) must hear
    the nodes' heartbeats, or it answers that no node is up and a node leaving meanwhile is
    unknown to it (its keys are not handed off)."""
    probe = _pull(zmq.Context.instance(), OLD)
    port = int(probe.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
    probe.close(0)
    name = MovingName(tmp_path, NAME)
    name.point(OLD)
    old = _routing(OLD, port)
    node_config = NodeConfig(node_id="mem-0", tier="memory", threads=1, ip="127.0.0.1",
                             pin_threads=False, routing=[f"tcp://{NAME}:{port}"],
                             parent_pid=os.getpid())
    node = subprocess.Popen(in_namespace(name.path, [sys.executable, "-m", "anna_core.node",
                                                     "--config", node_config.to_json()]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    new = hole = None
    try:
        poll_until(lambda: _serves(f"tcp://{OLD}:{port}"), 20, "the node joining routing")
        old.kill()                      # the routing pod is killed ...
        old.wait(10)
        hole = poll_until(lambda: _black_hole(OLD, port), 5, f"{OLD}:{port} free")
        poll_until(lambda: syn_sent_to(OLD, port), 10,
                   "the node's heartbeats trying the vanished routing address")
        name.point(NEW)                 # ... and made again, at a new address
        new = _routing(NEW, port)
        poll_until(lambda: _serves(f"tcp://{NEW}:{port}"), FOLLOW_WITHIN + 2,
                   "the new routing hearing the node's heartbeats")
    finally:
        for p in (node, old, new):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
        if hole is not None:
            hole.close()
