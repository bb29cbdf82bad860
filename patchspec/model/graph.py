"""Graph utilities: walking graphs and their If/Loop/Scan bodies, scopes, constants and names.

The one place for what every patch needs to know about a graph's structure; patch types and the
shape modules import these rather than walking graphs their own way.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

import numpy as np
import onnx
from onnx import numpy_helper

#: what defines a constant tensor: an initializer, or a Constant node
ConstantSource = onnx.TensorProto | onnx.NodeProto
V = TypeVar("V")


# -- graphs -----------------------------------------------------------------------------------------
def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The bodies of one node (If's branches, Loop's and Scan's body, a custom op's graphs)."""
    for _, body in bodies(node):
        yield body


def bodies(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """Each body of one node with the name of its attribute (``then_branch``; ``graphs[1]`` for lists)."""
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.name, attr.g
        for number, sub in enumerate(attr.graphs):
            yield f"{attr.name}[{number}]", sub


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every If/Loop/Scan body inside it, depth first, in node order."""
    yield graph
    for node in graph.node:
        if has_body(node):
            for sub in subgraphs(node):
                yield from all_graphs(sub)


def has_body(node: onnx.NodeProto) -> bool:
    """Whether ``node`` can hold a graph: the default domain's If, Loop, Scan and SequenceMap (told by
    their type, without reading attributes: a 200,000-node walk), or any op of another domain with a
    graph attribute."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type in _BODY_OPS
    return any(attr.type in _GRAPH_ATTRIBUTES for attr in node.attribute)


_BODY_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
_GRAPH_ATTRIBUTES = frozenset({onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS})


# -- nodes, scopes and constants --------------------------------------------------------------------
@dataclass
class NodeSite:
    """A node, its position in ``walk_nodes`` order (the same in every copy), and its scopes."""

    position: int
    node: onnx.NodeProto
    scopes: tuple[onnx.GraphProto, ...]  # outermost (main graph) first, the node's own graph last

    @property
    def graph(self) -> onnx.GraphProto:
        return self.scopes[-1]


def walk_nodes(graph: onnx.GraphProto) -> Iterator[NodeSite]:
    """Every node: a graph's nodes in order, each owner followed by the nodes of its bodies."""
    counter = iter(range(1 << 62))

    def walk(scopes: tuple[onnx.GraphProto, ...]) -> Iterator[NodeSite]:
        for node in scopes[-1].node:
            yield NodeSite(next(counter), node, scopes)
            for sub in subgraphs(node) if node.attribute else ():  # most nodes: no attribute to look at
                yield from walk(scopes + (sub,))

    yield from walk((graph,))


class ScopeIndex:
    """Annotations and constants by name, looked up from a node's innermost scope outwards."""

    def __init__(self) -> None:
        self._types: dict[int, dict[str, onnx.ValueInfoProto]] = {}
        self._constants: dict[int, dict[str, ConstantSource]] = {}

    def annotation(self, name: str, scopes: Sequence[onnx.GraphProto]) -> onnx.ValueInfoProto | None:
        return self._lookup(self._types, _types_of, name, scopes)

    def constant_source(self, name: str, scopes: Sequence[onnx.GraphProto]) -> ConstantSource | None:
        """The initializer (TensorProto) or Constant node (NodeProto) that defines ``name``."""
        return self._lookup(self._constants, _constants_of, name, scopes)

    def constant(self, name: str, scopes: Sequence[onnx.GraphProto]) -> np.ndarray[Any, Any] | None:
        """The value of a constant tensor as a numpy array, or None (not constant, or not loaded)."""
        return constant_value(self.constant_source(name, scopes))

    @staticmethod
    def _lookup(
        cache: dict[int, dict[str, V]],
        build: Callable[[onnx.GraphProto], dict[str, V]],
        name: str,
        scopes: Sequence[onnx.GraphProto],
    ) -> V | None:
        for graph in reversed(scopes):
            table = cache.get(id(graph))
            if table is None:
                table = cache[id(graph)] = build(graph)
            if name in table:
                return table[name]
        return None


def _types_of(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    table = {info.name: info for info in graph.value_info}
    table.update((info.name, info) for info in graph.output)
    table.update((info.name, info) for info in graph.input)
    return table


def _constants_of(graph: onnx.GraphProto) -> dict[str, ConstantSource]:
    table: dict[str, ConstantSource] = {
        node.output[0]: node
        for node in graph.node
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output
    }
    table.update((t.name, t) for t in graph.initializer)
    return table


def constant_value(source: object) -> np.ndarray[Any, Any] | None:
    """The value of an initializer or Constant node (any of its attribute forms), or None when it
    cannot be read here (external data, sparse tensors, strings)."""
    if isinstance(source, onnx.TensorProto):
        return None if source.data_location == onnx.TensorProto.EXTERNAL else numpy_helper.to_array(source)
    if not isinstance(source, onnx.NodeProto):
        return None
    for attr in source.attribute:
        if attr.name == "value":
            return None if attr.t.data_location == onnx.TensorProto.EXTERNAL else numpy_helper.to_array(attr.t)
        if attr.name in CONSTANT_ATTRIBUTES:
            dtype, read = CONSTANT_ATTRIBUTES[attr.name]
            return np.array(read(attr), dtype=dtype)
    return None


#: Constant's attribute forms other than ``value``: numpy dtype and how to read the attribute
CONSTANT_ATTRIBUTES: dict[str, tuple[type[np.generic], Callable[[onnx.AttributeProto], Any]]] = {
    "value_int": (np.int64, lambda a: a.i),
    "value_ints": (np.int64, lambda a: list(a.ints)),
    "value_float": (np.float32, lambda a: a.f),
    "value_floats": (np.float32, lambda a: list(a.floats)),
}


def node_label(node: onnx.NodeProto) -> str:
    """``Gather 'pick'``: a node as messages name it (its first output where it has no name)."""
    return f"{node.op_type} '{node.name or node.output[0]}'"


def all_names(model: onnx.ModelProto) -> set[str]:
    """Every node and tensor name in the model, bodies included (to pick names that collide with none)."""
    names: set[str] = set()
    for graph in all_graphs(model.graph):
        names.update(info.name for info in (*graph.input, *graph.output, *graph.value_info))
        names.update(t.name for t in graph.initializer)
        for node in graph.node:
            names.add(node.name)
            names.update(node.input)
            names.update(node.output)
    names.discard("")
    return names


def use_counts(model: onnx.ModelProto) -> dict[str, int]:
    """How many node inputs and graph outputs, in any graph, read each tensor: the one use count."""
    counts: Counter[str] = Counter()
    for graph in all_graphs(model.graph):  # counted in C: a 200,000-node graph has a million inputs
        counts.update(chain.from_iterable([node.input for node in graph.node]))
        counts.update([info.name for info in graph.output])
    return dict(counts)


def uses_of(model: onnx.ModelProto, name: str) -> int:
    """How many node inputs and graph outputs, in any graph, read ``name``."""
    return use_counts(model).get(name, 0)


def fresh_name(wanted: str, taken: set[str]) -> str:
    """``wanted``, else ``wanted_1``, ``wanted_2``, ...: the first that is not in ``taken``."""
    name, count = wanted, 0
    while name in taken:
        count += 1
        name = f"{wanted}_{count}"
    return name


class Namer:
    """Readable, collision-free names for the new nodes and tensors of one patch (``fresh_name``
    that remembers what it handed out)."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return name


def default_opset(model: onnx.ModelProto) -> int:
    """The model's version of the default ONNX domain."""
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            version: int = opset.version
            return version
    return 1


#: before IR version 4, every initializer of the main graph must also be one of its inputs
IR_INITIALIZERS_NEED_INPUTS = 4


def sync_initializer_inputs(model: onnx.ModelProto, before: onnx.ModelProto) -> bool:
    """In an IR < 4 model, list each main-graph initializer as a graph input too, and drop the inputs
    of initializers a patch removed. Returns whether anything changed. Later IR versions: nothing."""
    if model.ir_version >= IR_INITIALIZERS_NEED_INPUTS:
        return False
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    backed_before = {t.name for t in before.graph.initializer}
    stale = [info for info in graph.input if info.name in backed_before and info.name not in initializers]
    for info in stale:
        graph.input.remove(info)
    listed = {info.name for info in graph.input}
    missing = [t for t in graph.initializer if t.name not in listed]
    for tensor in missing:
        graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return bool(stale or missing)


def sort_nodes(graph: onnx.GraphProto) -> int:
    """Put ``graph``'s nodes in an order where each runs after what it reads (onnx's checker requires it,
    onnxruntime sorts them itself, so exports that break it run), keeping the file's order where it
    already holds; a body's reads of outer names count as its owner's. Returns how many nodes moved (0:
    the graph was in order, or a cycle or a name nothing makes leaves it as it is)."""
    if _in_order(graph):
        return 0
    made = {name: k for k, node in enumerate(graph.node) for name in node.output if name}
    reads = [list(_reads(node)) if has_body(node) else node.input for node in graph.node]
    needs = [{made[n] for n in names if n in made and made[n] != k} for k, names in enumerate(reads)]
    waiting = [len(wants) for wants in needs]
    readers: list[list[int]] = [[] for _ in needs]
    for k, wants in enumerate(needs):
        for want in wants:
            readers[want].append(k)
    ready = [k for k, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)  # the first in the file of those ready: the file's order wherever it holds
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for reader in readers[k]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) < len(needs):
        return 0  # a cycle: not ours to settle
    nodes = [graph.node[k] for k in order]
    copies = [type(node)() for node in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
    return sum(1 for position, k in enumerate(order) if position != k)


def _in_order(graph: onnx.GraphProto) -> bool:
    """Whether no node reads a name a later node makes (most graphs: one look at each input)."""
    later = {name for node in graph.node for name in node.output}
    for node in graph.node:
        if not later.isdisjoint(_reads(node) if has_body(node) else node.input):
            return False
        later.difference_update(node.output)
    return True


def _reads(node: onnx.NodeProto) -> Iterator[str]:
    """The names a node reads: its inputs, and what its bodies read from outside them."""
    yield from (name for name in node.input if name)
    for body in subgraphs(node):
        yield from free_names(body)


def free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a graph (and its own bodies) read from enclosing scopes."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        defined.update(out for out in node.output if out)
        used.update(name for name in node.input if name)
        for sub in subgraphs(node):
            used |= free_names(sub)
    used.update(v.name for v in graph.output)
    return used - defined


__all__ = [
    "IR_INITIALIZERS_NEED_INPUTS",
    "Namer",
    "NodeSite",
    "ScopeIndex",
    "all_graphs",
    "all_names",
    "bodies",
    "constant_value",
    "default_opset",
    "free_names",
    "fresh_name",
    "node_label",
    "sort_nodes",
    "subgraphs",
    "sync_initializer_inputs",
    "use_counts",
    "uses_of",
    "walk_nodes",
]
