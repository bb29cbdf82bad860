"""The ``run`` verifier: run the output on ONNX Runtime per provider and case, compare with a reference.

The params are declared here (the schema, and the checks JSON Schema cannot make); the work (sessions
bounded in time, cases bounded in size, comparison, diagnosis of an unstable reference) is
``patchspec.api.run_verification``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from patchspec import Param, ParamProblem, Verifier, VerifyContext, VerifyResult, api, hookimpl

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.10
    from typing_extensions import NotRequired

if TYPE_CHECKING:  # annotations only: onnx and numpy are imported where a model is patched
    import onnx

DEFAULT_OPTIMIZATIONS = ("all", "disabled")

_AGAINST = {
    "type": "string",
    "description": "reference: original | none | PATH to a .onnx model or a .npz of "
    "expected outputs keyed by output name (relative to the spec's folder)",
}


_TOLERANCE = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        "rtol": {"type": "number", "minimum": 0, "description": "relative tolerance"},
        "atol": {"type": "number", "minimum": 0, "description": "absolute tolerance"},
    },
}
_SPLIT = {
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
                    "description": "batch axis per output (default 0); a per-sample output of lower rank is stacked "
                    "along it",
                },
            },
        },
    ],
}
_OPTIONS = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "description": "one provider's options: OPTION: VALUE",
        "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
    },
}


class CaseParams(TypedDict):
    inputs: Annotated[
        dict[str, Any],
        Param(
            "input name -> shape list or {shape, dtype, fill, seed, low, high, file, value}",
            additionalProperties=api.CASE_INPUT_SCHEMA,
        ),
    ]
    against: NotRequired[Annotated[str, Param("this case's reference; default: compare.against")]]


class CompareParams(TypedDict):
    against: Annotated[str, Param(_AGAINST["description"] + "; default original", default="original")]
    split_batch: NotRequired[
        Annotated[
            bool | dict[str, dict[str, int | None]],
            Param(
                "run the reference once per sample and join its outputs: true (axis 0 of every input and output), "
                "or {inputs: {NAME: AXIS or null}, outputs: {NAME: AXIS}} for a batch elsewhere (an LSTM state "
                "[2, batch, 64] is 1; null gives that input whole to every sample)",
                schema=_SPLIT,
            ),
        ]
    ]
    coupled: NotRequired[
        Annotated[
            str,
            Param(
                "the reason a batch may differ from its samples run one at a time (a model whose ops couple the "
                "samples: one quantization scale over the batch, a reduction over it): compares batch against "
                "batch instead of per sample, and the report names the reason; not with split_batch",
                minLength=1,
            ),
        ]
    ]
    rtol: Annotated[
        float, Param(f"relative tolerance (default {api.DEFAULT_RTOL:g})", default=api.DEFAULT_RTOL, minimum=0)
    ]
    atol: Annotated[
        float, Param(f"absolute tolerance (default {api.DEFAULT_ATOL:g})", default=api.DEFAULT_ATOL, minimum=0)
    ]
    outputs: NotRequired[
        Annotated[
            dict[str, Any],
            Param(
                "per output: {rtol, atol} for this output only, or skip (run it, check its declared shape, do not "
                "compare its values): for outputs the original itself does not reproduce (near-tied TopK, a "
                "quantized head)",
                additionalProperties={"anyOf": [{"const": "skip"}, _TOLERANCE]},
            ),
        ]
    ]
    tolerances: NotRequired[
        Annotated[
            dict[str, dict[str, float]],
            Param(
                "rtol/atol per element type, for outputs whose coarser side (output or reference) has it; defaults: "
                + ", ".join(f"{k} rtol {r:g} atol {a:g}" for k, (r, a) in api.DTYPE_TOLERANCES.items()),
                propertyNames={"enum": list(api.PRECISION)},
                additionalProperties=_TOLERANCE,
            ),
        ]
    ]


class RunParams(TypedDict):
    """The params as ``verify`` receives them (every default filled in); ``Param`` makes the schema."""

    providers: Annotated[
        list[str],
        Param(
            "execution providers to run on (default [CPUExecutionProvider]); one not available here is skipped "
            "with the reason",
            default=list(api.DEFAULT_PROVIDERS),
            minItems=1,
        ),
    ]
    provider_options: Annotated[
        dict[str, dict[str, Any]],
        Param(
            "options per provider, as onnxruntime names them: {PROVIDER: {OPTION: VALUE}} (true/false are given "
            "as 1/0, null leaves an option out). They go on top of the provider's exact-math settings (CUDA: "
            "use_tf32 0; docs/providers.md), so use_tf32: 1 keeps TF32 on; off the CPU the tolerance is widened "
            "by a measured floor either way",
            default={},
            schema=_OPTIONS,
        ),
    ]
    custom_op_libraries: NotRequired[
        Annotated[
            list[str],
            Param(
                "shared libraries that register the model's custom ops (onnxruntime's "
                "register_custom_ops_library), relative to the spec's folder; loaded into every session, the "
                "reference's too. Native code: loaded only with --allow-native-code or 'allow-native-code = true' "
                "under [tool.patchspec] in the project's pyproject.toml (exit 2 otherwise)",
                minItems=1,
            ),
        ]
    ]
    timeout: Annotated[
        float,
        Param(
            f"seconds one run of a session may take before it is stopped and the case fails (default "
            f"{api.DEFAULT_TIMEOUT:g})",
            default=api.DEFAULT_TIMEOUT,
            exclusiveMinimum=0,
        ),
    ]
    max_elements: Annotated[
        int,
        Param(
            f"the most elements one case input may have (default {api.DEFAULT_MAX_ELEMENTS:,}); a larger one is "
            "a spec error (exit 2) found before anything runs",
            default=api.DEFAULT_MAX_ELEMENTS,
            minimum=1,
        ),
    ]
    require: Annotated[list[str], Param("providers that must run: unavailable fails the verifier", default=[])]
    cases: NotRequired[
        Annotated[
            list[CaseParams],
            Param("input sets to run; default: one case from the declared shapes when all are fixed", minItems=1),
        ]
    ]
    optimizations: Annotated[
        list[str],
        Param(
            "ONNX Runtime graph optimization levels to run every case at (default [all, disabled]): "
            "optimizations can make a wrong model look right",
            default=list(DEFAULT_OPTIMIZATIONS),
            minItems=1,
            uniqueItems=True,
            items={"enum": list(api.OPTIMIZATION_LEVELS)},
        ),
    ]
    compare: Annotated[CompareParams, Param("what the outputs are compared with, and how closely", default={})]


class RunVerifier(Verifier[RunParams]):
    name = "run"
    description = "Run the output on ONNX Runtime per provider and case; compare its outputs with a reference."

    def check_params(self, params: RunParams) -> Iterator[ParamProblem]:
        yield from _provider_problems(params)
        yield from _limit_problems(params)
        limit = int(params.get("max_elements", api.DEFAULT_MAX_ELEMENTS))
        for index, case in enumerate(params.get("cases") or []):
            if "against" in case:
                yield from _against_problems(case["against"], ("cases", index, "against"))
            for name, item in case["inputs"].items():
                yield from api.case_input_problems(item, ("cases", index, "inputs", name), limit)
        if "against" in params.get("compare", {}):
            yield from _against_problems(params["compare"]["against"], ("compare", "against"))
        if "coupled" in params.get("compare", {}) and params["compare"].get("split_batch"):
            yield (
                ("compare", "coupled"),
                "coupled accepts that a batch differs from its samples run one at a time, which split_batch "
                "measures: give one of them (an original that runs only at its exported batch keeps "
                "split_batch, with tolerances per output)",
            )

    def check_model(self, params: RunParams, model: onnx.ModelProto) -> Iterator[ParamProblem]:
        """The cases, split axes and per-output settings against the patched model's inputs and outputs."""
        inputs = dict(api.fed_inputs(model.graph))
        outputs = [info.name for info in model.graph.output]
        no_case: list[CaseParams] = [{"inputs": {}}]
        for index, case in enumerate(params.get("cases") or no_case):
            given = case["inputs"]
            for name, item in given.items():
                key = ("cases", index, "inputs", name)
                if name not in inputs:
                    yield (
                        key,
                        (
                            f"'{name}' is not an input of the patched model{api.did_you_mean(str(name), inputs)}; "
                            f"its inputs are: {', '.join(inputs)}"
                        ),
                    )
                    continue
                yield from api.case_fit_problems(inputs[name], item, key)
            problems = api.unlisted_input_problems(model, given, ("cases", index, "inputs"), params["max_elements"])
            # without cases, a symbolic input is the run's own failure ("no cases given"), said at run time
            yield from (p for p in problems if params.get("cases") or "gives no shape" not in p[1])
        split = params["compare"].get("split_batch")
        for section, names in (("inputs", list(inputs)), ("outputs", outputs)):
            for name in split.get(section, {}) if isinstance(split, dict) else {}:
                if name not in names:
                    yield (
                        ("compare", "split_batch", section, name),
                        (f"'{name}' is not one of the patched model's {section}{api.did_you_mean(str(name), names)}"),
                    )
        for name in params["compare"].get("outputs", {}):
            if name not in outputs:
                yield (
                    ("compare", "outputs", name),
                    (
                        f"'{name}' is not an output of the patched model"
                        f"{api.did_you_mean(str(name), outputs)}; its outputs are: "
                        f"{', '.join(outputs)}"
                    ),
                )

    def dependencies(self, params: RunParams) -> Iterator[str]:
        """Reference models, .npz outputs, .npy inputs and custom-op libraries: part of the digest and the depfile.
        Files only: ``against: original`` (the input model) and ``against: none`` name no file."""
        yield from params.get("custom_op_libraries", [])
        compare_against = params["compare"]["against"]
        references = [compare_against, *(case.get("against", compare_against) for case in params.get("cases") or [])]
        yield from (reference for reference in references if reference not in ("original", "none"))
        for case in params.get("cases") or []:
            for item in case["inputs"].values():
                if isinstance(item, dict) and "file" in item:
                    yield item["file"]

    def verify(self, params: RunParams, context: VerifyContext) -> VerifyResult:
        result = api.run_verification(params, context)
        reason = params["compare"].get("coupled")
        if not reason:
            return result
        said = f"batch against batch, as the samples are coupled (accepted: {reason})"
        return replace(result, summary=f"{result.summary}; {said}", details=(said, *result.details))


def _provider_problems(params: RunParams) -> Iterator[ParamProblem]:
    providers = params.get("providers") or list(api.DEFAULT_PROVIDERS)
    if "providers" in params:  # names a spec gives: onnxruntime's list, where a typo finds its match
        import onnxruntime

        known = onnxruntime.get_all_providers()
        for index, provider in enumerate(providers):
            suggestion = "" if provider in known else api.provider_did_you_mean(provider, known)
            if suggestion:
                yield ("providers", index), f"unknown provider '{provider}'{suggestion}"
    for index, provider in enumerate(params.get("require", [])):
        if provider not in providers:
            yield ("require", index), f"required provider '{provider}' is not in providers ({', '.join(providers)})"
    yield from api.provider_option_problems(params.get("provider_options", {}), providers)


def _against_problems(against: str, key: tuple[Any, ...]) -> Iterator[ParamProblem]:
    if against in ("original", "none") or against.endswith((".onnx", ".npz")):
        return
    close = api.did_you_mean(against, ("original", "none"))
    yield key, f"against must be original, none, or a path ending in .onnx or .npz; got '{against}'{close}"


@hookimpl
def register_verifiers(register: Callable[[type], None]) -> None:
    register(RunVerifier)


def _limit_problems(params: RunParams) -> Iterator[ParamProblem]:
    """``timeout`` and ``max_elements`` within what the caller allows (``--limit``), and every case's
    inputs together within ``case-bytes``: a spec cannot lift a bound by asking for more."""
    limits = api.current_limits()
    timeout = params.get("timeout")
    if isinstance(timeout, (int, float)) and not math.isfinite(timeout):
        yield ("timeout",), f"timeout {timeout} is not a finite number of seconds"
    elif isinstance(timeout, (int, float)) and timeout > limits.timeout:
        yield ("timeout",), f"timeout {timeout:g} s is over {limits.describe('timeout')}"
    elements = params.get("max_elements")
    if isinstance(elements, int) and elements > limits.max_elements:
        yield ("max_elements",), f"max_elements {elements:,} is over {limits.describe('max_elements')}"
    for index, case in enumerate(params.get("cases") or []):
        total = sum(_declared_bytes(item) for item in case.get("inputs", {}).values())
        if total > limits.case_bytes:
            yield (
                ("cases", index, "inputs"),
                f"the inputs of this case take {total:,} bytes together, over {limits.describe('case_bytes')}",
            )


#: bytes per element of a case input's ``dtype`` (4, float32's, when the case does not say)
_ELEMENT_BYTES = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2}
_ELEMENT_BYTES.update({"int64": 8, "uint64": 8, "float64": 8, "double": 8, "string": 8})


def _declared_bytes(item: Any) -> int:
    """Bytes a case input declares: its shape times its element size (0 for a file or a value, whose
    size the reader bounds)."""
    shape = item if isinstance(item, list) else item.get("shape") if isinstance(item, dict) else None
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return 0
    dtype = str(item.get("dtype", "float32")) if isinstance(item, dict) else "float32"
    return math.prod(shape) * _ELEMENT_BYTES.get(dtype, 4)
