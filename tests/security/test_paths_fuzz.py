"""Specs with hostile paths and names (hypothesis): whatever the spec says, patchspec exits with an
input fault's code (never 5, "a bug"), and nothing outside the repository or inside its ``.git``
changes. 100 examples by default; PATCHSPEC_FUZZ_EXAMPLES sets more."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.testing import run_cli

EXAMPLES = int(os.environ.get("PATCHSPEC_FUZZ_EXAMPLES", "100"))

#: pieces an attacker puts into paths and names
FRAGMENTS = [
    "..",
    ".",
    ".git",
    "config",
    "hooks",
    "out",
    "m.onnx",
    "m.onnx.data",
    "spec.yaml",
    "x.npy",
    ".patchspec.lock",
    ".patchspec-1-x",
    ".o.onnx.patchspec-cache.json",
    "outside",
    "link",
    "a b",
    "$(touch pwned)",
    "#",
    "c:",
    "\\",
    "\n",
    "\t",
    "\x00",
    "\x1b",
    "é",
    "",
    "x.npy;touch pwned;true",
    "a|b",
    "*",
    "pyproject.toml",
    "conftest.py",
    "LICENSE",
    "GNUmakefile",
    ".venv",
    "lib/site-packages",
    "zz.pth",
    "NUL",
]
paths = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=4).map("/".join)
absolute = st.sampled_from(["/dev/zero", "/etc/passwd", "/tmp", "//server/share"])
hostile = st.one_of(paths, absolute)
#: a spec with nothing hostile in it: it must build, or the fuzz run only proves that everything fails
BENIGN = {"model": "m.onnx", "output": "out/o.onnx", "location": "o.w", "file": "x.npy", "name": "x"}


def tree(folder: Path) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            found[str(path)] = os.readlink(path)
        elif path.is_file():
            found[str(path)] = path.read_bytes()
        else:
            found[str(path)] = "dir"
    return found


def make_repo(base: Path) -> Path:
    repo = base / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    weight = numpy_helper.from_array(np.ones((1, 256), np.float32), "w")
    model = graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor_info("x", [1, 256])],
        [tensor_info("y", [1, 256])],
        [weight],
    )
    onnx.save(model, repo / "m.onnx", save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    np.save(repo / "x.npy", np.ones((1, 256), np.float32))
    (base / "outside").mkdir()
    (base / "outside" / "secret").write_bytes(b"secret")
    os.symlink(base / "outside", repo / "link")
    (repo / "pyproject.toml").write_text('[project]\nname = "victim"\n')
    (repo / "LICENSE").write_text("Apache-2.0\n")
    (repo / ".venv" / "lib" / "site-packages").mkdir(parents=True)
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return repo


def created_by_a_build(name: str) -> bool:
    """What a spec may create: a model, a data file, patchspec's bookkeeping (issue 32, item 1)."""
    from patchspec.spec.confine import CACHE_SUFFIX, DATA_SUFFIXES, LOCK_NAME

    return name.endswith((".onnx", CACHE_SUFFIX, *DATA_SUFFIXES)) or name == LOCK_NAME


def quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (escapes for every control character)."""
    out = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in text)
    return f'"{out}"'


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.one_of(st.just("m.onnx"), hostile),
    output=hostile,
    location=st.one_of(st.none(), hostile),
    file=st.one_of(st.none(), hostile),
    name=st.one_of(st.just("x"), hostile),
)
@example(**BENIGN)
def test_hostile_paths_and_names_never_escape_and_never_crash(model, output, location, file, name):
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        repo = make_repo(base)
        patches = [f"  - external_data: {{location: {quoted(location)}}}"] if location is not None else []
        patches.append(f"  - rename_dims: {{tensor: [{quoted(name)}], axes: {{0: B}}}}")
        verify = (
            f"verify:\n  - run: {{cases: [{{inputs: {{x: {{file: {quoted(file)}}}}}}}]}}\n" if file is not None else ""
        )
        text = f"patchspec: 1\nmodel: {quoted(model)}\noutput: {quoted(output)}\npatches:\n" + "\n".join(patches)
        (repo / "spec.yaml").write_text(text + "\n" + verify)
        outside, git, before = tree(base / "outside"), tree(repo / ".git"), tree(repo)
        inputs = {p: (repo / p).read_bytes() for p in ("m.onnx", "m.onnx.data", "x.npy", "spec.yaml")}
        code, _, stderr = run_cli(["apply", str(repo / "spec.yaml"), "--depfile", str(base / "deps.d")], cwd=repo)
        assert code in (0, 1, 2, 3, 4), stderr
        if {"model": model, "output": output, "location": location, "file": file, "name": name} == BENIGN:
            assert code == 0, stderr
        assert tree(base / "outside") == outside
        assert tree(repo / ".git") == git
        assert {p: (repo / p).read_bytes() for p in inputs} == inputs
        assert not (repo / "pwned").exists() and not (base / "pwned").exists()
        after = tree(repo)
        assert {p: after.get(p) for p in before if p != str(repo / "spec.yaml")} == {
            p: v for p, v in before.items() if p != str(repo / "spec.yaml")
        }, "a file that was there before the build changed"
        new = [p for p, v in after.items() if p not in before and v != "dir"]
        assert all(created_by_a_build(Path(p).name) for p in new), new
        assert not any(".venv" in Path(p).parts for p in new), new


@pytest.fixture(autouse=True)
def _no_root_from_the_environment(monkeypatch):
    monkeypatch.delenv("PATCHSPEC_ROOT", raising=False)
