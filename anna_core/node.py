"""The KVS node process: the kernel's `_core.Node` plus the control plane around it.

Contract (DESIGN.md "Processes", "Routing and membership"):
1. Build `_core.Node(NodeConfig.to_json())` and `start()` it (the C++ worker threads bind
   their request sockets on tcp://ip:* and start serving). A node that cannot start (bad
   config, storage error) exits with status 2.
2. Bind a PULL control socket on tcp://ip:*, send a `NodeJoin` (kind "join") with the
   workers' addresses to every routing (`--routing`, repeatable or comma-separated), and
   wait for a `Membership` ack naming this node. The join is re-sent every `--join-retry`
   seconds until `--join-timeout`; a node not acknowledged in time exits with status 3.
3. Report readiness: one `READY {"node_id", "tier", "worker_addresses",
   "membership_version", "control_address"}` line on stdout and, with `--ready-file`, the
   same JSON in that file. Then heartbeat every routing every `--heartbeat-period` seconds
   (node_control.Heartbeater).
4. SIGTERM: graceful leave (node_control.leave_cluster): stop heartbeating, `NodeLeave` to
   every routing, wait for the acks and for the workers to hand every key and subscription
   to its new owners, bounded by `--leave-timeout`; then stop the node. Exit 0 when the
   hand-off completed, 4 when it timed out (an ERROR says how many keys were pending),
   5 when no routing acknowledged the leave.
   With `--report-period T`, a reporter thread adds the workers' statistics to the KVS once
   per period (node_reporting.NodeReporter) from readiness until the leave starts.
   SIGINT, or the parent's exit with `--parent-pid`: stop at once without leaving (the
   cluster's failure detector removes the node); exit 0. SIGKILL skips everything.
5. Authentication (`NodeConfig.key_dir` set; DESIGN.md "Authentication"): the process loads
   the cluster's keys from `key_dir` (`runtime.auth.AuthConfig(key_dir)`; a missing or bad
   key file exits 2 naming it) and hands the key material to the kernel in-process
   (`NodeConfig.kernel_json(credentials)`), so no key is ever on a command line. Its own
   sockets use the same credentials: the control socket and the leave's ack sockets are CURVE
   servers admitting only cluster keys, and the pushes to routing are CURVE clients, so every
   `--routing` address must carry its server key (`#k=<hex>`; exit 2 otherwise).

6. Descriptors: the process raises its soft descriptor limit to the hard one before anything
   else (`runtime.limits`); the kernel sizes its workers' socket caches from what is left,
   and the process' own socket caches share what the kernel does not claim.

7. Configuration: one `NodeConfig` (anna_core/config.py), read with `--config PATH|JSON`
   (`runtime.config`); every field is also a flag that overrides it (`--routing`,
   `--leave-timeout`, ...), so the options named above are NodeConfig fields. A bad or
   missing field exits 2 with one line naming it.

Run: `python -m anna_core.node --config node.json [--routing tcp://... ...] [--ready-file F]`.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import List, Optional, Sequence, Tuple

import zmq

from runtime.auth import AuthConfig, KeyFileError, Security, credentials_of, parse_address
from runtime.config import ConfigError, parse_config, role_parser
from runtime.limits import claim_descriptors, raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.process import announce_ready, parent_gone
from runtime.sockets import bind_pull

from . import _core
from .client import routing_addresses
from .config import NodeConfig
from .errors import Timeout
from .node_control import Heartbeater, join_cluster, leave_cluster
from .node_reporting import NodeReporter

__all__ = ["join_cluster", "main"]

log = logging.getLogger("anna.node")


def parse_args(argv: Optional[Sequence[str]] = None) -> Tuple[NodeConfig, argparse.Namespace]:
    """The node's configuration (`--config PATH|JSON`, every NodeConfig field a flag over
    it) and the remaining options (`--ready-file`); a bad field exits 2 naming it."""
    p = role_parser(NodeConfig, "python -m anna_core.node", "Anna KVS node.")
    p.add_argument("--ready-file", help="also write the readiness JSON here")
    config, args = parse_config(p, NodeConfig, argv)
    if not config.routing:
        p.error(str(ConfigError(NodeConfig.ROLE, "routing", "give at least one routing "
                                "address (--routing, or \"routing\" in --config)")))
    config.routing = routing_addresses(config.routing)
    return config, args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `python -m anna_core.node`."""
    config, args = parse_args(argv)
    routing: List[str] = config.routing
    configure_logging(config.log_level, f"node[{config.node_id}]", family="anna")
    raise_descriptor_limit()

    stopping = threading.Event()
    how = {"leave": False}

    def on_signal(signum, _frame):
        how["leave"] = signum == signal.SIGTERM
        log.info("signal %d: %s", signum, "leaving the cluster" if how["leave"] else "stopping")
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    context = zmq.Context()
    security: Optional[Security] = None
    try:
        if config.key_dir is not None:
            security = Security.start(context, AuthConfig(config.key_dir))
        auth = credentials_of(security)
        unkeyed = [r for r in routing if auth is not None and parse_address(r)[1] is None]
        if unkeyed:
            raise ValueError(f"authentication is on (key_dir) but the routing address(es) "
                             f"{', '.join(unkeyed)} carry no server key (#k=...)")
        node = _core.Node(config.kernel_json(auth))
        node.start()
        # the kernel's socket caches are sized to fit the descriptor limit; what they may
        # hold is not the Python sockets' to use
        claim_descriptors(node.cache_descriptors)
    except (ValueError, RuntimeError, KeyFileError) as e:
        print(f"node {config.node_id}: cannot start: {e}", file=sys.stderr, flush=True)
        if security is not None:
            security.stop()
        context.term()
        return 2
    control, control_address = bind_pull(context, config.ip, auth=auth)
    heartbeater: Optional[Heartbeater] = None
    reporter: Optional[NodeReporter] = None
    try:
        addresses = list(node.worker_addresses())
        log.info("node %s started %d workers: %s", config.node_id, len(addresses), addresses)
        try:
            membership = join_cluster(context, config, addresses, routing, control,
                                      control_address, timeout=config.join_timeout,
                                      retry=config.join_retry, auth=auth)
        except Timeout as e:
            log.error("node %s: %s", config.node_id, e)
            print(f"node {config.node_id}: {e}", file=sys.stderr, flush=True)
            return 3
        heartbeater = Heartbeater(context, config, addresses, routing, control_address,
                                  node.stats, period=config.heartbeat_period, auth=auth).start()
        announce_ready({"node_id": config.node_id, "tier": config.tier,
                        "worker_addresses": addresses, "control_address": control_address,
                        "membership_version": membership.version}, args.ready_file)
        if config.report_period is not None:
            reporter = NodeReporter(node, config.node_id, config.tier, routing,
                                    config.report_period, ip=config.ip,
                                    auth=AuthConfig(config.key_dir) if config.key_dir else None
                                    ).start()
        while not stopping.wait(0.2):
            while control.poll(0):
                control.recv()   # late join acks and heartbeat admissions: nothing to do
            if parent_gone(config.parent_pid):
                log.warning("parent process exited; node %s stops", config.node_id)
                break
        heartbeater.stop()
        if reporter is not None:
            reporter.stop()   # its report PUTs would race the hand-off
        if how["leave"]:
            outcome = leave_cluster(context, config, routing, node.stats,
                                    timeout=config.leave_timeout, retry=min(config.join_retry, 0.5),
                                    ack_grace=config.heartbeat_period, auth=auth,
                                    worker_addresses=addresses)
            if outcome.ok:
                log.info("%s", outcome.message)
            else:
                log.error("%s", outcome.message)
                print(outcome.message, file=sys.stderr, flush=True)
            return outcome.status
        return 0
    finally:
        if heartbeater is not None:
            heartbeater.stop()
        if reporter is not None:
            reporter.stop()
        node.stop()
        control.close(0)
        if security is not None:
            security.stop()
        context.term()
        log.info("node %s stopped", config.node_id)


if __name__ == "__main__":
    sys.exit(main())
