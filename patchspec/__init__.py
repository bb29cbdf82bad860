"""patchspec: patch ONNX models declaratively, from a reviewed YAML spec.

The public API, for plugin authors, is this module (the contract: ``PatchType``, ``Verifier``, their
results and contexts, ``RunState``/``StateKey``, ``hookimpl`` and the errors) and ``patchspec.api``
(helpers: graphs, selectors, shapes, external data, ONNX Runtime). Both follow semantic versioning
(docs/api.md). ``patchspec.testing`` is the test kit for plugins (``pip install patchspec[testkit]``).
Every other module under ``patchspec`` is internal and may change in any release.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
#: the version of the plugin API (this module, ``patchspec.api``, the hooks): a plugin that needs a
#: range says so with ``PATCHSPEC_API = ">=1.3,<2"`` in the module its entry point names, checked at
#: load (docs/plugins.md). 1.3: ``PATCHSPEC_API``, SystemExit from plugin code is the plugin's fault.
#: 1.4: ``PatchType.check_model``; ``validate`` reads the model's graph when it is there; ``COUPLED``.
#: 1.5: ``StepType``, the one base of both; ``NotRequired`` fields in a params ``TypedDict``; 17 helpers
#: of ``patchspec.api`` deprecated.
PLUGIN_API = "1.5"

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use (below)
    from patchspec.errors import (
        ModelFileError,
        PatchError,
        PatchspecError,
        SpecError,
        VerificationFailed,
        VerifierFailed,
    )
    from patchspec.plugin.contract import (
        COUPLED,
        UNDECIDED,
        ParamProblem,
        PatchContext,
        PatchResult,
        PatchType,
        RunState,
        StateKey,
        StepContext,
        StepType,
        Verifier,
        VerifyContext,
        VerifyResult,
    )
    from patchspec.plugin.hookspecs import hookimpl
    from patchspec.plugin.params import Param

#: each public name -> the module that defines it; ``import patchspec`` imports none of them (PEP 562),
#: so ``patchspec --version`` starts without the plugin contract, pluggy or anything they import
_HOME = {
    **dict.fromkeys(
        ["ModelFileError", "PatchError", "PatchspecError", "SpecError", "VerificationFailed", "VerifierFailed"],
        "patchspec.errors",
    ),
    **dict.fromkeys(
        [
            "ParamProblem",
            "PatchContext",
            "PatchResult",
            "PatchType",
            "RunState",
            "StateKey",
            "StepContext",
            "StepType",
            "UNDECIDED",
            "COUPLED",
            "Verifier",
            "VerifyContext",
            "VerifyResult",
        ],
        "patchspec.plugin.contract",
    ),
    "hookimpl": "patchspec.plugin.hookspecs",
    "Param": "patchspec.plugin.params",
}


def __getattr__(name: str) -> Any:
    """``patchspec.X``: the public name imported from its module on first use, then kept here."""
    import importlib
    import importlib.util

    home = _HOME.get(name)
    if home is None:  # a submodule (``patchspec.errors``), as the root imported some before it was lazy
        if name.startswith("_") or importlib.util.find_spec(f"patchspec.{name}") is None:
            msg = f"module 'patchspec' has no attribute {name!r}"
            raise AttributeError(msg)
        return importlib.import_module(f"patchspec.{name}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


__all__ = [
    "COUPLED",
    "PLUGIN_API",
    "UNDECIDED",
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
    "StepType",
    "VerificationFailed",
    "Verifier",
    "VerifierFailed",
    "VerifyContext",
    "VerifyResult",
    "__version__",
    "hookimpl",
]
