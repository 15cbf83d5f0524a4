"""`cloudburst local` runs in the foreground, prints an address a Client can use, and stops on
SIGTERM; `cloudburst demo` runs the example. Real processes."""
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import cloudburst

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _read_until(proc, prefix, timeout=60):
    """The lines `proc` printed up to and including the first starting with `prefix`."""
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
    seen = []
    while not seen or not seen[-1].startswith(prefix):
        try:
            seen.append(lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no {prefix!r} line printed within {timeout} s: {seen}")
    return seen


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_cloudburst_local_prints_a_usable_address_and_stops_on_sigterm(tmp_path):
    log_dir = str(tmp_path / "logs")
    key_dir = str(tmp_path / "keys")
    made = subprocess.run([sys.executable, "-m", "cloudburst.cli", "keys", key_dir,
                           "--client", "alice"], capture_output=True, text=True, env=_env(),
                          cwd=ROOT, timeout=60)
    assert made.returncode == 0, made.stderr
    with socket.socket() as s:           # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "cloudburst.cli", "local",
                             "--executors-per-node", "1", "--log-dir", log_dir,
                             "--port", str(port), "--key-dir", key_dir],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=_env(), cwd=ROOT, text=True)
    try:
        seen = _read_until(proc, "status with:")
        address = next(l for l in seen if l.startswith("scheduler 0:")).split(":", 1)[1].strip()
        # the address carries the scheduler's key; the output says how a client connects
        assert address.startswith(f"tcp://127.0.0.1:{port}#k=")
        text = "".join(seen)
        assert f"keys: {key_dir}" in text and "'client:alice'" in text, text
        with pytest.raises(cloudburst.AuthenticationRequired):
            cloudburst.Client(address, timeout=10)
        auth = cloudburst.AuthConfig(key_dir, "client:alice")
        with cloudburst.Client(address, timeout=10, auth=auth) as client:
            client.register(lambda lib, x: x + 1, "inc")
            assert client.call("inc", 1).get(timeout=10) == 2
            client.register(lambda lib, x: print(f"printing {x}") or x, "printer")
            assert client.call("printer", 7).get(timeout=10) == 7
        status = subprocess.run([sys.executable, "-m", "cloudburst.cli", "status", address,
                                 "--key-dir", key_dir, "--client", "alice"],
                                capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "authentication on" in status.stdout and "1 live worker" in status.stdout
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        # the logs outlive the cluster, and `cloudburst logs` finds the function's output
        shown = subprocess.run([sys.executable, "-m", "cloudburst.cli", "logs", "printer",
                                "--log-dir", log_dir], capture_output=True, text=True,
                               env=_env(), cwd=ROOT, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "printer: printing 7" in shown.stdout and "call " in shown.stdout
        other = subprocess.run([sys.executable, "-m", "cloudburst.cli", "logs", "inc",
                                "--log-dir", log_dir], capture_output=True, text=True,
                               env=_env(), cwd=ROOT, timeout=60)
        assert "printing" not in other.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_cloudburst_demo():
    out = subprocess.run([sys.executable, "-m", "cloudburst.cli", "demo"], capture_output=True,
                         text=True, env=_env(), cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "-> 16" in out.stdout
    assert "causal call_dag('increment_store', x=4) -> 5, stored 5" in out.stdout


@pytest.mark.slow     # about 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_cloudburst_local_without_auth_warns_loudly_and_serves_plain_clients():
    helped = subprocess.run([sys.executable, "-m", "cloudburst.cli", "local", "--help"],
                            capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=60)
    assert "--key-dir" in helped.stdout and "--no-auth" in helped.stdout
    proc = subprocess.Popen([sys.executable, "-m", "cloudburst.cli", "local",
                             "--executors-per-node", "1", "--no-auth"],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=_env(), cwd=ROOT, text=True)
    try:
        seen = _read_until(proc, "connect with:")
        text = "".join(seen)
        assert "WARNING: authentication is OFF: anyone who can reach these ports can" in text
        assert text.lower().count("authentication is off") == 1, text   # warned once
        address = next(l for l in seen if l.startswith("scheduler 0:")).split(":", 1)[1].strip()
        assert "#k=" not in address
        with cloudburst.Client(address, timeout=10) as client:
            client.register(lambda lib, x: x * 3, "triple")
            assert client.call("triple", 2).get(timeout=10) == 6
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
