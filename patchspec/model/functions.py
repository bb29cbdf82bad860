"""Model-local functions (``ModelProto.functions``) expanded where a patch must follow shapes through them.

torch.onnx's TorchScript exporter with ``export_modules_as_functions``, onnxscript and some
optimizers write a layer as a model-local function that the graph calls by name. patchspec's
evaluation stops at such a call (the function has no operator schema), so a constant after it (a
``Reshape [1, -1, 8]`` that bakes the batch) could not be decided, and set_batch wrote it unchanged.
onnx's own inliner expands every call, recursively; the model computes the same without them.
"""

from __future__ import annotations

import onnx
import onnx.inliner

from patchspec.model.graph import all_graphs


def local_function_calls(model: onnx.ModelProto) -> dict[str, int]:
    """How many nodes, in the graph and every body, call each model-local function, by its name."""
    defined = {(function.domain, function.name) for function in model.functions}
    calls: dict[str, int] = {}
    if not defined:
        return calls
    for graph in all_graphs(model.graph):
        for node in graph.node:
            if (node.domain, node.op_type) in defined:
                calls[node.op_type] = calls.get(node.op_type, 0) + 1
    return calls


def inline_local_functions(model: onnx.ModelProto) -> dict[str, int]:
    """Expand, in place, every call of a model-local function (onnx's inliner); returns the calls
    expanded by function name (empty: the model calls none, and is left as it is)."""
    calls = local_function_calls(model)
    if calls:
        model.CopyFrom(onnx.inliner.inline_local_functions(model))
    return calls


__all__ = ["inline_local_functions", "local_function_calls"]
