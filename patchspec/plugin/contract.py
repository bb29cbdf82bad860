"""What a plugin implements: patch types and verifiers, and what the engine hands them.

Both are step types (:class:`StepType`): a class with its parameters declared as data
(``params_schema``, a JSON Schema with ``additionalProperties: false`` and a ``description`` per
field, usually generated from a params ``TypedDict``) and the checks made before anything runs. A
patch type adds an ``apply`` method that changes the model in place and says what it did; a verifier
adds ``verify``, which looks at the written output and returns a verdict and never changes anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, NoReturn, TypeVar, get_args

from patchspec.errors import PatchError, SpecLocation, VerifierFailed
from patchspec.plugin.params import is_params_declaration, schema_of

if TYPE_CHECKING:
    import onnx

    from patchspec.spec.steps import Spec, Step

#: a problem found in a step's parameters without the model: (key path inside the params, message)
ParamProblem = tuple[tuple[Any, ...], str]

T = TypeVar("T")
#: a plugin's params: the ``TypedDict`` in ``PatchType[P]`` / ``Verifier[P]`` (a plain ``dict`` without one)
P = TypeVar("P", bound=Mapping[str, Any])


def _declare_params(cls: type) -> None:
    """``class X(PatchType[XParams])``: ``Params`` is XParams, and without a ``params_schema`` of its
    own the class gets the one XParams declares (:mod:`patchspec.plugin.params`)."""
    declared = next(
        (arg for base in getattr(cls, "__orig_bases__", ()) for arg in get_args(base) if is_params_declaration(arg)),
        None,
    )
    if declared is None:
        return
    if "Params" not in vars(cls):
        cls.Params = declared  # type: ignore[attr-defined]  # set on the class the generic base names
    if "params_schema" not in vars(cls):
        schema = schema_of(declared, vars(cls).get("description", ""))
        cls.params_schema = schema  # type: ignore[attr-defined]  # set on the class the generic base names


@dataclass(frozen=True, eq=False)
class StateKey(Generic[T]):
    """A typed slot in :class:`RunState`. Define one at module level and import it where it is used.

    ``name`` says whose it is: start it with your plugin's prefix, as its type names do
    (``"acme.seen_casts"``);
    ``initial`` makes the value the slot holds until someone sets it (``dict``, ``list``, or
    ``lambda: None``). Two keys are the same slot only if they are the same object.
    """

    name: str
    initial: Callable[[], T]


#: points a patch of this run could not decide (one line each, e.g. set_batch's constants it could not
#: prove batch-independent): only a verifier can judge them, so ``apply --no-verify`` refuses to write
#: the model unless ``--allow-undecided`` is given. Any patch type may add to it.
UNDECIDED: StateKey[list[str]] = StateKey("patchspec.undecided", list)
#: ops a patch found that make one sample's result depend on the others (a quantization scale over the
#: batch): a failed per-sample comparison names them, as the cause to accept or fix. Since 1.4.
COUPLED: StateKey[list[str]] = StateKey("patchspec.coupled", list)


class RunState:
    """State shared by the patches of one run (one spec applied to one model), by typed key.

    A fresh, empty one is made for every run, so nothing leaks between specs. Built-ins use it as a
    third party would: rename_dims records the dims it named under ``PINNED_DIMS`` and set_batch
    reads them; the external_data patch sets ``OUTPUT_LAYOUT``, which the writer reads.
    """

    def __init__(self) -> None:
        self._values: dict[StateKey[Any], Any] = {}

    def get(self, key: StateKey[T]) -> T:
        """The slot's value; the first call stores ``key.initial()`` (so a dict can be filled in place)."""
        if key not in self._values:
            self._values[key] = key.initial()
        value: T = self._values[key]
        return value

    def set(self, key: StateKey[T], value: T) -> None:
        self._values[key] = value

    def __contains__(self, key: StateKey[Any]) -> bool:
        return key in self._values


@dataclass(frozen=True)
class PatchResult:
    """What one patch did: ``modified`` is the truth about the model, ``summary`` one line for humans."""

    modified: bool
    summary: str
    details: tuple[str, ...] = ()


class StepType(Generic[P]):
    """What patch types and verifiers have in common: the base of :class:`PatchType` and :class:`Verifier`.

    A step's type declares its name, a description and its params (``StepType[P]`` with ``P`` a
    ``TypedDict`` types ``params`` in every method; when ``P`` declares its fields with ``Param`` and
    the class gives no ``params_schema``, the schema is generated from it), and may check its params
    before anything runs. Subclass :class:`PatchType` or :class:`Verifier`, never this class: the
    engine tells a patch from a verifier by them. Since plugin API 1.5 (the methods, since 1.0 on both).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    params_schema: ClassVar[dict[str, Any]]
    #: ``set_batch: 32`` means ``set_batch: {size: 32}`` when ``shorthand = "size"``
    shorthand: ClassVar[str | None] = None
    #: the params ``TypedDict``: set from ``PatchType[P]``/``Verifier[P]`` (since 1.2), or by hand (1.1);
    #: the test kit checks its keys against ``params_schema``'s properties
    Params: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _declare_params(cls)

    def check_params(self, params: P) -> Iterable[ParamProblem]:
        """Checks JSON Schema cannot express (expression syntax, regexes); no model needed.

        ``params`` are as the spec wrote them: a key with a schema ``default`` may be missing here
        (read it with ``params.get``); every other method gets the defaults filled in."""
        return ()

    def dependencies(self, params: P) -> Iterable[str]:
        """Files this step reads besides the models (paths as written, relative to the spec's folder).

        They are part of the output's digest and of ``--depfile``, so changing one re-runs ``apply``.
        """
        return ()

    def check_model(self, params: P, model: onnx.ModelProto) -> Iterable[ParamProblem]:
        """Problems with ``params`` that only the model can show: ``(key path, message)`` pairs, reported
        like ``check_params``'s (exit 2, located at the key). The model is a graph without weights; do
        not modify it. A patch type sees the model as the patches before it left it, before ``apply``
        (``apply``, ``plan`` and ``validate``; since plugin API 1.4); a verifier sees the patched model,
        before anything is staged, written or run (``apply`` and ``plan``; since plugin API 1.1)."""
        return ()


class PatchType(StepType[P]):
    """Base class of every patch type (built-in or third-party): ``apply`` changes the model.

    ``class StripPatch(PatchType[StripParams])`` types ``params`` as ``StripParams`` (a ``TypedDict``)
    in every method; when ``StripParams`` declares its fields with ``Param`` and the class gives no
    ``params_schema``, the schema is generated from it (since plugin API 1.2).
    """

    def apply(self, model: onnx.ModelProto, params: P, context: PatchContext) -> PatchResult:
        """Change ``model`` in place as ``params`` say; raise via ``context.fail`` when it cannot."""
        raise NotImplementedError(f"patch type {self.name!r} does not implement apply()")


@dataclass(frozen=True)
class VerifyResult:
    """A verifier's verdict on the patched model."""

    status: Literal["passed", "failed", "skipped"]
    summary: str
    details: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)  # machine-readable detail for --report

    @property
    def ok(self) -> bool:
        return self.status != "failed"


class Verifier(StepType[P]):
    """Base class of every verifier: ``verify`` judges the written output. Verifiers never change the
    model or any file. ``Verifier[P]`` types and declares the params as :class:`PatchType` does (since
    plugin API 1.2)."""

    def verify(self, params: P, context: VerifyContext) -> VerifyResult:
        raise NotImplementedError(f"verifier {self.name!r} does not implement verify()")


@dataclass
class StepContext:
    """Where a step comes from, so its errors can point at the spec."""

    spec: Spec
    step: Step

    def where(self, key: tuple[Any, ...] = ()) -> str:
        """``file:line:col: patches[1] (rename_dims) > axes.2`` for a key inside the step's params."""
        return self.spec.locate(self.step, key)

    def location(self, key: tuple[Any, ...] = ()) -> SpecLocation:
        """The same place as data: file, line, column, step, key (since plugin API 1.2)."""
        return self.spec.location(self.step, key)

    def fail(
        self, message: str, *, key: tuple[Any, ...] = (), hint: str | None = None, node: str | None = None
    ) -> NoReturn:
        """Stop the run: this patch cannot apply to this model (exit 4). ``node``: the graph node at fault.

        A :class:`VerifyContext` means something else by it: the output fails verification (exit 1).
        """
        raise PatchError(message, hint, where=self.location(key), key=key, node=node)

    def resolve(self, relative: str) -> Path:
        """A path written in the spec, relative to the spec's folder."""
        return Path(os.path.normpath(self.spec.folder / relative))


@dataclass
class PatchContext(StepContext):
    """What a patch gets besides the model and its parameters."""

    model_dir: Path = Path(".")  # folder of the input model: base of its external data
    #: shared by every patch of this run; see :class:`RunState`
    state: RunState = field(default_factory=RunState)


def _no_progress(text: str) -> None:
    """Progress goes nowhere: no terminal, ``-q``, or a context made outside a run."""


@dataclass
class VerifyContext(StepContext):
    """What a verifier gets: paths to the staged output and the original, and the patched graph."""

    output_path: Path = Path(".")
    original_path: Path = Path(".")
    model: Any = None  # onnx.ModelProto of the output, graph only; do not modify
    #: ``context.progress("CPUExecutionProvider case 0 (1 of 3)")``: what a slow verifier does now.
    #: On a terminal the status line shows it after the verifier's name (``run: ...``) once the step
    #: has run a second; in a pipe, a build log or with ``-q`` it prints nothing. A verifier never
    #: prints: it says it here. Since plugin API 1.1.
    progress: Callable[[str], None] = field(default=_no_progress, kw_only=True, repr=False, compare=False)

    def fail(
        self, message: str, *, key: tuple[Any, ...] = (), hint: str | None = None, node: str | None = None
    ) -> NoReturn:
        """Stop this verifier with the verdict "failed": reported like a failed ``VerifyResult``
        (the other verifiers still run; exit 1, nothing is written)."""
        raise VerifierFailed(self.location(key), message, key, hint, node=node)


__all__ = [
    "COUPLED",
    "ParamProblem",
    "PatchContext",
    "PatchResult",
    "PatchType",
    "RunState",
    "StateKey",
    "StepContext",
    "StepType",
    "Verifier",
    "VerifyContext",
    "VerifyResult",
]
