"""The report of ``patchspec inspect``: what a model's graph declares, folded for reading.

:func:`inspect_model` gathers it as JSON-ready data (every detail); :func:`format_inspection`
writes it for a person: inputs, outputs and the lint's findings first, one line per top-level
If/Loop/Scan, long lists cut with a count (``unfold`` prints everything). Unusable external data
does not stop the report: everything the graph says is shown, the lint (which needs the weights)
is skipped, and the problem is returned for the caller to end with (exit 3).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from patchspec.errors import ModelFileError
from patchspec.model.external_data import expected_nbytes, external_info, is_external, validate_external_data
from patchspec.model.graph import all_graphs, bodies
from patchspec.model.io import load_model
from patchspec.ort.lint.probe import Binding, Conflict, graph_bodies, lint_model, shapes_text
from patchspec.ort.lint.probe_inputs import declared_dims, model_inputs
from patchspec.printable import one_line_strings

#: uses of a dim_param, names of a list, shown before "and N more" (``unfold`` shows all)
SHOWN = 3
_CONTROL_FLOW = {"If", "Loop", "Scan"}
_UNK = re.compile(r"^unk__(\d+)$")
Json = dict[str, Any]  # a JSON object of the report, as --json writes it


def inspect_model(path: Path, given: dict[str, list[int]] | None = None, values: dict[str, Any] | None = None) -> Json:
    """Everything ``patchspec inspect`` shows. An unreadable model raises ModelFileError (3); unusable
    external data is returned as ``external_data_problem`` with the graph view complete, lint skipped."""
    model = load_model(path)
    problem = None
    try:
        validate_external_data(model, path)
    except ModelFileError as exc:
        problem = exc.to_json()
    lint = None if problem else lint_model(model, path.resolve().parent, given, values).to_json()
    return {
        "model": str(path),
        "ir_version": model.ir_version,
        "producer": {"name": model.producer_name, "version": model.producer_version},
        "opsets": {op.domain or "ai.onnx": op.version for op in model.opset_import},
        "metadata": {prop.key: prop.value for prop in model.metadata_props},
        "nodes": len(model.graph.node),
        "ops": op_histogram(model.graph),
        "inputs": [_value_json(v) for v in model_inputs(model)],
        "outputs": [_value_json(v) for v in model.graph.output],
        "initializers": initializer_summary(model.graph),
        "dim_params": dim_param_uses(model),
        "external_data": external_summary(model, path),
        "subgraphs": [
            {"graph": p, "nodes": len(g.node), "annotated": len(g.value_info)} for p, g in graph_bodies(model.graph)
        ],
        "control_flow": [_control_flow(node) for node in model.graph.node if any(True for _ in bodies(node))],
        "lint": lint,
        "lint_skipped": "the external data cannot be used (see external_data_problem)" if problem else None,
        "external_data_problem": problem,
    }


# -- the data ----------------------------------------------------------------------------------------
def _value_json(value: onnx.ValueInfoProto) -> Json:
    elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
    return {"name": value.name, "dtype": _dtype(elem) if elem else "non-tensor", "dims": declared_dims(value)}


def _dtype(elem: int) -> str:
    try:
        return helper.tensor_dtype_to_string(elem).replace("TensorProto.", "").lower()
    except (KeyError, ValueError):
        return f"type {elem}"


def op_histogram(graph: onnx.GraphProto) -> dict[str, int]:
    """``{"Conv": 52, "com.microsoft:QLinearConv": 3}`` over every graph, most frequent first."""
    counts: dict[str, int] = {}
    for sub in all_graphs(graph):
        for node in sub.node:
            key = f"{node.domain}:{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def initializer_summary(graph: onnx.GraphProto) -> Json:
    """Initializers of every graph: count, bytes (from shape and type: no data is read), dtypes,
    and how many are stored inline or in external files."""
    summary: Json = {
        "count": 0,
        "bytes": 0,
        "dtypes": {},
        "inline": 0,
        "inline_bytes": 0,
        "external": 0,
        "external_bytes": 0,
    }
    for sub in all_graphs(graph):
        for tensor in sub.initializer:
            size = expected_nbytes(tensor)
            size = tensor.ByteSize() if size is None else size
            where = "external" if is_external(tensor) else "inline"
            summary["count"] += 1
            summary["bytes"] += size
            summary[where] += 1
            summary[f"{where}_bytes"] += size
            dtype = _dtype(tensor.data_type)
            summary["dtypes"][dtype] = summary["dtypes"].get(dtype, 0) + 1
    return summary


def dim_param_uses(model: onnx.ModelProto) -> dict[str, list[Json]]:
    """Every dim_param and the (tensor, axis, graph) that carry it, in every graph."""
    uses: dict[str, list[Json]] = {}
    for path, graph in [("main", model.graph), *graph_bodies(model.graph)]:
        for value in (*graph.input, *graph.value_info, *graph.output):
            for axis, dim in enumerate(declared_dims(value)):
                if isinstance(dim, str):
                    uses.setdefault(dim, []).append({"tensor": value.name, "axis": axis, "graph": path})
    return uses


def external_summary(model: onnx.ModelProto, path: Path) -> Json:
    """Each data file the graph names: its size on disk (None when missing), tensors, bytes referenced."""
    files: dict[str, Json] = {}
    tensors = 0
    for sub in all_graphs(model.graph):
        for tensor in [*sub.initializer, *_constant_tensors(sub)]:
            if not is_external(tensor):
                continue
            info = external_info(tensor)
            location = info.get("location", "")
            file = path.parent / location
            entry = files.setdefault(
                location,
                {"file": location, "size": file.stat().st_size if file.is_file() else None, "tensors": 0, "bytes": 0},
            )
            length = info.get("length", "")
            entry["tensors"] += 1
            entry["bytes"] += int(length) if length.isdigit() else expected_nbytes(tensor) or 0
            tensors += 1
    return {"tensors": tensors, "files": list(files.values())}


def _constant_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t


def _control_flow(node: onnx.NodeProto) -> Json:
    """One If/Loop/Scan of the main graph: nodes of each body, and control-flow nodes nested inside."""
    found: Json = {"node": node.name, "op": node.op_type, "bodies": {}, "nested": 0}
    for attr_name, body in sorted(bodies(node), key=lambda item: item[0] == "else_branch"):  # then, else
        found["bodies"][attr_name] = len(body.node)
        found["nested"] += sum(1 for sub in all_graphs(body) for inner in sub.node if any(True for _ in bodies(inner)))
    return found


# -- the text ----------------------------------------------------------------------------------------
def format_inspection(data: Json, unfold: bool = False) -> str:
    """The human-readable form of :func:`inspect_model`'s data; ``unfold`` lists every detail. Every
    string in it is the model's (names, producer, metadata): each is printed on one line, its control
    and line-breaking characters escaped, so a ``producer_name`` cannot start a line of its own."""
    data = one_line_strings(data)
    opsets = ", ".join(f"{domain} {version}" for domain, version in data["opsets"].items())
    producer = " ".join(part for part in data["producer"].values() if part) or "unknown"
    inner = sum(s["nodes"] for s in data["subgraphs"])
    nested = f" (+{inner} in subgraphs)" if inner else ""
    lines = [
        f"{data['model']}: ir_version {data['ir_version']}, opsets {opsets}, producer {producer}, "
        f"{data['nodes']} nodes{nested}"
    ]
    for title in ("inputs", "outputs"):
        lines.append(f"{title}:")
        lines += [f"  {v['name']}  {v['dtype']}  {_dims_text(v['dims'])}" for v in data[title]]
    if data["lint"] is not None:
        lines += _lint_lines(data["lint"])
    else:
        lines.append(
            f"lint: skipped, {data['lint_skipped'].replace(' (see external_data_problem)', '')} (listed at the end)"
        )
    lines += _graph_lines(data, unfold)
    if data["external_data_problem"]:
        lines.append("the external data cannot be used; the model runs nowhere until this is fixed:")
    return "\n".join(lines)


def _graph_lines(data: Json, unfold: bool) -> list[str]:
    ops = [f"{op} {count}" for op, count in data["ops"].items()]
    lines = [f"ops: {_cut(ops, None if unfold else 12)}" if ops else "ops: none"]
    init = data["initializers"]
    dtypes = ", ".join(f"{dtype} {count}" for dtype, count in init["dtypes"].items())
    lines.append(
        f"initializers: {init['count']}, {_bytes(init['bytes'])}"
        + (f" ({dtypes})" if dtypes else "")
        + f"; inline {init['inline']} ({_bytes(init['inline_bytes'])}), "
        f"external {init['external']} ({_bytes(init['external_bytes'])})"
    )
    meta = [f"{key}={_short(value)}" for key, value in data["metadata"].items()]
    lines.append(f"metadata: {_cut(meta, None if unfold else 6)}" if meta else "metadata: none")
    lines += _dim_param_lines(data, unfold)
    lines += _external_lines(data["external_data"], bool(data["external_data_problem"]))
    lines += _control_flow_lines(data, unfold)
    return lines


def _dim_param_lines(data: Json, unfold: bool) -> list[str]:
    if not data["dim_params"]:
        return ["dim_params: none"]
    io = {v["name"] for v in (*data["inputs"], *data["outputs"])}
    shown = {
        p: u
        for p, u in data["dim_params"].items()
        if unfold or any(use["graph"] == "main" and use["tensor"] in io for use in u)
    }
    lines = ["dim_params:"]
    for param, uses in shown.items():
        named = [f"{u['tensor']}[{u['axis']}]" for u in uses]
        lines.append(
            f"  {_quote(param)}: {len(uses)} use{'s' * (len(uses) != 1)}: {_cut(named, None if unfold else SHOWN * 2)}"
        )
    rest = [p for p in data["dim_params"] if p not in shown]
    if rest:
        lines.append(
            f"  {len(rest)} more on intermediate tensors only: {_cut(fold_names(rest), SHOWN)} (--all lists them)"
        )
    return lines


def _external_lines(summary: Json, problem: bool) -> list[str]:
    if not summary["files"]:
        return ["external data: none (every tensor is stored inside the model)"]
    lines = [f"external data: {summary['tensors']} tensors in {len(summary['files'])} file(s)"]
    if problem:  # the files are named once, in the problem at the end
        return [lines[0] + ", not usable (listed at the end)"]
    lines += [
        f"  {f['file']}: {f['size']} bytes on disk, {f['tensors']} tensors, {f['bytes']} bytes referenced"
        for f in summary["files"]
    ]
    return lines


def _control_flow_lines(data: Json, unfold: bool) -> list[str]:
    if not data["subgraphs"]:
        return ["subgraphs: none"]
    if unfold:
        return [
            "subgraphs:",
            *(f"  {s['graph']}: {s['nodes']} nodes, {s['annotated']} annotated tensors" for s in data["subgraphs"]),
        ]
    lines = [f"subgraphs: {len(data['subgraphs'])} (--all lists each)"]
    for flow in data["control_flow"]:
        parts = [
            f"{name.removesuffix('_branch')} {count} node{'s' * (count != 1)}" for name, count in flow["bodies"].items()
        ]
        nested = f", {flow['nested']} nested" if flow["nested"] else ""
        lines.append(f"  {flow['op']} {flow['node']!r}: {', '.join(parts)}{nested}")
    return lines


def _lint_lines(lint: Json) -> list[str]:
    origin = "given" if lint["shapes_given"] else "defaults; pass --shape NAME=D0,D1,... for real sizes"
    lines = [f"lint at {shapes_text(lint['input_shapes'])} ({origin}):"]
    for name, value in lint.get("values", {}).items():
        why = (
            "given" if value["origin"] == "given" else f"the graph needs it: {value['why']}; --value {name}=V to change"
        )
        lines.append(f"  fed {name}={_value_text(value['value'])} ({why})")
    if lint["error"]:
        return lines + [f"  not run: {lint['error']}"]
    for conflict in lint["conflicts"]:
        sizes = {int(size): [Binding(**b) for b in bindings] for size, bindings in conflict["sizes"].items()}
        lines.append(f"  dim_param {_quote(conflict['dim_param'])} is bound to {len(sizes)} different sizes:")
        lines += [f"    {part}" for part in Conflict(conflict["dim_param"], sizes).parts()]
    lines += [f"  wrong size: {line}" for line in lint["wrong_sizes"]]
    if lint["suggested_patches"]:
        lines.append("  fix: add one of these to the spec's patches (the first renames every symbolic dim):")
        lines += [f"    {line}" for line in lint["suggested_patches"][:12]]
    if lint["clean"]:
        lines.append(f"  ok: {lint['probed']} annotated tensors agree with their sizes at run time")
    if lint["not_probed"]:
        lines.append(f"  note: {lint['not_probed']} annotated tensors inside subgraphs were not checked")
    return lines


def fold_names(names: list[str]) -> list[str]:
    """Runs of exporter-made ``unk__N`` names in one item: ``unk__3..unk__40 (38 names)``."""
    folded: list[str] = []
    run: list[str] = []
    for name in [*names, ""]:
        if _UNK.match(name):
            run.append(name)
            continue
        if len(run) > 2:
            folded.append(f"{run[0]}..{run[-1]} ({len(run)} names)")
        else:
            folded += run
        run = []
        if name:
            folded.append(name)
    return folded


def _cut(items: list[str], limit: int | None) -> str:
    if limit is None or len(items) <= limit:
        return ", ".join(items)
    return f"{', '.join(items[:limit])} and {len(items) - limit} more"


def _value_text(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _bytes(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _short(text: str, limit: int = 40) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dims_text(dims: list[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) if isinstance(d, int) else _quote(d) for d in dims) + "]"


def _quote(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


__all__ = [
    "dim_param_uses",
    "external_summary",
    "fold_names",
    "format_inspection",
    "initializer_summary",
    "inspect_model",
    "op_histogram",
]
