"""The public API: what it exports exists, and the built-in plugins use nothing else of patchspec."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import patchspec
import patchspec.api

REPO = Path(__file__).resolve().parents[2]
PUBLIC = {"patchspec", "patchspec.api"}


def patchspec_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, module) for line, module in found if module == "patchspec" or module.startswith("patchspec.")]


@pytest.mark.parametrize("path", sorted((REPO / "plugins").glob("*.py")), ids=lambda p: p.name)
def test_builtin_plugins_import_only_the_public_api(path):
    internal = [f"{path.name}:{line}: {module}" for line, module in patchspec_imports(path) if module not in PUBLIC]
    assert not internal, "built-ins are examples to copy; import these from patchspec.api instead:\n" + "\n".join(
        internal
    )


def test_example_plugin_imports_only_the_public_api():
    paths = sorted((REPO / "examples" / "plugin-acme").rglob("*.py"))
    internal = [
        f"{p.relative_to(REPO)}:{line}: {module}"
        for p in paths
        for line, module in patchspec_imports(p)
        if module not in PUBLIC | {"patchspec.testing"}
    ]
    assert not internal, "\n".join(internal)


@pytest.mark.parametrize("module", [patchspec, patchspec.api], ids=lambda m: m.__name__)
def test_every_exported_name_exists_and_is_documented(module):
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    for name in module.__all__:
        assert hasattr(module, name), f"{module.__name__}.__all__ lists {name}, which it does not define"
        if name != "__version__":
            assert f"`{name}`" in text, f"docs/api.md does not document {module.__name__}.{name}"


def test_the_contract_carries_no_plugin_specific_state():
    fields = set(patchspec.PatchContext.__dataclass_fields__)
    assert fields == {"spec", "step", "model_dir", "state"}, fields


def test_the_test_kit_docs_name_everything_the_kit_exports():
    import patchspec.testing

    text = (REPO / "docs" / "plugins.md").read_text(encoding="utf-8")
    undocumented = [name for name in patchspec.testing.__all__ if f"`{name}" not in text]
    assert not undocumented, f"docs/plugins.md (section 5) does not mention: {undocumented}"
