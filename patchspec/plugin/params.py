"""A plugin's params declared once: a ``TypedDict`` whose fields carry their JSON Schema.

The ``TypedDict`` is what ``apply``/``verify`` receive and what a type checker reads; each field's
``Annotated[..., Param(...)]`` says its description, default and any constraint the Python type
cannot say. :func:`schema_of` turns the declaration into the ``params_schema`` fragment, so the
schema, the type and the defaults cannot disagree::

    class MaxNodesParams(TypedDict):
        limit: Annotated[int, Param("the most nodes the output may have", minimum=0)]
        subgraphs: Annotated[bool, Param("also count If/Loop/Scan bodies", default=True)]
        note: NotRequired[Annotated[str, Param("a line for the report")]]

The ``TypedDict`` is total (the default): a key the spec must give and a key with a ``default``
(the loader fills it in) are both there when ``apply``/``verify`` run, so ``params["subgraphs"]``
type-checks under mypy and pyright; a key that may be absent is ``NotRequired`` (read it with
``params.get``). Since plugin API 1.5 ``NotRequired``/``Required`` are read under
``from __future__ import annotations`` too.

Python types map to JSON Schema as ``int`` -> integer, ``float`` -> number, ``str``, ``bool``,
``None`` -> null, ``list[T]`` -> array, ``dict[str, T]`` -> object, ``Literal[...]`` -> enum,
``A | B`` -> anyOf, a nested ``TypedDict`` -> a closed object, ``Any`` -> anything. Since plugin API 1.2.
"""

from __future__ import annotations

import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

_MISSING: Any = object()


@dataclass(frozen=True)
class Param:
    """How one field of a params ``TypedDict`` reads in the schema.

    ``description`` is required (every field says what it is for); ``default`` is filled in by the
    loader before ``apply``/``verify`` run; ``required`` marks a key the spec must give (a key a
    ``total=True`` TypedDict or ``Required[...]`` declares is required too); ``schema`` replaces the
    schema the Python type gives (for what the type cannot say, like ``anyOf`` branches with their
    own constraints); any other keyword is a JSON Schema keyword added to it (``minimum=1``).
    """

    description: str
    default: Any = _MISSING
    required: bool = False
    schema: dict[str, Any] | None = None
    keywords: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        description: str,
        *,
        default: Any = _MISSING,
        required: bool = False,
        schema: dict[str, Any] | None = None,
        **keywords: Any,
    ) -> None:
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "required", required)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "keywords", keywords)


class ParamsDeclarationError(TypeError):
    """A params ``TypedDict`` that cannot be turned into a schema: the plugin's bug, named by field."""


def is_params_declaration(value: object) -> bool:
    """Whether ``value`` is a ``TypedDict`` class (what ``PatchType[P]`` takes)."""
    return isinstance(value, type) and issubclass(value, dict) and hasattr(value, "__total__")


def schema_of(params: type, description: str = "") -> dict[str, Any]:
    """The JSON Schema object for a params ``TypedDict`` (``additionalProperties: false``)."""
    return _object_schema(params, description or _doc(params))


def _object_schema(params: type, description: str) -> dict[str, Any]:
    hints = _hints(params)
    required_keys = set(getattr(params, "__required_keys__", ()))
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, hint in hints.items():
        annotation, declared, marker = _unwrap(hint)
        if declared is None:
            msg = f"{params.__qualname__}.{key}: declare it as Annotated[{_name(annotation)}, Param('what it is for')]"
            raise ParamsDeclarationError(msg)
        properties[key] = _field_schema(params, key, annotation, declared)
        # the marker first: with ``from __future__ import annotations`` Python before 3.14 cannot see a
        # NotRequired/Required in the class's own __required_keys__
        needed = marker == "Required" or (marker is None and key in required_keys)
        if declared.required or (needed and declared.default is _MISSING):
            required.append(key)
    schema: dict[str, Any] = {"type": "object"}
    if description:
        schema["description"] = description
    schema["properties"] = properties
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _field_schema(params: type, key: str, annotation: Any, declared: Param) -> dict[str, Any]:
    try:
        schema = dict(declared.schema) if declared.schema is not None else _type_schema(annotation)
    except ParamsDeclarationError as error:
        raise ParamsDeclarationError(f"{params.__qualname__}.{key}: {error}") from None
    schema.update(declared.keywords)
    schema["description"] = declared.description
    if declared.default is not _MISSING:
        schema["default"] = declared.default
    return schema


def _type_schema(annotation: Any) -> dict[str, Any]:
    annotation, _, _ = _unwrap(annotation)
    if annotation is Any or annotation is object:
        return {}
    if annotation is type(None) or annotation is None:
        return {"type": "null"}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation in simple:
        return {"type": simple[annotation]}
    if is_params_declaration(annotation):
        return _object_schema(annotation, _doc(annotation))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin is Union or origin is types.UnionType:
        return {"anyOf": [_type_schema(arg) for arg in args]}
    if origin in (list, tuple, typing.Sequence, _abc("Sequence")) and args:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin in (dict, typing.Mapping, _abc("Mapping")) and len(args) == 2:
        if args[0] is not str:
            raise ParamsDeclarationError(f"a mapping's keys are strings in YAML and JSON, not {_name(args[0])}")
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    msg = f"{_name(annotation)} has no JSON Schema here: give Param(..., schema={{...}})"
    raise ParamsDeclarationError(msg)


def _unwrap(hint: Any) -> tuple[Any, Param | None, str | None]:
    """(the type, its Param, "Required" or "NotRequired" when the field says so) of a field's annotation."""
    declared, marker = None, None
    while True:
        origin = typing.get_origin(hint)
        if origin is typing.Annotated:
            args = typing.get_args(hint)
            declared = next((a for a in args[1:] if isinstance(a, Param)), declared)
            hint = args[0]
        elif origin is not None and getattr(origin, "_name", None) in ("Required", "NotRequired"):
            marker = marker or origin._name
            hint = typing.get_args(hint)[0]
        else:
            return hint, declared, marker


def _hints(params: type) -> dict[str, Any]:
    module = sys.modules.get(params.__module__)
    namespace = dict(vars(module)) if module else {}
    try:
        return typing.get_type_hints(params, globalns=namespace, include_extras=True)
    except NameError as error:
        msg = f"{params.__qualname__}: a field's type names something not imported at module level ({error})"
        raise ParamsDeclarationError(msg) from None


def _doc(params: type) -> str:
    doc = params.__doc__ or ""
    return " ".join(doc.split()) if doc and not doc.startswith(f"{params.__name__}(") else ""


def _abc(name: str) -> Any:
    import collections.abc

    return getattr(collections.abc, name)


def _name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation)


__all__ = ["Param", "ParamsDeclarationError", "is_params_declaration", "schema_of"]
