"""patchspec: patch ONNX models declaratively, from a reviewed YAML spec.

The names below are the API plugin authors import; they are kept stable.
"""

__version__ = "0.1.0"

from .contract import (  # noqa: E402
    PatchContext,
    PatchResult,
    PatchType,
    Verifier,
    VerifyContext,
    VerifyResult,
)
from .errors import ModelFileError, PatchError, PatchspecError, SpecError, VerificationFailed  # noqa: E402
from .hookspecs import hookimpl  # noqa: E402

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
