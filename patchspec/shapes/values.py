"""What values an input needs, where the graph says so.

A random array is a fine input for a float tensor. Integer inputs are different: a sample rate that
picks an If branch, token ids that index an embedding table, a 0/1 mask. Each rule here reads a
fact from the graph (a comparison with a constant, a Gather's table, a cast into arithmetic) and
says why; an integer input no rule explains is flagged, never given a value that merely runs. A STRING
input gets the strings the graph names for it (a LabelEncoder's keys), or is flagged.
An input no node reads takes any values (it is said to be unread); a boolean input is a mask.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from patchspec.model.graph import NodeSite, ScopeIndex, all_graphs, node_label, walk_nodes
from patchspec.shapes.coordinates import Bounds, coordinates
from patchspec.shapes.lengths import length_axes, lengths_along
from patchspec.shapes.sizes import output_sizes

#: ops that pass a value through unchanged, or pick some of its elements (operand 0: the last token of
#: a prefix, Gather(prefix, -1, axis=1); any operand of a Concat), for following an input to where it is used
_PASS_THROUGH = {
    "Cast",
    "Unsqueeze",
    "Squeeze",
    "Reshape",
    "Identity",
    "Flatten",
    "Expand",
    "Gather",
    "GatherElements",
    "Slice",
    "Split",
    "Transpose",
    "Tile",
    "Concat",
}
#: the operands through which a negative-index wrap passes an index on (Where's branches, Mod's dividend)
_WRAPS: dict[str, tuple[int, ...]] = {"Where": (1, 2), "Mod": (0,)}
#: ops that carry a boolean on towards a condition
_LOGIC = {"Not", "And", "Or", "Xor", "Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity"}
_COMPARISONS = {"Equal": 0, "Greater": 1, "GreaterOrEqual": 0, "Less": -1, "LessOrEqual": 0}
_ARITHMETIC = {"Sub", "Mul", "Add", "Div", "Where"}
#: ops that read sequence lengths: (the input they read them as, ...); the steps are the data's time axis
_LENGTHS = {"RNN": (4,), "GRU": (4,), "LSTM": (4,), "ReverseSequence": (1,)}
#: the value ranges of the byte-sized integer types, whose inputs are pixels or quantized values
_BYTES: dict[int, tuple[int, int]] = {onnx.TensorProto.UINT8: (0, 256), onnx.TensorProto.INT8: (-128, 128)}
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


#: ops whose attributes name the strings a STRING input holds
_STRING_KEYS = {
    "LabelEncoder": ("keys_strings", "classes_strings"),  # classes_strings: LabelEncoder-1's strings
    "CategoryMapper": ("cats_strings",),
    "OneHotEncoder": ("cats_strings",),
}
#: at most this many of the strings the graph names are cycled over a run case
MAX_STRINGS = 64


@dataclass(frozen=True)
class InputValues:
    """How to fill one input in a run case, and why: ``item`` is merged into the case's input mapping
    (``{"value": 16000}``, ``{"low": 0, "high": 30522}``), or for a STRING input ``{"strings": [...]}``,
    the strings to cycle over the case's shape; ``flag`` says the graph did not tell."""

    item: dict[str, Any]
    why: str
    flag: bool = False
    #: lengths along this (input, axis): the case bounds them by that axis's size (``high`` is added there)
    upto: tuple[str, int] | None = None


def input_values(model: onnx.ModelProto, name: str, elem_type: int) -> InputValues | None:
    """None for a float input the graph reads (random values do); otherwise the values and the reason."""
    uses = _Uses(model)
    unread = name not in uses.consumers and name not in {info.name for info in model.graph.output}
    if elem_type == onnx.TensorProto.STRING:
        return uses.strings(name, unread)
    if unread:
        return InputValues({}, "unread: no node reads it, so any values do")
    if elem_type in _FLOATS:
        return None
    pixels = uses.cast_to_float(name, elem_type) if elem_type in _BYTES else None  # an image, not a mask
    found = pixels or uses.branch_value(name) or uses.table_rows(name) or uses.mask(name) or uses.zeroed(name)
    found = found or _bounded(coordinates(uses, name)) or uses.classes(name) or uses.broadcast_shape(name)
    found = found or uses.sequence_lengths(name) or _lengths(uses, name) or _sizes(uses, name)
    if found is not None:
        return found
    if elem_type == onnx.TensorProto.BOOL:
        readers = ", ".join(sorted({node_label(site.node) for site, _ in uses.reached(name, _PASS_THROUGH)}))
        return InputValues(
            {"low": 0, "high": 2},
            f"a boolean input (a mask), read by {readers}: random True/False; give real masks "
            "('file: ...') if some patterns are invalid",
        )
    return InputValues(
        {},
        "an integer input the graph says nothing definite about: give real values "
        "(a .npy file, 'file: ...') or state them ('value: ...')",
        flag=True,
    )


def _lengths(uses: _Uses, name: str) -> InputValues | None:
    found = lengths_along(uses, name)
    if found is None:
        return None
    why, bound = found
    return (
        InputValues({"low": 1, "high": bound + 1}, why)
        if isinstance(bound, int)
        else InputValues({"low": 1}, why, upto=bound)
    )


def _sizes(uses: _Uses, name: str) -> InputValues | None:
    found = output_sizes(uses, name)
    return None if found is None else InputValues({"value": found[0]}, found[1])


def _bounded(bounds: Bounds | None) -> InputValues | None:
    return None if bounds is None else InputValues({"low": bounds[0], "high": bounds[1]}, bounds[2])


class _Uses:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self._inferred: dict[str, list[int | None]] | None = None
        self.consumers: dict[str, list[tuple[NodeSite, int]]] = {}
        for site in walk_nodes(model.graph):
            for operand, tensor in enumerate(site.node.input):
                if tensor:
                    self.consumers.setdefault(tensor, []).append((site, operand))
        self.index = ScopeIndex()
        self.producers = {o: node for graph in all_graphs(model.graph) for node in graph.node for o in node.output if o}
        self.conditions = {
            node.input[0]
            for graph in all_graphs(model.graph)
            for node in graph.node
            if node.op_type == "If" and node.input
        } | {
            node.input[1]
            for graph in all_graphs(model.graph)
            for node in graph.node
            if node.op_type == "Loop" and len(node.input) > 1
        }

    def reached(self, name: str, through: set[str], wraps: bool = False) -> Iterator[tuple[NodeSite, int]]:
        """(site, operand) of every use of ``name``, following ops in ``through``; with ``wraps``, also
        through a negative-index wrap (``Where(ids < 0, ids + n, ids)``, ``Mod(ids + n, n)``)."""
        seen: set[str] = set()
        stack = [name]
        while stack:
            tensor = stack.pop()
            for site, operand in self.consumers.get(tensor, []):
                node = site.node
                passes = node.op_type in through and (operand == 0 or node.op_type == "Concat")
                if passes or (wraps and self._wraps(site, operand)):
                    stack.extend(o for o in node.output if o and o not in seen)
                    seen.update(node.output)
                else:
                    yield site, operand

    def _wraps(self, site: NodeSite, operand: int) -> bool:
        """A step of a negative-index wrap, which keeps an index in [0, n) as it is: a Where's branch, a
        Mod's dividend, or an offset by a constant that a Where or a Mod then takes. tf2onnx spells the
        Where in arithmetic (``mask * (ids + n) + not_mask * ids``, each mask a Cast of a comparison): a
        product by such a mask, and the sum of two of them, are steps too."""
        node = site.node
        if node.op_type in _WRAPS:
            return operand in _WRAPS[node.op_type]
        if self._masked(node, operand):
            return True
        if node.op_type == "Add" and all(self._masked_product(name) for name in node.input):
            return True  # the two masked branches joined
        if node.op_type not in ("Add", "Sub") or operand > 1 or self.constant(site, 1 - operand) is None:
            return False
        takers = self.consumers.get(node.output[0], [])
        return bool(takers) and all(
            (_WRAPS.get(taker.node.op_type) and i in _WRAPS[taker.node.op_type]) or self._masked(taker.node, i)
            for taker, i in takers
        )

    def _masked(self, node: onnx.NodeProto, operand: int) -> bool:
        """Input ``operand`` of a Mul whose other input is a boolean cast to a number (0 or 1)."""
        if node.op_type != "Mul" or operand > 1 or len(node.input) != 2:
            return False
        cast = self.producers.get(node.input[1 - operand])
        if cast is None or cast.op_type != "Cast" or not cast.input:
            return False
        source = self.producers.get(cast.input[0])
        return source is not None and (source.op_type in _COMPARISONS or source.op_type in {"Not", "And", "Or", "Xor"})

    def _masked_product(self, name: str) -> bool:
        """``name`` is made by a Mul of something by a boolean cast to a number."""
        producer = self.producers.get(name)
        if producer is None or producer.op_type != "Mul" or len(producer.input) != 2:
            return False
        return any(self._masked(producer, operand) for operand in (0, 1))

    def constant(self, site: NodeSite, operand: int) -> np.ndarray[Any, Any] | None:
        if operand >= len(site.node.input):
            return None
        value = self.index.constant(site.node.input[operand], site.scopes)
        return None if value is None else np.asarray(value)

    def feeds_a_condition(self, tensor: str) -> str | None:
        seen: set[str] = set()
        stack = [tensor]
        while stack:
            name = stack.pop()
            if name in self.conditions:
                return name
            for site, _ in self.consumers.get(name, []):
                if site.node.op_type in _LOGIC:
                    stack.extend(o for o in site.node.output if o and o not in seen)
                    seen.update(site.node.output)
        return None

    def branch_value(self, name: str) -> InputValues | None:
        """Compared with a constant, and the result decides an If or a Loop: the constant is the value."""
        choices: list[Any] = []
        chosen: tuple[Any, onnx.NodeProto] | None = None
        for site, operand in self.reached(name, _PASS_THROUGH):
            node = site.node
            if node.op_type not in _COMPARISONS or len(node.input) != 2:
                continue
            other = self.constant(site, 1 - operand)
            if other is None or other.size != 1:
                continue
            step = _COMPARISONS[node.op_type] * (1 if operand == 0 else -1)
            value = other.reshape(-1)[0].item() + step
            choices.append(value)
            if chosen is None and self.feeds_a_condition(node.output[0]):
                chosen = (value, node)
        if chosen is None:
            return None
        value, node = chosen
        others = sorted({c for c in choices if c != value})
        alternatives = f"; the graph also compares it with {', '.join(map(str, others))}" if others else ""
        return InputValues(
            {"value": value},
            f"{node.op_type} '{node.name or node.output[0]}' compares it with "
            f"{value}, and the result chooses a branch{alternatives}",
        )

    def table_rows(self, name: str) -> InputValues | None:
        """Indices into constant tables (token ids into an embedding): 0 <= id < the smallest row count,
        which is valid for every table the ids index."""
        tables: list[tuple[int, onnx.NodeProto]] = []
        for site, operand in self.reached(name, _PASS_THROUGH, wraps=True):
            node = site.node
            if node.op_type != "Gather" or operand != 1:
                continue
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            rows = self._rows(site, axis)
            if rows:
                tables.append((rows, node))
        if not tables:
            return None
        rows, node = min(tables, key=lambda table: table[0])
        why = f"indexes the {rows} rows of {node_label(node)}'s table"
        others = sorted({r for r, n in tables if n is not node})
        if others:
            why += f"; it also indexes tables of {', '.join(map(str, others))} rows: the smallest bounds them all"
        return InputValues({"low": 0, "high": rows}, why)

    def sequence_lengths(self, name: str) -> InputValues | None:
        """A recurrent op's ``sequence_lens`` or a ReverseSequence's: 1 <= length <= the steps its input holds
        (onnxruntime refuses a longer one), as shape inference gives them; sorted first (a TopK) too."""
        for site, operand in self.reached(name, _PASS_THROUGH | {"TopK"}):
            node = site.node
            at = _LENGTHS.get(node.op_type)
            if at is None or operand != at[0]:
                continue
            attributes = {a.name: a.i for a in node.attribute}
            axis = attributes.get("time_axis", 0) if node.op_type == "ReverseSequence" else attributes.get("layout", 0)
            steps = (self.dims(node.input[0]) or [])[axis : axis + 1]
            if steps and steps[0]:
                return InputValues(
                    {"low": 1, "high": steps[0] + 1}, f"the sequence lengths of {node_label(node)}: 1..{steps[0]}"
                )
            if len(along := length_axes(self, name)) == 1:  # the steps: the one symbolic axis of the inputs
                return InputValues({"low": 1}, f"the sequence lengths of {node_label(node)}", upto=along[0])
        return None

    def classes(self, name: str) -> InputValues | None:
        """Class ids: a OneHot's indices (0 <= id < depth), or ids compared with every class at once, a
        constant range (dynamo's ``one_hot``: ``Equal(ids[..., None], arange(C))``)."""
        for site, operand in self.reached(name, _PASS_THROUGH):
            node, other = site.node, self.constant(site, 1 if site.node.op_type == "OneHot" else 1 - operand)
            if other is None or other.dtype.kind not in "iu" or operand > 1:
                continue
            if node.op_type == "OneHot" and operand == 0 and other.size == 1 and int(other.reshape(-1)[0]) > 0:
                depth = int(other.reshape(-1)[0])
                return InputValues({"low": 0, "high": depth}, f"class ids of {node_label(node)}: 0 <= value < {depth}")
            classes = np.unique(other)
            if node.op_type == "Equal" and classes.size > 1 and int(classes[-1] - classes[0]) + 1 == classes.size:
                low, high = int(classes[0]), int(classes[-1]) + 1
                why = f"compared with each class id {low}..{high - 1} by {node_label(node)}"
                return InputValues({"low": low, "high": high}, why)
        return None

    def dims(self, name: str) -> list[int | None] | None:
        """A tensor's dims as onnx's shape inference gives them (run once, at the first question)."""
        if self._inferred is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model)
            except Exception:  # an op onnx cannot infer: no bound from shapes, as before
                inferred = self.model
            graph = inferred.graph
            self._inferred = {
                info.name: [d.dim_value if d.HasField("dim_value") else None for d in info.type.tensor_type.shape.dim]
                for info in (*graph.input, *graph.value_info, *graph.output)
                if info.type.tensor_type.HasField("shape")
            }
            self._inferred.update({t.name: list(t.dims) for t in graph.initializer})
        return self._inferred.get(name)

    def _rows(self, site: NodeSite, axis: int) -> int | None:
        """Rows of the table a Gather reads: an initializer, or one dequantized, cast or scaled on the way."""
        table = site.node.input[0]
        for _ in range(4):
            for graph in site.scopes:
                for tensor in graph.initializer:
                    if tensor.name == table:
                        return int(tensor.dims[axis]) if len(tensor.dims) > axis else None
            producer = self.producers.get(table)
            if producer is None or producer.op_type not in ("DequantizeLinear", "Cast", "Identity", "Mul"):
                return None
            table = producer.input[0]
        return None

    def cast_to_float(self, name: str, elem_type: int) -> InputValues | None:
        """Every use casts it to a float (a uint8 image, int8 quantized values): nothing reads it as an
        index, a count or a condition, so any values of its type run; random ones over its range. Asked of
        the byte types only: a wider integer cast to a float (a sample rate, a count) is still flagged."""
        uses = list(self.reached(name, _PASS_THROUGH - {"Cast"}))
        to = {next((a.i for a in site.node.attribute if a.name == "to"), None) for site, _ in uses}
        if not uses or any(site.node.op_type != "Cast" for site, _ in uses) or not to <= _FLOATS:
            return None
        low, high = _BYTES[elem_type]
        readers = ", ".join(sorted({node_label(site.node) for site, _ in uses}))
        return InputValues(
            {"low": low, "high": high}, f"only cast to a float ({readers}): any values run; {low}..{high - 1}"
        )

    def zeroed(self, name: str) -> InputValues | None:
        """Every use multiplies it by a constant 0 (an export's way of keeping an input it ignores)."""
        uses = list(self.reached(name, _PASS_THROUGH))
        for site, operand in uses:
            other = self.constant(site, 1 - operand) if site.node.op_type == "Mul" and operand < 2 else None
            if other is None or other.size == 0 or np.any(other != 0):
                return None
        if not uses:
            return None
        return InputValues(
            {}, f"only multiplied by 0 ({node_label(uses[0][0].node)}): its value never matters, any values do"
        )

    def broadcast_shape(self, name: str) -> InputValues | None:
        """Every use reads it as an Expand's shape or a Tile's repeats: the values that give the output the
        dims it is declared (inferred) with, ones where it says none, which leave the data as it is."""
        uses = self.consumers.get(name, [])
        if not uses or any((site.node.op_type, operand) not in (("Expand", 1), ("Tile", 1)) for site, operand in uses):
            return None
        info = next((info for info in self.model.graph.input if info.name == name), None)
        dims = list(info.type.tensor_type.shape.dim) if info is not None else []
        if len(dims) != 1 or not dims[0].HasField("dim_value"):
            return None
        wanted = {tuple(self._broadcast_values(site, dims[0].dim_value)) for site, _ in uses}
        if len(wanted) != 1:
            return None  # readers that want different values: the user's to give
        readers = ", ".join(sorted({node_label(site.node) for site, _ in uses}))
        return InputValues(
            {"value": list(wanted.pop())},
            f"the shape {readers} broadcasts to (repeats by), from the output's declared dims (1 where it has "
            "none); give the values your callers send ('value: ...') to verify those",
        )

    def _broadcast_values(self, site: NodeSite, length: int) -> list[int]:
        """For an Expand, the output's last ``length`` dims; for a Tile, output over input per axis; 1 where
        a dim is unknown."""
        out = self._last_dims(site.node.output[0], length)
        if site.node.op_type == "Expand":
            return [int(d) if d else 1 for d in out]
        data = self._last_dims(site.node.input[0], length)
        return [int(o) // int(d) if o and d and o % d == 0 else 1 for o, d in zip(out, data)]

    def _last_dims(self, name: str, length: int) -> list[int | None]:
        """The last ``length`` dims of ``name``, None where shape inference gives none."""
        dims: list[int | None] = list((self.dims(name) or [])[-length:])
        return [None] * (length - len(dims)) + dims

    def strings(self, name: str, unread: bool) -> InputValues:
        """A STRING input: the strings the graph names for it (a LabelEncoder's or CategoryMapper's keys,
        a OneHotEncoder's categories, a constant it is compared with), cycled over the case; else flagged."""
        if unread:
            return InputValues({"strings": ["a"]}, "unread: no node reads it, so any strings do")
        for site, operand in self.reached(name, _PASS_THROUGH):
            node = site.node
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            named = next((attrs[key] for key in _STRING_KEYS.get(node.op_type, ()) if attrs.get(key)), None)
            if named is None and isinstance(attrs.get("keys_tensor"), onnx.TensorProto):
                named = list(onnx.numpy_helper.to_array(attrs["keys_tensor"]).reshape(-1))
            if named is None and node.op_type == "Equal" and len(node.input) == 2:
                other = self.constant(site, 1 - operand)
                named = None if other is None or other.dtype.kind not in "OUS" else list(other.reshape(-1))
            if named:
                texts = [t.decode() if isinstance(t, bytes) else str(t) for t in named][:MAX_STRINGS]
                shown = ", ".join(texts[:8]) + (", ..." if len(texts) > 8 else "")
                return InputValues({"strings": texts}, f"strings {node_label(node)} names ({shown}), in turn")
        return InputValues(
            {"strings": ["a"]},
            "a string input the graph names no values for: give real ones ('value: [...]' of strings, "
            "or 'file: ...' a .npy of str)",
            flag=True,
        )

    def mask(self, name: str) -> InputValues | None:
        """Cast to bool, or to a float used in arithmetic (1 - mask, mask * x, summed to count it), or
        compared with 0 or 1 (``mask == 0`` choosing what a Where fills), reached through copies and
        reshapes (``mask[:, None, :]``): a 0/1 mask."""
        for site, operand in self.reached(name, _PASS_THROUGH - {"Cast", "Gather", "GatherElements", "Slice"}):
            node = site.node
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            label = f"'{node.name or node.output[0]}'"
            if node.op_type == "Cast" and to == onnx.TensorProto.BOOL:
                return InputValues({"low": 0, "high": 2}, f"cast to bool by {label}: a 0/1 mask")
            if node.op_type == "Cast" and to in _FLOATS:
                used = {s.node.op_type for s, _ in self.reached(node.output[0], _PASS_THROUGH)}
                if used & _ARITHMETIC and used <= _ARITHMETIC | {"ReduceSum", "Clip", "Max"}:
                    return InputValues({"low": 0, "high": 2}, "cast to a float and used in arithmetic: a 0/1 mask")
            if node.op_type in ("Equal", "Not") and operand < 2 and not self.feeds_a_condition(node.output[0]):
                other = self.constant(site, 1 - operand) if node.op_type == "Equal" else None
                if other is not None and other.size == 1 and int(other.reshape(-1)[0]) in (0, 1):
                    return InputValues(
                        {"low": 0, "high": 2}, f"compared with {int(other.reshape(-1)[0])} by {label}: a 0/1 mask"
                    )
        return None


__all__ = ["InputValues", "input_values"]
