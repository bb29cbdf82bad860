"""``acme.max_nodes``: fail when the patched model has more nodes than a budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypedDict

from patchspec import Param, Verifier, VerifyContext, VerifyResult

if TYPE_CHECKING:  # in annotations only: `patchspec validate` imports this module, and needs no onnx
    import onnx


class MaxNodesParams(TypedDict):
    """The params: their type for ``verify`` and, through ``Param``, the schema the spec is checked with."""

    limit: Annotated[int, Param("the most nodes the output may have", minimum=0)]
    subgraphs: Annotated[bool, Param("also count nodes inside If/Loop/Scan bodies", default=True)]


class MaxNodesVerifier(Verifier[MaxNodesParams]):
    name = "acme.max_nodes"
    description = "Fail when the output has more than 'limit' nodes (a budget for slim deployment models)."
    shorthand = "limit"  # acme.max_nodes: 100  means  acme.max_nodes: {limit: 100}

    def verify(self, params: MaxNodesParams, context: VerifyContext) -> VerifyResult:
        limit = params["limit"]
        count = count_nodes(context.model.graph, params["subgraphs"])  # the default is filled in
        data = {"nodes": count, "limit": limit}
        if count > limit:
            summary = f"{count} nodes, over the limit of {limit} by {count - limit}"
            return VerifyResult("failed", summary, ("remove nodes or raise 'limit' in the spec",), data)
        return VerifyResult("passed", f"{count} nodes (limit {limit})", data=data)


def count_nodes(graph: onnx.GraphProto, subgraphs: bool) -> int:
    count = len(graph.node)
    if not subgraphs:
        return count
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                count += count_nodes(attribute.g, subgraphs)
            count += sum(count_nodes(g, subgraphs) for g in attribute.graphs)
    return count
