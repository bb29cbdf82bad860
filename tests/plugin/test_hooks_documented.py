"""Every hook is documented in docs/plugins.md (name, exact signature, a runnable example) and tested."""

from __future__ import annotations

import inspect
import re
import sys
import types
from pathlib import Path

import pytest

from patchspec.plugin import hookspecs
from patchspec.testing import make_model, run_spec

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "plugins.md"
TEST_FOLDERS = (REPO / "tests", REPO / "examples" / "plugin-acme" / "tests")


def hook_specs() -> dict[str, object]:
    marker = f"{hookspecs.NAME}_spec"  # pluggy's attribute on functions marked with HookspecMarker
    return {name: fn for name, fn in vars(hookspecs).items() if callable(fn) and hasattr(fn, marker)}


def signature_text(name: str, function) -> str:
    """``register_patch_types(register: Callable[[type], None]) -> None``, as written in hookspecs.py."""
    signature = inspect.signature(function)  # annotations stay strings (from __future__ import annotations)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in signature.parameters.values())
    return f"{name}({params}) -> {signature.return_annotation}"


def doc_section(name: str) -> str:
    """The text under ``### name`` up to the next heading (lines starting with ``#`` in code blocks are not headings)."""
    lines, in_code, section = DOCS.read_text(encoding="utf-8").splitlines(), False, None
    for line in lines:
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            if section is not None:
                break
            if line == f"### {name}":
                section = []
                continue
        if section is not None:
            section.append(line)
    assert section is not None, (
        f"docs/plugins.md has no '### {name}' heading; add one with its signature and an example"
    )
    return "\n".join(section) + "\n"


def test_hookspecs_are_found():
    assert set(hook_specs()) == {"register_patch_types", "register_verifiers"}


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_hook_has_a_heading_with_its_exact_signature(name):
    expected = signature_text(name, hook_specs()[name])
    assert expected in doc_section(name), f"docs/plugins.md '### {name}' must show the signature: {expected}"


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_hook_example_in_the_docs_runs(name, tmp_path, monkeypatch):
    section = doc_section(name)
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    yaml = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(python) == 1 and len(yaml) == 1, f"'### {name}' needs one python example and one yaml spec"
    module = types.ModuleType("example_plugin")
    monkeypatch.setitem(sys.modules, "example_plugin", module)  # imported, as a plugin's module is
    exec(compile(python[0], f"docs/plugins.md ({name})", "exec"), module.__dict__)
    assert hasattr(module, name), f"the example under '### {name}' does not implement {name}"
    run = run_spec(tmp_path, yaml[0], make_model(), plugins=[("example", module)]).assert_success()
    assert "example." in run.stdout


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_hook_is_implemented_by_a_test(name):
    pattern = re.compile(rf"^\s*def {name}\(", re.M)
    users = [
        path
        for folder in TEST_FOLDERS
        for path in folder.rglob("test_*.py")
        if path.name != Path(__file__).name and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert users, f"no test implements the hook {name}; add a test plugin that does"
