"""What ``patchspec plan`` shows besides the patches: each graph input's and output's shape, before
and after (``[N, 3, ?, ?]``), with the element type where a patch changed it."""

from __future__ import annotations

import onnx

from patchspec.shapes.annotations import format_dims, read_dims
from patchspec.shapes.batch.axes import fed_inputs


def io_changes(before: onnx.ModelProto, after: onnx.ModelProto) -> list[tuple[str, str, str, str]]:
    """(``inputs`` or ``outputs``, name, before, after) for every graph input that must be fed and
    every output: the shape (``[N, 3, ?, ?]``), with the element type where a patch changed it;
    ``-`` where the tensor is not there on that side."""
    rows = []
    for section, read in (
        ("inputs", lambda m: fed_inputs(m.graph)),
        ("outputs", lambda m: {info.name: info for info in m.graph.output}),
    ):
        old, new = read(before), read(after)
        for name in [*old, *(n for n in new if n not in old)]:
            types = {_elem_type(info) for info in (old.get(name), new.get(name)) if info is not None}
            shown = [_describe(side.get(name), len(types) > 1) for side in (old, new)]
            rows.append((section, name, *shown))
    return rows


def _describe(info: onnx.ValueInfoProto | None, with_type: bool) -> str:
    if info is None:
        return "-"
    shape = format_dims(read_dims(info))
    return f"{_elem_type(info)} {shape}" if with_type else shape


def _elem_type(info: onnx.ValueInfoProto) -> str:
    elem = info.type.tensor_type.elem_type
    return onnx.TensorProto.DataType.Name(elem).lower() if elem else "?"


__all__ = ["io_changes"]
