"""The ``add_input`` patch type: declare a new graph input (values the original export dropped)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, TypedDict

from patchspec import Param, ParamProblem, PatchContext, PatchResult, PatchType, api, hookimpl

if TYPE_CHECKING:  # annotations only: onnx and numpy are imported where a model is patched
    import onnx

_SIZE = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]}


class AddInputParams(TypedDict):
    name: Annotated[str, Param("name of the new input; must not exist in the model", minLength=1)]
    dtype: Annotated[str, Param("element type (int64, float32, ...)", schema={"enum": sorted(api.ELEMENT_TYPES)})]
    shape: Annotated[
        list[int | str],
        Param("sizes: an integer (fixed) or a name (symbolic) per axis; [] for a scalar", items=_SIZE),
    ]


class AddInputPatch(PatchType[AddInputParams]):
    name = "add_input"
    description = (
        "Declare a new graph input, so that expressions can read values the export dropped (Qwen-VL's grid_thw)."
    )

    def check_params(self, params: AddInputParams) -> Iterator[ParamProblem]:
        for index, dim in enumerate(params.get("shape", [])):
            if isinstance(dim, str) and not dim.strip():
                yield ("shape", index), "a symbolic size needs a name, got a blank string"

    def apply(self, model: onnx.ModelProto, params: AddInputParams, context: PatchContext) -> PatchResult:
        from onnx import helper

        name = params["name"]
        existing = _existing_kind(model.graph, name)
        if existing:
            context.fail(f"'{name}' already exists in the model ({existing}); choose another name", key=("name",))
        info = helper.make_tensor_value_info(name, api.ELEMENT_TYPES[params["dtype"]], list(params["shape"]))
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
def register_patch_types(register: Callable[[type], None]) -> None:
    register(AddInputPatch)
