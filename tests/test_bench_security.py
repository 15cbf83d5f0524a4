"""The like-for-like security of the call benchmarks (benchmarks/bench_security.py, used by
composition.py and throughput.py): `--security` parses to known modes or fails clearly; each
mode asks both sides for the same security; the throwaway CA's certificate works for mutual
TLS as Ray uses it (the same certificate presented by server and client, checked against the
CA, for 127.0.0.1); the probe that checks a running Ray tells a TLS server from a plaintext
one and finds a process's listening ports; a probe that disagrees with the mode fails."""
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading

import pytest

from benchmarks import bench_security as bs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="needs the openssl command (scripts/install.sh)")


def test_parse_modes_keeps_order_and_drops_repeats():
    assert bs.parse_modes("on,off") == ["on", "off"]
    assert bs.parse_modes(" off , on,off,") == ["off", "on"]
    assert bs.parse_modes("mixed") == ["mixed"]


@pytest.mark.parametrize("text", ["", ",", "on,plain", "TLS"])
def test_parse_modes_rejects_unknown_or_empty(text):
    with pytest.raises(ValueError, match="--security"):
        bs.parse_modes(text)


def test_each_mode_secures_both_sides_alike_except_mixed():
    assert bs.cloudburst_auth("on") and bs.ray_tls("on")
    assert not bs.cloudburst_auth("off") and not bs.ray_tls("off")
    assert bs.cloudburst_auth("mixed") and not bs.ray_tls("mixed")
    assert set(bs.MODES) == {"on", "off", "mixed"}
    assert bs.parse_modes(bs.DEFAULT_MODES) == ["on", "off"]


@pytest.mark.parametrize("script", ["composition.py", "throughput.py"])
def test_scripts_reject_an_unknown_mode_and_document_the_flag(script):
    path = os.path.join(ROOT, "benchmarks", script)
    bad = subprocess.run([sys.executable, path, "--security", "on,bogus"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "bogus" in bad.stderr
    usage = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True,
                           timeout=60)
    assert usage.returncode == 0
    assert "--security" in usage.stdout and "Ray TLS" in usage.stdout


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command (scripts/install.sh)")
    directory = str(tmp_path_factory.mktemp("ca"))
    return bs.TlsFiles.create(directory, ["127.0.0.1"])


class _Server:
    """A one-connection-at-a-time loopback server: with `tls`, mutual TLS as Ray's gRPC
    servers are configured (its certificate, client certificates required, checked against
    the CA); without, it answers every connection in plaintext and closes it."""

    def __init__(self, files=None):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(10)
        self.port = self.sock.getsockname()[1]
        self.context = None
        if files is not None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(files.cert, files.key)
            self.context.load_verify_locations(files.ca)
            self.context.verify_mode = ssl.CERT_REQUIRED
        self.results = []
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.stopped:
                conn.close()
                return
            conn.settimeout(10)
            try:
                if self.context is None:
                    conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00")   # an HTTP/2 frame
                else:
                    with self.context.wrap_socket(conn, server_side=True) as tls:
                        self.results.append(tls.getpeercert() is not None)
                        tls.sendall(b"ok")
                        continue
            except (ssl.SSLError, OSError) as e:
                self.results.append(e)
            conn.close()

    def stop(self):
        self.stopped = True
        try:        # wake the accept (closing a listening socket does not)
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
        except OSError:
            pass
        self.thread.join(10)
        self.sock.close()
        assert not self.thread.is_alive()


@needs_openssl
def test_created_files_form_a_chain_and_keep_no_ca_key(tls_files):
    directory = os.path.dirname(tls_files.ca)
    assert sorted(os.listdir(directory)) == ["ca.crt", "node.crt", "node.key"]
    out = subprocess.run(["openssl", "verify", "-CAfile", tls_files.ca, tls_files.cert],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    text = subprocess.run(["openssl", "x509", "-in", tls_files.cert, "-noout", "-text"],
                          capture_output=True, text=True, timeout=30).stdout
    assert "IP Address:127.0.0.1" in text and "TLS Web Client Authentication" in text
    env = bs.ray_tls_env(tls_files)
    assert env == {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": tls_files.cert,
                   "RAY_TLS_SERVER_KEY": tls_files.key, "RAY_TLS_CA_CERT": tls_files.ca}


@needs_openssl
def test_certificate_serves_mutual_tls_as_ray_uses_it(tls_files):
    server = _Server(tls_files)
    try:
        # a client presenting the same certificate, checking the server's against the CA
        # and its address against the certificate, as Ray's processes do with each other
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.load_verify_locations(tls_files.ca)
        client.load_cert_chain(tls_files.cert, tls_files.key)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            with client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.recv(2) == b"ok"
        # without a client certificate the server refuses the handshake
        bare = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        bare.load_verify_locations(tls_files.ca)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                with bare.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                    tls.recv(2)
    finally:
        server.stop()
    assert server.results[0] is True
    assert isinstance(server.results[1], ssl.SSLError)


@needs_openssl
def test_probe_tells_tls_from_plaintext(tls_files):
    tls_server, plain_server = _Server(tls_files), _Server()
    try:
        assert bs.speaks_tls("127.0.0.1", tls_server.port, tls_files) is True
        assert bs.speaks_tls("127.0.0.1", plain_server.port, tls_files) is False
        assert bs.speaks_tls("127.0.0.1", plain_server.port) is False
    finally:
        tls_server.stop()
        plain_server.stop()
    closed = plain_server.port      # nothing listens there any more
    with pytest.raises(OSError):
        bs.speaks_tls("127.0.0.1", closed, timeout=2)


def test_listening_ports_lists_this_process_listeners_only():
    listener = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.1", 0))
    connected = socket.create_connection(other.getsockname())
    try:
        ports = bs.listening_ports(os.getpid())
        assert listener.getsockname()[1] in ports and other.getsockname()[1] in ports
        assert connected.getsockname()[1] not in ports
    finally:
        for s in (connected, other, listener):
            s.close()
    assert bs.listening_ports(2 ** 22 + 1) == []        # no such process


def test_probe_that_disagrees_with_the_mode_fails():
    on = {"gcs": True, "raylet": True, "worker 7:1234": True}
    off = {"gcs": False, "raylet": False, "worker 7:1234": False}
    bs.check_probe(on, tls=True)
    bs.check_probe(off, tls=False)
    with pytest.raises(bs.SecurityMismatch, match="raylet"):
        bs.check_probe(dict(on, raylet=False), tls=True)
    with pytest.raises(bs.SecurityMismatch):
        bs.check_probe(on, tls=False)
    with pytest.raises(bs.SecurityMismatch, match="mode asks"):   # no worker was probed
        bs.check_probe({"gcs": True, "raylet": True}, tls=True)
