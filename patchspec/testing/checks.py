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
The plugin is called through ``patchspec.host.boundary``, as in a run: an exception in its code,
or a result the engine would refuse, fails the check with the message a run prints (the plugin's
file and line), its exception chained.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import onnx

from patchspec.errors import PatchError, PluginError
from patchspec.host.boundary import Guard, schema_fault, shorthand_fault
from patchspec.host.registry import origin_of
from patchspec.plugin.contract import (
    PatchResult,
    PatchType,
    Verifier,
    VerifyResult,
)
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


def check_declaration(cls: type[PatchType[Any]] | type[Verifier[Any]]) -> None:
    """A type's name, one-line description and closed, described ``params_schema``."""
    label = f"{cls.__name__}"
    assert isinstance(getattr(cls, "name", None), str) and cls.name, f"{label}: no 'name' (the key users write)"
    description = getattr(cls, "description", None)
    assert isinstance(description, str) and description.strip() and "\n" not in description.strip(), (
        f"{cls.name}: 'description' must be one line ('patchspec plugins' shows it)"
    )
    schema = getattr(cls, "params_schema", None)
    assert isinstance(schema, dict) and schema.get("type") == "object", (
        f"{cls.name}: params_schema is not an object schema"
    )
    fault = schema_fault(cls)  # the registry's check when a plugin loads
    assert fault is None, f"{cls.name}: {fault}"
    problems = schema_problems(schema)
    assert not problems, f"{cls.name}: params_schema is not closed and described:\n" + "\n".join(problems)
    shorthand = shorthand_fault(cls)  # the registry's check when a plugin loads, built-ins included here
    assert shorthand is None, f"{cls.name}: {shorthand}"
    params_type = getattr(cls, "Params", None)
    if params_type is not None:  # the typed params say what the schema says: the same keys
        typed = {key for klass in params_type.__mro__ for key in getattr(klass, "__annotations__", {})}
        declared = set(schema.get("properties", {}))
        assert typed == declared, (
            f"{cls.name}: Params names {sorted(typed - declared)} the schema does not, and "
            f"misses {sorted(declared - typed)}"
        )


F = TypeVar("F", bound=Callable[..., Any])


def _faults_fail(check: F) -> F:
    """A fault the boundary reports (the plugin raised, or broke the contract) fails the check."""

    @functools.wraps(check)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return check(*args, **kwargs)
        except PluginError as fault:
            raise AssertionError(str(fault)) from fault.__cause__

    return checked  # type: ignore[return-value]  # functools.wraps keeps the signature; mypy sees Any


@_faults_fail
def check_patch_type(
    cls: type[PatchType[Any]],
    folder: Path | str,
    *,
    change: Case | None = None,
    noop: Case | None = None,
    refused: Iterable[Case] = (),
) -> None:
    """Check a patch type against the contract on the cases given (give at least one).

    ``change``: an application that changes the model (``modified=True``, bytes differ, the same
    bytes every time). ``noop``: one with nothing to do (``modified=False``, no byte changed).
    ``refused``: applications that must fail through ``context.fail`` (a ``PatchError``, exit 4)
    and leave the model as it was. ``folder`` is the model's folder (external data, files).
    """
    check_declaration(cls)
    assert change or noop or refused, f"{cls.name}: give check_patch_type a change, noop or refused case"
    if change is not None:  # the boundary checks that 'modified' tells the truth
        first, result = _apply(cls, folder, *change)
        assert result.modified, f"{cls.name}: the change case reported modified=False: {result.summary}"
        second, _ = _apply(cls, folder, *change)
        assert _bytes(first) == _bytes(second), f"{cls.name}: the same input gave different bytes on a second run"
    if noop is not None:
        patched, result = _apply(cls, folder, *noop)
        assert not result.modified, f"{cls.name}: the no-op case reported modified=True: {result.summary}"
        assert _bytes(patched) == _bytes(noop[0]), f"{cls.name}: modified=False, but the serialized model changed"
    for case in refused:
        assert isinstance(case, tuple) and len(case) == 2, (
            f"{cls.name}: each refused case is a (model, params) pair, got {type(case).__name__}"
        )
        model, params = case
        copy, checked = _copy(model), _params(cls, params)
        try:
            result, _ = _guard(cls).apply(copy, checked, patch_context(cls.name, checked, model_dir=folder))
        except PatchError:
            assert _bytes(copy) == _bytes(model), f"{cls.name}: a refused application changed the model first"
            continue
        raise AssertionError(
            f"{cls.name}: expected context.fail (exit 4) for params {params!r}, "
            f"got {type(result).__name__}: {getattr(result, 'summary', result)!r}"
        )


@_faults_fail
def check_verifier(
    cls: type[Verifier[Any]],
    folder: Path | str,
    model: onnx.ModelProto,
    params: Any = None,
    *,
    expect: str | None = None,
) -> VerifyResult:
    """Run a verifier on ``model`` (saved as ``folder/model.onnx``, as output and original) and check
    that it returns a verdict (``expect`` it, if given) and changes neither the model nor any file."""
    check_declaration(cls)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    before_files, before_model = _files(folder), _bytes(model)
    checked = _params(cls, params)
    # context.fail is a failed verdict, as the engine records it
    result, _ = _guard(cls).verify(checked, verify_context(cls.name, checked, path, model))
    assert result.status in ("passed", "failed", "skipped"), f"{cls.name}: unknown status {result.status!r}"
    assert isinstance(result.summary, str) and result.summary and "\n" not in result.summary, (
        f"{cls.name}: the summary must be one line"
    )
    assert _bytes(model) == before_model, f"{cls.name}: the verifier changed the model it was given"
    assert _files(folder) == before_files, f"{cls.name}: the verifier changed files next to the model"
    assert expect is None or result.status == expect, (
        f"{cls.name}: expected {expect}, got {result.status}: {result.summary}"
    )
    return result


# -- helpers -------------------------------------------------------------------------------------------
def _guard(cls: type[PatchType[Any]] | type[Verifier[Any]]) -> Guard:
    """``cls`` called through the boundary, as a run calls it, faults named by the plugin that has it."""
    return Guard(cls, origin_of(cls))


def _params(cls: type[PatchType[Any]] | type[Verifier[Any]], params: Any) -> dict[str, Any]:
    """Params as the spec loader hands them over: shorthand expanded, validated by the schema."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        assert getattr(cls, "shorthand", None), f"{cls.name}: {params!r} is not a mapping and there is no shorthand"
        params = {cls.shorthand: params}
    guard = _guard(cls)
    errors = sorted(guard.schema_errors(params), key=str)
    assert not errors, f"{cls.name}: its params_schema rejects {params!r}: {errors[0].message}"
    problems = guard.check_params(params)
    assert not problems, f"{cls.name}: check_params rejects {params!r}: {problems}"
    checked: dict[str, Any] = apply_defaults(cls.params_schema, params)  # as the loader does, after check_params
    return checked


def _apply(
    cls: type[PatchType[Any]], folder: Path | str, model: onnx.ModelProto, params: Any
) -> tuple[onnx.ModelProto, PatchResult]:
    copy, checked = _copy(model), _params(cls, params)
    # the boundary checks the result's type, that 'modified' tells the truth and that no type lost its element type
    result, _ = _guard(cls).apply(copy, checked, patch_context(cls.name, checked, model_dir=folder))
    assert isinstance(result.summary, str) and result.summary and "\n" not in result.summary, (
        f"{cls.name}: the summary must be one line"
    )
    return copy, result


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _bytes(model: onnx.ModelProto) -> bytes:
    data: bytes = model.SerializeToString(deterministic=True)
    return data


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


__all__ = ["check_declaration", "check_patch_type", "check_verifier", "schema_problems"]


def check_types(*paths: str | os.PathLike[str]) -> None:
    """``mypy --strict`` on a plugin's own files: the annotations the docs teach must type-check.

    Needs mypy installed (``pip install mypy``). Only the given files are reported on; patchspec and
    other packages are read for their types. Raises ``AssertionError`` with mypy's lines.
    """
    import patchspec

    package_root = str(Path(patchspec.__file__).resolve().parents[1])  # an editable install is not seen by mypy
    environment = {**os.environ, "MYPYPATH": package_root}
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental"]
    command += ["--ignore-missing-imports", *map(str, paths)]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if result.returncode == 2 and "No module named mypy" in result.stderr:
        raise AssertionError("check_types needs mypy: pip install mypy")
    assert result.returncode == 0, f"mypy --strict {' '.join(map(str, paths))}:\n{result.stdout}{result.stderr}"
