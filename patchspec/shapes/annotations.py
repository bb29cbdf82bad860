"""Shape annotations: read and write dims, and re-derive every intermediate shape from the inputs.

``rederive_shapes`` drops the stale annotations a patch leaves behind (``value_info`` of the main
graph and of every If/Loop/Scan body, and the dims of the graph outputs) and lets ONNX's shape
inference derive them again from the graph inputs. Inference names every dim it cannot compute
``unk__N``, a fresh name each, so no two tensors that may differ at run time share a dim_param;
a dim it cannot derive at all stays unknown, which never declares a shape the model does not
produce. Inference runs on a graph-only copy (large weights replaced by stubs), so models with
gigabytes of weights cost what their graph costs.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import onnx

from patchspec.errors import PatchError
from patchspec.model.graph import all_graphs, has_body, subgraphs
from patchspec.plugin.contract import RunState, StateKey

if TYPE_CHECKING:
    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

#: one dim as patchspec reads it: a size, a symbolic name, or None (unknown)
Dim = int | str | None
#: tensor name -> {axis: name or size}: dims named by rename_dims, re-applied after re-derivation
Pins = dict[str, dict[int, int | str]]
#: the dims patches of one run have named (rename_dims), which a later re-derivation keeps
PINNED_DIMS: StateKey[Pins] = StateKey("patchspec.pinned_dims", dict)

#: tensors larger than this are replaced by a stub (type and dims only) before inference
STUB_BYTES = 4096


# -- dims -------------------------------------------------------------------------------------------
def read_dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    if dim.HasField("dim_value") and dim.dim_value >= 0:
        return dim.dim_value
    if dim.HasField("dim_param") and dim.dim_param:
        return dim.dim_param
    return None


def write_dim(dim: onnx.TensorShapeProto.Dimension, value: Dim) -> None:
    """Set a dim to a size (int), a name (str) or unknown (None)."""
    dim.Clear()
    if isinstance(value, int) and not isinstance(value, bool):
        dim.dim_value = value
    elif isinstance(value, str):
        dim.dim_param = value


def has_shape(info: onnx.ValueInfoProto) -> bool:
    return bool(info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"))


def typed(info: onnx.ValueInfoProto) -> bool:
    """A tensor annotation with a known element type (onnxruntime refuses elem_type 0). Another type
    (a sequence, a map) reads as a default tensor type, whose elem_type is 0."""
    return bool(info.type.tensor_type.elem_type != 0)


def untyped_annotations(model: onnx.ModelProto) -> list[str]:
    """Names of tensor annotations that have a tensor type without an element type, in any graph."""
    return [
        info.name
        for info in all_annotations(model.graph)
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type == 0
    ]


def read_dims(info: onnx.ValueInfoProto) -> list[Dim] | None:
    """The dims of a tensor annotation, or None when it has no shape (rank unknown)."""
    if not has_shape(info):
        return None
    return [read_dim(d) for d in info.type.tensor_type.shape.dim]


def shape_dims(info: onnx.ValueInfoProto) -> RepeatedCompositeFieldContainer[onnx.TensorShapeProto.Dimension]:
    """The mutable dim list of an annotation with a shape."""
    return info.type.tensor_type.shape.dim


def format_dims(dims: list[Dim] | None) -> str:
    if dims is None:
        return "[rank unknown]"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def all_annotations(graph: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    """Every tensor annotation of ``graph`` and its bodies: inputs, outputs and value_info."""
    for each in all_graphs(graph):
        yield from each.input
        yield from each.output
        yield from each.value_info


def dim_params(model: onnx.ModelProto) -> set[str]:
    return {
        d.dim_param for info in all_annotations(model.graph) if has_shape(info) for d in shape_dims(info) if d.dim_param
    }


# -- re-derivation ----------------------------------------------------------------------------------
def rederive_shapes(model: onnx.ModelProto, state: RunState) -> None:
    """Drop stale intermediate and output shapes of ``model`` and derive them again, in place.

    ``state`` is the run's :class:`RunState` (``context.state``): the dims earlier patches pinned
    under ``PINNED_DIMS`` (rename_dims' names) are re-applied afterwards wherever the derived dim is
    not a known size (a name never hides a fact, a size never contradicts one). It is required: a
    plugin that re-derived without it would silently lose an earlier rename_dims. Graph inputs are
    left as they are; ``ir_version``, opset imports, weights and nodes are untouched.
    """
    if not isinstance(state, RunState):
        msg = (
            f"rederive_shapes(model, state) takes the run's state (context.state), got {type(state).__name__}: "
            "without it the dims earlier patches named would be lost"
        )
        raise TypeError(msg)
    pinned_dims = state.get(PINNED_DIMS)
    with collector_paused():  # a collection would walk every annotation of a 200,000-node graph
        drop_derived_shapes(model.graph, pinned_dims)
        inferred = infer_graph_only(model)
        copy_derived_shapes(inferred.graph, model.graph)
        apply_pins(model.graph, pinned_dims)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large graph is walked (reference counting
    still frees everything; what is made there holds no cycles)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def drop_derived_shapes(graph: onnx.GraphProto, pinned_dims: Pins) -> None:
    """Remove value_info and forget the dims of outputs (rank and type kept), except pinned axes."""
    for each in all_graphs(graph):
        kept = []
        for info in each.value_info if pinned_dims else ():
            if info.name in pinned_dims and has_shape(info):
                _forget_dims(info, keep=pinned_dims[info.name])
                kept.append(info)
        del each.value_info[:]
        each.value_info.extend(kept)
        for info in each.output:
            _forget_dims(info, keep=pinned_dims.get(info.name, {}))


def _forget_dims(info: onnx.ValueInfoProto, keep: dict[int, int | str]) -> None:
    if not has_shape(info):
        return
    dims = shape_dims(info)
    pinned = {axis % len(dims): value for axis, value in keep.items() if -len(dims) <= axis < len(dims)}
    for axis, dim in enumerate(dims):
        write_dim(dim, pinned.get(axis))


def infer_graph_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference (with data propagation) on a copy whose large tensors are stubs."""
    light = graph_only_copy(model)
    try:
        return onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # onnx raises InferenceError, ValidationError or a bare RuntimeError here
        raise _inference_refused(light, exc) from None


def _inference_refused(model: onnx.ModelProto, exc: Exception) -> PatchError:
    """ONNX shape inference gives up on the whole model even when lenient: name why, and the way out."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    declared = {opset.domain for opset in model.opset_import} | {"ai.onnx"}
    undeclared = sorted({node.domain for graph in all_graphs(model.graph) for node in graph.node} - declared)
    if undeclared:
        hint = (
            f"the model uses the operator domain(s) {', '.join(map(repr, undeclared))} without an opset import; "
            "onnxruntime refuses such a model too: fix the export, or add the import to the model"
        )
    else:
        hint = "run 'patchspec inspect' on the model; onnxruntime probably refuses it as well"
    return PatchError(f"ONNX shape inference ({onnx.__version__}) cannot process this model: {text}", hint)


def graph_only_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without the bytes of large tensors (type and dims are kept)."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.graph.CopyFrom(_light_graph(model.graph))
    light.functions.extend(model.functions)
    return light


def _light_graph(graph: onnx.GraphProto) -> onnx.GraphProto:
    light = onnx.GraphProto()
    for field in ("name", "doc_string"):
        setattr(light, field, getattr(graph, field))
    light.input.extend(graph.input)
    light.output.extend(graph.output)
    light.value_info.extend(graph.value_info)
    light.initializer.extend(_stub_tensor(t) for t in graph.initializer)
    light.sparse_initializer.extend(graph.sparse_initializer)
    nodes, plain = graph.node, 0  # runs of nodes without a tensor or a body are copied in bulk
    for index, node in enumerate(nodes):
        if _holds_data(node):
            light.node.extend(nodes[plain:index])
            light.node.append(_light_node(node))
            plain = index + 1
    light.node.extend(nodes[plain:])
    for node in light.node:
        if node.op_type in MISREAD_OPS:  # a few audio ops: spelled out so that onnx infers them right
            node.CopyFrom(as_specified(node))
    return light


#: attribute defaults that onnx's shape inference reads otherwise than the operator's specification
#: (onnx 1.23: an STFT without ``onesided`` is inferred two-sided, ``[.., 512, 2]`` for a window of 512,
#: where the specification and onnxruntime say one-sided, ``[.., 257, 2]``)
MISREAD_DEFAULTS: dict[str, dict[str, int]] = {"STFT": {"onesided": 1}}
MISREAD_OPS = frozenset(MISREAD_DEFAULTS)


def as_specified(node: onnx.NodeProto) -> onnx.NodeProto:
    """``node``, or a copy with the defaults of :data:`MISREAD_DEFAULTS` written out where it omits them."""
    defaults = MISREAD_DEFAULTS.get(node.op_type, {}) if node.domain in ("", "ai.onnx") else {}
    given = {attribute.name for attribute in node.attribute}
    missing = {name: value for name, value in defaults.items() if name not in given}
    if not missing:
        return node
    spelled = onnx.NodeProto()
    spelled.CopyFrom(node)
    spelled.attribute.extend(onnx.helper.make_attribute(name, value) for name, value in missing.items())
    return spelled


def _holds_data(node: onnx.NodeProto) -> bool:
    """Whether ``node`` has a tensor or a graph attribute (a Constant's weight, a body)."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type in _DATA_OPS
    return any(attr.type in _DATA_ATTRIBUTES for attr in node.attribute)


#: the default domain's ops with a tensor attribute large enough to matter, or a body
_DATA_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap", "Constant"})
_DATA_ATTRIBUTES = {
    onnx.AttributeProto.GRAPH,
    onnx.AttributeProto.GRAPHS,
    onnx.AttributeProto.TENSOR,
    onnx.AttributeProto.TENSORS,
    onnx.AttributeProto.SPARSE_TENSOR,
    onnx.AttributeProto.SPARSE_TENSORS,
}


def _light_node(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    for field in ("name", "op_type", "domain", "doc_string", "overload"):
        setattr(copy, field, getattr(node, field))
    copy.input.extend(node.input)
    copy.output.extend(node.output)
    for attr in node.attribute:
        new = copy.attribute.add()
        if attr.type == onnx.AttributeProto.GRAPH:
            new.name, new.type = attr.name, attr.type
            new.g.CopyFrom(_light_graph(attr.g))
        elif attr.type == onnx.AttributeProto.GRAPHS:
            new.name, new.type = attr.name, attr.type
            new.graphs.extend(_light_graph(g) for g in attr.graphs)
        elif attr.type == onnx.AttributeProto.TENSOR:
            new.CopyFrom(attr)
            new.t.CopyFrom(_stub_tensor(attr.t))
        else:
            new.CopyFrom(attr)
    return copy


def _stub_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """The tensor itself when small; otherwise type and dims only, marked as external data."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.ByteSize() <= STUB_BYTES:
        return tensor
    return external_stub(tensor, "patchspec-stub")


def external_stub(tensor: onnx.TensorProto, location: str) -> onnx.TensorProto:
    """``tensor``'s name, type and dims, its bytes said to be in ``location`` (a file never read)."""
    stub = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    stub.data_location = onnx.TensorProto.EXTERNAL
    stub.external_data.add(key="location", value=location)
    return stub


def copy_derived_shapes(source: onnx.GraphProto, target: onnx.GraphProto) -> None:
    """Copy value_info and output shapes of an inferred copy onto the graph it was made from."""
    del target.value_info[:]
    # a graph's own outputs are annotated where they are listed: onnx refuses a Loop body whose output is
    # untyped and has a value_info beside it (onnxscript writes body outputs without types)
    outputs = {info.name for info in target.output}
    target.value_info.extend(info for info in source.value_info if typed(info) and info.name not in outputs)
    inferred_outputs = {info.name: info for info in source.output}
    for info in target.output:
        found = inferred_outputs.get(info.name)
        if found is None or not typed(found):
            continue  # never write a shape without an element type: onnxruntime >= 1.32 refuses the model
        if not typed(info):
            info.type.tensor_type.elem_type = found.type.tensor_type.elem_type
        if has_shape(found):
            info.type.tensor_type.shape.CopyFrom(found.type.tensor_type.shape)
    for index, target_node in enumerate(target.node):  # the inferred copy's node read only where a body is
        if has_body(target_node):
            for source_sub, target_sub in zip(subgraphs(source.node[index]), subgraphs(target_node)):
                copy_derived_shapes(source_sub, target_sub)


def apply_pins(graph: onnx.GraphProto, pinned_dims: Pins) -> int:
    """Re-apply pinned dims where the annotation is not a known size; returns how many were set."""
    count = 0
    for info in all_annotations(graph) if pinned_dims else ():
        pins = pinned_dims.get(info.name)
        if not pins or not has_shape(info):
            continue
        dims = shape_dims(info)
        for axis, value in pins.items():
            if -len(dims) <= axis < len(dims) and not isinstance(read_dim(dims[axis]), int):
                if read_dim(dims[axis]) != value:
                    write_dim(dims[axis], value)
                    count += 1
    return count


__all__ = [
    "MISREAD_DEFAULTS",
    "PINNED_DIMS",
    "Dim",
    "Pins",
    "all_annotations",
    "apply_pins",
    "as_specified",
    "copy_derived_shapes",
    "dim_params",
    "drop_derived_shapes",
    "external_stub",
    "format_dims",
    "graph_only_copy",
    "has_shape",
    "infer_graph_only",
    "read_dim",
    "read_dims",
    "rederive_shapes",
    "shape_dims",
    "typed",
    "untyped_annotations",
    "write_dim",
]
