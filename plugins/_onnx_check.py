"""The work of the ``check`` verifier (``plugins/verify_check.py``): ONNX's full checker and strict shape
inference on the output, judged against the original.

Many models that onnxruntime runs already fail onnx's full check (a graph without a name, an input
without a shape field, an old exporter's attributes). ``check`` fails only for what the patch adds:

1. ``onnx.checker.check_model(output, full_check=True)``, by path (external data resolves next to the
   file). It passes: the verdict is ``passed``, and the original is not read at all.
2. Otherwise each stage of that check runs on its own, on the output and on the original:
   ``checker`` (``check_model`` without ``full_check``) and ``shape inference`` (strict, with type
   checks: the options ``full_check`` uses). A stage is run whether or not the one before it passed,
   so a problem behind one the original already has is still seen.
3. Each problem of the output is compared with the original's in the same stage:

   - the stage passes on the original: the patch causes the problem (failed);
   - ``checker`` fails on both: already there, whatever the message. onnx's checker stops at its
     first problem, so a different first message does not show a new problem; it is reported;
   - ``shape inference`` reports every node it rejects, one per line: a line the original has too
     is already there, a line only the output has is the patch's (failed).

   Two problems are "the same" when equal after :func:`normalise`: numbers that stand alone
   (sizes, ranks, axes: ``(4) vs (5)``, ``Inferred=3``; not those inside names such as ``Conv_12``
   or ``input.1``) become ``#``, since set_batch changes sizes; element-type messages keep their
   numbers (type codes). A dim_param of either model standing in a bracketed list becomes ``#``
   (rename_dims changes names). Both models' paths and folders, and runs of white space, are
   normalised. Tensor and node names are compared as written.

Problems the original already has pass, with a note, unless ``strict: true``. An original that
cannot be read excuses nothing. Any exception onnx raises (ValidationError, InferenceError, protobuf's
DecodeError, RuntimeError, ...) becomes a problem, never a crash.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from patchspec import VerifyResult

#: the stages of ``check_model(full_check=True)``, in its order
CHECKER, SHAPES = "checker", "shape inference"
_INFERENCE_HEADER = re.compile(r"^\[ShapeInferenceError\] Inference error\(s\):\s*")
#: a number standing alone: not part of a name (``Conv_12``, ``input.1``, ``x:0``, ``/model.3/``)
_NUMBER = re.compile(r"(?<![\w.:/])-?\d+(?!\w|\.\d)")
#: messages whose numbers are element-type codes, not sizes
_TYPE_CODES = re.compile(r"elem[ _]type|data[ _]type|TypeInferenceError", re.IGNORECASE)
_BRACKETED = re.compile(r"([(\[{])([^()\[\]{}]*)([)\]}])")
_DETAILS = 12


@dataclass(frozen=True)
class Problem:
    stage: str
    text: str  # as onnx wrote it, on one line
    key: str  # normalised: equal keys are the same problem

    @property
    def first(self) -> str:
        """The problem without onnx's context lines, for one-line summaries."""
        return self.text.split(" ==> ", 1)[0].rstrip(" .")


def check_output(output: Path, original: Path, strict: bool) -> VerifyResult:
    """The verdict on ``output``: onnx's full check, and each stage's problems against ``original``'s."""
    version = onnx.__version__
    # by path: external data resolves next to the output, not against the current directory
    if _error(lambda: onnx.checker.check_model(str(output), full_check=True)) is None:
        return VerifyResult("passed", f"onnx {version} checker and strict shape inference", data=_data(strict))
    normalise_ = _normaliser(output, original)
    out_model, out_unreadable = _load(output)
    orig_model, orig_unreadable = _load(original)
    normalise_.dims |= _dim_params(out_model) | _dim_params(orig_model)
    ours = _stages(output, out_model, out_unreadable, normalise_)
    theirs = _stages(original, orig_model, orig_unreadable, normalise_)
    if not any(ours.values()):  # the full check failed, its stages alone pass: judge the full check
        message = _error(lambda: onnx.checker.check_model(str(output), full_check=True)) or "unknown"
        ours[CHECKER] = [_problem(CHECKER, message, normalise_)]
    new: list[tuple[Problem, str]] = []
    already: list[tuple[Problem, Problem]] = []  # (the output's, the original's)
    for stage, problems in ours.items():
        found = theirs[stage]
        for problem in problems:
            if orig_unreadable is not None:
                why = orig_unreadable.strip().splitlines()[0]
                new.append((problem, f"the original could not be read ({why}), so nothing is excused"))
            elif not found:
                new.append((problem, f"the original passes onnx's {stage}: the patch causes it"))
            elif stage == CHECKER:  # stops at its first problem: both fail, whatever the message
                already.append((problem, next((p for p in found if p.key == problem.key), found[0])))
            elif any(p.key == problem.key for p in found):
                already.append((problem, next(p for p in found if p.key == problem.key)))
            else:
                new.append((problem, f"the original fails onnx's {stage} too, but not with this: the patch causes it"))
    return _verdict(version, strict, new, already)


def _verdict(
    version: str, strict: bool, new: list[tuple[Problem, str]], already: list[tuple[Problem, Problem]]
) -> VerifyResult:
    details = [f"new ({problem.stage}): {problem.text}; {why}" for problem, why in new]
    details += [
        f"already in the original ({mine.stage}): {mine.text}"
        + ("" if mine.text == theirs.text else f" (the original's: {theirs.text})")
        for mine, theirs in already
    ]
    if len(details) > _DETAILS:
        details = details[: _DETAILS - 1] + [f"... and {len(details) - _DETAILS + 1} more"]
    data = _data(strict, new=[p.text for p, _ in new], already=[p.text for p, _ in already])
    if new:
        problem, why = new[0]
        return VerifyResult(
            "failed", f"onnx {version} rejects the output: {problem.first}; {why}", tuple(details), data
        )
    mine, theirs = already[0]
    if strict:
        return VerifyResult(
            "failed",
            f"onnx {version} rejects the output: {mine.first}; the original has it too "
            "(strict: true fails the original's problems as well)",
            tuple(details),
            data,
        )
    if mine.key == theirs.key:
        summary = f"the original already fails onnx's check the same way: {mine.first}; not caused by the patch"
    else:
        summary = (
            f"the original already fails onnx's {mine.stage} ({theirs.first}); the output fails it with "
            f"a different first message ({mine.first}); not caused by the patch"
        )
    return VerifyResult("passed", f"onnx {version}: {summary}", tuple(details), data)


def _data(strict: bool, new: list[str] | None = None, already: list[str] | None = None) -> dict[str, Any]:

    return {"onnx": onnx.__version__, "strict": strict, "new": new or [], "already": already or []}


# -- running onnx --------------------------------------------------------------------------------------


def _error(call: Callable[[], object]) -> str | None:
    """None when ``call`` returns; otherwise what it raised, as text. Every exception onnx raises is a
    verdict here: ValidationError, InferenceError, protobuf's DecodeError, RuntimeError, ValueError..."""

    try:
        call()
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        return str(exc).strip() or type(exc).__name__
    except Exception as exc:  # onnx's bindings raise anything; a verifier must not crash
        text = str(exc).strip()
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return None


def _load(path: Path) -> tuple[onnx.ModelProto | None, str | None]:
    """The model's graph without its weights (external data stays on disk), or why it cannot be read."""

    loaded: list[onnx.ModelProto] = []
    error = _error(lambda: loaded.append(onnx.load(str(path), load_external_data=False)))
    return (loaded[0] if loaded else None), error


def _stages(
    path: Path, model: onnx.ModelProto | None, unreadable: str | None, normalise_: Normaliser
) -> dict[str, list[Problem]]:
    """The problems of each stage of onnx's full check, run separately."""

    checker = _error(lambda: onnx.checker.check_model(str(path), full_check=False))
    if model is None:
        shapes: str | None = unreadable or "cannot be read"
    else:
        # the options check_model(full_check=True) uses; in memory, since inference reads no weights
        shapes = _error(
            lambda: onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=False)
        )
    return {
        CHECKER: [] if checker is None else [_problem(CHECKER, checker, normalise_)],
        SHAPES: [] if shapes is None else _inference_problems(shapes, normalise_),
    }


def _problem(stage: str, message: str, normalise_: Normaliser) -> Problem:
    text = " ==> ".join(line.strip().removeprefix("==> ") for line in message.splitlines() if line.strip())
    return Problem(stage, text, normalise_(text))


def _inference_problems(message: str, normalise_: Normaliser) -> list[Problem]:
    """Strict inference lists every node it rejects, one per line after its header."""
    header = _INFERENCE_HEADER.match(message)
    lines = [line.strip() for line in message[header.end() :].splitlines() if line.strip()] if header else []
    if not lines:
        return [_problem(SHAPES, message, normalise_)]
    return [Problem(SHAPES, line, normalise_(line)) for line in lines]


# -- "the same problem" ----------------------------------------------------------------------------------


class Normaliser:
    """What a patch legitimately changes, taken out of a message (see the module docstring)."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths  # text -> placeholder, longest first
        self.dims: set[str] = set()

    def __call__(self, text: str) -> str:
        for found, placeholder in self.paths.items():
            text = text.replace(found, placeholder)
        text = " ".join(text.split())
        if not _TYPE_CODES.search(text):
            text = _NUMBER.sub("#", text)
        return _BRACKETED.sub(self._dims, text)

    def _dims(self, match: re.Match[str]) -> str:
        items = [item.strip() for item in match.group(2).split(",")]
        if not any(item in self.dims for item in items) or not all(
            item in self.dims or item in ("#", "?") for item in items
        ):
            return match.group(0)
        return match.group(1) + ",".join("#" if item in self.dims else item for item in items) + match.group(3)


def normalise(text: str, dims: Iterable[str] = ()) -> str:
    """``text`` as compared to tell the same problem (``dims``: the models' dim_param names)."""
    normaliser = Normaliser({})
    normaliser.dims = set(dims)
    return normaliser(text)


def _normaliser(output: Path, original: Path) -> Normaliser:
    paths = {
        str(output): "<model>",
        str(original): "<model>",
        str(output.parent): "<folder>",
        str(original.parent): "<folder>",
    }
    return Normaliser(dict(sorted(paths.items(), key=lambda item: -len(item[0]))))


def _dim_params(model: onnx.ModelProto | None) -> set[str]:
    if model is None:
        return set()
    found: set[str] = set()
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for info in [*graph.input, *graph.output, *graph.value_info]:
            if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
                found.update(d.dim_param for d in info.type.tensor_type.shape.dim if d.dim_param)
        for node in graph.node:
            for attribute in node.attribute:
                graphs += [attribute.g] if attribute.HasField("g") else []
                graphs += list(attribute.graphs)
    return found
