"""An output nothing derives at the sizes tried (issue 34, item 5): a recognizer declares its height
symbolic but runs at one height only, so at the size set_batch tries an Add's operands disagree and
the evaluation loses every shape after it. The undecided point names where the shape was lost and the
patch that fixes it; with the height fixed, the evaluation follows the model to its custom op."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.shapes.annotations import read_dims
from patchspec.testing import patch_context
from patchspec_plugins.rename_dims import RenameDimsPatch
from patchspec_plugins.set_batch import SetBatchPatch


def recognizer() -> onnx.ModelProto:
    """x [1, 3, h, 8]: a pooled half joined on the channels with the first two rows (they fit at h = 4
    only, and no size set_batch tries finds it), pooled, flattened, then 6 -> 10 classes."""
    nodes = [
        helper.make_node("AveragePool", ["x"], ["half"], kernel_shape=[2, 1], strides=[2, 1]),
        helper.make_node("Slice", ["x", "zero", "two", "axis2"], ["top"]),
        helper.make_node("Concat", ["half", "top"], ["joined"], name="join", axis=1),
        helper.make_node("GlobalAveragePool", ["joined"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["scores"]),
        helper.make_node("Calibrate", ["scores"], ["y"], domain="acme"),  # nothing infers a custom op
    ]
    constants = [
        numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", [0]), ("two", [2]), ("axis2", [2]))
    ]
    constants.append(numpy_helper.from_array(np.ones((6, 10), np.float32), "w"))
    model = graph_model(nodes, [tensor_info("x", [1, 3, "h", 8])], [tensor_info("y", [1, 10])], constants)
    model.opset_import.append(helper.make_opsetid("acme", 1))
    return model


def apply(patch, model: onnx.ModelProto, name: str, **params: object):
    return patch.apply(model, params, patch_context(name, params))


def test_an_output_nothing_derives_names_where_the_shape_was_lost() -> None:
    model = recognizer()
    result = apply(SetBatchPatch(), model, "set_batch", size=4)
    assert not isinstance((read_dims(model.graph.output[0]) or [1])[0], int)  # the 1 was the batch: not kept
    lost = next(line for line in result.details if "nothing derives its shape" in line)
    assert "the evaluation lost it at Concat 'join'" in lost, lost
    assert "rename_dims: {tensor: INPUT, axes: {AXIS: SIZE}}" in lost, lost


def test_the_size_the_model_runs_at_settles_where_it_was_lost() -> None:
    """With the height the model runs at, the evaluation follows it to the custom op, which it cannot
    see through: the output is still undecided, but nothing was lost on the way."""
    model = recognizer()
    apply(RenameDimsPatch(), model, "rename_dims", tensor="x", axes={2: 4})
    result = apply(SetBatchPatch(), model, "set_batch", size=4)
    lost = next(line for line in result.details if "nothing derives its shape" in line)
    assert "lost it at" not in lost, lost


def test_an_output_the_evaluation_lost_everywhere_is_undecided_though_onnx_named_its_dims() -> None:
    """d [1, S1, S2] + its transpose + atoms [1, 1, S] runs only where S1 == S2 == S (chython-rxnmap's
    distance matrix): with d's axes told apart (a rename_dims from an old init) the evaluation fails at
    every point, and onnx's inference names the output's dims itself ('unk__0'). Before, nothing was
    undecided and --no-verify wrote the model."""
    model = graph_model(
        [
            helper.make_node("Transpose", ["d"], ["dt"], perm=[0, 2, 1]),
            helper.make_node("Add", ["d", "dt"], ["square"], name="square"),
            helper.make_node("Unsqueeze", ["atoms", "one"], ["row"]),
            helper.make_node("Add", ["square", "row"], ["y"], name="bias"),
        ],
        [tensor_info("d", [1, "seq_len", "seq_len"]), tensor_info("atoms", [1, "seq_len"])],
        [tensor_info("y", [1, "seq_len", "seq_len"])],
        [numpy_helper.from_array(np.array([1], np.int64), "one")],
    )
    apply(RenameDimsPatch(), model, "rename_dims", tensor="d", axes={1: "rows", 2: "cols"})
    result = apply(SetBatchPatch(), model, "set_batch", size=4, inputs={"d": 0, "atoms": 0})
    assert "undecided" in result.summary, result.summary
    assert any("output 'y'" in line and "nothing derives its shape" in line for line in result.details)
