"""new-exporters hand-built models (onnx.helper, and onnxscript 0.7.2 scripts) in forms exporters emit. opset 17, IR 8.
Pins: onnx==1.23.2 onnxscript==0.7.2 (venv /tmp/probe3/venv, read-only). Seeded weights (numpy seed 0)."""

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as H
from onnx import numpy_helper as nh

OUT = str(Path(__file__).resolve().parents[1])  # generated/new-exporters
rng = np.random.default_rng(0)
meta = []
F, I64, BOOL = T.FLOAT, T.INT64, T.BOOL


def c(name, arr):
    return nh.from_array(np.asarray(arr), name)


def vi(name, t, shape):
    return H.make_tensor_value_info(name, t, shape)


def save(key, nodes, inputs, outputs, inits, batchable, why, feeds, extra="", opset=17, how="onnx.helper"):
    g = H.make_graph(nodes, key, inputs, outputs, inits)
    m = H.make_model(g, opset_imports=[H.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, f"{OUT}/{key}.onnx")
    meta.append(
        dict(
            key=key,
            exporter=f"{how} (onnx 1.23.2, opset {opset}), static batch 1",
            batchable=batchable,
            why=why,
            inputs=feeds,
            extra=extra,
        )
    )
    print("ok", key)


W = rng.standard_normal((6, 4)).astype(np.float32)

# 1. If on a non-batch dim, with a Reshape baking batch 1 inside the then branch
then_g = H.make_graph(
    [H.make_node("Reshape", ["x", "shp1"], ["t_out"])],
    "then",
    [],
    [vi("t_out", F, [1, 24])],
    [c("shp1", np.array([1, 24], np.int64))],
)
else_g = H.make_graph(
    [H.make_node("Reshape", ["x", "shp2"], ["e_out"])],
    "else",
    [],
    [vi("e_out", F, [1, 24])],
    [c("shp2", np.array([1, -1], np.int64))],
)
save(
    "h_if_dim1_reshape_b1",
    [
        H.make_node("Shape", ["x"], ["s"]),
        H.make_node("Gather", ["s", "one"], ["d1"], axis=0),
        H.make_node("Greater", ["d1", "three"], ["cond"]),
        H.make_node("If", ["cond"], ["r"], then_branch=then_g, else_branch=else_g),
        H.make_node("Relu", ["r"], ["y"]),
    ],
    [vi("x", F, [1, 4, 6])],
    [vi("y", F, [1, 24])],
    [c("one", np.array(1, np.int64)), c("three", np.array(3, np.int64))],
    True,
    "If on Shape(x)[1] > 3 (a non-batch dim); the then branch is Reshape(x, [1, 24]) with batch 1 baked inside the subgraph, the else branch Reshape(x, [1, -1])",
    {"x": "B,4,6"},
)

# 2. If on Shape(x)[0] == 1 (the batch): then x*2 else x; at batch 1 the per-sample function is x*2
t2 = H.make_graph(
    [H.make_node("Mul", ["x", "two"], ["t2"])], "then", [], [vi("t2", F, [1, 6])], [c("two", np.array(2.0, np.float32))]
)
e2 = H.make_graph([H.make_node("Identity", ["x"], ["e2"])], "else", [], [vi("e2", F, [1, 6])])
save(
    "h_if_batch_eq1_b1",
    [
        H.make_node("Shape", ["x"], ["s"]),
        H.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        H.make_node("Equal", ["d0", "one"], ["cond"]),
        H.make_node("If", ["cond"], ["y"], then_branch=t2, else_branch=e2),
    ],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 6])],
    [c("zero", np.array(0, np.int64)), c("one", np.array(1, np.int64))],
    True,
    "If on Shape(x)[0] == 1 (squeeze-if-batch-1 style branch on the batch size): then x*2 else x. At batch 1 each sample's function is x*2; a re-batched model that keeps the If computes x at batch 4",
    {"x": "B,6"},
)

# 3. Loop over the batch (trip count Shape(x)[0]), per-sample Gather, MatMul, scan output stacks rows
body = H.make_graph(
    [
        H.make_node("Gather", ["x", "i"], ["row"], axis=0),
        H.make_node("MatMul", ["row", "W"], ["h"]),
        H.make_node("Tanh", ["h"], ["hr"]),
        H.make_node("Identity", ["cond_in"], ["cond_out"]),
    ],
    "body",
    [vi("i", I64, []), vi("cond_in", BOOL, [])],
    [vi("cond_out", BOOL, []), vi("hr", F, [4])],
)
save(
    "h_loop_over_batch_b1",
    [
        H.make_node("Shape", ["x"], ["s"]),
        H.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        H.make_node("Loop", ["n", "true"], ["y"], body=body),
    ],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 4])],
    [c("zero", np.array(0, np.int64)), c("true", np.array(True)), c("W", W)],
    True,
    "Loop with trip count Shape(x)[0] over the batch: the body Gathers row i from the outer x, MatMul, Tanh; the scan output stacks the rows to [B, 4] (TorchScript-scripted / tf2onnx while-loop form)",
    {"x": "B,6"},
)

# 4. Loop with a constant trip count 1 (the batch baked as the count)
save(
    "h_loop_count1_b1",
    [H.make_node("Loop", ["n1", "true"], ["y"], body=body)],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 4])],
    [c("n1", np.array(1, np.int64)), c("true", np.array(True)), c("W", W)],
    True,
    "the same per-sample Loop but with the trip count baked as a constant 1 (the batch at export), the way a traced loop over x.size(0) comes out",
    {"x": "B,6"},
)

# 5. Scan over the batch axis (no carried dependency) and 6. Scan carrying a running sum across the batch (control)
sbody = H.make_graph(
    [H.make_node("MatMul", ["xi", "W"], ["o"]), H.make_node("Identity", ["st"], ["st2"])],
    "sbody",
    [vi("st", F, [4]), vi("xi", F, [6])],
    [vi("st2", F, [4]), vi("o", F, [4])],
)
save(
    "h_scan_over_batch_b1",
    [H.make_node("Scan", ["s0", "x"], ["sf", "y"], body=sbody, num_scan_inputs=1)],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 4])],
    [c("s0", np.zeros(4, np.float32)), c("W", W)],
    True,
    "Scan over axis 0 of x [B, 6] (the batch), the body MatMul per sample with an unused state",
    {"x": "B,6"},
)
cbody = H.make_graph(
    [
        H.make_node("MatMul", ["xi", "W"], ["o0"]),
        H.make_node("Add", ["st", "o0"], ["st2"]),
        H.make_node("Identity", ["st2"], ["o"]),
    ],
    "cbody",
    [vi("st", F, [4]), vi("xi", F, [6])],
    [vi("st2", F, [4]), vi("o", F, [4])],
)
save(
    "h_scan_carry_b1",
    [H.make_node("Scan", ["s0", "x"], ["sf", "y"], body=cbody, num_scan_inputs=1)],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 4])],
    [c("s0", np.zeros(4, np.float32)), c("W", W)],
    False,
    "couples samples: Scan over the batch carrying a running sum, y[b] = sum_{j<=b} x[j] @ W (a cumulative sum across samples)",
    {"x": "B,6"},
)

# 7. SplitToSequence / SequenceConstruct / ConcatFromSequence
save(
    "h_sequence_b1",
    [
        H.make_node("SplitToSequence", ["x"], ["seq"], axis=1, keepdims=0),  # T tensors [B, 6]
        H.make_node("ConcatFromSequence", ["seq"], ["stk"], axis=2, new_axis=1),  # [B, 6, T]
        H.make_node("Relu", ["x"], ["rx"]),
        H.make_node("SequenceConstruct", ["x", "rx"], ["sq2"]),
        H.make_node("ConcatFromSequence", ["sq2"], ["cat"], axis=1),  # [B, 2T, 6]
        H.make_node("ReduceSum", ["cat", "ax1"], ["rs"], keepdims=0),  # [B, 6]
        H.make_node("ReduceMean", ["stk"], ["rm"], axes=[2], keepdims=0),  # [B, 6]
        H.make_node("Add", ["rs", "rm"], ["y"]),
    ],
    [vi("x", F, [1, 3, 6])],
    [vi("y", F, [1, 6])],
    [c("ax1", np.array([1], np.int64)), c("ax2", np.array([2], np.int64))],
    True,
    "SplitToSequence over axis 1, ConcatFromSequence(new_axis=1) stacking, SequenceConstruct(x, relu x) + ConcatFromSequence(axis=1)",
    {"x": "B,3,6"},
)

# 8. Einsum per sample and 9. Einsum Gram between samples (control)
W3 = rng.standard_normal((6, 5)).astype(np.float32)
save(
    "h_einsum_b1",
    [
        H.make_node("Einsum", ["x", "W3"], ["h"], equation="btd,de->bte"),
        H.make_node("Einsum", ["h", "h"], ["a"], equation="bte,bse->bts"),
        H.make_node("Softmax", ["a"], ["p"], axis=-1),
        H.make_node("Einsum", ["p", "h"], ["y"], equation="bts,bse->bte"),
    ],
    [vi("x", F, [1, 3, 6])],
    [vi("y", F, [1, 3, 5])],
    [c("W3", W3)],
    True,
    "Einsum attention: btd,de->bte; bte,bse->bts; softmax; bts,bse->bte",
    {"x": "B,3,6"},
)
save(
    "h_einsum_gram_b1",
    [
        H.make_node("Einsum", ["x", "W"], ["h"], equation="bd,de->be"),
        H.make_node("Einsum", ["h", "h"], ["y"], equation="be,ce->bc"),
    ],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 1])],
    [c("W", W)],
    False,
    "couples samples: Einsum be,ce->bc, the Gram matrix [B, B] between samples",
    {"x": "B,6"},
)

# 10. GatherND batch_dims=1 with an index input
save(
    "h_gathernd_bd1_b1",
    [H.make_node("GatherND", ["x", "idx"], ["y"], batch_dims=1)],
    [vi("x", F, [1, 5, 3]), vi("idx", I64, [1, 2, 1])],
    [vi("y", F, [1, 2, 3])],
    [],
    True,
    "GatherND(batch_dims=1): x [B, 5, 3], idx [B, 2, 1] per-sample row indices",
    {"x": "B,5,3", "idx": {"shape": "B,2,1", "low": 0, "high": 5}},
)

# 11. ScatterND with constant indices that carry the batch coordinate 0 (the TorchScript form of x[:, [1, 3]] = v)
save(
    "h_scatternd_batchidx_b1",
    [
        H.make_node("Mul", ["x", "two"], ["upd_src"]),
        H.make_node("GatherND", ["upd_src", "ind"], ["upd"]),
        H.make_node("ScatterND", ["x", "ind", "upd"], ["y"]),
    ],
    [vi("x", F, [1, 5])],
    [vi("y", F, [1, 5])],
    [c("ind", np.array([[0, 1], [0, 3]], np.int64)), c("two", np.array(2.0, np.float32))],
    True,
    "x[:, [1, 3]] *= 2 as exported at batch 1: GatherND and ScatterND with constant indices [[0,1],[0,3]] whose first coordinate is the batch index 0",
    {"x": "B,5"},
)

# 12. CumSum over time (per sample) and 13. CumSum over the batch (control)
save(
    "h_cumsum_time_b1",
    [H.make_node("CumSum", ["x", "a1"], ["cs"]), H.make_node("Div", ["cs", "x"], ["y"])],
    [vi("x", F, [1, 7])],
    [vi("y", F, [1, 7])],
    [c("a1", np.array(1, np.int64))],
    True,
    "CumSum over axis 1 (time) then divided by x",
    {"x": {"shape": "B,7", "low": 0.5, "high": 1.5}},
)
save(
    "h_cumsum_batch_b1",
    [H.make_node("CumSum", ["x", "a0"], ["y"])],
    [vi("x", F, [1, 7])],
    [vi("y", F, [1, 7])],
    [c("a0", np.array(0, np.int64))],
    False,
    "couples samples: CumSum over axis 0 (the batch)",
    {"x": "B,7"},
)

# 14. Range built from Shape (positions) + Expand from Shape, and 15. Range over the batch (sample index, control)
E = rng.standard_normal((8, 6)).astype(np.float32)
save(
    "h_range_expand_shape_b1",
    [
        H.make_node("Shape", ["x"], ["s"]),
        H.make_node("Gather", ["s", "one"], ["t"], axis=0),
        H.make_node("Range", ["zero", "t", "one"], ["pos"]),  # [T]
        H.make_node("Gather", ["E", "pos"], ["pe"], axis=0),  # [T, 6]
        H.make_node("Add", ["x", "pe"], ["h"]),
        H.make_node("Slice", ["s", "st0", "st1"], ["b"]),  # [B]
        H.make_node("Concat", ["b", "one_d"], ["cls_shape"], axis=0),  # [B, 1, 6]
        H.make_node("Expand", ["cls", "cls_shape"], ["clsb"]),
        H.make_node("Concat", ["clsb", "h"], ["y"], axis=1),
    ],
    [vi("x", F, [1, 4, 6])],
    [vi("y", F, [1, 5, 6])],
    [
        c("zero", np.array(0, np.int64)),
        c("one", np.array(1, np.int64)),
        c("E", E),
        c("st0", np.array([0], np.int64)),
        c("st1", np.array([1], np.int64)),
        c("one_d", np.array([1, 6], np.int64)),
        c("cls", rng.standard_normal((1, 1, 6)).astype(np.float32)),
    ],
    True,
    "positions Range(0, Shape(x)[1], 1) gathered from a table; cls token Expand to Concat(Shape(x)[0:1], [1, 6]) and Concat in front",
    {"x": "B,4,6"},
)
save(
    "h_range_batchidx_b1",
    [
        H.make_node("Shape", ["x"], ["s"]),
        H.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        H.make_node("Range", ["zero", "n", "one"], ["idx"]),
        H.make_node("Cast", ["idx"], ["fi"], to=F),
        H.make_node("Unsqueeze", ["fi", "ax1"], ["fi2"]),
        H.make_node("Add", ["x", "fi2"], ["y"]),
    ],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 6])],
    [c("zero", np.array(0, np.int64)), c("one", np.array(1, np.int64)), c("ax1", np.array([1], np.int64))],
    False,
    "couples samples: y = x + arange(B)[:, None] (Range(0, Shape(x)[0]): each sample's position in the batch)",
    {"x": "B,6"},
)

# 16. NonZero per sample used as a count: Reduce over NonZero columns -> [B] counts through a batched mask (control: the coordinate list spans the batch)
save(
    "h_nonzero_count_b1",
    [
        H.make_node("Greater", ["x", "zf"], ["m"]),
        H.make_node("NonZero", ["m"], ["nz"]),  # [2, K]
        H.make_node("Shape", ["nz"], ["ns"]),
        H.make_node("Gather", ["ns", "one"], ["k"], axis=0),
        H.make_node("Cast", ["k"], ["kf"], to=F),
        H.make_node("Add", ["x", "kf"], ["y"]),
    ],
    [vi("x", F, [1, 6])],
    [vi("y", F, [1, 6])],
    [c("zf", np.array(0.0, np.float32)), c("one", np.array(1, np.int64))],
    False,
    "couples samples: y = x + count(x > 0) over the whole batch (NonZero's [2, K] coordinate list spans every sample)",
    {"x": "B,6"},
)

# onnxscript-authored: 17. python for-loop over a batch count (Loop), 18. python if on a Shape (If)
from onnxscript import FLOAT, script
from onnxscript import opset17 as op


@script()
def os_loop(x: FLOAT[1, 6]) -> FLOAT[1, 4]:
    n = op.Gather(op.Shape(x), 0)
    acc = op.Reshape(op.Constant(value_floats=[]), op.Constant(value_ints=[0, 4]))
    for i in range(n):
        row = op.Gather(x, op.Unsqueeze(i, [0]), axis=0)  # [1, 6]
        acc = op.Concat(acc, op.Tanh(op.MatMul(row, op.Constant(value=nh.from_array(W, "w")))), axis=0)
    return acc


@script()
def os_if(x: FLOAT[1, 4, 6]) -> FLOAT[1, 6]:
    t = op.Gather(op.Shape(x), 1)
    if t > 2:
        y = op.ReduceMax(x, [1], keepdims=0)
    else:
        y = op.ReduceMean(x, axes=[1], keepdims=0)
    return op.Reshape(y, op.Constant(value_ints=[1, 6]))


for key, fn, why, feeds in (
    (
        "os_loop_concat_b1",
        os_loop,
        "onnxscript for i in range(Shape(x)[0]): a Loop over the batch whose loop-carried acc grows by Concat (Gather row, MatMul, Tanh) from an empty [0, 4]",
        {"x": "B,6"},
    ),
    (
        "os_if_reshape_b1",
        os_if,
        "onnxscript if Shape(x)[1] > 2: ReduceMax else ReduceMean over axis 1, then Reshape to a constant [1, 6] after the If",
        {"x": "B,4,6"},
    ),
):
    m = fn.to_model_proto()
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, f"{OUT}/{key}.onnx")
    meta.append(
        dict(
            key=key,
            exporter="onnxscript 0.7.2 @script (opset 17), static batch 1",
            batchable=True,
            why=why,
            inputs=feeds,
            extra="",
        )
    )
    print("ok", key)

Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "hand.json").write_text(json.dumps(meta, indent=1))
