"""The hooks of .pre-commit-hooks.yaml run patchspec commands that exist and behave as the hooks say."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import onnx
import pytest
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
    (tmp_path / ".git").mkdir()  # pre-commit runs in a repository: its top is the project root
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


@pytest.mark.slow
def test_the_hooks_through_the_real_pre_commit_try_repo(tmp_path):
    """pre-commit itself installs patchspec from this repository (its committed HEAD) into a hook
    environment and runs patchspec-validate: a good spec passes, a broken one fails the commit."""
    import shutil
    import subprocess
    import sys

    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent))
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (the test extra installs it)")
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "specs" / "good.yaml").write_text(
        "patchspec: 1\nmodel: ../m.onnx\noutput: ../o.onnx\npatches:\n  - set_batch: 4\n"
    )
    (project / "specs" / "bad.yaml").write_text(
        "patchspec: 1\nmodel: ../m.onnx\noutput: ../o.onnx\npatches:\n  - set_bach: 4\n"
    )
    git = ["git", "-c", "user.email=ci@example.invalid", "-c", "user.name=ci"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "specs"], cwd=project, check=True)
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"))
    run = lambda *files: subprocess.run(
        [pre_commit, "try-repo", str(REPO), "patchspec-validate", "--files", *files],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    good = run("specs/good.yaml")
    assert good.returncode == 0 and "Passed" in good.stdout, good.stdout + good.stderr
    bad = run("specs/bad.yaml")
    assert bad.returncode == 1 and "unknown patch type 'set_bach'" in bad.stdout, bad.stdout + bad.stderr
