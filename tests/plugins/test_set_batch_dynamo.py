"""Batch baked into shapes that a Concat builds, as torch dynamo exports attention (issue 24, item 2).

The Reshape shapes are Concats of pieces: ``[1]`` shared by two Concats (each use gets its own
copy), heads x batch ``[6]``, and the ``L`` of ``[L, 192]`` that is sequence x batch (computed from
``Shape``: the shape becomes the constant ``[-1, 192]``, which holds at every sequence length).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from dynamo_attention import dynamo_attention_model
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.errors import PatchError
from patchspec.testing import patch_context
from patchspec_plugins.set_batch import SetBatchPatch


def spec_text(size, cases):
    runs = [{"inputs": {"x": shape}} for shape in cases]
    compare = {"against": "original", "split_batch": {"inputs": {"x": 1}, "outputs": {"y": 1}}}
    return (
        "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\n"
        f"patches:\n  - set_batch: {json.dumps({'size': size, 'inputs': {'x': 1}})}\n"
        f"verify:\n  - run: {json.dumps({'cases': runs, 'compare': compare})}\n"
    )


@pytest.mark.parametrize(
    ("size", "cases"),
    [(4, [[5, 4, 192], [9, 4, 192]]), ("N", [[5, 4, 192], [7, 3, 192]])],
    ids=["static4", "symbolicN"],
)
def test_attention_with_concat_built_shapes_matches_the_original_per_sample(tmp_path, run_cli, size, cases):
    onnx.save(dynamo_attention_model(), tmp_path / "m.onnx")
    result = run_cli("apply", write_spec(tmp_path, spec_text(size, cases)), "-v")
    assert result.exit_code == 0, result.output
    assert "undecided" not in result.output and "4 shape constants rewritten" in result.output, result.output
    assert "new initializer 'one_batch_" in result.output  # the shared [1] is copied for one of its uses
    assert "'merge_heads_shape_batch_" in result.output and "[-1, 192]" in result.output


def set_batch(model, **params):
    return SetBatchPatch().apply(model, params, patch_context("set_batch", params))


def test_a_computed_shape_is_never_called_constant_nor_given_a_replace_initializer_line():
    """Exported at batch 2, [L, 2, 6] -> Concat(L, [3], [4]) mixes the samples; its shape is computed."""
    pieces = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in [("zero", 0), ("ax", [0]), ("three", [3]), ("four", [4])]
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["seq"]),
        helper.make_node("Unsqueeze", ["seq", "ax"], ["seq1"]),
        helper.make_node("Concat", ["seq1", "three", "four"], ["shape"], axis=0, name="build_shape"),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="regroup"),
    ]
    model = graph_model(nodes, [tensor_info("x", ["L", 2, 6])], [tensor_info("y", ["L", 3, 4])], pieces)
    with pytest.raises(PatchError) as caught:
        set_batch(model, size=4, inputs={"x": 1})
    text = str(caught.value)
    assert (
        "Reshape 'regroup' cannot run at batch 4 with its shape [128, 3, 4] (computed by Concat 'build_shape'" in text
    )
    assert "constant shape" not in text and "- replace_initializer:" not in text
