"""A copy of a model for ``init``'s set_batch probe, with the bytes of its large weights left out.

The probe runs set_batch through the engine, which patches a copy of the model and keeps another
to compare with: with weights stored in the file, each probe held two more copies of them (on a
56,000-node LLM export, 111 MiB each). set_batch's evaluation reads the value of a tensor of at
most ``SMALL`` elements only (:mod:`patchspec.shapes.evaluate`), so a larger initializer stored in
the file is given here as an external reference to a file that does not exist: its name, type and
dims stay, its bytes are never copied. Nothing reads it; if something did, it would fail, naming
``NEVER_READ``, rather than give a wrong answer. Initializers already outside the file, and
Constant nodes (their dims come from the attribute), are copied as they are.
"""

from __future__ import annotations

import numpy as np
import onnx
from google.protobuf.message import Message

from patchspec.shapes.kernels import SMALL

#: the data file the stubs name: a reader that follows one fails here, instead of reading weights
NEVER_READ = "patchspec-init-probe-weights-never-read"


def weightless_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every main-graph initializer of more than ``SMALL`` elements stored in the file
    replaced by an external stub of the same name, type and dims; everything else copied."""
    copy = onnx.ModelProto()
    _copy_fields(model, copy, skip="graph")
    _copy_fields(model.graph, copy.graph, skip="initializer")
    for tensor in model.graph.initializer:
        copy.graph.initializer.append(_stub(tensor) if _stored_large(tensor) else tensor)
    return copy


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
    return int(np.prod(tensor.dims, dtype=np.int64)) > SMALL


def _stub(tensor: onnx.TensorProto) -> onnx.TensorProto:
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    stub.data_location = onnx.TensorProto.EXTERNAL
    stub.external_data.add(key="location", value=NEVER_READ)
    return stub


__all__ = ["NEVER_READ", "weightless_copy"]
