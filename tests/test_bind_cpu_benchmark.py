"""benchmarks/bind_cpu.py: the binds it times succeed, and it measures the checkout it is
given (`--root`), not the one it runs from."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*extra):
    out = subprocess.run([sys.executable, os.path.join(HERE, "benchmarks", "bind_cpu.py"),
                          "--dags", "5", "--rounds", "2", "--keys", "12",
                          "--value-bytes", "2000", *extra],
                         capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_three_binds_per_dag_are_timed_on_the_given_checkout():
    got = run("--root", HERE)
    assert got["root"] == HERE and got["dags"] == 5
    assert len(got["rounds_us_per_dag"]) == 2 and got["us_per_dag"] > 0


def test_a_checkout_without_the_cache_is_refused(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(HERE, "benchmarks", "bind_cpu.py"),
                          "--dags", "1", "--rounds", "1", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode != 0 and "hydro_proto" in out.stderr
