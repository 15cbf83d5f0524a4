"""The KVS node process: the kernel's `_core.Node` plus the control plane that joins it.

Contract (DESIGN.md "Processes"):
1. Build `_core.Node(NodeConfig.to_json())` and `start()` it (the C++ worker threads bind
   their request sockets on tcp://ip:* and start serving).
2. Bind a PULL control socket on tcp://ip:*, send a `NodeJoin` (kind "join") with the
   workers' addresses to routing, and wait for routing's `Membership` ack on the control
   socket. The join is re-sent every `--join-retry` seconds until `--join-timeout`; a node
   that is not acknowledged in time stops and exits with status 3.
3. Report readiness: one `READY {"node_id", "tier", "worker_addresses",
   "membership_version"}` line on stdout and, with `--ready-file`, the same JSON in that file.
4. Wait for SIGTERM/SIGINT (or the parent's exit with `--parent-pid`), then `node.stop()`
   and exit 0. A node that cannot start (bad config, storage error) exits with status 2.

Run: `python -m anna_core.node --config '<NodeConfig JSON>' --routing tcp://...`.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from typing import Optional, Sequence

import zmq
from google.protobuf.message import DecodeError

from hydro_proto import anna_pb2

from runtime.framing import send_kind
from runtime.logs import configure_logging
from runtime.process import announce_ready, parent_gone
from runtime.sockets import bind_pull

from . import _core
from .config import NodeConfig, tier_number
from .errors import Timeout

__all__ = ["join_cluster", "main"]

log = logging.getLogger("anna.node")


def join_cluster(context: zmq.Context, config: NodeConfig, worker_addresses: Sequence[str],
                 routing_address: str, *, timeout: float = 20.0,
                 retry: float = 1.0) -> "anna_pb2.Membership":
    """Send NodeJoin to routing until it acknowledges with a Membership naming this node.

    Raises `Timeout` (stage "join ack from <routing>") when no ack arrives in `timeout` s.
    """
    control, control_address = bind_pull(context, config.ip)
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(routing_address)
    join = anna_pb2.NodeJoin(control_address=control_address)
    join.node.node_id = config.node_id
    join.node.tier = tier_number(config.tier)
    join.node.worker_addresses.extend(worker_addresses)
    deadline = time.monotonic() + timeout
    try:
        while True:
            send_kind(push, "join", join)
            resend_at = min(deadline, time.monotonic() + retry)
            while (remaining := resend_at - time.monotonic()) > 0:
                if not control.poll(int(remaining * 1000) + 1):
                    continue
                frame = control.recv()
                try:
                    membership = anna_pb2.Membership.FromString(frame)
                except DecodeError:
                    log.warning("unparsable join ack dropped")
                    continue
                if any(n.node_id == config.node_id for n in membership.nodes):
                    return membership
            if time.monotonic() >= deadline:
                raise Timeout(f"join ack from routing {routing_address}",
                              address=routing_address, seconds=timeout)
            log.info("no join ack yet from %s; re-sending", routing_address)
    finally:
        control.close(0)
        push.close(0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `python -m anna_core.node`."""
    p = argparse.ArgumentParser(prog="python -m anna_core.node", description="Anna KVS node")
    p.add_argument("--config", required=True,
                   help="NodeConfig as JSON, or @path to a file holding it")
    p.add_argument("--routing", required=True, help="routing address, e.g. tcp://127.0.0.1:5000")
    p.add_argument("--ready-file", help="also write the readiness JSON here")
    p.add_argument("--join-timeout", type=float, default=20.0)
    p.add_argument("--join-retry", type=float, default=1.0)
    p.add_argument("--parent-pid", type=int, help="stop when this parent process is gone")
    args = p.parse_args(argv)
    text = args.config
    if text.startswith("@"):
        with open(text[1:]) as f:
            text = f.read()
    config = NodeConfig.from_json(text)
    configure_logging(config.log_level, f"node[{config.node_id}]", family="anna")

    stopping = threading.Event()

    def on_signal(signum, _frame):
        log.info("signal %d: stopping", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        node = _core.Node(config.to_json())
        node.start()
    except (ValueError, RuntimeError) as e:
        print(f"node {config.node_id}: cannot start: {e}", file=sys.stderr, flush=True)
        return 2
    context = zmq.Context()
    try:
        addresses = list(node.worker_addresses())
        log.info("node %s started %d workers: %s", config.node_id, len(addresses), addresses)
        try:
            membership = join_cluster(context, config, addresses, args.routing,
                                      timeout=args.join_timeout, retry=args.join_retry)
        except Timeout as e:
            log.error("node %s: %s", config.node_id, e)
            print(f"node {config.node_id}: {e}", file=sys.stderr, flush=True)
            return 3
        announce_ready({"node_id": config.node_id, "tier": config.tier,
                        "worker_addresses": addresses,
                        "membership_version": membership.version}, args.ready_file)
        while not stopping.wait(0.2):
            if parent_gone(args.parent_pid):
                log.warning("parent process exited; node %s stops", config.node_id)
                break
        return 0
    finally:
        node.stop()
        context.term()
        log.info("node %s stopped", config.node_id)


if __name__ == "__main__":
    sys.exit(main())
