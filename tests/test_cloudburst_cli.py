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

import cloudburst

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def test_cloudburst_local_prints_a_usable_address_and_stops_on_sigterm(tmp_path):
    log_dir = str(tmp_path / "logs")
    with socket.socket() as s:           # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "cloudburst.cli", "local",
                             "--executors-per-node", "1", "--log-dir", log_dir,
                             "--port", str(port)],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=_env(), cwd=ROOT, text=True)
    try:
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()
        address, seen = None, []
        while address is None:
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                raise AssertionError(f"no address printed within 60 s: {seen}")
            seen.append(line)
            if line.startswith("scheduler 0:"):
                address = line.split(":", 1)[1].strip()
        assert address == f"tcp://127.0.0.1:{port}"
        with cloudburst.Client(address, timeout=10) as client:
            client.register(lambda lib, x: x + 1, "inc")
            assert client.call("inc", 1).get(timeout=10) == 2
            client.register(lambda lib, x: print(f"printing {x}") or x, "printer")
            assert client.call("printer", 7).get(timeout=10) == 7
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
