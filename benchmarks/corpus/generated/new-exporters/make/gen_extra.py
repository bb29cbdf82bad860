"""new-exporters extra rows: ops that couple samples outside patchspec's COUPLING_OPS, and two batchable merges.
Pins: torch==2.14.1 onnx==1.23.2 (venv /tmp/probe3/venv, read-only). Seed 0."""

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import TensorProto as T
from onnx import helper as H
from onnx import numpy_helper as nh

warnings.filterwarnings("ignore")
torch.manual_seed(0)
OUT = str(Path(__file__).resolve().parents[1])  # generated/new-exporters
meta = []


def export(key, model, args, opset, batchable, why, inputs, dyn=False, extra="", outs=("y",)):
    model.eval()
    names = list(inputs)
    torch.onnx.export(
        model,
        args,
        f"{OUT}/{key}.onnx",
        input_names=names,
        output_names=list(outs),
        opset_version=opset,
        dynamo=False,
        dynamic_axes={n: {0: "batch"} for n in names + list(outs)} if dyn else None,
    )
    m = onnx.load(f"{OUT}/{key}.onnx")
    note = ", dynamic batch" if dyn else f", static batch {args[0].shape[0]}"
    meta.append(
        dict(
            key=key,
            exporter=f"TorchScript (pytorch 2.14.1, opset {opset}){note}",
            batchable=batchable,
            why=why,
            inputs=inputs,
            extra=extra,
        )
    )
    print("ok", key, sorted({n.op_type for n in m.graph.node}))


class ConvOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.c = nn.Conv1d(4, 4, 3, padding=1)

    def forward(self, x):
        h = self.fc(x)  # [B, 4]
        return self.c(h.t().unsqueeze(0)).squeeze(0).t()  # Conv1d along the batch


class GRUOverBatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = nn.GRU(6, 4)

    def forward(self, x):
        return self.g(x.unsqueeze(1))[0].squeeze(1)  # [B, 1, 6] seq-first: the batch is the time axis


class Roll(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        h = self.fc(x)
        return h + torch.roll(h, 1, 0)


class DivB(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(x) / x.size(0)


class MergeBT(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)

    def forward(self, x):  # [B, 4, 6]
        b, t, d = x.shape
        h = self.fc(x.reshape(b * t, d))  # [B*T, 5]
        h = h.view(-1, t, 5).transpose(0, 1)  # [T, B, 5]
        return h.softmax(-1).transpose(0, 1).reshape(b, -1)


x6 = torch.randn(1, 6)
export(
    "ts11_conv_over_batch_b1",
    ConvOverBatch(),
    (torch.randn(2, 6),),
    11,
    False,
    "couples samples: h.t().unsqueeze(0) then Conv1d(k=3, pad=1): the convolution slides along the batch, at batch 2",
    {"x": "B,6"},
    extra="old_batch = 2",
)
export(
    "ts11_gru_over_batch_b1",
    GRUOverBatch(),
    (x6,),
    11,
    False,
    "couples samples: x.unsqueeze(1) into a seq-first GRU: the batch is the GRU's time axis (a streaming model fed a batch)",
    {"x": "B,6"},
)
export(
    "ts11_roll_batch_dyn",
    Roll(),
    (torch.randn(2, 6),),
    11,
    False,
    "couples samples: h + torch.roll(h, 1, 0) (Slice + Concat along the batch)",
    {"x": "B,6"},
    dyn=True,
)
export(
    "ts11_roll_batch_b2",
    Roll(),
    (torch.randn(2, 6),),
    11,
    False,
    "couples samples: h + torch.roll(h, 1, 0) at batch 2",
    {"x": "B,6"},
    extra="old_batch = 2",
)
export(
    "ts11_div_batchsize_b1",
    DivB(),
    (x6,),
    11,
    True,
    "fc(x) / x.size(0) traced at a static batch 1: the exporter folds x.size(0) to a constant 1 (Div by 1), so each sample's function is fc(x)",
    {"x": "B,6"},
)
export(
    "ts11_div_batchsize_dyn",
    DivB(),
    (torch.randn(2, 6),),
    11,
    False,
    "couples samples: fc(x) / x.size(0) with dynamic_axes (Shape, Gather, Cast, Div: the batch size as a value)",
    {"x": "B,6"},
    dyn=True,
)
export(
    "ts11_merge_bt_b1",
    MergeBT(),
    (torch.randn(1, 4, 6),),
    11,
    True,
    "x.reshape(b*t, d), Linear, view(-1, t, 5).transpose(0, 1) (time-major), softmax, transpose back, reshape(b, -1)",
    {"x": "B,4,6"},
)
export(
    "ts9_merge_bt_b1",
    MergeBT(),
    (torch.randn(1, 4, 6),),
    9,
    True,
    "opset 9: the batch-time merge / time-major transpose model",
    {"x": "B,4,6"},
)

# helper: Einsum reduction over the batch that keeps the batch axis, and MaxPool along the batch
rng = np.random.default_rng(1)
W = rng.standard_normal((6, 4)).astype(np.float32)


def save(key, nodes, ins, outs, inits, why):
    m = H.make_model(H.make_graph(nodes, key, ins, outs, inits), opset_imports=[H.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, f"{OUT}/{key}.onnx")
    meta.append(
        dict(
            key=key,
            exporter="onnx.helper (onnx 1.23.2, opset 17), static batch 1",
            batchable=False,
            why=why,
            inputs={"x": "B,6"},
            extra="",
        )
    )
    print("ok", key)


vi = H.make_tensor_value_info
save(
    "h_einsum_batchsum_b1",
    [H.make_node("MatMul", ["x", "W"], ["h"]), H.make_node("Einsum", ["h", "h"], ["y"], equation="bd,cd->bd")],
    [vi("x", T.FLOAT, [1, 6])],
    [vi("y", T.FLOAT, [1, 4])],
    [nh.from_array(W, "W")],
    "couples samples: Einsum bd,cd->bd = h * sum over the batch of h (the output keeps the batch on axis 0)",
)
save(
    "h_maxpool_over_batch_b1",
    [
        H.make_node("MatMul", ["x", "W"], ["h"]),
        H.make_node("Transpose", ["h"], ["ht"], perm=[1, 0]),
        H.make_node("Unsqueeze", ["ht", "a0"], ["hu"]),
        H.make_node("MaxPool", ["hu"], ["p"], kernel_shape=[3], pads=[1, 1]),
        H.make_node("Squeeze", ["p", "a0"], ["ps"]),
        H.make_node("Transpose", ["ps"], ["y"], perm=[1, 0]),
    ],
    [vi("x", T.FLOAT, [1, 6])],
    [vi("y", T.FLOAT, [1, 4])],
    [nh.from_array(W, "W"), nh.from_array(np.array([0], np.int64), "a0")],
    "couples samples: MaxPool(k=3, pad 1) along the batch after a Transpose [B,4]->[1,4,B]",
)
Path(OUT, "make", "meta").mkdir(exist_ok=True)
Path(OUT, "make", "meta", "extra.json").write_text(json.dumps(meta, indent=1))
