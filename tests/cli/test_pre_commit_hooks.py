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


CONFIG = """\
repos:
  - repo: {repo}
    rev: {rev}
    hooks:
      - id: patchspec-validate
        files: ^specs/(good|bad|acme)\\.yaml$
      - id: patchspec-validate
        alias: validate-with-acme
        files: ^specs/(acme|stamp)\\.yaml$
        additional_dependencies: [{acme}]
"""


@pytest.mark.slow
def test_the_hooks_through_the_real_pre_commit_with_and_without_a_plugin(tmp_path):
    """pre-commit itself installs patchspec from this repository (its committed HEAD) into a hook
    environment and runs patchspec-validate: a good spec passes, a broken one fails the commit; a spec
    that uses the example plugin fails with the additional_dependencies hint in the hook's own
    environment and passes in the one that lists the plugin (docs/build-systems.md#pre-commit)."""
    import shutil
    import subprocess
    import sys

    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent))
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (the test extra installs it)")
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    head = "patchspec: 1\nmodel: ../m.onnx\noutput: ../o.onnx\npatches:\n"
    (project / "specs" / "good.yaml").write_text(head + "  - set_batch: 4\n")
    (project / "specs" / "bad.yaml").write_text(head + "  - set_bach: 4\n")
    (project / "specs" / "acme.yaml").write_text(head + "  - acme.strip_doc_strings: {}\n")
    (project / "specs" / "stamp.yaml").write_text(head + "  - stamp.metadata: {}\n")
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    config = CONFIG.format(repo=REPO, rev=rev.stdout.strip(), acme=REPO / "examples" / "plugin-acme")
    (project / ".pre-commit-config.yaml").write_text(config)
    git = ["git", "-c", "user.email=ci@example.invalid", "-c", "user.name=ci"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "specs"], cwd=project, check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PRE_COMMIT", "VIRTUAL_ENV")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "cache")

    def run(hook: str, *files: str) -> subprocess.CompletedProcess[str]:
        command = [pre_commit, "run", hook, "--files", *files]
        return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=600)

    good = run("patchspec-validate", "specs/good.yaml")
    assert good.returncode == 0 and "Passed" in good.stdout, good.stdout + good.stderr
    bad = run("patchspec-validate", "specs/bad.yaml")
    assert bad.returncode == 1 and "unknown patch type 'set_bach'" in bad.stdout, bad.stdout + bad.stderr
    missing = run("patchspec-validate", "specs/acme.yaml")
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert "unknown patch type 'acme.strip_doc_strings': no installed plugin is named 'acme'" in missing.stdout
    assert (
        "add the distribution that provides plugin 'acme' (patchspec-acme by convention) to the patchspec hook's"
        in missing.stdout
    )
    with_acme = run("validate-with-acme", "specs/acme.yaml")
    assert with_acme.returncode == 0 and "Passed" in with_acme.stdout, with_acme.stdout + with_acme.stderr
    stamp = run("validate-with-acme", "specs/stamp.yaml")  # another plugin, still missing there
    assert stamp.returncode == 1 and "additional_dependencies" in stamp.stdout, stamp.stdout + stamp.stderr
