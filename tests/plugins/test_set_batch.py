"""set_batch's basics: which axes carry the batch, and real models through the command line, each checked by running the result in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from set_batch_kit import assert_declared_shapes_hold, per_sample, rand, run, set_batch

from helpers import graph_model, tensor_info, write_spec
from patchspec.errors import PatchError
from patchspec.shapes.annotations import read_dims


# -- detection -------------------------------------------------------------------------------------------
def lstm_state_model():
    """x [batch, 4] and h [2, batch, 4]: the batch sits on axis 1 of the state."""
    nodes = [
        helper.make_node("Transpose", ["h"], ["ht"], perm=[1, 0, 2]),
        helper.make_node("ReduceSum", ["ht", "axes1"], ["hs"], keepdims=0),
        helper.make_node("Add", ["x", "hs"], ["y"]),
    ]
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes1")
    return graph_model(
        nodes,
        [tensor_info("x", ["batch", 4]), tensor_info("h", [2, "batch", 4])],
        [tensor_info("y", ["batch", 4])],
        [axes],
    )


def test_batch_found_on_axis_1_of_an_lstm_state():
    original = lstm_state_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=3)
    assert result.modified and "x[0]" in result.summary and "h[1]" in result.summary
    assert read_dims(model.graph.input[1]) == [2, 3, 4]
    assert read_dims(model.graph.output[0]) == [3, 4]
    feeds = {"x": rand(3, 4), "h": rand(2, 3, 4, seed=1)}
    np.testing.assert_allclose(run(model, feeds)[0], run(original, feeds)[0], rtol=1e-6)


@pytest.mark.parametrize("batch_dim", [-1, None])
def test_batch_declared_minus_one_or_unnamed(batch_dim):
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [batch_dim, 3])], [tensor_info("y", [batch_dim, 3])]
    )
    result = set_batch(model, size="N")
    assert result.modified
    assert read_dims(model.graph.input[0]) == ["N", 3]
    assert read_dims(model.graph.output[0]) == ["N", 3]
    assert run(model, {"x": rand(5, 3)})[0].shape == (5, 3)


def test_an_exporters_minus_one_beside_the_batch_is_written_unknown():
    """paddle2onnx declares [-1, 3, -1, -1]: the -1s past the batch were left as dim_value -1."""
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [-1, 3, -1])], [tensor_info("y", None)]
    )
    set_batch(model, size=4)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[:2]] == [4, 3]
    assert not dims[2].HasField("dim_value") and not dims[2].HasField("dim_param")


def two_names_model():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    return graph_model(nodes, [tensor_info("a", ["B1", 4]), tensor_info("b", ["B2", 4])], [tensor_info("y", ["B1", 4])])


def test_one_batch_under_several_names_is_set_where_the_graph_proves_it_or_listed():
    detected = two_names_model()
    assert "a[0], b[0]" in set_batch(detected, size=2).summary  # a + b runs only with B2 the batch
    assert read_dims(detected.graph.input[1]) == [2, 4]
    listed = two_names_model()
    result = set_batch(listed, size=2, inputs=["a", "b"])
    assert "a[0], b[0]" in result.summary
    assert read_dims(listed.graph.input[1]) == [2, 4] and read_dims(listed.graph.output[0]) == [2, 4]
    feeds = {"a": rand(2, 4), "b": rand(2, 4, seed=1)}
    np.testing.assert_allclose(run(listed, feeds)[0], feeds["a"] + feeds["b"], rtol=1e-6)


def test_inputs_mapping_gives_the_axis():
    model = lstm_state_model()
    result = set_batch(model, size=5, inputs={"x": 0, "h": 1})
    assert read_dims(model.graph.input[0]) == [5, 4] and read_dims(model.graph.input[1]) == [2, 5, 4]
    assert result.modified


def test_unknown_input_name_fails_with_close_matches():
    with pytest.raises(PatchError) as caught:
        set_batch(two_names_model(), size=2, inputs=["aa"])
    assert "'aa'" in str(caught.value) and "did you mean 'a'" in str(caught.value)


def test_axis_out_of_range_fails():
    with pytest.raises(PatchError, match="axis 7"):
        set_batch(two_names_model(), size=2, inputs={"a": 7})


def test_no_op_reports_unmodified_and_leaves_bytes_identical():
    for batch in (4, "N"):
        model = graph_model(
            [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [batch, 3])], [tensor_info("y", [batch, 3])]
        )
        before = model.SerializeToString()
        result = set_batch(model, size=batch)
        assert not result.modified
        assert model.SerializeToString() == before


# -- real models through the command line ----------------------------------------------------------------------
PPOCR_SHAPES = {"det": [4, 3, 96, 128], "rec": [4, 3, 48, 320], "cls": [4, 3, 48, 192]}


@pytest.mark.parametrize("kind", ["det", "rec", "cls"])
@pytest.mark.parametrize("size", [4, "N"])
def test_ppocr_rebatched_matches_original(kind, size, ppocr_models, run_cli, tmp_path):
    spec = write_spec(
        tmp_path,
        f"patchspec: 1\nmodel: {ppocr_models[kind]}\noutput: out.onnx\n"
        f"patches:\n  - set_batch: {size}\nverify:\n  - check: {{}}\n",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    patched = onnx.load(str(tmp_path / "out.onnx"))
    assert read_dims(patched.graph.input[0])[0] == size
    x = rand(*PPOCR_SHAPES[kind])
    original = onnx.load(str(ppocr_models[kind]))
    for got, want in zip(run(patched, {"x": x}), per_sample(original, {"x": x}, ["x"])):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert_declared_shapes_hold(patched, {"x": x}, ignore_params=("?",))


def loop_outer_scope_model():
    """x [1, 6]; a Loop body reads x from the outer scope and reshapes it with [1, 2, 3]."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node(
                "Constant", [], ["body_shape"], value=numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int64), "v")
            ),
            helper.make_node("Reshape", ["x", "body_shape"], ["scan_out"], name="body_reshape"),
        ],
        "body",
        [tensor_info("i", [], TensorProto.INT64), tensor_info("cond_in", [], TensorProto.BOOL)],
        [tensor_info("cond_out", [], TensorProto.BOOL), tensor_info("scan_out", [1, 2, 3])],
    )
    trips = numpy_helper.from_array(np.array(2, dtype=np.int64), "trips")
    go = numpy_helper.from_array(np.array(True), "go")
    nodes = [helper.make_node("Loop", ["trips", "go"], ["y"], body=body)]
    return graph_model(nodes, [tensor_info("x", [1, 6])], [tensor_info("y", [2, 1, 2, 3])], [trips, go])


def test_loop_body_reading_outer_scope_is_rewritten():
    original = loop_outer_scope_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=3)
    assert "1 shape constant rewritten" in result.summary, result.details
    x = rand(3, 6)
    got = run(model, {"x": x})[0]
    want = np.concatenate([run(original, {"x": x[i : i + 1]})[0] for i in range(3)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert_declared_shapes_hold(model, {"x": x})


def test_symbolic_name_already_used_by_another_axis_is_refused():
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor_info("x", [1, "T"])], [tensor_info("y", [1, "T"])]
    )
    with pytest.raises(PatchError, match="'T' already names x\\[1\\]"):
        set_batch(model, size="T")
