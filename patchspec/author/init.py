"""``patchspec init``: a starter spec for one model, with the reasons in comments.

1. Which input axes carry the batch: the contract's detection first; when set_batch refuses that
   (a state tensor keeps the batch on axis 1), each other axis of size 1 or unknown is tried
   alongside. A probe run of set_batch (graph only) settles it and says where the outputs keep it.
2. Dim names an input repeats on several axes (SCRFD's ``[?, 3, ?, ?]``) are told apart.
3. A verify block: ``check``, and ``run`` against the original, per sample (``split_batch``) where
   the original's batch is fixed. Integer inputs get values where the graph says what they are
   (:mod:`patchspec.shapes.values`); others are flagged, in the spec and on the terminal.

Everything reads the graph only; the spec is checked by the loader before it is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx

from patchspec.author.spec_text import DraftStep, SpecDraft, checked
from patchspec.errors import PatchError
from patchspec.model.graph import walk_nodes
from patchspec.ort.inspection import probe_shapes
from patchspec.run.engine import Engine, RunReport
from patchspec.shapes.annotations import read_dims
from patchspec.shapes.batch_axes import BatchAxesError, batch_axes, fed_inputs
from patchspec.shapes.values import input_values
from patchspec.spec.load import load_spec

#: the symbolic batch of the probe run: a name no export uses, so the outputs' batch axes show
PROBE = "patchspec_init_batch"
#: the batch of the run case when the spec keeps a symbolic batch
CASE_BATCH = 3


@dataclass
class InputRow:
    """One line of the terminal table: an input, its batch axis and how that was decided."""

    name: str
    axis: int | None
    how: str
    values: str = ""
    flagged: bool = False


@dataclass
class InitResult:
    text: str
    rows: list[InputRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def draft_spec(model_path: Path, spec_path: Path, size: int | str, registry) -> InitResult:
    """The text of a starter spec for ``model_path``, to be written at ``spec_path``."""
    folder = Path(os.path.abspath(spec_path)).parent  # as named, as the spec loader takes it
    model_ref = _relative(model_path, folder)
    label = f"b{size}" if isinstance(size, int) else "dynamic"
    output_ref = _relative(folder / "build" / f"{model_path.stem}.{label}.onnx", folder)
    prober = _Prober(model_path, spec_path, model_ref, registry)
    model = prober.model
    renames = prober.renames = _renames(model)
    axes, how = _batch_axes(model, prober)
    probe = prober.patched(axes)
    old_size = batch_axes(model, {name: axis for name, axis in axes}).old_size
    rows, case, split = _inputs(model, axes, how, size, old_size)
    draft = SpecDraft(
        model_ref,
        output_ref,
        header=[
            f"Written by 'patchspec init {model_path.name}': check the comments, then 'patchspec apply {spec_path.name}'.",
            "Paths are relative to this file's folder.",
        ],
    )
    draft.patches += renames
    given = {name: axis for name, axis in axes}
    draft.patches.append(
        DraftStep(
            "set_batch",
            {"size": size, "inputs": given},
            [f"batch on {', '.join(f'{n}[{a}]' for n, a in axes)}: {'; '.join(sorted(set(how.values())))}"]
            + [f"{row.name}: not batched ({row.how})" for row in rows if row.axis is None],
        )
    )
    draft.verify.append(DraftStep("check", {}, ["onnx's checker and strict shape inference on the output"]))
    draft.verify.append(_run_step(model, probe, rows, case, split))
    text = checked(draft, spec_path, registry)
    notes = [f"{row.name}: {row.values}" for row in rows if row.flagged]
    return InitResult(text, rows, notes)


def _relative(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(os.path.abspath(path), folder)).as_posix()  # as named, links kept


# -- the batch ---------------------------------------------------------------------------------------
def _batch_axes(model: onnx.ModelProto, prober: _Prober) -> tuple[list, dict]:
    """The batch axes set_batch accepts, and how each was decided."""
    try:
        detected = batch_axes(model)
    except BatchAxesError as exc:
        raise PatchError(f"cannot find the batch: {exc.message}", exc.hint) from None
    chosen = list(detected.axes)
    how = {pair: "detected (the first input's batch dim, wherever it appears)" for pair in chosen}
    for pair, node in _recurrent_states(model).items():
        if pair not in chosen and pair[0] not in {name for name, _ in chosen}:
            chosen.append(pair)
            how[pair] = f"the initial state of {node}, whose batch axis is {pair[1]}"
    refusal = prober.refusal(chosen)
    if refusal is None:
        paired = _state_pairs(model, prober.patched(chosen), chosen, detected.old_size)
        if paired and prober.refusal(chosen + list(paired)) is None:
            how.update(
                {
                    pair: f"pairs with output '{out}', which carries the batch on axis {pair[1]} (a state passed "
                    "in and out)"
                    for pair, out in paired.items()
                }
            )
            return chosen + list(paired), how
        return chosen, how
    candidates = [
        (name, axis)
        for name, info in fed_inputs(model.graph).items()
        for axis, dim in enumerate(read_dims(info) or [])
        if (name, axis) not in chosen and name not in {n for n, _ in chosen} and dim in (None, detected.old_size)
    ]
    for extra in [[c] for c in candidates] + ([candidates] if len(candidates) > 1 else []):
        if prober.refusal(chosen + extra) is None:
            how.update(
                {pair: f"tried: set_batch refuses the model without it ({refusal.splitlines()[0]})" for pair in extra}
            )
            return chosen + extra, how
    raise PatchError(
        f"set_batch cannot batch this model: {refusal}",
        "list the inputs that carry the batch yourself: patchspec init does not guess further",
    )


#: recurrent ops and the operands that hold their initial state ([directions, batch, hidden] by default)
_STATES = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
#: ops between a state input and the recurrent op that keep its batch axis (a Slice of its layers)
_STATE_PATH = {"Identity", "Cast", "Slice", "Split"}


def _recurrent_states(model: onnx.ModelProto) -> dict:
    """Graph inputs that an LSTM/GRU/RNN takes as its initial state: {(input, batch axis): "GRU 'name'"}."""
    inputs = fed_inputs(model.graph)
    producers = {o: node for node in model.graph.node for o in node.output if o}
    found = {}
    for graph_node in (site.node for site in walk_nodes(model.graph)):
        for operand in _STATES.get(graph_node.op_type, ()):
            if operand >= len(graph_node.input) or not graph_node.input[operand]:
                continue
            name = graph_node.input[operand]
            while name not in inputs and name in producers and producers[name].op_type in _STATE_PATH:
                name = producers[name].input[0]
            if name in inputs:
                layout = next((a.i for a in graph_node.attribute if a.name == "layout"), 0)
                found.setdefault(
                    (name, 0 if layout else 1), f"{graph_node.op_type} '{graph_node.name or graph_node.output[0]}'"
                )
    return found


def _state_pairs(model: onnx.ModelProto, probe: onnx.ModelProto, chosen: list, old_size: int) -> dict:
    """Inputs shaped like an output that carries the batch, except that they hold the old batch (or an
    unknown size) on that axis: a recurrent state in ``[2, 1, 128]``, out ``[2, N, 128]``. {(input, axis): output}"""
    batched = {name for name, _ in chosen}
    found = {}
    for info in probe.graph.output:
        dims = read_dims(info) or []
        for axis, dim in enumerate(dims):
            if dim != PROBE:
                continue
            for name, given in fed_inputs(model.graph).items():
                theirs = read_dims(given) or []
                if name in batched or len(theirs) != len(dims) or theirs[axis] not in (None, old_size):
                    continue
                if all(a == b for i, (a, b) in enumerate(zip(theirs, dims)) if i != axis):
                    found.setdefault((name, axis), info.name)
    return found


class _Prober:
    """set_batch with a probe name, on the graph only, through the engine (as 'plan' does); each set of
    axes is tried once, on a model read once."""

    def __init__(self, model_path: Path, spec_path: Path, model_ref: str, registry) -> None:
        self.spec_path, self.model_ref, self.registry = spec_path, model_ref, registry
        self.renames: list[DraftStep] = []
        self.engine = Engine(registry, lambda _: None)
        self.model_path = model_path
        self.tried: dict[tuple, tuple[onnx.ModelProto | None, str | None]] = {}
        # the model, graph only, read (and its external data checked) once, as apply reads it
        self.loaded = self.engine.load_input(self._spec([]), model_path)

    @property
    def model(self) -> onnx.ModelProto:
        return self.loaded.model

    def _spec(self, patches: list):
        draft = SpecDraft(self.model_ref, "probe.onnx", patches=patches, verify=[])
        return load_spec(self.spec_path, self.registry, text=checked(draft, self.spec_path, self.registry))

    def patched(self, axes: list) -> onnx.ModelProto | None:
        return self._run(axes)[0]

    def refusal(self, axes: list) -> str | None:
        """None when set_batch applies with these axes, else the first lines of its refusal."""
        return self._run(axes)[1]

    def _run(self, axes: list) -> tuple[onnx.ModelProto | None, str | None]:
        key = tuple(axes)
        if key not in self.tried:
            spec = self._spec(
                list(self.renames)
                + [DraftStep("set_batch", {"size": PROBE, "inputs": {name: axis for name, axis in axes}})]
            )
            report = RunReport(str(spec.path), str(self.model_path), "", status="planned")
            try:
                model, _ = self.engine.patch(replace(self.loaded, spec=spec), report)
                self.tried[key] = (model, None)
            except PatchError as exc:  # located in the probe's spec, which the user never sees: keep the reason
                self.tried[key] = (None, exc.message.split("(set_batch): ", 1)[-1])
        return self.tried[key]


def _renames(model: onnx.ModelProto) -> list[DraftStep]:
    """rename_dims for a dim name an input repeats on several axes: they may differ at run time."""
    steps = []
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info) or []
        repeated = {d for d in dims if isinstance(d, str) and dims.count(d) > 1}
        if not repeated:
            continue
        axes = {}
        for axis, dim in enumerate(dims):
            if dim in repeated and axis != 0:  # axis 0 keeps it: set_batch names the batch there
                axes[axis] = (
                    {2: "height", 3: "width"}.get(axis, f"{name}_{axis}") if len(dims) == 4 else f"{name}_{axis}"
                )
        if axes:
            names = ", ".join(f"'{d}'" for d in sorted(repeated))
            steps.append(
                DraftStep(
                    "rename_dims",
                    {"tensor": name, "axes": axes},
                    [f"the export names several axes of {name} {names}: tell them apart"],
                )
            )
    return steps


# -- the inputs of the run case ------------------------------------------------------------------------
def _inputs(model: onnx.ModelProto, axes: list, how: dict, size, old_size: int) -> tuple[list[InputRow], dict, bool]:
    """The run case's inputs, and whether to compare per sample (the original's batch is fixed at 1).

    An original exported at a fixed batch above 1 only runs at that batch: the case uses it."""
    batch = old_size if old_size > 1 else size if isinstance(size, int) else CASE_BATCH
    shapes = _case_shapes(model)
    by_name = dict(axes)
    rows, case = [], {}
    static = False
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info) or []
        shape = list(shapes.get(name, []))
        axis = by_name.get(name)
        if axis is not None:
            static = static or (isinstance(dims[axis], int) and old_size == 1)
            shape[axis] = batch
            row = InputRow(name, axis, how[(name, axis)])
        else:
            row = InputRow(name, None, _why_not_batched(dims))
        values = input_values(model, name, info.type.tensor_type.elem_type)
        item: dict = {"shape": shape}
        if values is not None:
            row.values, row.flagged = values.why, values.flag
            if values.flag:  # never a value that merely happens to run: the user gives the real one
                item = {"file": f"{name}.npy"}
                row.values += f"; save them as {name}.npy next to the spec (numpy.save), shape {shape}"
            elif "value" in values.item:
                item = {"value": values.item["value"], **({"shape": shape} if shape else {})}
            else:
                item.update(values.item)
        rows.append(row)
        case[name] = item if set(item) != {"shape"} else shape
    return rows, case, static


def _case_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """The lint's default sizes (one per dim name), except the last axis of a [batch, length] input (audio samples, token
    positions): 512, which short-window kernels (a reflect Pad, an STFT) accept."""
    shapes = probe_shapes(model, None, split=False)  # one size per dim name: the original must run too
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info) or []
        if len(dims) == 2 and not isinstance(dims[1], int):
            shapes[name][1] = 512
    return shapes


def _why_not_batched(dims: list) -> str:
    if not dims:
        return "a scalar: given whole to every sample"
    first = dims[0]
    if isinstance(first, int):
        return f"axis 0 is fixed at {first} and no other axis had to follow the batch"
    return f"its axes do not carry the batch's dim ({first!r} on axis 0 is another one)"


def _run_step(
    model: onnx.ModelProto, probe: onnx.ModelProto, rows: list[InputRow], case: dict, split: bool
) -> DraftStep:
    comments = ["run the output and compare it with the original on the same inputs"]
    compare: dict = {"against": "original"}
    if split:
        comments.append("the original has a fixed batch: compare per sample (split_batch)")
        inputs = {
            row.name: row.axis
            for row in rows
            if row.axis not in (0,) and (row.axis is not None or case_rank(case[row.name]))
        }
        outputs = {
            info.name: axis
            for info in probe.graph.output
            for axis, dim in enumerate(read_dims(info) or [])
            if dim == PROBE and axis != 0
        }
        compare["split_batch"] = {k: v for k, v in (("inputs", inputs), ("outputs", outputs)) if v} or True
    for row in rows:
        if row.values:
            comments.append(f"{row.name}: {'FLAGGED: ' if row.flagged else ''}{row.values}")
    return DraftStep("run", {"cases": [{"inputs": case}], "compare": compare}, comments)


def case_rank(item) -> int:
    if isinstance(item, list):
        return len(item)
    return len(item.get("shape", [])) if "shape" in item else 0


__all__ = ["InitResult", "InputRow", "draft_spec"]
