"""A test peer for secured client links (anna_core/csrc/secure_link.hpp), written from the
protocol's description, on libsodium through ctypes: it plays the client's side of the
handshake (or an impostor's server side) and seals frames, and lets a test break the rules
(a wrong key, a replayed, tampered or oversized frame, a handshake left half done).

`LinkPeer(address, server_key, public, secret)` connects to a worker's link; `handshake()`
returns None when the worker sent READY, else the worker's refusal text ("" when it closed the
connection without one); `send(payload)` seals and sends, `frame_for(payload)` only seals
(so a test can send a frame twice or change a byte); `recv()` returns the next opened answer,
or None when the worker closed the link."""
import ctypes
import ctypes.util
import socket
import struct

_lib = ctypes.CDLL(ctypes.util.find_library("sodium") or "libsodium.so.23")
assert _lib.sodium_init() >= 0
ULL = ctypes.c_ulonglong

HELLO_NONCE = b"AnnaLinkHELLO---" + bytes(8)
INITIATE_NONCE = b"AnnaLinkINITIATE" + bytes(8)
READY_NONCE = b"AnnaLinkREADY---" + bytes(8)
TO_SERVER, TO_CLIENT = b"AnnaLinkMSG C->S", b"AnnaLinkMSG S->C"


def keypair():
    pk, sk = ctypes.create_string_buffer(32), ctypes.create_string_buffer(32)
    _lib.crypto_box_keypair(pk, sk)
    return pk.raw, sk.raw


def random_bytes(n):
    buf = ctypes.create_string_buffer(n)
    _lib.randombytes_buf(buf, ctypes.c_size_t(n))
    return buf.raw


def box(message, nonce, public, secret):
    out = ctypes.create_string_buffer(len(message) + 16)
    assert _lib.crypto_box_easy(out, message, ULL(len(message)), nonce, public, secret) == 0
    return out.raw


def unbox(sealed, nonce, public, secret):
    out = ctypes.create_string_buffer(max(len(sealed) - 16, 1))
    if _lib.crypto_box_open_easy(out, sealed, ULL(len(sealed)), nonce, public, secret) != 0:
        return None
    return out.raw[:len(sealed) - 16]


def shared(public, secret):
    k = ctypes.create_string_buffer(32)
    assert _lib.crypto_box_beforenm(k, public, secret) == 0
    return k.raw


def box_k(message, nonce, key):
    out = ctypes.create_string_buffer(len(message) + 16)
    assert _lib.crypto_box_easy_afternm(out, message, ULL(len(message)), nonce, key) == 0
    return out.raw


def unbox_k(sealed, nonce, key):
    out = ctypes.create_string_buffer(max(len(sealed) - 16, 1))
    if _lib.crypto_box_open_easy_afternm(out, sealed, ULL(len(sealed)), nonce, key) != 0:
        return None
    return out.raw[:len(sealed) - 16]


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def read_frame(sock, timeout=5.0):
    """One raw frame, or None when the peer closed the connection first."""
    sock.settimeout(timeout)
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    (length,) = struct.unpack("<I", data)
    body = b""
    while len(body) < length:
        chunk = sock.recv(min(length - len(body), 1 << 20))
        if not chunk:
            return None
        body += chunk
    return body


def connect(link_address, timeout=5.0, unix=False):
    """A socket connected to a link address' TCP port, or with `unix` to its Unix-domain
    socket (anna_core/csrc/link.hpp: "tcp://host:port|unix:PATH")."""
    tcp, _, path = link_address.partition("|unix:")
    if unix:
        assert path, f"{link_address} names no Unix-domain socket"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(path)
        return s
    host, port = tcp[len("tcp://"):].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


class LinkPeer:
    def __init__(self, link_address, server_key, public, secret, unix=False):
        self.sock = connect(link_address, unix=unix)
        self.server_key, self.public, self.secret = server_key, public, secret
        self.session = None
        self.sent = self.received = 0

    def hello(self):
        self.eph_public, self.eph_secret = keypair()
        return frame(b"AL1H" + self.eph_public + box(bytes(64), HELLO_NONCE, self.server_key,
                                                     self.eph_secret))

    def handshake(self):
        self.sock.sendall(self.hello())
        welcome = read_frame(self.sock)
        if welcome is None or welcome[:4] == b"AL1E":
            return (welcome or b"AL1E")[4:].decode()
        assert welcome[:4] == b"AL1W" and len(welcome) == 68, welcome[:4]
        server_eph = unbox(welcome[20:], b"WELCOME-" + welcome[4:20], self.server_key,
                           self.eph_secret)
        assert server_eph is not None, "a WELCOME not made with the worker's key"
        self.session = shared(server_eph, self.eph_secret)
        v = random_bytes(16)
        vouch = box(self.eph_public + self.server_key, b"VOUCH---" + v, self.server_key,
                    self.secret)
        self.sock.sendall(frame(b"AL1I" + box_k(self.public + v + vouch, INITIATE_NONCE,
                                                self.session)))
        ready = read_frame(self.sock)
        if ready is None or ready[:4] == b"AL1E":
            return (ready or b"AL1E")[4:].decode()
        assert ready[:4] == b"AL1R" and unbox_k(ready[4:], READY_NONCE, self.session) == b""
        return None

    def frame_for(self, payload):
        self.sent += 1
        counter = struct.pack("<Q", self.sent)
        return frame(counter + box_k(payload, TO_SERVER + counter, self.session))

    def send(self, payload):
        self.sock.sendall(self.frame_for(payload))

    def recv(self, timeout=5.0):
        raw = read_frame(self.sock, timeout)
        if raw is None:
            return None
        counter = raw[:8]
        assert struct.unpack("<Q", counter)[0] == self.received + 1
        self.received += 1
        plain = unbox_k(raw[8:], TO_CLIENT + counter, self.session)
        assert plain is not None, "an answer that does not open"
        return plain

    def closed_by_worker(self, timeout=5.0):
        """True once the worker closed the connection (whatever it sent before)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
            return True
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


class ImpostorLink:
    """A link listener that answers a HELLO with a WELCOME made with `key_secret` (a key pair
    that is not the one the client expects), then records what the client sends after it."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.address = "tcp://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.after_welcome = b""
        self.hellos = 0

    def serve_one(self, timeout=5.0):
        self.listener.settimeout(timeout)
        conn, _ = self.listener.accept()
        with conn:
            hello = read_frame(conn, timeout)
            if hello is None or hello[:4] != b"AL1H":
                return
            self.hellos += 1
            client_eph = hello[4:36]
            wrong_public, wrong_secret = keypair()
            n = random_bytes(16)
            server_eph, _ = keypair()
            conn.sendall(frame(b"AL1W" + n + box(server_eph, b"WELCOME-" + n, client_eph,
                                                   wrong_secret)))
            conn.settimeout(timeout)
            try:
                while True:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    self.after_welcome += chunk
            except (socket.timeout, ConnectionResetError):
                pass

    def close(self):
        self.listener.close()
