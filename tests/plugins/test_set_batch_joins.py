"""A Concat that meets a tensor made at the exported batch (issue 34, item 6): a vision transformer's
class token ``cls.expand(1, -1, -1)``, a Tile by ``[1, 1, 1]``, a ConstantOfShape pad ``[1, 1, D]``,
joined with the patches ``[B, P, D]``. set_batch refused these ("a constant upstream probably holds the
old batch 1"); it now rewrites that constant, and says what it cannot settle."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch

D, P = 8, 5


def set_batch(model: onnx.ModelProto, **params: object):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def with_token(maker: str, batch: int | str = 1) -> onnx.ModelProto:
    """x [batch, P, D] -> Concat([token, x], axis 1): the token made by ``maker`` at batch 1."""
    token = numpy_helper.from_array(np.arange(D, dtype=np.float32).reshape(1, 1, D), "cls")
    if maker == "Expand":
        made = [helper.make_node("Expand", ["cls", "shape"], ["token"], name="expand_cls")]
        inits = [token, numpy_helper.from_array(np.array([1, 1, D], np.int64), "shape")]
    elif maker == "Tile":
        made = [helper.make_node("Tile", ["cls", "repeats"], ["token"], name="tile_cls")]
        inits = [token, numpy_helper.from_array(np.array([1, 1, 1], np.int64), "repeats")]
    else:
        pad = numpy_helper.from_array(np.array([0.5], np.float32))
        made = [helper.make_node("ConstantOfShape", ["shape"], ["token"], value=pad, name="pad")]
        inits = [numpy_helper.from_array(np.array([1, 1, D], np.int64), "shape")]
    nodes = [*made, helper.make_node("Concat", ["token", "x"], ["y"], axis=1, name="prepend")]
    return graph_model(nodes, [tensor_info("x", [batch, P, D])], [tensor_info("y", [batch, P + 1, D])], inits)


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("maker", ["Expand", "Tile", "ConstantOfShape"])
@pytest.mark.parametrize("batch", [1, "N"], ids=["static", "dynamic"])
def test_a_token_made_at_the_exported_batch_is_rewritten(maker: str, batch: int | str) -> None:
    original = with_token(maker, batch)
    patched = with_token(maker, batch)
    result = set_batch(patched, size=4)
    assert "1 shape constant rewritten" in result.summary, result.summary
    assert any("element 0 is the batch (1 -> 4), joined by Concat 'prepend'" in line for line in result.details)
    x = np.random.default_rng(0).standard_normal((4, P, D)).astype(np.float32)
    per_sample = np.concatenate([run(original, x[i : i + 1]) for i in range(4)])
    np.testing.assert_array_equal(run(patched, x), per_sample)


@pytest.mark.parametrize("maker", ["Expand", "Tile", "ConstantOfShape"])
def test_at_a_symbolic_batch_a_token_made_from_constants_is_repeated(tmp_path, run_cli, maker: str) -> None:
    """No constant can say a symbolic batch; the token is made from constants alone (one sample's rows),
    so a Tile by the batch computed at run time repeats it, and --no-verify writes a model right at 3."""
    onnx.save(with_token(maker), str(tmp_path / "m.onnx"))
    (tmp_path / "spec.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: {size: batch}\n"
    )
    result = run_cli("apply", tmp_path / "spec.yaml", "--no-verify", "-v", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "repeated dim(x, 0) times" in result.output, result.output
    x = np.random.default_rng(3).standard_normal((3, P, D)).astype(np.float32)
    per_sample = np.concatenate([run(with_token(maker), x[i : i + 1]) for i in range(3)])
    np.testing.assert_array_equal(run(onnx.load(tmp_path / "out.onnx"), x), per_sample)


def test_a_token_made_from_an_input_at_a_symbolic_batch_is_undecided(tmp_path, run_cli) -> None:
    """An Expand whose data is computed from the input (sample 0's first row) cannot be repeated."""
    model = with_token("Expand")
    model.graph.node.insert(0, helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0, name="peak"))
    model.graph.node.insert(1, helper.make_node("Mul", ["cls", "peak"], ["scaled"], name="scale"))
    model.graph.node[2].input[0] = "scaled"
    onnx.save(model, str(tmp_path / "m.onnx"))
    (tmp_path / "spec.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches:\n  - set_batch: {size: batch}\n"
    )
    result = run_cli("apply", tmp_path / "spec.yaml", "--no-verify", cwd=tmp_path)
    assert result.exit_code == 4, result.output
    assert not (tmp_path / "out.onnx").exists()


def folded_token(from_input: bool = False) -> onnx.ModelProto:
    """The exporter folded ``cls.expand(1, -1, -1)`` into the constant [1, 1, D]; ``from_input``: the
    token is sample 0's first row instead (Gather index 0 on the batch, then a Slice), which repeating
    would give every sample."""
    if from_input:
        index = numpy_helper.from_array(np.array([0], np.int64), "zero")
        bounds = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("s", [0]), ("e", [1]), ("a", [1]))]
        nodes = [
            helper.make_node("Gather", ["x", "zero"], ["sample0"], axis=0, name="sample_0"),
            helper.make_node("Slice", ["sample0", "s", "e", "a"], ["cls"], name="first_row"),
        ]
        inits = [index, *bounds]
    else:
        nodes, inits = [], [numpy_helper.from_array(np.arange(D, dtype=np.float32).reshape(1, 1, D), "cls")]
    nodes.append(helper.make_node("Concat", ["cls", "x"], ["y"], axis=1, name="prepend"))
    return graph_model(nodes, [tensor_info("x", [1, P, D])], [tensor_info("y", [1, P + 1, D])], inits)


def test_a_token_folded_to_a_constant_is_repeated_to_the_batch() -> None:
    original, patched = folded_token(), folded_token()
    result = set_batch(patched, size=4)
    assert "1 input repeated to the batch" in result.summary, result.summary
    assert any("Tile 'cls_batch_4' [4, 1, 1]" in line for line in result.details), result.details
    onnx.checker.check_model(patched, full_check=True)
    x = np.random.default_rng(0).standard_normal((4, P, D)).astype(np.float32)
    per_sample = np.concatenate([run(original, x[i : i + 1]) for i in range(4)])
    np.testing.assert_array_equal(run(patched, x), per_sample)


def test_one_sample_s_rows_computed_from_the_input_are_not_repeated() -> None:
    """Repeating sample 0's row would be wrong for every other sample: set_batch refuses instead."""
    with pytest.raises(Exception, match="Gather 'sample_0'") as refused:
        set_batch(folded_token(from_input=True), size=4)
    assert "Tile" not in str(refused.value)
