"""patchspec: patch ONNX models declaratively, from a reviewed YAML spec.

The names below are the API plugin authors import; they are kept stable.
"""

__version__ = "0.1.0"

from patchspec.plugin.contract import (PatchContext, PatchResult, PatchType, Verifier, VerifyContext,
    VerifyResult)
from patchspec.errors import ModelFileError, PatchError, PatchspecError, SpecError, VerificationFailed
from patchspec.plugin.hookspecs import hookimpl

__all__ = [
    "ModelFileError",
    "PatchContext",
    "PatchError",
    "PatchResult",
    "PatchType",
    "PatchspecError",
    "SpecError",
    "Verifier",
    "VerificationFailed",
    "VerifyContext",
    "VerifyResult",
    "__version__",
    "hookimpl",
]
