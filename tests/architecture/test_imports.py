"""Each command imports only what it needs: run in a fresh interpreter, the heavy libraries a command
does not use must not be in ``sys.modules`` when it ends (issue 26: a no-op build runs patchspec once
per spec, so every import is paid 50 times)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from patchspec.testing import SPEC_HEADER, make_model, run_spec

HEAVY = ("onnx", "onnxruntime", "numpy", "jsonschema")
#: what the command runs, and what it must not import (jsonschema: the schemas validate needs)
CASES = {
    "--version": (["--version"], HEAVY),
    "--help": (["--help"], HEAVY),
    "apply --help": (["apply", "--help"], HEAVY),
    "validate": (["validate", "spec.yaml"], ("onnx", "onnxruntime", "numpy")),
    "apply, up to date": (["apply", "spec.yaml"], HEAVY),
    "apply --check, up to date": (["apply", "--check", "spec.yaml"], HEAVY),
}

PROBE = """
import json, sys
from patchspec.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if "." not in m)}))
"""


def imported_by(argv: list[str], cwd: Path) -> tuple[int, set[str], str]:
    """Run ``patchspec ARGV`` in a fresh interpreter: its exit code, top-level modules and output."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, capture_output=True, text=True, check=False)
    last = json.loads(done.stdout.strip().splitlines()[-1])
    return last["code"], set(last["modules"]), done.stdout + done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A spec whose output is built and up to date, with the plugins a real spec uses."""
    folder = tmp_path_factory.mktemp("built")
    run_spec(folder, "patches:\n  - set_batch: 2\nverify:\n  - check: {}\n", make_model()).assert_success()
    return folder


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_command_imports_no_heavy_library_it_does_not_need(case, built, tmp_path):
    argv, forbidden = CASES[case]
    cwd = built
    if case == "validate":  # patchspec's own path: the loader and the schemas, no plugin step
        cwd = tmp_path
        (tmp_path / "spec.yaml").write_text(SPEC_HEADER + "patches: []\nverify: []\n", encoding="utf-8")
    code, modules, output = imported_by(argv, cwd)
    assert code == 0, output
    if case.endswith("up to date"):
        assert "up to date" in output, output
    found = sorted(set(forbidden) & modules)
    assert not found, f"patchspec {' '.join(argv)} imported {found}"


#: one step of every built-in type, each with the params its checks read (selectors, values, cases)
EVERY_BUILTIN = """patches:
  - set_batch: 2
  - rename_dims: {select: {op_type: Relu}, axes: {0: N}}
  - replace_initializer: {initializer: w, value: [[1, 2], [3, 4]]}
  - add_input: {name: extra, dtype: int64, shape: [2]}
  - external_data: {location: model.onnx.data}
verify:
  - check: {}
  - static: {}
  - lint: {inputs: {x: [2, 3]}}
  - run: {cases: [{inputs: {x: {shape: [2, 3], fill: ones}}}], compare: {rtol: 0.001}}
"""


@pytest.mark.parametrize("steps", ["patches:\n  - set_batch: 2\nverify:\n  - check: {}\n", EVERY_BUILTIN])
def test_validate_with_the_builtin_plugins_imports_no_onnx(steps, tmp_path):
    """validate reads each built-in's schema and checks: neither onnx, numpy nor onnxruntime is imported."""
    (tmp_path / "spec.yaml").write_text(SPEC_HEADER + steps, encoding="utf-8")
    code, modules, output = imported_by(["validate", "spec.yaml"], tmp_path)
    assert code == 0, output
    assert not {"onnx", "onnxruntime", "numpy"} & modules, sorted({"onnx", "onnxruntime", "numpy"} & modules)


def test_validate_still_checks_what_the_builtins_check(tmp_path):
    """Light does not mean lax: a bad selector, a ragged value and a bad case are still found."""
    bad = EVERY_BUILTIN.replace("op_type: Relu", "op_type: 're:('").replace("[[1, 2], [3, 4]]", "[[1, 2], [3]]")
    bad = bad.replace("fill: ones", "fill: onse")
    (tmp_path / "spec.yaml").write_text(SPEC_HEADER + bad, encoding="utf-8")
    code, modules, output = imported_by(["validate", "spec.yaml"], tmp_path)
    assert code == 2, output
    for expected in ("invalid regular expression", "rectangular", "unknown fill 'onse'"):
        assert expected in output, output
    assert not {"onnx", "onnxruntime", "numpy"} & modules


ROOT_PROBE = """
import json, sys
import patchspec
before = set(sys.modules)
from patchspec import *  # noqa: F403
print(json.dumps({
    "before": sorted(m for m in before if m.startswith("patchspec")),
    "after": sorted(m for m in sys.modules if m.startswith("patchspec")),
    "undir": sorted(set(patchspec.__all__) - set(dir(patchspec))),
}))
"""


def test_the_root_imports_its_public_names_on_first_use():
    """``import patchspec`` imports none of the modules behind its public names; each name is there."""
    done = subprocess.run([sys.executable, "-c", ROOT_PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["before"] == ["patchspec"], seen["before"]
    assert "patchspec.plugin.contract" in seen["after"], seen["after"]
    assert seen["undir"] == [], f"names in patchspec.__all__ that dir(patchspec) lacks: {seen['undir']}"


API_PROBE = """
import json, sys
import patchspec.api
before = sorted(m for m in sys.modules if m.startswith("patchspec"))
names = list(patchspec.api.__all__)
patchspec.api.read_dims
print(json.dumps({"before": before, "names": len(names), "heavy": sorted(set(sys.modules) & {"onnx", "numpy"}),
                  "after": sorted(m for m in sys.modules if m.startswith("patchspec"))}))
"""


def test_the_api_builds_its_names_from_the_stub_and_imports_none_until_used():
    """``import patchspec.api`` reads api.pyi (text, no ``ast``) and imports no module behind a name."""
    done = subprocess.run([sys.executable, "-c", API_PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(done.stdout)
    assert seen["before"] == ["patchspec", "patchspec.api"], seen["before"]
    assert seen["names"] > 50, seen
    assert "patchspec.shapes.annotations" in seen["after"], seen["after"]
