"""Evaluate every tensor's shape, and the value of small ones, at concrete input shapes.

ONNX shape inference works on symbols and loses them where a shape is computed at run time (a
Resize sized from ``Shape -> Slice -> Concat``, a Reshape fed by ``Shape -> Gather -> Concat``).
Here every graph input gets concrete sizes, so each node's outputs are known exactly: small
tensors (shape arithmetic) are computed with numpy (``kernels``), and every other output's shape
comes from ONNX's own per-node inference given those values. If/Loop/Scan bodies are evaluated
with their outer scope.

Several *points* (say the same inputs at batch 1 and at batch 8) are evaluated in lockstep, node
by node in graph order, so a caller sees which dims follow the batch. A ``hook`` may replace a
node's inputs at some points before the node is evaluated: set_batch tries a rewritten shape
constant there, and everything downstream sees the result.

Weights are never read: only tensors of at most ``SMALL`` elements get a value, and external data
is never opened, so a model with gigabytes of weights costs what its graph costs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from patchspec.model.graph import NodeSite, has_body, subgraphs
from patchspec.shapes.annotations import as_specified, collector_paused
from patchspec.shapes.kernels import values_of
from patchspec.shapes.known import (
    UNKNOWN,
    Known,
    constant_known,
    known_of_array,
    known_of_tensor,
    known_of_type,
    merge,
    shape_only,
    stacked,
    type_proto,
)
from patchspec.shapes.loop_trips import loop_trips
from patchspec.shapes.ml_shapes import ml_outputs
from patchspec.shapes.ms_shapes import ms_outputs

#: ``hook(site, inputs)`` gets, per point, the node's input Knowns; it returns replacements or None
Hook = Callable[[NodeSite, list[list[Known]]], list[list[Known]] | None]
#: the outputs of one node at one point
Outputs = list[Known]


class ShapeEvaluator:
    """Evaluates a model at several points in lockstep; ``known[name]`` holds one Known per point.

    ``hook_ops``, when given, names the op types the hook is called for (it is then not called for
    the others, which saves a call per node on large graphs)."""

    def __init__(
        self,
        model: onnx.ModelProto,
        points: Sequence[dict[str, Known]],
        hook: Hook | None = None,
        hook_ops: Collection[str] | None = None,
    ) -> None:
        self.model = model
        self.points = list(points)
        self.hook = hook
        self.hook_ops = None if hook_ops is None else frozenset(hook_ops)
        self.known: dict[str, list[Known]] = {}
        self.producer: dict[str, NodeSite] = {}
        self._opsets = {entry.domain or "": entry.version for entry in model.opset_import}
        self._opsets.setdefault("", self._opsets.get("ai.onnx", 1))
        self._schemas: dict[tuple[str, str], onnx.defs.OpSchema | None] = {}
        self._inferred: dict[Hashable, Outputs] = {}  # see evaluate
        self._rows: dict[Hashable, list[list[Known]]] = {}  # per node key and input rows: its output rows
        self._counter = 0
        self._hooked: tuple[onnx.NodeProto | None, Hashable | None] = (None, None)  # the node the hook sees
        #: per body graph (by id): whether it runs at each point; a branch an If does not take is dead
        self._runs: dict[int, list[bool]] = {id(model.graph): [True] * len(self.points)}
        #: per body graph (by id): the node that owns it and the attribute holding it
        self.owners: dict[int, tuple[onnx.NodeProto, str]] = {}

    @property
    def count(self) -> int:
        return len(self.points)

    def run(self) -> ShapeEvaluator:
        graph = self.model.graph
        for tensor in graph.initializer:
            self.known[tensor.name] = [known_of_tensor(tensor)] * self.count
        for info in graph.input:
            if info.name in self.known:
                continue  # an initializer listed as an input (old exports): a constant
            self.known[info.name] = [point.get(info.name, known_of_type(info.type)) for point in self.points]
        self._run_graph(graph, (graph,))
        return self

    def at(self, name: str) -> list[Known]:
        return self.known.get(name) or [UNKNOWN] * self.count

    def stopped_at(self, point: int = 0) -> onnx.NodeProto | None:
        """The first node of the main graph whose inputs are known at ``point`` and whose first output
        is not: where the evaluation stops there (None: it stops nowhere)."""
        node: onnx.NodeProto
        for node in self.model.graph.node:
            if not node.output or self.at(node.output[0])[point].shape is not None:
                continue
            if all(self.at(name)[point].shape is not None for name in node.input if name):
                return node
        return None

    def opset(self, domain: str = "") -> int:
        """The model's opset version for ``domain`` (1 where it imports none)."""
        return int(self._opsets.get(domain, 1))

    def runs(self, site: NodeSite) -> list[bool]:
        """Per point, whether ``site``'s node runs: False inside an If branch not taken there."""
        return self._runs.get(id(site.scopes[-1])) or [True] * self.count

    def where(self, site: NodeSite) -> str:
        """Where a node sits, for messages: '' in the main graph, else " (in If 'x', then_branch)"."""
        path = []
        for graph in site.scopes[1:]:
            owner, attr = self.owners.get(id(graph), (None, ""))
            if owner is not None:
                path.append(f"{owner.op_type} '{owner.name or owner.output[0]}' {attr}")
        return f" (in {', '.join(path)})" if path else ""

    # -- traversal --------------------------------------------------------------------------------
    def _run_graph(self, graph: onnx.GraphProto, scopes: tuple[onnx.GraphProto, ...]) -> None:
        """Every node of ``graph`` in order, at every point: the hot loop on large models. Each node is
        touched once, and inferred once per distinct (op, attributes, input signatures); the cyclic
        garbage collector is paused meanwhile (the Knowns made here hold no cycles, and a collection
        walks every one of them)."""
        with collector_paused():
            self._walk(graph, scopes)

    def _walk(self, graph: onnx.GraphProto, scopes: tuple[onnx.GraphProto, ...]) -> None:
        count, known, producer = self.count, self.known, self.producer
        unknown_row = [UNKNOWN] * count
        for tensor in graph.initializer if len(scopes) > 1 else ():
            known[tensor.name] = [known_of_tensor(tensor)] * count
        for node in graph.node:
            site = NodeSite(self._counter, node, scopes)
            self._counter += 1
            rows = [known.get(name, unknown_row) if name else unknown_row for name in node.input]
            if has_body(node):
                outputs = _by_output(node, self._control_flow(site, _per_point(rows, count)))
            else:
                outputs = self._node_outputs(site, rows)
            for name, row in zip(node.output, outputs):
                if name:
                    known[name] = row
                    producer[name] = site

    def _node_outputs(self, site: NodeSite, rows: list[list[Known]]) -> list[list[Known]]:
        """Per output, one Known per point, of a node without a body, given per input one Known per point.

        A node the hook is not called for is looked up by its inputs at every point at once: the layers
        of a deep network repeat those exactly, and then the node costs one lookup."""
        node, hook = site.node, self.hook
        static = _node_key(node)
        if hook is None or (self.hook_ops is not None and node.op_type not in self.hook_ops):
            if static is None:
                return _by_output(node, self._point_outputs(node, static, _per_point(rows, self.count)))
            key = (static, tuple([tuple([k.signature for k in row]) for row in rows]))
            found = self._rows.get(key)
            if found is None:  # the same objects as a lookup point by point gives (see _point_outputs)
                outputs = self._point_outputs(node, static, _per_point(rows, self.count))
                found = self._rows[key] = _by_output(node, outputs)
            return [list(row) for row in found]
        self._hooked = (node, static)  # the hook's evaluations of this node reuse its key
        inputs = _per_point(rows, self.count)
        inputs = hook(site, inputs) or inputs
        return _by_output(node, self._point_outputs(node, static, inputs))

    def _point_outputs(self, node: onnx.NodeProto, static: Hashable | None, inputs: list[list[Known]]) -> list[Outputs]:
        """The node's outputs at each point, each remembered by (``static``, its inputs' signatures)."""
        if static is None:
            return [self._evaluate_once(node, at_point) for at_point in inputs]
        inferred, outputs = self._inferred, []
        for at_point in inputs:
            key = _point_key(node, static, at_point)
            found = inferred.get(key)
            if found is None:
                found = inferred[key] = self._evaluate_once(node, at_point)
            outputs.append(found)
        return outputs

    def _input(self, name: str, point: int) -> Known:
        if not name:
            return UNKNOWN
        found = self.known.get(name)
        return found[point] if found else UNKNOWN

    # -- one node at one point ---------------------------------------------------------------------
    def evaluate(self, node: onnx.NodeProto, inputs: list[Known]) -> Outputs:
        """The outputs of ``node`` given its inputs at one point (UNKNOWN where nothing can be said).

        Remembered by what decides them: the op, its attributes and the inputs' types, shapes and
        small values (the blocks of a deep network repeat those exactly, at every point)."""
        if node is self._hooked[0]:
            return self._evaluate_keyed(node, self._hooked[1], inputs)
        return self._evaluate_keyed(node, None if has_body(node) else _node_key(node), inputs)

    def _evaluate_keyed(self, node: onnx.NodeProto, static: Hashable | None, inputs: list[Known]) -> Outputs:
        if static is None:  # a node with a body, or a Constant: evaluated as it is
            return self._evaluate_once(node, inputs)
        key = _point_key(node, static, inputs)
        found = self._inferred.get(key)
        if found is None:
            found = self._inferred[key] = self._evaluate_once(node, inputs)
        return found

    def _evaluate_once(self, node: onnx.NodeProto, inputs: list[Known]) -> Outputs:
        count = len(node.output)
        if node.domain not in ("", "ai.onnx"):
            classical = ml_outputs(node, inputs) if node.domain == "ai.onnx.ml" else None
            classical = ms_outputs(node, inputs) if node.domain == "com.microsoft" else classical
            if classical is not None:  # ONNX infers few of them (and no contrib op)
                return classical + [UNKNOWN] * (count - len(classical))
            return self._infer(node, inputs)
        if node.op_type == "Constant":
            known = constant_known(node)
            if known is not None:
                return [known] + [UNKNOWN] * (count - 1)
        try:
            values = values_of(node, inputs, self._opsets[""])
        except Exception:  # a value op on odd inputs: fall back to inference, which says why or nothing
            values = None
        if values is not None:
            return [known_of_array(v) for v in values] + [UNKNOWN] * (count - len(values))
        return self._infer(node, inputs)

    def _infer(self, node: onnx.NodeProto, inputs: list[Known]) -> Outputs:
        unknown = [UNKNOWN] * len(node.output)
        schema = self._schema(node)
        if schema is None:
            return unknown
        types, data = {}, {}
        for name, known in zip(node.input, inputs):
            if not name or known.dtype == 0:
                continue
            types[name] = type_proto(known)
            if known.value is not None:
                data[name] = numpy_helper.from_array(np.asarray(known.value), name)
        try:
            inferred = onnx.shape_inference.infer_node_outputs(schema, as_specified(node), types, data)
        except Exception:  # a mismatch at this point (a batch that does not fit): nothing known
            return unknown
        outputs = [known_of_type(inferred[name]) if name in inferred else UNKNOWN for name in node.output]
        if node.op_type == "Gemm" and not _bias_fits(inputs[2:3], outputs[0]):
            return unknown  # onnx infers [M, N] from A and B alone; onnxruntime refuses a C that does not fit
        if outputs and outputs[0].shape is None and node.op_type in BROADCASTING:
            outputs[0] = _broadcast(node.op_type, inputs) or outputs[0]  # ops defined by a function body
        return outputs

    def _schema(self, node: onnx.NodeProto) -> onnx.defs.OpSchema | None:
        domain = "" if node.domain == "ai.onnx" else node.domain
        key = (node.op_type, domain)
        if key not in self._schemas:
            try:
                self._schemas[key] = onnx.defs.get_schema(node.op_type, self._opsets.get(domain, 1), domain)
            except Exception:  # no schema: a custom op or a model-local function
                self._schemas[key] = None
        return self._schemas[key]

    # -- If / Loop / Scan -------------------------------------------------------------------------------
    def _control_flow(self, site: NodeSite, inputs: list[list[Known]]) -> list[Outputs]:
        node = site.node
        bodies = {attr.name: attr.g for attr in node.attribute if attr.HasField("g")}
        outer = self.runs(site)
        for attr in node.attribute:
            for body in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                self.owners[id(body)] = (node, attr.name)
                self._runs[id(body)] = list(outer)
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and len(bodies) == 2:
            return self._if(site, bodies["then_branch"], bodies["else_branch"], inputs)
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and "body" in bodies:
            return self._loop(site, bodies["body"], inputs)
        if node.op_type == "Scan" and node.domain in ("", "ai.onnx") and "body" in bodies:
            return self._scan(site, bodies["body"], inputs)
        for sub in subgraphs(node):  # an unknown op with bodies: visit them, outputs unknown
            self._bind(sub, [[UNKNOWN] * len(sub.input)] * self.count)
            self._run_graph(sub, site.scopes + (sub,))
        return [[UNKNOWN] * len(node.output)] * self.count

    def _bind(self, body: onnx.GraphProto, per_point: list[list[Known]]) -> None:
        for index, info in enumerate(body.input):
            self.known[info.name] = [
                per_point[p][index] if index < len(per_point[p]) else UNKNOWN for p in range(self.count)
            ]

    def _body_outputs(self, body: onnx.GraphProto) -> list[list[Known]]:
        """Per point, the Knowns of ``body``'s outputs."""
        return [[self._input(info.name, p) for info in body.output] for p in range(self.count)]

    def _if(
        self, site: NodeSite, then_body: onnx.GraphProto, else_body: onnx.GraphProto, inputs: list[list[Known]]
    ) -> list[Outputs]:
        for p in range(self.count):
            taken = _condition(inputs[p])
            if taken is not None:
                self._runs[id(else_body if taken else then_body)][p] = False
        branches = []
        for body in (then_body, else_body):
            self._run_graph(body, site.scopes + (body,))
            branches.append(self._body_outputs(body))
        outputs = []
        for p in range(self.count):
            taken = _condition(inputs[p])
            if taken is not None:
                outputs.append(branches[0 if taken else 1][p])
            else:
                outputs.append([merge(a, b) for a, b in zip(branches[0][p], branches[1][p])])
        return outputs

    def _loop(self, site: NodeSite, body: onnx.GraphProto, inputs: list[list[Known]]) -> list[Outputs]:
        carried = len(site.node.input) - 2
        bound = [
            [Known(TensorProto.INT64, (), np.array(0, dtype=np.int64)), Known(TensorProto.BOOL, ())]
            + [shape_only(k) for k in inputs[p][2:]]
            for p in range(self.count)
        ]
        self._bind(body, bound)
        self._run_graph(body, site.scopes + (body,))
        body_out = self._body_outputs(body)
        outputs = []
        for p in range(self.count):
            trips = inputs[p][0].value if inputs[p] and inputs[p][0].value is not None else None
            trip = int(np.asarray(trips).reshape(-1)[0]) if trips is not None and np.asarray(trips).size == 1 else None
            if trip is None or trip >= _ENDLESS:  # a bound, not a count: the condition stops it, if it counts
                trip = loop_trips(body, (site.node.input, inputs[p]), (self.known, p), self.opset())
            states = [merge(first, after) for first, after in zip(inputs[p][2:], body_out[p][1 : 1 + carried])]
            scans = [stacked(k, trip, 0) for k in body_out[p][1 + carried :]]
            outputs.append((states + scans)[: len(site.node.output)])
        return outputs

    def _scan(self, site: NodeSite, body: onnx.GraphProto, inputs: list[list[Known]]) -> list[Outputs]:
        node = site.node
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "body"}
        scanned = int(attrs.get("num_scan_inputs", 0))
        states = len(node.input) - scanned
        in_axes = list(attrs.get("scan_input_axes", [])) or [0] * scanned
        out_axes = list(attrs.get("scan_output_axes", []))
        bound, lengths = [], []
        for p in range(self.count):
            slices, length = [], None
            for k, axis in zip(inputs[p][states:], in_axes):
                if k.shape is None:
                    slices.append(Known(k.dtype))
                    continue
                axis %= max(len(k.shape), 1)
                length = k.shape[axis] if length is None else length
                slices.append(Known(k.dtype, k.shape[:axis] + k.shape[axis + 1 :]))
            bound.append([shape_only(k) for k in inputs[p][:states]] + slices)
            lengths.append(length)
        self._bind(body, bound)
        self._run_graph(body, site.scopes + (body,))
        body_out = self._body_outputs(body)
        outputs = []
        for p in range(self.count):
            finals = [merge(first, after) for first, after in zip(inputs[p][:states], body_out[p][:states])]
            scans = [
                stacked(k, lengths[p], out_axes[j] if j < len(out_axes) else 0)
                for j, k in enumerate(body_out[p][states:])
            ]
            outputs.append((finals + scans)[: len(node.output)])
        return outputs


def _node_key(node: onnx.NodeProto) -> Hashable | None:
    """What ONNX's inference of ``node`` depends on besides its inputs, names aside; None for a
    Constant (read as it is: a weight's bytes are never serialized into a key)."""
    if node.op_type == "Constant":
        return None
    given = node.attribute
    attributes = tuple([attribute.SerializeToString() for attribute in given]) if given else ()
    present = tuple(map(bool, node.input))
    return node.op_type, node.domain, len(node.output), present, attributes


def _per_point(rows: list[list[Known]], count: int) -> list[list[Known]]:
    """Per input one Known per point -> per point one Known per input."""
    return [list(column) for column in zip(*rows)] if rows else [[] for _ in range(count)]


def _by_output(node: onnx.NodeProto, outputs: list[Outputs]) -> list[list[Known]]:
    """Per point the node's outputs -> per (named) output one Known per point."""
    return [[at_point[index] for at_point in outputs] if name else [] for index, name in enumerate(node.output)]


def _point_key(node: onnx.NodeProto, static: Hashable, inputs: list[Known]) -> Hashable:
    """What the outputs of a node with key ``static`` depend on at one point: its inputs' signatures.

    For an op of ``SHAPE_ONLY`` one of whose inputs has no value, the others' values do not count:
    no kernel computes the output then, and ONNX's inference of it reads types and shapes only (the
    norm scale or bias of each layer, a small constant of its own, would otherwise make each layer's
    node a new inference)."""
    op, domain = static[0], static[1]  # type: ignore[index]
    if op in SHAPE_ONLY and domain in ("", "ai.onnx"):
        if any(known.value is None for name, known in zip(node.input, inputs) if name):
            return static, tuple([(known.dtype, known.shape) for known in inputs])
    return static, tuple([known.signature for known in inputs])


def _condition(inputs: list[Known]) -> bool | None:
    """An If's condition at one point, when it is known and one element."""
    cond = inputs[0].value if inputs else None
    if cond is None or np.asarray(cond).size != 1:
        return None
    return bool(np.asarray(cond).reshape(-1)[0])


#: elementwise ops whose output shape is the broadcast of their inputs (bool for comparisons)
COMPARISONS = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not"}
BROADCASTING = COMPARISONS | {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "PRelu"}
#: ops whose ONNX inference reads its inputs' types and shapes, never their values (``_point_key``)
SHAPE_ONLY = BROADCASTING | {"MatMul", "Gemm", "Conv", "LayerNormalization"}


#: a Loop's trip count from which it is only a bound (tf.map_fn's INT64_MAX): its condition stops it
_ENDLESS = 1 << 31


def _bias_fits(bias: list[Known], output: Known) -> bool:
    """Whether Gemm's C (if any) broadcasts to its output ``[M, N]`` without growing it."""
    shapes = [k.shape for k in (*bias, output)]
    if len(shapes) < 2 or any(shape is None or None in shape for shape in shapes):
        return True
    c, out = (tuple(d or 0 for d in shape or ()) for shape in shapes)
    return len(c) <= len(out) and all(d in (1, o) for d, o in zip(reversed(c), reversed(out)))


def _broadcast(op: str, inputs: list[Known]) -> Known | None:
    shapes = [k.shape for k in inputs if k.dtype]
    sizes = [tuple(d for d in s if d is not None) for s in shapes if s is not None]
    if not shapes or [len(s) for s in sizes] != [len(s) if s is not None else -1 for s in shapes]:
        return None  # a rank or a dim unknown
    try:
        shape = np.broadcast_shapes(*sizes)
    except ValueError:
        return None
    dtype = TensorProto.BOOL if op in COMPARISONS else inputs[-1 if op == "Where" else 0].dtype
    return Known(dtype, tuple(int(d) for d in shape))


__all__ = ["Hook", "ShapeEvaluator"]
