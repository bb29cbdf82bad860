"""set_batch on the traps of real exports, each checked by running the result in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.errors import PatchError
from patchspec.shapes.annotations import read_dims
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch
from scrfd_like import fpn_model


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run(model, feeds):
    return session(model).run(None, feeds)


def per_sample(model, feeds, batched):
    """Run ``model`` once per sample of the ``batched`` inputs' axis 0; join the outputs on axis 0."""
    count = len(next(iter(feeds[name] for name in batched)))
    runs = [run(model, {k: (v[i : i + 1] if k in batched else v) for k, v in feeds.items()}) for i in range(count)]
    return [np.concatenate(parts) for parts in zip(*runs)]


def assert_declared_shapes_hold(model, feeds, ignore_params=()):
    """Every annotated tensor (outputs and value_info): fixed dims equal, one size per dim_param."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    probe.graph.output.extend(vi for vi in probe.graph.value_info if vi.name not in outputs)
    names = [o.name for o in probe.graph.output]
    results = dict(zip(names, run(probe, feeds)))
    sizes = {}
    for info in [*probe.graph.input, *probe.graph.output]:
        actual = feeds[info.name].shape if info.name in feeds else results[info.name].shape
        declared = read_dims(info)
        assert declared is None or len(declared) == len(actual), (info.name, declared, actual)
        for want, got in zip(declared or [], actual):
            if isinstance(want, int):
                assert want == got, f"{info.name} declares {declared}, is {list(actual)}"
            elif isinstance(want, str) and want not in ignore_params:
                sizes.setdefault(want, set()).add(got)
    shared = {name: found for name, found in sizes.items() if len(found) > 1}
    assert not shared, f"dim_params bound to different sizes: {shared}"


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


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


def two_names_model():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    return graph_model(nodes, [tensor_info("a", ["B1", 4]), tensor_info("b", ["B2", 4])], [tensor_info("y", ["B1", 4])])


def test_one_batch_under_several_names_needs_an_inputs_list():
    detected = two_names_model()
    assert "a[0]" in set_batch(detected, size=2).summary
    assert read_dims(detected.graph.input[1]) == ["B2", 4]  # another name: not the batch by default
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


# -- shape constants -------------------------------------------------------------------------------------
def flatten_with_bias_model():
    """x [1,3,2,2] + bias reshaped to [1,3,1,1] (a leading 1 that is NOT a batch), flattened to [1,-1].

    The shape constants are Constant nodes, as in PP-OCR.
    """
    nodes = [
        helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")),
        helper.make_node(
            "Constant", [], ["bias_shape"], value=numpy_helper.from_array(np.array([1, 3, 1, 1], dtype=np.int64), "s")
        ),
        helper.make_node(
            "Constant", [], ["flat"], value=numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "f")
        ),
        helper.make_node("Reshape", ["bias", "bias_shape"], ["bias4"], name="bias_reshape"),
        helper.make_node("Add", ["x", "bias4"], ["xb"]),
        helper.make_node("Reshape", ["xb", "flat"], ["y"], name="flatten"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 3, 2, 2])], [tensor_info("y", [1, 12])])


def test_flatten_constant_rewritten_bias_reshape_left_alone():
    original = flatten_with_bias_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert "1 shape constant rewritten" in result.summary and "undecided" not in result.summary
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t).tolist()
        for n in model.graph.node
        if n.op_type == "Constant"
    }
    assert constants["bias_shape"] == [1, 3, 1, 1]
    assert constants["flat"] == [4, -1]
    assert read_dims(model.graph.output[0]) == [4, 12]
    x = rand(4, 3, 2, 2)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-6)


def test_symbolic_batch_writes_copy_dim():
    model = flatten_with_bias_model()
    set_batch(model, size="N")
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t).tolist()
        for n in model.graph.node
        if n.op_type == "Constant"
    }
    assert constants["flat"] == [0, -1]
    assert read_dims(model.graph.output[0]) == ["N", 12]
    assert run(model, {"x": rand(3, 3, 2, 2)})[0].shape == (3, 12)


def shared_shape_model():
    """One initializer [1, 6] reshapes both x (batch) and a weight (no batch)."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape16"], ["xr"], name="x_reshape"),
        helper.make_node("Reshape", ["w", "shape16"], ["wr"], name="w_reshape"),
        helper.make_node("Add", ["xr", "wr"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([1, 6], dtype=np.int64), "shape16"),
        numpy_helper.from_array(np.arange(6, dtype=np.float32), "w"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 2, 3])], [tensor_info("y", [1, 6])], inits)


def test_shared_constant_is_copied_and_only_that_use_rewired():
    original = shared_shape_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=3)
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    assert inits["shape16"] == [1, 6] and inits["shape16_batch_3"] == [3, 6]
    assert [n.input[1] for n in model.graph.node[:2]] == ["shape16_batch_3", "shape16"]
    assert any("shared" in d for d in result.details)
    x = rand(3, 2, 3)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-6)


def test_expand_of_old_static_batch_rewritten():
    shape = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "to")
    model = graph_model(
        [helper.make_node("Expand", ["x", "to"], ["y"])],
        [tensor_info("x", [2, 1])],
        [tensor_info("y", [2, 3])],
        [shape],
    )
    result = set_batch(model, size=5)
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [5, 3], result.details
    assert run(model, {"x": rand(5, 1)})[0].shape == (5, 3)


def test_runtime_computed_shape_left_alone():
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero1"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1"),
    ]
    model = graph_model(nodes, [tensor_info("x", [1, 2, 3])], [tensor_info("y", [1, 6])], inits)
    before = {t.name: t.SerializeToString() for t in model.graph.initializer}
    result = set_batch(model, size=4)
    assert "0 shape constants rewritten" in result.summary and "undecided" not in result.summary
    assert {t.name: t.SerializeToString() for t in model.graph.initializer} == before
    assert run(model, {"x": rand(4, 2, 3)})[0].shape == (4, 6)


def test_batch_folded_into_an_element_is_the_leading_factor():
    """[1, 2, 3] -> [2, 1, 3]: element 0 is 2 per sample, so 2 x batch at batch 4."""
    shape = numpy_helper.from_array(np.array([2, 1, 3], dtype=np.int64), "odd")
    original = graph_model(
        [helper.make_node("Reshape", ["x", "odd"], ["y"], name="odd_reshape")],
        [tensor_info("x", [1, 2, 3])],
        [tensor_info("y", [2, 1, 3])],
        [shape],
    )
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert "1 shape constant rewritten" in result.summary, result.details
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [8, 1, 3]
    x = rand(4, 2, 3)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0])
    assert read_dims(model.graph.output[0]) == [8, 1, 3]


def test_unprovable_constant_that_cannot_hold_the_new_batch_is_refused_without_lines_that_fail():
    """Exported at batch 2, [2, 6] -> [3, 4] mixes the two samples: no element is the batch, and at
    batch 4 the 24 elements do not fit [3, 4]. No replace_initializer line would work (["dim(x, 0)", 4]
    holds 16 of them), so none is printed."""
    shape = numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "odd")
    model = graph_model(
        [helper.make_node("Reshape", ["x", "odd"], ["y"], name="odd_reshape")],
        [tensor_info("x", [2, 6])],
        [tensor_info("y", [3, 4])],
        [shape],
    )
    with pytest.raises(PatchError) as caught:
        set_batch(model, size=4)
    text = str(caught.value)
    assert "Reshape 'odd_reshape' cannot run at batch 4 with its constant shape [3, 4]" in text
    assert "no element of its shape can be proved to be the batch" in text and "replace_initializer:" not in text
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [3, 4]


def if_outer_scope_model():
    """x [1, 6]; If reads x from the outer scope and reshapes it with constants baked at batch 1."""

    def branch(name, target):
        const = helper.make_node(
            "Constant", [], [f"{name}_shape"], value=numpy_helper.from_array(np.array(target, dtype=np.int64), "v")
        )
        reshape = helper.make_node("Reshape", ["x", f"{name}_shape"], [f"{name}_out"], name=f"{name}_reshape")
        return helper.make_graph([const, reshape], name, [], [tensor_info(f"{name}_out", target)])

    nodes = [
        helper.make_node(
            "If", ["cond"], ["y"], then_branch=branch("then", [1, 2, 3]), else_branch=branch("else", [1, 3, 2])
        )
    ]
    return graph_model(
        nodes,
        [tensor_info("x", [1, 6]), tensor_info("cond", [], TensorProto.BOOL)],
        [tensor_info("y", [1, None, None])],
    )


def test_if_branches_reading_outer_scope_are_rewritten():
    original = if_outer_scope_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=3, inputs=["x"])
    assert "2 shape constants rewritten" in result.summary, result.details
    x = rand(3, 6)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, ["x"])[0], rtol=1e-6)
        assert_declared_shapes_hold(model, feeds)


# -- the '?'-annotated multi-scale model ----------------------------------------------------------------------
@pytest.mark.parametrize("hw", [(64, 64), (64, 96)])
def test_question_mark_fpn_declares_nothing_false(hw):
    original = fpn_model(spatial="?", batch="?")
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert any("also names axes 2, 3" in d for d in result.details)
    assert read_dims(model.graph.input[0]) == [4, 3, "?", "?"]
    x = rand(4, 3, *hw)
    # the input itself keeps '?' on height and width (set_batch says so): the rest must be true
    assert_declared_shapes_hold(model, {"input.1": x}, ignore_params=("?",))
    reference = fpn_model(spatial=None, batch=None, annotate=False)  # the '?' original cannot run at all
    for got, want in zip(run(model, {"input.1": x}), per_sample(reference, {"input.1": x}, ["input.1"])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


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


# -- what is not the batch is never touched ---------------------------------------------------------------------
def _const(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def attention_model():
    """A traced multi-head attention at batch 1: heads (12) and head size (4) must stay, the batch folds in."""
    nodes = [
        helper.make_node("Reshape", ["x", "split_heads"], ["h"], name="split_heads"),
        helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ht", "fold"], ["folded"], name="fold_batch_heads"),
        helper.make_node("MatMul", ["folded", "w"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "folded"], ["mixed"]),
        helper.make_node("Reshape", ["mixed", "unfold"], ["uh"], name="unfold_heads"),
        helper.make_node("Transpose", ["uh"], ["ut"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ut", "merge"], ["y"], name="merge_heads"),
    ]
    inits = [
        _const("split_heads", [1, 5, 12, 4]),
        _const("fold", [12, 5, 4]),
        _const("unfold", [1, 12, 5, 4]),
        _const("merge", [1, 5, 48]),
        numpy_helper.from_array(rand(4, 5, seed=3), "w"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 5, 48])], [tensor_info("y", [1, 5, 48])], inits)


@pytest.mark.parametrize("size", [3, "N"])
def test_attention_head_constants_stay_and_the_batch_folds_in(size):
    original = attention_model()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=size)
    assert "4 shape constants rewritten" in result.summary and "undecided" not in result.summary, result.details
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    if size == 3:
        assert inits["split_heads"] == [3, 5, 12, 4] and inits["fold"] == [36, 5, 4]
        assert inits["unfold"] == [3, 12, 5, 4] and inits["merge"] == [3, 5, 48]
    else:
        assert inits["split_heads"] == [-1, 5, 12, 4] and inits["fold"] == [-1, 5, 4]
    x = rand(3, 5, 48)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-5)
    assert_declared_shapes_hold(model, {"x": x})


def test_a_sequence_length_of_one_is_not_the_batch():
    """x [1, 1, 64] (batch 1, one token) -> [1, 1, 8, 8]: element 0 is the batch, element 1 the token."""
    original = graph_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
        [tensor_info("x", [1, 1, 64])],
        [tensor_info("y", [1, 1, 8, 8])],
        [_const("s", [1, 1, 8, 8])],
    )
    model = onnx.ModelProto()
    model.CopyFrom(original)
    set_batch(model, size=4)
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [4, 1, 8, 8]
    seq_first = graph_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
        [tensor_info("x", [1, 1, 64])],
        [tensor_info("y", [1, 1, 8, 8])],
        [_const("s", [1, 1, 8, 8])],
    )
    set_batch(seq_first, size=4, inputs={"x": 1})
    assert numpy_helper.to_array(seq_first.graph.initializer[0]).tolist() == [1, 4, 8, 8]


def test_loop_body_constant_tiled_by_the_batch_is_left_alone():
    """The body builds [1, k, 1] from the iteration number; the batch comes in by Tile outside the Loop."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Reshape", ["fi", "token_shape"], ["token"], name="body_reshape"),
        ],
        "body",
        [tensor_info("i", [], TensorProto.INT64), tensor_info("cond_in", [], TensorProto.BOOL)],
        [tensor_info("cond_out", [], TensorProto.BOOL), tensor_info("token", [1, 1, 1])],
        [_const("token_shape", [1, -1, 1])],
    )
    nodes = [
        helper.make_node("Loop", ["trips", "go"], ["tokens"], body=body),  # [3, 1, 1, 1]
        helper.make_node("Reshape", ["tokens", "flat"], ["t3"], name="to_row"),  # [1, 3, 1]
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
        helper.make_node("Concat", ["b1", "one", "one"], ["reps"], axis=0),
        helper.make_node("Tile", ["t3", "reps"], ["tiled"]),
        helper.make_node("Add", ["x", "tiled"], ["y"]),
    ]
    inits = [
        _const("trips", 3),
        numpy_helper.from_array(np.array(True), "go"),
        _const("flat", [1, -1, 1]),
        _const("zero", 0),
        _const("axes0", [0]),
        _const("one", [1]),
    ]
    original = graph_model(nodes, [tensor_info("x", [1, 3, 2])], [tensor_info("y", [1, 3, 2])], inits)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=4)
    assert "0 shape constants rewritten" in result.summary and "undecided" not in result.summary, result.details
    x = rand(4, 3, 2)
    np.testing.assert_allclose(run(model, {"x": x})[0], per_sample(original, {"x": x}, ["x"])[0], rtol=1e-6)


# -- static-batch detectors: a Resize neck sized from Shape, heads flattened with baked constants -----------------
def resize_neck_detector(batch=1, opset=13):
    """YOLOX/PicoDet-like: two levels, the top one upsampled by a Resize whose ``sizes`` come from
    ``Shape -> Slice -> Concat`` (ONNX shape inference loses the batch there), heads flattened with
    ``Reshape(1, C, -1)`` and ``Reshape(1, -1, k)``, concatenated into [1, anchors, k]."""
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)
    nodes = [
        helper.make_node("Conv", ["images", "w0"], ["c3"], strides=[2, 2], kernel_shape=[2, 2], name="stem"),
        helper.make_node("Conv", ["c3", "w1"], ["c4"], strides=[2, 2], kernel_shape=[2, 2], name="down"),
        helper.make_node("Shape", ["c3"], ["c3_shape"], name="neck/Shape"),
        helper.make_node("Slice", ["c3_shape", "s_start", "s_end"], ["c3_hw"], name="neck/Slice"),
        helper.make_node("Shape", ["c4"], ["c4_shape"], name="neck/Shape_1"),
        helper.make_node("Slice", ["c4_shape", "nc_start", "nc_end"], ["c4_nc"], name="neck/Slice_1"),
        helper.make_node("Concat", ["c4_nc", "c3_hw"], ["up_sizes"], axis=0, name="neck/Concat"),
        helper.make_node("Resize", ["c4", "", "", "up_sizes"], ["up"], mode="nearest", name="neck/Resize"),
        helper.make_node("Add", ["c3", "up"], ["p3"], name="neck/Add"),
        helper.make_node("Conv", ["p3", "w2"], ["h3"], kernel_shape=[1, 1], name="head0/Conv"),
        helper.make_node("Conv", ["c4", "w2"], ["h4"], kernel_shape=[1, 1], name="head1/Conv"),
        helper.make_node("Reshape", ["h3", "flat_c"], ["f3"], name="head0/Reshape"),  # [1, 6, -1]
        helper.make_node("Transpose", ["f3"], ["t3"], perm=[0, 2, 1], name="head0/Transpose"),
        helper.make_node("Reshape", ["h4", "flat_k"], ["t4"], name="head1/Reshape"),  # [1, -1, 6] (traced batch)
        helper.make_node("Concat", ["t3", "t4"], ["dets"], axis=1, name="head/Concat"),
    ]
    inits = [
        w("w0", 4, 3, 2, 2),
        w("w1", 4, 4, 2, 2),
        w("w2", 6, 4, 1, 1),
        _const("s_start", [2]),
        _const("s_end", [4]),
        _const("nc_start", [0]),
        _const("nc_end", [2]),
        _const("flat_c", [batch, 6, -1]),
        _const("flat_k", [batch, -1, 6]),
    ]
    return graph_model(
        nodes, [tensor_info("images", [batch, 3, 16, 16])], [tensor_info("dets", [batch, 80, 6])], inits, opset=opset
    )


def test_onnx_inference_loses_the_batch_at_the_resize_neck():
    """The premise: why set_batch cannot lean on ONNX shape inference alone."""
    model = resize_neck_detector()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "B"
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    dims = {vi.name: read_dims(vi) for vi in inferred.graph.value_info}
    assert dims["c4"][0] == "B" and dims["up"][0] != "B"


@pytest.mark.parametrize("size", [4, "N"])
def test_baked_head_constants_behind_a_resize_neck_are_rewritten(size):
    original = resize_neck_detector()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=size)
    assert "2 shape constants rewritten" in result.summary and "undecided" not in result.summary, result.details
    inits = {t.name: numpy_helper.to_array(t).tolist() for t in model.graph.initializer}
    assert inits["flat_c"] == ([4, 6, -1] if size == 4 else [0, 6, -1])
    assert inits["flat_k"] == ([4, -1, 6] if size == 4 else [0, -1, 6])
    assert read_dims(model.graph.output[0]) == [size, 80, 6]
    x = rand(4, 3, 16, 16)
    np.testing.assert_allclose(
        run(model, {"images": x})[0], per_sample(original, {"images": x}, ["images"])[0], rtol=1e-5, atol=1e-6
    )
    assert_declared_shapes_hold(model, {"images": x})


def test_exported_at_batch_two_rebatched_to_five():
    original = resize_neck_detector(batch=2)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = set_batch(model, size=5)
    assert "2 shape constants rewritten" in result.summary, result.details
    x = rand(5, 3, 16, 16)
    want = np.concatenate([run(original, {"images": np.concatenate([x[i : i + 1]] * 2)})[0][:1] for i in range(5)])
    np.testing.assert_allclose(run(model, {"images": x})[0], want, rtol=1e-5, atol=1e-6)


# -- branches taken by batch size, and samples mixed after a squeeze ------------------------------------------
def unbatched_branch_model():
    """PyTorch's unbatched-input handling: If batch == 1, Squeeze the batch away (then_branch), else keep it."""
    then_branch = helper.make_graph(
        [helper.make_node("Squeeze", ["h", "axes0"], ["squeezed"], name="drop_batch")],
        "then",
        [],
        [tensor_info("squeezed", None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["h"], ["kept"])], "else", [], [tensor_info("kept", None)]
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Shape", ["h"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Equal", ["batch", "one"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["y"], name="unbatched", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Sigmoid", ["y"], ["out"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 8])], [tensor_info("out", None)], constants)


def test_a_branch_the_new_batch_does_not_take_is_not_reported():
    model = unbatched_branch_model()
    result = set_batch(model, size="N")
    assert "undecided" not in result.summary, result.details
    for batch in (4, 1):
        x = rand(batch, 8)
        want = 1 / (1 + np.exp(-np.maximum(x, 0)))
        np.testing.assert_allclose(run(model, {"x": x})[0], want if batch > 1 else want[0], rtol=1e-6)


def test_a_conflict_inside_a_branch_names_the_if():
    model = unbatched_branch_model()
    model.graph.node[3].op_type = "GreaterOrEqual"  # batch >= 1: the squeezing branch is taken at every batch
    with pytest.raises(PatchError) as caught:
        set_batch(model, size=4)
    assert "Squeeze 'drop_batch' (in If 'unbatched' then_branch) cannot run at batch 4" in str(caught.value)


def squeeze_then_slice_model(head=4):
    """[1, head] -> squeeze() -> [head] at batch 1; then Slice on axis 0, which is the batch at batch N."""
    nodes = [
        helper.make_node("Squeeze", ["x"], ["s"], name="squeeze_all"),
        helper.make_node("Sigmoid", ["s"], ["p"]),
        helper.make_node("Slice", ["p", "starts", "ends", "axes"], ["first"], name="first_two"),
    ]
    constants = [
        numpy_helper.from_array(np.array([v], dtype=np.int64), n) for n, v in (("starts", 0), ("ends", 2), ("axes", 0))
    ]
    return graph_model(
        nodes, [tensor_info("x", [1, head])], [tensor_info("p", [head]), tensor_info("first", [2])], constants
    )


def test_an_axis_counting_op_after_a_squeeze_that_dropped_the_batch_is_refused():
    model = squeeze_then_slice_model()
    with pytest.raises(PatchError) as caught:
        set_batch(model, size=3)
    first = str(caught.value).splitlines()[0]
    assert "Slice 'first_two' runs, but mixes samples, at batch 3" in first and "Squeeze 'squeeze_all'" in first


def test_squeezed_output_without_axis_counting_ops_is_not_undecided():
    model = squeeze_then_slice_model()
    del model.graph.node[2]
    del model.graph.output[1]
    result = set_batch(model, size="N")
    assert "undecided" not in result.summary and read_dims(model.graph.output[0]) == ["N", 4]
    assert "1 Squeeze given axes" in result.summary, result.summary
    for batch in (3, 1):  # the declared rank holds at every batch, batch 1 included
        x = rand(batch, 4)
        np.testing.assert_allclose(run(model, {"x": x})[0], 1 / (1 + np.exp(-x)), rtol=1e-6)


# -- a batch folded behind the sequence (PyTorch attention, sequence first) --------------------------------
def sequence_first_projection():
    """[B, 30, 32] -> [30, B, 32] -> Reshape [-1, 32] -> Gemm -> Reshape [30, 1, 32] -> [B, 30, 32].

    The first Reshape folds the batch behind the 30 positions ([30*B, 32]: each row one sample's);
    its -1 is right at any batch. The second splits the rows out again: its element 1 is the batch.
    Calling element 1 of [-1, 32] "the batch" (32 -> 128) moved the batch into the features.
    """
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["t", "flat"], ["rows"], name="fold"),
        helper.make_node("Gemm", ["rows", "w", "b"], ["projected"], transB=1),
        helper.make_node("Reshape", ["projected", "back"], ["u"], name="unfold"),
        helper.make_node("Transpose", ["u"], ["y"], perm=[1, 0, 2]),
    ]
    constants = [
        numpy_helper.from_array(np.array([-1, 32], np.int64), "flat"),
        numpy_helper.from_array(np.array([30, 1, 32], np.int64), "back"),
        numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b"),
    ]
    return graph_model(nodes, [tensor_info("x", [1, 30, 32])], [tensor_info("y", [1, 30, 32])], constants)


@pytest.mark.parametrize("size", [4, "N"])
def test_a_batch_folded_behind_the_sequence_is_left_there_and_split_out_again(size):
    original = sequence_first_projection()
    model = sequence_first_projection()
    result = set_batch(model, size=size)
    lines = "\n".join(result.details)
    assert "'fold'" not in lines, lines  # [-1, 32] is right at any batch
    assert "Reshape 'unfold': element 1 is the batch" in lines, lines
    feeds = {"x": rand(4, 30, 32)}
    np.testing.assert_allclose(run(model, feeds)[0], per_sample(original, feeds, ["x"])[0], rtol=1e-5, atol=1e-5)
