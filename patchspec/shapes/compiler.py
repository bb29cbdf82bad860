"""Compile a list of shape ITEMs (integers and expression strings) into ONNX nodes.

The result is an int64 1-D tensor with one element per item, built in the model's own opset:
``Shape`` (with ``start``/``end`` from opset 15), ``Gather`` for ``dim()`` and ``value()``,
``Add``/``Sub``/``Mul``/``Div``/``Mod``/``Neg``, ``Min``/``Max`` (``Less``+``Where`` before opset 12),
``Cast`` and one ``Concat``. Every item is carried as a 1-element tensor so that no Unsqueeze is
needed; known pieces are folded; one Shape node is made per tensor and reused; repeated
sub-expressions are emitted once. ``//`` floors like Python: ONNX ``Div`` on int64 truncates, so a
single ``Div`` is emitted only where both operands are proven non-negative (sizes and literals),
otherwise ``a - Mod(a, b)`` is divided, which is exact. ``%`` is ``Mod`` with ``fmod=0``, which
takes the divisor's sign as Python does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from patchspec.errors import did_you_mean
from patchspec.model.graph import Namer, constant_value
from patchspec.shapes import expressions as ex
from patchspec.shapes.annotations import read_dim

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


class ShapeCompileError(Exception):
    """An item cannot be compiled against this model (unknown tensor, axis out of range, ...)."""

    def __init__(self, item: int, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.item, self.message, self.hint = item, message, hint


@dataclass
class TensorFacts:
    """What the model says about one tensor; ``dims`` entries are ints or None (unknown)."""

    name: str
    dims: list[int | None] | None = None  # None: rank unknown
    dtype: int | None = None
    constant: np.ndarray[Any, Any] | None = None  # the value, when it is a true constant we could read


class TensorIndex:
    """Every tensor name visible in ``graphs`` (outer first) with its rank, dtype and constant value."""

    def __init__(self, graphs: list[onnx.GraphProto]) -> None:
        self.facts: dict[str, TensorFacts] = {}
        for graph in graphs:
            self._add_graph(graph)

    def _add_graph(self, graph: onnx.GraphProto) -> None:
        input_names = {v.name for v in graph.input}
        for node in graph.node:
            for name in node.output:
                if name:
                    self.facts.setdefault(name, TensorFacts(name))
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
                value = constant_value(node)
                if value is not None:
                    self.facts[node.output[0]] = TensorFacts(
                        node.output[0],
                        [int(d) for d in value.shape],
                        helper.np_dtype_to_tensor_dtype(value.dtype),
                        value,
                    )
        for init in graph.initializer:
            value = None
            if init.name not in input_names and init.data_location != TensorProto.EXTERNAL:
                value = numpy_helper.to_array(init)
            self.facts[init.name] = TensorFacts(init.name, [int(d) for d in init.dims], init.data_type, value)
        for info in [*graph.value_info, *graph.output, *graph.input]:
            facts = self.facts.setdefault(info.name, TensorFacts(info.name))
            if facts.constant is None and info.type.HasField("tensor_type"):
                tensor_type = info.type.tensor_type
                facts.dtype = tensor_type.elem_type or facts.dtype
                if tensor_type.HasField("shape"):
                    facts.dims = [
                        size if isinstance(size := read_dim(d), int) else None  # -1: unknown
                        for d in tensor_type.shape.dim
                    ]

    def get(self, name: str) -> TensorFacts | None:
        return self.facts.get(name)

    def require(self, name: str) -> TensorFacts:
        """The facts of a name ``ShapeCompiler`` has checked exists."""
        facts = self.facts.get(name)
        if facts is None:
            raise KeyError(f"no tensor '{name}' in the index: check the reference before compiling it")
        return facts


@dataclass
class Piece:
    """One compiled value: a known integer, or a 1-element int64 tensor; ``nonneg`` if proven >= 0."""

    const: int | None = None
    tensor: str | None = None
    nonneg: bool = False


@dataclass
class CompiledShape:
    """What :meth:`ShapeCompiler.compile` made: ``constant`` when every item folded, else ``output``."""

    constant: list[int] | None
    output: str | None
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)


OPS = {"+": "Add", "-": "Sub", "*": "Mul", "%": "Mod", "min": "Min", "max": "Max"}
MIN_OPSET = 11


class ShapeCompiler:
    """Compiles items for one target; ``prefix`` starts every new name (``patchspec/patches[2]/...``)."""

    def __init__(self, index: TensorIndex, opset: int, namer: Namer, prefix: str) -> None:
        self.index, self.opset, self.namer, self.prefix = index, opset, namer, prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._consts: dict[tuple[int | str, ...], str] = {}
        self._memo: dict[str, Piece] = {}
        self._shape_of: dict[str, str] = {}
        self._rows: dict[str, dict[tuple[int, ...], str]] = {}
        self._uses: dict[str, set[tuple[str, int] | tuple[str, int, int]]] = {}  # distinct reads of each tensor's shape
        self._runs: dict[int, tuple[str, int, int]] = {}  # item -> (tensor, first axis, count)
        self._item = 0

    # -- entry point ----------------------------------------------------------------------------
    def compile(self, items: list[int | str]) -> CompiledShape:
        if self.opset < MIN_OPSET:
            msg = f"computed shapes need opset {MIN_OPSET} or newer; the model imports opset {self.opset}"
            raise ShapeCompileError(0, msg)
        parsed = [ex.parse(item) if isinstance(item, str) else ex.Number(int(item), 1) for item in items]
        for self._item, expr in enumerate(parsed):
            for ref in ex.tensor_refs(expr):
                self._check_ref(ref)
        self._plan_dims(parsed)
        pieces, skip = [], 0
        for self._item, expr in enumerate(parsed):
            if skip:
                skip -= 1
                continue
            if self._item in self._runs:
                tensor, first, count = self._runs[self._item]
                pieces.append(self._run_piece(tensor, first, count))
                skip = count - 1
                continue
            pieces.append(self._compile(expr))
        folded = [p.const for p in pieces if p.const is not None]
        if len(folded) == len(pieces):
            return CompiledShape(folded, None)
        output = self._concat(pieces)
        return CompiledShape(None, output, self.nodes, self.initializers)

    # -- static checks against the model ------------------------------------------------------------------
    def _check_ref(self, ref: ex.Dim | ex.Value) -> None:
        facts = self.index.get(ref.tensor)
        func = "dim" if isinstance(ref, ex.Dim) else "value"
        if facts is None:
            near = did_you_mean(ref.tensor, self.index.facts, limit=5)
            hint = "add it with an add_input patch if the export dropped it" if not near else None
            raise ShapeCompileError(
                self._item,
                f"col {ref.column}: {func}() reads tensor '{ref.tensor}', which is not in the model{near}",
                hint,
            )
        if isinstance(ref, ex.Dim):
            if facts.dims is not None and not -len(facts.dims) <= ref.axis < len(facts.dims):
                msg = f"col {ref.column}: axis {ref.axis} is out of range for '{ref.tensor}' of rank {len(facts.dims)}"
                raise ShapeCompileError(self._item, msg)
            return
        if facts.dtype is not None and facts.dtype not in INTEGER_TYPES:
            dtype = helper.tensor_dtype_to_string(facts.dtype).removeprefix("TensorProto.")
            raise ShapeCompileError(
                self._item, f"col {ref.column}: value() reads integer tensors; '{ref.tensor}' is {dtype.lower()}"
            )
        if facts.dims is not None:
            if len(ref.indices) != len(facts.dims):
                msg = (
                    f"col {ref.column}: value() needs {len(facts.dims)} indices for '{ref.tensor}' "
                    f"of rank {len(facts.dims)}, got {len(ref.indices)}"
                )
                raise ShapeCompileError(self._item, msg)
            for axis, (i, size) in enumerate(zip(ref.indices, facts.dims)):
                if size is not None and not -size <= i < size:
                    msg = f"col {ref.column}: index {i} is out of range for axis {axis} of '{ref.tensor}' (size {size})"
                    raise ShapeCompileError(self._item, msg)

    # -- planning reads of shapes ---------------------------------------------------------------------------
    def _axis(self, tensor: str, axis: int) -> int:
        dims = self.index.require(tensor).dims
        return axis % len(dims) if dims is not None else axis

    def _plan_dims(self, parsed: list[ex.Expr]) -> None:
        """Find items that are consecutive axes of one tensor (one Shape slice) and count shape reads."""

        def bare_dim(expr: ex.Expr) -> tuple[str, int] | None:
            if isinstance(expr, ex.Dim) and self.index.require(expr.tensor).constant is None:
                return expr.tensor, self._axis(expr.tensor, expr.axis)
            return None

        index = 0
        while index < len(parsed):
            start = bare_dim(parsed[index])
            count = 1
            while (
                start
                and index + count < len(parsed)
                and bare_dim(parsed[index + count]) == (start[0], start[1] + count)
                and start[1] + count != 0
            ):
                count += 1
            if start is not None and count > 1:
                self._runs[index] = (start[0], start[1], count)
                self._uses.setdefault(start[0], set()).add(("run", start[1], count))
            else:
                for ref in ex.tensor_refs(parsed[index]):
                    if isinstance(ref, ex.Dim) and self.index.require(ref.tensor).constant is None:
                        self._uses.setdefault(ref.tensor, set()).add(("axis", self._axis(ref.tensor, ref.axis)))
            index += count

    def _run_piece(self, tensor: str, first: int, count: int) -> Piece:
        last = first + count - 1
        dims = self.index.require(tensor).dims
        whole = dims is not None and first == 0 and last == len(dims) - 1
        alone = len(self._uses[tensor]) == 1
        if whole:
            return Piece(tensor=self._shape(tensor), nonneg=True)
        label = f"dims/{tensor}/{first}_{last}"
        end = {} if last == -1 else {"end": last + 1}
        if alone and self.opset >= 15:
            return Piece(tensor=self._node("Shape", [tensor], label, start=first, **end), nonneg=True)
        ends = self._const([last + 1 if last != -1 else ex.INT64_MAX])
        sliced = self._node("Slice", [self._shape(tensor), self._const([first]), ends, self._const([0])], label)
        return Piece(tensor=sliced, nonneg=True)

    # -- expressions -------------------------------------------------------------------------------------
    def _compile(self, expr: ex.Expr) -> Piece:
        key = ex.to_text(expr)
        if key not in self._memo:
            self._memo[key] = self._compile_new(expr)
        return self._memo[key]

    def _compile_new(self, expr: ex.Expr) -> Piece:
        if isinstance(expr, ex.Number):
            return Piece(const=expr.value, nonneg=expr.value >= 0)
        if isinstance(expr, ex.Dim):
            return self._dim(expr)
        if isinstance(expr, ex.Value):
            return self._value(expr)
        if isinstance(expr, ex.Negate):
            inner = self._compile(expr.operand)
            if inner.const is not None:
                return self._folded(-inner.const, expr.column)
            return Piece(tensor=self._node("Neg", [self._tensor(inner)], "neg"))
        op = expr.function if isinstance(expr, ex.MinMax) else expr.op
        return self._binary(op, self._compile(expr.left), self._compile(expr.right), expr.column)

    def _folded(self, value: int, column: int) -> Piece:
        if not ex.INT64_MIN <= value <= ex.INT64_MAX:
            raise ShapeCompileError(self._item, f"col {column}: result {value} does not fit in int64")
        return Piece(const=value, nonneg=value >= 0)

    def _binary(self, op: str, left: Piece, right: Piece, column: int) -> Piece:
        if left.const is not None and right.const is not None:
            try:
                return self._folded(ex.apply_op(op, left.const, right.const, column), column)
            except ex.ExpressionError as exc:
                raise ShapeCompileError(self._item, str(exc)) from None
        simple = _identity(op, left, right)
        if simple is not None:
            return simple
        nonneg = _nonneg(op, left, right)
        a, b = self._tensor(left), self._tensor(right)
        if op == "//":
            if not (left.nonneg and right.nonneg):
                remainder = self._node("Mod", [a, b], "mod", fmod=0)
                a = self._node("Sub", [a, remainder], "sub")
            return Piece(tensor=self._node("Div", [a, b], "floordiv"), nonneg=nonneg)
        if op in ("min", "max") and self.opset < 12:
            less = self._node("Less", [a, b], "less")
            picked = [a, b] if op == "min" else [b, a]
            return Piece(tensor=self._node("Where", [less, *picked], op), nonneg=nonneg)
        extra = {"fmod": 0} if op == "%" else {}
        return Piece(tensor=self._node(OPS[op], [a, b], OPS[op].lower(), **extra), nonneg=nonneg)

    # -- reading the model ---------------------------------------------------------------------------------------
    def _dim(self, ref: ex.Dim) -> Piece:
        facts = self.index.require(ref.tensor)
        if facts.constant is not None:
            return Piece(const=int(facts.constant.shape[ref.axis]), nonneg=True)
        axis = self._axis(ref.tensor, ref.axis)
        label = f"dim/{ref.tensor}/{axis}"
        if len(self._uses[ref.tensor]) == 1 and self.opset >= 15:
            end = {} if axis == -1 else {"end": axis + 1}
            return Piece(tensor=self._node("Shape", [ref.tensor], label, start=axis, **end), nonneg=True)
        shape = self._shape(ref.tensor)
        return Piece(tensor=self._node("Gather", [shape, self._const([axis])], label, axis=0), nonneg=True)

    def _shape(self, tensor: str) -> str:
        if tensor not in self._shape_of:
            self._shape_of[tensor] = self._node("Shape", [tensor], f"shape/{tensor}")
        return self._shape_of[tensor]

    def _value(self, ref: ex.Value) -> Piece:
        facts = self.index.require(ref.tensor)
        if facts.constant is not None and facts.constant.ndim == len(ref.indices):
            return self._folded(int(facts.constant[ref.indices]), ref.column)
        element = self._gather_path(ref.tensor, ref.indices)
        if facts.dtype != TensorProto.INT64:
            label = f"value/{ref.tensor}/" + "_".join(str(i) for i in ref.indices)
            element = self._node("Cast", [element], label + "/int64", to=TensorProto.INT64)
        return Piece(tensor=element)

    def _gather_path(self, tensor: str, indices: tuple[int, ...]) -> str:
        """Scalar Gathers down the leading indices (rows shared between values), then one 1-D Gather."""
        label = f"value/{tensor}/" + "_".join(str(i) for i in indices)
        row = self._row(tensor, indices[:-1])
        return self._node("Gather", [row, self._const([indices[-1]])], label, axis=0)

    def _row(self, tensor: str, prefix: tuple[int, ...]) -> str:
        if not prefix:
            return tensor
        rows = self._rows.setdefault(tensor, {})
        if prefix not in rows:
            outer = self._row(tensor, prefix[:-1])
            label = f"value/{tensor}/" + "_".join(str(i) for i in prefix) + "_row"
            rows[prefix] = self._node("Gather", [outer, self._scalar(prefix[-1])], label, axis=0)
        return rows[prefix]

    # -- emitting -------------------------------------------------------------------------------------------------
    def _tensor(self, piece: Piece) -> str:
        if piece.tensor is not None:
            return piece.tensor
        if piece.const is None:
            raise ValueError("a Piece holds a constant or a tensor")
        return self._const([piece.const])

    def _const(self, values: list[int]) -> str:
        key = tuple(values)
        if key not in self._consts:
            name = self.namer.fresh(f"{self.prefix}/const/" + "_".join(str(v) for v in values))
            self.initializers.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
            self._consts[key] = name
        return self._consts[key]

    def _scalar(self, value: int) -> str:
        key = ("scalar", value)
        if key not in self._consts:
            name = self.namer.fresh(f"{self.prefix}/const/scalar_{value}")
            self.initializers.append(numpy_helper.from_array(np.array(value, dtype=np.int64), name))
            self._consts[key] = name
        return self._consts[key]

    def _node(self, op_type: str, inputs: list[str], label: str, **attrs: Any) -> str:
        name = self.namer.fresh(f"{self.prefix}/{label}")
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def _concat(self, pieces: list[Piece]) -> str:
        parts: list[str] = []
        run: list[int] = []
        for piece in pieces:
            if piece.const is not None:
                run.append(piece.const)
                continue
            if run:
                parts.append(self._const(run))
                run = []
            parts.append(self._tensor(piece))
        if run:
            parts.append(self._const(run))
        if len(parts) == 1:
            return parts[0]
        return self._node("Concat", parts, "shape", axis=0)


def _identity(op: str, left: Piece, right: Piece) -> Piece | None:
    """x + 0, 0 + x, x - 0, x * 1, 1 * x, x // 1 -> x; x * 0 -> 0."""
    if op in ("+", "-", "*", "//") and right.const == {"+": 0, "-": 0, "*": 1, "//": 1}[op]:
        return left
    if op in ("+", "*") and left.const == {"+": 0, "*": 1}[op]:
        return right
    if op == "*" and 0 in (left.const, right.const):
        return Piece(const=0, nonneg=True)
    return None


def _nonneg(op: str, left: Piece, right: Piece) -> bool:
    if op in ("+", "*", "//", "min"):
        return left.nonneg and right.nonneg
    if op == "max":
        return left.nonneg or right.nonneg
    if op == "%":
        return right.nonneg
    return False
