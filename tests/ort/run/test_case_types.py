"""Run cases for every ONNX element type (issue 34, item 4): a STRING input takes strings from
``value`` or a ``.npy`` of str, BFLOAT16 is made through ml_dtypes, and the checks say what is wrong
with a case before a model is read."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from patchspec.ort.bfloat16 import BFLOAT16
from patchspec.ort.run.case_inputs import DTYPES, case_input_problems, is_text, value_shape
from patchspec.ort.run.feeds import HAS_BFLOAT16, generate, input_array, make_feeds, text_array
from patchspec.ort.run_failure import RunFailure
from patchspec.ort.sessions import TensorDecl

STRING_DECL = TensorDecl("letters", None, ("N",))  # onnxruntime's string inputs have no numpy dtype


def problems(item):
    return [message for _, message in case_input_problems(item, ("cases", 0, "inputs", "x"))]


def test_string_values_are_a_shape_of_their_own_or_repeated_to_fill_one():
    assert value_shape(["a", "b"]) == (2,) and value_shape([["a"], ["b"]]) == (2, 1) and value_shape("a") == ()
    assert is_text(["a", "b"]) and is_text([["a"]]) and not is_text([1, 2]) and not is_text(3)
    assert problems({"value": ["a", "b", "c"]}) == []
    assert problems({"value": ["a", "b"], "shape": [4, 1]}) == []


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"value": ["a", 1]}, "all numbers or all strings"),
        ({"value": [["a"], ["b", "c"]]}, "rectangular"),
        ({"value": ["a"], "dtype": "int64"}, "a 'value' of strings feeds a STRING input: drop 'dtype'"),
        ({"value": [1, 2], "shape": [2]}, "a list 'value' has its own shape"),
        ({"shape": [2], "dtype": "str"}, "unknown dtype 'str'"),
    ],
)
def test_a_bad_string_case_is_said_before_any_model_is_read(item, says):
    assert any(says in message for message in problems(item)), problems(item)


def test_text_arrays_are_objects_that_cycle_over_the_shape():
    assert text_array(["a", "b", "c"], [4]).tolist() == ["a", "b", "c", "a"]
    assert text_array("z", [2, 1]).tolist() == [["z"], ["z"]]
    assert text_array([["a"], ["b"]]).shape == (2, 1) and text_array(["a"]).dtype == object


def test_a_string_input_is_fed_from_its_value_or_a_file_of_str(tmp_path):
    assert input_array(STRING_DECL, {"value": ["x", "y"], "shape": [3]}, 0, tmp_path.joinpath).tolist() == [
        "x",
        "y",
        "x",
    ]
    np.save(tmp_path / "letters.npy", np.array(["q", "r"]))
    fed = input_array(STRING_DECL, {"file": "letters.npy"}, 0, tmp_path.joinpath)
    assert fed.dtype == object and fed.tolist() == ["q", "r"]


def test_a_string_input_without_strings_says_how_to_give_them(tmp_path):
    with pytest.raises(RunFailure, match="STRING input") as raised:
        input_array(STRING_DECL, [4], 0, tmp_path.joinpath)
    assert 'value: ["a", "b", "a", "c"]' in (raised.value.hint or "")
    np.save(tmp_path / "numbers.npy", np.arange(3))
    with pytest.raises(RunFailure, match="holds int64"):
        input_array(STRING_DECL, {"file": "numbers.npy"}, 0, tmp_path.joinpath)
    np.save(tmp_path / "short.npy", np.array(["a"]))
    with pytest.raises(RunFailure, match=r"expected \[2\]"):
        input_array(STRING_DECL, {"file": "short.npy", "shape": [2]}, 0, tmp_path.joinpath)


NEEDS_ML_DTYPES = pytest.mark.skipif(
    not HAS_BFLOAT16, reason="this onnx has no ml_dtypes: bfloat16 is refused (tested below)"
)


@pytest.mark.parametrize(
    "dtype", ["float16", "float64", "uint8", "bool", "int8", pytest.param("bfloat16", marks=NEEDS_ML_DTYPES)]
)
def test_every_numeric_type_is_generated_in_its_own_type(dtype):
    array = generate((2, 3), dtype, "random", 0)
    assert array.shape == (2, 3)
    assert array.dtype == (BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype))
    assert dtype in DTYPES


@NEEDS_ML_DTYPES
def test_bfloat16_is_read_from_a_float32_file_and_from_a_value(tmp_path):
    decl = TensorDecl("x", "bfloat16", (2,))
    np.save(tmp_path / "x.npy", np.array([1.5, 2.0], np.float32))
    assert input_array(decl, {"file": "x.npy"}, 0, tmp_path.joinpath).dtype == BFLOAT16
    assert input_array(decl, {"value": 1.5, "shape": [2]}, 0, tmp_path.joinpath).dtype == BFLOAT16


def test_make_feeds_feeds_strings_beside_numbers(tmp_path):
    declared = [STRING_DECL, TensorDecl("n", "float32", ("N", 2))]
    feeds = make_feeds({"letters": {"value": ["a"], "shape": [2]}, "n": [2, 2]}, declared, tmp_path.joinpath)
    assert feeds["letters"].tolist() == ["a", "a"] and feeds["n"].dtype == np.float32


def test_onnxruntime_runs_a_string_feed():
    import onnxruntime as ort

    node = helper.make_node("Identity", ["s"], ["t"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("s", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, ["N"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"s": text_array(["a", "b"], [3])})
    assert list(out) == ["a", "b", "a"]


def test_bfloat16_without_ml_dtypes_is_refused_not_truncated(tmp_path, monkeypatch):
    """onnx 1.17 (the oldest supported) stores bfloat16 as uint16: 1.5 would have been fed as 1."""
    import patchspec.ort.run.feeds as feeds

    monkeypatch.setattr(feeds, "HAS_BFLOAT16", False)
    with pytest.raises(RunFailure, match="bfloat16 needs an onnx that uses ml_dtypes"):
        input_array(TensorDecl("x", "bfloat16", (2,)), {"value": 1.5, "shape": [2]}, 0, tmp_path.joinpath)
    with pytest.raises(RunFailure, match="bfloat16 needs an onnx"):
        generate((2,), "bfloat16", "random", 0)


def test_an_input_over_the_callers_limit_too_names_both_fixes_in_one_round() -> None:
    """Over 'max_elements' and over what --limit allows: the message names both, so raising the spec's
    limit does not fail a second time asking for --limit."""
    from patchspec.ort.run.case_inputs import size_problems

    (problem,) = size_problems([2**20, 2**8], ("x",), 2**27)
    assert "'max_elements' to 268,435,456" in problem[1]
    assert "--limit max-elements=268435456" in problem[1], problem
    (within,) = size_problems([2**20, 2**6], ("x",), 2**25)  # over the spec's limit only
    assert "'max_elements' to 67,108,864" in within[1] and "--limit" not in within[1], within


def test_a_value_list_that_does_not_fill_the_shape_is_a_run_failure_not_a_crash(tmp_path) -> None:
    """init's own runs of the original may ask for a list of sizes at another shape (its batch ties)."""
    with pytest.raises(RunFailure, match=r"input 'size': value \[64, 64\] cannot make a int64 of shape \[5\]"):
        input_array(TensorDecl("size", "int64", ("dim",)), {"value": [64, 64], "shape": [5]}, 0, tmp_path.joinpath)
