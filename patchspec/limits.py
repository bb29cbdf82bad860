"""The limits a spec cannot lift: only the person running patchspec raises them (``--limit``).

A spec may ask for less than a limit (a shorter ``timeout``, a smaller ``align``), never for more:
``timeout: 100000000`` once lifted the time bound, ``align: 1073741824`` turned 96 bytes of weights
into a 5.1 GiB file, and 64 inputs of ``max_elements`` each exhausted memory. A value over a limit is
a spec error (exit 2) naming the key, the limit and the option that raises it::

    patchspec apply specs/x.yaml --limit timeout=3600 --limit align=2097152

Plugins read :func:`current` in ``check_params``; nothing here imports onnx or numpy.
"""

from __future__ import annotations

import contextvars
import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """The most a spec may ask for; each field is raised by ``--limit NAME=VALUE`` (``-`` for ``_``)."""

    #: seconds one onnxruntime run may take (the run verifier's and the lint probe's ``timeout``)
    timeout: float = 600.0
    #: elements of one run-case input (the run verifier's ``max_elements``)
    max_elements: int = 2**27
    #: bytes of every input of one case together, and of every reference array loaded for it
    case_bytes: int = 2 * 2**30
    #: byte alignment of a tensor in the output's data file (``external_data``'s ``align``)
    align: int = 2**16

    def describe(self, name: str) -> str:
        """How a refusal names this limit and its way out."""
        return (
            f"the limit of {getattr(self, name):,} the caller allows (raise it with --limit {name.replace('_', '-')}=N)"
        )


DEFAULTS = Limits()
_current: contextvars.ContextVar[Limits | None] = contextvars.ContextVar("patchspec_limits", default=None)


def current() -> Limits:
    """The limits of the run in progress (the defaults unless the command line raised one)."""
    return _current.get() or DEFAULTS


#: :func:`current` as ``patchspec.api`` names it for plugins
current_limits = current


def parse(given: tuple[str, ...]) -> Limits:
    """``("timeout=3600", "align=2097152")`` as :class:`Limits`; a ValueError names what is wrong."""
    names = {field.name: field.type for field in dataclasses.fields(Limits)}
    values: dict[str, float | int] = {}
    for item in given:
        name, _, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if name not in names or not text:
            from patchspec.errors import did_you_mean

            known = sorted(n.replace("_", "-") for n in names)
            near = did_you_mean(name.replace("_", "-"), known) if text else ""
            raise ValueError(f"{item!r}: give NAME=VALUE with NAME one of {', '.join(known)}{near}")
        try:
            value: float | int = float(text) if names[name] in (float, "float") else int(text)
        except ValueError:
            raise ValueError(f"{item!r}: {text!r} is not a number") from None
        if not 0 < value < float("inf"):
            raise ValueError(f"{item!r}: a limit is a positive, finite number")
        values[name] = value
    return Limits(**values)  # type: ignore[arg-type]


def use(limits: Limits) -> None:
    """Make ``limits`` the run's (the CLI, once per command)."""
    _current.set(limits)


__all__ = ["DEFAULTS", "Limits", "current", "current_limits", "parse", "use"]
