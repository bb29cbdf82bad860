"""Contract checks a plugin author runs in one line per type, as patchspec runs them on its built-ins.

    from patchspec.testing import check_patch_type, check_verifier

    def test_contract(tmp_path):
        check_patch_type(StripDocStrings, tmp_path,
                         change=(make_model(doc_string="x"), {}),   # an application that changes the model
                         noop=(make_model(), {}))                     # one that has nothing to do

Each check raises ``AssertionError`` naming the promise that broke: a closed, described
``params_schema``; params the schema accepts; ``modified`` that tells the truth; the same bytes
from the same input; a no-op that changes no byte; a refusal that goes through ``context.fail``
(exit 4) and leaves the model as it was; a verifier that changes neither the model nor any file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import onnx

from patchspec.errors import PatchError, VerifierFailed
from patchspec.plugin.contract import (
    PatchResult,
    PatchType,
    Verifier,
    VerifyResult,
)
from patchspec.shapes.annotations import untyped_annotations
from patchspec.spec.load import apply_defaults
from patchspec.testing.contexts import patch_context, verify_context

#: (model, params): params as written in a spec, a mapping or a shorthand value
Case = tuple[onnx.ModelProto, Any]


def schema_problems(schema: Any, path: str = "params") -> list[str]:
    """Where a params schema leaves an object open or a property undescribed."""
    if not isinstance(schema, dict):
        return []
    problems = []
    if "properties" in schema and schema.get("additionalProperties") is not False:
        problems.append(f"{path}: has properties but not 'additionalProperties': false (unknown keys would pass)")
    for key, sub in schema.get("properties", {}).items():
        if not (isinstance(sub, dict) and isinstance(sub.get("description"), str) and sub["description"].strip()):
            problems.append(f"{path}.{key}: no 'description'")
        problems += schema_problems(sub, f"{path}.{key}")
    for keyword in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for index, sub in enumerate(schema.get(keyword, [])):
            problems += schema_problems(sub, f"{path}.{keyword}[{index}]")
    for keyword in ("items", "additionalProperties", "not", "if", "then", "else"):
        problems += schema_problems(schema.get(keyword), f"{path}.{keyword}")
    for keyword in ("$defs", "patternProperties"):
        for name, sub in schema.get(keyword, {}).items():
            problems += schema_problems(sub, f"{path}.{keyword}.{name}")
    return problems


def check_declaration(cls: type[PatchType] | type[Verifier]) -> None:
    """A type's name, one-line description and closed, described ``params_schema``."""
    label = f"{cls.__name__}"
    assert isinstance(getattr(cls, "name", None), str) and cls.name, f"{label}: no 'name' (the key users write)"
    description = getattr(cls, "description", None)
    assert isinstance(description, str) and description.strip() and "\n" not in description.strip(), \
        f"{cls.name}: 'description' must be one line ('patchspec plugins' shows it)"
    schema = getattr(cls, "params_schema", None)
    assert isinstance(schema, dict) and schema.get("type") == "object", f"{cls.name}: params_schema is not an object schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    problems = schema_problems(schema)
    assert not problems, f"{cls.name}: params_schema is not closed and described:\n" + "\n".join(problems)
    shorthand = getattr(cls, "shorthand", None)
    assert shorthand is None or shorthand in schema.get("properties", {}), \
        f"{cls.name}: shorthand {shorthand!r} is not one of its properties"


def check_patch_type(cls: type[PatchType], folder: Path | str, *, change: Case | None = None,
                     noop: Case | None = None, refused: Iterable[Case] = ()) -> None:
    """Check a patch type against the contract on the cases given (give at least one).

    ``change``: an application that changes the model (``modified=True``, bytes differ, the same
    bytes every time). ``noop``: one with nothing to do (``modified=False``, no byte changed).
    ``refused``: applications that must fail through ``context.fail`` (a ``PatchError``, exit 4)
    and leave the model as it was. ``folder`` is the model's folder (external data, files).
    """
    check_declaration(cls)
    assert change or noop or refused, f"{cls.name}: give check_patch_type a change, noop or refused case"
    if change is not None:
        first, result = _apply(cls, folder, *change)
        assert result.modified, f"{cls.name}: the change case reported modified=False: {result.summary}"
        assert _bytes(first) != _bytes(change[0]), f"{cls.name}: modified=True, but no byte of the model changed"
        second, _ = _apply(cls, folder, *change)
        assert _bytes(first) == _bytes(second), f"{cls.name}: the same input gave different bytes on a second run"
    if noop is not None:
        patched, result = _apply(cls, folder, *noop)
        assert not result.modified, f"{cls.name}: the no-op case reported modified=True: {result.summary}"
        assert _bytes(patched) == _bytes(noop[0]), f"{cls.name}: modified=False, but the model changed"
    for case in refused:
        assert isinstance(case, tuple) and len(case) == 2, \
            f"{cls.name}: each refused case is a (model, params) pair, got {type(case).__name__}"
        model, params = case
        copy, checked = _copy(model), _params(cls, params)
        try:
            result = cls().apply(copy, checked, patch_context(cls.name, checked, model_dir=folder))
        except PatchError:
            assert _bytes(copy) == _bytes(model), f"{cls.name}: a refused application changed the model first"
            continue
        raise AssertionError(f"{cls.name}: expected context.fail (exit 4) for params {params!r}, "
                             f"got {type(result).__name__}: {getattr(result, 'summary', result)!r}")


def check_verifier(cls: type[Verifier], folder: Path | str, model: onnx.ModelProto, params: Any = None, *,
                   expect: str | None = None) -> VerifyResult:
    """Run a verifier on ``model`` (saved as ``folder/model.onnx``, as output and original) and check
    that it returns a verdict (``expect`` it, if given) and changes neither the model nor any file."""
    check_declaration(cls)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    before_files, before_model = _files(folder), _bytes(model)
    checked = _params(cls, params)
    try:
        result = cls().verify(checked, verify_context(cls.name, checked, path, model))
    except VerifierFailed as stopped:  # context.fail: a failed verdict, as the engine records it
        result = VerifyResult("failed", stopped.summary, (f"hint: {stopped.hint}",) if stopped.hint else ())
    assert isinstance(result, VerifyResult), f"{cls.name}: verify() returned {type(result).__name__}, not a VerifyResult"
    assert result.status in ("passed", "failed", "skipped"), f"{cls.name}: unknown status {result.status!r}"
    assert isinstance(result.summary, str) and result.summary and "\n" not in result.summary, \
        f"{cls.name}: the summary must be one line"
    assert _bytes(model) == before_model, f"{cls.name}: the verifier changed the model it was given"
    assert _files(folder) == before_files, f"{cls.name}: the verifier changed files next to the model"
    assert expect is None or result.status == expect, f"{cls.name}: expected {expect}, got {result.status}: {result.summary}"
    return result


# -- helpers -------------------------------------------------------------------------------------------
def _params(cls: type[PatchType] | type[Verifier], params: Any) -> dict:
    """Params as the spec loader hands them over: shorthand expanded, validated by the schema."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        assert getattr(cls, "shorthand", None), f"{cls.name}: {params!r} is not a mapping and there is no shorthand"
        params = {cls.shorthand: params}
    errors = sorted(jsonschema.Draft202012Validator(cls.params_schema).iter_errors(params), key=str)
    assert not errors, f"{cls.name}: its params_schema rejects {params!r}: {errors[0].message}"
    problems = list(cls().check_params(params))
    assert not problems, f"{cls.name}: check_params rejects {params!r}: {problems}"
    checked: dict = apply_defaults(cls.params_schema, params)  # as the loader does, after check_params
    return checked


def _apply(cls: type[PatchType], folder: Path | str, model: onnx.ModelProto,
           params: Any) -> tuple[onnx.ModelProto, PatchResult]:
    copy, checked = _copy(model), _params(cls, params)
    result = cls().apply(copy, checked, patch_context(cls.name, checked, model_dir=folder))
    assert isinstance(result, PatchResult), f"{cls.name}: apply() returned {type(result).__name__}, not a PatchResult"
    assert isinstance(result.summary, str) and result.summary and "\n" not in result.summary, \
        f"{cls.name}: the summary must be one line"
    untyped = untyped_annotations(copy)
    assert not untyped, f"{cls.name}: wrote tensor types without an element type: {untyped[:5]}"
    return copy, result


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _bytes(model: onnx.ModelProto) -> bytes:
    data: bytes = model.SerializeToString(deterministic=True)
    return data


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


__all__ = ["check_declaration", "check_patch_type", "check_verifier", "schema_problems"]
