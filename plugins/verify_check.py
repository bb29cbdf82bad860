"""The ``check`` verifier: ONNX's full checker and strict shape inference, judged against the original.

The original's own problems pass, with a note, unless ``strict: true``; what the patch adds fails.
How problems are told apart is in ``plugins/_onnx_check.py``, imported (with onnx) when a model is
checked, so that ``validate`` reads this module without onnx.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypedDict

from patchspec import Param, Verifier, VerifyContext, VerifyResult, hookimpl


class CheckParams(TypedDict):
    strict: Annotated[
        bool,
        Param(
            "Also fail on the problems the original model already has (by default they "
            "are reported and the verifier passes).",
            default=False,
        ),
    ]


class CheckVerifier(Verifier[CheckParams]):
    name = "check"
    description = (
        "ONNX's full checker and strict shape inference on the output; the original's own problems pass, noted."
    )

    def verify(self, params: CheckParams, context: VerifyContext) -> VerifyResult:
        from ._onnx_check import check_output

        return check_output(Path(context.output_path), Path(context.original_path), params["strict"])


@hookimpl
def register_verifiers(register: Callable[[type], None]) -> None:
    register(CheckVerifier)
