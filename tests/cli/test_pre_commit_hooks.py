"""The hooks of .pre-commit-hooks.yaml run patchspec commands that exist and behave as the hooks say."""

from __future__ import annotations

import shlex
from pathlib import Path

import onnx
import yaml

from patchspec.testing import make_model

REPO = Path(__file__).resolve().parents[2]


def hooks() -> dict[str, dict]:
    return {hook["id"]: hook for hook in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}


def test_the_hooks_are_declared_for_pre_commit():
    found = hooks()
    assert set(found) == {"patchspec-validate", "patchspec-check"}
    for hook in found.values():
        assert hook["language"] == "python" and hook["entry"].startswith("patchspec ") and hook["files"]


def test_each_hook_entry_runs_on_the_files_pre_commit_passes(tmp_path, run_cli):
    onnx.save(make_model({"x": ("N", 3)}), tmp_path / "m.onnx")
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "m.yaml"
    spec.write_text("patchspec: 1\nmodel: ../m.onnx\noutput: ../out/m.onnx\npatches: [{set_batch: 2}]\n")
    entry = {name: shlex.split(hook["entry"])[1:] for name, hook in hooks().items()}
    assert run_cli(*entry["patchspec-validate"], "specs/m.yaml", cwd=tmp_path).exit_code == 0
    stale = run_cli(*entry["patchspec-check"], "specs/m.yaml", cwd=tmp_path)
    assert stale.exit_code == 6 and "missing" in stale.output  # the hook fails until the output is built
    assert run_cli("apply", "specs/m.yaml", cwd=tmp_path).exit_code == 0
    assert run_cli(*entry["patchspec-check"], "specs/m.yaml", cwd=tmp_path).exit_code == 0
    spec.write_text(spec.read_text().replace("set_batch: 2", "set_batch: {sise: 2}"))  # a typo in a key
    assert run_cli(*entry["patchspec-validate"], "specs/m.yaml", cwd=tmp_path).exit_code == 2
