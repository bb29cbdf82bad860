"""The ``check`` verifier: ONNX's full checker and strict shape inference on the output."""

from __future__ import annotations

import onnx

from patchspec import Verifier, VerifyContext, VerifyResult, hookimpl


class CheckVerifier(Verifier):
    name = "check"
    description = "ONNX's full model checker and strict shape inference on the written output."
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def verify(self, params: dict, context: VerifyContext) -> VerifyResult:
        try:
            # by path: external data resolves next to the output, not against the current directory
            onnx.checker.check_model(str(context.output_path), full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return VerifyResult("failed", f"onnx {onnx.__version__} rejects the output: {first}",
                                tuple(str(exc).strip().splitlines()[1:6]))
        return VerifyResult("passed", f"onnx {onnx.__version__} checker and strict shape inference")


@hookimpl
def register_verifiers(register):
    register(CheckVerifier)
