"""Node selectors (``select``): the one way every patch type picks nodes.

All given fields must hold (AND); a list means any of (OR). Patterns are ``fnmatch`` globs; a
pattern starting with ``re:`` is a Python regular expression matched in full. ``after`` and
``before`` name tensors; each is resolved with one breadth-first traversal over a
tensor -> consumers / tensor -> producer index, so selection stays linear in the graph's size.

Tensors are identified by (scope, name): a name used in a subgraph resolves to the innermost
graph that defines it, so If/Loop/Scan bodies that reuse a name do not leak into each other. A
node that carries subgraphs reads every outer-scope tensor its bodies read, feeds its bodies'
inputs and consumes their outputs, so reachability flows through it.
"""

from __future__ import annotations

import fnmatch
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import onnx

from patchspec.errors import did_you_mean
from patchspec.model.graph import bodies, free_names
from patchspec.model.selector_schema import (
    DEFAULT_EXPECT,
    PATTERN_KEYS,
    Key,
    parse_expect,
)

MAX_LISTED = 10  # nodes named in a count mismatch
FieldTests = list[tuple[str, Callable[[int], bool]]]  # (selector field, does node i pass it)


class FailContext(Protocol):
    """What selection reports a problem to: ``fail`` stops the run (a PatchContext is one)."""

    def fail(self, message: str, *, key: tuple[Any, ...] = (), hint: str | None = None) -> NoReturn: ...


@dataclass(frozen=True)
class NodeRef:
    """A selected node, the graph that holds it, and where that graph is (``main/If_0.then_branch``)."""

    node: onnx.NodeProto
    graph: onnx.GraphProto
    graph_path: str


def _matcher(value: str | list[str]) -> Callable[[str], bool]:
    """One predicate for a pattern or a list of patterns (OR)."""
    patterns = value if isinstance(value, list) else [value]
    regexes = [re.compile(p[3:]) for p in patterns if p.startswith("re:")]
    globs = [p for p in patterns if not p.startswith("re:")]

    def matches(text: str) -> bool:
        return any(fnmatch.fnmatchcase(text, g) for g in globs) or any(r.fullmatch(text) for r in regexes)

    return matches


# -- the graph index ---------------------------------------------------------------------------------
TensorId = tuple[str, str]  # (graph path of the defining scope, tensor name)


class GraphIndex:
    """Every node (main graph first, bodies after their owner) and tensor->producer/consumers maps."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.nodes: list[NodeRef] = []
        self.reads: list[list[TensorId]] = []
        self.writes: list[list[TensorId]] = []
        self.defined: dict[str, set[str]] = {}  # graph path -> names defined there
        self.parent: dict[str, str | None] = {}
        self._walk(model.graph, "main", None)
        self.consumers: dict[TensorId, list[int]] = {}
        self.producers: dict[TensorId, list[int]] = {}
        for index in range(len(self.nodes)):
            for tensor in self.reads[index]:
                self.consumers.setdefault(tensor, []).append(index)
            for tensor in self.writes[index]:
                self.producers.setdefault(tensor, []).append(index)

    def _walk(self, graph: onnx.GraphProto, path: str, parent: str | None) -> None:
        self.parent[path] = parent
        names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        names |= {t.values.name for t in graph.sparse_initializer}
        names |= {out for node in graph.node for out in node.output if out}
        self.defined[path] = names
        for position, node in enumerate(graph.node):
            index = len(self.nodes)
            self.nodes.append(NodeRef(node, graph, path))
            self.reads.append([self.resolve(path, name) for name in node.input if name])
            self.writes.append([(path, name) for name in node.output if name])
            for body_path, body in _bodies(node, path, position):
                self._walk(body, body_path, path)
                self._link_body(index, body, body_path, path)

    def _link_body(self, index: int, body: onnx.GraphProto, body_path: str, owner_path: str) -> None:
        self.writes[index].extend((body_path, v.name) for v in body.input if v.name)
        self.reads[index].extend(self.resolve(body_path, v.name) for v in body.output if v.name)
        for name in sorted(free_names(body)):
            self.reads[index].append(self.resolve(owner_path, name))

    def resolve(self, path: str | None, name: str) -> TensorId:
        """The scope that defines ``name`` as seen from ``path`` (the outermost unknown: main)."""
        start = path
        while path is not None:
            if name in self.defined.get(path, ()):
                return path, name
            path = self.parent.get(path)
        return (start or "main"), name

    def tensor_ids(self, name: str) -> list[TensorId]:
        return [(path, name) for path, names in self.defined.items() if name in names]

    def all_tensor_names(self) -> set[str]:
        return set().union(*self.defined.values())

    def downstream(self, start: Iterable[TensorId]) -> set[int]:
        """Nodes reachable from ``start`` (one BFS over tensor -> consumers)."""
        return self._reach(start, self.consumers, self.writes)

    def upstream(self, start: Iterable[TensorId]) -> set[int]:
        """Nodes that reach ``start`` (one BFS over tensor -> producer)."""
        return self._reach(start, self.producers, self.reads)

    @staticmethod
    def _reach(start: Iterable[TensorId], step: dict[TensorId, list[int]], onward: list[list[TensorId]]) -> set[int]:
        seen_tensors = set(start)
        queue = deque(seen_tensors)
        seen_nodes: set[int] = set()
        while queue:
            for index in step.get(queue.popleft(), ()):
                if index in seen_nodes:
                    continue
                seen_nodes.add(index)
                for tensor in onward[index]:
                    if tensor not in seen_tensors:
                        seen_tensors.add(tensor)
                        queue.append(tensor)
        return seen_nodes


def _bodies(node: onnx.NodeProto, path: str, position: int) -> Iterator[tuple[str, onnx.GraphProto]]:
    label = node.name or f"{node.op_type}#{position}"
    for attr_name, body in bodies(node):
        yield f"{path}/{label}.{attr_name}", body


# -- selection ---------------------------------------------------------------------------------------
def select_nodes(
    model: onnx.ModelProto,
    selector: dict[str, Any],
    context: FailContext,
    key: Key = ("select",),
    index: GraphIndex | None = None,
) -> list[NodeRef]:
    """The nodes ``selector`` matches, in graph order; ``context.fail`` (exit 4) on a count mismatch.

    ``context`` is anything with ``fail(message, *, key=(), hint=None)`` (a PatchContext).
    Pass a prebuilt ``index`` to select several times from an unchanged model.
    """
    index = index or GraphIndex(model)
    scope_all = selector.get("graph", "main") == "all"
    tests = _field_tests(selector, index, context, key)
    candidates = [i for i, ref in enumerate(index.nodes) if scope_all or ref.graph_path == "main"]
    chosen = [i for i in candidates if all(test(i) for _, test in tests)]
    minimum, exact = parse_expect(selector.get("expect", DEFAULT_EXPECT))
    count_ok = len(chosen) == minimum if exact else len(chosen) >= minimum
    if not count_ok:
        _count_mismatch(selector, chosen, candidates, tests, index, context, key)
    return [index.nodes[i] for i in chosen]


def _field_tests(selector: dict[str, Any], index: GraphIndex, context: FailContext, key: Key) -> FieldTests:
    tests: FieldTests = []
    nodes = index.nodes
    for field in PATTERN_KEYS:
        if field not in selector:
            continue
        matches = _matcher(selector[field])
        tests.append((field, _pattern_test(field, matches, nodes)))
    for field, walk in (("after", index.downstream), ("before", index.upstream)):
        if field in selector:
            reached = walk(_start_tensors(selector[field], index, context, key + (field,)))
            tests.append((field, reached.__contains__))
    return tests


def _pattern_test(field: str, matches: Callable[[str], bool], nodes: list[NodeRef]) -> Callable[[int], bool]:
    if field == "op_type":
        return lambda i: matches(nodes[i].node.op_type)
    if field == "name":
        return lambda i: matches(nodes[i].node.name)
    if field == "domain":
        return lambda i: matches("" if nodes[i].node.domain == "ai.onnx" else nodes[i].node.domain)
    if field == "consumes":
        return lambda i: any(matches(name) for name in nodes[i].node.input if name)
    return lambda i: any(matches(name) for name in nodes[i].node.output if name)


def _start_tensors(value: str | list[str], index: GraphIndex, context: FailContext, key: Key) -> list[TensorId]:
    names = value if isinstance(value, list) else [value]
    found: list[TensorId] = []
    for position, name in enumerate(names):
        ids = index.tensor_ids(name)
        if not ids:
            where = key + (position,) if isinstance(value, list) else key
            near = did_you_mean(name, index.all_tensor_names(), 5)
            hint = "'patchspec inspect MODEL' lists the model's tensors"
            context.fail(f"tensor {name!r} named in '{key[-1]}' is not in the model{near}", key=where, hint=hint)
        found.extend(ids)
    return found


def _count_mismatch(
    selector: dict[str, Any],
    chosen: list[int],
    candidates: list[int],
    tests: FieldTests,
    index: GraphIndex,
    context: FailContext,
    key: Key,
) -> None:
    minimum, exact = parse_expect(selector.get("expect", DEFAULT_EXPECT))
    wanted = f"exactly {minimum}" if exact else f"at least {minimum}"
    listed = ", ".join(describe_node(index.nodes[i]) for i in chosen[:MAX_LISTED])
    more = f" and {len(chosen) - MAX_LISTED} more" if len(chosen) > MAX_LISTED else ""
    found = f": {listed}{more}" if chosen else ""
    noun = "node" if len(chosen) == 1 else "nodes"
    msg = f"selector {describe_selector(selector)} matched {len(chosen)} {noun}, expected {wanted}{found}"
    hint = (
        "; ".join([*_unknown_names(selector, candidates, index), _narrowing_hint(candidates, tests)])
        if len(chosen) < minimum
        else "tighten the selector, or set 'expect' to the count this model should have"
    )
    context.fail(msg, key=key, hint=hint)


#: what each pattern field is matched against, for a "did you mean" from the nodes in scope
_NAMES_OF: dict[str, Callable[[onnx.NodeProto], Iterable[str]]] = {
    "op_type": lambda node: [node.op_type],
    "name": lambda node: [node.name],
    "domain": lambda node: ["" if node.domain == "ai.onnx" else node.domain],
    "consumes": lambda node: node.input,
    "produces": lambda node: node.output,
}


def _unknown_names(selector: dict[str, Any], candidates: list[int], index: GraphIndex) -> list[str]:
    """Each plain name (no glob, no ``re:``) a pattern field gives that no node in scope has, with the
    closest ones it does have: ``op_type 'Conv2d' is on no node in scope (did you mean 'Conv'?)``."""
    said = []
    for field, names_of in _NAMES_OF.items():
        values = selector.get(field)
        plain = [v for v in (values if isinstance(values, list) else [values]) if isinstance(v, str)]
        plain = [v for v in plain if not v.startswith("re:") and not any(c in v for c in "*?[")]
        known = {name for i in candidates for name in names_of(index.nodes[i].node) if name}
        said += [f"{field} '{v}' is on no node in scope{did_you_mean(v, known)}" for v in plain if v not in known]
    return said


def _narrowing_hint(candidates: list[int], tests: FieldTests) -> str:
    """Which field alone rules nodes out, so an empty match is easy to debug."""
    counts = [f"{field} alone matches {sum(1 for i in candidates if test(i))}" for field, test in tests]
    scope = f"{len(candidates)} nodes in scope"
    return "; ".join([scope, *counts]) + "; 'graph: all' also searches If/Loop/Scan bodies"


def describe_node(ref: NodeRef) -> str:
    name = ref.node.name or f"<unnamed, output {ref.node.output[0] if ref.node.output else '?'}>"
    where = "" if ref.graph_path == "main" else f" in {ref.graph_path}"
    return f"{name} ({ref.node.op_type}{where})"


def describe_selector(selector: dict[str, Any]) -> str:
    """``{op_type: Conv, after: x}``: compact, in the order the user wrote it."""
    parts = []
    for field, value in selector.items():
        shown = "[" + ", ".join(map(str, value)) + "]" if isinstance(value, list) else str(value)
        parts.append(f"{field}: {shown}")
    return "{" + ", ".join(parts) + "}"


__all__ = ["GraphIndex", "NodeRef", "describe_node", "describe_selector", "select_nodes"]
