"""docs/reference/ is what docs/reference/generate.py writes, and documents every built-in type's parameters."""

from __future__ import annotations

import difflib
import importlib.util
import re
from importlib import metadata
from pathlib import Path

import pytest

from patchspec.host.installed import BUILTIN_DISTRIBUTION
from patchspec.host.registry import PluginRegistry
from patchspec.spec.catalog import DISABLE_ENV

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "docs" / "reference"
REGENERATE = "regenerate with: .venv/bin/python docs/reference/generate.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("patchspec_reference_generate", REFERENCE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = load_generator()


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return generate.render_all()


def builtin_types(monkeypatch) -> list[tuple[str, str, type]]:
    """Every built-in (kind, name, class), found here independently of the generator."""
    third_party = sorted(
        {
            ep.name
            for ep in metadata.entry_points(group="patchspec")
            if ep.dist is None or ep.dist.name != BUILTIN_DISTRIBUTION
        }
    )
    monkeypatch.setenv(DISABLE_ENV, ",".join(third_party))
    registry = PluginRegistry.load()
    found = []
    for kind, table in (("patch type", registry.patch_types), ("verifier", registry.verifiers)):
        for name, cls in sorted(table.items()):
            owner = registry.owner(kind, name)
            if owner is not None and owner.builtin:
                found.append((kind, name, cls))
    return found


def table_keys(page: str) -> list[str]:
    """The keys in the first column of the table under '## Parameters'."""
    section = page.split("\n## Parameters\n", 1)
    assert len(section) == 2, "the page has no '## Parameters' section"
    body = section[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", body, re.M)


def test_committed_reference_is_what_the_generator_writes(rendered):
    on_disk = generate.on_disk()
    problems = generate.differences(rendered, on_disk)
    if problems:
        shown = []
        for line in problems:
            path = line.split("docs/reference/", 1)[1]
            if line.startswith("stale:"):
                diff = difflib.unified_diff(
                    on_disk[path].splitlines(),
                    rendered[path].splitlines(),
                    f"docs/reference/{path}",
                    "generated",
                    lineterm="",
                    n=1,
                )
                shown += list(diff)[:20]
        pytest.fail("docs/reference is out of date; " + REGENERATE + "\n" + "\n".join(problems + shown), pytrace=False)


def test_check_mode_agrees_and_writes_nothing(rendered, capsys):
    before = {
        path: path_.stat().st_mtime_ns for path, path_ in ((p, REFERENCE / p) for p in rendered) if path_.is_file()
    }
    code = generate.main(["--check"])
    output = capsys.readouterr().out
    assert code == (1 if generate.differences(rendered, generate.on_disk()) else 0), output
    after = {path: (REFERENCE / path).stat().st_mtime_ns for path in before}
    assert before == after


def test_the_output_does_not_depend_on_the_machine(rendered):
    again = generate.render_all()
    assert again == rendered
    text = "\n".join(rendered.values())
    assert str(REPO) not in text and "site-packages" not in text
    assert all(page.startswith(generate.BANNER + "\n") for page in rendered.values())
    assert not any(path.startswith("patches/acme.") or path.startswith("verifiers/acme.") for path in rendered)


def test_every_builtin_type_has_a_page_listing_every_parameter(rendered, monkeypatch):
    types = builtin_types(monkeypatch)
    assert types, "no built-in patch types or verifiers were found"
    index = rendered["README.md"]
    for kind, name, cls in types:
        path = f"{'patches' if kind == 'patch type' else 'verifiers'}/{name}.md"
        assert path in rendered, f"{kind} {name!r} has no page docs/reference/{path}"
        assert f"[`{name}`]({path})" in index, f"docs/reference/README.md does not link {kind} {name!r}"
        page = rendered[path]
        keys = table_keys(page)
        properties = list(cls.params_schema.get("properties", {}))
        missing = [key for key in properties if key not in keys]
        assert not missing, f"docs/reference/{path}: the parameter table lacks {missing}"
        if not properties:
            assert f"`- {name}: {{}}`" in page
        if cls.shorthand:
            assert "## Shorthand" in page and f"`{name}: {cls.shorthand.upper()}`" in page
    expected = {f"{'patches' if kind == 'patch type' else 'verifiers'}/{name}.md" for kind, name, _ in types}
    assert set(rendered) - {"README.md"} == expected, "pages of types that are not built-ins"


def test_a_schema_is_rendered_readably():
    class Example:
        __doc__ = """Do the example thing.

        More about it, which the page leaves to the guide.
        """
        name = "example"
        description = "ignored: the docstring wins"
        shorthand = "size"
        params_schema = {
            "type": "object",
            "$defs": {"dim": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]}},
            "properties": {
                "size": {
                    "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "minLength": 1}],
                    "description": "the size | or a name",
                },
                "mode": {"enum": ["fast", "slow"], "default": "fast", "description": "how <fast>"},
                "version": {"const": 2, "description": "always 2"},
                "dtype": {
                    "enum": [
                        "bool",
                        "float",
                        "float16",
                        "float32",
                        "int32",
                        "int64",
                        "int8",
                        "uint8",
                        "double",
                        "float64",
                    ],
                    "description": "element type",
                },
                "dims": {"type": "array", "items": {"$ref": "#/$defs/dim"}, "minItems": 1, "description": "sizes"},
                "compare": {
                    "type": "object",
                    "description": "how to compare",
                    "properties": {
                        "split_batch": {
                            "anyOf": [
                                {"type": "boolean"},
                                {
                                    "type": "object",
                                    "properties": {"axis": {"type": "integer", "description": "the axis"}},
                                    "additionalProperties": False,
                                },
                            ],
                            "description": "split it",
                        },
                        "rtol": {"type": "number", "minimum": 0, "maximum": 1, "description": "tolerance"},
                    },
                    "required": ["rtol"],
                    "additionalProperties": False,
                },
                "cases": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "inputs": {
                                "type": "object",
                                "additionalProperties": {"type": "integer"},
                                "description": "shapes",
                            }
                        },
                        "required": ["inputs"],
                        "additionalProperties": False,
                    },
                    "description": "cases",
                },
            },
            "required": ["size"],
            "additionalProperties": False,
        }

    page = generate.render_page("patch type", "example", Example, "patches")
    assert page.startswith(generate.BANNER + "\n\n# `example` (patch type)\n\nDo the example thing.\n")
    assert "More about it" not in page and "ignored" not in page
    rows = {key: line for line in page.splitlines() for key in re.findall(r"^\| `([^`]+)` \|", line)}
    assert list(rows) == [
        "size",
        "mode",
        "version",
        "dtype",
        "dims",
        "compare",
        "compare.split_batch",
        "compare.split_batch.axis",
        "compare.rtol",
        "cases",
        "cases[].inputs",
    ]
    assert rows["size"] == "| `size` | integer ≥ 1 or non-empty string | required | the size \\| or a name |"
    assert rows["mode"] == "| `mode` | one of `fast`, `slow` | default `fast` | how &lt;fast> |"
    assert "| `2` |" in rows["version"]
    assert (
        "element type in lower case: `bool`, `float16`, `float32`" in rows["dtype"]
        and "(not `string`)" in rows["dtype"]
    )
    assert "non-empty list of (integers ≥ 0 or non-empty strings)" in rows["dims"]
    assert "boolean or object (keys below)" in rows["compare.split_batch"]
    assert "| number from 0 to 1 | required |" in rows["compare.rtol"]
    assert "mapping {key: integer}" in rows["cases[].inputs"]
    assert "`example: SIZE` is short for `example: {size: SIZE}`" in page
