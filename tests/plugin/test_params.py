"""Params declared once (plugin API 1.2): a TypedDict of ``Annotated[T, Param(...)]`` fields is the
type ``apply``/``verify`` receive, the schema the loader validates with, and the defaults it fills."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import pytest

from patchspec import Param, PatchContext, PatchResult, PatchType, Verifier, VerifyContext, VerifyResult
from patchspec.plugin.params import ParamsDeclarationError, schema_of
from patchspec.testing import check_patch_type, check_types, check_verifier, make_model, run_spec

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plugins" / "docs_plugin.py"


class Inner(TypedDict, total=False):
    """a nested setting"""

    level: Annotated[int, Param("how deep", default=1, minimum=0)]


class Everything(TypedDict, total=False):
    count: Annotated[int, Param("a count", required=True, minimum=1)]
    ratio: Annotated[float, Param("a ratio", default=0.5)]
    name: Annotated[str | None, Param("a name or null")]
    flags: Annotated[list[bool], Param("flags")]
    sizes: Annotated[dict[str, int], Param("sizes by name")]
    mode: Annotated[Literal["a", "b"], Param("a mode", default="a")]
    inner: Annotated[Inner, Param("a nested object")]
    anything: Annotated[Any, Param("anything at all")]
    size: Annotated[
        int | str, Param("a size", schema={"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]})
    ]


def test_each_python_type_reads_as_its_json_schema():
    schema = schema_of(Everything, "everything")
    properties = schema["properties"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["description"] == "everything" and schema["required"] == ["count"]
    assert properties["count"] == {"type": "integer", "minimum": 1, "description": "a count"}
    assert properties["ratio"] == {"type": "number", "description": "a ratio", "default": 0.5}
    assert properties["name"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert properties["flags"]["items"] == {"type": "boolean"} and properties["flags"]["type"] == "array"
    assert properties["sizes"]["additionalProperties"] == {"type": "integer"}
    assert properties["mode"]["enum"] == ["a", "b"] and properties["mode"]["default"] == "a"
    inner = properties["inner"]
    assert inner["additionalProperties"] is False and inner["properties"]["level"]["default"] == 1
    assert "type" not in properties["anything"]
    assert properties["size"]["anyOf"][0] == {"type": "integer", "minimum": 1}


def test_a_total_typeddict_makes_every_key_without_default_required():
    class Total(TypedDict):
        first: Annotated[str, Param("first")]
        second: Annotated[int, Param("second", default=2)]

    assert schema_of(Total)["required"] == ["first"]


def test_a_field_without_param_is_the_plugins_bug_named_by_field():
    class Undescribed(TypedDict, total=False):
        limit: int

    with pytest.raises(ParamsDeclarationError, match=r"Undescribed.limit: declare it as Annotated\[int, Param"):
        schema_of(Undescribed)


def test_a_type_without_a_schema_says_how_to_give_one():
    class Odd(TypedDict, total=False):
        when: Annotated[complex, Param("a complex number")]

    with pytest.raises(ParamsDeclarationError, match=r"Odd.when: complex has no JSON Schema here: give Param"):
        schema_of(Odd)


class CountParams(TypedDict, total=False):
    """Add a doc string that counts."""

    text: Annotated[str, Param("the text", default="hello")]


class CountPatch(PatchType[CountParams]):
    name = "t.count"
    description = "Set the model's doc string."

    def apply(self, model: Any, params: CountParams, context: PatchContext) -> PatchResult:
        if model.doc_string == params["text"]:
            return PatchResult(False, "already set")
        model.doc_string = params["text"]
        return PatchResult(True, f"set to {params['text']!r}")


def test_the_generic_base_gives_params_and_schema_from_one_declaration():
    assert CountPatch.Params is CountParams
    assert CountPatch.params_schema["properties"]["text"]["default"] == "hello"
    assert CountPatch.params_schema["description"] == "Set the model's doc string."
    check_patch_type(CountPatch, _tmp(), change=(make_model(), {}), noop=(make_model(doc_string="hello"), {}))


def test_an_explicit_schema_is_kept():
    explicit = {"type": "object", "properties": {}, "additionalProperties": False}

    class Mine(Verifier[dict[str, Any]]):
        name = "t.mine"
        description = "Mine."
        params_schema = explicit

        def verify(self, params: dict[str, Any], context: VerifyContext) -> VerifyResult:
            return VerifyResult("passed", "ok")

    assert Mine.params_schema is explicit and Mine.Params is None
    check_verifier(Mine, _tmp(), make_model(), {})


def _tmp() -> Path:
    import tempfile

    return Path(tempfile.mkdtemp())


def _docs_plugin() -> Any:
    spec = importlib.util.spec_from_file_location("docs_plugin", FIXTURE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_plugin"] = module
    spec.loader.exec_module(module)
    return module


def test_a_plugin_written_as_the_docs_teach_runs_with_defaults_filled(tmp_path):
    plugin = _docs_plugin()
    run = run_spec(
        tmp_path,
        "patches:\n  - demo.rename_ops: {op_type: Relu}\nverify:\n  - demo.has_op: Relu\n",
        make_model(depth=2),
        plugins=[("demo", plugin)],
    )
    run.assert_success()
    assert "renamed 2 nodes" in run.stdout
    refused = run_spec(tmp_path, "patches:\n  - demo.rename_ops: {prefix: x}\n", plugins=[("demo", plugin)])
    refused.assert_failed(2)
    assert "patches[0] (demo.rename_ops): 'op_type' is required" in refused.output


@pytest.mark.skipif(
    shutil.which("mypy") is None and importlib.util.find_spec("mypy") is None, reason="mypy is not installed"
)
def test_a_plugin_written_as_the_docs_teach_passes_mypy_strict():
    check_types(FIXTURE)


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_check_types_fails_on_a_wrong_annotation(tmp_path):
    wrong = tmp_path / "wrong_plugin.py"
    wrong.write_text(
        FIXTURE.read_text().replace('f"renamed {count} nodes")', 'f"renamed {count} nodes", details=params["prefix"])')
    )
    with pytest.raises(AssertionError, match=r"wrong_plugin\.py"):
        check_types(wrong)
