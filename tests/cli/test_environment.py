"""What the command line sets in its own environment before it imports numpy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import os, sys
from patchspec.cli import main
main(["--version"])
import numpy  # after main, as a command imports it
print("threads=" + str(os.environ.get("OPENBLAS_NUM_THREADS")))
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_openblas_threads_default_to_one_and_a_user_setting_wins(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    assert f"threads={expected}" in done.stdout, done.stdout + done.stderr
