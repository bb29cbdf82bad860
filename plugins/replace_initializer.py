"""The ``replace_initializer`` patch type: give a constant a new value, or compute it at run time.

Targets an initializer or a Constant node's output by name (every use), or one input of each
selected node (only that use is rewired when the constant is shared). The replacement is either a
literal ``value`` (element count and dtype checked) or a ``shape``: ITEMs compiled to ONNX ops by
:mod:`patchspec.shapes.compiler`. Constants left unused are removed; shapes are re-derived.

This module is what a spec may say; the work is ``plugins/_replace_constants.py``, imported when a
model is patched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from patchspec import Param, ParamProblem, PatchContext, PatchResult, PatchType, api, hookimpl

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.10
    from typing_extensions import NotRequired

if TYPE_CHECKING:  # annotations only: the work, in _replace_constants, imports onnx and numpy
    import onnx

#: a value's element type: any but string (a shape or weight value is numeric)
DTYPES = {name: value for name, value in api.ELEMENT_TYPES.items() if name != "string"}

# no $ref: the fragment is embedded in the combined schema, where a local $defs would not resolve
NUMBERS = {"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "array", "minItems": 1}]}


class ReplaceInitializerParams(TypedDict):
    initializer: NotRequired[
        Annotated[
            str,
            Param("name of an initializer or of a Constant node's output; every use is replaced", minLength=1),
        ]
    ]
    select: NotRequired[
        Annotated[
            dict[str, Any],
            Param(
                "nodes whose input 'input' is replaced (only those uses)",
                schema={key: value for key, value in api.SELECTOR_SCHEMA.items() if key != "description"},
            ),
        ]
    ]
    input: NotRequired[Annotated[int, Param("with 'select': which input of each selected node", minimum=0)]]
    value: NotRequired[
        Annotated[
            Any, Param("new value: a number or a (nested) list; same element count as the original", schema=NUMBERS)
        ]
    ]
    dtype: NotRequired[
        Annotated[str, Param("element type of 'value' (default: the original's)", schema={"enum": sorted(DTYPES)})]
    ]
    shape: NotRequired[
        Annotated[
            list[int | str],
            Param(
                "an int64 1-D tensor computed at run time: integers and expressions (docs/expressions.md)",
                schema={
                    "type": "array",
                    "minItems": 1,
                    "items": {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]},
                },
            ),
        ]
    ]


class ReplaceInitializerPatch(PatchType[ReplaceInitializerParams]):
    name = "replace_initializer"
    description = (
        "Replace a constant (initializer or Constant output) with a new value or a shape computed at run time."
    )

    def check_params(self, params: ReplaceInitializerParams) -> Iterator[ParamProblem]:
        if ("initializer" in params) == ("select" in params):
            yield (), "give either 'initializer: NAME' or 'select' with 'input: INDEX'"
        if "select" in params and "input" not in params:
            yield ("select",), "'select' needs 'input: INDEX' (which input of each selected node to replace)"
        if "input" in params and "select" not in params:
            yield ("input",), "'input' goes with 'select'; for a named constant use 'initializer: NAME' alone"
        if ("value" in params) == ("shape" in params):
            yield (), "give either 'value: [...]' or 'shape: [ITEM, ...]'"
        if "dtype" in params and "shape" in params:
            yield ("dtype",), "'dtype' goes with 'value'; a computed 'shape' is always int64"
        if "select" in params:
            for key, message in api.check_selector(params["select"]):
                yield ("select", *key), message
        if "value" in params:
            problem = _value_problem(params["value"])
            if problem:
                yield ("value",), problem
        for index, item in enumerate(params.get("shape", [])):
            problem = api.expressions.check(item) if isinstance(item, str) else None
            if problem:
                yield ("shape", index), problem

    def apply(self, model: onnx.ModelProto, params: ReplaceInitializerParams, context: PatchContext) -> PatchResult:
        from ._replace_constants import replace_constants

        return replace_constants(model, params, context)


def _value_problem(value: Any) -> str | None:
    shape = api.value_shape(value)  # None: ragged, or not numbers
    if shape is None or 0 in shape:
        return "'value' must be a number or a rectangular (nested) list of numbers"
    return None


@hookimpl
def register_patch_types(register: Callable[[type], None]) -> None:
    register(ReplaceInitializerPatch)
