"""The `anna` command: `anna demo` exits 0; `anna local` serves and stops cleanly on Ctrl-C."""
import os
import shutil
import signal
import subprocess
import sys

import pytest

import anna_core
from runtime.auth import AuthConfig, AuthenticationRequired

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))


def test_anna_demo_exits_zero():
    # The installed console script when there is one (pip install -e .), else the module.
    command = [shutil.which("anna")] if shutil.which("anna") else [sys.executable, "-m", "anna_core.cli"]
    out = subprocess.run(command + ["demo"], env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "get greeting -> b'hello, anna'" in out.stdout
    assert "demo done" in out.stdout


def test_anna_local_serves_until_interrupted():
    proc = subprocess.Popen([sys.executable, "-m", "anna_core.cli", "local", "--memory-threads", "1"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until the cluster is up (or the command died)
        assert line.startswith("routing: tcp://"), line + proc.stderr.read()
        routing = line.split()[1]
        # authenticated by default: the command says where its keys are and who to be
        for _ in range(20):
            keys = proc.stdout.readline()
            if keys.startswith("keys: ") or not keys:
                break
        assert keys.startswith("keys: "), keys
        key_dir, identity = keys.split()[1], keys.split("'")[1]
        with pytest.raises(AuthenticationRequired):
            anna_core.Client(routing, timeout=3.0)       # no keys: refused at once
        with anna_core.Client(routing, timeout=3.0,
                              auth=AuthConfig(key_dir, identity)) as kvs:
            kvs.put("k", b"v")
            assert kvs.get("k") == b"v"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_anna_local_autoscale_and_anna_status():
    proc = subprocess.Popen([sys.executable, "-m", "anna_core.cli", "local", "--autoscale",
                             "--period", "0.5", "--slo", "5"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for _ in range(20):
            lines.append(proc.stdout.readline())
            if lines[-1].startswith("keys: ") or not lines[-1]:
                break
        routing = lines[0].split()[1]
        monitor = [ln for ln in lines if ln.startswith("monitor: ")]
        assert monitor and "autoscaling on" in monitor[0], lines
        key_dir = lines[-1].split()[1]
        command = [sys.executable, "-m", "anna_core.cli", "status", "--routing", routing,
                   "--key-dir", key_dir]
        from tests.waiting import poll_until
        out = poll_until(lambda: (lambda r: r if r.returncode == 0 else None)(
            subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=30)),
            30, "a status from `anna status`", interval=0.5)
        assert "Anna monitor status" in out.stdout and "memory tier: 1 node(s)" in out.stdout
        assert "SLO 5.0 ms" in out.stdout
        as_json = subprocess.run(command + ["--json"], env=ENV, capture_output=True, text=True,
                                 timeout=30)
        import json
        assert json.loads(as_json.stdout)["autoscaling"] is True
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_anna_status_without_a_monitor_says_so():
    with anna_core.LocalCluster() as cluster:
        out = subprocess.run([sys.executable, "-m", "anna_core.cli", "status", "--routing",
                              cluster.routing_address, "--key-dir", cluster.key_dir],
                             env=ENV, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "no monitor has published a status" in out.stderr
