"""``patchspec init``: a starter spec for one model, with the reasons in comments.

1. Which input axes carry the batch: the contract's detection first; when set_batch refuses that
   (a state tensor keeps the batch on axis 1), each other axis of size 1 or unknown is tried
   alongside. A probe run of set_batch (graph only) settles it and says where the outputs keep it.
   Inputs whose own batch name differs (tf2onnx's ``unk__6134``, ``unk__6135``, a ``length``) are
   tied to the batch by running the original (:mod:`.batch_ties`); the evidence goes in a comment.
2. Dim names an input repeats on several axes (SCRFD's ``[?, 3, ?, ?]``) are told apart.
3. A verify block: ``check``, and ``run`` against the original, per sample (``split_batch``) wherever
   the original runs one sample at a time, dynamic batch included (:mod:`.init_case`); ops that couple
   the samples (set_batch names them) are said in the spec, with the key that accepts them. Integer
   inputs get values where the graph says what they are (:mod:`patchspec.shapes.values`), or are flagged.

The graph is read once; the original is run a few times on onnxruntime's CPU provider, when it loads
there. The spec is checked by the loader before it is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import onnx

from patchspec.author.batch_retry import uncoupled_axes, with_another_input
from patchspec.author.batch_ties import BatchEvidence, CaseLayout, Pair, refuted, tie_batch
from patchspec.author.init_case import (
    PROBE,
    InputRow,
    case_inputs,
    case_shapes,
    input_rules,
    listed_shapes,
    original_fails,
    per_sample_reason,
    probe_values,
    run_step,
    runnable_shapes,
    runs_at,
    sequence_first,
    unified_shapes,
)
from patchspec.author.original_runs import OriginalRuns
from patchspec.author.own_noise import own_noise
from patchspec.author.recurrent_inputs import SEQUENCES, recurrent_states, state_pairs
from patchspec.author.spec_text import DraftStep, SpecDraft, checked, next_command, output_ref, quoted, root_needed
from patchspec.author.weightless import weightless_copy
from patchspec.errors import PatchError
from patchspec.run.engine import Engine
from patchspec.run.report import RunReport
from patchspec.shapes.annotations import collector_paused, read_dims
from patchspec.shapes.batch.axes import BatchAxesError, batch_axes, fed_inputs
from patchspec.spec.load import load_spec

#: the batch of the run case when the spec keeps a symbolic batch
CASE_BATCH = 3


@dataclass
class InitResult:
    text: str
    rows: list[InputRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    next: str = ""  # the command to run next, as printed


def draft_spec(model_path: Path, spec_path: Path, size: int | str, registry: Any) -> InitResult:
    """The text of a starter spec for ``model_path``, to be written at ``spec_path``."""
    with collector_paused():  # linear in the graph: no collection walks the whole graph's facts
        return _draft_spec(model_path, spec_path, size, registry)


def _draft_spec(model_path: Path, spec_path: Path, size: int | str, registry: Any) -> InitResult:
    folder = Path(os.path.abspath(spec_path)).parent  # as named, as the spec loader takes it
    model_ref = _relative(model_path, folder)
    label = f"b{size}" if isinstance(size, int) else "dynamic"
    output = output_ref(spec_path, f"{model_path.stem}.{label}.onnx")
    prober = _Prober(model_path, spec_path, model_ref, registry)
    model = prober.model
    rules = input_rules(model)
    runner = _Runner(model, OriginalRuns(model_path, model), probe_values(rules))
    renames = prober.renames = _renames(model, runner)
    axes, how = _batch_axes(model, prober, size, runner)
    probe = prober.patched(axes)
    old_size = batch_axes(model, {name: axis for name, axis in axes}).old_size
    batch = size if isinstance(size, int) else old_size if old_size > 1 else CASE_BATCH
    shapes = sequence_first(model, axes, runner.evidence.shapes or runner.shapes)
    rows, case = case_inputs(model, axes, how, rules, shapes, batch, runner.evidence.untied)
    split = _per_sample(model, axes, old_size, runner, batch, probe)
    coupled = prober.coupled(axes)
    _refuse_collapsed(probe, axes, coupled)
    root = root_needed(spec_path, [model_path])
    draft = SpecDraft(model_ref, output, header=_header(model_path, spec_path, root))
    draft.patches += [*renames, _set_batch_step(size, axes, how, rows)]
    unloadable = _unloadable(model, runner.runs)
    draft.verify.append(_check_step(unloadable))
    if not unloadable:  # else a run step could only fail, the original's own failure and the output's alike
        small = len(model.graph.node) <= LOAD_CHECK_NODES and bool((ran := runner.runs.run(case)) and ran.ok)
        noise = own_noise(runner.runs, case) if small and not coupled else {}  # never over a coupling
        draft.verify.append(run_step(probe, rows, case, split, coupled, noise))
    text = checked(draft, spec_path, registry)
    notes = [f"{row.name}: {row.values}" for row in rows if row.flagged]
    notes = notes or original_fails(runner.runs, shapes, runner.values, len(model.graph.node) <= LOAD_CHECK_NODES)
    return InitResult(text, rows, notes, next_command(spec_path, root))


def _refuse_collapsed(probe: onnx.ModelProto | None, axes: list[Pair], coupled: list[str]) -> None:
    """No output keeps the batch and set_batch finds the samples coupled: the batch is folded into every
    output (madmom's key CNN: axis 0 is time, pooled into one key). A compare could only be batch against
    batch, which passes whatever the samples do, so init writes none and says why."""
    outputs = probe.graph.output if probe is not None else []
    fixed = [read_dims(info) for info in outputs]  # every dim a size: the shape does not follow the batch
    if (
        not coupled
        or not outputs
        or not all(dims is not None and all(isinstance(d, int) for d in dims) for dims in fixed)
    ):
        return
    where = ", ".join(f"{quoted(name)}[{axis}]" for name, axis in axes)
    raise PatchError(
        f"the model cannot be batched on {where}: no output keeps the batch, and set_batch finds its samples "
        f"coupled ({coupled[0]}): every output is one result for the whole input, so that axis is no batch",
        "if another axis is the batch, say so: set_batch with inputs: {INPUT: AXIS} in a spec of your own",
    )


def _header(model_path: Path, spec_path: Path, root: Path | None) -> list[str]:
    return [
        f"Written by 'patchspec init {model_path}': check the comments, then '{next_command(spec_path, root)}'",
        "(both from the folder init ran in). Paths below are relative to this file's folder.",
    ] + ([f"The model lies outside this spec's project root: apply with --root {root}."] if root else [])


def _set_batch_step(size: int | str, axes: list[Pair], how: dict[Pair, str], rows: list[InputRow]) -> DraftStep:
    return DraftStep(
        "set_batch",
        {"size": size, "inputs": {name: axis for name, axis in axes}},
        [f"batch on {', '.join(f'{quoted(n)}[{a}]' for n, a in axes)}:"]
        + [f"  {quoted(n)}[{a}]: {how[(n, a)]}" for n, a in axes]
        + [f"{quoted(row.name)}: not batched ({row.how})" for row in rows if row.axis is None],
    )


def _check_step(unloadable: str | None) -> DraftStep:
    check = DraftStep("check", {}, ["onnx's checker and strict shape inference on the output"])
    if unloadable:
        check.comments += [
            f"no 'run' step: onnxruntime here cannot load the original ({unloadable});",
            "add one with providers that can (run: {providers: [...]}), or compare with your own outputs",
        ]
    return check


def _relative(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(os.path.abspath(path), folder)).as_posix()  # as named, links kept


class _Runner:
    """The original's runs for this model: the batch ties found, and the layouts tried."""

    def __init__(self, model: onnx.ModelProto, runs: OriginalRuns, values: dict[str, dict[str, Any]]) -> None:
        self.model, self.runs, self.values = model, runs, values
        self.evidence = BatchEvidence()

    @cached_property
    def shapes(self) -> dict[str, list[int]]:
        """The case's sizes: ``case_shapes``, grown where the original fails at them (``runnable_shapes``) in
        a graph small enough to run it cheaply."""
        shapes = {**case_shapes(self.model), **listed_shapes(self.values)}
        if len(self.model.graph.node) > LOAD_CHECK_NODES:
            return shapes
        return runnable_shapes(self.model, self.runs, shapes, self.values)

    def layouts(self, batch: list[Pair]) -> list[CaseLayout]:
        shapes = self.shapes
        unified = unified_shapes(self.model, shapes, batch)
        return [CaseLayout(shapes, self.values)] + ([CaseLayout(unified, self.values)] if unified != shapes else [])

    def refutes(self, chosen: list[Pair], pair: Pair) -> str | None:
        """Why the runs show ``pair`` is not the batch, or None."""
        return refuted(self.runs, self.layouts([*chosen, pair])[0], chosen, pair)

    def tie(self, chosen: list[Pair]) -> BatchEvidence:
        """Axis 0 of every other input whose axis 0 is not fixed, tried against ``chosen``."""
        names = {name for name, _ in chosen}
        candidates = [
            (name, 0)
            for name, info in fed_inputs(self.model.graph).items()
            if name not in names and (dims := read_dims(info)) and not isinstance(dims[0], int)
        ]
        self.evidence = tie_batch(self.runs, self.layouts([*chosen, *candidates]), chosen, candidates)
        return self.evidence


#: init asks onnxruntime whether it loads (and runs) the original only for graphs of at most this many
#: nodes, where a session costs about 0.1 s; a larger model's run step says so at apply (an LLM's session
#: costs seconds)
LOAD_CHECK_NODES = 20_000


def _unloadable(model: onnx.ModelProto, runs: OriginalRuns) -> str | None:
    """onnxruntime's reason when it cannot load the original here (an op or opset it has no CPU kernel
    for), or None: then no run step could pass."""
    if len(model.graph.node) > LOAD_CHECK_NODES or runs.session is not None:
        return None
    return runs.load_failure or None  # "" when the weights were too large to try


def _per_sample(
    model: onnx.ModelProto, axes: list[Pair], old_size: int, runner: _Runner, batch: int, probe: onnx.ModelProto | None
) -> str | None:
    """Why the run case compares per sample (a batch must give what its samples give alone), or None:
    a fixed batch, or a dynamic one the original runs at 1 or, failing there, at 2 (split_batch then
    gives each sample twice); not where an output keeps no batch axis (per-sample runs could not
    rebuild it)."""
    inputs = fed_inputs(model.graph)
    if any(isinstance((read_dims(inputs[name]) or [])[axis], int) for name, axis in axes):
        if old_size == 1:
            return "the original has a fixed batch: compare per sample (split_batch)"
        return (
            f"the original has a fixed batch of {old_size}: compare per sample (split_batch runs it with each "
            f"sample repeated {old_size} times)"
        )
    layout = CaseLayout(runner.evidence.shapes or runner.shapes, runner.values)
    failing = per_sample_reason(runner.runs, layout, axes, batch)
    if failing:
        return failing
    unbatched = [
        info.name for info in (probe.graph.output if probe is not None else []) if PROBE not in (read_dims(info) or [])
    ]
    single = runner.runs.run(layout.items(1, axes))
    if unbatched or probe is None:
        return None
    if single is not None and not single.ok:  # traced above batch 1: split_batch gives each sample twice
        double = runner.runs.run(layout.items(2, axes))
        if double is None or not double.ok:
            return None
        return (
            "a batch must give what its samples give one at a time: compare per sample (split_batch; the "
            "original fails at batch 1, so each sample runs twice)"
        )
    return "a batch must give what its samples give one at a time: compare per sample (split_batch)"


# -- the batch ---------------------------------------------------------------------------------------
def _batch_axes(
    model: onnx.ModelProto, prober: _Prober, size: int | str, runner: _Runner
) -> tuple[list[Pair], dict[Pair, str]]:
    """The batch axes set_batch accepts, and how each was decided."""
    try:
        detected = batch_axes(model)
    except BatchAxesError as exc:
        raise PatchError(f"cannot find the batch: {exc.message}", exc.hint) from None
    chosen = list(detected.axes)
    how = {pair: "detected (the first input's batch dim, wherever it appears)" for pair in chosen}
    how.update(
        {(name, 0): "no node reads it: it takes the batch with the others (any values do)" for name in detected.unread}
    )
    _move_to_sequence_axes(model, chosen, how)
    old_size = batch_axes(model, dict(chosen)).old_size
    _add_recurrent_states(model, runner, chosen, how)
    _add_ties(prober, runner, chosen, how)
    refusal = prober.refusal(chosen)
    if refusal is not None:
        return with_another_input(model, prober, size, chosen, how, refusal, detected.old_size)
    chosen = uncoupled_axes(model, prober, chosen, how) or chosen
    paired = state_pairs(model, prober.patched(chosen), chosen, old_size)
    if not paired or prober.refusal(chosen + list(paired)) is not None:
        return chosen, how
    for pair, out in paired.items():
        how[pair] = (
            f"pairs with output {quoted(out)}, which carries the batch on axis {pair[1]} (a state passed in and out)"
        )
    return chosen + list(paired), how


def _move_to_sequence_axes(model: onnx.ModelProto, chosen: list[Pair], how: dict[Pair, str]) -> None:
    """A recurrent op's sequence X is [seq, batch, ...]: its batch is on axis 1 (axis 0 is time)."""
    for (name, axis), node in recurrent_states(model, SEQUENCES).items():
        for at, (chosen_name, chosen_axis) in enumerate(chosen):
            if chosen_name == name and chosen_axis != axis:
                how.pop(chosen[at])
                chosen[at] = (name, axis)
                how[(name, axis)] = (
                    f"the sequence input of {node}, whose batch axis is {axis} (axis {chosen_axis} is time)"
                )


def _add_recurrent_states(model: onnx.ModelProto, runner: _Runner, chosen: list[Pair], how: dict[Pair, str]) -> None:
    """Add each recurrent op's initial state that the runs do not refute as a batch; refuse a streaming model."""
    for pair, node in recurrent_states(model).items():
        if pair in chosen or pair[0] in {name for name, _ in chosen}:
            continue
        why_not = runner.refutes(chosen, pair)
        if why_not:  # the op keeps a batch of 1 while the inputs' axis varies: a sequence, not a batch
            axes_text = ", ".join(f"{quoted(n)}[{a}]" for n, a in chosen)
            raise PatchError(
                f"the model cannot be batched on {axes_text}: {node} keeps a batch of 1 in its initial state "
                f"{quoted(pair[0])} while {axes_text} varies ({why_not}), so that axis is the sequence the "
                "recurrent op runs through, and its samples are not independent",
                "a streaming model is batched by its recurrent state's batch axis, which this export fixes "
                "at 1: export it with that axis free, or run it one stream at a time",
                node=node,
            )
        chosen.append(pair)
        how[pair] = f"the initial state of {node}, whose batch axis is {pair[1]}"


def _add_ties(prober: _Prober, runner: _Runner, chosen: list[Pair], how: dict[Pair, str]) -> None:
    """Add the inputs the original's runs tie to the batch, unless set_batch refuses them (then say why)."""
    untied = dict(runner.evidence.untied)
    ties = runner.tie(chosen).ties
    runner.evidence.untied.update(untied)
    refused = prober.refusal([*chosen, *((t.name, t.axis) for t in ties)]) if ties else None
    for tie in ties:
        if refused is None:
            chosen.append((tie.name, tie.axis))
            how[(tie.name, tie.axis)] = f"another name for the batch: {tie.evidence}"
        else:
            runner.evidence.untied[tie.name] = (
                f"the original ties it to the batch, but set_batch refuses it: {refused.detail.splitlines()[0]}"
            )


class _Prober:
    """set_batch on the graph only, through the engine (as 'plan' does), at the probe's symbolic batch
    unless told a size; each set of axes is tried once, on a model read once."""

    def __init__(self, model_path: Path, spec_path: Path, model_ref: str, registry: Any) -> None:
        self.spec_path, self.model_ref, self.registry = spec_path, model_ref, registry
        self.renames: list[DraftStep] = []
        self.engine = Engine(registry, lambda _: None)
        self.model_path = model_path
        self.tried: dict[tuple[Any, ...], tuple[onnx.ModelProto | None, PatchError | None]] = {}
        self.reports: dict[tuple[Any, ...], RunReport] = {}
        # the model, graph only, read (and its external data checked) once, as apply reads it
        self.loaded = self.engine.load_input(self._spec([]), model_path)
        # what each probe patches (the engine copies it twice): the graph without the weights' bytes
        self.weightless = replace(self.loaded, model=weightless_copy(self.loaded.model))

    @property
    def model(self) -> onnx.ModelProto:
        model: onnx.ModelProto = self.loaded.model
        return model

    def _spec(self, patches: list[DraftStep]) -> Any:
        draft = SpecDraft(self.model_ref, "probe.onnx", patches=patches, verify=[])
        return load_spec(self.spec_path, self.registry, text=checked(draft, self.spec_path, self.registry))

    def patched(self, axes: list[Pair]) -> onnx.ModelProto | None:
        return self._run(axes, PROBE)[0]

    def refusal(self, axes: list[Pair], size: int | str = PROBE) -> PatchError | None:
        """None when set_batch applies with these axes, else its refusal (``detail`` is the reason)."""
        return self._run(axes, size)[1]

    def coupled(self, axes: list[Pair]) -> list[str]:
        """What set_batch says couples the samples, with these axes (its ``couples samples:`` details)."""
        self._run(axes, PROBE)
        report = self.reports.get((tuple(axes), PROBE))
        steps = report.patches if report is not None else []
        prefix = "couples samples: "
        return [line[len(prefix) :] for step in steps for line in step.details if line.startswith(prefix)]

    def _run(self, axes: list[Pair], size: int | str) -> tuple[onnx.ModelProto | None, PatchError | None]:
        key = (tuple(axes), size)
        if key not in self.tried:
            step = DraftStep("set_batch", {"size": size, "inputs": {name: axis for name, axis in axes}})
            spec = self._spec([*self.renames, step])
            report = self.reports[key] = RunReport(str(spec.path), str(self.model_path), "", status="planned")
            try:
                model, _ = self.engine.patch(replace(self.weightless, spec=spec), report)
                self.tried[key] = (model, None)
            except PatchError as exc:  # located in the probe's spec, which the user never sees: the detail
                self.tried[key] = (None, exc)
        return self.tried[key]


def _renames(model: onnx.ModelProto, runner: _Runner) -> list[DraftStep]:
    """rename_dims for a dim name an input repeats on several axes: they may differ at run time (SCRFD
    names every dim '?'). Not where the original runs with them equal and fails with them apart (a
    distance matrix [1, seq_len, seq_len] is square by construction)."""
    steps = []
    for name, info in fed_inputs(model.graph).items():
        dims = read_dims(info) or []
        repeated = {d for d in dims if isinstance(d, str) and dims.count(d) > 1}
        axes = {}
        for axis, dim in enumerate(dims):
            if dim in repeated and axis != 0:  # axis 0 keeps it: set_batch names the batch there
                axes[axis] = (
                    {2: "height", 3: "width"}.get(axis, f"{name}_{axis}") if len(dims) == 4 else f"{name}_{axis}"
                )
        if axes and not _kept_equal(runner, name, sorted(axes)):
            names = ", ".join(f"'{d}'" for d in sorted(repeated))
            steps.append(
                DraftStep(
                    "rename_dims",
                    {"tensor": name, "axes": axes},
                    [f"the export names several axes of {name} {names}: tell them apart"],
                )
            )
    return steps


def _kept_equal(runner: _Runner, name: str, axes: list[int]) -> bool:
    """Whether the original runs with ``name``'s ``axes`` at one size and fails with them apart."""
    if len(runner.model.graph.node) > LOAD_CHECK_NODES or runner.runs.session is None or name not in runner.shapes:
        return False
    apart = {tensor: list(shape) for tensor, shape in runner.shapes.items()}
    for step, axis in enumerate(axes[1:], start=1):
        size = apart[name][axis]
        apart[name][axis] = size + step * max(size // 2, 1)  # 64 -> 96: still a multiple of 32 where it was one
    return runs_at(runner.runs, runner.shapes, runner.values) and not runs_at(runner.runs, apart, runner.values)


__all__ = ["InitResult", "draft_spec"]
