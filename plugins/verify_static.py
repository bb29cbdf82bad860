"""The ``static`` verifier: every graph input and output (optionally every annotated tensor) has fixed sizes."""

from __future__ import annotations

from patchspec import Verifier, VerifyContext, VerifyResult, hookimpl


class StaticVerifier(Verifier):
    name = "static"
    description = "Every graph input and output has only fixed sizes (optionally every annotated tensor too)."
    params_schema = {
        "type": "object",
        "properties": {
            "value_info": {"type": "boolean",
                           "description": "also check every tensor annotated in the graph's value_info (default false)"},
        },
        "additionalProperties": False,
    }

    def verify(self, params: dict, context: VerifyContext) -> VerifyResult:
        graph = context.model.graph
        groups = [("input", graph.input), ("output", graph.output)]
        if params.get("value_info"):
            groups.append(("value_info", graph.value_info))
        offenders = [line for kind, infos in groups for info in infos if (line := dynamic_axes(kind, info))]
        checked = sum(len(infos) for _, infos in groups)
        scope = "inputs, outputs and annotated tensors" if params.get("value_info") else "inputs and outputs"
        if offenders:
            summary = f"{len(offenders)} of {checked} {scope} are not static: {offenders[0]}"
            hint = "fix them with set_batch (batch) or rename_dims with integer sizes (axes: {2: 640})"
            return VerifyResult("failed", summary, (*offenders, f"hint: {hint}"),
                                {"offenders": offenders, "checked": checked})
        return VerifyResult("passed", f"all {checked} {scope} have fixed sizes", (), {"checked": checked})


def dynamic_axes(kind: str, info) -> str:
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
def register_verifiers(register):
    register(StaticVerifier)
