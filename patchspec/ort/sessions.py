"""ONNX Runtime sessions: the one place patchspec builds one, and runs it within a time bound.

:func:`build_session` is the builder for the whole project: the ``run`` verifier's sessions by
path (:class:`Session`) and the lint probe's session from bytes (:mod:`patchspec.ort.lint.probe`)
both go through it, so logging, optimization levels, custom-op libraries (only where native code
is allowed, :mod:`patchspec.ort.native_code`) and the data-folder rules are set in one place.

:meth:`Session.run` runs in a worker thread under a watchdog: past its ``timeout`` onnxruntime's
``RunOptions.terminate`` stops it, and SIGINT/SIGTERM reach the main thread while it waits (a Loop
with 10^12 trips is stopped either way).

Everything here raises :class:`RunFailure` with a message written for the user; the verifier turns
it into a failed (or, for a provider that cannot be loaded, skipped) result. Nothing here knows
about specs or plugins, so each piece is testable on its own.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from patchspec.ort.batch_join import first_copy, join, split_hint
from patchspec.ort.bfloat16 import run_ort_values, uses_bfloat16
from patchspec.ort.data_links import staged_copy
from patchspec.ort.hints import diagnose, node_of
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.settings import DEFAULT_TIMEOUT

#: the first onnxruntime that takes the folder of external data for a model given as bytes
EXTERNAL_FOLDER_OPTION_SINCE = (1, 21)
_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
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
#: terminal colour and cursor codes, which onnxruntime puts in some messages
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

Feeds = dict[str, np.ndarray]


class OnnxRuntimeError(Exception):
    """onnxruntime raised while running a session (its own Fail/InvalidArgument/RuntimeException
    classes); ``str()`` is its message on one line."""


class ProviderUnusable(RunFailure):
    """The provider is listed as available but a session could not actually use it."""


@dataclass(frozen=True)
class TensorDecl:
    """A graph input or output as a session declares it: dims are ints, names (str) or None."""

    name: str
    dtype: str | None
    shape: tuple[int | str | None, ...]


def provider_skip_reasons(providers: Iterable[str], available: list[str] | None = None) -> dict[str, str | None]:
    """``{provider: None}`` when it can run here, else the reason it cannot."""
    if available is None:
        import onnxruntime

        available = list(onnxruntime.get_available_providers())
    reason = f"not available in this onnxruntime build; available: {', '.join(available)}"
    return {provider: (None if provider in available else reason) for provider in providers}


def quiet_onnxruntime() -> Any:
    """onnxruntime, with its own logging off (fatal only): it writes ANSI-coloured lines straight to
    stderr, and every error it raises is wrapped and reported by patchspec instead."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(4)
    return onnxruntime


def build_session(
    model: Path | bytes,
    provider: str,
    optimization: str = "all",
    libraries: Sequence[Path] = (),
    data_dir: Path | None = None,
    options: Mapping[str, str] | None = None,
) -> Any:
    """An ``onnxruntime.InferenceSession`` of a model file (or of a model held in memory, whose
    external data stays in ``data_dir``) on one provider, at one optimization level.

    ``libraries``: custom-op libraries to register; the caller has checked that native code is
    allowed (:func:`patchspec.ort.native_code.check_native_code`). ``options``: the provider's
    options (:func:`patchspec.ort.providers.provider_setup` says which). Nothing is written: onnxruntime
    >= 1.21 is told the data folder of a model given as bytes; older releases resolve it against the
    working directory, so that is ``data_dir`` while the session is built (the weights are read then).
    """
    onnxruntime = quiet_onnxruntime()
    settings = _session_options(onnxruntime, optimization, libraries)
    source = str(model) if isinstance(model, Path) else model
    in_folder = data_dir is not None and not isinstance(model, Path)
    if in_folder and _version(onnxruntime.__version__) >= EXTERNAL_FOLDER_OPTION_SINCE:
        settings.add_session_config_entry("session.model_external_initializers_file_folder_path", str(data_dir))
        in_folder = False
    previous = os.getcwd()
    try:
        if in_folder:
            os.chdir(str(data_dir))
        chosen = [(provider, dict(options))] if options else [provider]
        session = onnxruntime.InferenceSession(source, sess_options=settings, providers=chosen)
    except Exception as exc:
        raise _cannot_build(exc, provider, model if isinstance(model, Path) else None) from None
    finally:
        if in_folder:
            os.chdir(previous)
    used = session.get_providers()
    if not used or used[0] != provider:
        msg = f"{provider} could not be loaded (onnxruntime fell back to {', '.join(used)})"
        raise ProviderUnusable(msg, "check the provider's libraries (CUDA, cuDNN, drivers) with 'patchspec env'")
    return session


def _session_options(onnxruntime: Any, optimization: str, libraries: Sequence[Path]) -> Any:
    """``SessionOptions`` at one optimization level, with onnxruntime's logging off and the custom-op
    libraries registered (one that does not load is a run failure naming it)."""
    settings = onnxruntime.SessionOptions()
    for library in libraries:
        try:
            settings.register_custom_ops_library(str(library))
        except Exception as exc:
            msg = f"onnxruntime cannot load the custom-op library {library}: {ort_message(exc)}"
            raise RunFailure(
                msg, "give a shared library built for this onnxruntime; paths are relative to the spec"
            ) from None
    settings.log_severity_level = 4  # fatal only: patchspec reports the errors itself, without ANSI
    settings.graph_optimization_level = {
        "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "disabled": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[optimization]
    return settings


def _cannot_build(exc: Exception, provider: str, path: Path | None) -> RunFailure:
    import onnxruntime

    message = ort_message(exc)
    node = node_of(message)
    what = path if path is not None else "the model"
    msg = f"{provider}: onnxruntime {onnxruntime.__version__} cannot build a session for {what}{_at(node)}: {message}"
    found = diagnose(message)
    hint = found.hint if found else None
    if "unknown exception" in message.lower():
        hint = (
            "onnxruntime gave no detail; run 'patchspec inspect' on the output and add the 'check' "
            "verifier before 'run' to find the node it rejects"
        )
    return RunFailure(msg, hint, detail=message, node=node)


def run_bounded(session: Any, feeds: Feeds, timeout: float | None, names: list[str] | None = None) -> list[Any]:
    """``session.run(names, feeds)`` in a worker thread, stopped by ``RunOptions.terminate`` after
    ``timeout`` seconds (None: no bound) or when the main thread is interrupted while it waits.

    A signal handler that raises (SIGINT's KeyboardInterrupt, the CLI's SIGTERM handler) runs in the
    main thread during the wait: the run is told to stop, and the exception goes on once it has.
    Raises :class:`TimeoutError` past the bound and :class:`OnnxRuntimeError` (with onnxruntime's
    exception as its cause) when the run failed; what the waiting thread raised goes on as it is.
    """
    onnxruntime = quiet_onnxruntime()
    options = onnxruntime.RunOptions()
    options.log_severity_level = 4
    outcome: dict[str, Any] = {}
    done = threading.Event()  # not Thread.join: a join cut short by a signal leaves is_alive() False

    def work() -> None:
        try:
            run = partial(run_ort_values, session) if uses_bfloat16(session) else session.run
            outcome["values"] = run(names, feeds, options)
        except BaseException as exc:  # handed to the waiting thread, which raises it there
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="patchspec-onnxruntime-run", daemon=True)
    worker.start()
    try:
        done.wait(timeout)
    finally:
        if not done.is_set():  # past the bound, or interrupted: onnxruntime checks the flag between nodes
            options.terminate = True
            _wait_out(done)
    if "values" in outcome:
        return list(outcome["values"])
    if timeout is not None and options.terminate:
        raise TimeoutError(timeout)
    raise OnnxRuntimeError(ort_message(outcome["error"])) from outcome["error"]


def _wait_out(done: threading.Event) -> None:
    """Wait until the stopped run has returned, through any further signal (the first one goes on):
    a process must not exit while onnxruntime still runs in another thread."""
    while not done.is_set():
        try:
            done.wait()
        except BaseException:  # a second Ctrl-C while the first one is being honoured
            continue


@dataclass(frozen=True)
class BatchSplit:
    """How ``split_batch`` cuts a batched case into samples and joins the reference's outputs.

    ``inputs``: batch axis per input (None: the input is given whole to every sample run); inputs
    not listed are split on axis 0, scalars are given whole. ``outputs``: batch axis per output
    (default: the axis the batched output says, see ``batch_join.batch_axis_of``). A per-sample
    output of the batched output's rank is concatenated along that axis; one of a rank lower (an
    export that squeezed the batch away) is stacked along it.
    """

    inputs: dict[str, int | None] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)

    def input_axis(self, name: str, array: np.ndarray) -> int | None:
        if name in self.inputs:
            return self.inputs[name]
        return 0 if array.ndim else None


class Session:
    """One ONNX Runtime session of one model file on one provider, at one optimization level."""

    def __init__(
        self,
        path: Path,
        provider: str,
        optimization: str = "all",
        libraries: Sequence[Path] = (),
        timeout: float | None = DEFAULT_TIMEOUT,
        options: Mapping[str, str] | None = None,
    ) -> None:
        """``libraries``: custom-op libraries to register (onnxruntime's register_custom_ops_library);
        ``timeout``: seconds one :meth:`run` may take (None: no bound); ``options``: the provider's."""
        self.path = Path(path)
        self.provider = provider
        self.optimization = optimization
        self.timeout = timeout
        try:
            self._session = build_session(self.path, provider, optimization, libraries, options=options)
        except RunFailure as exc:
            found = diagnose(exc.detail)
            if found is None or found.cause != "escapes":
                raise
            # onnxruntime >= 1.24 refuses data linked from outside the model's folder: a private staged copy
            staged = staged_copy(self.path, self)
            self._session = build_session(staged, provider, optimization, libraries, options=options)
        self.inputs = [_decl(arg) for arg in self._session.get_inputs()]
        self.outputs = [_decl(arg) for arg in self._session.get_outputs()]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def run(self, feeds: Feeds) -> tuple[Feeds, float]:
        """Run once; returns ``{output name: array}`` and the seconds it took."""
        started = time.perf_counter()
        try:
            values = run_bounded(self._session, feeds, self.timeout)
        except TimeoutError:
            msg = f"{self.provider}: {self.path} did not finish within {self.timeout:g} s and was stopped"
            raise RunFailure(msg, "raise 'timeout' in the run verifier's params, or give smaller cases") from None
        except OnnxRuntimeError as exc:  # not an interruption: that goes on as it is
            message = str(exc)
            node = node_of(message)
            msg = f"{self.provider}: onnxruntime failed to run {self.path}{_at(node)}: {message}"
            found = diagnose(message)
            raise RunFailure(msg, found.hint if found else None, detail=message, node=node) from None
        arrays = {name: as_array(name, value) for name, value in zip(self.output_names, values)}
        return arrays, time.perf_counter() - started

    def _declared_batch(self, axes: dict[str, int | None]) -> list[int | str | None]:
        """What this model declares on each split input's batch axis."""
        declared = {d.name: d.shape for d in self.inputs}
        return [
            declared[name][axis]
            for name, axis in axes.items()
            if axis is not None and name in declared and -len(declared[name]) <= axis < len(declared[name])
        ]

    def _fixed_batch(self, axes: dict[str, int | None]) -> int:
        """The fixed batch above 1 that this model declares on every split input's axis (an export
        traced at batch 3 runs only at 3), else 1."""
        sizes = set(self._declared_batch(axes))
        (size,) = sizes if len(sizes) == 1 else (None,)
        return size if isinstance(size, int) and size > 1 else 1

    def _run_sample(
        self, feeds: Feeds, axes: dict[str, int | None], split: BatchSplit, index: int, copies: int
    ) -> tuple[Feeds, float]:
        """One sample of the batch axes, repeated ``copies`` times; the first copy of each output."""
        sample = {
            name: array if axes[name] is None else np.take(array, [index], axis=axes[name]).repeat(copies, axes[name])
            for name, array in feeds.items()
        }
        outputs, took = self.run(sample)
        if copies > 1:  # every copy gives the sample's output: keep the first
            outputs = {
                name: first_copy(name, value, split.outputs.get(name, 0), copies) for name, value in outputs.items()
            }
        return outputs, took

    def run_split(
        self, feeds: Feeds, split: BatchSplit | None = None, batched_shapes: dict[str, tuple[int, ...]] | None = None
    ) -> tuple[Feeds, float]:
        """Run once per sample of the batch axes; join each output along its batch axis. A model with a
        fixed batch above 1 (N) gets each sample repeated N times, and the first copy of each output; a
        dynamic batch that fails at one sample is given each sample twice, if that runs.

        ``batched_shapes``: the shape of each output of the batched model, to tell a per-sample output
        that keeps the batch axis (concatenated) from one that lost it (stacked), and to find the axis
        an output carries the batch on where the spec does not give it (``[3, N, 7]``: axis 1).
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
            raise RunFailure(msg, split_hint(feeds, sizes, bad_axes))
        parts, seconds = [], 0.0
        copies = self._fixed_batch(axes)
        for index in range(next(iter(sizes.values()))):
            try:
                outputs, took = self._run_sample(feeds, axes, split, index, copies)
            except RunFailure:
                if index or copies != 1 or any(isinstance(dim, int) for dim in self._declared_batch(axes)):
                    raise
                # traced at a batch above 1, it may not run at 1 (a Squeeze without axes drops the
                # batch there): each sample twice then, if that runs
                copies = 2
                outputs, took = self._run_sample(feeds, axes, split, index, copies)
            parts.append(outputs)
            seconds += took
        shapes = batched_shapes or {}
        return {
            name: join(name, [p[name] for p in parts], split.outputs.get(name), shapes.get(name))
            for name in self.output_names
        }, seconds


def ort_message(exc: BaseException) -> str:
    """onnxruntime's message on one line, without its terminal codes."""
    text = " ".join(ANSI_ESCAPE.sub("", str(exc)).split())
    return text or type(exc).__name__


def _at(node: str | None) -> str:
    return f" at node '{node}'" if node else ""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def as_array(name: str, value: Any) -> np.ndarray:
    """An output as an array, whatever onnxruntime returned: a sequence of maps (ZipMap, as
    skl2onnx and onnxmltools classifiers end) becomes one row per element, in key order; a sequence
    of tensors of one shape is stacked; a map is its values in key order."""
    if isinstance(value, np.ndarray):
        return value
    try:
        if isinstance(value, dict):
            return np.asarray([value[key] for key in sorted(value)])
        if isinstance(value, list) and all(isinstance(item, dict) for item in value):
            return np.asarray([[item[key] for key in sorted(item)] for item in value])
        return np.asarray(value) if not isinstance(value, list) or value else np.zeros((0,))
    except (TypeError, ValueError) as exc:
        msg = f"output '{name}' is a {type(value).__name__} patchspec cannot compare as an array: {exc}"
        raise RunFailure(msg, f"skip it: compare: {{outputs: {{{name}: skip}}}}") from None


def _decl(arg: Any) -> TensorDecl:
    shape = arg.shape if isinstance(arg.shape, (list, tuple)) else ()
    dims = tuple(d if isinstance(d, str) or (isinstance(d, int) and d >= 0) else None for d in shape)
    return TensorDecl(arg.name, _ORT_TYPES.get(arg.type), dims)


__all__ = [
    "BatchSplit",
    "ProviderUnusable",
    "Session",
    "TensorDecl",
    "build_session",
    "provider_skip_reasons",
    "quiet_onnxruntime",
    "run_bounded",
]
