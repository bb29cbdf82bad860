"""A torch-dynamo-style attention block, sequence first, exported at batch 1 with a dynamic sequence.

Every Reshape's shape is a Concat of small pieces: the sequence length from ``Shape`` and constants.
The batch is baked into the pieces: ``[1]`` (shared by two Concats), heads x batch ``[6]``, and the
sequence x batch of the flattened ``[L, 192]``, where at batch 1 the piece is the sequence alone.
"""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info

EMBED, HEADS = 192, 6


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def dynamo_attention_model(batch=1):
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((EMBED, 3 * EMBED)) / 14).astype(np.float32), "w_qkv"),
        numpy_helper.from_array((rng.standard_normal((EMBED, EMBED)) / 14).astype(np.float32), "w_out"),
    ]
    pieces = [
        ints("zero", 0),
        ints("axes0", [0]),
        ints("one", [1]),
        ints("three", [3]),
        ints("embed", [EMBED]),
        ints("heads_x_batch", [HEADS * batch]),
        ints("head_dim", [EMBED // HEADS]),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Gather", ["x_shape", "zero"], ["seq"]),
        helper.make_node("Unsqueeze", ["seq", "axes0"], ["seq1"]),
        helper.make_node("MatMul", ["x", "w_qkv"], ["qkv"]),
        helper.make_node("Concat", ["seq1", "one", "three", "embed"], ["qkv_shape"], axis=0),
        helper.make_node("Reshape", ["qkv", "qkv_shape"], ["qkv4"], name="unflatten_qkv"),
        helper.make_node("Gather", ["qkv4", "zero"], ["q"], axis=2),
        helper.make_node("Concat", ["seq1", "heads_x_batch", "head_dim"], ["heads_shape"], axis=0),
        helper.make_node("Reshape", ["q", "heads_shape"], ["qh"], name="split_heads"),
        helper.make_node("Transpose", ["qh"], ["qt"], perm=[1, 0, 2]),
        helper.make_node("Softmax", ["qt"], ["attn"], axis=-1),
        helper.make_node("Transpose", ["attn"], ["back"], perm=[1, 0, 2]),
        helper.make_node("Concat", ["seq1", "embed"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["back", "flat_shape"], ["flat"], name="merge_heads"),
        helper.make_node("MatMul", ["flat", "w_out"], ["o"]),
        helper.make_node("Concat", ["seq1", "one", "embed"], ["out_shape"], axis=0),
        helper.make_node("Reshape", ["o", "out_shape"], ["y"], name="unflatten_out"),
    ]
    return graph_model(
        nodes, [tensor_info("x", ["seq", batch, EMBED])], [tensor_info("y", ["seq", batch, EMBED])], weights + pieces
    )
