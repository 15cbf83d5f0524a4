"""The Anna routing service: a thin event loop around `anna_core.membership`.

Membership state and every decision (placement from the kernel's `_core.ClusterMap`) live in
`membership.ClusterMembership`; this module receives, hands it each message and carries out
the `Effects` it returns (sends, forgotten sockets, metadata PUTs, logs).

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
from .membership import (REPLICATION_PREFIX, ClusterMembership, Effects, metadata_put,
                         replication_metadata_key)
from .wire import MonotoneClock

__all__ = ["RoutingService", "REPLICATION_PREFIX", "replication_metadata_key", "main"]

log = logging.getLogger("anna.routing")


class RoutingService:
    """Membership, key placement and replication overrides for one Anna cluster."""

    def __init__(self, config: RoutingConfig, context: Optional[zmq.Context] = None) -> None:
        self.config = config
        self._own_context = context is None
        self.context = context or zmq.Context()
        self.state = ClusterMembership(config.default_replication, config.vnodes)
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
        try:
            effects = self.state.handle(kind, payload)
        except Exception:  # never let one bad message kill the service
            log.exception("error handling a %r message; dropped", kind)
            return
        self.apply(effects)

    def apply(self, effects: Effects) -> None:
        """Carry out what the membership core decided: logs, forgotten peers, sends, PUTs."""
        for level, text in effects.log:
            log.log(level, text)
        for address in effects.forget:
            self.push.forget(address)
        for out in effects.send:
            if out.kind is None:
                sent = self.push.send_frame(out.address, out.message.SerializeToString())
            else:
                sent = self.push.send_kind(out.address, out.kind, out.message)
            if not sent:
                log.warning("%s to %s dropped (peer not keeping up)",
                            out.kind or type(out.message).__name__, out.address)
        for persist in effects.persist:
            self._request_seq += 1
            request = metadata_put(persist, self.clock.next(), f"routing-{self._request_seq}",
                                   self.answer_address)
            for address in persist.addresses:
                self.push.send_kind(address, "request", request)

    # ---- state (owned by the membership core) ------------------------------------------

    @property
    def cluster_map(self) -> "_core.ClusterMap":
        """The kernel's placement map of this cluster."""
        return self.state.cluster_map

    @property
    def version(self) -> int:
        """The current membership version."""
        return self.state.version

    @property
    def overrides(self) -> Dict[str, Replication]:
        """Replication overrides set through routing, by key."""
        return self.state.overrides

    def membership(self) -> "anna_pb2.Membership":
        """The full current membership, as broadcast to workers."""
        return self.state.membership()

    def worker_addresses(self) -> List[str]:
        """Every worker's request address in every tier."""
        return self.state.worker_addresses()

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
