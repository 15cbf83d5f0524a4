"""Authentication and encryption of the platform's sockets: ZeroMQ CURVE with a ZAP handler.

Contract:
- **Opt-in.** Nothing here runs unless a process is given an `AuthConfig`; without one every
  socket is plain, exactly as before.
- **Keys** on disk (`KeyPair`, the key directory `write_keys` writes, `KeyFileError`) are
  `runtime/keys.py`'s; they are imported from here too.
- **Roles.** `"cluster"` (the cluster's processes), `"client:NAME"` (a client), and
  `"function"` (`FUNCTION`: the processes that run user code, executor workers). A function
  holds no cluster secret: its executor node reads `function.key_secret` and hands the pair
  to its workers over a pipe (`encode_handoff` / `decode_handoff`), never on a command line,
  in the environment or in a file they can read.
- **Config and credentials.** `AuthConfig(key_dir, identity)` says where the keys live and who
  this process is (`"cluster"` or `"client:NAME"`); `AuthConfig.load()` returns `Credentials`:
  the process' own key pair, its role, and the public keys it admits with each one's role
  (a cluster process admits the cluster key as `"cluster"`, the function key as `"function"`
  and every authorized client key as `"client:NAME"`; a client admits the cluster key and
  the function key, whose holders send it results). A missing or unreadable key file
  raises `KeyFileError` naming the file; `AuthConfig.function_keypair()` reads the function
  pair (KeyFileError naming `function.key_secret` and how to create it when missing).
  `function_credentials(cluster_public, pair, domain, clients)` are a worker's credentials:
  the function pair, admitting the cluster key, the function key and the authorized client
  keys (public keys only; the hand-off carries them), which a worker admits only for direct
  calls under a worker lease.
- **Addresses carry their server's key.** A socket bound with credentials is a CURVE server;
  peers connect to it with the address `format_address(endpoint, public)`, i.e.
  `tcp://host:port#k=<public key as 64 hex digits>`. Hex, not Z85, because Z85 uses
  `/ : $ & ! * ? < > ( ) [ ] { }`, which break `ipc://` paths and shell command lines; hex
  survives any string field, log line and shell word. `parse_address` splits it back
  (`(endpoint, z85 key or None)`); an address without the suffix is a plain one.
- **ZAP.** `Authenticator(context, credentials)` answers the ZAP requests of every CURVE
  server socket of `context` (one per context; start it before binding, stop it before
  terminating the context): a client key in the
  admitted set is accepted with its role as the ZAP User-Id, anything else is refused and
  logged at WARNING with the peer's address and key (at most once per peer and key every
  `log_every` seconds; the rest are counted in `refused`). Bound sockets also enforce the ZAP
  domain, so a CURVE server whose context has no Authenticator refuses every peer rather than
  admitting any key (fails closed).
- **Audiences.** A server socket is bound for one audience, which its ZAP domain names:
    `"cluster"` (`ZAP_DOMAIN + ".cluster"`): cluster keys only (a scheduler's update socket,
        node control sockets, HydroCache's replies);
    `"function"` (`ZAP_DOMAIN + ".function"`): cluster and function keys (what workers send
        to: node caches, other workers, a client's response socket);
    `"any"` (`ZAP_DOMAIN`): cluster and client keys (routing, KVS workers);
    `"all"` (`ZAP_DOMAIN + ".all"`): cluster, function and client keys (schedulers).
  Any other key is refused at the handshake. A socket open to several roles checks each
  message's sender with `role_of(frame)` / `may_send(role, kind, client_kinds,
  function_kinds)`.
- `role_of(frame)` is the role of the peer that sent a frame received with `copy=False`
  (None on a plain socket). `may_send(role, kind, client_kinds, function_kinds)`: a message
  from a plain socket (role None) or from the cluster may be of any kind; one from a client
  only of a kind in `client_kinds`; one from a function only of a kind in `function_kinds`.
- `Security` bundles what one process needs (credentials and its context's Authenticator):
  `Security.start(context, auth_config)` (None when `auth_config` is None, i.e. plain), or
  `Security.of_credentials(context, credentials)` for credentials handed over.
"""
from __future__ import annotations

import binascii
import json
import logging
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import zmq
import zmq.utils.z85

# the key files, and the roles named after the cluster's and the functions' pairs
from .keys import (CLUSTER, FUNCTION, KeyFileError, KeyPair, check_client_name, is_client_name,
                   write_keys)

__all__ = ["KeyPair", "AuthConfig", "Credentials", "Authenticator", "KeyFileError",
           "CLUSTER", "CLIENT_PREFIX", "FUNCTION", "FUNCTION_DOMAIN", "ALL_DOMAIN",
           "function_credentials", "encode_handoff", "decode_handoff", "ZAP_DOMAIN", "ADDRESS_KEY_MARK", "format_address",
           "parse_address", "strip_key", "role_of", "write_keys", "check_client_name",
           "make_server", "make_client", "CLUSTER_DOMAIN", "may_send", "Security", "credentials_of",
           "AuthenticationRequired", "check_client_auth", "MECHANISM_MISMATCH",
           "HOW_TO_AUTHENTICATE", "KVS_HOW_TO_AUTHENTICATE", "KEYS_GIVEN_TO_A_PLAIN_CLUSTER",
           "for_command_line"]

log = logging.getLogger("runtime.auth")

CLIENT_PREFIX = "client:"
ZAP_DOMAIN = "cloudburst"
# The ZAP domain of each audience (see "Audiences" in the contract), and the roles it admits
# (a role ending with ":" admits every role with that prefix).
CLUSTER_DOMAIN = ZAP_DOMAIN + ".cluster"
FUNCTION_DOMAIN = ZAP_DOMAIN + ".function"
ALL_DOMAIN = ZAP_DOMAIN + ".all"
_AUDIENCES = {CLUSTER: ".cluster", FUNCTION: ".function", "any": "", "all": ".all"}
_ADMITS = {".cluster": (CLUSTER,), ".function": (CLUSTER, FUNCTION),
           "": (CLUSTER, CLIENT_PREFIX), ".all": (CLUSTER, FUNCTION, CLIENT_PREFIX)}
# A socket monitor's handshake-failure value when the peer speaks no CURVE at all (libzmq's
# ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH): a plain peer meeting a CURVE server.
MECHANISM_MISMATCH = 0x11000002
ADDRESS_KEY_MARK = "#k="

# What a client without keys (or with keys a plain cluster refuses) should do: in the Python
# API's words, which the clients' errors use, and in the commands' (`for_command_line`), so
# that a command's error names its options (--key-dir) and never Python's AuthConfig.
HOW_TO_AUTHENTICATE = (
    "pass auth=cloudburst.AuthConfig(KEY_DIR, 'client:NAME'), where KEY_DIR holds the "
    "cluster's public key (cluster.key) and your key pair (clients/NAME.key_secret), as "
    "written by `cloudburst keys KEY_DIR --client NAME` (or use LocalCluster.client(); "
    "`cloudburst local` prints its key directory and client name)")
KVS_HOW_TO_AUTHENTICATE = (
    "pass auth=AuthConfig(KEY_DIR, 'client:NAME') with a client key the cluster admits "
    "(`cloudburst keys KEY_DIR --client NAME`; a LocalCluster's `client_auth`)")
KEYS_GIVEN_TO_A_PLAIN_CLUSTER = (
    "this client has keys (auth=...): connect without auth, or start the cluster with keys")
_COMMAND_LINE_WORDS = {
    HOW_TO_AUTHENTICATE: (
        "pass --key-dir KEY_DIR --client NAME, where KEY_DIR holds the cluster's public key "
        "(cluster.key), the functions' (function.key) and your key pair "
        "(clients/NAME.key_secret), as written by `cloudburst keys KEY_DIR --client NAME` "
        "(`cloudburst local` prints its key directory and client name)"),
    KVS_HOW_TO_AUTHENTICATE: (
        "pass --key-dir KEY_DIR (with --client NAME, a client key the cluster admits, as "
        "`cloudburst keys KEY_DIR --client NAME` writes; `anna local` prints its key "
        "directory)"),
    KEYS_GIVEN_TO_A_PLAIN_CLUSTER: (
        "this command was given keys (--key-dir): run it without --key-dir, or start the "
        "cluster with keys"),
}
_ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_HEX_KEY = re.compile(r"^[0-9a-f]{64}$")


class AuthenticationRequired(ValueError):
    """A client was given the address of an authenticated cluster (it carries the server's
    key) but no keys of its own; the message says how to pass them."""


def check_client_auth(addresses: Iterable[str], config: Optional["AuthConfig"],
                      what: str) -> None:
    """Raise AuthenticationRequired when any of `addresses` carries a server key and `config`
    is None: such a cluster would refuse the client, and it would only see timeouts."""
    if config is None:
        keyed = [a for a in addresses if isinstance(a, str) and ADDRESS_KEY_MARK in a]
        if keyed:
            raise AuthenticationRequired(
                f"{what} at {strip_key(keyed[0])} requires authentication: "
                f"{KVS_HOW_TO_AUTHENTICATE}")


def for_command_line(message: str) -> str:
    """`message` (an error's text) as a command prints it: the advice worded for the Python
    API ("pass auth=AuthConfig(...)") becomes the command's ("pass --key-dir ...")."""
    for library, command in _COMMAND_LINE_WORDS.items():
        message = message.replace(library, command)
    return message


@dataclass(frozen=True)
class Credentials:
    """What a process needs to authenticate: its own pair, its role, and the public keys
    (Z85) it admits with each one's role."""
    keypair: KeyPair
    role: str
    allowed: Mapping[bytes, str]
    domain: str = ZAP_DOMAIN


@dataclass(frozen=True)
class AuthConfig:
    """Where the keys live and who this process is: `identity` is `"cluster"` (a service) or
    `"client:NAME"` (a client holding `clients/NAME.key_secret`)."""
    key_dir: str
    identity: str = CLUSTER
    domain: str = ZAP_DOMAIN

    def __post_init__(self) -> None:
        if self.identity != CLUSTER:
            if not self.identity.startswith(CLIENT_PREFIX):
                raise ValueError(f"identity {self.identity!r}: expected 'cluster' or "
                                 f"'client:NAME'")
            check_client_name(self.identity[len(CLIENT_PREFIX):])

    def load(self) -> Credentials:
        """Read the keys (KeyFileError naming a missing or malformed file)."""
        cluster_public = KeyPair.load(os.path.join(self.key_dir, CLUSTER + ".key")).public
        allowed: Dict[bytes, str] = {cluster_public: CLUSTER}
        function_public = os.path.join(self.key_dir, FUNCTION + ".key")
        if os.path.exists(function_public):
            allowed.setdefault(KeyPair.load(function_public).public, FUNCTION)
        if self.identity == CLUSTER:
            own = KeyPair.load(os.path.join(self.key_dir, CLUSTER + ".key_secret"))
            authorized = os.path.join(self.key_dir, "authorized")
            if os.path.isdir(authorized):
                for entry in sorted(os.listdir(authorized)):
                    if entry.endswith(".key") and is_client_name(entry[:-4]):
                        key = KeyPair.load(os.path.join(authorized, entry)).public
                        allowed.setdefault(key, CLIENT_PREFIX + entry[:-4])
        else:
            name = self.identity[len(CLIENT_PREFIX):]
            own = KeyPair.load(os.path.join(self.key_dir, "clients", name + ".key_secret"))
        if own.secret is None:
            raise KeyFileError(f"the key file of {self.identity!r} in {self.key_dir!r} has no "
                               f"secret key")
        return Credentials(own, self.identity, allowed, self.domain)

    def function_keypair(self) -> KeyPair:
        """The pair user code runs with (`function.key_secret`); KeyFileError naming the file,
        and how to create it, when it is missing."""
        path = os.path.join(self.key_dir, FUNCTION + ".key_secret")
        if not os.path.exists(path):
            raise KeyFileError(f"the key directory {self.key_dir!r} has no function key pair "
                               f"({path}), which executor workers run with: create it with "
                               f"`cloudburst keys {self.key_dir} --add-client --client NAME`")
        pair = KeyPair.load(path)
        if pair.secret is None:
            raise KeyFileError(f"the key file {path!r} has no secret key")
        return pair


def function_credentials(cluster_public: bytes, pair: KeyPair,
                         domain: str = ZAP_DOMAIN,
                         clients: Optional[Mapping[bytes, str]] = None) -> Credentials:
    """The credentials of a process running user code: the function pair, admitting the
    cluster key (schedules, cache replies), the function key (other workers) and the
    authorized clients' public keys `clients` (Z85 -> "client:NAME": their direct calls
    under a worker lease, on a socket bound for audience "all")."""
    allowed = {k: r for k, r in (clients or {}).items() if r.startswith(CLIENT_PREFIX)}
    allowed.update({cluster_public: CLUSTER, pair.public: FUNCTION})
    return Credentials(pair, FUNCTION, allowed, domain)


def encode_handoff(credentials: Credentials, hide: Iterable[str] = ()) -> bytes:
    """A function's credentials as bytes for a pipe to the process that will run user code
    (`decode_handoff` reads them back), with the paths it must hide from itself before it
    runs any (the key directory). Only function credentials are handed over."""
    if credentials.role != FUNCTION:
        raise ValueError(f"only function credentials are handed over, not {credentials.role!r}")
    cluster = next(k for k, r in credentials.allowed.items() if r == CLUSTER)
    clients = {k.decode("ascii"): r for k, r in credentials.allowed.items()
               if r.startswith(CLIENT_PREFIX)}
    return json.dumps({"public": credentials.keypair.public.decode("ascii"),
                       "secret": credentials.keypair.secret.decode("ascii"),
                       "cluster": cluster.decode("ascii"), "clients": clients,
                       "domain": credentials.domain, "hide": list(hide)}).encode("utf-8")


def decode_handoff(data: bytes) -> Tuple[Credentials, List[str]]:
    """Inverse of `encode_handoff`: (credentials, paths to hide); KeyFileError when `data`
    is not such a hand-off."""
    try:
        d = json.loads(data)
        pair = KeyPair(d["public"].encode("ascii"), d["secret"].encode("ascii"))
        cluster = d["cluster"].encode("ascii")
        domain = d["domain"]
        hide = [str(p) for p in d.get("hide", [])]
        clients = {str(k).encode("ascii"): str(r) for k, r in d.get("clients", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise KeyFileError(f"the function keys handed over are malformed ({e})") from None
    if len(pair.public) != 40 or len(pair.secret) != 40 or len(cluster) != 40:
        raise KeyFileError("the function keys handed over are not 40-character Z85 keys")
    if any(len(k) != 40 for k in clients):
        raise KeyFileError("a client key handed over is not a 40-character Z85 key")
    return function_credentials(cluster, pair, domain, clients), hide


# --- addresses -------------------------------------------------------------------------------

def format_address(endpoint: str, public: bytes) -> str:
    """`endpoint` with its server's public key (Z85) appended (see the module contract)."""
    return endpoint + ADDRESS_KEY_MARK + KeyPair(public).public_hex


def parse_address(address: str) -> Tuple[str, Optional[bytes]]:
    """(endpoint, server key in Z85 or None). ValueError when the address has the key mark
    but not a 64-hex-digit key after it."""
    mark = address.rfind(ADDRESS_KEY_MARK)
    if mark < 0:
        return address, None
    hex_key = address[mark + len(ADDRESS_KEY_MARK):]
    if not _HEX_KEY.fullmatch(hex_key):
        raise ValueError(f"the server key in {address[:120]!r} is not 64 lowercase hex digits")
    return address[:mark], zmq.utils.z85.encode(binascii.unhexlify(hex_key))


def strip_key(address: str) -> str:
    """The endpoint of an address, without its key suffix (if any)."""
    mark = address.rfind(ADDRESS_KEY_MARK)
    return address if mark < 0 else address[:mark]


# --- sockets -------------------------------------------------------------------------------

def make_server(socket: zmq.Socket, credentials: Credentials, audience: str = "any") -> None:
    """Make a socket (before it binds) a CURVE server that only admits peers its context's
    Authenticator accepts for `audience` (module contract: "cluster", "function", "any",
    "all"); RuntimeError if the context has no Authenticator."""
    if audience not in _AUDIENCES:
        raise ValueError(f"audience must be one of {sorted(_AUDIENCES)}, not {audience!r}")
    if not Authenticator.running_on(socket.context):
        raise RuntimeError("a CURVE server socket needs an Authenticator running on its "
                           "context (start it before binding)")
    socket.setsockopt(zmq.CURVE_SERVER, 1)
    socket.setsockopt(zmq.CURVE_SECRETKEY, credentials.keypair.secret)
    socket.setsockopt(zmq.CURVE_PUBLICKEY, credentials.keypair.public)
    socket.setsockopt_string(zmq.ZAP_DOMAIN, credentials.domain + _AUDIENCES[audience])
    socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)


def make_client(socket: zmq.Socket, credentials: Credentials, server_key: bytes) -> None:
    """Make a socket (before it connects) a CURVE client of the server with `server_key`."""
    socket.setsockopt(zmq.CURVE_SERVERKEY, server_key)
    socket.setsockopt(zmq.CURVE_PUBLICKEY, credentials.keypair.public)
    socket.setsockopt(zmq.CURVE_SECRETKEY, credentials.keypair.secret)


def role_of(frame: zmq.Frame) -> Optional[str]:
    """The role (ZAP User-Id) of the peer that sent `frame` (received with copy=False); None
    for a frame from a socket without authentication."""
    try:
        user = frame.get("User-Id")
    except (zmq.ZMQError, AttributeError, TypeError):
        return None
    return user or None


def may_send(role: Optional[str], kind: Any, client_kinds: "frozenset",
             function_kinds: "frozenset" = frozenset()) -> bool:
    """Whether a peer of `role` may send a message of `kind` (see the module contract)."""
    if role is None or role == CLUSTER:
        return True
    if role == FUNCTION:
        return kind in function_kinds
    return role.startswith(CLIENT_PREFIX) and kind in client_kinds


# --- the ZAP handler -------------------------------------------------------------------------

_running: "weakref.WeakKeyDictionary[zmq.Context, Authenticator]" = weakref.WeakKeyDictionary()
_running_lock = threading.Lock()


class Authenticator:
    """The ZAP handler of one ZeroMQ context (see the module contract). A thread answers on
    `inproc://zeromq.zap.01`; `start()`/`stop()` or a `with` block bound its life."""

    def __init__(self, context: zmq.Context, credentials: Credentials, *,
                 log_every: float = 10.0) -> None:
        self.context = context
        self.allowed: Dict[bytes, str] = dict(credentials.allowed)
        self.domain = credentials.domain
        self.log_every = log_every
        self.accepted = 0
        self.refused = 0
        self._logged: Dict[Tuple[str, bytes], float] = {}
        self._thread: Optional[threading.Thread] = None
        self._stop_address = f"inproc://zap-stop-{id(self):x}"
        self._stopper: Optional[zmq.Socket] = None

    @staticmethod
    def running_on(context: zmq.Context) -> bool:
        with _running_lock:
            return context in _running

    def start(self) -> "Authenticator":
        """Bind the ZAP endpoint and start answering; RuntimeError if the context already has
        a ZAP handler."""
        with _running_lock:
            if self.context in _running:
                raise RuntimeError("this ZeroMQ context already has an Authenticator")
            zap = self.context.socket(zmq.REP)
            zap.setsockopt(zmq.LINGER, 0)
            try:
                zap.bind(_ZAP_ENDPOINT)
            except zmq.ZMQError as e:
                zap.close(0)
                raise RuntimeError(f"cannot bind the ZAP endpoint: {e}") from None
            control = self.context.socket(zmq.PULL)
            control.bind(self._stop_address)
            self._stopper = self.context.socket(zmq.PUSH)
            self._stopper.setsockopt(zmq.LINGER, 0)
            self._stopper.connect(self._stop_address)
            self._thread = threading.Thread(target=self._run, args=(zap, control),
                                            name="zap-authenticator", daemon=True)
            self._thread.start()
            _running[self.context] = self
        log.info("authenticator started: %d admitted key(s)", len(self.allowed))
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop answering (peers connecting afterwards are refused) and join the thread."""
        if self._thread is None:
            return
        try:
            self._stopper.send(b"", flags=zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self._thread.join(timeout)
        self._stopper.close(0)
        self._thread = None
        with _running_lock:
            if _running.get(self.context) is self:
                del _running[self.context]

    def __enter__(self) -> "Authenticator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self, zap: zmq.Socket, control: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(control, zmq.POLLIN)
        try:
            while True:
                events = dict(poller.poll())
                if control in events:
                    return
                if zap in events:
                    request = zap.recv_multipart()
                    zap.send_multipart(self._answer(request))
        except zmq.ContextTerminated:
            pass
        except Exception:                                    # never leave ZAP unanswered
            log.exception("authenticator stopped on an error; new peers will be refused")
        finally:
            zap.close(0)
            control.close(0)

    def _answer(self, request: List[bytes]) -> List[bytes]:
        """The ZAP reply to one request (RFC 27): 200 with the role as User-Id, or 400."""
        if len(request) < 6:
            return [b"1.0", request[1] if len(request) > 1 else b"", b"500",
                    b"malformed ZAP request", b"", b""]
        version, request_id, domain, address, _identity, mechanism = request[:6]
        credentials = request[6:]
        peer = address.decode("utf-8", "replace") or "(local)"
        if version != b"1.0":
            return [b"1.0", request_id, b"500", b"unsupported ZAP version", b"", b""]
        domain_text = domain.decode("utf-8", "replace")
        suffix = domain_text[len(self.domain):] if domain_text.startswith(self.domain) else None
        if mechanism == b"CURVE" and len(credentials) == 1 and len(credentials[0]) == 32 \
                and suffix in _ADMITS:
            key = zmq.utils.z85.encode(credentials[0])
            role = self.allowed.get(key)
            if role is not None and not any(role == r or (r.endswith(":") and
                                                          role.startswith(r))
                                            for r in _ADMITS[suffix]):
                where = "a cluster-only socket" if suffix == ".cluster" else \
                    f"a socket for {' and '.join(r.rstrip(':') for r in _ADMITS[suffix])} keys"
                self._refused(peer, key, f"a {role} key on {where}")
                return [version, request_id, b"400", b"key not admitted here", b"", b""]
            if role is not None:
                self.accepted += 1
                log.debug("admitted %s from %s", role, peer)
                return [version, request_id, b"200", b"OK", role.encode("utf-8"), b""]
            self._refused(peer, key, "unknown public key")
            return [version, request_id, b"400", b"unknown public key", b"", b""]
        key = b""
        self._refused(peer, key, f"mechanism {mechanism.decode('ascii', 'replace')} in domain "
                                 f"{domain.decode('utf-8', 'replace')!r}")
        return [version, request_id, b"400", b"not a CURVE peer of this domain", b"", b""]

    def _refused(self, peer: str, key: bytes, why: str) -> None:
        # counted after the log line: whoever sees the count can also see the line
        now = time.monotonic()
        seen = self._logged.get((peer, key))
        if seen is None or now - seen >= self.log_every:
            if len(self._logged) >= 1024:
                self._logged.clear()
            self._logged[(peer, key)] = now
            log.warning("refused a connection from %s: %s%s (%d refused so far)", peer, why,
                        f" {key.decode('ascii')}" if key else "", self.refused + 1)
        self.refused += 1


class Security:
    """One process' authentication: its credentials and the Authenticator of its context.
    `Security.start(context, config)` loads the keys (KeyFileError naming a bad file) and
    starts the context's Authenticator, or shares the one already running there (a client
    built on a service's context); it returns None when `config` is None (authentication
    off). `stop()` stops the Authenticator only if this Security started it."""

    def __init__(self, credentials: Credentials, authenticator: Authenticator,
                 owned: bool = True) -> None:
        self.credentials = credentials
        self.authenticator = authenticator
        self.owned = owned

    @classmethod
    def start(cls, context: zmq.Context, config: Optional["AuthConfig"]) -> Optional["Security"]:
        if config is None:
            return None
        credentials = config.load()
        with _running_lock:
            running = _running.get(context)
        if running is not None:
            return cls(credentials, running, owned=False)
        return cls(credentials, Authenticator(context, credentials).start())

    @classmethod
    def of_credentials(cls, context: zmq.Context, credentials: Credentials) -> "Security":
        """Like `start`, with credentials already in hand (a worker's, handed over by its
        node) instead of a key directory."""
        with _running_lock:
            running = _running.get(context)
        if running is not None:
            return cls(credentials, running, owned=False)
        return cls(credentials, Authenticator(context, credentials).start())

    @property
    def role(self) -> str:
        return self.credentials.role

    def stop(self) -> None:
        if self.owned:
            self.authenticator.stop()


def credentials_of(security: Optional[Security]) -> Optional[Credentials]:
    """The credentials of `security`, or None when authentication is off."""
    return None if security is None else security.credentials
