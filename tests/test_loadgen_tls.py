"""The native Redis load generator over TLS (`_core.load_redis(tls_ca=...)`), which
benchmarks/kvs.py runs against a Redis with TLS when Anna runs CURVE: it completes requests
against a TLS-only Redis that requires client certificates, and a server it cannot verify or a
missing client certificate is a clear error before any load, never a hang."""
import shutil

import pytest

from anna_core import _core
from benchmarks.bench_security import TlsFiles
from benchmarks.kvs import RedisServer

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None or
                                shutil.which("openssl") is None,
                                reason="needs redis-server and openssl (scripts/install.sh)")

SHORT = dict(clients=4, duration_s=0.3, warmup_s=0.1, keys=200)


@pytest.fixture(scope="module")
def tls_redis():
    server = RedisServer(tls=True)
    yield server
    server.stop()


def test_load_redis_over_mutual_tls_completes_requests(tls_redis):
    result = _core.load_redis("127.0.0.1", tls_redis.port, **SHORT, **tls_redis.load_args())
    assert result["ops"] > 0 and result["errors"] == 0
    assert result["p50_us"] > 0


def test_an_unverifiable_server_is_a_clear_error(tls_redis, tmp_path):
    other = TlsFiles.create(str(tmp_path))  # a CA that did not sign the server's certificate
    with pytest.raises(RuntimeError, match="TLS handshake .* failed"):
        _core.load_redis("127.0.0.1", tls_redis.port, **SHORT, tls_ca=other.ca,
                         tls_cert=other.cert, tls_key=other.key)


def test_without_a_client_certificate_the_server_refuses(tls_redis):
    # Redis requires client certificates; TLS 1.3 reports the refusal on first use.
    with pytest.raises(RuntimeError, match="load_redis: .*(TLS|closed)"):
        _core.load_redis("127.0.0.1", tls_redis.port, **SHORT, tls_ca=tls_redis.tls.ca)


def test_half_given_tls_arguments_are_refused():
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        _core.load_redis("127.0.0.1", 1, **SHORT, tls_ca="ca", tls_cert="c")
