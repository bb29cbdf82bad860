"""Read a spec file as YAML 1.2 would, with a position for every value.

PyYAML alone keeps the last of two duplicate keys, reads ``1e-5`` as a string and ``no`` as
``False``, and expands alias bombs without limit. This module walks PyYAML's event stream
(iterative, so deep nesting cannot blow the stack) and builds plain Python data itself:

- scalars are typed by the YAML 1.2 core schema (``1e-5`` is a float, ``no``/``on`` are strings);
- duplicate keys, non-scalar keys, unknown tags, several documents are errors;
- nesting depth, alias count, expanded size and file size are bounded;
- every node's position is recorded under its key path, so later errors can say ``file:line:col``.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from patchspec.errors import SpecError, SpecLocation, SpecProblem

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIASES = 100
MAX_NODES = 100_000

KeyPath = tuple[Any, ...]  # mapping keys (str, int) and list indexes, outermost first

_INT = re.compile(r"[-+]?[0-9]+\Z")
_OCT = re.compile(r"0o[0-7]+\Z")
_HEX = re.compile(r"0x[0-9a-fA-F]+\Z")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?\Z")
_INF = re.compile(r"[-+]?\.(inf|Inf|INF)\Z")
_NAN = re.compile(r"\.(nan|NaN|NAN)\Z")
_NULL = {"", "~", "null", "Null", "NULL"}
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}
_CORE_TAGS: dict[str, type] = {
    "tag:yaml.org,2002:str": str,
    "tag:yaml.org,2002:int": int,
    "tag:yaml.org,2002:float": float,
    "tag:yaml.org,2002:bool": bool,
    "tag:yaml.org,2002:null": type(None),
    "tag:yaml.org,2002:map": dict,
    "tag:yaml.org,2002:seq": list,
}


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based


@dataclass
class YamlDocument:
    """Plain data from one YAML document plus where each part of it was written."""

    path: Path
    data: object
    text: str
    positions: dict[KeyPath, Position] = field(default_factory=dict)  # of the value
    key_positions: dict[KeyPath, Position] = field(default_factory=dict)  # of the key

    def position(self, path: Iterable[Any], *, of_key: bool = False) -> Position:
        """Position of ``path``, or of its nearest ancestor that has one (values inside aliases)."""
        path = tuple(path)  # a list or jsonschema's deque too
        table = self.key_positions if of_key else self.positions
        while path:
            if path in table:
                return table[path]
            if path in self.positions:
                return self.positions[path]
            path = path[:-1]
        return self.positions.get((), Position(1, 1))

    def location(
        self, path: Iterable[Any], *, label: str = "", key: Iterable[Any] | None = None, of_key: bool = False
    ) -> SpecLocation:
        """Where ``path`` was written (its key's position with ``of_key``), named as ``label > key``;
        without a label, by ``key`` or else ``path`` itself (the spec's own keys: ``patches[0]``)."""
        path = tuple(path)
        pos = self.position(path, of_key=of_key)
        named = tuple(key) if key is not None else (() if label else path)
        return SpecLocation(str(self.path), pos.line, pos.column, label, named)

    def problem(
        self,
        path: Iterable[Any],
        message: str,
        hint: str | None = None,
        *,
        label: str = "",
        key: Iterable[Any] | None = None,
        of_key: bool = False,
    ) -> SpecProblem:
        """A problem at ``path``, located as :meth:`location` says."""
        return SpecProblem(self.location(path, label=label, key=key, of_key=of_key), message, hint)


Scalar = str | int | float | bool | None


#: the most digits an integer in a spec may have (int64 and uint64 have 20): Python refuses to read
#: more than 4,300, and a number that long is an attack, not a size
MAX_INTEGER_DIGITS = 40


def resolve_plain_scalar(text: str) -> Scalar:
    """Type a plain (unquoted) scalar by the YAML 1.2 core schema (an integer of more than
    :data:`MAX_INTEGER_DIGITS` digits is a :class:`ValueError`)."""
    if len(text) > MAX_INTEGER_DIGITS + 2 and (_INT.match(text) or _OCT.match(text) or _HEX.match(text)):
        raise ValueError(
            f"an integer of {len(text.lstrip('+-'))} digits; a spec's integers have at most {MAX_INTEGER_DIGITS}"
        )
    if text in _NULL:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if _INT.match(text):
        return int(text)
    if _OCT.match(text):
        return int(text[2:], 8)
    if _HEX.match(text):
        return int(text[2:], 16)
    if _FLOAT.match(text):
        return float(text)
    if _INF.match(text):
        return -math.inf if text.startswith("-") else math.inf
    if _NAN.match(text):
        return math.nan
    return text


def read_spec_text(path: Path) -> str:
    """Read a spec file as UTF-8 text, with one clear error for each way that can fail.

    Bounded as models are read: the file opened is the file checked (a regular file, never a FIFO,
    a device or ``/dev/zero`` behind a link), and never more than :data:`MAX_FILE_BYTES` is read."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens without a writer
    except FileNotFoundError:
        raise SpecError(f"{name}: No such file or directory") from None
    except PermissionError:
        raise SpecError(f"{name}: permission denied") from None
    except IsADirectoryError:
        raise SpecError(f"{name}: is a directory, not a spec file") from None
    except OSError as exc:
        raise SpecError(f"{name}: cannot read: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise SpecError(f"{name}: is a directory, not a spec file")
        raise SpecError(f"{name}: is not a regular file (a device, FIFO or socket); a spec is a YAML file")
    with os.fdopen(fd, "rb") as handle:
        try:
            raw = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise SpecError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise SpecError(f"{name}: file is over {MAX_FILE_BYTES} bytes; specs are limited to 16 MiB")
    nul = raw.find(b"\x00")
    if nul >= 0 and _looks_like_a_model(name, raw):
        raise SpecError(
            f"{name}: is an ONNX model, not a spec; a spec names the model and what to change in it: "
            f"write one with `patchspec init {name}`, then apply that spec"
        )
    if nul >= 0:
        raise SpecError(f"{name}: binary file (NUL byte at offset {nul}); a spec is UTF-8 YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{name}: not valid UTF-8 at byte {exc.start}") from None


def load_yaml(path: Path, text: str | None = None) -> YamlDocument:
    """Parse ``path`` (or ``text`` given for it) into a :class:`YamlDocument`."""
    path = Path(path)
    if text is None:
        text = read_spec_text(path)
    builder = _Builder(path, text)
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            builder.feed(event)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise SpecError([SpecProblem(SpecLocation(str(path), line, col), f"YAML syntax error: {problem}")]) from None
    except yaml.reader.ReaderError as exc:  # a character YAML forbids; carries an offset, not a mark
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        message = f"character {char} is not allowed in YAML ({exc.reason})"
        raise SpecError([SpecProblem(SpecLocation(str(path), line, column), message)]) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: YAML error: {exc}") from None
    return builder.result()


class _Frame:
    """A mapping or sequence under construction."""

    def __init__(self, container: dict[Any, Any] | list[Any], path: KeyPath, anchor: str | None, start: Position):
        self.container = container
        self.path = path
        self.anchor = anchor
        self.pending_key: Scalar = None  # for mappings: key read, value not yet
        self.pending_key_pos: Position | None = None
        self.first_key_line: dict[Scalar, int] = {}
        self.start = start
        self.nodes_at_start = 0


class _Builder:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[object, int]] = {}  # anchor -> (value, node count)
        self.open_anchors: set[str] = set()
        self.aliases = 0
        self.nodes = 0
        self.documents = 0
        self.root: object = None
        self.root_set = False
        self.positions: dict[KeyPath, Position] = {}
        self.key_positions: dict[KeyPath, Position] = {}

    # PyYAML ships no type hints: its events and marks are Any here
    def fail(self, mark: Any, message: str, hint: str | None = None) -> NoReturn:
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise SpecError([SpecProblem(SpecLocation(str(self.path), line, col), message, hint)])

    def feed(self, event: Any) -> None:
        if isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                self.fail(event.start_mark, "several YAML documents in one spec; keep one (remove '---')")
        elif isinstance(event, yaml.ScalarEvent):
            self.scalar(event)
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            self.start_collection(event)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            self.end_collection()
        elif isinstance(event, yaml.AliasEvent):
            self.alias(event)

    def result(self) -> YamlDocument:
        if not self.root_set or self.root is None:
            raise SpecError(
                f"{self.path}: empty spec; it needs at least 'patchspec: 1', 'model', 'output' and 'patches'"
            )
        return YamlDocument(self.path, self.root, self.text, self.positions, self.key_positions)

    # -- values -----------------------------------------------------------------------------
    def child_path(self) -> KeyPath:
        if not self.stack:
            return ()
        frame = self.stack[-1]
        if isinstance(frame.container, list):
            return frame.path + (len(frame.container),)
        return frame.path + (frame.pending_key,)

    def count_node(self, mark: Any, amount: int = 1) -> None:
        self.nodes += amount
        if self.nodes > MAX_NODES:
            self.fail(mark, f"spec expands to more than {MAX_NODES} values (alias bomb?); refusing it")

    def check_tag(self, event: Any, expected: type) -> None:
        tag = event.tag
        if tag in (None, "!"):
            return
        if _CORE_TAGS.get(tag) is not expected:
            self.fail(event.start_mark, f"tag '{tag}' is not allowed in a spec; only plain YAML values are")

    def scalar(self, event: Any) -> None:
        frame = self.stack[-1] if self.stack else None
        if frame is not None and isinstance(frame.container, dict) and frame.pending_key is None:
            self.key(event, frame)
            return
        value = self.scalar_value(event)
        self.count_node(event.start_mark)
        self.place(value, event.start_mark)
        if event.anchor:
            self.anchors[event.anchor] = (value, 1)

    def scalar_value(self, event: Any) -> Scalar:
        try:
            return self._typed(event)
        except ValueError as exc:
            self.fail(event.start_mark, f"{str(event.value)[:20]}...: {exc}")

    def _typed(self, event: Any) -> Scalar:
        text: str = event.value  # a scalar's text as written
        if event.tag not in (None, "!"):
            kind = _CORE_TAGS.get(event.tag)
            if kind is None or kind not in (str, int, float, bool, type(None)):
                self.fail(event.start_mark, f"tag '{event.tag}' is not allowed in a spec; only plain YAML values are")
            value = resolve_plain_scalar(event.value)
            if kind is str:
                return text
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)  # '!!float 1' is 1.0 in the YAML 1.2 core schema
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                self.fail(event.start_mark, f"{event.value!r} is not a valid {kind.__name__}")
            return value
        if event.style is None and event.implicit[0]:
            return resolve_plain_scalar(text)
        return text

    def key(self, event: Any, frame: _Frame) -> None:
        if event.tag not in (None, "!", "tag:yaml.org,2002:str"):
            self.fail(event.start_mark, f"tag '{event.tag}' is not allowed in a spec; only plain YAML values are")
        key = self.scalar_value(event)
        if isinstance(key, float) or key is None or isinstance(key, bool):
            key = event.value  # keys stay as written: 'no', 'null', '1.0'
        pos = Position(event.start_mark.line + 1, event.start_mark.column + 1)
        if key in frame.first_key_line:
            first = frame.first_key_line[key]
            self.fail(
                event.start_mark,
                f"duplicate key '{key}' (first at line {first})",
                "YAML keeps only one of them; merge the two entries",
            )
        frame.first_key_line[key] = pos.line
        frame.pending_key = key
        frame.pending_key_pos = pos
        self.key_positions[frame.path + (key,)] = pos

    def place(self, value: object, mark: Any) -> None:
        pos = Position(mark.line + 1, mark.column + 1)
        if not self.stack:
            self.root, self.root_set = value, True
            self.positions[()] = pos
            return
        frame = self.stack[-1]
        path = self.child_path()
        self.positions.setdefault(path, pos)
        if isinstance(frame.container, list):
            frame.container.append(value)
        else:
            frame.container[frame.pending_key] = value
            frame.pending_key = None

    # -- collections ------------------------------------------------------------------------
    def start_collection(self, event: Any) -> None:
        frame = self.stack[-1] if self.stack else None
        if frame is not None and isinstance(frame.container, dict) and frame.pending_key is None:
            self.fail(event.start_mark, "a mapping key must be a plain value, not a list or mapping")
        is_map = isinstance(event, yaml.MappingStartEvent)
        self.check_tag(event, dict if is_map else list)
        if len(self.stack) >= MAX_DEPTH:
            self.fail(event.start_mark, f"nesting deeper than {MAX_DEPTH} levels; refusing the spec")
        self.count_node(event.start_mark)
        pos = Position(event.start_mark.line + 1, event.start_mark.column + 1)
        path = self.child_path()
        self.positions.setdefault(path, pos)
        container: dict[Any, Any] | list[Any] = {} if is_map else []
        if event.anchor:
            self.open_anchors.add(event.anchor)
        frame = _Frame(container, path, event.anchor, pos)
        frame.nodes_at_start = self.nodes
        self.stack.append(frame)

    def end_collection(self) -> None:
        frame = self.stack.pop()
        size = self.nodes - frame.nodes_at_start + 1
        if frame.anchor:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (frame.container, size)
        if not self.stack:
            self.root, self.root_set = frame.container, True
            self.positions[()] = frame.start
            return
        parent = self.stack[-1]
        if isinstance(parent.container, list):
            parent.container.append(frame.container)
        else:
            parent.container[parent.pending_key] = frame.container
            parent.pending_key = None

    def alias(self, event: Any) -> None:
        frame = self.stack[-1] if self.stack else None
        if frame is not None and isinstance(frame.container, dict) and frame.pending_key is None:
            self.fail(event.start_mark, "an alias cannot be used as a mapping key")
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            self.fail(event.start_mark, f"more than {MAX_ALIASES} aliases; refusing the spec")
        if event.anchor in self.open_anchors:
            self.fail(event.start_mark, f"cyclic alias '*{event.anchor}' refers to a value that contains it")
        if event.anchor not in self.anchors:
            self.fail(event.start_mark, f"unknown alias '*{event.anchor}'")
        value, size = self.anchors[event.anchor]
        self.count_node(event.start_mark, size)
        self.place(_deep_copy(value), event.start_mark)


def _deep_copy(value: object) -> object:
    """Copy aliased data so later edits of one use cannot change another (bounded by MAX_NODES)."""
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _looks_like_a_model(name: str, raw: bytes) -> bool:
    """An ONNX model given where a spec goes: its name, or a ModelProto's first field (ir_version, tag 0x08)."""
    return name.lower().endswith((".onnx", ".ort")) or raw[:1] == b"\x08"
