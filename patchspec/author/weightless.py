"""A copy of a model for ``init``'s set_batch probe, with the bytes of its large weights left out.

The probe runs set_batch through the engine, which patches a copy of the model and keeps another
to compare with: with weights stored in the file, each probe held two more copies of them (on a
56,000-node LLM export, 111 MiB each). set_batch's evaluation reads the value of a tensor of at
most ``SMALL`` elements only (:mod:`patchspec.shapes.evaluate`); its other readers of constants read
indices (Gather, GatherND, ScatterND), a recurrent op's initial state, and shape operands. So an
initializer is stubbed only when it is larger than ``SMALL``, stored in the file, and read only as a
weight (``WEIGHT_OPERANDS``: a MatMul's or a Conv's operand, an embedding table, a normalization's
scale...): it becomes an external reference to a file that does not exist, with its name, type and
dims, and its bytes are never copied. Any other initializer, and every Constant node, is copied
as it is. Should a reader follow a stub, it finds no data (as for any external tensor) rather
than a wrong value.
"""

from __future__ import annotations

import math

import onnx
from google.protobuf.message import Message

from patchspec.author.init_case import all_nodes
from patchspec.shapes.annotations import external_stub
from patchspec.shapes.kernels import SMALL

#: the data file the stubs name: a reader that follows one fails here, instead of reading weights
NEVER_READ = "patchspec-init-probe-weights-never-read"


#: the operands that take a weight, by op (None: every operand); a tensor read anywhere else is kept
WEIGHT_OPERANDS: dict[str, frozenset[int] | None] = {
    **dict.fromkeys(("MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "PRelu", "MatMulInteger"), None),
    **dict.fromkeys(("Conv", "ConvTranspose"), frozenset({1, 2})),
    "Gather": frozenset({0}),  # the table, not the indices
    **dict.fromkeys(("BatchNormalization",), frozenset({1, 2, 3, 4})),
    **dict.fromkeys(("LayerNormalization", "InstanceNormalization"), frozenset({1, 2})),
    **dict.fromkeys(("LSTM", "GRU", "RNN"), frozenset({1, 2, 3})),  # W, R, B: not the initial state
    "DequantizeLinear": frozenset({0}),
    "Where": frozenset({1, 2}),
}


def weightless_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every main-graph initializer of more than ``SMALL`` elements, stored in the
    file and read only as a weight, replaced by an external stub of the same name, type and dims;
    everything else copied."""
    copy = onnx.ModelProto()
    _copy_fields(model, copy, skip="graph")
    _copy_fields(model.graph, copy.graph, skip="initializer")
    large = {tensor.name for tensor in model.graph.initializer if _stored_large(tensor)}
    weights = large - _read_otherwise(model, large) if large else set()
    for tensor in model.graph.initializer:
        copy.graph.initializer.append(external_stub(tensor, NEVER_READ) if tensor.name in weights else tensor)
    return copy


def _read_otherwise(model: onnx.ModelProto, names: set[str]) -> set[str]:
    """Those of ``names`` that some node (in any graph) reads other than as a weight, or that are
    graph outputs."""
    found = {info.name for info in model.graph.output} & names
    for node in all_nodes(model.graph):
        default = node.domain in ("", "ai.onnx")
        allowed = WEIGHT_OPERANDS.get(node.op_type, frozenset()) if default else frozenset()
        for operand, name in enumerate(node.input):
            if name in names and allowed is not None and operand not in allowed:
                found.add(name)
    return found


def _copy_fields(source: Message, target: Message, skip: str) -> None:
    """Every field set in ``source`` but ``skip``, copied into ``target`` (field by field: no
    intermediate copy of the message)."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if isinstance(value, Message):
            getattr(target, field.name).CopyFrom(value)
        elif isinstance(value, (str, bytes, int, float)):
            setattr(target, field.name, value)
        else:  # a repeated field (protobuf's containers, whatever its release calls them)
            getattr(target, field.name).extend(value)


def _stored_large(tensor: onnx.TensorProto) -> bool:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return False
    return math.prod(int(d) for d in tensor.dims) > SMALL  # exact: dims from a file never wrap around


__all__ = ["NEVER_READ", "weightless_copy"]
