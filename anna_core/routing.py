"""The Anna routing service: a thin event loop around `anna_core.membership`.

Membership state and every decision (placement from the kernel's `_core.ClusterMap`) live in
`membership.ClusterMembership`; this module receives, hands it each message and carries out
the `Effects` it returns (sends, forgotten sockets, metadata PUTs, logs).

Contract (DESIGN.md, proto/anna.proto, dissertation 3.2.5-3.2.7):
- One PULL socket bound on tcp://ip:port (port 0 = free port). Its address is reported as an
  `READY {"address": ...}` line on stdout once bound. With `--ready-file`, the same JSON goes
  to that file once routing is *serving* (`ClusterMembership.serving`: it has a member and
  no recovery phase runs), so a Kubernetes readiness probe does not count a routing made
  again ready before the nodes' heartbeats gave it its membership back.
- The membership core is made with `started_at` = the process' start, so a routing made
  again answers lookups ROUTING_NOT_READY until it learns the membership (`startup_grace`,
  `ClusterMembership.learned`).
- Messages are [kind][payload]: "join" (NodeJoin), "leave" (NodeLeave), "heartbeat"
  (NodeHeartbeat), "address" (KeyAddressRequest), "replicate" (SetReplication), "members"
  (MembersRequest: the membership, for backups). What each
  does is `membership.ClusterMembership`'s contract; this loop stamps each with
  `time.monotonic()` and calls `tick(now)` at least every 100 ms (failure detection, end of
  the recovery phase).
- Replication overrides are persisted in the KVS itself (dissertation 3.2.3): the LWW key
  `__anna__/replication/<key>` holding the serialized `anna.Replication`, and the SetLattice
  index `__anna__/replication-index`. When the core asks (`Effects.load_overrides`: a
  restarted routing, or a fresh one getting its first node), a background thread reads the
  index and the overrides back through an `anna_core.Client` of this very routing (it follows
  the workers' WRONG_OWNER redirects while the ring is partial), retrying a few times, and the
  loop hands them to `overrides_loaded`. The core is only ever touched by the loop thread.
- With a key directory (`--key-dir`, RoutingConfig.key_dir) every socket is CURVE
  (runtime/auth.py): the request socket admits cluster and client keys, and a client may only
  send "address" lookups; any other kind from a client key is logged and dropped (counted in
  `dropped_for_role`).
- Wrong frame counts, unknown kinds and unparsable payloads are logged and dropped; the loop
  never dies on input. Routing state is soft: rebuilt from joins and heartbeats.

Run: `python -m anna_core.routing [--config PATH|JSON] [--ip IP] [--port N]
[--default-replication mg,ml,dg,dl] ...`: the configuration is a `RoutingConfig`
(`runtime.config`: every field is a flag that overrides the file's).
"""
from __future__ import annotations

import logging
import queue
import signal
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

import zmq
from google.protobuf.message import DecodeError

from hydro_proto import anna_pb2

from runtime.auth import AuthConfig, Security, credentials_of, may_send, role_of
from runtime.framing import FrameError, split_frames
from runtime.config import parse_config, role_parser
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.process import announce_ready, parent_gone, write_ready_file
from runtime.sockets import PushCache, bind_pull

from . import _core
from .config import Replication, RoutingConfig
from .client import Client
from .errors import AnnaError, KeyNotFound
from .membership import (REPLICATION_INDEX_KEY, REPLICATION_PREFIX, ClusterMembership, Effects,
                         loaded_overrides, metadata_put, replication_metadata_key)
from .wire import MonotoneClock

__all__ = ["RoutingService", "REPLICATION_PREFIX", "replication_metadata_key", "main"]

log = logging.getLogger("anna.routing")

TICK_SECONDS = 0.05          # the loop calls tick(now) at least this often (well under 100 ms)
LOAD_ATTEMPTS = 5            # tries to read the persisted overrides back, ...
LOAD_RETRY_SECONDS = 1.0     # ... this far apart
ROUTING_MAX_FRAME_BYTES = 16 << 20   # largest frame routing's request socket accepts
# What a client key may send routing: lookups. Joins, leaves, heartbeats and replication
# changes come from the cluster only (a forged join or replication change would misroute).
ROUTING_CLIENT_KINDS = frozenset({"address"})


class RoutingService:
    """Membership, key placement and replication overrides for one Anna cluster."""

    def __init__(self, config: RoutingConfig, context: Optional[zmq.Context] = None) -> None:
        self.config = config
        self._own_context = context is None
        self.context = context or zmq.Context()
        # Authentication (runtime/auth.py): started before any socket binds.
        self.security = Security.start(self.context, AuthConfig(config.key_dir)
                                       if config.key_dir else None)
        credentials = credentials_of(self.security)
        self.dropped_for_role = 0      # cluster-only messages a client key sent (dropped)
        self._role_warned = 0.0
        self.state = ClusterMembership(config.default_replication, config.vnodes,
                                       heartbeat_period=config.heartbeat_period,
                                       heartbeat_timeout=config.heartbeat_timeout,
                                       recovery_period=config.effective_recovery_period(),
                                       override_refresh_period=config.override_refresh_period,
                                       startup_grace=config.startup_grace,
                                       started_at=time.monotonic())
        # Routing's messages are small: a larger frame is a broken or hostile peer.
        # Clients ask routing where keys live, so its socket admits client keys; what each
        # role may send is checked per message (`handle`).
        self.socket, self.address = bind_pull(self.context, config.ip, config.port,
                                              max_frame_bytes=ROUTING_MAX_FRAME_BYTES,
                                              auth=credentials, audience="any")
        # Answers of the KVS to routing's own metadata PUTs (single frames) land here.
        self.answers, self.answer_address = bind_pull(self.context, config.ip, auth=credentials)
        self.push = PushCache(self.context, sndhwm=10000, linger_ms=0, auth=credentials)
        self.clock = MonotoneClock()
        self._request_seq = 0
        self.stopping = threading.Event()
        self._loaded: "queue.Queue" = queue.Queue()   # loader thread -> loop
        self._loader: Optional[threading.Thread] = None
        self._load_again = False

    # ---- event loop -------------------------------------------------------------------

    def serve(self, parent_pid: Optional[int] = None,
              on_serving: Optional[Callable[[], None]] = None) -> None:
        """Handle messages until `stopping` is set (or the parent process is gone);
        `on_serving` is called once, when the membership is first `serving`."""
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self.answers, zmq.POLLIN)
        next_tick = time.monotonic()
        while not self.stopping.is_set():
            if parent_gone(parent_pid):
                log.warning("parent process exited; routing stops")
                break
            wait_ms = max(0, int((next_tick - time.monotonic()) * 1000))
            events = dict(poller.poll(wait_ms))
            if self.socket in events:
                for _ in range(1000):
                    try:
                        frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self.handle([f.bytes for f in frames], role_of(frames[0]))
            if self.answers in events:
                self._drain_answers()
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + TICK_SECONDS
                self.apply(self.state.tick(now))
                if on_serving is not None and self.state.serving:
                    log.info("serving: %d node(s) in the membership",
                             len(self.state.node_ids()))
                    on_serving()
                    on_serving = None
            self._drain_loaded()

    def handle(self, frames: Sequence[bytes], role: Optional[str] = None) -> None:
        """Dispatch one received message from a peer of `role` (None: authentication off);
        malformed input, and a cluster-only kind from a client, are logged and dropped."""
        try:
            kind, payload = split_frames(frames)
        except FrameError as e:
            log.warning("dropped message: %s", e)
            return
        if not may_send(role, kind, ROUTING_CLIENT_KINDS):
            self.dropped_for_role += 1
            now = time.monotonic()
            if now - self._role_warned >= 1.0:
                self._role_warned = now
                log.warning("dropped a %r message from %s: only the cluster may send it "
                            "(%d dropped so far)", kind, role, self.dropped_for_role)
            return
        try:
            effects = self.state.handle(kind, payload, time.monotonic())
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
        if effects.load_overrides:
            self._start_loader()
        elif effects.refresh_overrides:
            self._start_loader(refresh=True)

    # ---- persisted overrides ---------------------------------------------------------

    def _start_loader(self, refresh: bool = False) -> None:
        """Read the persisted overrides back in a background thread (one at a time): after a
        restart (`refresh=False`), or periodically to adopt overrides set through another
        routing (`refresh=True`)."""
        if self._loader is not None and self._loader.is_alive():
            if not refresh:
                self._load_again = True
            return
        self._load_again = False
        self._loader = threading.Thread(target=self._load_overrides, args=(refresh,),
                                        name="override-loader", daemon=True)
        self._loader.start()

    def _load_overrides(self, refresh: bool = False) -> None:
        """Loader thread: the index, then each override, through a Client of this routing."""
        for attempt in range(1, (1 if refresh else LOAD_ATTEMPTS) + 1):
            if self.stopping.is_set():
                return
            try:
                with Client(self.address, ip=self.config.ip, timeout=1.0, retries=1,
                            auth=self._auth_config()) as client:
                    try:
                        index = sorted(k.decode(errors="replace") for k in
                                       client.get(REPLICATION_INDEX_KEY).reveal())
                    except KeyNotFound:
                        index = []
                    values: Dict[str, bytes] = {}
                    for key in index:
                        meta = replication_metadata_key(key)
                        try:
                            values[meta] = client.get(meta)
                        except KeyNotFound:
                            pass
                overrides, problems = loaded_overrides(index, values)
                for problem in problems:
                    log.warning("persisted overrides: %s", problem)
                self._loaded.put((refresh, overrides))
                return
            except (AnnaError, AttributeError, TypeError, zmq.ZMQError) as e:
                if refresh:
                    log.info("refreshing the persisted overrides failed (next period): %s", e)
                    return
                log.warning("reading the persisted overrides failed (attempt %d of %d): %s",
                            attempt, LOAD_ATTEMPTS, e)
                self.stopping.wait(LOAD_RETRY_SECONDS)
        log.error("persisted replication overrides not loaded after %d attempts; keys keep "
                  "the default replication until overrides are set again", LOAD_ATTEMPTS)

    def _drain_loaded(self) -> None:
        while True:
            try:
                refresh, overrides = self._loaded.get_nowait()
            except queue.Empty:
                break
            if refresh:
                self.apply(self.state.overrides_refreshed(overrides, time.monotonic()))
            else:
                self.apply(self.state.overrides_loaded(overrides))
        if self._load_again and (self._loader is None or not self._loader.is_alive()):
            self._start_loader()

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

    def _auth_config(self) -> Optional[AuthConfig]:
        """The cluster identity for this process' own KVS clients (None: plain)."""
        return AuthConfig(self.config.key_dir) if self.config.key_dir else None

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
        if self.security is not None:
            self.security.stop()
        if self._own_context:
            self.context.term()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of `python -m anna_core.routing`."""
    p = role_parser(RoutingConfig, "python -m anna_core.routing", "Anna routing service.")
    p.add_argument("--ready-file", help="write the bound address here, as JSON, once routing "
                   "has a member and no recovery phase runs (a readiness probe)")
    config, args = parse_config(p, RoutingConfig, argv)
    configure_logging(config.log_level, "routing", family="anna")
    raise_descriptor_limit()
    service = RoutingService(config)

    def on_signal(signum, _frame):
        log.info("signal %d: stopping", signum)
        service.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    info = {"address": service.address}
    announce_ready(info)
    log.info("routing listening on %s", service.address)
    ready_file = args.ready_file
    try:
        service.serve(parent_pid=config.parent_pid,
                      on_serving=(lambda: write_ready_file(info, ready_file)) if ready_file
                      else None)
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
