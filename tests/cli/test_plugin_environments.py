"""pre-commit and pipx give patchspec an environment of its own, where a plugin installed beside the
project is not seen (issue 35): a spec that uses a type of a plugin that is not installed fails
naming the plugin, its distribution by convention, and the fix for the environment patchspec ran in.
Each environment is a real interpreter whose ``sys.prefix`` is laid out as that tool lays it out."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import onnx

from patchspec.testing import make_model

SPEC = "patchspec: 1\nmodel: m.onnx\noutput: build/m.onnx\npatches:\n  - stamp.metadata: {}\n"
ERROR = "spec.yaml:5:5: patches[0]: unknown patch type 'stamp.metadata': no installed plugin is named 'stamp'"


def interpreter(prefix: Path) -> Path:
    """A virtual environment at ``prefix`` that sees this test run's packages (patchspec editable)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=120)
    scheme = sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})
    ours = sysconfig.get_paths()["purelib"]
    Path(scheme["purelib"], "outer.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return prefix / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def validate(python: Path, folder: Path, **environ: str) -> str:
    """``patchspec validate spec.yaml`` as that interpreter runs it; its stderr (it must fail with 2)."""
    (folder / ".git").mkdir(parents=True)
    onnx.save(make_model({"x": (1, 3)}), folder / "m.onnx")
    (folder / "spec.yaml").write_text(environ.pop("SPEC_TEXT", SPEC))
    env = {k: v for k, v in os.environ.items() if k not in ("PRE_COMMIT", "PIPX_HOME", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(python), "-m", "patchspec", "validate", "spec.yaml"],
        cwd=folder,
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert ERROR.split(": ", 1)[1] in done.stderr and "did you mean" not in done.stderr, done.stderr
    return done.stderr


def test_in_pipx_the_hint_is_pipx_inject_into_patchspecs_environment(tmp_path):
    python = interpreter(tmp_path / ".local" / "share" / "pipx" / "venvs" / "patchspec")
    stderr = validate(python, tmp_path / "project")
    assert "hint: patchspec runs in the pipx environment 'patchspec'" in stderr
    assert (
        "inject the distribution that provides plugin 'stamp' (patchspec-stamp by convention): pipx inject patchspec patchspec-stamp"
        in stderr
    )


def test_in_pipx_with_its_own_home_the_hint_is_pipx_inject(tmp_path):
    python = interpreter(tmp_path / "tools" / "venvs" / "patchspec-nightly")
    stderr = validate(python, tmp_path / "project", PIPX_HOME=str(tmp_path / "tools"))
    assert "pipx inject patchspec-nightly patchspec-stamp" in stderr


def test_under_pre_commit_the_hint_is_additional_dependencies(tmp_path):
    python = interpreter(tmp_path / "cache" / "repo1a2b3c" / "py_env-python3")  # as pre-commit lays it out
    stderr = validate(python, tmp_path / "project")
    assert "hint: patchspec runs in pre-commit's own environment" in stderr
    assert "add the distribution that provides plugin 'stamp' (patchspec-stamp by convention)" in stderr
    assert "additional_dependencies in .pre-commit-config.yaml" in stderr
    assert "additional_dependencies" in validate(sys.executable, tmp_path / "other", PRE_COMMIT="1")  # `pre-commit run`


def test_in_a_virtual_environment_the_hint_is_pip_install_with_its_python(tmp_path):
    prefix = tmp_path / "venv"
    python = interpreter(prefix)
    stderr = validate(python, tmp_path / "project")
    what = "the distribution that provides plugin 'stamp' (patchspec-stamp by convention)"
    assert f"install {what} in the virtual environment patchspec runs from ({prefix})" in stderr
    assert f"{python} -m pip install patchspec-stamp" in stderr.replace(str(python.resolve()), str(python))


def test_outside_any_environment_the_hint_is_pip_install_with_that_python(tmp_path, monkeypatch):
    """A Python that is no virtual environment (a system or conda Python): its prefix has no pyvenv.cfg."""
    from patchspec.install_advice import install_hint, place

    monkeypatch.delenv("PRE_COMMIT", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "usr"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "usr" / "bin" / "python3"))
    assert place() == "python"
    hint = install_hint("acme_tools")
    assert (
        f"in the Python patchspec runs from ({tmp_path / 'usr'}): {sys.executable} -m pip install patchspec-acme-tools"
        in hint
    )


# -- a spec that names its plugins' distributions (plugins:): the hint names them, not a guess ----------

NAMED = SPEC.replace("patchspec: 1\n", "patchspec: 1\nplugins: [stamp-tools>=1.2]\n")


def test_a_spec_that_names_its_plugin_gets_that_distribution_in_each_environment(tmp_path):
    for python, environ, fix in (
        (interpreter(tmp_path / "pipx" / "venvs" / "patchspec"), {}, "pipx inject patchspec 'stamp-tools>=1.2'"),
        (sys.executable, {"PRE_COMMIT": "1"}, 'additional_dependencies: ["stamp-tools>=1.2"]'),
        (interpreter(tmp_path / "venv"), {}, "-m pip install 'stamp-tools>=1.2'"),
    ):
        folder = tmp_path / f"project-{len(list(tmp_path.iterdir()))}"
        stderr = validate(python, folder, SPEC_TEXT=NAMED, **environ)
        assert "spec.yaml:2:11: plugins[0]: stamp-tools>=1.2 is not installed where patchspec runs" in stderr, stderr
        assert "(this spec's plugins: lists stamp-tools>=1.2, which this environment lacks)" in stderr, stderr
        assert stderr.count(fix) == 1 and "patchspec-stamp" not in stderr, stderr
