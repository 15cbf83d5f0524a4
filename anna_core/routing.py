"""The Anna routing service: a thin event loop around the kernel's `_core.ClusterMap`.

Contract (DESIGN.md, proto/anna.proto, dissertation 3.2.5):
- One PULL socket bound on tcp://ip:port (port 0 = free port). Its address is reported as an
  `READY {"address": ...}` line on stdout and, with `--ready-file`, in that file.
- Messages are [kind][payload]:
  * "join" (NodeJoin): add (or replace, same node_id) the node in the ClusterMap, bump the
    membership version, send the full `Membership` as kind "membership" to every worker's
    request address, and the same `Membership` as a single frame to `control_address` (ack).
  * "address" (KeyAddressRequest): answer a `KeyAddressResponse` with each key's worker
    addresses from the ClusterMap (`all_tiers` honoured); error NO_NODES when a key has none.
  * "replicate" (SetReplication): update the ClusterMap, broadcast `ReplicationUpdate` (kind
    "replication") to every worker, persist each override in the KVS itself as the LWW
    metadata key `__anna__/replication/<key>` holding the serialized `anna.Replication`
    (dissertation 3.2.3: metadata is stored in the KVS), and answer a `KeyAddressResponse`
    with the keys' new addresses.
- Wrong frame counts, unknown kinds and unparsable payloads are logged and dropped; the loop
  never dies on input. Routing state is soft: it is rebuilt from node joins.

Run: `python -m anna_core.routing [--ip IP] [--port N] [--replication mg,ml,dg,dl] ...`.
"""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from typing import Dict, List, Optional, Sequence

import zmq
from google.protobuf.message import DecodeError

from hydro_proto import anna_pb2

from runtime.framing import FrameError, split_frames
from runtime.logs import configure_logging
from runtime.process import announce_ready, parent_gone
from runtime.sockets import PushCache, bind_pull

from . import _core
from .config import Replication, RoutingConfig
from .wire import MonotoneClock

__all__ = ["RoutingService", "REPLICATION_PREFIX", "replication_metadata_key", "main"]

REPLICATION_PREFIX = "__anna__/replication/"

log = logging.getLogger("anna.routing")


def replication_metadata_key(key: str) -> str:
    """The KVS key under which routing stores `key`'s replication override."""
    return REPLICATION_PREFIX + key


class RoutingService:
    """Membership, key placement and replication overrides for one Anna cluster."""

    def __init__(self, config: RoutingConfig, context: Optional[zmq.Context] = None) -> None:
        self.config = config
        self._own_context = context is None
        self.context = context or zmq.Context()
        self.cluster_map = _core.ClusterMap(
            default_replication=config.default_replication.as_tuple(), vnodes=config.vnodes)
        self.version = 0
        self.overrides: Dict[str, Replication] = {}
        self.socket, self.address = bind_pull(self.context, config.ip, config.port)
        # Answers of the KVS to routing's own metadata PUTs (single frames) land here.
        self.answers, self.answer_address = bind_pull(self.context, config.ip)
        self.push = PushCache(self.context, sndhwm=10000, linger_ms=0)
        self.clock = MonotoneClock()
        self._request_seq = 0
        self.stopping = threading.Event()

    # ---- event loop -------------------------------------------------------------------

    def serve(self, parent_pid: Optional[int] = None) -> None:
        """Handle messages until `stopping` is set (or the parent process is gone)."""
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self.answers, zmq.POLLIN)
        while not self.stopping.is_set():
            if parent_gone(parent_pid):
                log.warning("parent process exited; routing stops")
                break
            events = dict(poller.poll(100))
            if self.socket in events:
                for _ in range(1000):
                    try:
                        frames = self.socket.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.handle(frames)
            if self.answers in events:
                self._drain_answers()

    def handle(self, frames: Sequence[bytes]) -> None:
        """Dispatch one received message; malformed input is logged and dropped."""
        try:
            kind, payload = split_frames(frames)
        except FrameError as e:
            log.warning("dropped message: %s", e)
            return
        handler = {"join": self._on_join, "address": self._on_address,
                   "replicate": self._on_replicate}.get(kind)
        if handler is None:
            log.warning("dropped message of kind %r: routing does not handle it", kind)
            return
        try:
            handler(payload)
        except DecodeError as e:
            log.warning("dropped %r message: payload does not parse (%s)", kind, e)
        except Exception:  # never let one bad message kill the service
            log.exception("error handling a %r message; dropped", kind)

    # ---- handlers ---------------------------------------------------------------------

    def _on_join(self, payload: bytes) -> None:
        join = anna_pb2.NodeJoin.FromString(payload)
        node = join.node
        if not node.node_id or not node.worker_addresses:
            log.warning("dropped join without node_id or worker addresses: %r", join)
            return
        for node_id, _tier, addresses in self.cluster_map.nodes():
            if node_id == node.node_id:
                self.cluster_map.remove_node(node_id)
                for address in addresses:
                    if address not in node.worker_addresses:
                        self.push.forget(address)
        self.cluster_map.add_node(node.node_id, int(node.tier), list(node.worker_addresses))
        self.version += 1
        log.info("node %s (tier %d, %d workers) joined; membership version %d",
                 node.node_id, node.tier, len(node.worker_addresses), self.version)
        membership = self.membership()
        self._broadcast("membership", membership)
        if join.control_address:
            if not self.push.send_frame(join.control_address, membership.SerializeToString()):
                log.warning("could not ack join of %s at %s", node.node_id, join.control_address)

    def _on_address(self, payload: bytes) -> None:
        request = anna_pb2.KeyAddressRequest.FromString(payload)
        response = self._address_response(request.keys, request.all_tiers, request.request_id)
        self._answer(request.response_address, response)

    def _on_replicate(self, payload: bytes) -> None:
        request = anna_pb2.SetReplication.FromString(payload)
        update = anna_pb2.ReplicationUpdate()
        for kr in request.replications:
            replication = Replication.from_proto(kr.replication)
            self.cluster_map.set_replication(kr.key, replication.as_tuple())
            self.overrides[kr.key] = replication
            update.overrides.add(key=kr.key, replication=kr.replication)
            log.info("replication of %r set to %s", kr.key, replication.as_tuple())
        if update.overrides:
            self._broadcast("replication", update)
            for kr in update.overrides:
                self._persist(kr.key, kr.replication)
        response = self._address_response([kr.key for kr in request.replications], False,
                                          request.request_id)
        self._answer(request.response_address, response)

    # ---- helpers ----------------------------------------------------------------------

    def membership(self) -> "anna_pb2.Membership":
        """The full current membership, as broadcast to workers."""
        m = anna_pb2.Membership(version=self.version,
                                default_replication=self.config.default_replication.to_proto())
        if "vnodes" in anna_pb2.Membership.DESCRIPTOR.fields_by_name:
            m.vnodes = self.config.vnodes  # workers must place keys exactly as routing does
        for node_id, tier, addresses in self.cluster_map.nodes():
            m.nodes.add(node_id=node_id, tier=int(tier), worker_addresses=list(addresses))
        for key, replication in self.overrides.items():
            m.overrides.add(key=key, replication=replication.to_proto())
        return m

    def worker_addresses(self) -> List[str]:
        """Every worker's request address in every tier."""
        return [a for _node, _tier, addresses in self.cluster_map.nodes() for a in addresses]

    def _address_response(self, keys: Sequence[str], all_tiers: bool,
                          request_id: str) -> "anna_pb2.KeyAddressResponse":
        response = anna_pb2.KeyAddressResponse(request_id=request_id,
                                               membership_version=self.version)
        for key in keys:
            addresses = list(self.cluster_map.addresses(key, all_tiers))
            if not addresses:
                response.error = anna_pb2.NO_NODES
            response.addresses.add(key=key, addresses=addresses)
        return response

    def _answer(self, address: str, message) -> None:
        if not address:
            log.warning("request without response_address; no answer sent")
            return
        if not self.push.send_frame(address, message.SerializeToString()):
            log.warning("answer to %s dropped (peer not keeping up)", address)

    def _broadcast(self, kind: str, message) -> None:
        for address in self.worker_addresses():
            if not self.push.send_kind(address, kind, message):
                log.warning("%s to worker %s dropped (peer not keeping up)", kind, address)

    def _persist(self, key: str, replication) -> None:
        """Store the override as LWW metadata in the KVS (fire and forget; answers logged)."""
        meta_key = replication_metadata_key(key)
        addresses = list(self.cluster_map.addresses(meta_key, True))
        if not addresses:
            log.warning("no KVS node to store %s; override kept in routing only", meta_key)
            return
        value = _core.LWWLattice(self.clock.next(), replication.SerializeToString())
        self._request_seq += 1
        request = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address=self.answer_address,
                                      request_id=f"routing-{self._request_seq}")
        request.tuples.add(key=meta_key, lattice_type=value.lattice_type,
                           payload=value.serialize())
        for address in addresses:
            self.push.send_kind(address, "request", request)

    def _drain_answers(self) -> None:
        while True:
            try:
                frame = self.answers.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                response = anna_pb2.KeyResponse.FromString(frame)
            except DecodeError:
                log.warning("unparsable answer to a metadata PUT dropped")
                continue
            for t in response.tuples:
                if t.error != anna_pb2.NO_ERROR:
                    log.warning("metadata PUT of %r at %s failed: %s", t.key,
                                response.responder, anna_pb2.AnnaError.Name(t.error))

    def close(self) -> None:
        """Close every socket (and the context if this service created it)."""
        self.push.close()
        self.socket.close(0)
        self.answers.close(0)
        if self._own_context:
            self.context.term()


def _parse_replication(text: str) -> Replication:
    parts = [int(p) for p in text.split(",")]
    return Replication.coerce(parts)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `python -m anna_core.routing`."""
    p = argparse.ArgumentParser(prog="python -m anna_core.routing",
                                description="Anna routing service")
    p.add_argument("--config", help="RoutingConfig as JSON (overrides the other options)")
    p.add_argument("--ip", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = a free port")
    p.add_argument("--replication", type=_parse_replication, default=Replication(),
                   help="default replication vector mg,ml,dg,dl (default 1,1,0,1)")
    p.add_argument("--vnodes", type=int, default=64)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--ready-file", help="also write the bound address here, as JSON")
    p.add_argument("--parent-pid", type=int, help="exit when this parent process is gone")
    args = p.parse_args(argv)
    if args.config:
        d = json.loads(args.config)
        config = RoutingConfig(**d)
    else:
        config = RoutingConfig(ip=args.ip, port=args.port, default_replication=args.replication,
                               vnodes=args.vnodes, log_level=args.log_level)
    configure_logging(config.log_level, "routing", family="anna")
    service = RoutingService(config)

    def on_signal(signum, _frame):
        log.info("signal %d: stopping", signum)
        service.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    announce_ready({"address": service.address}, args.ready_file)
    log.info("routing listening on %s", service.address)
    try:
        service.serve(parent_pid=args.parent_pid)
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
