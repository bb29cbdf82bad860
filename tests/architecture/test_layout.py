"""The package layout CONTRIBUTING.md describes: no import cycles, and the map matches the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "patchspec"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """patchspec modules that ``path`` imports, anywhere in the file (type-checking blocks and
    function bodies too: an import hidden in a function is still a dependency)."""
    found = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for target in sorted(graph.get(name, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)):
            return cycle
    return None


def test_no_import_cycles():
    table = modules()
    known = set(table)
    # the package root re-exports the public API: a module importing `patchspec` depends on the
    # modules the root imports, which is what a cycle through the root would be made of
    graph = {name: imports_of(path, known) - {name} for name, path in table.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_contributing_map_names_every_package():
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^### `patchspec/([a-z_]+)/`", text, flags=re.M))
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert documented == packages, f"CONTRIBUTING.md maps {sorted(documented)}, the tree has {sorted(packages)}"
    for path in PACKAGE.glob("*/**/*.py"):
        if path.name != "__init__.py":
            assert f"`{path.stem}`" in text, f"CONTRIBUTING.md does not mention {path.relative_to(REPO)}"
    for init in PACKAGE.glob("*/*/__init__.py"):  # a package inside one: named by its path
        folder = init.parent.relative_to(PACKAGE).as_posix()
        assert f"`{folder}/`" in text, f"CONTRIBUTING.md does not mention patchspec/{folder}/"


def test_tests_mirror_the_tree_and_never_import_conftest():
    tests = REPO / "tests"
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    # patchspec/cli.py and patchspec/commands/ (tests/cli runs the commands), the built-in plugins, these checks, data,
    # the attack suite (docs/security.md), the documented commands (docs/)
    extra = {"cli", "plugins", "architecture", "fixtures", "security", "docs"}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders <= packages | extra, f"test folders with no package to mirror: {sorted(folders - packages - extra)}"
    importing = [
        str(p.relative_to(REPO)) for p in tests.rglob("*.py") if "conftest" in {m for _, m in _imported_modules(p)}
    ]
    assert not importing, f"import helpers from tests/helpers.py or patchspec.testing, not conftest: {importing}"


def _imported_modules(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)


def map_order() -> list[str]:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return re.findall(r"^### `patchspec/([a-z_]+)/`", text, flags=re.M)


def test_a_package_imports_only_from_packages_to_its_left():
    order = map_order()
    table = modules()
    known = set(table)
    wrong = []
    for name, path in sorted(table.items()):
        package = name.split(".")[1] if name.count(".") >= 1 else ""
        if package not in order:
            continue  # errors, cli, api, hatch_hook and the root sit at the top
        for target in imports_of(path, known):
            parts = target.split(".")
            if len(parts) >= 2 and parts[1] in order and order.index(parts[1]) > order.index(package):
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports from a package to the right in CONTRIBUTING.md's map: " + ", ".join(wrong)


def test_every_module_the_map_names_exists():
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    sections = re.split(r"^### `patchspec/([a-z_]+)/`", text, flags=re.M)
    missing = []
    for package, body in zip(sections[1::2], sections[2::2]):
        body = body.split("\n## ")[0]
        # a module is named as the subject of a sentence: "`engine` runs", "`batch` uses"
        named = set(re.findall(r"(?:^|[.:;] |, and )`([a-z_]+)` (?:is|[a-z]+s)\b", body, flags=re.M))
        existing = {p.stem for p in (PACKAGE / package).rglob("*.py")}
        missing += [f"patchspec/{package}/{m}.py" for m in sorted(named - existing)]
    assert not missing, f"CONTRIBUTING.md's map names modules that do not exist: {missing}"


def test_every_command_lives_in_commands_and_only_cli_gathers_them():
    """cli.py is the group and the error shell: it defines no command; a command module imports no
    other command (only what they share, ``commands.context``); only cli imports the commands."""
    import click

    from patchspec.cli import cli

    tree = ast.parse((PACKAGE / "cli.py").read_text(encoding="utf-8"))
    decorated = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any("command" in ast.unparse(d) and "group" not in ast.unparse(d) for d in node.decorator_list)
    ]
    assert not decorated, f"commands defined in patchspec/cli.py, not patchspec/commands/: {decorated}"
    for name, command in cli.commands.items():
        assert isinstance(command, click.Command)
        assert command.callback is not None and command.callback.__module__.startswith("patchspec.commands."), name
    table = modules()
    known = set(table)
    shared = {"patchspec.commands", "patchspec.commands.context"}
    wrong = []
    for name, path in sorted(table.items()):
        targets = {t for t in imports_of(path, known) if t.startswith("patchspec.commands")}
        if name.startswith("patchspec.commands."):
            wrong += [f"{name} -> {t}" for t in sorted(targets - shared)]
        elif name != "patchspec.cli":
            wrong += [f"{name} -> {t}" for t in sorted(targets)]
    assert not wrong, "command modules are gathered by patchspec/cli.py alone: " + ", ".join(wrong)


def test_a_package_inside_one_imports_neither_its_siblings_nor_is_imported_by_its_parent():
    """``ort/run/`` and ``ort/lint/`` stand on the modules ``ort/`` keeps for both: the arrows run
    from a package inside one to its parent's own modules, never back up and never across."""
    table = modules()
    known = set(table)
    inner = {module_name(p) for p in PACKAGE.glob("*/*/__init__.py")}

    def inner_of(name: str) -> str | None:
        return next((p for p in inner if name == p or name.startswith(p + ".")), None)

    wrong = []
    for name, path in sorted(table.items()):
        here = inner_of(name)
        for target in imports_of(path, known):
            there = inner_of(target)
            if there is None or there == here:
                continue
            parent = there.rpartition(".")[0]
            in_parent = name == parent or name.rpartition(".")[0] == parent
            in_sibling = here is not None and here.rpartition(".")[0] == parent
            if in_parent or in_sibling:
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports up from a package's own modules, or across to a sibling package: " + ", ".join(wrong)


def test_a_package_init_imports_nothing():
    """A package's ``__init__.py`` is its docstring: nothing is re-exported, so every name is imported
    from the module that defines it (the root and the opt-in test kit are the public API)."""
    public = {PACKAGE / "__init__.py", PACKAGE / "testing" / "__init__.py"}
    importing = [
        str(init.relative_to(REPO))
        for init in sorted(PACKAGE.rglob("__init__.py"))
        if init not in public
        and any(
            isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(init.read_text(encoding="utf-8")))
        )
    ]
    assert not importing, f"a package's __init__.py imports nothing: {importing}"
