"""A Range that counts the exported batch (issue 34, item 6): ``torch.arange(B)`` exported at batch 1 is
``Range(0, 1, 1)`` of constants. Met with the batch by a Concat (advanced indexing
``x[arange(B), lengths - 1]``) or by arithmetic (a flat index ``arange(B) * T + lengths - 1``), its
limit is rewritten; where nothing can count the new batch, the model is refused, never written wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.errors import PatchError
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

T, D = 5, 3


def set_batch(model: onnx.ModelProto, **params: object):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def ints(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def counted(kind: str, batch: int | str = 1, limit: int = 1) -> onnx.ModelProto:
    """x [batch, T, D], lengths [batch] -> the row ``lengths - 1`` of each sample, indexed through an
    arange over the batch made by ``Range(0, limit, 1)``: ``kind`` "concat" (GatherND coordinates),
    "flat" (a flat Gather index), "baked" (the per-sample row is baked too: an Expand of [1, 1])."""
    rows = [helper.make_node("Range", ["zero", "limit", "one"], ["rows"], name="arange")]
    last = [helper.make_node("Sub", ["lengths", "one"], ["last"], name="last")]
    if kind == "flat":
        nodes = [
            helper.make_node("Mul", ["rows", "steps"], ["base"], name="base"),
            helper.make_node("Add", ["base", "last"], ["flat"], name="flat"),
            helper.make_node("Reshape", ["x", "rows_shape"], ["table"], name="table"),
            helper.make_node("Gather", ["table", "flat"], ["y"], axis=0, name="pick"),
        ]
    else:
        if kind == "baked":
            last = [helper.make_node("Expand", ["four", "one_one"], ["last2"], name="last")]
        else:
            last.append(helper.make_node("Unsqueeze", ["last", "axis1"], ["last2"], name="last2"))
        nodes = [
            helper.make_node("Unsqueeze", ["rows", "axis1"], ["rows2"], name="rows2"),
            helper.make_node("Concat", ["rows2", "last2"], ["coordinates"], axis=1, name="coordinates"),
            helper.make_node("GatherND", ["x", "coordinates"], ["y"], name="pick"),
        ]
    constants = [ints("zero", 0), ints("limit", limit), ints("one", 1), ints("axis1", [1]), ints("steps", T)]
    constants += [ints("rows_shape", [-1, D]), ints("four", [[T - 1]]), ints("one_one", [1, 1])]
    used = {name for node in rows + last + nodes for name in node.input}
    inputs = [tensor_info("x", [batch, T, D])]
    if "lengths" in used:
        inputs.append(tensor_info("lengths", [batch], TensorProto.INT64))
    initializers = [c for c in constants if c.name in used]
    return graph_model(rows + last + nodes, inputs, [tensor_info("y", [batch, D])], initializers)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def feeds(batch: int) -> dict[str, np.ndarray]:
    x = np.random.default_rng(batch).standard_normal((batch, T, D)).astype(np.float32)
    return {"x": x, "lengths": np.array([5, 2, 3, 1][:batch], np.int64)}


@pytest.mark.parametrize("kind", ["concat", "flat"])
@pytest.mark.parametrize("batch", [1, "N"], ids=["static", "dynamic"])
def test_a_range_that_counts_the_batch_has_its_limit_rewritten(kind: str, batch: int | str) -> None:
    original, patched = counted(kind, batch), counted(kind, batch)
    result = set_batch(patched, size=4)
    assert "1 shape constant rewritten" in result.summary, result.summary
    met = "Concat 'coordinates'" if kind == "concat" else "Add 'flat'"
    assert any(
        f"Range 'arange': its limit counts the batch (1 -> 4), met with the batch by {met}" in d for d in result.details
    )
    given = feeds(4)
    per_sample = np.concatenate([run(original, {k: v[i : i + 1] for k, v in given.items()}) for i in range(4)])
    np.testing.assert_array_equal(run(patched, given), per_sample)  # every sample its own row, not sample 0's


def test_a_range_that_is_not_the_batch_is_left_alone() -> None:
    """A Range of one over a channel of 1, added to the data: nothing ties it to the batch axis."""
    nodes = [
        helper.make_node("Range", ["zero", "limit", "one"], ["r"], name="arange"),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "rf"], ["y"]),
    ]
    constants = [ints("zero", 0), ints("limit", 1), ints("one", 1)]
    model = graph_model(nodes, [tensor_info("x", [1, T, 1])], [tensor_info("y", [1, T, 1])], constants)
    result = set_batch(model, size=4)
    assert "0 shape constants rewritten" in result.summary, result.summary
    assert numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "limit")) == 1
    assert run(model, {"x": np.ones((4, T, 1), np.float32)}).shape == (4, T, 1)


def test_a_symbolic_batch_leaves_the_range_undecided(tmp_path, run_cli) -> None:
    onnx.save(counted("concat"), str(tmp_path / "m.onnx"))
    (tmp_path / "spec.yaml").write_text("patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: N\n")
    result = run_cli("apply", tmp_path / "spec.yaml", "--no-verify", cwd=tmp_path)
    assert result.exit_code == 4, result.output
    assert "Range 'arange' counts the exported batch (0 to 1 by 1), and Concat 'coordinates' meets it" in result.output
    assert not (tmp_path / "out.onnx").exists()


def test_coordinates_that_never_follow_the_batch_are_refused() -> None:
    """Both halves of the coordinates are baked: the GatherND reads as many samples as the export saw
    at any batch. Nothing proves which constant counts the batch: refused, never written with [1, D]."""
    with pytest.raises(PatchError, match=r"GatherND 'pick' reads through indices 'coordinates' of shape \[1, 2\]"):
        set_batch(counted("baked"), size=4)


def folded(token: list[list[int]], read_as: str) -> onnx.ModelProto:
    """An integer constant ``token`` [1, 1] joined on axis 1 with per-sample ids: read as GatherND
    coordinates into x (a folded arange) or as ids into an embedding table (a start token)."""
    nodes = [helper.make_node("Unsqueeze", ["ids", "axis1"], ["ids2"])]
    nodes.append(helper.make_node("Concat", ["token", "ids2"], ["joined"], axis=1, name="join"))
    if read_as == "coordinates":
        nodes.append(helper.make_node("GatherND", ["x", "joined"], ["y"]))
        inputs, output = [tensor_info("x", [1, T, D])], tensor_info("y", [1, D])
    else:
        nodes.append(helper.make_node("Gather", ["table", "joined"], ["y"], axis=0))
        inputs, output = [], tensor_info("y", [1, 2, D])
    table = numpy_helper.from_array(np.arange(10 * D, dtype=np.float32).reshape(10, D), "table")
    constants = [ints("token", token), ints("axis1", [1]), table]
    used = {name for node in nodes for name in node.input}
    inputs.append(tensor_info("ids", [1], TensorProto.INT64))
    return graph_model(nodes, inputs, [output], [c for c in constants if c.name in used])


def test_a_folded_arange_that_is_each_samples_coordinate_counts_the_samples() -> None:
    """[[0]] joined as the first column of GatherND coordinates into x's batch axis: at batch 4 it is
    [[0], [1], [2], [3]] (repeating it would make every sample read sample 0)."""
    original, patched = folded([[0]], "coordinates"), folded([[0]], "coordinates")
    result = set_batch(patched, size=4)
    assert "repeated" not in result.summary, result.summary
    assert any("is the coordinate of each sample" in line and "counting 4" in line for line in result.details)
    x = np.random.default_rng(1).standard_normal((4, T, D)).astype(np.float32)
    ids = np.array([4, 0, 2, 1], np.int64)
    expected = np.concatenate([run(original, {"x": x[i : i + 1], "ids": ids[i : i + 1]}) for i in range(4)])
    np.testing.assert_array_equal(run(patched, {"x": x, "ids": ids}), expected)


def test_a_folded_offset_into_the_batch_that_is_not_its_coordinate_is_undecided() -> None:
    """[[1]] is no count from 0: it cannot be an arange over the batch, and repeating it is a guess."""
    result = set_batch(folded([[1]], "coordinates"), size=4)
    assert any("an integer constant of one sample's rows" in line for line in result.details), result.details


def test_a_start_token_is_repeated() -> None:
    start = folded([[0]], "ids")
    tokens = set_batch(start, size=4)
    assert "1 input repeated to the batch" in tokens.summary, tokens.summary
    got = run(start, {"ids": np.array([1, 2, 3, 4], np.int64)})
    np.testing.assert_array_equal(got[:, 0], np.tile(np.arange(D, dtype=np.float32), (4, 1)))  # row 0, each sample
    np.testing.assert_array_equal(got[:, 1, 0], np.array([1, 2, 3, 4]) * D)


GENERATED = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "generated" / "torch"


def per_sample(original: Path, patched: Path, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The patched model's output at ``batch`` and the original's, run one sample at a time."""
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 5, 16)).astype(np.float32)
    lengths = rng.integers(1, 6, size=(batch,)).astype(np.int64)
    one = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    many = ort.InferenceSession(str(patched), providers=["CPUExecutionProvider"])
    expected = [one.run(None, {"x": x[i : i + 1], "lengths": lengths[i : i + 1]})[0] for i in range(batch)]
    return many.run(None, {"x": x, "lengths": lengths})[0], np.concatenate(expected)


@pytest.mark.parametrize("batch", [4, "N"])
@pytest.mark.parametrize("stem", ["arange_pool_ts", "arange_flat_ts", "arange_flat_dynamo", "arange_pool_dynamo"])
def test_a_folded_arange_from_a_real_exporter_is_counted_at_the_new_batch(
    tmp_path, run_cli, stem: str, batch: int | str
) -> None:
    """torch.onnx.export of ``h[arange(B), lengths - 1]`` (and its flat form) at batch 1: both exporters
    fold arange(B) into a constant [0] (TorchScript keeps ``* T`` from a Shape, a flat index folds the step
    too). At batch 4 the model ran and every sample read the first one's rows. The step is found from
    the rows the indices read; with --no-verify the model written is right sample by sample."""
    shutil.copy(GENERATED / f"{stem}.onnx", tmp_path / "m.onnx")
    spec = f"patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: {batch}\n"
    (tmp_path / "spec.yaml").write_text(spec)
    result = run_cli("apply", tmp_path / "spec.yaml", "--no-verify", "-v", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "folded at the exported batch" in result.output or "folded at batch 1" in result.output, result.output
    got, expected = per_sample(tmp_path / "m.onnx", tmp_path / "out.onnx", 4 if batch == 4 else 3)
    np.testing.assert_array_equal(got, expected)


def test_dynamos_folded_coordinate_counts_the_samples_and_verifies(tmp_path, run_cli) -> None:
    """torch dynamo writes ``h[arange(B), lengths - 1]`` as a GatherND whose first coordinate column is a
    constant [[0]]: counted to the batch, the model is right per sample (the run verifier compares)."""
    shutil.copy(GENERATED / "arange_pool_dynamo.onnx", tmp_path / "m.onnx")
    (tmp_path / "spec.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: 4\nverify:\n  - run:\n"
        "      compare: {against: original, split_batch: true}\n"
        "      cases: [{inputs: {lengths: {value: [5, 2, 3, 1]}}}]\n"
    )
    result = run_cli("apply", tmp_path / "spec.yaml", "-v", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "counting 4" in result.output and "passed" in result.output, result.output


def flat_index(merged: str, order: str = "rows first", dtype: int = TensorProto.INT64) -> onnx.ModelProto:
    """``x.reshape(B * T, D)[[0] + lengths - 1]`` at batch 1: x's rows merged batch first (``[1, T, D]``)
    or sequence first (``[T, 1, D]``), the merged rows computed before the indices or after them."""
    x_dims = [1, T, D] if merged == "batch first" else [T, 1, D]
    index = [
        helper.make_node("Add", ["offset", "lengths"], ["shifted"], name="offset"),
        helper.make_node("Sub", ["shifted", "one"], ["flat"], name="last"),
    ]
    rows = [helper.make_node("Reshape", ["x", "rows_shape"], ["table"], name="table")]
    pick = [helper.make_node("Gather", ["table", "flat"], ["y"], axis=0, name="pick")]
    nodes = (rows + index if order == "rows first" else index + rows) + pick
    constants = [
        numpy_helper.from_array(np.array([0], helper.tensor_dtype_to_np_dtype(dtype)), "offset"),
        numpy_helper.from_array(np.array(1, helper.tensor_dtype_to_np_dtype(dtype)), "one"),
        ints("rows_shape", [T, D]),
    ]
    inputs = [tensor_info("x", x_dims), tensor_info("lengths", [1], dtype)]
    return graph_model(nodes, inputs, [tensor_info("y", [1, D])], constants)


@pytest.mark.parametrize("batch", [4, "N"])
@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.INT32])
def test_a_folded_offset_into_rows_merged_batch_first_counts_t_rows_per_sample(batch: int | str, dtype: int) -> None:
    """The [0] was arange(B) * T: the rows hold T per sample, one sample after another."""
    original, patched = flat_index("batch first", dtype=dtype), flat_index("batch first", dtype=dtype)
    result = set_batch(patched, size=batch)
    assert any("counts arange(" in line and f") * {T}" in line for line in result.details), result.details
    x = np.random.default_rng(2).standard_normal((3, T, D)).astype(np.float32)
    lengths = np.array([5, 1, 3], helper.tensor_dtype_to_np_dtype(dtype))
    if batch == 4:
        x, lengths = np.concatenate([x, x[:1]]), np.concatenate([lengths, lengths[:1]])
    expected = np.concatenate(
        [run(original, {"x": x[i : i + 1], "lengths": lengths[i : i + 1]}) for i in range(len(x))]
    )
    np.testing.assert_array_equal(run(patched, {"x": x, "lengths": lengths}), expected)


@pytest.mark.parametrize(("merged", "order"), [("sequence first", "rows first"), ("batch first", "index first")])
def test_a_folded_offset_whose_step_is_not_found_is_undecided(merged: str, order: str) -> None:
    """Rows merged sequence first hold no sample's rows together (the step is not T); rows computed after
    the indices are not known when the index is judged: both undecided, nothing guessed."""
    axes = {"x": 0 if merged == "batch first" else 1, "lengths": 0}
    result = set_batch(flat_index(merged, order), size=4, inputs=axes)
    assert any("Add 'offset' adds 'offset' ([0]), one element per sample" in line for line in result.details)
    assert not any("counts arange(" in line for line in result.details), result.details


def test_a_constant_offset_added_to_ids_into_a_table_of_weights_is_left_alone() -> None:
    """ids + [0] into an embedding table: the table is a weight, not the batch; nothing to decide."""
    nodes = [
        helper.make_node("Add", ["offset", "ids"], ["shifted"], name="offset"),
        helper.make_node("Gather", ["table", "shifted"], ["y"], axis=0, name="embed"),
    ]
    table = numpy_helper.from_array(np.ones((10, D), np.float32), "table")
    model = graph_model(
        nodes,
        [tensor_info("ids", [1, T], TensorProto.INT64)],
        [tensor_info("y", [1, T, D])],
        [ints("offset", [0]), table],
    )
    result = set_batch(model, size=4)
    assert not any("undecided" in line for line in result.details), result.details
