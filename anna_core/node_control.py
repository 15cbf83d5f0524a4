"""A KVS node's conversation with routing: join, heartbeats, graceful leave.

Contract (DESIGN.md "Routing and membership"; proto/anna.proto NodeJoin, NodeHeartbeat,
NodeLeave). Every routing address gets every message: several routing processes may serve
one cluster, and each runs the same membership core.
- `join_cluster` sends `NodeJoin` to every routing until one acknowledges with a
  `Membership` naming this node (re-sent every `retry` s; `Timeout` after `timeout` s).
- `Heartbeater` is a thread that sends `NodeHeartbeat` (node info, control address, the
  membership version every worker has applied and the hand-off backlog, from
  `worker_progress(node.stats())`) to every routing every `period` seconds. It owns its
  own sockets (ZMQ sockets are not shared between threads).
- `leave_cluster` is the graceful leave: `NodeLeave` to every routing (each on its own
  acknowledgement socket, re-sent every `retry` s), wait for each routing's `Membership`
  without this node (all of them, or the first plus `ack_grace` s), then wait until every
  worker has applied a version >= the highest acknowledged one, no worker's map names the
  node (a routing with a lagging view may re-broadcast one that does) and no hand-off is
  pending (orphans included: keys whose tier had no node in the map; an ack still naming
  the node is a refusal: routing refuses the last node of a tier). While it waits, the
  leave is re-sent every max(`retry`, 1) s and the newest acknowledging Membership above
  what the workers applied is passed on to them (`worker_addresses`), so one routing that
  knows where the keys go overtakes another whose view lags. Returns a `LeaveOutcome`; it
  never raises on a slow or silent cluster.
- `worker_progress` tolerates a kernel whose stats lack `membership_version` /
  `handoff_pending` (`supported` is then False and both read 0: unknown).
- Authentication: every function takes `auth` (the node's `runtime.auth.Credentials`, None
  when off). The pushes to routing then are CURVE clients of each routing's keyed address
  (`runtime.sockets.PushCache(auth=...)`), and the leave's acknowledgement sockets are CURVE
  servers admitting only cluster keys; the `control` socket given to `join_cluster` is bound
  the same way by the caller.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import zmq
from google.protobuf.message import DecodeError

from hydro_proto import anna_pb2

from runtime.auth import Credentials
from runtime.sockets import PushCache, bind_pull

from .config import NodeConfig, tier_number
from .errors import Timeout

__all__ = ["join_cluster", "Heartbeater", "leave_cluster", "LeaveOutcome", "WorkerProgress",
           "worker_progress", "node_info"]

log = logging.getLogger("anna.node")


class WorkerProgress(NamedTuple):
    """The node's workers at a glance: the membership version all have applied (their
    minimum), keys and subscriptions handed off but not yet acknowledged (their sum),
    whether the kernel reports both at all, and whether some worker's map in force still
    names this node (False when the kernel does not say)."""

    membership_version: int
    handoff_pending: int
    supported: bool
    member: bool = False


def worker_progress(stats: Sequence[Dict[str, Any]]) -> WorkerProgress:
    """Summarise `_core.Node.stats()` (one dict per worker)."""
    if not stats or not all("membership_version" in s and "handoff_pending" in s for s in stats):
        return WorkerProgress(0, 0, False)
    return WorkerProgress(min(int(s["membership_version"]) for s in stats),
                          sum(int(s["handoff_pending"]) for s in stats), True,
                          any(bool(s.get("member", False)) for s in stats))


def node_info(config: NodeConfig, worker_addresses: Sequence[str]) -> anna_pb2.NodeInfo:
    """This node as routing knows it."""
    return anna_pb2.NodeInfo(node_id=config.node_id, tier=tier_number(config.tier),
                             worker_addresses=list(worker_addresses))


def _pushes(context: zmq.Context, auth: Optional[Credentials]) -> PushCache:
    """Pushes to the routings: a short queue (stale control messages are worth nothing) and
    no linger (a stopping node must not wait on a dead routing)."""
    return PushCache(context, sndhwm=100, linger_ms=0, auth=auth)


def join_cluster(context: zmq.Context, config: NodeConfig, worker_addresses: Sequence[str],
                 routing_addresses: Sequence[str], control: zmq.Socket, control_address: str,
                 *, timeout: float = 20.0, retry: float = 1.0,
                 auth: Optional[Credentials] = None) -> anna_pb2.Membership:
    """Send NodeJoin to every routing until one acknowledges with a Membership naming this
    node; the acks are read on `control`. Raises `Timeout` after `timeout` s."""
    pushes = _pushes(context, auth)
    join = anna_pb2.NodeJoin(node=node_info(config, worker_addresses),
                             control_address=control_address)
    deadline = time.monotonic() + timeout
    try:
        while True:
            for address in routing_addresses:
                pushes.send_kind(address, "join", join)
            resend_at = min(deadline, time.monotonic() + retry)
            while (remaining := resend_at - time.monotonic()) > 0:
                if not control.poll(int(remaining * 1000) + 1):
                    continue
                try:
                    membership = anna_pb2.Membership.FromString(control.recv())
                except DecodeError:
                    log.warning("unparsable join ack dropped")
                    continue
                if any(n.node_id == config.node_id for n in membership.nodes):
                    return membership
            if time.monotonic() >= deadline:
                where = ", ".join(routing_addresses)
                raise Timeout(f"join ack from routing {where}", address=where, seconds=timeout)
            log.info("no join ack yet from %s; re-sending", ", ".join(routing_addresses))
    finally:
        pushes.close()


class Heartbeater:
    """Sends this node's heartbeat to every routing every `period` seconds, in a thread.

    `stats` is called for each heartbeat (normally `node.stats`); failures are logged, and
    the heartbeat is sent with version 0 (unknown) and no backlog.
    """

    def __init__(self, context: zmq.Context, config: NodeConfig,
                 worker_addresses: Sequence[str], routing_addresses: Sequence[str],
                 control_address: str, stats, period: float = 1.0,
                 auth: Optional[Credentials] = None) -> None:
        self._context = context
        self._auth = auth
        self._info = node_info(config, worker_addresses)
        self._routing = list(routing_addresses)
        self._control_address = control_address
        self._stats = stats
        self.period = period
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> "Heartbeater":
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for it (no heartbeat is sent after this returns)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0 + self.period)

    def _run(self) -> None:
        pushes = _pushes(self._context, self._auth)
        try:
            while not self._stop.is_set():
                try:
                    progress = worker_progress(self._stats())
                except Exception as e:  # a failing stats call must not stop the heartbeat
                    log.warning("worker stats unavailable for the heartbeat: %s", e)
                    progress = WorkerProgress(0, 0, False)
                heartbeat = anna_pb2.NodeHeartbeat(
                    node=self._info, control_address=self._control_address,
                    membership_version=progress.membership_version,
                    handoff_pending=progress.handoff_pending)
                for address in self._routing:
                    if not pushes.send_kind(address, "heartbeat", heartbeat):
                        log.warning("heartbeat to routing %s dropped (not accepting)", address)
                self.sent += 1
                self._stop.wait(self.period)
        finally:
            pushes.close()


class LeaveOutcome(NamedTuple):
    """How a graceful leave ended: `ok`, the exit status for the node process (0 when ok),
    and a sentence saying what happened."""

    ok: bool
    status: int
    message: str


LEAVE_NOT_ACKED = 5     # exit status: no routing acknowledged (or every one refused) the leave
LEAVE_TIMED_OUT = 4     # exit status: hand-off not acknowledged before the deadline


def leave_cluster(context: zmq.Context, config: NodeConfig, routing_addresses: Sequence[str],
                  stats, *, timeout: float = 30.0, retry: float = 0.5,
                  ack_grace: float = 1.0, poll: float = 0.05,
                  auth: Optional[Credentials] = None,
                  worker_addresses: Sequence[str] = ()) -> LeaveOutcome:
    """The graceful leave described in the module contract; `timeout` bounds all of it.
    `worker_addresses`: this node's workers, which get the newest acknowledging Membership
    while the hand-off waits (none: they rely on routing's broadcasts alone)."""
    started = time.monotonic()
    deadline = started + timeout
    node_id = config.node_id
    sockets: List[zmq.Socket] = []
    pushes = _pushes(context, auth)
    acked: Dict[str, int] = {}
    refused: set = set()
    try:
        leaves = {}
        for address in routing_addresses:
            socket, ack_address = bind_pull(context, config.ip, auth=auth)
            sockets.append(socket)
            leaves[address] = (socket, anna_pb2.NodeLeave(node_id=node_id,
                                                          control_address=ack_address))
        log.info("node %s leaving: NodeLeave sent to %d routing(s)", node_id, len(leaves))
        first_ack: Optional[float] = None
        resend_at = 0.0
        while len(acked) < len(leaves):
            now = time.monotonic()
            if now >= deadline or (first_ack is not None and now >= first_ack + ack_grace):
                break
            if not acked and refused == set(leaves):
                break
            if now >= resend_at:
                for address, (_, leave) in leaves.items():
                    if address not in acked:
                        pushes.send_kind(address, "leave", leave)
                resend_at = now + retry
            poller = zmq.Poller()
            for socket, _ in leaves.values():
                poller.register(socket, zmq.POLLIN)
            wait = min(resend_at, deadline) - now
            if first_ack is not None:
                wait = min(wait, first_ack + ack_grace - now)
            for address, (socket, _) in leaves.items():
                while socket.poll(0):
                    try:
                        membership = anna_pb2.Membership.FromString(socket.recv())
                    except DecodeError:
                        continue
                    if all(n.node_id != node_id for n in membership.nodes):
                        acked[address] = max(acked.get(address, 0), membership.version)
                        if first_ack is None:
                            first_ack = time.monotonic()
                    else:
                        refused.add(address)
            if len(acked) < len(leaves):
                poller.poll(max(1, int(wait * 1000)))
        if not acked and refused:
            return LeaveOutcome(False, LEAVE_NOT_ACKED,
                                f"node {node_id}: routing refused the leave (the last node of "
                                f"its tier: nobody could take its keys); stopping without "
                                f"hand-off")
        if not acked:
            return LeaveOutcome(False, LEAVE_NOT_ACKED,
                                f"node {node_id}: no routing acknowledged the leave within "
                                f"{timeout:g} s ({', '.join(routing_addresses)})")
        version = max(acked.values())
        missing = [a for a in routing_addresses if a not in acked]
        log.info("node %s: leave acknowledged by %d of %d routing(s) (membership version %d)%s;"
                 " waiting for the hand-off", node_id, len(acked), len(leaves), version,
                 f"; silent: {', '.join(missing)}" if missing else "")
        return _await_handoff(node_id, version, stats, deadline, timeout, poll,
                              _Resender(leaves, pushes, retry, worker_addresses))
    finally:
        for s in sockets:
            s.close(0)
        pushes.close()


class _Resender:
    """While the hand-off waits: the leave is sent again to every routing every max(`retry`,
    1) s,
    and an acknowledging Membership (one without this node) newer than what the workers
    applied is passed on to them. A routing whose view lagged (it re-broadcast a membership
    still naming the node, or one where the node's keys have no owner) is thus overtaken by
    the view of a routing that knows where they go."""

    def __init__(self, leaves, pushes: PushCache, retry: float,
                 worker_addresses: Sequence[str]) -> None:
        self._leaves = leaves
        self._pushes = pushes
        self._workers = list(worker_addresses)
        self._retry = max(retry, 1.0)   # routings log each repeated leave
        self._resend_at = time.monotonic() + self._retry
        self.newest: Optional[anna_pb2.Membership] = None

    def step(self, node_id: str, applied: int) -> None:
        """Send again when due; read acks; pass the newest on when it is above `applied`."""
        now = time.monotonic()
        if now >= self._resend_at:
            for address, (_, leave) in self._leaves.items():
                self._pushes.send_kind(address, "leave", leave)
            self._resend_at = now + self._retry
        for socket, _ in self._leaves.values():
            while socket.poll(0):
                try:
                    membership = anna_pb2.Membership.FromString(socket.recv())
                except DecodeError:
                    continue
                if all(n.node_id != node_id for n in membership.nodes) and (
                        self.newest is None or membership.version > self.newest.version):
                    self.newest = membership
        if self.newest is not None and self.newest.version > applied and self._workers:
            log.info("node %s leaving: its workers are at version %d; passing on routing's "
                     "acknowledgement at version %d", node_id, applied, self.newest.version)
            for address in self._workers:
                self._pushes.send_kind(address, "membership", self.newest)
            self.newest = None


def _await_handoff(node_id: str, version: int, stats, deadline: float, timeout: float,
                   poll: float, resender: _Resender) -> LeaveOutcome:
    """Wait until every worker applied `version`, no worker's map names this node any more,
    and nothing is left to hand off."""
    report_at = time.monotonic() + 1.0
    progress = worker_progress(stats())
    while True:
        if not progress.supported:
            log.warning("node %s: the kernel reports no hand-off progress "
                        "(membership_version/handoff_pending); leaving without waiting", node_id)
            return LeaveOutcome(True, 0, f"node {node_id} left (hand-off not tracked)")
        if (progress.membership_version >= version and progress.handoff_pending == 0
                and not progress.member):
            return LeaveOutcome(True, 0, f"node {node_id} left: every worker applied "
                                         f"version >= {version} and handed everything off")
        now = time.monotonic()
        if now >= deadline:
            return LeaveOutcome(
                False, LEAVE_TIMED_OUT,
                f"node {node_id}: leave timed out after {timeout:g} s with "
                f"{progress.handoff_pending} keys/subscriptions still pending hand-off "
                f"(workers at membership version {progress.membership_version}, "
                f"needed {version}"
                f"{'; a routing still names the node' if progress.member else ''})")
        if now >= report_at:
            log.info("node %s leaving: %d keys/subscriptions pending hand-off, workers at "
                     "version %d of %d%s", node_id, progress.handoff_pending,
                     progress.membership_version, version,
                     " (their map still names the node)" if progress.member else "")
            report_at = now + 1.0
        resender.step(node_id, progress.membership_version)
        time.sleep(min(poll, max(0.0, deadline - now)))
        progress = worker_progress(stats())
