"""The ``run`` verifier: run the output on ONNX Runtime per provider and case, compare with a reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import onnx

from patchspec import Verifier, VerifyContext, VerifyResult, hookimpl
from patchspec.api import (
    CASE_INPUT_SCHEMA,
    DEFAULT_PROVIDERS,
    OPTIMIZATION_LEVELS,
    BatchSplit,
    OutputComparison,
    ProviderUnusable,
    RunFailure,
    Session,
    TensorDecl,
    case_input_problems,
    close_matches,
    compare_output,
    did_you_mean,
    fed_inputs,
    feed_shape_problems,
    format_shape,
    input_values,
    make_feeds,
    nonfinite_problems,
    provider_skip_reasons,
    read_dims,
    shape_problems,
)

DEFAULT_OPTIMIZATIONS = ("all", "disabled")

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5
#: (rtol, atol) for outputs whose coarser side has this element type (a patch that casts to fp16);
#: compare.tolerances overrides them, compare.rtol/atol apply to every other output
DTYPE_TOLERANCES = {"float16": (1e-2, 1e-3), "bfloat16": (5e-2, 1e-2)}
#: element types from coarse to fine, to pick the coarser side of a comparison
PRECISION = ("bfloat16", "float16", "float32", "float64")

_AGAINST = {
    "type": "string",
    "description": "reference: original | none | PATH to a .onnx model or a .npz of "
    "expected outputs keyed by output name (relative to the spec's folder)",
}


class RunParams(TypedDict, total=False):
    """The params as ``apply``/``verify`` receive them (schema defaults filled in); the test kit checks
    its keys against ``params_schema``."""

    providers: list[str]
    custom_op_libraries: list[str]
    require: list[str]
    cases: list[dict[str, Any]]
    optimizations: list[str]
    compare: dict[str, Any]


class RunVerifier(Verifier):
    Params = RunParams
    name = "run"
    description = "Run the output on ONNX Runtime per provider and case; compare its outputs with a reference."
    params_schema = {
        "type": "object",
        "properties": {
            "providers": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "default": list(DEFAULT_PROVIDERS),
                "description": "execution providers to run on (default [CPUExecutionProvider]); "
                "one not available here is skipped with the reason",
            },
            "custom_op_libraries": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "shared libraries that register the model's custom ops "
                "(onnxruntime's register_custom_ops_library), relative to the "
                "spec's folder; loaded into every session, the reference's too",
            },
            "require": {
                "type": "array",
                "items": {"type": "string"},
                "default": [],
                "description": "providers that must run: unavailable fails the verifier",
            },
            "cases": {
                "type": "array",
                "minItems": 1,
                "description": "input sets to run; default: one case from the declared shapes when all are fixed",
                "items": {
                    "type": "object",
                    "properties": {
                        "inputs": {
                            "type": "object",
                            "additionalProperties": CASE_INPUT_SCHEMA,
                            "description": "input name -> shape list or {shape, dtype, fill, seed, low, high, file, value}",
                        },
                        "against": dict(_AGAINST, description="this case's reference; default: compare.against"),
                    },
                    "required": ["inputs"],
                    "additionalProperties": False,
                },
            },
            "optimizations": {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "default": list(DEFAULT_OPTIMIZATIONS),
                "items": {"enum": list(OPTIMIZATION_LEVELS)},
                "description": (
                    "ONNX Runtime graph optimization levels to run every case at (default [all, "
                    "disabled]): optimizations can make a wrong model look right"
                ),
            },
            "compare": {
                "type": "object",
                "default": {},
                "description": "what the outputs are compared with, and how closely",
                "properties": {
                    "against": dict(
                        _AGAINST, default="original", description=_AGAINST["description"] + "; default original"
                    ),
                    "split_batch": {
                        "description": (
                            "run the reference once per sample and join its outputs: true (axis 0 of "
                            "every input and output), or {inputs: {NAME: AXIS or null}, outputs: "
                            "{NAME: AXIS}} for a batch elsewhere (an LSTM state [2, batch, 64] is 1; "
                            "null gives that input whole to every sample)"
                        ),
                        "anyOf": [
                            {"type": "boolean"},
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "minProperties": 1,
                                "properties": {
                                    "inputs": {
                                        "type": "object",
                                        "additionalProperties": {"type": ["integer", "null"]},
                                        "description": "batch axis per input (default 0; null: not split)",
                                    },
                                    "outputs": {
                                        "type": "object",
                                        "additionalProperties": {"type": "integer"},
                                        "description": "batch axis per output (default 0); a per-sample output "
                                        "of lower rank is stacked along it",
                                    },
                                },
                            },
                        ],
                    },
                    "rtol": {
                        "type": "number",
                        "minimum": 0,
                        "default": DEFAULT_RTOL,
                        "description": f"relative tolerance (default {DEFAULT_RTOL:g})",
                    },
                    "atol": {
                        "type": "number",
                        "minimum": 0,
                        "default": DEFAULT_ATOL,
                        "description": f"absolute tolerance (default {DEFAULT_ATOL:g})",
                    },
                    "outputs": {
                        "type": "object",
                        "description": (
                            "per output: {rtol, atol} for this output only, or skip (run it, check its "
                            "declared shape, do not compare its values): for outputs the original "
                            "itself does not reproduce (near-tied TopK, a quantized head)"
                        ),
                        "additionalProperties": {
                            "anyOf": [
                                {"const": "skip"},
                                {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "minProperties": 1,
                                    "properties": {
                                        "rtol": {"type": "number", "minimum": 0, "description": "relative tolerance"},
                                        "atol": {"type": "number", "minimum": 0, "description": "absolute tolerance"},
                                    },
                                },
                            ],
                        },
                    },
                    "tolerances": {
                        "type": "object",
                        "description": (
                            "rtol/atol per element type, for outputs whose coarser side (output or "
                            "reference) has it; defaults: "
                            + ", ".join(f"{k} rtol {r:g} atol {a:g}" for k, (r, a) in DTYPE_TOLERANCES.items())
                        ),
                        "propertyNames": {"enum": list(PRECISION)},
                        "additionalProperties": {
                            "type": "object",
                            "additionalProperties": False,
                            "minProperties": 1,
                            "properties": {
                                "rtol": {"type": "number", "minimum": 0, "description": "relative tolerance"},
                                "atol": {"type": "number", "minimum": 0, "description": "absolute tolerance"},
                            },
                        },
                    },
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }

    def check_params(self, params: dict):
        yield from _provider_problems(params)
        for index, case in enumerate(params.get("cases") or []):
            if "against" in case:
                yield from _against_problems(case["against"], ("cases", index, "against"))
            for name, item in case["inputs"].items():
                yield from case_input_problems(item, ("cases", index, "inputs", name))
        if "against" in params.get("compare", {}):
            yield from _against_problems(params["compare"]["against"], ("compare", "against"))

    def check_model(self, params: dict, model):
        """The cases, split axes and per-output settings against the patched model's inputs and outputs."""
        inputs = {name: info for name, info in fed_inputs(model.graph).items()}
        outputs = [info.name for info in model.graph.output]
        for index, case in enumerate(params.get("cases") or []):
            given = case["inputs"]
            for name, item in given.items():
                key = ("cases", index, "inputs", name)
                if name not in inputs:
                    yield (
                        key,
                        (
                            f"'{name}' is not an input of the patched model{did_you_mean(str(name), inputs)}; "
                            f"its inputs are: {', '.join(inputs)}"
                        ),
                    )
                    continue
                yield from _case_fit(inputs[name], item, key)
            for name, info in inputs.items():
                dims = read_dims(info)
                if name not in given and dims is not None and not all(isinstance(d, int) for d in dims):
                    yield (
                        ("cases", index, "inputs"),
                        (
                            f"the case gives no shape for input '{name}', declared "
                            f"{format_shape(tuple(dims))}: add '{name}: [sizes...]'"
                        ),
                    )
        split = params.get("compare", {}).get("split_batch")
        for section, names in (("inputs", inputs), ("outputs", outputs)):
            for name in split.get(section, {}) if isinstance(split, dict) else {}:
                if name not in names:
                    yield (
                        ("compare", "split_batch", section, name),
                        (f"'{name}' is not one of the patched model's {section}{did_you_mean(str(name), names)}"),
                    )
        for name in params.get("compare", {}).get("outputs", {}):
            if name not in outputs:
                yield (
                    ("compare", "outputs", name),
                    (
                        f"'{name}' is not an output of the patched model"
                        f"{did_you_mean(str(name), outputs)}; its outputs are: "
                        f"{', '.join(outputs)}"
                    ),
                )

    def dependencies(self, params: dict):
        """Reference models, .npz outputs, .npy inputs and custom-op libraries: part of the digest and the depfile.
        Files only: ``against: original`` (the input model) and ``against: none`` name no file."""
        yield from params.get("custom_op_libraries", [])
        compare_against = params.get("compare", {}).get("against", "original")
        references = [compare_against, *(case.get("against", compare_against) for case in params.get("cases") or [])]
        yield from (reference for reference in references if reference not in ("original", "none"))
        for case in params.get("cases") or []:
            for item in case["inputs"].values():
                if isinstance(item, dict) and "file" in item:
                    yield item["file"]

    def verify(self, params: RunParams, context: VerifyContext) -> VerifyResult:
        return _Run(params, context).result()


# -- static checks of the parameters --------------------------------------------------------------


def _provider_problems(params: dict):
    import onnxruntime

    known = onnxruntime.get_all_providers()
    providers = params.get("providers") or list(DEFAULT_PROVIDERS)
    for index, provider in enumerate(providers):
        if provider not in known and close_matches(provider, known):
            yield ("providers", index), f"unknown provider '{provider}'{did_you_mean(provider, known)}"
    for index, provider in enumerate(params.get("require", [])):
        if provider not in providers:
            yield ("require", index), f"required provider '{provider}' is not in providers ({', '.join(providers)})"


def _against_problems(against: str, key: tuple):
    if against in ("original", "none") or against.endswith((".onnx", ".npz")):
        return
    yield key, f"against must be original, none, or a path ending in .onnx or .npz; got '{against}'"


#: how the messages begin that say a failure is not the patch's doing: the summary leads with them
_NOT_THE_PATCH = ("the reference is unstable", "the original fails the same way")


def _case_fit(info, item, key: tuple):
    """A case input's rank, fixed sizes and element type against the model's declaration."""
    dims = read_dims(info)
    shape = item if isinstance(item, list) else item.get("shape")
    if shape is None and isinstance(item, dict) and "value" in item:
        shape = list(np.shape(item["value"]))
    if dims is not None and shape is not None:
        if len(shape) != len(dims):
            yield (
                key,
                (
                    f"a shape of rank {len(shape)} ({list(shape)}) for an input of rank {len(dims)}, declared "
                    f"{format_shape(tuple(dims))}"
                ),
            )
        else:
            wrong = [
                f"axis {axis} is fixed at {want}, the case gives {got}"
                for axis, (want, got) in enumerate(zip(dims, shape))
                if isinstance(want, int) and want != got
            ]
            if wrong:
                yield key, f"{'; '.join(wrong)} (declared {format_shape(tuple(dims))})"
    dtype = item.get("dtype") if isinstance(item, dict) else None
    declared = _numpy_name(info.type.tensor_type.elem_type)
    if dtype and declared and dtype != declared:
        yield key + ("dtype",), f"the patched model's input is {declared}, the case gives {dtype}"


def _value_notes(model, feeds: dict | None) -> list[str]:
    """For a run that failed: integer inputs whose values the graph says something about, and do not fit."""
    notes = []
    for name, info in fed_inputs(model.graph).items():
        array = (feeds or {}).get(name)
        if array is None or array.dtype.kind not in "iub":
            continue
        wanted = input_values(model, name, info.type.tensor_type.elem_type)
        if wanted is None or wanted.flag:
            continue
        item = wanted.item
        if "value" in item and not np.all(array == item["value"]):
            notes.append(
                f"input '{name}' is {array.reshape(-1)[:4].tolist()}, but {wanted.why}: "
                f"give it {{value: {item['value']}}}"
            )
        elif "high" in item and array.size and (array.min() < item.get("low", 0) or array.max() >= item["high"]):
            notes.append(
                f"input '{name}' has values from {array.min()} to {array.max()}, but it {wanted.why}: "
                f"give it {{low: {item.get('low', 0)}, high: {item['high']}}}"
            )
    return notes


def _numpy_name(elem_type: int) -> str | None:
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return None


# -- running ----------------------------------------------------------------------------------------


@dataclass
class _Row:
    """One provider x case: its verdict, timings, and one comparison per output."""

    provider: str
    case: int | None
    status: str  # pass | fail | skip
    messages: list[str] = field(default_factory=list)
    optimization: str = ""
    outputs: list[OutputComparison] = field(default_factory=list)
    seconds: float = 0.0
    reference_seconds: float = 0.0

    def lines(self, twins: tuple[_Row, ...] = ()) -> list[str]:
        """Its detail lines; with ``twins`` (the same failure at other levels) one set naming every level."""
        where, ms = self.merged_where(twins), ", ".join(f"{r.seconds * 1000:.1f} ms" for r in (self, *twins))
        lines = [
            f"{where} {o.name}: {'pass' if o.passed else 'FAIL'} max abs {o.max_abs:.3g} max rel {o.max_rel:.3g} ({ms})"
            for o in self.outputs
        ]
        if self.status == "pass" and not self.outputs:
            lines.append(f"{where}: ran, not compared ({ms})")
        label = {"fail": "FAIL", "skip": "skipped"}.get(self.status, "note")
        return lines + [f"{where}: {label}: {m}" for m in self.messages]

    @property
    def where(self) -> str:
        return self.merged_where(())

    def merged_where(self, twins: tuple[_Row, ...]) -> str:
        levels = ", ".join(r.optimization for r in (self, *twins) if r.optimization)
        level = f" (optimizations {levels})" if levels else ""
        return self.provider + ("" if self.case is None else f" case {self.case}") + level

    def failure(self) -> tuple | None:
        """What makes two failed rows the same failure (all but the level and the timings); None if it passed."""
        if self.status != "fail":
            return None
        return (
            self.provider,
            self.case,
            tuple(self.messages),
            tuple((o.name, o.passed, f"{o.max_abs:.3g}", f"{o.max_rel:.3g}") for o in self.outputs),
        )

    def to_json(self) -> dict:
        return {
            "provider": self.provider,
            "case": self.case,
            "optimization": self.optimization,
            "status": self.status,
            "seconds": self.seconds,
            "reference_seconds": self.reference_seconds,
            "outputs": [o.to_json() for o in self.outputs],
            "messages": list(self.messages),
        }


@dataclass
class _CaseRun:
    """One case on the output at one level: the feeds it got and what came out (or why nothing did)."""

    index: int
    case: dict
    feeds: dict | None = None
    outputs: dict | None = None
    seconds: float = 0.0
    failure: str | None = None


@dataclass(frozen=True)
class _Tolerance:
    rtol: float
    atol: float
    skip: bool = False


class _Run:
    def __init__(self, params: dict, context: VerifyContext) -> None:
        self.params = params
        self.context = context
        compare = params["compare"]  # the loader filled in the schema's defaults
        self.against = compare["against"]
        split = compare.get("split_batch", False)
        self.split_batch = bool(split)
        self.split = (
            BatchSplit(split.get("inputs", {}), split.get("outputs", {})) if isinstance(split, dict) else BatchSplit()
        )
        self.optimizations = list(params["optimizations"])
        self.rtol = float(compare["rtol"])
        self.atol = float(compare["atol"])
        self.tolerances = dict(DTYPE_TOLERANCES)
        self.applied: dict[str, tuple[float, float]] = {}  # element type -> the tolerance used for its outputs
        for dtype, given in compare.get("tolerances", {}).items():
            rtol, atol = self.tolerances.get(dtype, (self.rtol, self.atol))
            self.tolerances[dtype] = (float(given.get("rtol", rtol)), float(given.get("atol", atol)))
        self.per_output = {
            name: _Tolerance(self.rtol, self.atol, True)
            if given == "skip"
            else _Tolerance(float(given.get("rtol", self.rtol)), float(given.get("atol", self.atol)))
            for name, given in compare.get("outputs", {}).items()
        }
        self.required = set(params["require"])
        self.libraries = tuple(context.resolve(p) for p in params.get("custom_op_libraries", []))
        #: (outputs, seconds) of the reference, by (reference path, provider, level, case index, per sample?)
        self.expected: dict[tuple, tuple[dict, float] | RunFailure] = {}

    def result(self) -> VerifyResult:
        providers = self.params["providers"]
        reasons = provider_skip_reasons(providers)
        rows: list[_Row] = []
        for provider in providers:
            if reasons[provider]:
                rows.append(self._unavailable(provider, reasons[provider]))
            else:
                rows.extend(self._provider_rows(provider))
        return self._verdict(providers, rows)

    def _unavailable(self, provider: str, reason: str) -> _Row:
        if provider in self.required:
            return _Row(provider, None, "fail", [f"required provider {provider} cannot run: {reason}"])
        return _Row(provider, None, "skip", [reason])

    def _provider_rows(self, provider: str) -> list[_Row]:
        rows = []
        for level in self.optimizations:
            label = level if len(self.optimizations) > 1 else ""
            try:
                runs = self._run_output(provider, level)
            except ProviderUnusable as exc:
                return [self._unavailable(provider, _text(exc))]
            except RunFailure as exc:
                rows.append(
                    _Row(provider, None, "fail", self._original_fails_too(provider, level) + [_text(exc)], label)
                )
                continue
            self._run_references(provider, level, runs)
            rows += [self._case_row(provider, level, label, run) for run in runs]
        return rows

    def _original_fails_too(self, provider: str, level: str) -> list[str]:
        """When the output has no session, whether the original has one: if not, the patch is not the cause."""
        original = self.context.original_path
        try:
            Session(original, provider, level, self.libraries)
        except RunFailure as exc:
            return [
                f"the original fails the same way on {provider} ({exc.message.split(': ', 1)[-1]}), so this is "
                "not the patch's doing: onnxruntime here cannot run the model; run it on a provider that can, or "
                "drop 'run' from verify"
            ]
        return []

    def _run_output(self, provider: str, level: str) -> list[_CaseRun]:
        """Every case on the output at one level; the session is freed before any reference is built,
        so the output's and the reference's weights are never in memory together."""
        self.context.progress(f"{provider}, optimizations {level}: building the session")
        session = Session(self.context.output_path, provider, level, self.libraries)
        cases = self.params.get("cases") or [_default_case(session.inputs)]
        runs = []
        for index, case in enumerate(cases):
            self.context.progress(f"{provider} case {index} ({index + 1} of {len(cases)}), optimizations {level}")
            run = _CaseRun(index, case)
            try:
                run.feeds = make_feeds(case["inputs"], session.inputs, self.context.resolve)
                misfit = feed_shape_problems(run.feeds, session.inputs)
                if misfit:
                    raise RunFailure("the case does not fit the output's inputs: " + "; ".join(misfit))
                run.outputs, run.seconds = session.run(run.feeds)
            except RunFailure as exc:
                run.failure = _text(exc) + "".join(f"; {note}" for note in _value_notes(self.context.model, run.feeds))
            runs.append(run)
        del session
        return runs

    def _case_row(self, provider: str, level: str, label: str, run: _CaseRun) -> _Row:
        row = _Row(provider, run.index, "pass", optimization=label, seconds=run.seconds)
        if run.failure is not None:
            row.messages.append(run.failure)
        else:
            row.messages += declared_shape_problems(self.context.model, run.outputs)
            try:
                expected, row.reference_seconds = self._reference(provider, level, run)
                if expected is None:
                    row.messages += nonfinite_problems(run.outputs)
                else:
                    row.outputs, failed = self._compare(run.outputs, expected)
                    row.messages += [o.message for o in failed]
                    if failed:
                        row.messages += self._diagnose(provider, level, run, expected, failed)
            except RunFailure as exc:
                row.messages.append(_text(exc))
        if row.messages:  # every message is a reason to fail: a lie, a NaN, a difference, an error
            row.status = "fail"
        return row

    def _compare(self, outputs: dict, expected: dict) -> tuple[list[OutputComparison], list[OutputComparison]]:
        compared = []
        for name in outputs:
            if name not in expected:
                continue
            tolerance = self._tolerance(name, outputs[name], expected[name])
            if not tolerance.skip:
                compared.append(compare_output(name, outputs[name], expected[name], tolerance.rtol, tolerance.atol))
        if not compared and not any(name in expected for name in outputs):
            msg = (
                f"nothing compared: the output's outputs ({', '.join(outputs)}) and the reference's "
                f"({', '.join(expected)}) share no name"
            )
            raise RunFailure(msg)
        return compared, [o for o in compared if not o.passed]

    def _tolerance(self, name: str, actual: np.ndarray, expected: np.ndarray) -> _Tolerance:
        """compare.outputs for this output, else the coarser side's element type's, else compare.rtol/atol."""
        if name in self.per_output:
            return self.per_output[name]
        sides = [str(a.dtype) for a in (actual, expected) if str(a.dtype) in PRECISION]
        coarser = min(sides, key=PRECISION.index) if sides else None
        if coarser not in self.tolerances:
            return _Tolerance(self.rtol, self.atol)
        self.applied[coarser] = self.tolerances[coarser]
        return _Tolerance(*self.tolerances[coarser])

    # -- the reference ---------------------------------------------------------------------------------
    def _reference_path(self, run: _CaseRun) -> Path | None:
        against = run.case.get("against", self.against)
        if against == "none":
            return None
        return self.context.original_path if against == "original" else self.context.resolve(against)

    def _reference(self, provider: str, level: str, run: _CaseRun) -> tuple[dict | None, float]:
        """The reference's outputs for this case, at the level the output ran at: like with like."""
        path = self._reference_path(run)
        if path is None:
            return None, 0.0
        if path.suffix == ".npz":
            return _load_expected(path), 0.0
        return self._expected(path, provider, level, run, self.split_batch)

    def _run_references(self, provider: str, level: str, runs: list[_CaseRun]) -> None:
        """Every case's reference at one level: one session per reference model, freed before the next."""
        by_path: dict[Path, list[_CaseRun]] = {}
        for run in runs:
            path = self._reference_path(run)
            if run.outputs is not None and path is not None and path.suffix != ".npz":
                by_path.setdefault(path, []).append(run)
        for path, group in by_path.items():
            self._run_reference(path, provider, level, self.split_batch, group)

    def _expected(self, path: Path, provider: str, level: str, run: _CaseRun, split: bool) -> tuple[dict, float]:
        """The reference model's outputs and seconds for one case, run once per (provider, level, split)."""
        key = (path, provider, level, run.index, split)
        if key not in self.expected:
            self._run_reference(path, provider, level, split, [run])
        found = self.expected[key]
        if isinstance(found, RunFailure):
            raise found
        return found

    def _run_reference(self, path: Path, provider: str, level: str, split: bool, runs: list[_CaseRun]) -> None:
        runs = [run for run in runs if (path, provider, level, run.index, split) not in self.expected]
        if not runs:
            return
        try:
            reference = _reference_session(path, provider, level, self.libraries)
        except RunFailure as exc:
            for run in runs:
                self.expected[(path, provider, level, run.index, split)] = exc
            return
        for run in runs:
            key = (path, provider, level, run.index, split)
            self.context.progress(
                f"{provider} case {run.index}, optimizations {level}: the reference {path.name}"
                + (", per sample" if split else "")
            )
            ranks = {name: array.ndim for name, array in run.outputs.items()}
            try:
                self.expected[key] = _run_reference(reference, run.feeds, self.split if split else None, ranks)
            except RunFailure as exc:
                self.expected[key] = exc
        del reference

    # -- when an output differs: is it the patch, or the reference's own noise? ------------------------
    def _diagnose(
        self, provider: str, level: str, run: _CaseRun, expected: dict, failed: list[OutputComparison]
    ) -> list[str]:
        """Run the original against itself: at another optimization level, and batched against per
        sample. Where it differs from itself beyond tolerance too, the difference is not the patch's."""
        path = self._reference_path(run)
        if path is None or path.suffix == ".npz":
            return []
        others = [
            (f"at optimizations {level} and {other}", other, self.split_batch) for other in self._other_levels(level)
        ]
        if self.split_batch:
            others.append(("run batched and per sample", level, False))
        notes = []
        for comparison in failed:
            noise = self._noise(path, provider, run, comparison.name, expected, others)
            if noise is not None:
                notes.append(self._noise_message(comparison, noise))
        return notes

    def _other_levels(self, level: str) -> list[str]:
        given = [other for other in self.optimizations if other != level]
        return given or ["disabled" if level != "disabled" else "all"]

    def _noise(
        self, path: Path, provider: str, run: _CaseRun, name: str, expected: dict, others: list
    ) -> tuple[str, float] | None:
        """(how, max abs difference) of the first way the reference disagrees with itself on ``name``."""
        want = expected[name]
        for how, level, split in others:
            try:
                again, _ = self._expected(path, provider, level, run, split)
            except RunFailure:
                continue  # e.g. an original that refuses the batch: that comparison cannot be made
            if name not in again:
                continue
            tolerance = self._tolerance(name, run.outputs[name], want)
            check = compare_output(name, again[name], want, tolerance.rtol, tolerance.atol)
            if not check.passed:
                return how, check.max_abs
        return None

    def _noise_message(self, comparison: OutputComparison, noise: tuple[str, float]) -> str:
        how, figure = noise
        suggested = float(f"{max(figure, comparison.max_abs) * 2:.1g}")
        return (
            f"the reference is unstable on '{comparison.name}': the original itself differs by {figure:.3g} "
            f"(max abs) {how}, so a difference of {comparison.max_abs:.3g} is not evidence against the patch. "
            f"Give real inputs (file: x.npy) for this case, or set this output's tolerance or skip it: "
            f"compare: {{outputs: {{{comparison.name}: {{atol: {suggested:g}}}}}}} or "
            f"compare: {{outputs: {{{comparison.name}: skip}}}}"
        )

    def _verdict(self, providers: list[str], rows: list[_Row]) -> VerifyResult:
        groups = _same_failures(rows)
        details = tuple(line for row, twins in groups for line in row.lines(twins))
        data = {
            "against": self.against,
            "split_batch": self.split_batch,
            "optimizations": self.optimizations,
            "rtol": self.rtol,
            "atol": self.atol,
            "tolerances": {k: list(v) for k, v in self.tolerances.items()},
            "applied_tolerances": {k: list(v) for k, v in self.applied.items()},
            "outputs": {
                name: ("skip" if t.skip else {"rtol": t.rtol, "atol": t.atol}) for name, t in self.per_output.items()
            },
            "results": [row.to_json() for row in rows],
        }
        failed = [row for row in rows if row.status == "fail"]
        ran = [row for row in rows if row.status == "pass"]
        skipped = sorted({row.provider for row in rows if row.status == "skip"})
        tail = f"; skipped {', '.join(skipped)}" if skipped else ""
        if failed:
            first, twins = next((row, twins) for row, twins in groups if row.status == "fail")
            reason = next((m for m in first.messages if m.startswith(_NOT_THE_PATCH)), first.messages[0])
            where = first.merged_where(twins)
            summary = f"{len(failed)} of {len(rows)} runs failed; first: {where}: {reason}"
            quoted = f"{where}: FAIL: {reason}"  # the summary says it: the details do not say it again
            return VerifyResult("failed", summary, tuple(line for line in details if line != quoted), data)
        if not ran:
            return VerifyResult("skipped", f"no listed provider can run here{tail}", details, data)
        worst = max((o.max_abs for row in ran for o in row.outputs), default=None)
        used = "".join(f"; {dtype} outputs rtol {r:g}, atol {a:g}" for dtype, (r, a) in sorted(self.applied.items()))
        used += "".join(
            f"; '{name}' rtol {t.rtol:g}, atol {t.atol:g}" for name, t in self.per_output.items() if not t.skip
        )
        error = "" if worst is None else f", max abs error {worst:.3g} (rtol {self.rtol:g}, atol {self.atol:g}{used})"
        skipped_outputs = [name for name, t in self.per_output.items() if t.skip]
        if skipped_outputs:
            error += f"; not compared: {', '.join(skipped_outputs)}"
        cases = len({row.case for row in ran})
        levels = f" (optimizations {', '.join(self.optimizations)})" if len(self.optimizations) > 1 else ""
        return VerifyResult(
            "passed",
            f"{cases} case(s) on {', '.join(sorted({r.provider for r in ran}))}{levels} "
            f"against {self.against}{error}{tail}",
            details,
            data,
        )


def _same_failures(rows: list[_Row]) -> list[tuple[_Row, tuple[_Row, ...]]]:
    """The rows in order, each with its twins: the same failure at the other optimization levels,
    said once (``case 0 (optimizations all, disabled): FAIL: ...``)."""
    groups: list[tuple[_Row, list[_Row]]] = []
    for row in rows:
        key = row.failure()
        twin_of = next((group for group in groups if key is not None and group[0].failure() == key), None)
        if twin_of is None:
            groups.append((row, []))
        else:
            twin_of[1].append(row)
    return [(row, tuple(twins)) for row, twins in groups]


def declared_shape_problems(model, outputs: dict) -> list[str]:
    """Outputs whose rank or fixed sizes, as the model file declares them, differ from the run's.

    Read from the file, not from the session: onnxruntime reports its own inferred shape where
    the declaration disagrees with it (a declared [N, 3] that is [N, 2] reads [N, None] there).
    Only ranks and fixed sizes: a dim_param shared by tensors of different sizes is the lint
    verifier's business (exporters write '?' for "unknown" on several axes).
    """
    problems = []
    for info in model.graph.output:
        dims = read_dims(info)
        if dims is not None and info.name in outputs:
            problems += shape_problems("output", TensorDecl(info.name, None, tuple(dims)), outputs[info.name].shape)
    return [f"the output declares a shape it does not produce: {p}" for p in problems]


def _default_case(declared: list[TensorDecl]) -> dict:
    for decl in declared:
        if not all(isinstance(d, int) for d in decl.shape):
            msg = f"no cases given and input '{decl.name}' is declared {format_shape(decl.shape)}"
            raise RunFailure(
                msg, "add cases with numbers for every symbolic dim, e.g. cases: [{inputs: {x: [1, 3, 224, 224]}}]"
            )
    return {"inputs": {}}


def _reference_session(path: Path, provider: str, level: str, libraries: tuple = ()) -> Session:
    if not path.is_file():
        raise RunFailure(f"reference model {path} does not exist", "'against' paths are relative to the spec's folder")
    try:
        return Session(path, provider, level, libraries)
    except RunFailure as exc:
        raise RunFailure(f"reference: {exc.message}", exc.hint) from None


def _run_reference(
    reference: Session, feeds: dict, split: BatchSplit | None, batched_ranks: dict
) -> tuple[dict, float]:
    declared = {d.name: d for d in reference.inputs}
    missing = [d for d in reference.inputs if d.name not in feeds]
    # each side gets its own element type: a patch that casts inputs to fp16 is compared with the
    # fp32 original on the same values
    ref_feeds = {name: _as_declared(array, declared[name]) for name, array in feeds.items() if name in declared}
    if missing:
        ref_feeds.update(make_feeds({}, missing, lambda p: Path(p)))
    if split is not None:
        return reference.run_split(ref_feeds, split, batched_ranks)
    hint = f"if {reference.path.name} only runs one sample at a time, set 'split_batch: true' under compare"
    misfit = feed_shape_problems(ref_feeds, reference.inputs)
    if misfit:
        raise RunFailure(f"the reference {reference.path} refuses this case: " + "; ".join(misfit), hint)
    try:
        return reference.run(ref_feeds)
    except RunFailure as exc:
        raise RunFailure(f"reference: {exc.message}", hint) from None


def _as_declared(array: np.ndarray, decl) -> np.ndarray:
    if decl.dtype is None or str(array.dtype) == decl.dtype:
        return array
    return array.astype(decl.dtype)


def _load_expected(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, AttributeError) as exc:
        msg = f"cannot read expected outputs from {path}: {exc}"
        raise RunFailure(msg, "give a .npz written by numpy.savez with one array per output name") from None


def _text(exc: RunFailure) -> str:
    return exc.message + (f" (hint: {exc.hint})" if exc.hint else "")


@hookimpl
def register_verifiers(register):
    register(RunVerifier)
