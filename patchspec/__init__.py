"""patchspec: patch ONNX models declaratively, from a reviewed YAML spec.

The public API, for plugin authors, is this module (the contract: ``PatchType``, ``Verifier``, their
results and contexts, ``RunState``/``StateKey``, ``hookimpl`` and the errors) and ``patchspec.api``
(helpers: graphs, selectors, shapes, external data, ONNX Runtime). Both follow semantic versioning
(docs/api.md). ``patchspec.testing`` is the test kit for plugins (``pip install patchspec[testkit]``).
Every other module under ``patchspec`` is internal and may change in any release.
"""

__version__ = "0.1.0"

from patchspec.errors import ModelFileError, PatchError, PatchspecError, SpecError, VerificationFailed, VerifierFailed
from patchspec.plugin.contract import (
    ParamProblem,
    PatchContext,
    PatchResult,
    PatchType,
    RunState,
    StateKey,
    StepContext,
    Verifier,
    VerifyContext,
    VerifyResult,
)
from patchspec.plugin.hookspecs import hookimpl
from patchspec.plugin.params import Param

__all__ = [
    "ModelFileError",
    "Param",
    "ParamProblem",
    "PatchContext",
    "PatchError",
    "PatchResult",
    "PatchType",
    "PatchspecError",
    "RunState",
    "SpecError",
    "StateKey",
    "StepContext",
    "VerificationFailed",
    "Verifier",
    "VerifierFailed",
    "VerifyContext",
    "VerifyResult",
    "__version__",
    "hookimpl",
]
