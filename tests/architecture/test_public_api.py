"""The public API: what it exports exists, and the built-in plugins use nothing else of patchspec."""

from __future__ import annotations

import ast
import importlib
import re
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


#: exported though no built-in plugin or example uses it, and why (1.5 deprecated the others)
UNUSED_ON_PURPOSE = {
    "read_tensor": "the one way to read external data through the path policy (docs/external-data.md's example)",
    "use_counts": "what replaces the deprecated uses_of (one pass counts every tensor)",
    "close_matches": "the names themselves, where did_you_mean's sentence does not fit (a list, a table)",
}


def test_every_api_name_is_used_by_a_plugin_or_stated():
    sources = "\n".join(
        path.read_text(encoding="utf-8")
        for folder in (REPO / "plugins", REPO / "examples" / "plugin-acme")
        for path in folder.rglob("*.py")
    )
    unused = [name for name in patchspec.api.__all__ if not re.search(rf"\b{name}\b", sources)]
    assert sorted(unused) == sorted(UNUSED_ON_PURPOSE), f"unused by every plugin: {unused}; deprecate them"


@pytest.mark.parametrize("name", sorted(patchspec.api.DEPRECATED))
def test_a_deprecated_name_still_imports_and_says_what_replaces_it(name):
    assert name not in patchspec.api.__all__
    with pytest.warns(DeprecationWarning, match=rf"patchspec.api.{name} is deprecated .* use "):
        value = getattr(patchspec.api, name)
    module, _ = patchspec.api.DEPRECATED[name]
    assert value is getattr(importlib.import_module(module), name)
    assert name not in (REPO / "patchspec" / "api.pyi").read_text(encoding="utf-8"), "a type checker still sees it"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        patchspec.api.nope  # noqa: B018


@pytest.mark.parametrize("old", sorted(patchspec.api.RENAMED))
def test_a_renamed_name_still_works_and_says_its_new_name(old):
    """1.0's ``api.annotations`` found the ``__future__`` feature ('_Feature' object is not callable)."""
    new = patchspec.api.RENAMED[old]
    with pytest.warns(DeprecationWarning, match=rf"patchspec.api.{old} was renamed {new} .* use {new}"):
        value = getattr(patchspec.api, old)
    assert value is getattr(patchspec.api, new) and callable(value)
    assert old not in patchspec.api.__all__ and old not in vars(patchspec.api)


def _type_checking_names(module) -> dict[str, str]:
    """name -> module of each import a type checker sees: ``if TYPE_CHECKING:`` in ``module``'s source,
    or its ``.pyi`` stub beside it."""
    stub = Path(module.__file__).with_suffix(".pyi")
    tree = ast.parse((stub if stub.exists() else Path(module.__file__)).read_text(encoding="utf-8"))
    statements = list(tree.body) if stub.exists() else []
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            statements += node.body
    names = {}
    for imported in statements:
        if isinstance(imported, ast.ImportFrom):
            for alias in imported.names:
                names[alias.asname or alias.name] = f"{imported.module}.{alias.name}"
    return names


@pytest.mark.parametrize("module", [patchspec, patchspec.api], ids=lambda m: m.__name__)
def test_the_lazy_modules_lists_agree(module):
    """What a type checker sees (the TYPE_CHECKING imports, or the stub), what is imported at run time
    (``_HOME``) and what is public (``__all__``) are one list: ``patchspec.api`` builds the other two
    from its stub; the root writes them three times, and they must not drift."""
    seen = _type_checking_names(module)
    public = set(module.__all__) - {"__version__", "PLUGIN_API"}  # plain constants, not lazy names
    assert set(seen) == public == set(module._HOME), (
        sorted(set(seen) ^ public),
        sorted(set(module._HOME) ^ public),
    )
    for name, home in module._HOME.items():  # the same module in both places
        assert seen[name] in (f"{home}.{name}", home), (name, seen[name], home)


def test_the_api_stub_re_exports_every_name_it_imports():
    """A stub re-exports ``A as A`` only: a bare ``import A`` would hide the name from type checkers."""
    tree = ast.parse((REPO / "patchspec" / "api.pyi").read_text(encoding="utf-8"))
    bare = [
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname != alias.name
    ]
    assert not bare, f"write these as 'NAME as NAME' in patchspec/api.pyi: {bare}"
    assert patchspec.api.__all__[:3] == ["UsageError", "close_matches", "did_you_mean"], "api.pyi's order"
