"""The ``add_input`` patch type: declare a new graph input (values the original export dropped)."""

from __future__ import annotations

from typing import TypedDict

import onnx
from onnx import helper

from patchspec import PatchResult, PatchType, hookimpl
from patchspec.api import ELEMENT_TYPES as DTYPES


class AddInputParams(TypedDict, total=False):
    """The params as ``apply``/``verify`` receive them (schema defaults filled in); the test kit checks
    its keys against ``params_schema``."""

    name: str
    dtype: str
    shape: list[int | str]


class AddInputPatch(PatchType):
    Params = AddInputParams
    name = "add_input"
    description = (
        "Declare a new graph input, so that expressions can read values the export dropped (Qwen-VL's grid_thw)."
    )
    params_schema = {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "description": "name of the new input; must not exist in the model",
            },
            "dtype": {"enum": sorted(DTYPES), "description": "element type (int64, float32, ...)"},
            "shape": {
                "type": "array",
                "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]},
                "description": "sizes: an integer (fixed) or a name (symbolic) per axis; [] for a scalar",
            },
        },
        "required": ["name", "dtype", "shape"],
        "additionalProperties": False,
    }

    def check_params(self, params: dict):
        for index, dim in enumerate(params.get("shape", [])):
            if isinstance(dim, str) and not dim.strip():
                yield ("shape", index), "a symbolic size needs a name, got a blank string"

    def apply(self, model: onnx.ModelProto, params: AddInputParams, context) -> PatchResult:
        name = params["name"]
        existing = _existing_kind(model.graph, name)
        if existing:
            context.fail(f"'{name}' already exists in the model ({existing}); choose another name", key=("name",))
        info = helper.make_tensor_value_info(name, DTYPES[params["dtype"]], list(params["shape"]))
        model.graph.input.append(info)
        shape = "[" + ", ".join(str(d) for d in params["shape"]) + "]"
        return PatchResult(True, f"added input '{name}' {params['dtype']} {shape}")


def _existing_kind(graph: onnx.GraphProto, name: str) -> str | None:
    if any(v.name == name for v in graph.input):
        return "a graph input"
    if any(t.name == name for t in graph.initializer):
        return "an initializer"
    producer = next((n for n in graph.node if name in n.output), None)
    if producer is not None:
        return f"output of node '{producer.name}' ({producer.op_type})"
    if any(v.name == name for v in graph.output):
        return "a graph output"
    return None


@hookimpl
def register_patch_types(register):
    register(AddInputPatch)
