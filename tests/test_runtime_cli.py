"""The command-line conventions both commands share (runtime/cli.py): checked values give one
clear line and exit 2, `--version`, and help that shows every default. Real processes."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*argv):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("argv, complaint", [
    (("cloudburst.cli", "local", "--executor-nodes", "0"), "--executor-nodes: expected a whole number of at least 1, got '0'"),
    (("cloudburst.cli", "local", "--executors-per-node", "two"), "expected a whole number of at least 1, got 'two'"),
    (("cloudburst.cli", "demo", "--log-level", "loud"), "unknown log level 'loud'"),
    (("anna_core.cli", "local", "--nodes", "-1"), "--nodes: expected a whole number of at least 1"),
    (("anna_core.cli", "local", "--startup-timeout", "0"), "expected a number above 0, got '0'"),
    (("anna_core.cli", "local", "--memory-threads", "0", "--disk-threads", "0"),
     "a cluster needs memory_threads > 0 or disk_threads > 0"),
])
def test_bad_values_get_one_clear_line_not_a_traceback(argv, complaint):
    done = run(*argv)
    assert done.returncode == 2, done
    assert complaint in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("module, prog", [("cloudburst.cli", "cloudburst"), ("anna_core.cli", "anna")])
def test_version_and_help_with_defaults(module, prog):
    version = run(module, "--version")
    assert version.returncode == 0 and version.stdout.startswith(f"{prog} ")
    assert version.stdout.split()[1][0].isdigit() or version.stdout.split()[1] == "unknown"
    helped = run(module, "local", "--help")
    assert helped.returncode == 0
    options = [line for line in helped.stdout.splitlines() if line.strip().startswith("--")
               and "--help" not in line and "--version" not in line]
    assert options
    text = helped.stdout.replace("\n", " ")
    for line in options:
        option = line.split()[0]
        assert option in text
    # each default once; none for flags and options without one (None: nothing to show)
    assert text.count("(default:") >= len(options) // 2
    assert "(default: None)" not in text and "(default: False)" not in text
