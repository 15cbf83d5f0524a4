"""Raw ZeroMQ peers of a cluster in tests: with the cluster's keys (acting as one of its
processes), with a client's, with unknown ones, or plain."""
import zmq
from zmq.utils.monitor import recv_monitor_message

from runtime.auth import Security, credentials_of, make_client, parse_address
from runtime.sockets import bind_pull

HANDSHAKE_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


class Peer:
    """A context holding `auth`'s keys (an `AuthConfig`; None: plain). `dial(address)` is a
    PUSH socket to `address`, a CURVE client of the key the address carries when this peer
    has keys; `bind()` a PULL socket and its address (a CURVE server admitting what this
    peer's keys admit). Close with `close()` (or use it as a context manager)."""

    def __init__(self, auth=None, context=None):
        self.ctx = context or zmq.Context()
        self._own = context is None
        self.security = Security.start(self.ctx, auth)
        self.creds = credentials_of(self.security)
        self._sockets = []

    def dial(self, address, linger_ms=0, **options):
        endpoint, key = parse_address(address)
        s = self.ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, linger_ms)
        for name, value in options.items():
            s.setsockopt(getattr(zmq, name), value)
        if self.creds is not None and key is not None:
            make_client(s, self.creds, key)
        s.connect(endpoint)
        self._sockets.append(s)
        return s

    def dial_monitored(self, address, **options):
        """`dial`, and a monitor of the socket's handshakes (for `handshake`)."""
        endpoint, key = parse_address(address)
        s = self.ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 0)
        if self.creds is not None and key is not None:
            make_client(s, self.creds, key)
        monitor = s.get_monitor_socket(HANDSHAKE_EVENTS)
        s.connect(endpoint)
        self._sockets += [s, monitor]
        return s, monitor

    def bind(self, **kwargs):
        s, address = bind_pull(self.ctx, auth=self.creds, **kwargs)
        self._sockets.append(s)
        return s, address

    def close(self):
        for s in self._sockets:
            s.close()           # each socket's own linger
        self._sockets = []
        if self.security is not None:
            self.security.stop()
            self.security = None
        if self._own:
            self.ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def handshake(monitor, timeout=10.0):
    """How the first handshake of a `dial_monitored` socket ended: "ok", "refused" (the ZAP
    handler said no) or "protocol" (e.g. one side without CURVE)."""
    assert monitor.poll(int(timeout * 1000)), "no handshake within the deadline"
    event = recv_monitor_message(monitor)["event"]
    return {zmq.EVENT_HANDSHAKE_SUCCEEDED: "ok",
            zmq.EVENT_HANDSHAKE_FAILED_AUTH: "refused"}.get(event, "protocol")


class AnsweringPeer:
    """A plain PULL socket on loopback, served by a thread: each message's frames go to
    `handle(frames)`, which returns None (no answer) or `(response_address, reply bytes)`;
    replies go out on one PUSH socket per response address. `close()` stops it."""

    def __init__(self, handle):
        import threading
        self._handle = handle
        self.context = zmq.Context()
        self.pull = self.context.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.bind("tcp://127.0.0.1:*")
        self.address = self.pull.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        push = {}
        while not self._stop.is_set():
            if not self.pull.poll(50):
                continue
            answered = self._handle(self.pull.recv_multipart())
            if answered is None:
                continue
            address, reply = answered
            if address not in push:
                s = push[address] = self.context.socket(zmq.PUSH)
                s.setsockopt(zmq.LINGER, 0)
                s.connect(address)
            push[address].send(reply)
        for s in push.values():
            s.close(0)

    def close(self):
        self._stop.set()
        self._thread.join(5)
        self.pull.close(0)
        self.context.term()
