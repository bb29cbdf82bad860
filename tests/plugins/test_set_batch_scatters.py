"""A scatter or gather into a tensor of one sample made at the exported batch: ``torch.zeros(B, 5)
.scatter_(1, label, 1.0)`` (a one-hot) traced at batch 1 scatters into a constant ``[1, 5]``. set_batch
wrote such models, and onnxruntime refused them at batch 4; the data (and updates) are now made for
the new batch, as a Concat's class token is. Also the class token ``cls.expand(B, -1, -1)`` whose
Expand shape TorchScript computes from constants: no constant says the batch, and a Tile repeats it."""

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

GENERATED = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "generated" / "torch"


def set_batch(model: onnx.ModelProto, **params: object):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def per_sample(original: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    batch = len(next(iter(feeds.values())))
    return np.concatenate([run(original, {k: v[i : i + 1] for k, v in feeds.items()}) for i in range(batch)])


def export_feeds(stem: str, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    if stem.startswith("one_hot"):
        return {"label": rng.integers(0, 5, size=(batch,)).astype(np.int64)}
    return {"x": rng.standard_normal((batch, 4, 8)).astype(np.float32)}


@pytest.mark.parametrize("size", [4, "N"])
@pytest.mark.parametrize(
    "stem", ["one_hot_scatter_ts", "one_hot_scatter_dynamo", "cls_token_expand_ts", "cls_token_expand_dynamo"]
)
def test_a_real_export_of_one_samples_constant_is_right_at_the_new_batch(tmp_path, run_cli, stem, size) -> None:
    """Written with --no-verify, the model passes onnx's checker (its declarations follow the batch) and
    is right sample by sample."""
    shutil.copy(GENERATED / f"{stem}.onnx", tmp_path / "m.onnx")
    spec = f"patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: {size}\nverify:\n  - check: {{}}\n"
    (tmp_path / "spec.yaml").write_text(spec)
    result = run_cli("apply", tmp_path / "spec.yaml", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    feeds = export_feeds(stem, 4 if size == 4 else 3)
    expected = per_sample(str(tmp_path / "m.onnx"), feeds)
    np.testing.assert_allclose(run(str(tmp_path / "out.onnx"), feeds), expected, rtol=1e-6, atol=1e-6)


def scatter(op: str, axis: int = 1, data_from_input: bool = False) -> onnx.ModelProto:
    """label [1] -> Reshape [-1, 1] -> op(data [1, 5], label, updates [1, 1]) along ``axis``; data a constant
    (zeros), or computed from x [1, 5] (``data_from_input``)."""
    nodes = [helper.make_node("Reshape", ["label", "column"], ["index"], name="column")]
    constants = [numpy_helper.from_array(np.array([-1, 1], np.int64), "column")]
    inputs = [tensor_info("label", [1], TensorProto.INT64)]
    if data_from_input:
        nodes.append(helper.make_node("ReduceMax", ["x"], ["data"], axes=[0], keepdims=1, name="peak"))
        inputs.append(tensor_info("x", [1, 5]))
    else:
        constants.append(numpy_helper.from_array(np.arange(5, dtype=np.float32).reshape(1, 5), "data"))
    if op == "ScatterElements":
        constants.append(numpy_helper.from_array(np.full((1, 1), 9.0, np.float32), "updates"))
        nodes.append(helper.make_node(op, ["data", "index", "updates"], ["y"], axis=axis, name="put"))
    else:
        nodes.append(helper.make_node(op, ["data", "index"], ["y"], axis=axis, name="put"))
    out = [1, 5] if op == "ScatterElements" else [1, 1]
    return graph_model(nodes, inputs, [tensor_info("y", out)], constants, opset=13)


@pytest.mark.parametrize("size", [4, "N"])
@pytest.mark.parametrize("op", ["ScatterElements", "GatherElements"])
def test_a_constant_of_one_sample_read_with_per_sample_indices_is_repeated(op: str, size: int | str) -> None:
    original, patched = scatter(op), scatter(op)
    result = set_batch(patched, size=size)
    assert any("holds one sample's rows; repeated" in line for line in result.details), result.details
    feeds = {"label": np.array([4, 0, 2, 3][: 4 if size == 4 else 3], np.int64)}
    np.testing.assert_array_equal(run(patched, feeds), per_sample(original, feeds))


def test_a_scatter_along_the_batch_is_not_repeated() -> None:
    """Along axis 0 the indices address samples: no tile. Every sample's label lands in the one row of
    the output, which has that one row at every batch: refused (before, written untiled)."""
    with pytest.raises(PatchError, match="no output follows the batch: 'y' \\[1, 5\\] keeps its shape") as raised:
        set_batch(scatter("ScatterElements", axis=0), size=4)
    assert "holds one sample's rows; repeated" not in str(raised.value)


def test_data_of_one_sample_computed_from_an_input_is_undecided() -> None:
    """A ReduceMax over the batch makes [1, 5] from x: repeating it would be a guess."""
    result = set_batch(scatter("ScatterElements", data_from_input=True), size=4, inputs={"label": 0, "x": 0})
    assert not any("holds one sample's rows; repeated" in line for line in result.details), result.details
    assert any("undecided" in line or "couples" in line for line in result.details), result.details
