"""The ``static`` verifier: every graph input and output (optionally every annotated tensor) has fixed sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypedDict

from patchspec import Param, Verifier, VerifyContext, VerifyResult, api, hookimpl

if TYPE_CHECKING:  # annotations only: onnx and numpy are imported where a model is patched
    import onnx


class StaticParams(TypedDict):
    """The params as ``verify`` receives them; ``Param`` makes the schema the spec is checked with."""

    value_info: Annotated[
        bool, Param("also check every tensor annotated in the graph's value_info (default false)", default=False)
    ]


class StaticVerifier(Verifier[StaticParams]):
    name = "static"
    description = "Every graph input and output has only fixed sizes (optionally every annotated tensor too)."

    def verify(self, params: StaticParams, context: VerifyContext) -> VerifyResult:
        graph = context.model.graph
        groups = [("input", graph.input), ("output", graph.output)]
        if params["value_info"]:
            groups.append(("value_info", graph.value_info))
        offenders = [line for kind, infos in groups for info in infos if (line := dynamic_axes(kind, info))]
        checked = sum(len(infos) for _, infos in groups)
        scope = "inputs, outputs and annotated tensors" if params["value_info"] else "inputs and outputs"
        if offenders:
            summary = f"{len(offenders)} of {checked} {scope} are not static: {offenders[0]}"
            return VerifyResult(
                "failed", summary, (*offenders, *_hint(context.model)), {"offenders": offenders, "checked": checked}
            )
        return VerifyResult("passed", f"all {checked} {scope} have fixed sizes", (), {"checked": checked})


def _hint(model: onnx.ModelProto) -> tuple[str, ...]:
    """What makes the model static, only where it can work.

    A symbolic input dim: set_batch (axis 0) or a rename_dims with a size, listed before set_batch, so
    that set_batch re-derives the outputs from the fixed input. With every input fixed, an output
    whose size ONNX's inference cannot derive gets the exact rename_dims lines, from the sizes the
    model computes at those inputs (evaluated on the graph, no weights read).
    """
    inputs = api.fed_inputs(model.graph)
    loose = [
        (name, axis)
        for name, info in inputs.items()
        for axis, dim in enumerate(api.read_dims(info) or [])
        if not isinstance(dim, int)
    ]
    if loose:
        lines = ", ".join(f"{name}[{axis}]" for name, axis in loose)
        return (
            f"hint: give the input dims sizes ({lines}): set_batch for a batch on axis 0, and rename_dims with "
            "the tensor and a size per axis for any other, listed before set_batch, so that set_batch derives "
            "the outputs from the fixed inputs",
        )
    fixes = _output_fixes(model, inputs)
    if not fixes:
        return (
            "hint: the inputs are fixed, but the outputs' sizes cannot be derived from the graph alone "
            "(they depend on data): declare them with rename_dims if you know them",
        )
    return (
        "hint: the inputs are fixed; ONNX's inference cannot derive these outputs' sizes, which the graph "
        "gives at those inputs: add to the end of patches:",
        *fixes,
    )


def _output_fixes(model: onnx.ModelProto, inputs: dict[str, onnx.ValueInfoProto]) -> list[str]:
    """The rename_dims lines that give each output not declared fixed the sizes the graph computes at
    the fixed inputs (evaluated on the graph, no weights read); none for an output the graph leaves open."""
    point = {
        name: api.Known(
            info.type.tensor_type.elem_type, tuple(d if isinstance(d, int) else None for d in api.read_dims(info) or ())
        )
        for name, info in inputs.items()
    }
    evaluator = api.ShapeEvaluator(model, [point]).run()
    fixes = []
    for info in model.graph.output:
        dims = api.read_dims(info)
        found = evaluator.at(info.name)[0] if info.name in evaluator.known else None
        if found is None or found.shape is None or not found.full:
            continue
        if dims is not None and all(isinstance(d, int) for d in dims):
            continue
        axes: dict[str | int, api.FlowValue] = {axis: int(size or 0) for axis, size in enumerate(found.shape)}
        fixes.append(api.spec_lines(api.SpecFix("rename_dims", (("tensor", info.name), ("axes", axes)))))
    return fixes


def dynamic_axes(kind: str, info: onnx.ValueInfoProto) -> str:
    """``input 'x' [N, 3, ?, 640]: axis 0 is 'N', axis 2 is unknown`` or '' when every size is fixed."""
    tensor_type = info.type.tensor_type if info.type.HasField("tensor_type") else None
    if tensor_type is None:
        return ""  # sequences, maps and optionals carry no tensor shape to check
    if not tensor_type.HasField("shape"):
        return f"{kind} '{info.name}': no shape (unknown rank)"
    dims, problems = [], []
    for axis, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            dims.append(str(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            dims.append(dim.dim_param)
            problems.append(f"axis {axis} is '{dim.dim_param}'")
        else:
            dims.append("?")
            problems.append(f"axis {axis} is unknown")
    if not problems:
        return ""
    return f"{kind} '{info.name}' [{', '.join(dims)}]: {', '.join(problems)}"


@hookimpl
def register_verifiers(register: Callable[[type], None]) -> None:
    register(StaticVerifier)
