"""ONNX Runtime for the ``run`` verifier: providers, sessions by path, inputs from cases, runs.

Everything here raises :class:`RunFailure` with a message written for the user; the verifier turns
it into a failed (or, for a provider that cannot be loaded, skipped) result. Nothing here knows
about specs or plugins, so each piece is testable on its own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from patchspec.errors import did_you_mean
from patchspec.ort.hints import diagnose, node_of
from patchspec.ort.staging import staged_copy

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)
FILLS = ("random", "zeros", "ones", "arange")
DTYPES = (
    "float32",
    "float16",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)
#: default [low, high) of ``fill: random``: floats in [-1, 1), integers in [0, 10)
FLOAT_RANGE = (-1.0, 1.0)
INTEGER_RANGE = (0, 10)
_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}

Feeds = dict[str, np.ndarray]


class RunFailure(Exception):
    """A session cannot be built, a case cannot be fed or run; ``message`` is for the user."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ProviderUnusable(RunFailure):
    """The provider is listed as available but a session could not actually use it."""


@dataclass(frozen=True)
class TensorDecl:
    """A graph input or output as a session declares it: dims are ints, names (str) or None."""

    name: str
    dtype: str | None
    shape: tuple


_DIM = {
    "type": ["integer", "string"],
    "description": "size of one axis: a number (symbolic names are not allowed here)",
}
#: one input of a run case (and of lint's inputs): a shape list, or how to make the values
CASE_INPUT_SCHEMA = {
    "description": "a shape list, or how to make the input: {shape, dtype, fill, seed, low, high, file, value}",
    "type": ["array", "object"],
    "items": _DIM,
    "properties": {
        "shape": {"type": "array", "items": _DIM, "description": "sizes of the input's axes (numbers)"},
        "dtype": {"type": "string", "description": f"numpy dtype; default: the model's ({', '.join(DTYPES)})"},
        "fill": {"type": "string", "description": f"how to fill it: {' | '.join(FILLS)} (default random)"},
        "seed": {
            "type": "integer",
            "description": "seed of numpy.random.default_rng for fill: random "
            "(default: the input's position among the model's inputs)",
        },
        "low": {"type": "number", "description": "lowest random value (default -1.0 for floats, 0 for integers)"},
        "high": {
            "type": "number",
            "description": "random values stay below this (default 1.0 for floats, 10 for integers)",
        },
        "file": {"type": "string", "description": ".npy file with the input, relative to the spec's folder"},
        "value": {
            "type": ["number", "boolean", "array"],
            "description": "the input's exact value: a number (a scalar, or every element of 'shape') or "
            "a nested list (its shape is the list's); e.g. sr: {value: 16000}",
        },
    },
    "additionalProperties": False,
}


def case_input_problems(item, key: tuple):
    """What JSON Schema cannot say about one case input: (key path, message) pairs."""
    if isinstance(item, list):
        yield from _shape_problems(item, key)
        return
    if not {"file", "shape", "value"} & set(item):
        yield key, "give 'shape' (a list of sizes), 'value' (the exact value) or 'file' (a .npy file)"
    for source in ("file", "value"):
        if source in item and ({"fill", "seed", "low", "high"} & set(item)):
            yield key, f"'{source}' gives the values: 'fill', 'seed', 'low' and 'high' do not apply to it"
    if "file" in item and "value" in item:
        yield key, "give the values once: 'file' or 'value', not both"
    if "value" in item and isinstance(item["value"], list) and "shape" in item:
        yield key, "a list 'value' has its own shape: drop 'shape', or give one number to fill it"
    yield from _shape_problems(item.get("shape") or [], key + ("shape",))
    if "fill" in item and item["fill"] not in FILLS:
        yield (
            key + ("fill",),
            f"unknown fill '{item['fill']}'{did_you_mean(item['fill'], FILLS)}; expected one of {', '.join(FILLS)}",
        )
    if "dtype" in item and item["dtype"] not in DTYPES:
        yield (
            key + ("dtype",),
            f"unknown dtype '{item['dtype']}'{did_you_mean(item['dtype'], DTYPES)}; expected one of {', '.join(DTYPES)}",
        )
    if "low" in item and "high" in item and not item["low"] < item["high"]:
        yield key, f"low ({item['low']}) must be below high ({item['high']})"


def _shape_problems(shape: list, key: tuple):
    for axis, dim in enumerate(shape):
        if isinstance(dim, str) and re.fullmatch(r"-?\d+(\s+-?\d+)+", dim.strip()):
            items = ", ".join(str(v) for v in shape[:axis]) + (", " if axis else "") + ", ".join(dim.split())
            yield (
                key + (axis,),
                (
                    f"'{dim}' is one item: YAML separates the items of [...] with commas: "
                    f"[{items}{', ...' if axis + 1 < len(shape) else ''}]"
                ),
            )
        elif isinstance(dim, str):
            yield key + (axis,), f"symbolic dim '{dim}' must be given as a number here (e.g. 1)"
        elif dim < 0:
            yield key + (axis,), f"dim {dim} is negative; sizes are numbers >= 0"


def provider_skip_reasons(providers: Iterable[str], available: list[str] | None = None) -> dict[str, str | None]:
    """``{provider: None}`` when it can run here, else the reason it cannot."""
    if available is None:
        import onnxruntime

        available = onnxruntime.get_available_providers()
    reason = f"not available in this onnxruntime build; available: {', '.join(available)}"
    return {provider: (None if provider in available else reason) for provider in providers}


#: graph optimization levels a session can run at, by the name a spec gives them
OPTIMIZATION_LEVELS = ("all", "extended", "basic", "disabled")


@dataclass(frozen=True)
class BatchSplit:
    """How ``split_batch`` cuts a batched case into samples and joins the reference's outputs.

    ``inputs``: batch axis per input (None: the input is given whole to every sample run); inputs
    not listed are split on axis 0, scalars are given whole. ``outputs``: batch axis per output
    (default 0). A per-sample output of the batched output's rank is concatenated along that
    axis; one of a rank lower (an export that squeezed the batch away) is stacked along it.
    """

    inputs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)

    def input_axis(self, name: str, array: np.ndarray) -> int | None:
        if name in self.inputs:
            return self.inputs[name]
        return 0 if array.ndim else None


class Session:
    """One ONNX Runtime session of one model file on one provider, at one optimization level."""

    def __init__(self, path: Path, provider: str, optimization: str = "all", libraries: tuple = ()) -> None:
        """``libraries``: custom-op libraries to register (onnxruntime's register_custom_ops_library)."""
        self.path = Path(path)
        self.provider = provider
        self.optimization = optimization
        try:
            self._session = _build_session(self.path, provider, optimization, libraries)
        except RunFailure as exc:
            if not _escapes(exc):
                raise
            # onnxruntime >= 1.24 refuses data linked from outside the model's folder: a private staged copy
            self._session = _build_session(staged_copy(self.path, self), provider, optimization, libraries)
        self.inputs = [_decl(arg) for arg in self._session.get_inputs()]
        self.outputs = [_decl(arg) for arg in self._session.get_outputs()]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def run(self, feeds: Feeds) -> tuple[Feeds, float]:
        """Run once; returns ``{output name: array}`` and the seconds it took."""
        started = time.perf_counter()
        try:
            values = self._session.run(None, feeds)
        except Exception as exc:  # ORT raises its own Fail/InvalidArgument/RuntimeException classes
            message = _ort_message(exc)
            msg = f"{self.provider}: onnxruntime failed to run {self.path}{_at_node(message)}: {message}"
            found = diagnose(message)
            raise RunFailure(msg, found.hint if found else None) from None
        return dict(zip(self.output_names, values)), time.perf_counter() - started

    def run_split(
        self, feeds: Feeds, split: BatchSplit | None = None, batched_ranks: dict | None = None
    ) -> tuple[Feeds, float]:
        """Run once per sample of the batch axes; join each output along its batch axis.

        ``batched_ranks``: rank of each output of the batched model, to tell a per-sample output
        that keeps the batch axis (concatenated) from one that lost it (stacked).
        """
        split = split or BatchSplit()
        axes = {name: split.input_axis(name, array) for name, array in feeds.items()}
        sizes = {
            name: feeds[name].shape[axis]
            for name, axis in axes.items()
            if axis is not None and -feeds[name].ndim <= axis < feeds[name].ndim
        }
        bad_axes = [name for name, axis in axes.items() if axis is not None and name not in sizes]
        if bad_axes or len(set(sizes.values())) != 1:
            found = ", ".join(f"{name}: {size} on axis {axes[name]}" for name, size in sizes.items())
            found += "".join(f", {name}: no axis {axes[name]} (rank {feeds[name].ndim})" for name in bad_axes)
            msg = f"split_batch needs one batch size across the split inputs; found {found}"
            raise RunFailure(msg, "give each input's batch axis: split_batch: {inputs: {state: 1, sr: null}}")
        parts, seconds = [], 0.0
        for index in range(next(iter(sizes.values()))):
            sample = {
                name: (array if axes[name] is None else np.take(array, [index], axis=axes[name]))
                for name, array in feeds.items()
            }
            outputs, took = self.run(sample)
            parts.append(outputs)
            seconds += took
        ranks = batched_ranks or {}
        return {
            name: _join(name, [p[name] for p in parts], split.outputs.get(name, 0), ranks.get(name))
            for name in self.output_names
        }, seconds


def quiet_onnxruntime():
    """onnxruntime, with its own logging off (fatal only): it writes ANSI-coloured lines straight to
    stderr, and every error it raises is wrapped and reported by patchspec instead."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)
    return onnxruntime


def _build_session(path: Path, provider: str, optimization: str = "all", libraries: tuple = ()):
    onnxruntime = quiet_onnxruntime()

    options = onnxruntime.SessionOptions()
    for library in libraries:
        try:
            options.register_custom_ops_library(str(library))
        except Exception as exc:
            msg = f"onnxruntime cannot load the custom-op library {library}: {_ort_message(exc)}"
            raise RunFailure(
                msg, "give a shared library built for this onnxruntime; paths are relative to the spec"
            ) from None
    options.log_severity_level = 4  # fatal only: patchspec reports the errors itself, without ANSI
    options.graph_optimization_level = {
        "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "disabled": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[optimization]
    try:
        session = onnxruntime.InferenceSession(str(path), sess_options=options, providers=[provider])
    except Exception as exc:
        message = _ort_message(exc)
        msg = (
            f"{provider}: onnxruntime {onnxruntime.__version__} cannot build a session for {path}"
            f"{_at_node(message)}: {message}"
        )
        found = diagnose(message)
        hint = found.hint if found else None
        if "unknown exception" in message.lower():
            hint = (
                "onnxruntime gave no detail; run 'patchspec inspect' on the output and add the 'check' "
                "verifier before 'run' to find the node it rejects"
            )
        raise RunFailure(msg, hint) from None
    used = session.get_providers()
    if not used or used[0] != provider:
        msg = f"{provider} could not be loaded (onnxruntime fell back to {', '.join(used)})"
        raise ProviderUnusable(msg, "check the provider's libraries (CUDA, cuDNN, drivers) with 'patchspec env'")
    return session


#: terminal colour and cursor codes, which onnxruntime puts in some messages
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _escapes(failure: RunFailure) -> bool:
    found = diagnose(failure.message)
    return found is not None and found.cause == "escapes"


def _at_node(message: str) -> str:
    node = node_of(message)
    return f" at node '{node}'" if node else ""


def _ort_message(exc: Exception) -> str:
    text = " ".join(ANSI_ESCAPE.sub("", str(exc)).split())
    return text or type(exc).__name__


def _decl(arg) -> TensorDecl:
    shape = arg.shape if isinstance(arg.shape, (list, tuple)) else ()
    dims = tuple(d if isinstance(d, str) or (isinstance(d, int) and d >= 0) else None for d in shape)
    return TensorDecl(arg.name, _ORT_TYPES.get(arg.type), dims)


def _join(name: str, arrays: list[np.ndarray], axis: int, batched_rank: int | None) -> np.ndarray:
    rank = arrays[0].ndim
    stack = batched_rank == rank + 1  # the export squeezed the batch away: one sample has no batch axis
    joined_rank = rank + 1 if stack else rank
    if not -joined_rank <= axis < joined_rank:
        what = "a scalar" if rank == 0 else f"rank {rank}"
        msg = f"split_batch cannot join output '{name}' along axis {axis}: per sample it is {what}"
        raise RunFailure(msg, f"give its batch axis: split_batch: {{outputs: {{{name}: AXIS}}}}")
    try:
        return np.stack(arrays, axis=axis) if stack else np.concatenate(arrays, axis=axis)
    except ValueError as exc:
        msg = f"split_batch cannot join output '{name}' along axis {axis}: {exc}"
        raise RunFailure(msg, f"give its batch axis: split_batch: {{outputs: {{{name}: AXIS}}}}") from None


# -- inputs from a case ---------------------------------------------------------------------------


def make_feeds(case_inputs: dict, declared: list[TensorDecl], resolve: Callable[[str], Path]) -> Feeds:
    """Arrays for every declared input: from the case, or random for unlisted fully fixed inputs."""
    names = [d.name for d in declared]
    for name in case_inputs:
        if name not in names:
            msg = (
                f"case input '{name}' is not an input of the model{did_you_mean(str(name), names)}; "
                f"its inputs are: {', '.join(names)}"
            )
            raise RunFailure(msg)
    feeds = {}
    for position, decl in enumerate(declared):
        if decl.name in case_inputs:
            feeds[decl.name] = input_array(decl, case_inputs[decl.name], position, resolve)
        elif all(isinstance(d, int) for d in decl.shape):
            feeds[decl.name] = generate(decl.shape, decl.dtype or "float32", "random", position)
        else:
            msg = f"the case gives no shape for input '{decl.name}', declared {format_shape(decl.shape)}"
            raise RunFailure(msg, f"add '{decl.name}: [sizes...]' to the case's inputs")
    return feeds


def input_array(decl: TensorDecl, item, position: int, resolve: Callable[[str], Path]) -> np.ndarray:
    """One input from its case item: a shape list, or ``{shape, dtype, fill, seed, low, high, file}``."""
    item = {"shape": item} if isinstance(item, list) else dict(item)
    dtype = item.get("dtype") or decl.dtype
    if dtype is None:
        msg = f"input '{decl.name}' has a type numpy cannot hold; give 'dtype' in the case"
        raise RunFailure(msg)
    if "value" in item:
        value = item["value"]
        array = np.full(tuple(item["shape"]), value) if "shape" in item else np.array(value)
        try:
            return array.astype(dtype)
        except (TypeError, ValueError) as exc:
            raise RunFailure(f"input '{decl.name}': value {value!r} is not a {dtype}: {exc}") from None
    if "file" in item:
        array = load_array(decl.name, resolve(item["file"]))
        expected = {"shape": list(array.shape) if item.get("shape") is None else list(item["shape"]), "dtype": dtype}
        if list(array.shape) != expected["shape"] or str(array.dtype) != dtype:
            msg = (
                f"input '{decl.name}': {item['file']} holds {array.dtype} {list(array.shape)}, "
                f"expected {dtype} {expected['shape']}"
            )
            raise RunFailure(msg, f"save it with numpy as {dtype}, e.g. np.save(path, x.astype('{dtype}'))")
        return array
    return generate(
        tuple(item["shape"]),
        dtype,
        item.get("fill", "random"),
        item.get("seed", position),
        item.get("low"),
        item.get("high"),
    )


def load_array(name: str, path: Path) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        msg = f"input '{name}': cannot read {path}: {exc}"
        raise RunFailure(msg, "give a .npy file written by numpy.save, relative to the spec's folder") from None
    if not isinstance(array, np.ndarray):
        msg = f"input '{name}': {path} is an .npz archive; 'file' takes one array saved as .npy"
        raise RunFailure(msg)
    return array


def generate(shape: tuple, dtype: str, fill: str, seed: int = 0, low=None, high=None) -> np.ndarray:
    """A deterministic array: ``numpy.random.default_rng(seed)`` for ``random``."""
    np_dtype = np.dtype(dtype)
    if fill == "zeros":
        return np.zeros(shape, np_dtype)
    if fill == "ones":
        return np.ones(shape, np_dtype)
    if fill == "arange":
        values = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
        if np_dtype.kind in "iu":
            values = values % (min(np.iinfo(np_dtype).max, 2**31 - 1) + 1)
        return (values % 2).astype(bool) if np_dtype.kind == "b" else values.astype(np_dtype)
    rng = np.random.default_rng(seed)
    if np_dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np_dtype.kind in "iu":
        lo = INTEGER_RANGE[0] if low is None else int(low)
        hi = INTEGER_RANGE[1] if high is None else int(high)
        return rng.integers(lo, hi, size=shape, dtype=np_dtype)
    lo = FLOAT_RANGE[0] if low is None else float(low)
    hi = FLOAT_RANGE[1] if high is None else float(high)
    return rng.uniform(lo, hi, size=shape).astype(np_dtype)


def feed_shape_problems(feeds: Feeds, declared: list[TensorDecl]) -> list[str]:
    """Where the feeds disagree with the fixed sizes and ranks the model declares for its inputs."""
    problems = []
    for decl in declared:
        array = feeds.get(decl.name)
        if array is not None:
            problems.extend(shape_problems("input", decl, array.shape))
    return problems


def shape_problems(kind: str, decl: TensorDecl, actual: tuple) -> list[str]:
    """A declared fixed size (or rank) that differs from the actual shape, one line per axis."""
    where = f"{kind} '{decl.name}' (declared {format_shape(decl.shape)}, actual {list(actual)})"
    if len(decl.shape) != len(actual):
        return [f"{where}: declared rank {len(decl.shape)}, actual rank {len(actual)}"]
    return [
        f"{where}: axis {axis} declared {want}, actual {got}"
        for axis, (want, got) in enumerate(zip(decl.shape, actual))
        if isinstance(want, int) and want != got
    ]


def format_shape(shape: tuple) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


# -- comparison -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputComparison:
    """One output of one case on one provider, against its reference."""

    name: str
    passed: bool
    max_abs: float
    max_rel: float
    message: str = ""
    worst_index: tuple | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": "pass" if self.passed else "fail",
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "worst_index": list(self.worst_index) if self.worst_index else None,
            "message": self.message,
        }


def compare_output(name: str, actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> OutputComparison:
    """``|actual - expected| <= atol + rtol * |expected|`` everywhere; NaN/Inf only where the reference has them."""
    if actual.shape != expected.shape:
        msg = f"output '{name}' has shape {list(actual.shape)}, the reference {list(expected.shape)}"
        return OutputComparison(name, False, float("inf"), float("inf"), msg)
    got, want = _as_float(actual), _as_float(expected)
    finite = np.isfinite(got) & np.isfinite(want)
    same_special = (np.isnan(got) & np.isnan(want)) | (~np.isfinite(want) & (got == want))
    stray = ~finite & ~same_special
    if stray.any():
        index = _index(np.argmax(stray), got.shape)
        count = int(stray.sum())
        msg = (
            f"output '{name}' has {count} NaN/Inf value(s) where the reference differs, "
            f"first at index {index}: got {got[index]}, expected {want[index]}"
        )
        return OutputComparison(name, False, float("inf"), float("inf"), msg, index)
    if not finite.any():
        return OutputComparison(name, True, 0.0, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf positions are masked out below
        error = np.where(finite, np.abs(got - want), 0.0)
        scale = np.where(finite, np.abs(want), 0.0)
    relative = np.divide(error, scale, out=np.zeros_like(error), where=scale > 0)
    excess = error - (atol + rtol * scale)
    worst = _index(np.argmax(np.where(finite, excess, -np.inf)), got.shape)
    max_abs, max_rel = float(error.max()), float(relative.max())
    if excess[worst] <= 0:
        return OutputComparison(name, True, max_abs, max_rel, "", worst)
    over = int((finite & (excess > 0)).sum())
    msg = (
        f"output '{name}' differs beyond tolerance (rtol {rtol:g}, atol {atol:g}) in {over} of {got.size} "
        f"elements; worst at index {worst}: got {got[worst]:.7g}, expected {want[worst]:.7g}, "
        f"abs error {error[worst]:.3g}, rel error {relative[worst]:.3g}"
    )
    return OutputComparison(name, False, max_abs, max_rel, msg, worst)


def nonfinite_problems(outputs: Feeds) -> list[str]:
    """NaN/Inf in outputs when there is no reference to say they are expected."""
    problems = []
    for name, array in outputs.items():
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biufc":
            continue  # a sequence or map output (a ZipMap's list of dicts), or strings: no NaN to find
        values = _as_float(array)
        bad = ~np.isfinite(values)
        if bad.any():
            index = _index(np.argmax(bad), values.shape)
            problems.append(f"output '{name}' has {int(bad.sum())} NaN/Inf value(s), first at index {index}")
    return problems


def _as_float(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).astype(np.float64)


def _index(flat: int | np.integer, shape: tuple) -> tuple:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else ()
