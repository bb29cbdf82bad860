"""``acme.strip_doc_strings``: remove the ``doc_string`` fields exporters leave in a model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from patchspec import Param, PatchContext, PatchResult, PatchType

if TYPE_CHECKING:  # in annotations only: `patchspec validate` imports this module, and needs no onnx
    import onnx


class StripDocStringsParams(TypedDict):
    """The params: their type for ``apply`` and, through ``Param``, the schema the spec is checked with."""

    keep_model_doc: Annotated[bool, Param("keep the model's own doc_string (its top-level description)", default=False)]


class StripDocStringsPatch(PatchType[StripDocStringsParams]):
    name = "acme.strip_doc_strings"
    description = "Remove doc_string fields (model, graphs, nodes, tensors, functions) to shrink and anonymise a model."

    def apply(self, model: onnx.ModelProto, params: StripDocStringsParams, context: PatchContext) -> PatchResult:
        keep_model_doc = params["keep_model_doc"]  # the default is filled in
        stripped = 0
        for message in _documented(model, keep_model_doc):
            if message.HasField("doc_string"):  # presence, not truthiness: an empty string is still bytes
                message.ClearField("doc_string")
                stripped += 1
        if not stripped:
            return PatchResult(False, "no doc strings")
        return PatchResult(True, f"removed {stripped} doc string{'s' if stripped != 1 else ''}")


def _documented(model: onnx.ModelProto, keep_model_doc: bool) -> Iterator[Any]:
    """Every message in the model that has a ``doc_string`` field (onnx messages of several types)."""
    if not keep_model_doc:
        yield model
    yield from _graph_items(model.graph)
    for function in model.functions:
        yield function
        for node in function.node:
            yield from _node_items(node)


def _graph_items(graph: onnx.GraphProto) -> Iterator[Any]:
    yield graph
    yield from graph.input
    yield from graph.output
    yield from graph.value_info
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
    for node in graph.node:
        yield from _node_items(node)


def _node_items(node: onnx.NodeProto) -> Iterator[Any]:
    yield node
    for attribute in node.attribute:
        yield attribute
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("g"):
            yield from _graph_items(attribute.g)
        for graph in attribute.graphs:
            yield from _graph_items(graph)
