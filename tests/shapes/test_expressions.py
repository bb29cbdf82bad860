"""The shape expression language: parser, positions of errors, reference evaluator."""

import numpy as np
import pytest

from helpers import write_spec
from patchspec.shapes import expressions as ex


def value_of(text, shapes=None, arrays=None):
    return ex.evaluate_with_arrays(ex.parse(text), shapes or {}, arrays or {})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 // -2", -4),
        ("7 % 3", 1),
        ("-7 % 3", 2),
        ("7 % -3", -2),
        ("--5", 5),
        ("-(2 + 3)", -5),
        ("min(3, -4)", -4),
        ("max(3, -4)", 3),
        ("min(max(1, 2), 3) * 2", 4),
        ("2 * -3", -6),
    ],
)
def test_operators_follow_python_integer_semantics(text, expected):
    assert value_of(text) == expected
    assert ex.fold_constants(ex.parse(text)) == expected


def test_dim_and_value_read_the_given_tensors():
    arrays = {"grid_thw": np.array([[1, 22, 30]])}
    shapes = {"x": [4, 3, 640]}
    assert value_of("dim(x, 0) * dim(x, -1)", shapes) == 2560
    assert value_of("value(grid_thw, 0, 1) // 2", arrays=arrays) == 11
    assert value_of("value(grid_thw, -1, -1)", arrays=arrays) == 30


@pytest.mark.parametrize(
    "text, name",
    [
        ("dim(onnx::Reshape_1/x.y:0, 0)", "onnx::Reshape_1/x.y:0"),
        ("dim('input 1', 0)", "input 1"),
        ('dim("a,b", 1)', "a,b"),
        ("dim(456, 0)", "456"),
        ("dim(x-y, 0)", "x-y"),
    ],
)
def test_tensor_names_bare_or_quoted(text, name):
    refs = ex.tensor_refs(ex.parse(text))
    assert [r.tensor for r in refs] == [name]
    canonical = ex.to_text(ex.parse(text))
    assert ex.to_text(ex.parse(canonical)) == canonical  # names survive quoting


@pytest.mark.parametrize(
    "text, column, fragment",
    [
        ("dim(x, 0) * value(g, 0, 1) //", 30, "expected an expression after '//'"),
        ("1 +", 4, "expected an expression after '+'"),
        ("(1 + 2", 7, "expected ')'"),
        ("1 / 2", 3, "written '//'"),
        ("__import__('os')", 1, "unknown function '__import__'"),
        ("mim(1, 2)", 1, "did you mean 'min'"),
        ("min(1)", 1, "takes 2 arguments, got 1"),
        ("max(1, 2, 3)", 1, "takes 2 arguments, got 3"),
        ("dim(x)", 1, "dim() takes 2 arguments"),
        ("dim(x, 0, 1)", 1, "dim() takes 2 arguments"),
        ("value(x)", 1, "at least one index"),
        ("dim(x, a)", 8, "expected an axis"),
        ("batch * 2", 1, "unknown name 'batch'"),
        ("3 // 0", 3, "division by zero"),
        ("1 2", 3, "unexpected '2'"),
        ("", 1, "empty expression"),
        ("dim('x, 0)", 5, "unterminated"),
        ("2 ** 3", 4, "expected an expression after '*'"),
        ("1 $ 2", 3, "unexpected character '$'"),
        ("2 * 99999999999999999999", 5, "does not fit in int64"),
        ("4611686018427387904 * 2", 21, "does not fit in int64"),
    ],
)
def test_errors_name_the_column(text, column, fragment):
    with pytest.raises(ex.ExpressionError) as caught:
        ex.fold_constants(ex.parse(text))
    assert caught.value.column == column, str(caught.value)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith(f"col {column}: ")


def test_check_returns_message_or_none():
    assert ex.check("dim(x, 0) // 2") is None
    assert ex.check("1 //") == "col 5: expected an expression after '//'"
    assert ex.check("7 % (2 - 2)").startswith("col 3: division by zero")


def test_nothing_is_executed(monkeypatch):
    import builtins

    monkeypatch.setattr(builtins, "eval", lambda *a: pytest.fail("eval called"))
    monkeypatch.setattr(builtins, "exec", lambda *a: pytest.fail("exec called"))
    assert ex.check("__import__('os').system('false')").startswith("col 1: unknown function")


def test_validate_reports_expression_errors_with_positions(tmp_path, run_cli):
    spec = write_spec(
        tmp_path,
        """patchspec: 1
model: m.onnx
output: out.onnx
patches:
  - replace_initializer:
      initializer: shape
      shape: [1, "dim(x, 0) * value(g, 0, 1) //", "__import__('os')"]
""",
    )
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "shape.1: col 30: expected an expression after '//'" in result.output
    assert "shape.2: col 1: unknown function '__import__'" in result.output
    assert ":7:" in result.output
