"""Fit one number seen in two exports as a shape expression of sizes seen in both.

A tracer bakes sizes into constants: ``40`` at input height 320 and ``32`` at 256 is ``dim(x, 2) // 8``.
Each :class:`Atom` is a size known at both exports (an input's axis, or an element of an added input);
:func:`fit` returns the simplest expression, in the language of ``docs/expressions.md``, that gives
the first number from the atoms' first values and the second from their second values.

The search space, simplest first (``cost`` counts atoms and operators); ``k`` is an integer >= 2:

- ``a``; then ``a * k``, ``a // k``, ``a + k``, ``a - k`` (an offset of at most ``OFFSET_LIMIT``);
- ``a * b``; then ``a * b * k``, ``a * b // k`` (``dim(x, 2) * dim(x, 3) // 64``);
- ``a * b * c``; then ``a * b * c * k``, ``a * b * c // k``.

``// k`` is accepted only where ``k`` divides the size exactly in at least one export (strides do;
a divisor that merely floors into range at both is a coincidence of two numbers). Products use
distinct atoms. Nothing else is tried: two exports give two equations, and a larger space would fit
coincidences. Ties keep the atoms' order (inputs in graph order, axes ascending).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations

#: the largest offset ``a + k`` tries (a class token, a padding row; not a second size)
OFFSET_LIMIT = 64


@dataclass(frozen=True)
class Atom:
    """A size known at both exports: ``text`` as an expression writes it, ``a`` and ``b`` its values."""

    text: str
    a: int
    b: int


@dataclass(frozen=True)
class Fit:
    text: str
    cost: int


def fit(a: int, b: int, atoms: Sequence[Atom]) -> Fit | None:
    """The simplest expression over ``atoms`` that is ``a`` at the first export and ``b`` at the second."""
    best: Fit | None = None
    for found in _candidates(a, b, atoms):
        if best is None or found.cost < best.cost:
            best = found
    return best


def same_values(atoms: Sequence[Atom]) -> list[tuple[Atom, Atom]]:
    """Pairs of atoms no pair of exports can tell apart (a square image exported square twice)."""
    return [(x, y) for x, y in combinations(atoms, 2) if (x.a, x.b) == (y.a, y.b)]


def folded_into(sizes: Sequence[tuple[int, int]], atoms: Sequence[Atom]) -> tuple[Atom, int] | None:
    """The atom that is ``k`` times the product of ``sizes`` at both exports, and ``k``: where sizes
    the inputs do not carry were flattened (a merger's patches ``[h * w * 4, C]`` hold ``h`` and ``w``)."""
    pa, pb = _product(a for a, _ in sizes), _product(b for _, b in sizes)
    for atom in atoms:
        if pa > 0 and pb > 0 and atom.a % pa == 0 and atom.b % pb == 0 and atom.a // pa == atom.b // pb:
            return atom, atom.a // pa
    return None


def _candidates(a: int, b: int, atoms: Sequence[Atom]) -> Iterator[Fit]:
    for atom in atoms:
        yield from _scaled(atom.text, atom.a, atom.b, a, b, 1)
        offset = a - atom.a
        if 0 < abs(offset) <= OFFSET_LIMIT and atom.b + offset == b:
            yield Fit(f"{atom.text} {'+' if offset > 0 else '-'} {abs(offset)}", 2)
    for size, cost in ((2, 3), (3, 5)):
        for group in combinations(atoms, size):
            na, nb = _product(x.a for x in group), _product(x.b for x in group)
            yield from _scaled(" * ".join(x.text for x in group), na, nb, a, b, cost)


def _scaled(text: str, na: int, nb: int, a: int, b: int, cost: int) -> Iterator[Fit]:
    """``text``, ``text * k`` or ``text // k`` where it gives ``a`` from ``na`` and ``b`` from ``nb``."""
    if (na, nb) == (a, b):
        yield Fit(text, cost)
    if na > 0 and a % na == 0 and a // na >= 2 and nb * (a // na) == b:
        yield Fit(f"{text} * {a // na}", cost + 1)
    divisor = _divisor(na, nb, a, b)
    if divisor is not None:
        yield Fit(f"{text} // {divisor}", cost + 1)


def _divisor(na: int, nb: int, a: int, b: int) -> int | None:
    """A k >= 2 with ``na // k == a`` and ``nb // k == b`` that divides ``na`` or ``nb`` exactly."""
    if a < 1 or b < 1:
        return None
    for number, value in ((na, a), (nb, b)):
        if number % value == 0:
            k = number // value
            if k >= 2 and na // k == a and nb // k == b:
                return k
    return None


def _product(values: Iterator[int]) -> int:
    result = 1
    for value in values:
        result *= value
    return result


__all__ = ["OFFSET_LIMIT", "Atom", "Fit", "fit", "folded_into", "same_values"]
