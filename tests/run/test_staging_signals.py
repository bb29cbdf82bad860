"""A signal while the staging folder is made leaves no folder behind. Before, one that arrived after
mkdtemp made it and before Staging recorded it escaped from ``__enter__``, where ``__exit__`` never runs,
and the folder stayed (test_bounds_time's random SIGTERMs found it once in 16 in a clean clone's make test)."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

import patchspec.run.commit as commit
from patchspec.errors import Interrupted
from patchspec.interrupts import handling


def test_a_signal_while_the_folder_is_made_leaves_none(tmp_path: Path, monkeypatch) -> None:
    made = tempfile.mkdtemp

    def made_then_signalled(*args, **kwargs):
        folder = made(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives the moment the folder exists
        return folder

    monkeypatch.setattr(commit.tempfile, "mkdtemp", made_then_signalled)
    output = tmp_path / "out" / "m.onnx"
    with handling(), pytest.raises(Interrupted), commit.Staging(output):
        pass
    assert not (tmp_path / "out").exists(), list((tmp_path / "out").iterdir())
