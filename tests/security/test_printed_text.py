"""Everything printed from a model or a spec is escaped (issue 32, item 8): no escape sequence, carriage
return or Unicode line break of the model's reaches the terminal, and no newline of the model's starts
a line (a GitHub Actions ``::error::`` line from a ``producer_name``)."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from helpers import graph_model, tensor_info
from patchspec.printable import escape_controls, printable

HOSTILE = "x\n::error::pwned\r\x1b[2J\x1b]0;title\x07\x9b31m\u2028\u2029end"


def hostile_model(path) -> None:
    model = graph_model(
        [helper.make_node("Relu", ["in" + HOSTILE], ["out" + HOSTILE], name="n" + HOSTILE)],
        [tensor_info("in" + HOSTILE, [1, 4])],
        [tensor_info("out" + HOSTILE, [1, 4])],
    )
    model.producer_name = "tool" + HOSTILE
    model.producer_version = HOSTILE
    model.doc_string = HOSTILE
    entry = model.metadata_props.add()
    entry.key, entry.value = "k" + HOSTILE, HOSTILE
    onnx.save(model, path)


def assert_inert(text: str) -> None:
    for char in ("\x1b", "\r", "\x07", "\x9b", "\u2028", "\u2029"):
        assert char not in text, repr(char)
    assert not any(line.startswith("::error") for line in text.splitlines()), text


@pytest.mark.parametrize("args", [[], ["--all"], ["--suggest"], ["--json"]])
def test_inspect_prints_a_hostile_model_inert(tmp_path, run_cli, args):
    hostile_model(tmp_path / "m.onnx")
    result = run_cli("inspect", tmp_path / "m.onnx", *args)
    assert result.exit_code in (0, 1, 4), result.output
    assert_inert(result.stdout)
    assert_inert(result.stderr)


def test_init_on_a_hostile_model_prints_and_writes_inert_text(tmp_path, run_cli):
    hostile_model(tmp_path / "m.onnx")
    (tmp_path / ".git").mkdir()
    result = run_cli("init", tmp_path / "m.onnx", "--batch", "2", "--output", tmp_path / "s.yaml")
    assert_inert(result.stdout)
    assert_inert(result.stderr)


def test_printable_keeps_newlines_and_escapes_the_rest():
    assert printable("a\nb\tc\x1b[0m\r") == "a\nb\tc\\u001b[0m\\r"
    assert escape_controls("a\nb\u2028") == "a\\nb\\u2028"
