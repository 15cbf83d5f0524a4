"""Every example runs to completion on its own LocalCluster (they assert their own results)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(EXAMPLES)
                                        if f.endswith(".py") and not f.startswith("_")))
def test_example_runs(name):
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
