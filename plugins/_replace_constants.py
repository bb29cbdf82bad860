"""The work of the ``replace_initializer`` patch type (``plugins/replace_initializer.py``): find the
constants a step targets, and replace each with a value or with ONNX ops that compute a shape.

Imported (with onnx and numpy) when a model is patched, so that ``validate`` reads the patch type's
module without them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from patchspec import PatchContext, PatchResult, api

if TYPE_CHECKING:
    from .replace_initializer import ReplaceInitializerParams


@dataclass
class Target:
    """One place a constant is used: ``node.input[index]`` in ``graph`` (node None: every use)."""

    graph: onnx.GraphProto
    name: str
    node: onnx.NodeProto | None = None
    index: int | None = None
    key: tuple[str, ...] = ("initializer",)


def replace_constants(model: onnx.ModelProto, params: ReplaceInitializerParams, context: PatchContext) -> PatchResult:
    """The patch: each target's constant replaced by the value or the computed shape; shapes re-derived."""
    targets = _targets(model, params, context)
    if "value" in params:
        changed, details = _replace_values(model, targets, params["value"], params.get("dtype"), context)
    elif "shape" in params:
        changed, details = _replace_with_shape(model, targets, params["shape"], context)
    else:  # check_params asks for one of the two before any model is read
        context.fail("give either 'value: [...]' or 'shape: [ITEM, ...]'")
    if not changed:
        return PatchResult(False, "already has this value", tuple(details))
    api.rederive_shapes(model, context.state)
    if len(details) == 1:
        return PatchResult(True, details[0])
    return PatchResult(True, f"replaced {len(details)} constants", tuple(details))


# -- finding targets --------------------------------------------------------------------------------
def _targets(model: onnx.ModelProto, params: ReplaceInitializerParams, context: PatchContext) -> list[Target]:
    if "initializer" in params:
        name = params["initializer"]
        _require_constant(model.graph, name, ("initializer",), context, f"'{name}'")
        return [Target(model.graph, name)]
    if "select" not in params or "input" not in params:  # check_params asks for one of the two forms
        context.fail("give 'initializer', or 'select' with 'input'")
    targets = []
    for ref in api.select_nodes(model, params["select"], context):
        index = params["input"]
        node = ref.node
        label = f"node '{node.name or node.output[0]}' ({node.op_type})"
        if index >= len(node.input) or not node.input[index]:
            context.fail(f"{label} has {len(node.input)} inputs; input {index} does not exist", key=("input",))
        name = node.input[index]
        graph = ref.graph if _find_constant(ref.graph, name) else model.graph
        _require_constant(graph, name, ("input",), context, f"input {index} of {label} ('{name}')")
        targets.append(Target(graph, name, node, index, ("select",)))
    return targets


def _find_constant(graph: onnx.GraphProto, name: str) -> onnx.TensorProto | onnx.NodeProto | None:
    """The initializer or Constant node that defines ``name`` in ``graph``, or None."""
    inputs = {v.name for v in graph.input}
    initializer: onnx.TensorProto
    for initializer in graph.initializer:
        if initializer.name == name and name not in inputs:
            return initializer
    node: onnx.NodeProto
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and name in node.output:
            return node
    return None


def _require_constant(
    graph: onnx.GraphProto, name: str, key: tuple[str, ...], context: PatchContext, what: str
) -> None:
    if _find_constant(graph, name) is not None:
        return
    producers = [n for n in graph.node if name in n.output]
    if producers:
        producer = producers[0]
        context.fail(
            f"{what} is computed by node '{producer.name}' ({producer.op_type}), not a constant; "
            "replace_initializer replaces initializers and Constant outputs",
            key=key,
        )
    if name in {v.name for v in graph.input}:
        context.fail(f"{what} is a graph input, not a constant", key=key)
    constants = [t.name for t in graph.initializer] + [
        o for n in graph.node if n.op_type == "Constant" for o in n.output
    ]
    near = api.did_you_mean(name, constants)
    hint = "'patchspec inspect MODEL' lists the model's tensors"
    context.fail(f"{what}: no initializer or Constant output of that name{near}", key=key, hint=hint)


def _original_array(graph: onnx.GraphProto, name: str) -> tuple[tuple[int, ...], int]:
    found = _find_constant(graph, name)
    assert found is not None  # _targets required a constant
    if isinstance(found, onnx.TensorProto):
        return tuple(found.dims), found.data_type
    value = api.constant_value(found)
    if value is None:
        tensor = next(a.t for a in found.attribute if a.name == "value")
        return tuple(tensor.dims), tensor.data_type
    return value.shape, onnx.helper.np_dtype_to_tensor_dtype(value.dtype)


# -- value ----------------------------------------------------------------------------------------------
def _converted(value: Any, dims: tuple[int, ...], dtype: int, context: PatchContext) -> np.ndarray[Any, Any]:
    flat = np.array(value, dtype=object).reshape(-1)
    expected = int(np.prod(dims)) if dims else 1
    dtype_name = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    if flat.size != expected:
        context.fail(
            f"expected {expected} elements (shape {list(dims)}), got {flat.size}",
            key=("value",),
            hint="a different length changes the consumer's meaning: use 'shape' to compute a new one",
        )
    np_dtype = np.dtype(dtype_name)
    for item in flat:
        if np_dtype.kind in "iu":
            if isinstance(item, bool) or not float(item).is_integer():
                context.fail(f"expected {np_dtype.name} values, got {item!r}", key=("value",))
            info = np.iinfo(np_dtype)
            if not info.min <= int(item) <= info.max:
                context.fail(f"expected {np_dtype.name} values in [{info.min}, {info.max}], got {item}", key=("value",))
        elif np_dtype.kind == "b" and item not in (True, False, 0, 1):
            context.fail(f"expected bool values, got {item!r}", key=("value",))
    return np.array([int(v) if np_dtype.kind in "iu" else v for v in flat], dtype=np_dtype).reshape(dims)


def _replace_values(
    model: onnx.ModelProto, targets: list[Target], value: Any, dtype_name: str | None, context: PatchContext
) -> tuple[bool, list[str]]:
    """Overwrite each constant in place when only the targets read it, else feed the targets a new one."""

    changed, details = False, []
    namer = api.Namer(api.all_names(model))
    by_constant: dict[tuple[int, str], list[Target]] = {}
    for target in targets:
        by_constant.setdefault((id(target.graph), target.name), []).append(target)
    for group in by_constant.values():
        graph, name = group[0].graph, group[0].name
        dims, old_dtype = _original_array(graph, name)
        # the schema allows every element type but string
        dtype = api.ELEMENT_TYPES[dtype_name] if dtype_name is not None else old_dtype
        array = _converted(value, dims, dtype, context)
        tensor = numpy_helper.from_array(array, name)
        shown = array.reshape(-1).tolist()
        if _same_constant(graph, name, tensor):
            details.append(f"'{name}' already holds {shown}")
            continue
        changed = True
        if group[0].node is None or not _read_elsewhere(model, group):
            _overwrite_constant(graph, name, tensor)
            details.append(f"'{name}' = {shown}")
            continue
        tensor.name = namer.fresh(f"{name}/patchspec/{context.step.index}")
        graph.initializer.append(tensor)
        for target in group:
            assert target.node is not None and target.index is not None  # selected uses
            target.node.input[target.index] = tensor.name
        nodes = ", ".join(f"'{t.node.name}'" for t in group if t.node is not None)
        details.append(
            f"input {group[0].index} of {nodes} -> new constant '{tensor.name}' = {shown} ('{name}' is shared)"
        )
    return changed, details


def _read_elsewhere(model: onnx.ModelProto, group: list[Target]) -> bool:
    """Whether anything besides the targets' own inputs reads the constant."""
    selected = {(id(t.node), t.index) for t in group}
    return any(node is None or (id(node), index) not in selected for node, index in graph_users(model, group[0].name))


def _same_constant(graph: onnx.GraphProto, name: str, tensor: onnx.TensorProto) -> bool:
    found = _find_constant(graph, name)
    if isinstance(found, onnx.NodeProto):
        old = api.constant_value(found)
        if old is None:
            return False
        return old.dtype == numpy_helper.to_array(tensor).dtype and np.array_equal(old, numpy_helper.to_array(tensor))
    if found is None:
        return False
    if found.data_location == TensorProto.EXTERNAL or found.data_type != tensor.data_type:
        return False
    return np.array_equal(numpy_helper.to_array(found), numpy_helper.to_array(tensor))


def _overwrite_constant(graph: onnx.GraphProto, name: str, tensor: onnx.TensorProto) -> None:
    found = _find_constant(graph, name)
    if isinstance(found, onnx.TensorProto):
        found.CopyFrom(tensor)
        return
    assert found is not None  # _targets required a constant
    del found.attribute[:]
    found.attribute.append(onnx.helper.make_attribute("value", tensor))


# -- shape ----------------------------------------------------------------------------------------------
def _replace_with_shape(
    model: onnx.ModelProto, targets: list[Target], shape: list[int | str], context: PatchContext
) -> tuple[bool, list[str]]:
    namer = api.Namer(api.all_names(model))
    details = []
    compiled_for: dict[int, str] = {}
    text = "[" + ", ".join(str(item) for item in shape) + "]"
    for target in targets:
        graph = target.graph
        if id(graph) not in compiled_for:
            compiled_for[id(graph)] = _compile_into(model, graph, target, shape, context, namer)
        output = compiled_for[id(graph)]
        users = graph_users(model, target.name) if target.node is None else [(target.node, target.index)]
        if target.node is None and any(node is None for node, _ in users):
            context.fail(f"'{target.name}' is a graph output; a computed shape cannot replace it", key=target.key)
        for node, index in users:
            if node is not None:  # a graph output was refused above
                node.input[index] = output
        removed = remove_if_unused(model, graph, target.name)
        where = f"'{target.name}'" if target.node is None else f"input {target.index} of '{target.node.name}'"
        details.append(f"{where} -> computed shape {text}" + (" (old constant removed)" if removed else ""))
    for graph_id in compiled_for:
        graph = next(t.graph for t in targets if id(t.graph) == graph_id)
        if not sort_topologically(graph):
            context.fail(
                "the computed shape reads a tensor that depends on the node it feeds (a cycle)", key=("shape",)
            )
    return True, details


def _compile_into(
    model: onnx.ModelProto,
    graph: onnx.GraphProto,
    target: Target,
    shape: list[int | str],
    context: PatchContext,
    namer: api.Namer,
) -> str:
    graphs = [model.graph] if graph is model.graph else [model.graph, graph]
    prefix = f"patchspec/patches{context.step.index}/{target.name}"
    compiler = api.ShapeCompiler(api.TensorIndex(graphs), api.default_opset(model), namer, prefix)
    try:
        compiled = compiler.compile(shape)
    except api.ShapeCompileError as exc:
        context.fail(exc.message, key=("shape", exc.item), hint=exc.hint)
    except api.expressions.ExpressionError as exc:  # pragma: no cover - validate catches syntax first
        context.fail(str(exc), key=("shape",))
    dtype = _original_array(graph, target.name)[1]  # the consumer reads this type: keep it
    if compiled.constant is not None:
        array = _converted(compiled.constant, (len(compiled.constant),), dtype, context)
        tensor = numpy_helper.from_array(array, namer.fresh(prefix + "/shape"))
        graph.initializer.append(tensor)
        return tensor.name
    output = compiled.output
    assert output is not None  # a compiled shape that is not a constant has an output
    if dtype != TensorProto.INT64:
        name = namer.fresh(prefix + "/cast")
        compiled.nodes.append(onnx.helper.make_node("Cast", [output], [name], name=name, to=dtype))
        output = name
    graph.initializer.extend(compiled.initializers)
    first_user = target.node or _first_user(graph, target.name)
    insert_before(graph, first_user, compiled.nodes)
    return output


def _first_user(graph: onnx.GraphProto, name: str) -> onnx.NodeProto | None:
    return next((node for node in graph.node if name in node.input), None)


# -- editing the graph ----------------------------------------------------------------------------------
def graph_users(model: onnx.ModelProto, name: str) -> list[tuple[onnx.NodeProto | None, int]]:
    """(node, input index) for every read of ``name`` in any graph; (None, -1) for a main graph output."""
    users: list[tuple[onnx.NodeProto | None, int]] = [(None, -1) for out in model.graph.output if out.name == name]
    for graph in api.all_graphs(model.graph):
        for node in graph.node:
            users.extend((node, i) for i, used in enumerate(node.input) if used == name)
    return users


def remove_if_unused(model: onnx.ModelProto, graph: onnx.GraphProto, name: str) -> bool:
    """Remove the initializer or Constant node defining ``name`` when nothing reads it any more."""

    if graph_users(model, name):
        return False
    found = _find_constant(graph, name)
    if isinstance(found, onnx.TensorProto):
        graph.initializer.remove(found)
    elif found is not None:
        graph.node.remove(found)
    return found is not None


def insert_before(graph: onnx.GraphProto, consumer: onnx.NodeProto | None, new_nodes: list[onnx.NodeProto]) -> None:
    position = next((i for i, node in enumerate(graph.node) if node is consumer), len(graph.node))
    for offset, node in enumerate(new_nodes):
        graph.node.insert(position + offset, node)


def sort_topologically(graph: onnx.GraphProto) -> bool:
    """Reorder ``graph.node`` (stably, only if needed) so producers come first; False on a cycle."""
    nodes = list(graph.node)
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    needs = [sorted({producer[n] for n in _reads(node) if n in producer} - {i}) for i, node in enumerate(nodes)]
    if all(dep < i for i, deps in enumerate(needs) for dep in deps):
        return True
    waiting = [len(deps) for deps in needs]
    readers: dict[int, list[int]] = {}
    for i, deps in enumerate(needs):
        for dep in deps:
            readers.setdefault(dep, []).append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for reader in readers.get(i, []):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) != len(nodes):
        return False
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)
    return True


def _reads(node: onnx.NodeProto) -> set[str]:
    names = set(node.input)
    for sub in api.subgraphs(node):
        for inner in api.all_graphs(sub):
            for each in inner.node:
                names.update(each.input)
    return names
