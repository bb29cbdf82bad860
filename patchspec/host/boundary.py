"""The one place patchspec calls a plugin's code, and reports a fault there as the plugin's.

As onnx-ir's ``PassBase.__call__`` wraps a pass's requires, call and ensures, a :class:`Guard` wraps
every call the registry, the spec loader, the engine and the test kit make into a patch type or
verifier: ``params_schema``, ``check_params``, ``dependencies``, ``check_model``, ``apply`` and
``verify``, with the contract's checks on what they return. A fault (the plugin raised, or broke the
contract) is a :class:`PluginError`, exit 5: the step, the plugin with its distribution and version,
and the line of the plugin's own code; ``-v`` prints the plugin's traceback, not patchspec's. An
invalid ``params_schema`` is found when the plugin loads (:func:`schema_fault`): the registry lists
the plugin as broken, and a spec that uses it is invalid (exit 2).
"""

from __future__ import annotations

import inspect
import re
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from patchspec.errors import PatchError, PatchspecError, PluginError, VerifierFailed
from patchspec.plugin.contract import (
    ParamProblem,
    PatchContext,
    PatchResult,
    PatchType,
    Verifier,
    VerifyContext,
    VerifyResult,
)
from patchspec.spec.catalog import StepKind

if TYPE_CHECKING:  # onnx and jsonschema are imported where a plugin is called, not to list plugins
    import jsonschema
    import onnx

T = TypeVar("T")


def dialect() -> type[jsonschema.Draft202012Validator]:
    """The JSON Schema dialect of every ``params_schema`` (the loader validates params with it)."""
    from jsonschema import Draft202012Validator

    validator: type[jsonschema.Draft202012Validator] = Draft202012Validator
    return validator


@dataclass(frozen=True)
class Origin:
    """Who answers for a plugin's code, as a fault report names them."""

    #: ``plugin 'acme' (patchspec-acme 0.1.0)``; ``patchspec 0.1.0`` for a built-in
    label: str
    #: whom to report a fault to: ``the author of patchspec-acme``
    author: str
    #: the plugin's module names (``patchspec_acme``, ``pkg.mod:attr``): its frames in a traceback
    modules: tuple[str, ...] = ()


class Guard:
    """One patch type or verifier, called only through here, for the step at ``where``.

    ``where`` (``spec.yaml:5:5: patches[0] (acme.x)``) starts every fault's message; empty where there
    is no step (the test kit's static checks).
    """

    def __init__(self, cls: type[PatchType[Any]] | type[Verifier[Any]], origin: Origin, where: str = "") -> None:
        self.cls = cls
        self.kind = StepKind.PATCH_TYPE if issubclass(cls, PatchType) else StepKind.VERIFIER
        self.origin = origin
        self.where = where
        self._instance: Any = None

    # -- the calls ------------------------------------------------------------------------------------
    def schema_errors(self, params: Any) -> list[jsonschema.ValidationError]:
        """``params`` against ``params_schema`` (a schema that passed :func:`schema_fault` can still
        fail here, on a ``$ref`` that resolves nowhere)."""
        return self._call("params_schema", lambda: list(dialect()(self.cls.params_schema).iter_errors(params)))

    def check_params(self, params: dict[str, Any]) -> list[ParamProblem]:
        found = self._call("check_params", lambda: list(self.instance.check_params(params)))
        return self._problems("check_params", found)

    def check_model(self, params: dict[str, Any], model: onnx.ModelProto) -> list[ParamProblem]:
        found = self._call("check_model", lambda: list(self.instance.check_model(params, model)))
        return self._problems("check_model", found)

    def dependencies(self, params: dict[str, Any]) -> list[str]:
        found = self._call("dependencies", lambda: list(self.instance.dependencies(params)))
        wrong = [item for item in found if not isinstance(item, str)]
        if wrong:
            raise self.fault(
                f"dependencies() gave {wrong[0]!r}, not a path as written in the spec (a str)", method="dependencies"
            )
        return found

    def apply(
        self, model: onnx.ModelProto, params: dict[str, Any], context: PatchContext
    ) -> tuple[PatchResult, onnx.ModelProto]:
        """Apply the patch to ``model`` in place; the result, checked, and the model as it was before."""
        import onnx

        from patchspec.shapes.annotations import untyped_annotations

        before = onnx.ModelProto()
        before.CopyFrom(model)  # graph only (external weights are not loaded): cheap to keep and compare
        untyped_before = set(untyped_annotations(model))
        result = self._call("apply", lambda: self.instance.apply(model, params, context))
        if not isinstance(result, PatchResult):
            raise self.fault(f"apply() returned {type(result).__name__}, not a PatchResult", method="apply")
        if result.modified != (model != before):
            said, did = (
                ("modified=True", "left the model as it was")
                if result.modified
                else ("modified=False", "changed the model")
            )
            raise self.fault(
                f"apply() returned {said} but {did}; 'modified' must say whether the model changed "
                "(the no-op and the digest rely on it)",
                method="apply",
            )
        untyped = [name for name in untyped_annotations(model) if name not in untyped_before]
        if untyped:  # onnxruntime >= 1.32 refuses such a model ("Invalid tensor data type 0")
            shown = ", ".join(f"'{name}'" for name in untyped[:5]) + (" ..." if len(untyped) > 5 else "")
            raise self.fault(f"wrote tensor types without an element type ({shown})", method="apply")
        return result, before

    def verify(self, params: dict[str, Any], context: VerifyContext) -> tuple[VerifyResult, tuple[Any, ...]]:
        """The verifier's verdict, and the key in its params a ``context.fail`` pointed at (else ``()``).

        ``context.fail`` is the verdict "failed", as if the verifier had returned it."""
        try:
            result = self._call("verify", lambda: self.instance.verify(params, context))
        except VerifierFailed as stopped:
            return VerifyResult(
                "failed", stopped.summary, (f"hint: {stopped.hint}",) if stopped.hint else ()
            ), stopped.key
        if not isinstance(result, VerifyResult):
            raise self.fault(f"verify() returned {type(result).__name__}, not a VerifyResult", method="verify")
        return result, ()

    @property
    def instance(self) -> Any:
        """The plugin's object (its constructor is plugin code too)."""
        if self._instance is None:
            self._instance = self._call("__init__", self.cls)
        return self._instance

    # -- the guard ------------------------------------------------------------------------------------
    def _call(self, method: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except PatchError as exc:  # from a helper of the API, not context.fail: give it the step's place
            # placed already: by context.fail (as data), or in the text by a plugin written for API 1.1
            if not self.where or exc.where is not None or exc.message.startswith(self.where):
                raise
            raise PatchError(f"{self.where}: {exc.message}", exc.hint, key=exc.key, node=exc.node) from None
        except (PatchspecError, MemoryError):
            raise
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            # SystemExit: a plugin's sys.exit(0) once ended apply with 0 and nothing written. A real
            # Ctrl-C or SIGTERM is patchspec's Interrupted (patchspec.interrupts), never caught here, so a
            # KeyboardInterrupt here is the plugin's own raise
            raise self.fault(f"{method}() raised {_raised(exc)}", exc=exc, method=method) from exc

    def _problems(self, method: str, found: list[Any]) -> list[ParamProblem]:
        for item in found:
            if not (
                isinstance(item, (tuple, list))
                and len(item) == 2
                and isinstance(item[0], (tuple, list))
                and isinstance(item[1], str)
            ):
                raise self.fault(f"{method}() gave {item!r}, not a (key path tuple, message) pair", method=method)
        return [(tuple(key), message) for key, message in found]

    def fault(self, what: str, *, exc: BaseException | None = None, method: str | None = None) -> PluginError:
        """The plugin raised (``exc``) or broke the contract (in ``method``): exit 5, located.

        The message names the step once, the plugin with its distribution and version, and the
        innermost line of the plugin's own code (for a broken contract, where ``method`` is defined);
        ``-v`` prints the plugin's traceback from its first frame down, not patchspec's.
        """
        site, plugin_traceback = (
            plugin_failure(exc, [self.cls.__module__, *self.origin.modules]) if exc else (None, None)
        )
        site = site or self._site(method)
        message = f"{self.kind} {self.cls.name!r} {what}"
        import onnx  # its version, in a bug report

        if self.where:
            message = f"{self.where}: {message}"
        if site:
            message += f"\n  at {site}"
        message += (
            f"\n  this is a bug in {self.origin.label}, not in the spec or the model (onnx {onnx.__version__}); "
            "nothing was written"
        )
        hint = f"report it to {self.origin.author} with this message"
        if plugin_traceback:
            hint += "; rerun with -v to see the plugin's traceback"
        return PluginError(message, hint, plugin_traceback)

    def _site(self, method: str | None) -> str | None:
        if method == "params_schema":
            return schema_site(self.cls)
        code = getattr(getattr(self.cls, method or "", None), "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno} in {code.co_name}" if code is not None else None


def schema_fault(cls: type) -> str | None:
    """What makes ``cls.params_schema`` no JSON Schema (jsonschema's meta-schema check, formats such as
    a pattern's regex included), with where it is written; None when it is one."""
    schema = getattr(cls, "params_schema", None)
    if not isinstance(schema, dict):
        problem = f"params_schema is a {type(schema).__name__}, not a JSON Schema object (a dict)"
    else:
        from jsonschema.exceptions import best_match

        validator = dialect()
        meta = validator(validator.META_SCHEMA, format_checker=validator.FORMAT_CHECKER)
        error = best_match(meta.iter_errors(schema))
        if error is None:
            return None
        at = ".".join(map(str, error.absolute_path))
        problem = f"params_schema is not a valid JSON Schema: {at + ': ' if at else ''}{error.message}"
    site = schema_site(cls)
    return problem + (f" (at {site})" if site else "")


def shorthand_fault(cls: type) -> str | None:
    """What makes ``cls.shorthand`` one that never applies: not a param of ``params_schema``, or a param
    whose value is always a mapping (``type.name: {...}`` is read as the params themselves)."""
    shorthand, schema = getattr(cls, "shorthand", None), getattr(cls, "params_schema", None)
    if shorthand is None or not isinstance(schema, dict):
        return None
    properties = schema.get("properties", {})
    if not isinstance(shorthand, str) or shorthand not in properties:
        known = ", ".join(map(repr, properties)) or "none"
        return f"shorthand {shorthand!r} is not one of its params (they are: {known})"
    if _only_mappings(properties[shorthand]):
        name = getattr(cls, "name", "TYPE")
        return (
            f"shorthand {shorthand!r} names a param whose value is always a mapping, so it never applies: "
            f"'{name}: {{...}}' is read as the params themselves; name a param whose value is not a mapping, "
            "or remove the shorthand"
        ) + (f" (at {site})" if (site := schema_site(cls, "shorthand")) else "")
    return None


def _only_mappings(schema: Any) -> bool:
    """Whether every value ``schema`` admits is a mapping (a JSON object)."""
    if not isinstance(schema, dict):
        return False
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        return all(_only_mappings(branch) for branch in branches)
    return schema.get("type") == "object"


def schema_site(cls: type, attribute: str = "params_schema") -> str | None:
    """``path.py:LINE in Class``: the line that sets ``attribute`` in the class that defines it."""
    owner = next((c for c in cls.__mro__ if attribute in vars(c)), cls)
    try:
        lines, start = inspect.getsourcelines(owner)
        path = inspect.getsourcefile(owner)
    except (OSError, TypeError):  # no source: a class built in memory
        return None
    offset = next((i for i, line in enumerate(lines) if re.match(rf"\s*{attribute}\b", line)), 0)
    return f"{path}:{start + offset} in {owner.__name__}"


def plugin_failure(exc: BaseException, modules: Iterable[str]) -> tuple[str | None, str]:
    """Where a plugin's code raised ``exc``, and the plugin's own traceback of it.

    ``modules`` are the plugin's module names (``patchspec_acme``, ``pkg.mod:attr``); a frame is the
    plugin's when its module is in the same top-level package. Returns ``path.py:LINE in function``
    of the innermost such frame (None when there is none) and the traceback from the plugin's first
    frame down, without patchspec's frames above it (nor importlib's, for an import).
    """
    tops = {str(m).split(":")[0].split(".")[0] for m in modules if m}
    tops.discard("")
    tb, first = exc.__traceback__, None
    innermost = None
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__")
        if isinstance(module, str) and module.split(".")[0] in tops:
            first = first or tb
            innermost = tb
        tb = tb.tb_next
    site = None
    if innermost is not None:
        site = f"{innermost.tb_frame.f_code.co_filename}:{innermost.tb_lineno} in {innermost.tb_frame.f_code.co_name}"
    elif isinstance(exc, SyntaxError) and exc.filename:  # raised while compiling the plugin's file
        site = f"{exc.filename}:{exc.lineno}"
    frames = [
        f for f in traceback.extract_tb(first or exc.__traceback__) if not f.filename.startswith("<frozen importlib")
    ]
    text = "".join(traceback.format_exception_only(type(exc), exc))
    if frames:
        text = (
            "Traceback (most recent call last):\n" + "".join(traceback.StackSummary.from_list(frames).format()) + text
        )
    return site, text


def _raised(exc: BaseException) -> str:
    """What a plugin raised, as a fault names it (a SystemExit says it left the process)."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): a plugin must not exit the process; it returns a result or raises"
    return f"{type(exc).__name__}: {exc}"


__all__ = ["Guard", "Origin", "dialect", "plugin_failure", "schema_fault", "schema_site", "shorthand_fault"]
