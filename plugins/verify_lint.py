"""The ``lint`` verifier: no dim_param of the output is bound to different sizes at run time."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from patchspec import Param, ParamProblem, Verifier, VerifyContext, VerifyResult, api, hookimpl

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.10
    from typing_extensions import NotRequired

if TYPE_CHECKING:  # annotations only: onnx is imported where a model is checked
    import onnx

#: where lint's inputs come from when neither lint nor a run case gives them
DEFAULT_ORIGIN = "default shapes"


class LintParams(TypedDict):
    inputs: NotRequired[
        Annotated[
            dict[str, Any],
            Param(
                "input name -> shape (as in a run case); default: the first run case's inputs, "
                "else 1 on axis 0 and 64, 96, ... on other symbolic axes",
                schema={"type": "object", "additionalProperties": api.CASE_INPUT_SCHEMA},
            ),
        ]
    ]


class LintVerifier(Verifier[LintParams]):
    name = "lint"
    description = (
        "Run the output at the given input shapes and fail when a dim_param is bound to "
        "different sizes (ONNX Runtime's 'Shape mismatch attempting to re-use buffer')."
    )

    def check_params(self, params: LintParams) -> Iterator[ParamProblem]:
        for name, item in (params.get("inputs") or {}).items():  # the same inputs as a run case
            yield from api.case_input_problems(item, ("inputs", name))

    def check_model(self, params: LintParams, model: onnx.ModelProto) -> Iterator[ParamProblem]:
        """An input named in ``inputs`` that the patched model lacks is a spec mistake (exit 2)."""
        inputs = list(api.fed_inputs(model.graph))
        for name in params.get("inputs") or {}:
            if name not in inputs:
                yield (
                    ("inputs", name),
                    f"'{name}' is not an input of the patched model{api.did_you_mean(str(name), inputs)}; "
                    f"its inputs are: {', '.join(inputs)}",
                )

    def verify(self, params: LintParams, context: VerifyContext) -> VerifyResult:
        inputs, origin = _inputs(params, context)
        try:
            given = {name: _shape(item, context) for name, item in inputs.items()}
            result = api.lint_model(context.model, Path(context.output_path).parent, given)
        except (api.UsageError, OSError, ValueError) as exc:
            return VerifyResult("failed", f"cannot lint with the {origin}: {_problem(exc)}")
        data = result.to_json()
        shapes = " ".join(f"{n}={','.join(map(str, d))}" for n, d in result.input_shapes.items())
        if result.error:
            unusable = _original_unusable(context)
            if unusable:  # onnxruntime cannot run this model at all here: nothing to say about the patch
                return VerifyResult(
                    "skipped",
                    f"onnxruntime cannot run the original either, so there is nothing to lint here: {unusable}",
                    data=data,
                )
            if origin == DEFAULT_ORIGIN and _original_fails_at(context, given):  # lint's own guess of inputs
                return VerifyResult(
                    "skipped",
                    f"the original does not run at {shapes} ({origin}) either: {result.error}",
                    (
                        "hint: lint feeds random values; other shapes go "
                        "in lint: {inputs: ...}, exact values in a 'run' case "
                        "({value: ...})",
                    ),
                    data,
                )
            return VerifyResult("failed", f"could not lint at {shapes} ({origin}): {result.error}", data=data)
        if result.conflicts or result.wrong_sizes:
            details = tuple(c.text() for c in result.conflicts) + tuple(result.wrong_sizes)
            fix = (
                ("fix: add '- rename_dims: {unique: true}' to the patches, or see 'patchspec inspect'",)
                if result.conflicts
                else ()
            )
            found = [f"{len(result.conflicts)} dim_param(s) bound to different sizes"] if result.conflicts else []
            found += [f"{len(result.wrong_sizes)} fixed size(s) that differ at run time"] if result.wrong_sizes else []
            return VerifyResult("failed", f"{' and '.join(found)} at {shapes} ({origin})", details + fix, data)
        return VerifyResult("passed", f"{result.probed} annotated tensors agree at {shapes} ({origin})", data=data)


def _problem(exc: Exception) -> str:
    """The problem, with the input it concerns (an error's ``key`` is (option, input name) for a
    shape or value that does not fit): ``input x: the input has 4 axes, got 3 sizes``."""
    if isinstance(exc, api.UsageError) and len(exc.key) == 2:
        return f"input {exc.key[1]}: {exc.detail}"
    return exc.message if isinstance(exc, api.UsageError) else str(exc)


def _original_unusable(context: VerifyContext) -> str | None:
    """Why onnxruntime cannot build a CPU session for the original, or None when it can."""
    try:
        api.Session(context.original_path, "CPUExecutionProvider")
    except api.RunFailure as exc:
        return exc.message
    return None


def _original_fails_at(context: VerifyContext, given: dict[str, list[int]]) -> bool:
    """Whether the original, linted at the same shapes, cannot run either."""
    import onnx

    try:
        original = onnx.load(str(context.original_path), load_external_data=False)
        return bool(api.lint_model(original, Path(context.original_path).parent, given).error)
    except Exception:  # an original that cannot be read or probed: no excuse for the output
        return False


def _inputs(params: LintParams, context: VerifyContext) -> tuple[dict[str, Any], str]:
    if "inputs" in params:
        return params["inputs"], "lint inputs"
    for step in context.spec.verify:
        cases = step.params.get("cases") if step.type_name == "run" else None
        if cases and isinstance(cases[0], dict) and cases[0].get("inputs"):
            return cases[0]["inputs"], f"inputs of {step.label} case 0"
    return {}, DEFAULT_ORIGIN


def _shape(item: Any, context: VerifyContext) -> list[int]:
    import numpy as np

    if isinstance(item, list):
        return [int(d) for d in item]
    if item.get("shape") is not None:
        return [int(d) for d in item["shape"]]
    if "value" in item:
        return list(np.shape(item["value"]))
    return list(np.load(context.resolve(item["file"]), mmap_mode="r", allow_pickle=False).shape)


@hookimpl
def register_verifiers(register: Callable[[type], None]) -> None:
    register(LintVerifier)
