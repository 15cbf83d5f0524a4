"""CURVE authentication of the platform's sockets (`runtime.auth`, issue 11 "Authentication").

Real sockets over loopback. Each side has its own ZeroMQ context and Authenticator, as two
processes would. "Refused" means nothing arrives within a deadline (`poll(timeout)`), and the
server keeps serving an admitted peer afterwards. Every test is bounded (a few seconds).
"""
import logging
import os
import stat

import pytest
import zmq

from runtime import auth
from runtime.auth import (AuthConfig, Authenticator, KeyPair, format_address, parse_address,
                          role_of, write_keys)
from runtime.sockets import PushCache, bind_pull, check_address, ipc_dir_of
from waiting import poll_until

DEADLINE_MS = 1500      # how long a refused message is given to (not) arrive


@pytest.fixture
def keys(tmp_path):
    """A key directory with the cluster pair and clients alice and bob."""
    write_keys(str(tmp_path / "keys"), ["alice", "bob"])
    return str(tmp_path / "keys")


class Side:
    """One party: a context, its Authenticator, a bound PULL and a PushCache."""

    def __init__(self, credentials, bind=True, audience="any"):
        self.context = zmq.Context()
        self.credentials = credentials
        self.authenticator = Authenticator(self.context, credentials).start()
        self.pull, self.address = bind_pull(self.context, auth=credentials,
                                                     audience=audience) if bind \
            else (None, None)
        self.push = PushCache(self.context, linger_ms=0, auth=credentials)

    def close(self):
        self.push.close()
        if self.pull is not None:
            self.pull.close(0)
        self.authenticator.stop()
        self.context.term()


@pytest.fixture
def sides():
    made = []

    def make(credentials, bind=True, audience="any"):
        made.append(Side(credentials, bind, audience))
        return made[-1]

    yield make
    for side in reversed(made):
        side.close()


def received(pull, timeout_ms=5000):
    """The next frame on `pull` (copy=False, so its User-Id is readable), or None by then."""
    if not pull.poll(timeout_ms):
        return None
    return pull.recv(copy=False)


def test_authenticated_push_pull_round_trip(keys, sides):
    cluster = AuthConfig(keys).load()
    server = sides(cluster)
    client = sides(AuthConfig(keys, "client:alice").load())
    assert parse_address(server.address)[1] == cluster.keypair.public
    assert client.push.send_frame(server.address, b"ping")
    frame = received(server.pull)
    assert frame is not None and frame.bytes == b"ping"
    # and back: the cluster answers to the client's own (keyed) address
    assert server.push.send_frame(client.address, b"pong")
    answer = received(client.pull)
    assert answer is not None and answer.bytes == b"pong"
    assert role_of(answer) == "cluster"


def test_roles_come_through_as_the_zap_user_id(keys, sides):
    server = sides(AuthConfig(keys).load())
    peer = sides(AuthConfig(keys).load(), bind=False)
    alice = sides(AuthConfig(keys, "client:alice").load(), bind=False)
    assert peer.push.send_frame(server.address, b"from the cluster")
    assert alice.push.send_frame(server.address, b"from alice")
    roles = {}
    for _ in range(2):
        frame = received(server.pull)
        assert frame is not None
        roles[frame.bytes] = role_of(frame)
    assert roles == {b"from the cluster": "cluster", b"from alice": "client:alice"}


def test_a_cluster_only_socket_refuses_client_keys_at_the_handshake(keys, sides, caplog):
    caplog.set_level(logging.WARNING, logger="runtime.auth")
    server = sides(AuthConfig(keys).load(), audience="cluster")
    peer = sides(AuthConfig(keys).load(), bind=False)
    alice = sides(AuthConfig(keys, "client:alice").load(), bind=False)
    assert alice.push.send_frame(server.address, b"from alice")
    poll_until(lambda: server.authenticator.refused, timeout=5, what="the ZAP refusal")
    assert "client:alice key on a cluster-only socket" in caplog.text
    assert peer.push.send_frame(server.address, b"from the cluster")
    frame = received(server.pull)
    assert frame is not None and frame.bytes == b"from the cluster"
    assert role_of(frame) == "cluster"
    assert received(server.pull, timeout_ms=200) is None


def test_may_send_lets_clients_send_only_client_kinds():
    client_kinds = frozenset({"request"})
    assert auth.may_send(None, "gossip", client_kinds)            # authentication off
    assert auth.may_send("cluster", "gossip", client_kinds)
    assert auth.may_send("client:alice", "request", client_kinds)
    assert not auth.may_send("client:alice", "gossip", client_kinds)


def test_unknown_client_key_is_refused_and_logged_with_its_address(keys, sides, caplog):
    caplog.set_level(logging.WARNING, logger="runtime.auth")
    server = sides(AuthConfig(keys).load())
    stranger_keys = KeyPair.generate()
    stranger = sides(auth.Credentials(stranger_keys, "client:mallory", {}), bind=False)
    assert stranger.push.send_frame(server.address, b"let me in")    # queued, never delivered
    poll_until(lambda: server.authenticator.refused, timeout=5, what="the ZAP refusal")
    assert received(server.pull, DEADLINE_MS) is None
    refusals = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert refusals and "127.0.0.1" in refusals[0] and "unknown public key" in refusals[0]
    assert stranger_keys.public.decode() in refusals[0]
    # the server still serves an admitted peer
    alice = sides(AuthConfig(keys, "client:alice").load(), bind=False)
    assert alice.push.send_frame(server.address, b"hello")
    assert received(server.pull).bytes == b"hello"


def test_peer_without_curve_is_refused(keys, sides):
    server = sides(AuthConfig(keys).load())
    plain_context = zmq.Context()
    plain = PushCache(plain_context, linger_ms=0)      # no credentials: connects plainly
    try:
        assert plain.send_frame(server.address, b"plain")
        raw = plain_context.socket(zmq.PUSH)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(auth.strip_key(server.address))
        raw.send(b"raw", flags=zmq.NOBLOCK)
        assert received(server.pull, DEADLINE_MS) is None
        raw.close(0)
    finally:
        plain.close()
        plain_context.term()


def test_a_client_admits_only_the_cluster(keys, sides):
    bob = sides(AuthConfig(keys, "client:bob").load())
    alice = sides(AuthConfig(keys, "client:alice").load(), bind=False)
    assert alice.push.send_frame(bob.address, b"hi bob")
    poll_until(lambda: bob.authenticator.refused, timeout=5, what="the ZAP refusal")
    assert received(bob.pull, DEADLINE_MS) is None


def test_curve_server_fails_closed_without_an_authenticator(keys, sides):
    credentials = AuthConfig(keys).load()
    context = zmq.Context()
    try:
        with pytest.raises(RuntimeError, match="Authenticator"):
            bind_pull(context, auth=credentials)
        # an Authenticator that stops leaves its servers refusing everyone (ZAP domain enforced)
        authenticator = Authenticator(context, credentials).start()
        pull, address = bind_pull(context, auth=credentials)
        authenticator.stop()
        alice = sides(AuthConfig(keys, "client:alice").load(), bind=False)
        assert alice.push.send_frame(address, b"after stop")
        assert received(pull, DEADLINE_MS) is None
        pull.close(0)
    finally:
        context.term()


def test_one_authenticator_per_context(keys):
    credentials = AuthConfig(keys).load()
    context = zmq.Context()
    try:
        with Authenticator(context, credentials):
            with pytest.raises(RuntimeError, match="already"):
                Authenticator(context, credentials).start()
    finally:
        context.term()


def test_address_key_suffix_round_trips():
    pair = KeyPair.generate()
    for endpoint in ("tcp://127.0.0.1:5555", "tcp://node-3.example:70", "ipc:///tmp/x/abc"):
        address = format_address(endpoint, pair.public)
        assert address == f"{endpoint}#k={pair.public_hex}"
        assert parse_address(address) == (endpoint, pair.public)
        assert check_address(address) == address
        assert auth.strip_key(address) == endpoint
    assert parse_address("tcp://127.0.0.1:1") == ("tcp://127.0.0.1:1", None)
    assert ipc_dir_of(format_address("ipc:///tmp/x/abc", pair.public)) == "/tmp/x"
    for bad in ("tcp://127.0.0.1:1#k=zz", "tcp://127.0.0.1:1#k=" + "0" * 63,
                "tcp://127.0.0.1:1#k=" + "A" * 64, "127.0.0.1:1#k=" + "0" * 64,
                "tcp://127.0.0.1:0#k=" + "0" * 64):
        with pytest.raises(ValueError):
            check_address(bad)


def test_push_cache_with_auth_refuses_an_address_without_key(keys, caplog):
    caplog.set_level(logging.WARNING, logger="runtime.sockets")
    context = zmq.Context()
    cache = PushCache(context, linger_ms=0, auth=AuthConfig(keys).load())
    try:
        assert cache.send_frame("tcp://127.0.0.1:5555", b"x") is False
        assert cache.refused == 1 and len(cache) == 0
        assert any("carries no server key" in r.getMessage() for r in caplog.records)
    finally:
        cache.close()
        context.term()


def test_plain_sockets_unchanged_without_auth():
    context = zmq.Context()
    pull, address = bind_pull(context)
    cache = PushCache(context, linger_ms=0)
    try:
        assert "#k=" not in address
        assert cache.send_frame(address, b"plain")
        frame = received(pull)
        assert frame.bytes == b"plain" and role_of(frame) is None
    finally:
        cache.close()
        pull.close(0)
        context.term()


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("command", ["cloudburst", "anna"])
def test_keys_command_writes_keys_with_modes_and_refuses_to_overwrite(tmp_path, command, capsys):
    if command == "cloudburst":
        from cloudburst.cli import main
    else:
        from anna_core.cli import main
    key_dir = str(tmp_path / "k")
    assert main(["keys", key_dir, "--client", "alice", "--client", "bob"]) == 0
    for secret in ("cluster.key_secret", "function.key_secret", "clients/alice.key_secret",
                   "clients/bob.key_secret"):
        assert _mode(os.path.join(key_dir, secret)) == 0o600
    assert _mode(os.path.join(key_dir, "cluster.key")) == 0o644
    public, secret = zmq.auth.load_certificate(os.path.join(key_dir, "cluster.key_secret"))
    assert len(public) == len(secret) == 40
    assert set(zmq.auth.load_certificates(os.path.join(key_dir, "authorized"))) == {
        KeyPair.load(os.path.join(key_dir, "clients", n + ".key")).public for n in ("alice", "bob")}
    credentials = AuthConfig(key_dir).load()
    assert sorted(credentials.allowed.values()) == ["client:alice", "client:bob", "cluster",
                                                    "function"]

    before = open(os.path.join(key_dir, "cluster.key_secret")).read()
    capsys.readouterr()
    assert main(["keys", key_dir]) == 1
    assert "--force" in capsys.readouterr().err
    assert open(os.path.join(key_dir, "cluster.key_secret")).read() == before
    assert main(["keys", key_dir, "--force"]) == 0
    assert open(os.path.join(key_dir, "cluster.key_secret")).read() != before
    assert main(["keys", str(tmp_path / "other"), "--client", "../evil"]) == 1
    with pytest.raises(SystemExit) as help_exit:
        main(["keys", "--help"])
    assert help_exit.value.code == 0 and "--client" in capsys.readouterr().out


def test_keys_add_client_keeps_the_cluster_keys(tmp_path, capsys):
    from cloudburst.cli import main
    key_dir = str(tmp_path / "k")
    assert main(["keys", str(tmp_path / "none"), "--add-client", "--client", "x"]) == 1
    assert "create the cluster's keys first" in capsys.readouterr().err
    assert main(["keys", key_dir, "--client", "alice"]) == 0
    cluster = open(os.path.join(key_dir, "cluster.key_secret")).read()
    assert main(["keys", key_dir, "--add-client", "--client", "carol"]) == 0
    assert open(os.path.join(key_dir, "cluster.key_secret")).read() == cluster
    assert sorted(AuthConfig(key_dir).load().allowed.values()) == \
        ["client:alice", "client:carol", "cluster", "function"]
    capsys.readouterr()
    assert main(["keys", key_dir, "--add-client", "--client", "alice"]) == 1   # exists
    assert "--force" in capsys.readouterr().err


def test_config_names_a_missing_key_file(tmp_path):
    with pytest.raises(auth.KeyFileError, match="cluster.key"):
        AuthConfig(str(tmp_path)).load()
    with pytest.raises(ValueError):
        AuthConfig(str(tmp_path), "admin")
