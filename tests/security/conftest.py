"""The repository every attack suite starts from."""

from __future__ import annotations

import pytest
from test_paths import add_model, save_external


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository with a model (its weights in a data file), and an ``outside`` folder beside it."""
    monkeypatch.delenv("PATCHSPEC_ROOT", raising=False)
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    save_external(add_model(), project / "m.onnx")
    outside = tmp_path / "outside"
    (outside / "lib" / "site-packages").mkdir(parents=True)
    (outside / "id_rsa").write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY----- secret")
    return project
