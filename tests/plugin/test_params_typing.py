"""The typed-params pattern (plugin API 1.5): a total ``TypedDict``, ``NotRequired`` for a key that may be
absent. Its schema says the same as its type, and a plugin written so type-checks under pyright as under
mypy (``params["key"]`` on a ``total=False`` TypedDict is pyright's ``reportTypedDictNotRequiredAccess``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, NotRequired, Required, TypedDict

import pytest

from patchspec import Param, PatchType, StepType, Verifier
from patchspec.plugin.params import schema_of

REPO = Path(__file__).resolve().parents[2]
DOCS_PLUGIN = REPO / "tests" / "fixtures" / "plugins" / "docs_plugin.py"
ACME = REPO / "examples" / "plugin-acme" / "patchspec_acme"
PYRIGHT = shutil.which("pyright") or (str(Path(sys.executable).parent / "pyright"))


class Total(TypedDict):
    size: Annotated[int, Param("given by the spec")]
    label: Annotated[str, Param("filled in", default="x")]
    note: NotRequired[Annotated[str, Param("may be absent")]]


class Partial(TypedDict, total=False):
    size: Required[Annotated[int, Param("given by the spec")]]
    note: Annotated[str, Param("may be absent")]


def test_a_total_typeddict_requires_its_keys_without_a_default_and_not_the_notrequired_ones():
    # this module has `from __future__ import annotations`: Python 3.11 lists `note` in __required_keys__
    assert schema_of(Total)["required"] == ["size"]
    assert schema_of(Total)["properties"]["label"]["default"] == "x"
    assert schema_of(Partial)["required"] == ["size"]


def test_patch_types_and_verifiers_share_one_base():
    class Patch(PatchType[Total]):
        name, description = "demo.patch", "a patch"

    class Check(Verifier[Total]):
        name, description = "demo.check", "a verifier"

    for cls in (Patch, Check):
        assert issubclass(cls, StepType)
        assert cls.Params is Total
        assert cls.params_schema["required"] == ["size"]
    assert not issubclass(Check, PatchType) and not issubclass(Patch, Verifier)
    assert PatchType.check_params is Verifier.check_params is StepType.check_params


def _pyright(*paths: Path) -> subprocess.CompletedProcess[str]:
    command = [PYRIGHT, "--pythonpath", sys.executable, *map(str, paths)]
    return subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)


needs_pyright = pytest.mark.skipif(not Path(PYRIGHT).exists(), reason="pyright is not installed (the lint extra)")


@needs_pyright
def test_the_docs_plugin_and_the_example_pass_pyright():
    done = _pyright(DOCS_PLUGIN, ACME)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_pyright
def test_pyright_rejects_the_total_false_pattern_the_docs_no_longer_teach(tmp_path):
    old = tmp_path / "old_plugin.py"
    old.write_text(
        DOCS_PLUGIN.read_text().replace(
            "class RenameOpsParams(TypedDict):", "class RenameOpsParams(TypedDict, total=False):"
        )
    )
    done = _pyright(old)
    assert done.returncode == 1, done.stdout
    assert "reportTypedDictNotRequiredAccess" in done.stdout and "old_plugin.py" in done.stdout, done.stdout
