"""patchspec.interrupts: a signal ends the run as 130/143 whatever the main thread is doing, never as
another module's error, and never in the middle of work that must be whole."""

from __future__ import annotations

import subprocess
import sys

import pytest

from patchspec.errors import Interrupted
from patchspec.interrupts import deferred, handling, received

IMPORT_PROBE = r"""
import os, sys, threading
from patchspec.interrupts import handling
from patchspec.errors import Interrupted
with handling():
    try:
        threading.Timer(float(sys.argv[1]), os.kill, (os.getpid(), 15)).start()
        import onnxruntime, onnx
        threading.Event().wait(10)
        print("not interrupted")
    except Interrupted as exc:
        whole = hasattr(sys.modules["onnxruntime"], "InferenceSession")
        print("interrupted", exc.exit_code, "whole" if whole else "half made")
"""


@pytest.mark.parametrize("delay", [0.02, 0.1, 0.25])
def test_a_signal_during_an_import_waits_until_the_module_is_whole(delay: float) -> None:
    """Raised inside ``import onnxruntime`` the exception came out as 'ImportError: initialization
    failed' (exit 5) and left a module half made (an abort at exit, -6)."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, str(delay)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["interrupted", "143", "whole"], done.stdout + done.stderr


def test_deferred_holds_a_signal_until_the_block_is_done() -> None:
    import os
    import signal

    steps = []
    with handling(), pytest.raises(Interrupted) as raised:
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after the signal, still in the block")
        steps.append("never")
    assert steps == ["after the signal, still in the block"]
    assert raised.value.exit_code == 143


def test_received_names_the_signal_of_the_command_in_progress_only() -> None:
    import os
    import signal

    with handling(), pytest.raises(Interrupted):
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause() if hasattr(signal, "pause") else None
    with handling():
        assert received() is None
