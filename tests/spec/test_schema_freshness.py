"""The committed schema is what ``patchspec schema`` prints, and every plugin declares its parameters well."""

from __future__ import annotations

import difflib
import json
from importlib import metadata
from pathlib import Path

import onnx
import pytest

from patchspec.host.installed import BUILTIN_DISTRIBUTION
from patchspec.host.registry import PluginRegistry
from patchspec.spec.catalog import DISABLE_ENV
from patchspec.testing import run_cli, schema_problems

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "specs" / "patchspec.schema.json"


def third_party_names() -> list[str]:
    return sorted(
        {
            ep.name
            for ep in metadata.entry_points(group="patchspec")
            if ep.dist is None or ep.dist.name != BUILTIN_DISTRIBUTION
        }
    )


def regenerate_command() -> str:
    blocked = ",".join(third_party_names())
    prefix = f"{DISABLE_ENV}={blocked} " if blocked else ""
    return f"{prefix}patchspec schema --output specs/patchspec.schema.json"


def test_committed_schema_is_what_patchspec_schema_prints(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, ",".join(third_party_names()))  # the committed file describes built-ins only
    code, printed, stderr = run_cli(["schema"])
    assert code == 0, stderr
    json.loads(printed)
    committed = COMMITTED.read_text(encoding="utf-8") if COMMITTED.is_file() else None
    if (
        committed is not None
        and committed != printed
        and without_newer_dtypes(json.loads(committed)) == json.loads(printed)
    ):
        return  # an older onnx, which knows fewer element types: the committed file is the newest onnx's
    if committed != printed:
        state = "stale" if committed is not None else "missing"
        diff = difflib.unified_diff(
            (committed or "").splitlines(), printed.splitlines(), "committed", "patchspec schema", lineterm=""
        )
        shown = "\n".join(list(diff)[:30])
        pytest.fail(f"specs/patchspec.schema.json is {state}; regenerate with: {regenerate_command()}\n{shown}")


#: element type names patchspec accepts besides onnx's own (TensorProto names, lower-cased)
ALIASES = {"float32", "float64"}


def without_newer_dtypes(schema):
    """The schema with the element type names this onnx does not know taken out of every enum."""
    known = {name.lower() for name in onnx.TensorProto.DataType.keys()}
    if isinstance(schema, dict):
        return {key: without_newer_dtypes(value) for key, value in schema.items()}
    if isinstance(schema, list):
        if "float16" in schema:  # an element-type enum
            return [name for name in schema if name in known or name in ALIASES]
        return [without_newer_dtypes(value) for value in schema]
    return schema


def test_the_committed_schema_has_a_stable_id():
    from patchspec.spec.load import FORMAT_VERSION, SCHEMA_ID

    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert committed["$id"] == SCHEMA_ID and SCHEMA_ID.endswith(f"spec-{FORMAT_VERSION}.schema.json")


def test_every_builtin_plugin_that_exists_loads():
    registry = PluginRegistry.load()
    broken = [
        f"{p.label}: {p.error}"
        for p in registry.plugins
        if p.builtin and p.error and (REPO / "plugins" / f"{p.module.rsplit('.', 1)[-1]}.py").is_file()
    ]
    assert not broken, "\n".join(broken)


def registered_types() -> list[tuple[str, str, type]]:
    registry = PluginRegistry.load()
    return [("patch type", name, cls) for name, cls in sorted(registry.patch_types.items())] + [
        ("verifier", name, cls) for name, cls in sorted(registry.verifiers.items())
    ]


@pytest.mark.parametrize(("kind", "name", "cls"), registered_types(), ids=lambda v: v if isinstance(v, str) else "")
def test_params_schema_is_closed_and_described(kind, name, cls):
    schema = cls.params_schema
    assert isinstance(cls.description, str) and cls.description.strip(), f"{kind} {name!r}: no description"
    assert schema.get("type") == "object", f"{kind} {name!r}: params_schema must be an object schema"
    assert schema.get("additionalProperties") is False, (
        f"{kind} {name!r}: params_schema needs 'additionalProperties': False"
    )
    problems = schema_problems(schema)
    assert not problems, f"{kind} {name!r}:\n" + "\n".join(problems)
    if cls.shorthand is not None:
        assert cls.shorthand in schema["properties"], f"{kind} {name!r}: shorthand {cls.shorthand!r} is not a property"


def test_a_plugin_schema_with_local_defs_still_resolves_in_the_combined_schema():
    import jsonschema

    from patchspec import PatchType, hookimpl
    from patchspec.spec.load import combined_schema
    from patchspec.testing import registered

    class NestedPatch(PatchType):
        name = "nested.fill"
        description = "takes nested lists of numbers"
        shorthand = "value"
        params_schema = {
            "type": "object",
            "$defs": {
                "numbers": {"anyOf": [{"type": "number"}, {"type": "array", "items": {"$ref": "#/$defs/numbers"}}]}
            },
            "properties": {"value": {"$ref": "#/$defs/numbers", "description": "a number or nested lists of them"}},
            "additionalProperties": False,
        }

    class Plugin:
        @staticmethod
        @hookimpl
        def register_patch_types(register):
            register(NestedPatch)

    with registered(Plugin(), name="nested"):
        schema = combined_schema(PluginRegistry.load())
    spec = {"patchspec": 1, "model": "m.onnx", "output": "o.onnx"}
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate({**spec, "patches": [{"nested.fill": {"value": [1, [2, 3]]}}, {"nested.fill": [4]}]})
    assert not validator.is_valid({**spec, "patches": [{"nested.fill": {"value": [1, ["x"]]}}]})
