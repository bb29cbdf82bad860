"""Pair two exports of one network node for node, and find the constants that differ.

Nodes pair in graph order (If/Loop/Scan bodies where their owner is, Constant nodes aside) and must
have the same op type, domain, attributes and wiring: each input comes from the same place (the
same graph input, the same output of the same paired node) in both. Initializers and Constant
outputs pair by the node input that reads them. Weights are compared as stored, never read from
external data (a tensor stored outside the file is compared by type and dims only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from patchspec.author.fit import Fit
from patchspec.errors import PatchError
from patchspec.model.graph import NodeSite, all_graphs, bodies, constant_value, walk_nodes
from patchspec.model.io import load_model
from patchspec.shapes.annotations import format_dims, read_dims

#: at most this many differences are listed in a refusal
MAX_LISTED = 8
#: an integer constant with more elements than this is not a shape
MAX_ENTRIES = 64
INTEGER_TYPES = {
    TensorProto.INT8,
    TensorProto.INT16,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.UINT8,
    TensorProto.UINT16,
    TensorProto.UINT32,
    TensorProto.UINT64,
}
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
_BODY_ATTRIBUTES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_HINT = "export A and B from the same code and weights, changing only the input sizes"


class Export:
    """One of the two models, indexed by where each tensor comes from, in terms that do not depend on
    names: ``("input", 0)``, ``("node", 12, 0)`` (output 0 of the 13th node), ``("constant",)``."""

    def __init__(self, path: Path, label: str) -> None:
        self.path, self.label = path, label
        self.model = load_model(path)
        graph = self.model.graph
        self.constants: dict[str, object] = {}  # name -> initializer (TensorProto) or Constant node
        self.in_bodies: set[str] = set()  # constants defined inside If/Loop/Scan bodies
        for each in all_graphs(graph):
            found = {t.name: t for t in each.initializer}
            found.update((n.output[0], n) for n in each.node if _is_constant_node(n))
            self.constants.update(found)
            if each is not graph:
                self.in_bodies.update(found)
        self.inputs = [info for info in graph.input if info.name not in self.constants]
        self.places: dict[str, tuple[Any, ...]] = {info.name: ("input", i) for i, info in enumerate(self.inputs)}
        self.sites: list[NodeSite] = []
        for site in walk_nodes(graph):
            if _is_constant_node(site.node):
                continue
            position = len(self.sites)
            self.sites.append(site)
            self.places.update((out, ("node", position, k)) for k, out in enumerate(site.node.output) if out)
            for attr, body in bodies(site.node):
                self.places.update((info.name, ("body input", position, attr, i)) for i, info in enumerate(body.input))
        self.places.update((name, ("constant",)) for name in self.constants)

    def place(self, name: str) -> tuple[Any, ...]:
        return ("none",) if not name else self.places.get(name, ("outer", name))

    def label_of(self, position: int) -> str:
        node = self.sites[position].node
        return f"{node.op_type} '{node.name}'" if node.name else f"{node.op_type} (node {position}, unnamed)"

    def describe(self, name: str) -> str:
        place = self.place(name)
        if place[0] == "input":
            return f"input '{name}'"
        if place[0] == "node":
            return f"output {place[2]} of {self.label_of(place[1])}"
        if place[0] == "body input":
            return f"input {place[3]} of {place[2]} of {self.label_of(place[1])}"
        if place[0] == "constant":
            return f"constant '{name}'"
        return "nothing (an omitted optional input)" if place[0] == "none" else f"'{name}', which no node produces"


@dataclass(frozen=True)
class Use:
    """A node input that reads a constant in both exports."""

    position: int
    index: int
    a_name: str
    b_name: str


@dataclass(eq=False)
class Rewrite:
    """An integer constant of A whose entries differ in B: what the spec's replace_initializer rewrites."""

    name: str
    readers: str  # "Reshape '/Reshape' input 1"
    a: list[int]
    b: list[int]
    reshape: bool  # only a Reshape's shape reads it, and it has no -1 yet: one entry may become -1
    entries: list[int] = field(default_factory=list)  # the indices that differ
    fits: dict[int, Fit] = field(default_factory=dict)  # index -> its expression


# -- structure ---------------------------------------------------------------------------------------
def pair(a: Export, b: Export) -> list[Use]:
    """Every node input reading a constant in both; raises PatchError listing where the graphs differ."""
    problems = _input_problems(a, b)
    if len(a.sites) != len(b.sites):
        problems.append(f"A has {len(a.sites)} nodes and B has {len(b.sites)} (Constant nodes aside)")
    uses: list[Use] = []
    for position in range(min(len(a.sites), len(b.sites))):
        found = _node_problems(a, b, position)
        if not found:
            found = _wiring_problems(a, b, position, uses)
        problems += found
    problems += _place_problems(
        a, b, [o.name for o in a.model.graph.output], [o.name for o in b.model.graph.output], "graph output"
    )
    if problems:
        listed = problems[:MAX_LISTED] + (
            [f"... and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else []
        )
        msg = (
            f"{a.path} (A) and {b.path} (B) differ in structure; derive pairs their nodes in order and needs "
            "one graph exported at two sizes:\n" + "\n".join(f"  {line}" for line in listed)
        )
        raise PatchError(msg, _HINT)
    return uses


def _input_problems(a: Export, b: Export) -> list[str]:
    if len(a.inputs) != len(b.inputs):
        return [
            f"A has {len(a.inputs)} inputs ({', '.join(i.name for i in a.inputs)}) and B has {len(b.inputs)} "
            f"({', '.join(i.name for i in b.inputs)})"
        ]
    problems = []
    for info_a, info_b in zip(a.inputs, b.inputs):
        dims_a, dims_b = read_dims(info_a), read_dims(info_b)
        if dims_a is None or dims_b is None:
            problems.append(
                f"input '{info_a.name}' has no shape in {'A' if dims_a is None else 'B'}: derive needs "
                "the sizes each model was exported at"
            )
        elif info_a.type.tensor_type.elem_type != info_b.type.tensor_type.elem_type or len(dims_a) != len(dims_b):
            problems.append(
                f"input '{info_a.name}' is {_declared(info_a)} in A, input '{info_b.name}' is {_declared(info_b)} in B"
            )
    return problems


def _node_problems(a: Export, b: Export, position: int) -> list[str]:
    node_a, node_b = a.sites[position].node, b.sites[position].node
    label = a.label_of(position)
    if (node_a.op_type, node_a.domain) != (node_b.op_type, node_b.domain):
        return [f"node {position}: {label} in A, {b.label_of(position)} in B"]
    if (len(node_a.input), len(node_a.output)) != (len(node_b.input), len(node_b.output)):
        return [
            f"{label}: {len(node_a.input)} inputs and {len(node_a.output)} outputs in A, "
            f"{len(node_b.input)} and {len(node_b.output)} in B"
        ]
    attrs_a = {attr.name: attr for attr in node_a.attribute}
    attrs_b = {attr.name: attr for attr in node_b.attribute}
    problems = []
    for name in sorted(set(attrs_a) | set(attrs_b)):
        x, y = attrs_a.get(name), attrs_b.get(name)
        if x is None or y is None:
            problems.append(f"{label}: attribute '{name}' is set in {'A' if y is None else 'B'} only")
        elif x.type not in _BODY_ATTRIBUTES and x != y:  # bodies are paired node by node
            problems.append(f"{label}: attribute '{name}' is {_attribute(x)} in A, {_attribute(y)} in B")
    for (attr, body_a), (_, body_b) in zip(bodies(node_a), bodies(node_b)):
        if len(body_a.input) != len(body_b.input):
            problems.append(f"{label}: {attr} has {len(body_a.input)} inputs in A, {len(body_b.input)} in B")
        problems += _place_problems(
            a, b, [o.name for o in body_a.output], [o.name for o in body_b.output], f"{label}: {attr} output"
        )
    return problems


def _wiring_problems(a: Export, b: Export, position: int, uses: list[Use]) -> list[str]:
    node_a, node_b = a.sites[position].node, b.sites[position].node
    problems = []
    for index, (name_a, name_b) in enumerate(zip(node_a.input, node_b.input)):
        place_a, place_b = a.place(name_a), b.place(name_b)
        if place_a == place_b == ("constant",):
            uses.append(Use(position, index, name_a, name_b))
        elif place_a != place_b:
            problems.append(
                f"{a.label_of(position)} input {index}: A reads {a.describe(name_a)}, B reads {b.describe(name_b)}"
            )
    return problems


def _place_problems(a: Export, b: Export, names_a: list[str], names_b: list[str], what: str) -> list[str]:
    if len(names_a) != len(names_b):
        return [f"{len(names_a)} {what}s in A, {len(names_b)} in B"]
    return [
        f"{what} {i}: A has {a.describe(x)}, B has {b.describe(y)}"
        for i, (x, y) in enumerate(zip(names_a, names_b))
        if a.place(x) != b.place(y)
    ]


# -- constants ----------------------------------------------------------------------------------------
def rewrites(a: Export, b: Export, uses: list[Use]) -> list[Rewrite]:
    """The integer constants of A that differ in B, one per constant; raises PatchError for a constant
    derive cannot rewrite (a weight, a constant whose type or shape differs, ...), listing them all."""
    by_name: dict[str, list[Use]] = {}
    for use in uses:
        by_name.setdefault(use.a_name, []).append(use)
    found, problems = [], []
    for name, group in by_name.items():
        readers = ", ".join(f"{a.label_of(u.position)} input {u.index}" for u in group[:3])
        readers += f" (and {len(group) - 3} more)" if len(group) > 3 else ""
        others = {u.b_name for u in group}
        if any(not _same(b.constants[other], b.constants[group[0].b_name]) for other in others):
            problems.append(
                f"{readers}: A reads constant '{name}' everywhere, B reads different values there "
                f"({', '.join(sorted(others))})"
            )
            continue
        tensor_a, tensor_b = _tensor(a.constants[name]), _tensor(b.constants[group[0].b_name])
        if _same(a.constants[name], b.constants[group[0].b_name]):
            continue
        problem = _cannot_rewrite(name, tensor_a, tensor_b)
        if problem is None and (name in a.in_bodies or any(len(a.sites[u.position].scopes) > 1 for u in group)):
            problem = f"constant '{name}' differs inside an If/Loop/Scan body: derive rewrites the main graph only"
        if problem:
            problems.append(f"{readers}: {problem}")
            continue
        assert tensor_a is not None and tensor_b is not None  # _cannot_rewrite refuses what is not a tensor
        values_a, values_b = (numpy_helper.to_array(t).astype(np.int64).tolist() for t in (tensor_a, tensor_b))
        reshape = (
            all(a.sites[u.position].node.op_type == "Reshape" and u.index == 1 for u in group)
            and -1 not in values_a
            and -1 not in values_b
        )
        entries = [i for i, (x, y) in enumerate(zip(values_a, values_b)) if x != y]
        found.append(Rewrite(name, readers, values_a, values_b, reshape, entries))
    if problems:
        raise PatchError("derive cannot rewrite these constants of A:\n" + "\n".join(f"  {p}" for p in problems), _HINT)
    return found


def _cannot_rewrite(name: str, x: TensorProto | None, y: TensorProto | None) -> str | None:
    if x is None or y is None:
        return f"constant '{name}' differs and is not a dense tensor derive can read"
    if (x.data_type, list(x.dims)) != (y.data_type, list(y.dims)):
        return f"constant '{name}' is {_kind(x)} in A and {_kind(y)} in B"
    if x.data_type not in INTEGER_TYPES:
        return (
            f"the weight '{name}' ({_kind(x)}) differs between A and B; derive rewrites integer shape constants "
            "only, and A and B must be one network with the same weights"
        )
    if len(x.dims) != 1 or x.dims[0] > MAX_ENTRIES:
        return (
            f"constant '{name}' ({_kind(x)}) differs: {_values(x)} in A, {_values(y)} in B; derive rewrites "
            f"1-D integer constants of at most {MAX_ENTRIES} entries (a Reshape's shape, a Slice's ends)"
        )
    return None


def _tensor(source: object) -> TensorProto | None:
    """The tensor an initializer or a Constant node holds (None: a sparse or unreadable Constant)."""
    if isinstance(source, TensorProto):
        return source
    assert isinstance(source, onnx.NodeProto)
    for attr in source.attribute:
        if attr.name == "value":
            tensor: TensorProto = attr.t
            return tensor
    value = constant_value(source)
    return None if value is None else numpy_helper.from_array(np.asarray(value))


def _same(x: object, y: object) -> bool:
    tensor_x, tensor_y = _tensor(x), _tensor(y)
    if tensor_x is None or tensor_y is None:
        if isinstance(x, onnx.NodeProto) and isinstance(y, onnx.NodeProto):
            return list(x.attribute) == list(y.attribute)
        return False
    if (tensor_x.data_type, list(tensor_x.dims)) != (tensor_y.data_type, list(tensor_y.dims)):
        return False
    if TensorProto.EXTERNAL in (tensor_x.data_location, tensor_y.data_location):
        return True  # weights are never read: the same type and dims is all derive knows
    if all(getattr(tensor_x, f) == getattr(tensor_y, f) for f in _DATA_FIELDS):
        return True
    return bool(np.array_equal(numpy_helper.to_array(tensor_x), numpy_helper.to_array(tensor_y)))


def _is_constant_node(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx") and bool(node.output)


def _kind(tensor: TensorProto) -> str:
    return f"{helper.tensor_dtype_to_np_dtype(tensor.data_type).name if tensor.data_type else '?'} {list(tensor.dims)}"


def _values(tensor: TensorProto) -> str:
    if tensor.data_location == TensorProto.EXTERNAL:
        return "(external data)"
    text = str(numpy_helper.to_array(tensor).tolist())
    return text if len(text) <= 80 else text[:77] + "..."


def _attribute(attr: onnx.AttributeProto) -> str:
    text = repr(helper.get_attribute_value(attr))
    return text if len(text) <= 60 else text[:57] + "..."


def _declared(info: onnx.ValueInfoProto) -> str:
    elem = info.type.tensor_type.elem_type
    return f"{helper.tensor_dtype_to_np_dtype(elem).name if elem else '?'} {format_dims(read_dims(info))}"


__all__ = ["Export", "Rewrite", "Use", "pair", "rewrites"]
