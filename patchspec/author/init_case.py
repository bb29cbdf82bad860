"""``init``'s run case: the inputs' shapes and values, and whether to compare per sample.

Shapes are the lint's defaults (one size per dim name), or the sizes the original ran with when
``init`` ran it (:mod:`.batch_ties`); every batch axis gets the case's batch. Values come from the
graph (:mod:`patchspec.shapes.values`). The comparison is per sample (``split_batch``) wherever the
original runs one sample at a time: a batch must give what its samples give alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from patchspec.author.batch_ties import CaseLayout, Pair
from patchspec.author.original_runs import OriginalRuns
from patchspec.author.spec_text import DraftStep, quoted
from patchspec.model.graph import has_body, subgraphs
from patchspec.ort.lint.probe_inputs import probe_shapes
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch.axes import fed_inputs
from patchspec.shapes.batch.fitting import fitting_shapes
from patchspec.shapes.values import InputValues, input_values

#: the symbolic batch of the probe run: a name no export uses, so the outputs' batch axes show
PROBE = "patchspec_init_batch"


@dataclass
class InputRow:
    """One line of the terminal table: an input, its batch axis and how that was decided."""

    name: str
    axis: int | None
    how: str
    values: str = ""
    flagged: bool = False
    rank: int = 0  # as declared: a split_batch gives an unbatched input of rank above 0 whole


def input_rules(model: onnx.ModelProto) -> dict[str, InputValues | None]:
    """What the graph says each input's values are (None: random floats do).

    ``input_values`` indexes the whole graph on each call, and says None for any float input the graph
    reads: a float input that is read gets None here without a call, so an LLM export's 32 float
    past_key_values inputs cost one walk, not 32 (at 56,000 nodes: 17.5 s -> under 1 s)."""
    read = {tensor for node in all_nodes(model.graph) for tensor in node.input if tensor}
    read |= {info.name for info in model.graph.output}
    rules: dict[str, InputValues | None] = {}
    for name, info in fed_inputs(model.graph).items():
        element = info.type.tensor_type.elem_type
        rules[name] = None if element in FLOATS and name in read else input_values(model, name, element)
    return rules


#: the element types ``input_values`` fills with random values when the graph reads them
FLOATS = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
)


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node in ``walk_nodes`` order, reading the attributes of If/Loop/Scan only (``has_body``)."""
    for node in graph.node:
        yield node
        if has_body(node):
            for sub in subgraphs(node):
                yield from all_nodes(sub)


def probe_values(rules: dict[str, InputValues | None]) -> dict[str, dict[str, Any]]:
    """Case items (less the shape) for running the original: a flagged input gets ones, which are
    valid lengths, counts and indices more often than random integers are."""
    values: dict[str, dict[str, Any]] = {}
    for name, rule in rules.items():
        if rule is not None and "strings" in rule.item:  # a STRING input: its strings, cycled over the shape
            values[name] = {"value": list(rule.item["strings"])}
        elif rule is not None:
            values[name] = {"fill": "ones"} if rule.flag or rule.upto else dict(rule.item)  # ones: valid lengths
    return values


def listed_shapes(values: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
    """The shapes of inputs whose values are a list of numbers (a Resize's sizes): the list's own."""
    return {
        name: list(np.shape(item["value"]))
        for name, item in values.items()
        if isinstance(item.get("value"), list) and not any(isinstance(v, str) for v in np.ravel(item["value"]))
    }


def case_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """The lint's default sizes (one per dim name), except the last axis of a [batch, length] input
    (audio samples, token positions): 512, which short-window kernels (a reflect Pad, an STFT) accept.
    Where the model does not evaluate at those, sizes that fit it (:mod:`patchspec.shapes.batch.fitting`)."""
    shapes = probe_shapes(model, None, split=False)  # one size per dim name: the original must run too
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info) or []
        if len(dims) == 2 and not isinstance(dims[1], int):
            shapes[name][1] = 512
    return fitting_shapes(model, shapes) or shapes


#: how many times init doubles the sizes an original fails at, and the most elements an input may reach
_DOUBLINGS, _MOST_ELEMENTS = 6, 1 << 24


def runnable_shapes(
    model: onnx.ModelProto, runs: OriginalRuns, shapes: dict[str, list[int]], values: dict[str, dict[str, Any]]
) -> dict[str, list[int]]:
    """``shapes``, or where the original fails at them, with its symbolic sizes past axis 0 doubled until it
    runs (up to 64 times): a TopK of 300 over a detector's anchors needs more than 64 x 96 pixels, a speech
    front end more than 512 samples. Unchanged where it runs, where nothing doubled runs, or where the
    original cannot be run."""
    if runs.session is None or runs_at(runs, shapes, values):
        return shapes
    free = [
        (name, axis)
        for name, info in fed_inputs(model.graph).items()
        for axis, dim in enumerate(read_dims(info) or [])
        if axis > 0 and not isinstance(dim, int) and name in shapes
    ]
    grown = {name: list(shape) for name, shape in shapes.items()}
    for _ in range(_DOUBLINGS if free else 0):
        for name, axis in free:
            grown[name][axis] *= 2
        if any(math.prod(shape) > _MOST_ELEMENTS for shape in grown.values()):
            break
        if runs_at(runs, grown, values):
            return grown
    return shapes


def runs_at(runs: OriginalRuns, shapes: dict[str, list[int]], values: dict[str, dict[str, Any]]) -> bool:
    """Whether the original runs with its inputs at ``shapes`` (and ``values``)."""
    ran = runs.run(CaseLayout(shapes, values).items(0, []))
    return ran is not None and ran.ok


def original_fails(
    runs: OriginalRuns, shapes: dict[str, list[int]], values: dict[str, dict[str, Any]], small: bool
) -> list[str]:
    """A note where the original, run here (``small``: a graph cheap to load), fails at the case's sizes:
    apply's run step would fail alike."""
    ran = runs.run(CaseLayout(shapes, values).items(0, [])) if small and runs.session is not None else None
    if ran is None or ran.ok:
        return []
    return [f"the original itself fails at the case's sizes ({ran.failure}): edit the case to sizes it runs at"]


def unified_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]], batch: list[Pair]) -> dict[str, list[int]]:
    """``shapes`` with every other unnamed or symbolic axis at one size: exporters that name each
    input's axes apart (``unk__12``, ``unk__13``) still mean one sequence length."""
    free = [
        (name, axis)
        for name, info in fed_inputs(model.graph).items()
        for axis, dim in enumerate(read_dims(info) or [])
        if not isinstance(dim, int) and (name, axis) not in batch
    ]
    if not free:
        return shapes
    size = shapes[free[0][0]][free[0][1]]
    unified = {name: list(shape) for name, shape in shapes.items()}
    for name, axis in free:
        unified[name][axis] = size
    return unified


def per_sample_reason(runs: OriginalRuns, layout: CaseLayout, axes: list[Pair], batch: int) -> str | None:
    """Why the case compares per sample: the original fails at ``batch`` and runs at 1 (None if not so)."""
    ran = runs.run(layout.items(batch, axes))
    if ran is None or ran.ok:
        return None
    single = runs.run(layout.items(1, axes))
    if single is None or not single.ok:
        return None
    return f"the original runs at batch 1 but not at batch {batch} ({ran.failure}): compare per sample (split_batch)"


def case_inputs(
    model: onnx.ModelProto,
    axes: list[Pair],
    how: dict[Pair, str],
    rules: dict[str, InputValues | None],
    shapes: dict[str, list[int]],
    batch: int,
    untied: dict[str, str],
) -> tuple[list[InputRow], dict[str, Any]]:
    """The rows of the terminal table and the run case's inputs, every batch axis at ``batch``;
    ``untied``: why an input whose axis 0 could have been the batch is not."""
    rows, case = [], {}
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info) or []
        shape = list(shapes.get(name, []))
        batched = [axis for tensor, axis in axes if tensor == name]
        if batched:
            shape[batched[0]] = batch
            row = InputRow(name, batched[0], how[(name, batched[0])], rank=len(dims))
        else:
            row = InputRow(name, None, untied.get(name) or why_not_batched(dims), rank=len(dims))
        values = rules.get(name)
        item: dict[str, Any] = {"shape": shape}
        if values is not None:
            row.values, row.flagged = values.why, values.flag
            if values.flag:  # never a value that merely happens to run: the user gives the real one
                item = {"file": f"{name}.npy"}
                kind = "a numpy array of str, " if "strings" in values.item else ""
                row.values += f"; save them as {name}.npy next to the spec (numpy.save, {kind}shape {shape})"
            elif "strings" in values.item:  # repeated to fill the shape
                item = {"value": list(values.item["strings"]), **({"shape": shape} if shape else {})}
            elif "value" in values.item:  # one number fills the shape; a list has its own
                filled = shape and not isinstance(values.item["value"], list)
                item = {"value": values.item["value"], **({"shape": shape} if filled else {})}
            else:
                item.update(values.item)
                if values.upto is not None and values.upto[0] in shapes:  # lengths: at most that axis's size
                    item["high"] = shapes[values.upto[0]][values.upto[1]] + 1
        rows.append(row)
        case[name] = item if set(item) != {"shape"} else shape
    return rows, case


def why_not_batched(dims: list[Any]) -> str:
    if not dims:
        return "a scalar: given whole to every sample"
    first = dims[0]
    if isinstance(first, int):
        return f"axis 0 is fixed at {first} and no other axis had to follow the batch"
    return f"its axes do not carry the batch's dim ({first!r} on axis 0 is another one)"


def run_step(
    probe: onnx.ModelProto | None,
    rows: list[InputRow],
    case: dict[str, Any],
    split: str | None,
    coupled: list[str] | None = None,
    noise: dict[str, float] | None = None,
) -> DraftStep:
    """The ``run`` verifier: the case against the original, per sample when ``split`` says why;
    ``coupled``: set_batch's ops that couple the samples, said in the comments; ``noise``: per output,
    the atol the original itself needs between optimization levels on these inputs."""
    comments = ["run the output and compare it with the original on the same inputs"]
    compare: dict[str, Any] = {"against": "original"}
    if noise:
        compare["outputs"] = {name: {"atol": atol} for name, atol in noise.items()}
        named = ", ".join(f"{quoted(name)} atol {atol:g}" for name, atol in noise.items())
        comments.append(f"on these random inputs the original itself differs between optimization levels: {named}")
    if split:
        comments.append(split)
        inputs = {
            row.name: row.axis
            for row in rows
            if row.axis not in (0,) and (row.axis is not None or row.rank or case_rank(case[row.name]))
        }
        outputs = {
            info.name: axis
            for info in (probe.graph.output if probe is not None else [])
            for axis, dim in enumerate(read_dims(info) or [])
            if dim == PROBE and axis != 0
        }
        compare["split_batch"] = {k: v for k, v in (("inputs", inputs), ("outputs", outputs)) if v} or True
    if coupled:
        more = f" (and {len(coupled) - 1} more)" if len(coupled) > 1 else ""
        comments += [
            f"THE SAMPLES ARE NOT INDEPENDENT: {coupled[0]}{more}.",
            "A batch then differs from its samples run one at a time"
            + (", and this per-sample compare fails by that much." if split else "."),
            'If that is acceptable for your use, replace split_batch with: coupled: "<why it is acceptable>"',
        ]
    for row in rows:
        if row.values:
            comments.append(f"{quoted(row.name)}: {'FLAGGED: ' if row.flagged else ''}{row.values}")
    return DraftStep("run", {"cases": [{"inputs": case}], "compare": compare}, comments)


def case_rank(item: Any) -> int:
    if isinstance(item, list):
        return len(item)
    return len(item.get("shape", [])) if "shape" in item else 0


SEQUENCE_SIZE = 8  #: the case's size of a symbolic axis 0 that is not the batch (a sequence's)


def sequence_first(model: onnx.ModelProto, axes: list[Pair], shapes: dict[str, list[int]]) -> dict[str, list[int]]:
    """The lint's defaults give a symbolic axis 0 the size 1 (it is usually the batch); where the batch
    is elsewhere, that axis is a sequence, and 1 would hide whatever runs across it."""
    inputs = fed_inputs(model.graph)
    for name in {name for name, axis in axes if axis != 0}:
        dims = read_dims(inputs[name]) or []
        if dims and not isinstance(dims[0], int) and shapes.get(name, [None])[0] == 1:
            for other, info in inputs.items():  # every input that names the same dim gets the same size
                if (read_dims(info) or [None])[:1] == dims[:1] and shapes.get(other):
                    shapes[other][0] = SEQUENCE_SIZE
    return shapes


__all__ = [
    "FLOATS",
    "PROBE",
    "SEQUENCE_SIZE",
    "InputRow",
    "all_nodes",
    "case_inputs",
    "case_shapes",
    "input_rules",
    "per_sample_reason",
    "probe_values",
    "run_step",
    "runnable_shapes",
    "runs_at",
    "sequence_first",
    "unified_shapes",
]
