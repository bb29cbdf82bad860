"""The shape expression language: a tokenizer, a recursive-descent parser and a reference evaluator.

Grammar (``docs/expressions.md``)::

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '//' | '%') unary)*
    unary   := '-' unary | atom
    atom    := INTEGER | '(' expr ')' | CALL
    CALL    := 'min' '(' expr ',' expr ')' | 'max' '(' expr ',' expr ')'
             | 'dim' '(' TENSOR ',' INDEX ')' | 'value' '(' TENSOR (',' INDEX)* ')'
    TENSOR  := bare name of [A-Za-z0-9_./:-] characters | 'quoted name' | "quoted name"
    INDEX   := an integer literal, optionally negative

Nothing is ever handed to ``eval`` or Python's ``ast``: a string that is not in this grammar is a
:class:`ExpressionError` carrying the 1-based column of the problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

FUNCTIONS = {"min": 2, "max": 2, "dim": 2, "value": None}  # name -> arity (None: 2 or more)
TENSOR_FUNCTIONS = ("dim", "value")
BARE_TENSOR_CHARS = re.compile(r"[A-Za-z0-9_./:\-]+")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: the deepest syntax tree an expression may have (parentheses, unary minus, calls and operator
#: chains all count): a shape needs a handful; the bound keeps a hostile spec's 5000 nested
#: parentheses an error of the spec (exit 2) instead of a RecursionError (exit 5)
MAX_DEPTH = 100


class ExpressionError(ValueError):
    """A syntax or static error in an expression; ``column`` is 1-based."""

    def __init__(self, column: int, message: str) -> None:
        super().__init__(f"col {column}: {message}")
        self.column = column
        self.message = message


# -- the syntax tree --------------------------------------------------------------------------
@dataclass(frozen=True)
class Number:
    value: int
    column: int


@dataclass(frozen=True)
class Negate:
    operand: Expr
    column: int


@dataclass(frozen=True)
class BinaryOp:
    op: str  # + - * // %
    left: Expr
    right: Expr
    column: int


@dataclass(frozen=True)
class MinMax:
    function: str  # min | max
    left: Expr
    right: Expr
    column: int


@dataclass(frozen=True)
class Dim:
    tensor: str
    axis: int
    column: int


@dataclass(frozen=True)
class Value:
    tensor: str
    indices: tuple[int, ...]
    column: int


Expr = Number | Negate | BinaryOp | MinMax | Dim | Value


# -- tokens -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    kind: str  # int | name | op | end
    text: str
    column: int


TOKEN_PATTERN = re.compile(r"\s*(?:(?P<int>[0-9]+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>//|[-+*%(),]))")


def next_token(text: str, pos: int) -> Token:
    """The token that starts at or after offset ``pos``."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        return Token("end", "", pos + 1)
    match = TOKEN_PATTERN.match(text, pos)
    if not match:
        raise ExpressionError(pos + 1, _unexpected_char(text[pos]))
    kind = match.lastgroup or "op"  # every alternative of the pattern is a named group
    return Token(kind, match.group(kind), match.start(kind) + 1)


def _unexpected_char(char: str) -> str:
    if char == "/":
        return "unexpected '/'; integer division is written '//'"
    return f"unexpected character {char!r}; expressions use integers, + - * // %, parentheses, min, max, dim, value"


# -- the parser -------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0  # character offset of the next unread character
        self.depth = 0  # nesting of the parse functions now running (parentheses, signs, calls)

    # the parser reads tokens lazily so that tensor names (which may contain '-', '.', ':')
    # can be read in their own mode after 'dim(' and 'value('
    def peek(self) -> Token:
        return next_token(self.text, self.pos)

    def take(self) -> Token:
        token = self.peek()
        self.pos = token.column - 1 + len(token.text)
        return token

    def expect(self, text: str, after: str) -> Token:
        token = self.peek()
        if token.text != text or token.kind not in ("op",):
            found = f"'{token.text}'" if token.kind != "end" else "the end"
            raise ExpressionError(token.column, f"expected '{text}' {after}, found {found}")
        return self.take()

    def parse(self) -> Expr:
        if not self.text.strip():
            raise ExpressionError(1, "empty expression")
        expr = self.expr()
        token = self.peek()
        if token.kind != "end":
            raise ExpressionError(token.column, f"unexpected '{token.text}' after a complete expression")
        return expr

    def expr(self) -> Expr:
        left = self.term()
        while (token := self.peek()).kind == "op" and token.text in ("+", "-"):
            self.take()
            left = BinaryOp(token.text, left, self.operand_after(token), token.column)
        return left

    def term(self) -> Expr:
        left = self.unary()
        while (token := self.peek()).kind == "op" and token.text in ("*", "//", "%"):
            self.take()
            left = BinaryOp(token.text, left, self.operand_after(token, unary=True), token.column)
        return left

    def operand_after(self, token: Token, unary: bool = False) -> Expr:
        nxt = self.peek()
        if nxt.kind == "end" or (nxt.kind == "op" and nxt.text in (")", ",", "*", "//", "%", "+")):
            raise ExpressionError(nxt.column, f"expected an expression after '{token.text}'")
        return self.unary() if unary else self.term()

    def unary(self) -> Expr:
        token = self.peek()
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(token.column, _too_deep())
        try:
            if token.kind == "op" and token.text == "-":
                self.take()
                return Negate(self.operand_after(token, unary=True), token.column)
            return self.atom()
        finally:
            self.depth -= 1

    def atom(self) -> Expr:
        token = self.take()
        if token.kind == "int":
            if int(token.text) > INT64_MAX:
                raise ExpressionError(token.column, f"{token.text} does not fit in int64")
            return Number(int(token.text), token.column)
        if token.kind == "op" and token.text == "(":
            inner = self.expr()
            self.expect(")", "to close the '(' at col " + str(token.column))
            return inner
        if token.kind == "name":
            return self.call(token)
        if token.kind == "end":
            raise ExpressionError(token.column, "expected an expression, found the end")
        raise ExpressionError(token.column, f"expected an expression, found '{token.text}'")

    def call(self, name: Token) -> Expr:
        called = self.peek().text == "("
        if name.text not in FUNCTIONS and not called:
            msg = (
                f"unknown name '{name.text}'; read a tensor's size with dim({name.text}, AXIS) "
                f"or an element with value({name.text}, I, ...)"
            )
            raise ExpressionError(name.column, msg)
        if name.text not in FUNCTIONS:
            from patchspec.errors import did_you_mean

            raise ExpressionError(
                name.column,
                f"unknown function '{name.text}'"
                + did_you_mean(name.text, FUNCTIONS)
                + "; known: min, max, dim, value",
            )
        nxt = self.peek()
        if not (nxt.kind == "op" and nxt.text == "("):
            raise ExpressionError(nxt.column, f"expected '(' after '{name.text}'")
        self.take()
        if name.text in TENSOR_FUNCTIONS:
            return self.tensor_call(name)
        args = self.arguments(name)
        if len(args) != 2:
            raise ExpressionError(name.column, f"{name.text}() takes 2 arguments, got {len(args)}")
        return MinMax(name.text, args[0], args[1], name.column)

    def arguments(self, name: Token) -> list[Expr]:
        args: list[Expr] = []
        if self.peek().text == ")":
            self.take()
            return args
        while True:
            args.append(self.expr())
            token = self.peek()
            if token.kind == "op" and token.text == ",":
                self.take()
                continue
            self.expect(")", f"to close {name.text}(")
            return args

    def tensor_call(self, name: Token) -> Expr:
        tensor = self.tensor_name(name)
        indices = []
        while (token := self.peek()).kind == "op" and token.text == ",":
            self.take()
            indices.append(self.index(name))
        self.expect(")", f"to close {name.text}(")
        if name.text == "dim" and len(indices) != 1:
            raise ExpressionError(name.column, f"dim() takes 2 arguments (TENSOR, AXIS), got {1 + len(indices)}")
        if name.text == "dim":
            return Dim(tensor, indices[0], name.column)
        if not indices:
            raise ExpressionError(name.column, "value() takes a tensor and at least one index, got only the tensor")
        return Value(tensor, tuple(indices), name.column)

    def tensor_name(self, name: Token) -> str:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1
        column = self.pos + 1
        rest = self.text[self.pos :]
        if rest[:1] in ("'", '"'):
            end = rest.find(rest[0], 1)
            if end < 0:
                raise ExpressionError(column, f"unterminated quoted tensor name in {name.text}()")
            if end == 1:
                raise ExpressionError(column, "empty tensor name")
            self.pos += end + 1
            return rest[1:end]
        match = BARE_TENSOR_CHARS.match(rest)
        if not match:
            raise ExpressionError(
                column,
                f"expected a tensor name as the first argument of {name.text}(); "
                "quote names with other characters: 'my name'",
            )
        self.pos += match.end()
        return match.group(0)

    def index(self, name: Token) -> int:
        token = self.take()
        sign = 1
        if token.kind == "op" and token.text == "-":
            sign, token = -1, self.take()
        if token.kind != "int":
            what = "an axis" if name.text == "dim" else "an index"
            found = f"'{token.text}'" if token.kind != "end" else "the end"
            raise ExpressionError(token.column, f"expected {what} (an integer literal) in {name.text}(), found {found}")
        return sign * int(token.text)


def parse(text: str) -> Expr:
    """Parse ``text``; raise :class:`ExpressionError` with the column of the first problem."""
    if not isinstance(text, str):
        raise ExpressionError(1, f"expected an expression string, got {type(text).__name__}")
    expr = _Parser(text).parse()
    if depth(expr) > MAX_DEPTH:  # a long flat chain (1 + 1 + ... + 1) nests as deep as its length
        raise ExpressionError(1, _too_deep())
    return expr


def depth(expr: Expr) -> int:
    """How deep the syntax tree goes (a number is 1), counted without recursion."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(node, Negate):
            stack.append((node.operand, level + 1))
        elif isinstance(node, (BinaryOp, MinMax)):
            stack += [(node.left, level + 1), (node.right, level + 1)]
    return deepest


def _too_deep() -> str:
    return (
        f"the expression nests deeper than {MAX_DEPTH} levels (parentheses, signs, calls and chained "
        "operators); split it into simpler expressions"
    )


def check(text: str) -> str | None:
    """``None`` if ``text`` is a valid expression, else ``col N: message`` (for ``check_params``)."""
    try:
        expr = parse(text)
        fold_constants(expr)
    except ExpressionError as exc:
        return str(exc)
    return None


# -- analysis and evaluation -------------------------------------------------------------------
def tensor_refs(expr: Expr) -> list[Dim | Value]:
    """Every dim() and value() in ``expr``, left to right."""
    if isinstance(expr, (Dim, Value)):
        return [expr]
    if isinstance(expr, Negate):
        return tensor_refs(expr.operand)
    if isinstance(expr, (BinaryOp, MinMax)):
        return tensor_refs(expr.left) + tensor_refs(expr.right)
    return []


def apply_op(op: str, left: int, right: int, column: int = 1) -> int:
    """Python integer semantics: ``//`` floors, ``%`` takes the divisor's sign."""
    if op in ("//", "%") and right == 0:
        raise ExpressionError(column, f"division by zero in '{op}'")
    result = {
        "+": lambda: left + right,
        "-": lambda: left - right,
        "*": lambda: left * right,
        "//": lambda: left // right,
        "%": lambda: left % right,
        "min": lambda: min(left, right),
        "max": lambda: max(left, right),
    }[op]()
    if not INT64_MIN <= result <= INT64_MAX:
        raise ExpressionError(column, f"result {result} does not fit in int64")
    return result


def evaluate(expr: Expr, dim: Callable[[str, int], int], value: Callable[[str, Sequence[int]], int]) -> int:
    """The reference evaluator: ``dim(name, axis)`` and ``value(name, indices)`` supply the model's numbers."""
    if isinstance(expr, Number):
        return expr.value
    if isinstance(expr, Negate):
        return -evaluate(expr.operand, dim, value)
    if isinstance(expr, Dim):
        return int(dim(expr.tensor, expr.axis))
    if isinstance(expr, Value):
        return int(value(expr.tensor, expr.indices))
    left, right = evaluate(expr.left, dim, value), evaluate(expr.right, dim, value)
    op = expr.function if isinstance(expr, MinMax) else expr.op
    return apply_op(op, left, right, expr.column)


def evaluate_with_arrays(expr: Expr, shapes: dict[str, Sequence[int]], arrays: dict[str, Any]) -> int:
    """Evaluate with ``shapes`` {name: shape} and ``arrays`` {name: numpy array} (tests, docs)."""

    def dim(name: str, axis: int) -> int:
        return int(shapes[name][axis] if name in shapes else arrays[name].shape[axis])

    def value(name: str, indices: Sequence[int]) -> int:
        return int(arrays[name][tuple(indices)])

    return evaluate(expr, dim, value)


def fold_constants(expr: Expr) -> int | None:
    """The value of ``expr`` if it reads no tensor; raises ExpressionError on a constant error (x // 0)."""
    if tensor_refs(expr):
        _check_constant_parts(expr)
        return None
    return evaluate(expr, _never, _never)


def _check_constant_parts(expr: Expr) -> None:
    if isinstance(expr, Negate):
        _check_constant_parts(expr.operand)
    elif isinstance(expr, (BinaryOp, MinMax)):
        for side in (expr.left, expr.right):
            fold_constants(side)
        if isinstance(expr, BinaryOp) and expr.op in ("//", "%") and not tensor_refs(expr.right):
            if fold_constants(expr.right) == 0:
                raise ExpressionError(expr.column, f"division by zero in '{expr.op}'")


def _never(*args: object) -> NoReturn:  # pragma: no cover - only called for expressions that read no tensor
    raise AssertionError("constant expression read a tensor")


def to_text(expr: Expr) -> str:
    """A canonical, fully parenthesised rendering (for summaries and round-trip tests)."""
    if isinstance(expr, Number):
        return str(expr.value)
    if isinstance(expr, Negate):
        return f"-({to_text(expr.operand)})"
    if isinstance(expr, Dim):
        return f"dim({quote_tensor(expr.tensor)}, {expr.axis})"
    if isinstance(expr, Value):
        return f"value({quote_tensor(expr.tensor)}, {', '.join(map(str, expr.indices))})"
    if isinstance(expr, MinMax):
        return f"{expr.function}({to_text(expr.left)}, {to_text(expr.right)})"
    return f"({to_text(expr.left)} {expr.op} {to_text(expr.right)})"


def quote_tensor(name: str) -> str:
    """A tensor name as an expression writes it: bare when it can be, else quoted."""
    if BARE_TENSOR_CHARS.fullmatch(name):
        return name
    return f'"{name}"' if "'" in name else f"'{name}'"
